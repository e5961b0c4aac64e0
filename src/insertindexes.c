/*-------------------------------------------------------------------------
 *
 * insertindexes.c
 *	  The indexes an INSERT into a stream table opens: not the stream
 *	  column's "seq > 0" indexes, which none of its rows can enter.
 *
 * An INSERT stores every row of a stream table with the placeholder 0 in
 * the stream column; the capture index records it, and the commit writes
 * the number and gives the row its entry in each index on the column
 * (commit.c).  Such an index (the stream's unique index, a group's slot
 * index) says "seq > 0", so the row gets no entry from the INSERT: the
 * executor opens and locks the index, builds its information, copies and
 * prepares its predicate, tests the row against it, and closes it again,
 * for nothing: the largest cost of the statement that a table numbered by
 * a sequence does not pay (see doc/performance.md).
 *
 * So, once the executor has set up an INSERT into a stream table, an
 * executor hook opens the table's indexes as the INSERT would at its first
 * row (ExecInsert, ExecOpenIndices), but for those whose predicate is
 * "seq > 0" on the stream column (the capture index's first column), and
 * marks the capture index's information so that it refuses every row that
 * comes with a number, whatever else the session's state would let
 * through: a row that would enter a "seq > 0" index is refused, so that
 * the indexes left out miss nothing.  It does so only when every way a
 * row with a number is let in (capture.c) is closed as the statement
 * starts, and cannot open while it runs: the session in origin mode, the
 * table in a stream, the guard trigger enabled (ALTER TABLE is refused on
 * a table a statement of the session uses); only session_replication_role
 * can change during the statement, and a numbered row that comes then is
 * refused with its own error.
 *
 * The indexes left out are looked at, as the statement starts, without a
 * lock of their own, which is safe for what is read: whether an index is
 * of the stream column with "seq > 0" cannot change while the index
 * exists, and no other session can drop it while the INSERT holds its
 * lock on the table (DROP INDEX takes a lock that conflicts with it, DROP
 * INDEX CONCURRENTLY waits for it).  Unlocked, they take DDL that locks
 * only the index while the INSERT runs (ALTER INDEX ... SET TABLESPACE
 * from another session; REINDEX, DROP INDEX from a function the INSERT
 * calls): the statement does not use them again, and the commit locks
 * the indexes the table has then.
 *
 * The capture index is used without a lock of its own, for the same
 * reason: it stores nothing (its insert records the row's TID in the
 * transaction's memory), so a lock of it would protect nothing but its
 * existence, which the table's lock keeps (another session's DROP INDEX,
 * REINDEX and their CONCURRENTLY forms lock the table or wait for its
 * lockers; this session's are refused, the index being in use).  Taking
 * and releasing the lock were most of what the capture index cost an
 * INSERT.  The executor would release a lock of every index it closes, so
 * an ExecutorEnd hook closes the capture index first and takes it out of
 * the statement's indexes.  The other indexes are opened and locked as
 * the executor opens them.
 *
 * INSERT ... ON CONFLICT DO NOTHING leaves out the "seq > 0" indexes that
 * are not its arbiters (an arbiter's predicate tells the executor that a row
 * cannot conflict in it, as without stream_seq).  Not changed: INSERT
 * ... ON CONFLICT DO UPDATE (the versions its update stores have their
 * number, and enter every index), COPY, partitions (opened as rows are
 * routed to them), a table with a BEFORE INSERT statement trigger (which
 * runs before the first row: a REINDEX or ALTER INDEX it runs on an index
 * opened here would be refused), and every other statement.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/xact.h"
#include "catalog/index.h"
#include "commands/trigger.h"
#include "executor/executor.h"
#include "nodes/execnodes.h"
#include "pgstat.h"
#include "storage/lmgr.h"
#include "utils/rel.h"
#include "utils/relcache.h"

#include "stream_seq.h"
#include "insertindexes.h"
#include "capture.h"
#include "catalog.h"

static ExecutorStart_hook_type prev_executor_start = NULL;
static ExecutorEnd_hook_type prev_executor_end = NULL;

/*
 * guard_enabled
 *		Whether the table's guard trigger is enabled for origin mode, as it
 *		is but while a data-only restore loads rows with their numbers
 *		(capture.c's guard_switched_off lets them in then).
 */
static bool
guard_enabled(TriggerDesc *trigdesc)
{
	int			i;

	for (i = 0; i < trigdesc->numtriggers; i++)
	{
		Trigger    *trigger = &trigdesc->triggers[i];

		if (strcmp(trigger->tgname, "stream_seq_guard") == 0)
			return trigger->tgenabled == TRIGGER_FIRES_ON_ORIGIN;
	}
	return false;
}

/*
 * leaves_out_placeholder
 *		Whether "index" is one no row a stream's INSERT stores can enter: its
 *		predicate is "seq > 0" on column "seq".  The predicate is read from
 *		the relation cache entry without a copy (RelationGetIndexPredicate
 *		copies it), once the entry has it.
 */
static bool
leaves_out_placeholder(Relation index, AttrNumber seq)
{
	List	   *predicate = index->rd_indpred;

	if (predicate == NIL)
	{
		if (heap_attisnull(index->rd_indextuple, Anum_pg_index_indpred, NULL))
			return false;
		predicate = RelationGetIndexPredicate(index);
	}
	return stream_predicate_excludes_placeholder(predicate, seq);
}

/*
 * lock_looked_index
 *		index_open of index "looked", whose relation cache entry was found
 *		(and is referenced) before its lock, without a second lookup: the
 *		lock relation_open takes, which makes this backend read the
 *		invalidations sent before it and bring the entry up to date where
 *		it is (an entry in use is rebuilt in place, or, left invalid, by
 *		the next lookup), and what relation_open notes of the relation.
 *		The index exists: it is in the list of the table's indexes, read
 *		under the table's lock, which keeps it from being dropped.
 */
static Relation
lock_looked_index(Relation looked)
{
	LockRelationOid(RelationGetRelid(looked), RowExclusiveLock);
	/* an entry left invalid is brought up to date by a lookup */
	if (!looked->rd_isvalid)
		RelationClose(RelationIdGetRelation(RelationGetRelid(looked)));
	if (RelationUsesLocalBuffers(looked))
		MyXactFlags |= XACT_FLAGS_ACCESSEDTEMPNAMESPACE;
	pgstat_init_relation(looked);
	return looked;
}

/*
 * is_arbiter
 *		Whether "index" is an arbiter of an INSERT ... ON CONFLICT DO
 *		NOTHING whose arbiters are "arbiters": one of them, or, when the
 *		statement names none, any unique or exclusion index.  An arbiter is
 *		opened even if no row can enter it: its predicate tells the
 *		executor so, as without stream_seq.
 */
static bool
is_arbiter(Relation index, List *arbiters)
{
	if (arbiters == NIL)
		return index->rd_index->indisunique || index->rd_index->indisexclusion;
	return list_member_oid(arbiters, RelationGetRelid(index));
}

/*
 * open_insert_indexes
 *		Open the indexes of "rri", a stream table's, for an INSERT (with ON
 *		CONFLICT DO NOTHING if "speculative", whose arbiters are
 *		"arbiters"), as ExecOpenIndices does, but for the "seq > 0" indexes
 *		of the stream column that are not arbiters, and with the capture
 *		index unlocked; and mark the capture index's information so that it
 *		refuses every row with a number (capture.c).  False, with nothing
 *		opened, if the table has no capture index ready for inserts or more
 *		than one (REINDEX CONCURRENTLY of it): the executor opens them all.
 */
static bool
open_insert_indexes(ResultRelInfo *rri, AttrNumber seq, bool speculative,
					List *arbiters)
{
	List	   *oids = RelationGetIndexList(rri->ri_RelationDesc);
	int			len = list_length(oids);
	Relation   *looked;
	Relation   *descs;
	IndexInfo **infos;
	Relation	capture = NULL;
	IndexInfo  *capture_info = NULL;
	int			capture_at = -1;
	int			ncapture = 0;
	int			n = 0;
	int			i;

	if (len == 0)
		return false;
	looked = palloc(len * sizeof(Relation));
	for (i = 0; i < len; i++)
	{
		looked[i] = RelationIdGetRelation(list_nth_oid(oids, i));
		if (looked[i] != NULL && stream_is_capture_index(looked[i]))
		{
			ncapture++;
			capture_at = i;
		}
	}

	/* the capture index, ready; not locked (see the top of the file) */
	if (ncapture == 1)
	{
		capture = looked[capture_at];
		looked[capture_at] = NULL;
		capture_info = BuildIndexInfo(capture);
		if (!capture_info->ii_ReadyForInserts)
		{
			RelationClose(capture);
			capture = NULL;
		}
		else
			pgstat_init_relation(capture);
	}
	if (capture == NULL)
	{
		for (i = 0; i < len; i++)
		{
			if (looked[i] != NULL)
				RelationClose(looked[i]);
		}
		return false;
	}

	descs = palloc(len * sizeof(Relation));
	infos = palloc(len * sizeof(IndexInfo *));
	for (i = 0; i < len; i++)
	{
		if (i == capture_at)
		{
			descs[n] = capture;
			infos[n++] = capture_info;
		}
		else if (looked[i] == NULL)
		{
			/* gone: fails as the executor would */
			descs[n] = index_open(list_nth_oid(oids, i), RowExclusiveLock);
			infos[n] = BuildIndexInfo(descs[n]);
			n++;
		}
		else if ((speculative && is_arbiter(looked[i], arbiters)) ||
				 !leaves_out_placeholder(looked[i], seq))
		{
			descs[n] = lock_looked_index(looked[i]);
			infos[n] = BuildIndexInfo(descs[n]);
			if (speculative && infos[n]->ii_Unique &&
				!descs[n]->rd_index->indisexclusion)
				BuildSpeculativeIndexInfo(descs[n], infos[n]);
			n++;
		}
		else
			RelationClose(looked[i]);
	}
	stream_capture_refuse_numbered(capture_info);
	rri->ri_NumIndices = n;
	rri->ri_IndexRelationDescs = descs;
	rri->ri_IndexRelationInfo = infos;
	return true;
}

/*
 * close_capture_index
 *		Close the capture index "rri" was given by open_insert_indexes, and
 *		take it out of the indexes the executor closes: it holds no lock
 *		of it to release.
 */
static void
close_capture_index(ResultRelInfo *rri)
{
	int			i;

	for (i = 0; i < rri->ri_NumIndices; i++)
	{
		if (stream_capture_refuses_numbered(rri->ri_IndexRelationInfo[i]))
		{
			RelationClose(rri->ri_IndexRelationDescs[i]);
			rri->ri_NumIndices--;
			memmove(&rri->ri_IndexRelationDescs[i],
					&rri->ri_IndexRelationDescs[i + 1],
					(rri->ri_NumIndices - i) * sizeof(Relation));
			memmove(&rri->ri_IndexRelationInfo[i],
					&rri->ri_IndexRelationInfo[i + 1],
					(rri->ri_NumIndices - i) * sizeof(IndexInfo *));
			return;
		}
	}
}

/*
 * inserts_into_stream
 *		Whether "rri" is a table (not a partitioned one) whose INSERT may
 *		leave out its "seq > 0" indexes, as far as its triggers and the
 *		session tell: the stream's guard trigger enabled, the session in
 *		origin mode; not one with a BEFORE INSERT statement trigger, which
 *		runs before the first row (with the indexes open, a REINDEX or
 *		ALTER INDEX it runs on one of them would be refused).  Whether the
 *		table is in a stream the caller asks next (stream_capture_target_of).
 */
static bool
inserts_into_stream(ResultRelInfo *rri)
{
	Relation	rel = rri->ri_RelationDesc;
	TriggerDesc *trigdesc = rri->ri_TrigDesc;

	return rel->rd_rel->relkind == RELKIND_RELATION &&
		rel->rd_rel->relhasindex && trigdesc != NULL &&
		!trigdesc->trig_insert_before_statement &&
		SessionReplicationRole != SESSION_REPLICATION_ROLE_REPLICA &&
		guard_enabled(trigdesc);
}

/*
 * stream_executor_start
 *		ExecutorStart_hook: once the executor has set up an INSERT into a
 *		stream table (but INSERT ... ON CONFLICT DO UPDATE), open the
 *		table's indexes but for the "seq > 0" ones (open_insert_indexes).
 *		The INSERT finds them open (or opens them all at its first row, as
 *		usual, when the hook did not).  Other statements and the
 *		partitions an INSERT into a partitioned stream routes rows to
 *		(opened as rows come) are left as they are.
 */
static void
stream_executor_start(QueryDesc *queryDesc, int eflags)
{
	ModifyTableState *mtstate;
	ModifyTable *plan;
	ResultRelInfo *rri;
	StreamTarget *target;
	MemoryContext old;

	if (prev_executor_start)
		prev_executor_start(queryDesc, eflags);
	else
		standard_ExecutorStart(queryDesc, eflags);

	if (queryDesc->operation != CMD_INSERT ||
		(eflags & EXEC_FLAG_EXPLAIN_ONLY) ||
		queryDesc->planstate == NULL ||
		!IsA(queryDesc->planstate, ModifyTableState))
		return;
	mtstate = (ModifyTableState *) queryDesc->planstate;
	plan = (ModifyTable *) mtstate->ps.plan;
	if (mtstate->operation != CMD_INSERT || mtstate->mt_nrels != 1 ||
		plan->onConflictAction == ONCONFLICT_UPDATE)
		return;
	rri = mtstate->resultRelInfo;
	if (rri->ri_IndexRelationDescs != NULL || !inserts_into_stream(rri))
		return;
	target = stream_capture_target_of(rri->ri_RelationDesc);
	if (target == NULL)
		return;
	/* in the statement's memory, where ExecInsert would open them */
	old = MemoryContextSwitchTo(queryDesc->estate->es_query_cxt);
	(void) open_insert_indexes(rri, target->seq_attnum,
							   plan->onConflictAction == ONCONFLICT_NOTHING,
							   plan->arbiterIndexes);
	MemoryContextSwitchTo(old);
}

/*
 * stream_executor_end
 *		ExecutorEnd_hook: the capture index of an INSERT that
 *		open_insert_indexes set up is closed here, before the executor
 *		closes the other indexes and releases their locks.  After an error
 *		the executor does not end the statement: the reference to the
 *		index is released with the statement's resources, as the others.
 */
static void
stream_executor_end(QueryDesc *queryDesc)
{
	PlanState  *planstate = queryDesc->planstate;

	if (queryDesc->operation == CMD_INSERT && planstate != NULL &&
		IsA(planstate, ModifyTableState) &&
		((ModifyTableState *) planstate)->mt_nrels == 1)
		close_capture_index(((ModifyTableState *) planstate)->resultRelInfo);

	if (prev_executor_end)
		prev_executor_end(queryDesc);
	else
		standard_ExecutorEnd(queryDesc);
}

/*
 * stream_insertindexes_init
 *		Install the executor hooks (_PG_init).
 */
void
stream_insertindexes_init(void)
{
	prev_executor_start = ExecutorStart_hook;
	ExecutorStart_hook = stream_executor_start;
	prev_executor_end = ExecutorEnd_hook;
	ExecutorEnd_hook = stream_executor_end;
}
