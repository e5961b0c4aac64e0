/*-------------------------------------------------------------------------
 *
 * assign.c
 *	  Assignment of stream numbers at commit: the triggers enable() puts on
 *	  a stream table, the transaction's per-stream state, and the
 *	  transaction callbacks that record each transaction's outcome.
 *
 * The triggers of a stream table that do the numbering:
 *	- stream_seq_guard, BEFORE INSERT and BEFORE UPDATE OF the column,
 *	  refuses a number written by hand into a row an UPDATE stores, and
 *	  counts inserted rows; a row inserted with a number goes on to the
 *	  conflict check of INSERT ... ON CONFLICT, and if it is inserted,
 *	  stream_seq_guard_insert (AFTER INSERT, not deferred) refuses it at
 *	  the end of the statement, so an upsert of a loaded row can work;
 *	  stream_seq_guard_update (AFTER UPDATE) checks what an UPDATE stored;
 *	- stream_seq_assign, a deferred constraint trigger AFTER INSERT, fires
 *	  in the commit's deferred-trigger loop.  The first firing for a stream
 *	  reserves as many numbers as rows were counted (the entry is appended
 *	  in the same step), each firing writes one number into the live
 *	  version of its row, and before commit the unused tail of the
 *	  reservation is given back.
 *
 * The row is rewritten with table_tuple_update and index insertion only:
 * no SPI, no user triggers, no executor per row, and no uniqueness check
 * for indexes whose key the number does not change.  When the new version
 * fits on its page and nothing can see the row as inserted afterwards, it
 * is a heap-only tuple and only the indexes on the stream column take an
 * entry (update_heap_only states the invariant that makes this sound).
 *
 * On a partitioned stream the triggers fire on the partition a row went
 * to (PostgreSQL clones them from the partitioned table): the reservation
 * is the stream's (XactStream, one per stream), the writer the
 * partition's (XactWriter, one per table rows were inserted into), and a
 * sealed partition refuses the row (partition.c).
 *
 * The transaction's state follows savepoints: whether a disabled or
 * dropped stream's shared slot is freed is decided at pre-commit from the
 * catalog, which rolls back with the savepoint.  A stream row inserted
 * after the deferred triggers fired (by another extension's pre-commit
 * callback, say) would commit without a number: it is refused, before our
 * pre-commit callback by finding its event still queued, after it by the
 * guard trigger.  PREPARE TRANSACTION is refused for a transaction that
 * wrote stream rows, since COMMIT PREPARED runs no callback of ours.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/sysattr.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_publication.h"
#include "catalog/pg_trigger.h"
#include "commands/async.h"
#include "commands/trigger.h"
#include "access/genam.h"
#include "catalog/index.h"
#include "executor/executor.h"
#include "optimizer/optimizer.h"
#include "tcop/pquery.h"
#include "tcop/utility.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/portal.h"
#include "utils/rel.h"
#include "utils/relcache.h"
#include "utils/resowner.h"
#include "utils/snapmgr.h"

#include "stream_seq.h"
#include "stats.h"
#include "assign.h"
#include "shmem.h"
#include "catalog.h"
#include "counter.h"
#include "horizon.h"
#include "inplace.h"
#include "partition.h"
#include "replication.h"

PG_FUNCTION_INFO_V1(stream_seq_guard_trigger);
PG_FUNCTION_INFO_V1(stream_seq_guard_update_trigger);
PG_FUNCTION_INFO_V1(stream_seq_guard_insert_trigger);
PG_FUNCTION_INFO_V1(stream_seq_assign_trigger);
PG_FUNCTION_INFO_V1(stream_seq_last_numbers);


/*
 * What the current transaction does on one stream.
 */
typedef struct XactStream
{
	Oid			relid;			/* hash key */
	StreamRef  *ref;
	int			slotno;			/* where the entry lives, for callbacks */
	uint32		generation;
	int64		inserted;		/* rows counted by the guard trigger */
	int64		numbered;		/* numbers written so far */
	bool		has_entry;		/* our entry is in the shared list */
	bool		early;			/* and it was made before commit began */
	int64		cur_next;		/* current reserved range [cur_next, cur_end) */
	int64		cur_end;
	TimestampTz cur_time;		/* and the time it was reserved at */
	int64		first_number;	/* lowest and highest number written (0: */
	int64		last_number;	/* none yet; numbers start at 1) */
} XactStream;

/*
 * The numbers of the last transaction of this session that committed rows
 * to a stream, for last_numbers(): one entry per stream, in
 * TopMemoryContext.  The entry is made (and "pending" set) before commit,
 * where an allocation may fail; the commit callback, which must not fail,
 * only moves "pending" into place, and an abort drops it.
 */
typedef struct SessionNumbers
{
	Oid			relid;			/* hash key: the stream table */
	bool		committed;		/* first and last are set */
	int64		first;
	int64		last;
	bool		pending;		/* the committing transaction's numbers */
	int64		pending_first;
	int64		pending_last;
} SessionNumbers;

/*
 * A table the current transaction inserted stream rows into: the stream
 * table, or one of its partitions.  Holds the executor state for the
 * commit-time writes, made on first use.
 */
typedef struct XactWriter
{
	Oid			relid;			/* hash key */
	AttrNumber	seq_attnum;		/* the stream column, in this table */
	AttrNumber	time_attnum;	/* the time column, or InvalidAttrNumber */
	EState	   *estate;
	ResultRelInfo *rri;
	TupleTableSlot *newslot;
	TupleTableSlot *fetchslot;
	bool	   *key_changes;	/* per index: it covers the stream column or
								 * the time column */
	ExprState **predicates;		/* per partial index, prepared on first use */
	bool		full_index_on_column;	/* an index with no predicate covers
										 * a column the write sets: never
										 * heap-only */
	uint64		checked_at;		/* relcache_changes when the index set
								 * above was last found current */
} XactWriter;

/* What table_tuple_update says about index entries for the new version. */
#if PG_VERSION_NUM >= 160000
typedef TU_UpdateIndexes UpdateIndexesResult;
#else
typedef bool UpdateIndexesResult;
#endif

/* Per-transaction state, in TopTransactionContext; NULL when idle. */
static HTAB *xact_streams = NULL;
static List *xact_writers = NIL;	/* of XactWriter, usually one */

/*
 * Streams disabled or dropped by this transaction (or one of its
 * subtransactions, which may have rolled back), and those of them whose
 * catalog row is gone at pre-commit: slots to free at commit.
 */
static List *released_streams = NIL;
static List *slots_to_free = NIL;

static HTAB *session_numbers = NULL;
static bool session_numbers_pending = false;	/* an entry has "pending" */

/* Whether our pre-commit callback has run: no stream row may come after. */
static bool past_pre_commit = false;

/*
 * Queries of this transaction whose executor was started and not yet ended:
 * running, or suspended in a portal (a cursor, a FOR loop of a function),
 * each with a snapshot it may use after a commit-time write.  Counted by
 * the executor hooks; the count at the start of each open subtransaction
 * is kept (newest first) to be put back if it rolls back, as the executors
 * it started then end without ExecutorEnd.
 */
static int	open_executors = 0;
static List *open_executors_at_subxact = NIL;

static ExecutorStart_hook_type prev_executor_start = NULL;
static ExecutorEnd_hook_type prev_executor_end = NULL;

/*
 * SET CONSTRAINTS statements in progress: the deferred triggers they fire
 * run inside whatever called them (a function in a query being planned,
 * an expression of a deferred trigger), under snapshots below the one
 * SET CONSTRAINTS pushes, which no executor count shows.
 */
static int	constraints_being_set = 0;

/*
 * COPY statements in progress: with constraints set IMMEDIATE, COPY FROM
 * fires the rows' triggers at its end without an executor of its own.
 */
static int	copies_in_progress = 0;

static ProcessUtility_hook_type prev_process_utility = NULL;

/*
 * Relation cache invalidations this backend has processed (any relation):
 * a writer whose index set was checked at an older count checks it again
 * before its next write (sync_writer_indexes), and update_heap_only tells
 * from it whether the table's entry may have been rebuilt under it.
 */
static uint64 relcache_changes = 0;

/*
 * The table update_heap_only is writing, and whether an invalidation of
 * its relcache entry (or of all) was processed during that write.
 */
static Oid	heap_only_relid = InvalidOid;
static bool heap_only_entry_changed = false;

/*
 * xact_stream_get
 *		The transaction's state for a stream, created on first use.
 */
static XactStream *
xact_stream_get(StreamRef *ref)
{
	XactStream *xs;
	bool		found;

	if (xact_streams == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(Oid);
		ctl.entrysize = sizeof(XactStream);
		ctl.hcxt = TopTransactionContext;
		xact_streams = hash_create("stream_seq transaction", 8, &ctl,
								   HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	xs = hash_search(xact_streams, &ref->relid, HASH_ENTER, &found);
	if (!found)
		memset(((char *) xs) + sizeof(Oid), 0, sizeof(XactStream) - sizeof(Oid));
	xs->ref = ref;
	return xs;
}

/*
 * xact_writer_get
 *		The transaction's writer for the table a trigger fired on, created
 *		on first use (the executor state is made later, by open_writer).
 */
static XactWriter *
xact_writer_get(StreamTarget *target)
{
	XactWriter *writer;
	ListCell   *lc;
	MemoryContext oldcxt;

	foreach(lc, xact_writers)
	{
		writer = lfirst(lc);
		if (writer->relid == target->relid)
		{
			writer->seq_attnum = target->seq_attnum;
			writer->time_attnum = target->time_attnum;
			return writer;
		}
	}
	oldcxt = MemoryContextSwitchTo(TopTransactionContext);
	writer = palloc0(sizeof(XactWriter));
	writer->relid = target->relid;
	writer->seq_attnum = target->seq_attnum;
	writer->time_attnum = target->time_attnum;
	xact_writers = lappend(xact_writers, writer);
	MemoryContextSwitchTo(oldcxt);
	return writer;
}

/*
 * column_name
 *		Name of the stream column, for messages.
 */
static char *
column_name(StreamRef *ref)
{
	return get_attname(ref->relid, ref->seq_attnum, false);
}

/*
 * check_publications
 *		Refuse, at the first insert of a transaction into a stream, what
 *		would only fail later: the number is written by an UPDATE at commit,
 *		so a published stream table must publish updates (else subscribers
 *		get the rows without their numbers) and have a replica identity
 *		(else the publisher commits and every subscriber's apply fails).
 *		The commit-time write bypasses the executor's own check.  Where
 *		pglogical is installed, its replication sets too (replication.c).
 */
static void
check_publications(Relation rel, StreamTarget *target)
{
	PublicationDesc pubdesc;

	if (target->pglogical)
		stream_check_pglogical(rel, target->stream);

	RelationBuildPublicationDesc(rel, &pubdesc);
	if (pubdesc.pubactions.pubinsert && !pubdesc.pubactions.pubupdate)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("stream table \"%s\" is published without updates",
						RelationGetRelationName(rel)),
				 errdetail("Stream numbers are written by an update at commit; subscribers would get the rows without them."),
				 errhint("Publish updates of the table too, or stop publishing it.")));
	CheckCmdReplicaIdentity(rel, CMD_UPDATE);
}

/*
 * report_late_row
 *		The error for a row inserted into a stream table after the
 *		transaction's deferred triggers have fired (by another extension's
 *		pre-commit callback, say): it would commit without a number.
 */
static void
report_late_row(const char *relname)
{
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("cannot insert into stream table \"%s\" while the transaction is committing",
					relname),
			 errdetail("The row was inserted after stream_seq assigned the transaction's numbers; it would have been committed without one.")));
}

/*
 * The hint of every refusal of a written number: the page that says what
 * is accepted, and how each ORM keeps the column read-only.
 */
#define APPLICATIONS_HINT \
	"Leave the column out of the statement, or write back the value the row has; see the stream_seq documentation, doc/applications.md."

/*
 * has_insert_guard
 *		Whether the table has the AFTER INSERT trigger that refuses a row
 *		inserted with a number or a time (stream_seq_guard_insert), enabled
 *		for origin mode: only then may the guard trigger let such a row
 *		through to the conflict check of INSERT ... ON CONFLICT.  A stream
 *		enabled under an earlier version's SQL has none until ALTER
 *		EXTENSION UPDATE adds it, and the guard refuses the row at once, as
 *		it always did.  Looked at only for a row that has a value.
 */
static bool
has_insert_guard(Relation rel)
{
	TriggerDesc *trigdesc = rel->trigdesc;
	int			i;

	for (i = 0; trigdesc != NULL && i < trigdesc->numtriggers; i++)
	{
		Trigger    *trigger = &trigdesc->triggers[i];
		const char *runs_for = NULL;

		/* the name, and the function that trigger runs: not a look-alike */
		if (strcmp(trigger->tgname, "stream_seq_guard_insert") == 0 &&
			TRIGGER_FOR_ROW(trigger->tgtype) &&
			TRIGGER_FOR_AFTER(trigger->tgtype) &&
			TRIGGER_FOR_INSERT(trigger->tgtype) &&
			!trigger->tgdeferrable &&
			trigger->tgenabled == TRIGGER_FIRES_ON_ORIGIN &&
			stream_is_own_trigger_function(trigger->tgfoid, &runs_for) &&
			strcmp(runs_for, "stream_seq_guard_insert") == 0)
			return true;
	}
	return false;
}

/*
 * report_written_value
 *		The error for a row inserted with a value in the stream column or
 *		the time column ("attnum"): from the guard trigger (before the row
 *		is stored, when the table has no insert guard) or from the insert
 *		guard (after, at the end of the statement).
 */
static void
report_written_value(Relation rel, StreamTarget *target, AttrNumber attnum)
{
	Oid			stream = target->stream;
	char	   *colname = get_attname(RelationGetRelid(rel), attnum, false);
	const char *relname = rel->rd_rel->relispartition ?
		stream_rel_name(stream) : RelationGetRelationName(rel);

	/*
	 * On a partition this is also how an UPDATE that changes a numbered
	 * row's partition key arrives: PostgreSQL moves the row by inserting
	 * it, number and all, into its new partition.  Nothing here tells the
	 * two apart, so the message covers both and names the stream.
	 *
	 * Nor a restore: a one-step pg_restore -j may create the stream's
	 * triggers on the partitioned table (cloned onto the partitions)
	 * before a partition's rows are loaded, since pg_dump makes a trigger
	 * depend on its own table's data only, and the rows then arrive here
	 * with their numbers.  Letting a COPY with numbers through would let
	 * anyone write numbers by hand; the restore is done in two steps
	 * instead (doc/operations.md, "Dump and restore").
	 */
	if (rel->rd_rel->relispartition && attnum == target->seq_attnum)
		ereport(ERROR,
				(errcode(ERRCODE_GENERATED_ALWAYS),
				 errmsg("cannot write a number into column \"%s\" of stream table \"%s\"",
						colname, stream_rel_name(stream)),
				 errdetail("A row with a number was inserted into partition \"%s\": either the number was written by hand, or an UPDATE moved a numbered row there from another partition.",
						   RelationGetRelationName(rel)),
				 errhint("Leave column \"%s\" out of INSERT; to change the partition key of a numbered row, insert a new row instead; see the stream_seq documentation, doc/applications.md.",
						 colname)));
	if (attnum == target->seq_attnum)
		ereport(ERROR,
				(errcode(ERRCODE_GENERATED_ALWAYS),
				 errmsg("cannot insert a non-null value into column \"%s\" of stream table \"%s\"",
						colname, relname),
				 errdetail("Stream numbers are assigned by stream_seq when the inserting transaction commits."),
				 errhint(APPLICATIONS_HINT)));
	ereport(ERROR,
			(errcode(ERRCODE_GENERATED_ALWAYS),
			 errmsg("cannot insert a non-null value into column \"%s\" of stream table \"%s\"",
					colname, relname),
			 errdetail("It is the stream's time column: stream_seq writes it together with the number when the inserting transaction commits."),
			 errhint(APPLICATIONS_HINT)));
}

/*
 * column_changed
 *		Whether column "attnum" differs between two versions of a row (a
 *		bigint or timestamptz: compared as passed by value).
 */
static bool
column_changed(Relation rel, HeapTuple oldtuple, HeapTuple newtuple,
			   AttrNumber attnum)
{
	bool		oldnull;
	bool		newnull;
	Datum		oldvalue = heap_getattr(oldtuple, attnum, RelationGetDescr(rel), &oldnull);
	Datum		newvalue = heap_getattr(newtuple, attnum, RelationGetDescr(rel), &newnull);

	if (oldnull || newnull)
		return oldnull != newnull;
	return DatumGetInt64(oldvalue) != DatumGetInt64(newvalue);
}

/*
 * number_or_time_changed
 *		Whether an UPDATE changes the number or the time of a row: writing
 *		back the value a row has (as ORMs write back every column of a row
 *		they loaded) writes nothing.
 */
static bool
number_or_time_changed(Relation rel, StreamTarget *target,
					   HeapTuple oldtuple, HeapTuple newtuple)
{
	return column_changed(rel, oldtuple, newtuple, target->seq_attnum) ||
		(target->time_attnum != InvalidAttrNumber &&
		 column_changed(rel, oldtuple, newtuple, target->time_attnum));
}

/*
 * stream_seq_guard_update_trigger
 *		AFTER UPDATE, for the rows whose number or time an UPDATE changed
 *		(the trigger's WHEN says which): refuse it.  The guard trigger
 *		fires BEFORE UPDATE OF the columns, so it misses an UPDATE of other
 *		columns, and a BEFORE trigger that fires after it (they fire in the
 *		order of their names) can still change the row; an AFTER trigger
 *		sees the version the UPDATE stored, whatever changed it.  The
 *		commit-time write fires no trigger.
 */
Datum
stream_seq_guard_update_trigger(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	Relation	rel;
	StreamTarget *target;

	if (!CALLED_AS_TRIGGER(fcinfo) ||
		!TRIGGER_FIRED_AFTER(trigdata->tg_event) ||
		!TRIGGER_FIRED_FOR_ROW(trigdata->tg_event) ||
		!TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("stream_seq.guard_update_trigger() must be fired AFTER UPDATE ... FOR EACH ROW")));

	rel = trigdata->tg_relation;
	target = stream_lookup_target(rel);
	if (!number_or_time_changed(rel, target, trigdata->tg_trigtuple,
								trigdata->tg_newtuple))
		return PointerGetDatum(NULL);
	ereport(ERROR,
			(errcode(ERRCODE_GENERATED_ALWAYS),
			 errmsg("cannot change column \"%s\"%s%s%s of stream table \"%s\" by an UPDATE",
					get_attname(RelationGetRelid(rel), target->seq_attnum, false),
					target->time_attnum != InvalidAttrNumber ? " or \"" : "",
					target->time_attnum != InvalidAttrNumber ?
					get_attname(RelationGetRelid(rel), target->time_attnum, false) : "",
					target->time_attnum != InvalidAttrNumber ? "\"" : "",
					get_rel_name(target->stream)),
			 errdetail("The UPDATE, or a BEFORE UPDATE trigger of the table, changed them; stream numbers and their times are written by stream_seq when the inserting transaction commits."),
			 errhint(APPLICATIONS_HINT)));
	PG_RETURN_NULL();			/* not reached */
}

/*
 * number_not_handed_out
 *		Whether "number" is at or above the stream's counter: no number
 *		there has been handed out, so no row can have it.  Starts the
 *		counter if this server has not handed out a number yet, as the
 *		first reservation would.
 */
static bool
number_not_handed_out(StreamRef *ref, int64 number)
{
	int64		next;
	int64		block_end;

	if (!stream_counter_read(ref, &next, &block_end))
		next = stream_start_counter(ref);
	return number >= next;
}

/*
 * keep_value_for_null
 *		An UPDATE that stores NULL in column "attnum" of a row that has a
 *		value there: give the new version the old value back.  PostgreSQL
 *		hands triggers SET col = DEFAULT as SET col = NULL (the column has
 *		no default), and DEFAULT must leave the number alone, as it does a
 *		generated column; a number cannot be taken away, so NULL means no
 *		value given.  Returns the tuple to store.
 */
static HeapTuple
keep_value_for_null(Relation rel, HeapTuple oldtuple, HeapTuple newtuple,
					AttrNumber attnum)
{
	TupleDesc	desc = RelationGetDescr(rel);
	bool		isnull;
	Datum		value;
	Datum	   *values;
	bool	   *nulls;
	bool	   *replace;
	HeapTuple	result;

	if (attnum == InvalidAttrNumber ||
		!heap_attisnull(newtuple, attnum, desc) ||
		heap_attisnull(oldtuple, attnum, desc))
		return newtuple;
	value = heap_getattr(oldtuple, attnum, desc, &isnull);
	values = palloc0(sizeof(Datum) * desc->natts);
	nulls = palloc0(sizeof(bool) * desc->natts);
	replace = palloc0(sizeof(bool) * desc->natts);
	values[attnum - 1] = value;
	replace[attnum - 1] = true;
	result = heap_modify_tuple(newtuple, desc, values, nulls, replace);
	pfree(values);
	pfree(nulls);
	pfree(replace);
	return result;
}

/*
 * stream_seq_guard_trigger
 *		BEFORE INSERT / BEFORE UPDATE OF column: the number is written only
 *		by stream_seq.  An UPDATE may write back the value a row has, or
 *		NULL (DEFAULT) over it, which keeps it (the guard_update trigger
 *		checks the row the UPDATE stores).  An INSERT of a row with a value
 *		goes on to the conflict check of INSERT ... ON CONFLICT, which
 *		fires after this trigger and may turn it into an update of the
 *		existing row (an ORM's upsert of a loaded row); if the row is
 *		inserted instead, the guard_insert trigger refuses it at the end of
 *		the statement.  Counts inserted rows so that the commit-time
 *		reservation is made in one step.
 */
Datum
stream_seq_guard_trigger(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	Relation	rel;
	StreamTarget *target;
	StreamRef  *ref;
	XactStream *xs;
	TupleDesc	desc;
	bool		isnull;

	if (!CALLED_AS_TRIGGER(fcinfo) ||
		!TRIGGER_FIRED_BEFORE(trigdata->tg_event) ||
		!TRIGGER_FIRED_FOR_ROW(trigdata->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("stream_seq.guard_trigger() must be fired BEFORE ... FOR EACH ROW")));

	rel = trigdata->tg_relation;
	desc = RelationGetDescr(rel);
	target = stream_lookup_target(rel);
	ref = stream_lookup(target->stream, false);

	if (TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event))
	{
		HeapTuple	newtuple = trigdata->tg_newtuple;

		/* DEFAULT (NULL) keeps the value */
		newtuple = keep_value_for_null(rel, trigdata->tg_trigtuple, newtuple,
									   target->seq_attnum);
		newtuple = keep_value_for_null(rel, trigdata->tg_trigtuple, newtuple,
									   target->time_attnum);

		/* an UPDATE that names the columns but leaves them as they were */
		if (!number_or_time_changed(rel, target, trigdata->tg_trigtuple,
									newtuple))
			return PointerGetDatum(newtuple);

		if (target->time_attnum != InvalidAttrNumber)
			ereport(ERROR,
					(errcode(ERRCODE_GENERATED_ALWAYS),
					 errmsg("columns \"%s\" and \"%s\" of stream table \"%s\" cannot be updated",
							column_name(ref), get_attname(ref->relid, ref->time_attnum, false),
							RelationGetRelationName(rel)),
					 errdetail("Stream numbers and their times are written by stream_seq when the inserting transaction commits."),
					 errhint(APPLICATIONS_HINT)));
		ereport(ERROR,
				(errcode(ERRCODE_GENERATED_ALWAYS),
				 errmsg("column \"%s\" of stream table \"%s\" cannot be updated",
						column_name(ref), RelationGetRelationName(rel)),
				 errdetail("Stream numbers are assigned by stream_seq when the inserting transaction commits."),
				 errhint(APPLICATIONS_HINT)));
	}

	if (!TRIGGER_FIRED_BY_INSERT(trigdata->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("stream_seq.guard_trigger() must be fired for INSERT or UPDATE")));

	/*
	 * A row with a value: refused here only when no guard_insert trigger
	 * will refuse it once inserted (see has_insert_guard), and on a sealed
	 * or detaching partition, which takes no row either way: the message
	 * then says what happened to a numbered row that an UPDATE moved
	 * there, rather than that the partition is sealed.
	 */
	if ((!heap_attisnull(trigdata->tg_trigtuple, target->seq_attnum, desc) ||
		 (target->time_attnum != InvalidAttrNumber &&
		  !heap_attisnull(trigdata->tg_trigtuple, target->time_attnum, desc))) &&
		(target->sealed || target->detaching || !has_insert_guard(rel)))
		report_written_value(rel, target,
							 !heap_attisnull(trigdata->tg_trigtuple, target->seq_attnum, desc) ?
							 target->seq_attnum : target->time_attnum);

	/*
	 * A number the stream has not handed out yet is no loaded row's: refused
	 * before the row reaches the indexes, where the commit-time write of the
	 * transaction that gets that number would wait on the row's unique
	 * index entry until this statement ends.
	 */
	if (!heap_attisnull(trigdata->tg_trigtuple, target->seq_attnum, desc) &&
		number_not_handed_out(ref,
							  DatumGetInt64(heap_getattr(trigdata->tg_trigtuple,
														 target->seq_attnum,
														 desc, &isnull))))
		report_written_value(rel, target, target->seq_attnum);

	/* too late: its assignment event would never fire */
	if (past_pre_commit)
		report_late_row(RelationGetRelationName(rel));

	if (target->sealed)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("partition \"%s\" of stream table \"%s\" is sealed",
						RelationGetRelationName(rel), stream_rel_name(ref->relid)),
				 errdetail("A sealed partition takes no more rows; its range of numbers is final."),
				 errhint("Insert rows whose partition key falls in a newer partition, or let it take rows again with stream_seq.unseal_partition().")));

	if (target->detaching)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("partition \"%s\" of stream table \"%s\" is being detached",
						RelationGetRelationName(rel), stream_rel_name(ref->relid)),
				 errdetail("Its numbers have left the stream; readers no longer see it."),
				 errhint("Insert the row again: it goes to another partition.")));

	xact_writer_get(target);
	xs = xact_stream_get(ref);
	if (xs->inserted++ == 0)
		check_publications(rel, target);

	/* room for the number, if it is to be written in place (inplace.c) */
	return PointerGetDatum(stream_inplace_room(rel, trigdata->tg_trigtuple,
											   target->seq_attnum,
											   target->time_attnum));
}

/*
 * stream_seq_guard_insert_trigger
 *		AFTER INSERT, not deferred, for the rows inserted with a value in
 *		the stream column or the time column (the trigger's WHEN says
 *		which, so an ordinary insert queues nothing): refuse the statement.
 *		It fires at the end of the statement, before anything else can see
 *		the row, and only for a row that was inserted: the row of an
 *		INSERT ... ON CONFLICT DO UPDATE that found a conflict is not, and
 *		its update is checked as any update is.
 */
Datum
stream_seq_guard_insert_trigger(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	Relation	rel;
	StreamTarget *target;

	if (!CALLED_AS_TRIGGER(fcinfo) ||
		!TRIGGER_FIRED_AFTER(trigdata->tg_event) ||
		!TRIGGER_FIRED_FOR_ROW(trigdata->tg_event) ||
		!TRIGGER_FIRED_BY_INSERT(trigdata->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("stream_seq.guard_insert_trigger() must be fired AFTER INSERT ... FOR EACH ROW")));

	rel = trigdata->tg_relation;
	target = stream_lookup_target(rel);
	if (!heap_attisnull(trigdata->tg_trigtuple, target->seq_attnum,
						RelationGetDescr(rel)))
		report_written_value(rel, target, target->seq_attnum);
	if (target->time_attnum != InvalidAttrNumber &&
		!heap_attisnull(trigdata->tg_trigtuple, target->time_attnum,
						RelationGetDescr(rel)))
		report_written_value(rel, target, target->time_attnum);
	return PointerGetDatum(NULL);
}

/*
 * numbering_early
 *		Whether the assignment trigger fires before the transaction began
 *		to commit: at the end of a statement (constraints set IMMEDIATE,
 *		inside an executor or a COPY) or in SET CONSTRAINTS.  COMMIT fires
 *		the deferred triggers with no statement of the transaction in
 *		progress; a cursor still open then makes this say early until the
 *		pre-commit callback corrects it.  Only for the holders view.
 */
static bool
numbering_early(void)
{
	return open_executors > 0 || constraints_being_set > 0 ||
		copies_in_progress > 0;
}

/*
 * take_number
 *		The next number for a row of this transaction, reserving more when
 *		the current range is used up.  The first reservation asks for all
 *		rows the guard counted; rows deleted or rolled back since make the
 *		estimate high, and the tail is given back before commit.  The
 *		time of the reservation the number came from goes to *numbered_at.
 */
static int64
take_number(XactStream *xs, TimestampTz *numbered_at)
{
	if (xs->cur_next >= xs->cur_end)
	{
		int64		want = Max(xs->inserted - xs->numbered, 1);
		int64		lo;
		int64		n;
		bool		early = numbering_early();

		stream_reserving_early(early);
		n = stream_take_numbers(xs->ref, want, xs->has_entry, &lo,
								&xs->cur_time);
		xs->early = xs->has_entry ? xs->early && early : early;
		xs->has_entry = true;
		xs->slotno = xs->ref->slotno;
		xs->generation = xs->ref->generation;
		xs->cur_next = lo;
		xs->cur_end = lo + n;
	}
	xs->numbered++;
	*numbered_at = xs->cur_time;
	return xs->cur_next++;
}

/*
 * index_covers_column
 *		Whether an index's key, expressions or predicate use column
 *		"attnum", or the whole row (a row-typed argument, "t IS NOT NULL"):
 *		only such an index sees its key change when the number is written.
 */
static bool
index_covers_column(IndexInfo *info, AttrNumber attnum)
{
	Bitmapset  *attrs = NULL;
	int			i;

	for (i = 0; i < info->ii_NumIndexAttrs; i++)
	{
		if (info->ii_IndexAttrNumbers[i] == attnum)
			return true;
	}
	pull_varattnos((Node *) info->ii_Expressions, 1, &attrs);
	pull_varattnos((Node *) info->ii_Predicate, 1, &attrs);
	return bms_is_member(attnum - FirstLowInvalidHeapAttributeNumber, attrs) ||
		bms_is_member(InvalidAttrNumber - FirstLowInvalidHeapAttributeNumber, attrs);
}

/*
 * index_is_summarizing
 *		Whether an index only summarizes ranges of blocks (BRIN): from
 *		PostgreSQL 16 on, such an index neither blocks a heap-only update
 *		nor points at single row versions.  Before 16 every index counts
 *		as an ordinary one.
 */
static bool
index_is_summarizing(IndexInfo *info)
{
#if PG_VERSION_NUM >= 160000
	return info->ii_Summarizing;
#else
	return false;
#endif
}

/*
 * open_writer_indexes
 *		Open the table's indexes for the writer, as the executor does for a
 *		query (the relation's index list, each index's IndexInfo with its
 *		readiness for inserts), and note which of them cover a column the
 *		write sets: the others get a new entry with the key they already
 *		have (see insert_index_entries).  Runs in TopTransactionContext
 *		under the top transaction's resource owner (open_writer).
 */
static void
open_writer_indexes(XactWriter *w)
{
	int			i;

	ExecOpenIndices(w->rri, false);
	w->key_changes = palloc0(sizeof(bool) * Max(w->rri->ri_NumIndices, 1));
	w->predicates = palloc0(sizeof(ExprState *) * Max(w->rri->ri_NumIndices, 1));
	w->full_index_on_column = false;
	for (i = 0; i < w->rri->ri_NumIndices; i++)
	{
		IndexInfo  *info = w->rri->ri_IndexRelationInfo[i];

		w->key_changes[i] = index_covers_column(info, w->seq_attnum) ||
			(w->time_attnum != InvalidAttrNumber &&
			 index_covers_column(info, w->time_attnum));
		if (w->key_changes[i] && info->ii_Predicate == NIL &&
			info->ii_ReadyForInserts && !index_is_summarizing(info))
			w->full_index_on_column = true;
	}
	w->checked_at = relcache_changes;
}

/*
 * open_writer
 *		Executor state for writing numbers into rows, made once per
 *		transaction and stream and closed in the pre-commit callback.  Its
 *		relation, index and tuple descriptor references belong to the top
 *		transaction: under SET CONSTRAINTS ... IMMEDIATE the trigger fires
 *		inside a statement or subtransaction that ends before the writer is
 *		closed.  The index part is checked against the relation before
 *		every write (sync_writer_indexes).
 */
static void
open_writer(XactWriter *w, Relation trigrel)
{
	MemoryContext oldcxt = MemoryContextSwitchTo(TopTransactionContext);
	ResourceOwner oldowner = CurrentResourceOwner;
	Relation	rel;

	CurrentResourceOwner = TopTransactionResourceOwner;
	rel = table_open(RelationGetRelid(trigrel), RowExclusiveLock);

	w->estate = CreateExecutorState();
	w->estate->es_output_cid = GetCurrentCommandId(true);
	w->rri = makeNode(ResultRelInfo);
	InitResultRelInfo(w->rri, rel, 1, NULL, 0);
	open_writer_indexes(w);
	w->newslot = MakeSingleTupleTableSlot(RelationGetDescr(rel),
										   &TTSOpsVirtual);
	w->fetchslot = table_slot_create(rel, NULL);
	CurrentResourceOwner = oldowner;
	MemoryContextSwitchTo(oldcxt);
}

/*
 * writer_indexes_current
 *		Whether the writer's indexes are still the relation's: the same
 *		index list (RelationGetIndexList leaves out an index DROP INDEX
 *		CONCURRENTLY has marked dead) and, for each index, the same
 *		readiness for inserts as its relcache entry says now (index_open
 *		revalidates an entry an invalidation has marked).  indisvalid
 *		decides nothing here: an index that is ready but not valid yet (or
 *		no longer) takes inserts all the same.
 */
static bool
writer_indexes_current(XactWriter *w, Relation rel)
{
	List	   *now = RelationGetIndexList(rel);
	bool		current = list_length(now) == w->rri->ri_NumIndices;
	ListCell   *lc;
	int			i = 0;

	foreach(lc, now)
	{
		Relation	index;

		if (!current)
			break;
		if (lfirst_oid(lc) != RelationGetRelid(w->rri->ri_IndexRelationDescs[i]))
		{
			current = false;
			break;
		}
		/* the writer holds its lock since ExecOpenIndices */
		index = index_open(lfirst_oid(lc), NoLock);
		current = index->rd_index->indisready ==
			w->rri->ri_IndexRelationInfo[i]->ii_ReadyForInserts;
		index_close(index, NoLock);
		i++;
	}
	list_free(now);
	return current;
}

/*
 * sync_writer_indexes
 *		Before a write: make the writer's indexes the relation's as they
 *		are now, under the lock the writer holds.  A writer lives for the
 *		whole transaction, and CREATE INDEX CONCURRENTLY, REINDEX
 *		CONCURRENTLY and DROP INDEX CONCURRENTLY wait only for the lock
 *		holders they see at each of their waits: an index can become ready
 *		for inserts (and the transaction's own later statements put the
 *		rows they insert into it, the stream column still null) or stop
 *		being ready after the writer was opened.  The heap-only decision,
 *		the test for an index without a predicate on the column and the
 *		entries to add must be made from what the executor would see now.
 *		Nothing can have changed unless this backend processed a relcache
 *		invalidation since the last check, so most writes cost one
 *		comparison; when one was, the index list and readiness are
 *		compared and the index part reopened only if they differ.
 */
static void
sync_writer_indexes(XactWriter *w, Relation rel)
{
	MemoryContext oldcxt;
	ResourceOwner oldowner;

	if (w->checked_at == relcache_changes)
		return;
	if (writer_indexes_current(w, rel))
	{
		w->checked_at = relcache_changes;
		return;
	}
	oldcxt = MemoryContextSwitchTo(TopTransactionContext);
	oldowner = CurrentResourceOwner;
	CurrentResourceOwner = TopTransactionResourceOwner;
	ExecCloseIndices(w->rri);
	/*
	 * ExecCloseIndices closes the indexes but leaves the arrays in place;
	 * ExecOpenIndices expects a ResultRelInfo that has none (an assertion
	 * from PostgreSQL 18 on), as after InitResultRelInfo.
	 */
	if (w->rri->ri_IndexRelationDescs != NULL)
		pfree(w->rri->ri_IndexRelationDescs);
	if (w->rri->ri_IndexRelationInfo != NULL)
		pfree(w->rri->ri_IndexRelationInfo);
	w->rri->ri_NumIndices = 0;
	w->rri->ri_IndexRelationDescs = NULL;
	w->rri->ri_IndexRelationInfo = NULL;
	pfree(w->key_changes);
	pfree(w->predicates);		/* their ExprStates go with the estate */
	open_writer_indexes(w);
	CurrentResourceOwner = oldowner;
	MemoryContextSwitchTo(oldcxt);
}

/*
 * close_writer
 *		Release the executor state of open_writer.
 */
static void
close_writer(XactWriter *w)
{
	ResourceOwner oldowner = CurrentResourceOwner;

	if (w->estate == NULL)
		return;
	CurrentResourceOwner = TopTransactionResourceOwner;
	ExecDropSingleTupleTableSlot(w->newslot);
	ExecDropSingleTupleTableSlot(w->fetchslot);
	ExecCloseIndices(w->rri);
	table_close(w->rri->ri_RelationDesc, NoLock);
	FreeExecutorState(w->estate);
	w->estate = NULL;
	CurrentResourceOwner = oldowner;
}

/*
 * index_row_matches
 *		Whether the row in the expression context's scan slot satisfies the
 *		predicate of the writer's index "i" (true for an index without
 *		one).  The predicate is prepared on first use.
 */
static bool
index_row_matches(XactWriter *w, int i, ExprContext *econtext)
{
	IndexInfo  *info = w->rri->ri_IndexRelationInfo[i];

	if (info->ii_Predicate == NIL)
		return true;
	if (w->predicates[i] == NULL)
	{
		MemoryContext oldcxt = MemoryContextSwitchTo(TopTransactionContext);

		w->predicates[i] = ExecPrepareQual(info->ii_Predicate, w->estate);
		MemoryContextSwitchTo(oldcxt);
	}
	return ExecQual(w->predicates[i], econtext);
}

/*
 * insert_index_entries
 *		Index the new version of a numbered row.
 *
 *		After an ordinary update every index gets an entry for the new
 *		version.  An index that covers the stream column gets its new key,
 *		checked as usual (unique, or an exclusion constraint).  Every other
 *		index gets the key the row had when it was inserted, which was
 *		checked then; no other transaction can have taken it since, as the
 *		old version of this uncommitted row still holds it.  So no
 *		uniqueness check is made for those, and they are told that the key
 *		did not change, so that btree deletes the old versions' entries
 *		bottom-up instead of splitting pages.  This is ExecInsertIndexTuples
 *		with the check chosen per index.
 *
 *		After a heap-only update ("heap_only") only two kinds of index get
 *		an entry: those that cover the stream column, whose entry points
 *		at the chain's root "root_tid" (see update_heap_only for why that
 *		is sound), and, when "summarizing" (PostgreSQL 16 and later, a
 *		summarized column changed), the summarizing indexes, as in
 *		ExecInsertIndexTuples.  Any other entry for a heap-only version
 *		would break its chain.
 */
static void
insert_index_entries(XactWriter *w, Relation rel, TupleTableSlot *slot,
					 bool heap_only, bool summarizing, ItemPointer root_tid)
{
	ResultRelInfo *rri = w->rri;
	ExprContext *econtext = GetPerTupleExprContext(w->estate);
	Datum		values[INDEX_MAX_KEYS];
	bool		isnull[INDEX_MAX_KEYS];
	int			i;

	econtext->ecxt_scantuple = slot;
	for (i = 0; i < rri->ri_NumIndices; i++)
	{
		Relation	index = rri->ri_IndexRelationDescs[i];
		IndexInfo  *info = rri->ri_IndexRelationInfo[i];
		ItemPointer tid = &slot->tts_tid;
		IndexUniqueCheck check = UNIQUE_CHECK_NO;
		bool		satisfied;

		if (index == NULL || !info->ii_ReadyForInserts)
			continue;
		if (heap_only)
		{
			if (index_is_summarizing(info))
			{
				if (!summarizing)
					continue;
			}
			else if (w->key_changes[i])
				tid = root_tid;
			else
				continue;
		}
		if (!index_row_matches(w, i, econtext))
			continue;
		FormIndexDatum(info, slot, w->estate, values, isnull);
		if (w->key_changes[i] && index->rd_index->indisunique)
			check = index->rd_index->indimmediate ? UNIQUE_CHECK_YES :
				UNIQUE_CHECK_PARTIAL;
		satisfied = index_insert(index, values, isnull, tid, rel, check,
								 !w->key_changes[i], info);
		if (check == UNIQUE_CHECK_PARTIAL && !satisfied)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("stream table \"%s\" has a deferrable unique constraint",
							RelationGetRelationName(rel)),
					 errdetail("Deferrable unique constraints cannot be checked for the rows stream_seq numbers at commit.")));
		if (w->key_changes[i] && info->ii_ExclusionOps != NULL)
			check_exclusion_constraint(rel, index, info, &slot->tts_tid,
									   values, isnull, w->estate, false);
	}
}

/*
 * still_as_inserted
 *		Whether the inserted version of a row is still the live one: this
 *		transaction (not a subtransaction that rolled back) inserted it, and
 *		nothing updated or deleted it since.  Read from the tuple header
 *		without the buffer's lock: only this backend changes the header of
 *		a tuple its transaction inserted and has not committed.  When in
 *		doubt (an update rolled back to a savepoint, say) it answers false,
 *		and live_version looks properly.
 */
static bool
still_as_inserted(HeapTuple tuple)
{
	HeapTupleHeader header = tuple->t_data;

	return (header->t_infomask & HEAP_XMAX_INVALID) != 0 &&
		TransactionIdIsCurrentTransactionId(HeapTupleHeaderGetRawXmin(header));
}

/*
 * inserted_frozen
 *		Whether the row was inserted already frozen (COPY ... FREEZE): then
 *		snapshots of other transactions may see it before its transaction
 *		commits, so its numbered version must not be heap-only
 *		(update_heap_only, fact (a)).
 */
static bool
inserted_frozen(HeapTuple tuple)
{
	return HeapTupleHeaderXminFrozen(tuple->t_data) ||
		HeapTupleHeaderXminCommitted(tuple->t_data);
}

/*
 * live_version
 *		The version of the inserted row that is live now, following updates
 *		made later in the transaction; NULL if the row was deleted or its
 *		subtransaction rolled back.
 */
static TupleTableSlot *
live_version(XactWriter *w, Relation rel, TupleTableSlot *inserted,
			 ItemPointer tid)
{
	TableScanDesc scan;

	if (table_tuple_satisfies_snapshot(rel, inserted, SnapshotSelf))
		return inserted;

	scan = table_beginscan_tid(rel, SnapshotSelf);
	table_tuple_get_latest_tid(scan, tid);
	table_endscan(scan);
	if (!table_tuple_fetch_row_version(rel, tid, SnapshotSelf, w->fetchslot))
		return NULL;
	return w->fetchslot;
}

/*
 * may_be_heap_only
 *		Whether the numbered version of "row", the version its transaction
 *		inserted (not one from a later update), may be written as a
 *		heap-only tuple, so that only the indexes that cover the stream
 *		column get an entry.  See update_heap_only for the argument; here
 *		are its conditions:
 *		- every index that covers the stream column (key, expression or
 *		  predicate) and takes inserts has a predicate that the row, as
 *		  inserted with the column null, does not satisfy, so it holds no
 *		  entry for the chain's root;
 *		- no snapshot of this transaction that sees the row as inserted
 *		  but not its numbered version is used after this write: we are in
 *		  the commit's deferred-trigger loop outside any portal (not in a
 *		  procedure's COMMIT), not in a SET CONSTRAINTS ... IMMEDIATE at any
 *		  depth (constraints_being_set: it fires triggers from inside
 *		  whatever called it, even a function the planner evaluates); no
 *		  query of the transaction is running or suspended (open_executors:
 *		  no cursor, WITH HOLD or not, that a later trigger or the commit
 *		  could read, and no statement around a nested SET CONSTRAINTS);
 *		  and the loop's snapshot is held by nothing else, so that
 *		  number_version can move it past the write.  A snapshot that C
 *		  code registers and keeps outside any query is not seen.
 */
static bool
may_be_heap_only(XactWriter *w, TupleTableSlot *row)
{
	Snapshot	loop_snapshot;
	ExprContext *econtext;
	bool		root_indexed = false;
	int			i;

	if (!(stream_seq_heap_only || stream_seq_in_place) ||
		w->full_index_on_column ||
		ActivePortal != NULL || open_executors != 0 ||
		constraints_being_set != 0 || !ActiveSnapshotSet())
		return false;
	loop_snapshot = GetActiveSnapshot();
	if (loop_snapshot->active_count != 1 || loop_snapshot->regd_count != 0)
		return false;

	econtext = GetPerTupleExprContext(w->estate);
	econtext->ecxt_scantuple = row;
	for (i = 0; i < w->rri->ri_NumIndices && !root_indexed; i++)
	{
		IndexInfo  *info = w->rri->ri_IndexRelationInfo[i];

		if (w->key_changes[i] && info->ii_ReadyForInserts &&
			!index_is_summarizing(info))
			root_indexed = index_row_matches(w, i, econtext);
	}
	ResetPerTupleExprContext(w->estate);
	return !root_indexed;
}

/*
 * update_heap_only
 *		table_tuple_update with the stream column (and the time column,
 *		which the same write sets; everything said here of the stream
 *		column holds for both) left out of the columns that block a
 *		heap-only (HOT) update, for this one call: heap_update
 *		then makes the new version heap-only whenever it fits on the old
 *		one's page, and reports that no index needs an entry.
 *
 *		HOT requires that every index hold the same key for every member
 *		of a chain that a scan can reach.  The chain here is the row as
 *		inserted (the root, stream column null) and its numbered version.
 *		It is sound because:
 *		(a) no snapshot other than the inserting transaction's ever sees
 *		    the root: its xmin and xmax are the same transaction, so before
 *		    commit others do not see it and after commit nobody does (an
 *		    exported snapshot lists the transaction as running; a row
 *		    COPY ... FREEZE inserted frozen is visible to others at once,
 *		    and never gets here); and of
 *		    this transaction's own snapshots none that sees the root is
 *		    used after this write (may_be_heap_only, number_version);
 *		(b) every index that covers the stream column had no entry for the
 *		    root (its predicate excluded the null) and gets exactly one,
 *		    for the numbered version, from insert_index_entries, pointing
 *		    at the root as every entry for a chain does; every other index
 *		    holds the same key for both versions.
 *		An index built later (CREATE INDEX [CONCURRENTLY]) indexes the
 *		live end of the chain at the root, as for any HOT chain.
 *
 *		heap_update reads the bitmap from the relcache entry (a copy, at
 *		its start, before anything can process an invalidation), so the
 *		entry's bitmap is swapped for this call and put back afterwards,
 *		also on error.  If the entry was rebuilt meanwhile, the rebuild has
 *		freed our bitmap and the new one is left alone, and the saved one,
 *		which the entry no longer points at, is freed here.  Whether the
 *		entry may have been rebuilt is told by an invalidation of it
 *		processed during the call (count_relcache_change), not by the
 *		pointer: a bitmap computed after a rebuild may be allocated at the
 *		address ours had; so in that case the bitmap is dropped, whichever
 *		it is, and the relcache computes it again.
 */
static TM_Result
update_heap_only(XactWriter *w, Relation rel, ItemPointer tid,
				 TM_FailureData *tmfd, LockTupleMode *lockmode,
				 UpdateIndexesResult *update_indexes)
{
	Bitmapset **cached;
	Bitmapset  *saved;
	Bitmapset  *narrowed;
	TM_Result	result;

#if PG_VERSION_NUM >= 160000
	bms_free(RelationGetIndexAttrBitmap(rel, INDEX_ATTR_BITMAP_HOT_BLOCKING));
	cached = &rel->rd_hotblockingattr;
#else
	bms_free(RelationGetIndexAttrBitmap(rel, INDEX_ATTR_BITMAP_ALL));
	cached = &rel->rd_indexattr;
	if (*cached == NULL)		/* no index at all: nothing to leave out */
		return table_tuple_update(rel, tid, w->newslot,
								  GetCurrentCommandId(true), GetActiveSnapshot(),
								  InvalidSnapshot, true, tmfd, lockmode,
								  update_indexes);
#endif
	saved = *cached;

	/*
	 * Before 16 a null bitmap means "not computed yet"; bms_del_member keeps
	 * an emptied set allocated there, so the entry stays valid.
	 */
	narrowed = bms_del_member(bms_copy(saved),
							  w->seq_attnum - FirstLowInvalidHeapAttributeNumber);
	if (w->time_attnum != InvalidAttrNumber)
		narrowed = bms_del_member(narrowed,
								  w->time_attnum - FirstLowInvalidHeapAttributeNumber);
	*cached = narrowed;
	heap_only_relid = RelationGetRelid(rel);
	heap_only_entry_changed = false;
	PG_TRY();
	{
		result = table_tuple_update(rel, tid, w->newslot,
									GetCurrentCommandId(true), GetActiveSnapshot(),
									InvalidSnapshot, true, tmfd, lockmode,
									update_indexes);
	}
	PG_FINALLY();
	{
		heap_only_relid = InvalidOid;
		if (!heap_only_entry_changed)
		{
			Assert(*cached == narrowed);
			*cached = saved;
			bms_free(narrowed);
		}
		else
		{
			/*
			 * The entry may have been rebuilt (freeing our bitmap) and a new
			 * bitmap computed, perhaps at the same address.  Either way
			 * what it points at is dropped and recomputed on next use.
			 */
			if (*cached == narrowed)
			{
				bms_free(*cached);
				*cached = NULL;
#if PG_VERSION_NUM >= 160000
				rel->rd_attrsvalid = false;
#endif
			}
			bms_free(saved);	/* no longer the entry's: ours to free */
		}
	}
	PG_END_TRY();
	return result;
}

/*
 * number_version
 *		Write "number" (and "numbered_at" into the time column, if the
 *		stream has one) into the live row version "row" at "tid" as a new
 *		version.  "as_inserted" says that "row" is the version the
 *		transaction inserted, the root of its chain, and that only this
 *		transaction can see it (not inserted frozen): then the new version
 *		is written heap-only when may_be_heap_only allows and it fits on
 *		the page, and otherwise, as before, as an ordinary update.
 */
static void
number_version(XactWriter *w, Relation rel, TupleTableSlot *row,
			   ItemPointer tid, int64 number, TimestampTz numbered_at,
			   bool as_inserted)
{
	AttrNumber	att = w->seq_attnum;
	HeapTuple	htup;
	TM_FailureData tmfd;
	LockTupleMode lockmode;
	UpdateIndexesResult update_indexes;
	ItemPointerData root_tid = *tid;
	bool		may_leave_root;
	bool		try_heap_only;
	TM_Result	result;

	slot_getallattrs(row);
	if (!row->tts_isnull[att - 1])
		ereport(ERROR,
				(errcode(ERRCODE_GENERATED_ALWAYS),
				 errmsg("column \"%s\" of stream table \"%s\" was set by hand",
						get_attname(RelationGetRelid(rel), w->seq_attnum, false), RelationGetRelationName(rel)),
				 errdetail("Stream numbers are assigned by stream_seq when the inserting transaction commits."),
				 errhint(APPLICATIONS_HINT)));

	/*
	 * The row must be visible to our update: it may be from this command.
	 * A row COPY ... FREEZE inserted is visible to every command (and its
	 * xmin no longer names this transaction, which GetCmin insists on).
	 */
	htup = ExecFetchSlotHeapTuple(row, false, NULL);
	if (!HeapTupleHeaderXminFrozen(htup->t_data) &&
		HeapTupleHeaderGetCmin(htup->t_data) >= GetCurrentCommandId(false))
		CommandCounterIncrement();

	sync_writer_indexes(w, rel);
	may_leave_root = as_inserted && may_be_heap_only(w, row);
	try_heap_only = may_leave_root && stream_seq_heap_only;

	ExecClearTuple(w->newslot);
	memcpy(w->newslot->tts_values, row->tts_values,
		   sizeof(Datum) * row->tts_nvalid);
	memcpy(w->newslot->tts_isnull, row->tts_isnull,
		   sizeof(bool) * row->tts_nvalid);
	w->newslot->tts_values[att - 1] = Int64GetDatum(number);
	w->newslot->tts_isnull[att - 1] = false;
	if (w->time_attnum != InvalidAttrNumber)
	{
		w->newslot->tts_values[w->time_attnum - 1] = TimestampTzGetDatum(numbered_at);
		w->newslot->tts_isnull[w->time_attnum - 1] = false;
	}
	ExecStoreVirtualTuple(w->newslot);

	/*
	 * In place, when the row was inserted with room for the number: the
	 * same conditions as for the heap-only write hold (may_be_heap_only),
	 * and the indexes that cover the stream column take their one entry
	 * at the row's own TID.  The values are copied first: those of
	 * by-reference columns point into the page the write changes.  The
	 * trigger's slot is then materialized too, which drops its pin on the
	 * page: the write needs a cleanup lock, which fails while any pin but
	 * its own is held, ours included.  No snapshot needs to move: the
	 * version it sees is the numbered one.
	 */
	if (may_leave_root && stream_seq_in_place)
	{
		ExecMaterializeSlot(w->newslot);
		ExecMaterializeSlot(row);
		if (stream_inplace_write(rel, tid, w->seq_attnum, number,
								 w->time_attnum, numbered_at))
		{
			w->newslot->tts_tid = *tid;
			w->newslot->tts_tableOid = RelationGetRelid(rel);
			insert_index_entries(w, rel, w->newslot, true, true, tid);
			ResetPerTupleExprContext(w->estate);
			ExecClearTuple(w->newslot);
			return;
		}
	}

	if (try_heap_only)
		result = update_heap_only(w, rel, tid, &tmfd, &lockmode,
								  &update_indexes);
	else
		result = table_tuple_update(rel, tid, w->newslot,
									GetCurrentCommandId(true), GetActiveSnapshot(),
									InvalidSnapshot, true, &tmfd, &lockmode,
									&update_indexes);
	if (result != TM_Ok)
		elog(ERROR, "could not write the number of a row of stream table \"%s\": %d",
			 RelationGetRelationName(rel), (int) result);

	/*
	 * Which indexes take an entry.  An ordinary update: all of them.  A
	 * heap-only one, made possible by update_heap_only (or, from 16 on,
	 * because only summarizing indexes cover the column): those covering
	 * the stream column, at the root, and the summarizing ones if
	 * heap_update says a summarized column changed.
	 */
#if PG_VERSION_NUM >= 160000
	insert_index_entries(w, rel, w->newslot, update_indexes != TU_All,
						 update_indexes == TU_Summarizing, &root_tid);
#else
	insert_index_entries(w, rel, w->newslot, !update_indexes, false,
						 &root_tid);
#endif

	/*
	 * The deferred triggers that fire after this one use the loop's
	 * snapshot, which sees the root: move it past this write, as a new
	 * command would.
	 */
	if (try_heap_only)
	{
		CommandCounterIncrement();
		UpdateActiveSnapshotCommandId();
	}
	ResetPerTupleExprContext(w->estate);
	ExecClearTuple(w->newslot);
}

/*
 * check_foreign_keys
 *		Check the foreign keys of the table (PostgreSQL's check triggers on
 *		the referencing side) against the live version of a row that its
 *		transaction updated before commit, once its number is written
 *		("tid" is the version the number was written over).
 *
 *		The update queued a check of the version it made, after this
 *		trigger's event (events fire in the order they were queued), and
 *		the check of the inserted version fired before it; a deferred
 *		check skips a version that is no longer live, expecting the update
 *		that superseded it to have queued a check of its own.  The
 *		commit-time write supersedes the updated version without queueing
 *		one (it fires no triggers), so without this the row would commit
 *		unchecked, with whatever its update put in the referencing columns.
 *		An immediate constraint was checked at the end of the update; this
 *		checks it once more, on a path (a row updated before commit) that
 *		takes an ordinary update anyway.
 */
static void
check_foreign_keys(XactWriter *w, Relation rel, ItemPointer tid)
{
	TriggerDesc *trigdesc = rel->trigdesc;
	ItemPointerData live = *tid;
	TableScanDesc scan;
	HeapTuple	tuple;
	int			i;

	if (trigdesc == NULL)
		return;
	for (i = 0; i < trigdesc->numtriggers; i++)
	{
		if (trigdesc->triggers[i].tgfoid == F_RI_FKEY_CHECK_INS)
			break;
	}
	if (i == trigdesc->numtriggers)
		return;

	scan = table_beginscan_tid(rel, SnapshotSelf);
	table_tuple_get_latest_tid(scan, &live);
	table_endscan(scan);
	if (!table_tuple_fetch_row_version(rel, &live, SnapshotSelf, w->fetchslot))
		return;
	tuple = ExecFetchSlotHeapTuple(w->fetchslot, false, NULL);

	for (i = 0; i < trigdesc->numtriggers; i++)
	{
		Trigger    *trigger = &trigdesc->triggers[i];
		TriggerData td;
		FmgrInfo	flinfo;
		LOCAL_FCINFO(fcinfo, 0);

		if (trigger->tgfoid != F_RI_FKEY_CHECK_INS ||
			trigger->tgenabled == TRIGGER_DISABLED ||
			trigger->tgenabled == (SessionReplicationRole == SESSION_REPLICATION_ROLE_REPLICA ?
								   TRIGGER_FIRES_ON_ORIGIN : TRIGGER_FIRES_ON_REPLICA))
			continue;
		memset(&td, 0, sizeof(td));
		td.type = T_TriggerData;
		td.tg_event = TRIGGER_EVENT_INSERT | TRIGGER_EVENT_ROW;
		td.tg_relation = rel;
		td.tg_trigtuple = tuple;
		td.tg_trigslot = w->fetchslot;
		td.tg_trigger = trigger;
		fmgr_info(trigger->tgfoid, &flinfo);
		InitFunctionCallInfoData(*fcinfo, &flinfo, 0, InvalidOid,
								 (Node *) &td, NULL);
		(void) FunctionCallInvoke(fcinfo);
	}
}

/*
 * stream_seq_assign_trigger
 *		Deferred AFTER INSERT constraint trigger: write the row's number.
 *		Runs in the commit's deferred-trigger loop (or at statement end
 *		under SET CONSTRAINTS ... IMMEDIATE).  Usually the inserted version
 *		is still the live one, which the tuple header says without a look
 *		at the buffer; otherwise the live version is found first (or none,
 *		and the row is skipped).
 */
Datum
stream_seq_assign_trigger(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	Relation	rel;
	StreamTarget *target;
	StreamRef  *ref;
	XactStream *xs;
	XactWriter *w;
	TupleTableSlot *row;
	ItemPointerData tid;
	bool		as_inserted;

	if (!CALLED_AS_TRIGGER(fcinfo) ||
		!TRIGGER_FIRED_AFTER(trigdata->tg_event) ||
		!TRIGGER_FIRED_FOR_ROW(trigdata->tg_event) ||
		!TRIGGER_FIRED_BY_INSERT(trigdata->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("stream_seq.assign_trigger() must be fired AFTER INSERT ... FOR EACH ROW")));

	rel = trigdata->tg_relation;
	target = stream_lookup_target(rel);
	ref = stream_lookup(target->stream, false);
	xs = xact_stream_get(ref);
	w = xact_writer_get(target);
	if (w->estate == NULL)
		open_writer(w, rel);

	tid = trigdata->tg_trigtuple->t_self;
	row = trigdata->tg_trigslot;
	as_inserted = still_as_inserted(trigdata->tg_trigtuple);
	if (!as_inserted)
		row = live_version(w, rel, row, &tid);
	if (row != NULL)
	{
		TimestampTz numbered_at;
		int64		number = take_number(xs, &numbered_at);

		number_version(w, rel, row, &tid, number, numbered_at,
					   as_inserted && !inserted_frozen(trigdata->tg_trigtuple));
		/*
		 * Not from xs->numbered: a number taken for a row whose writing then
		 * failed (a subtransaction rolled back) is counted there too.
		 */
		if (xs->first_number == 0 || number < xs->first_number)
			xs->first_number = number;
		if (number > xs->last_number)
			xs->last_number = number;
		if (!as_inserted)
			check_foreign_keys(w, rel, &tid);
	}
	ExecClearTuple(w->fetchslot);	/* drop its buffer pin now */
	return PointerGetDatum(NULL);
}

/*
 * finish_xact
 *		Record the transaction's outcome in every stream it holds numbers
 *		on (and, committed, in the cumulative statistics), and forget its
 *		state.  Called from commit and abort callbacks: must not fail.
 */
static void
finish_xact(bool committed)
{
	if (xact_streams != NULL)
	{
		HASH_SEQ_STATUS status;
		XactStream *xs;
		int64		numbered = 0;

		hash_seq_init(&status, xact_streams);
		while ((xs = hash_seq_search(&status)) != NULL)
		{
			if (xs->has_entry)
			{
				stream_finish_entry(xs->slotno, xs->generation, committed,
									committed ? XactLastCommitEnd : InvalidXLogRecPtr);
				numbered += xs->numbered;
			}
		}
		if (committed && numbered > 0)
			stream_stats_count_commit(numbered);
	}
	xact_streams = NULL;
	xact_writers = NIL;
	stream_partition_xact_end();
	released_streams = NIL;
	slots_to_free = NIL;
	past_pre_commit = false;
	open_executors = 0;
	open_executors_at_subxact = NIL;
	constraints_being_set = 0;
	copies_in_progress = 0;
}

/*
 * remember_numbers
 *		Before commit: note the numbers the transaction wrote on a stream
 *		as pending in the session's entry for it, made here if missing.
 */
static void
remember_numbers(XactStream *xs)
{
	SessionNumbers *entry;
	bool		found;

	if (session_numbers == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(Oid);
		ctl.entrysize = sizeof(SessionNumbers);
		ctl.hcxt = TopMemoryContext;
		session_numbers = hash_create("stream_seq last numbers", 8, &ctl,
									  HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	entry = hash_search(session_numbers, &xs->relid, HASH_ENTER, &found);
	if (!found)
		entry->committed = false;
	entry->pending = true;
	entry->pending_first = xs->first_number;
	entry->pending_last = xs->last_number;
	session_numbers_pending = true;
}

/*
 * settle_numbers
 *		At commit, the pending numbers become the session's last ones; at
 *		abort (or PREPARE) they are dropped.  Called from commit and abort
 *		callbacks: must not fail (a sequential scan of the hash table
 *		allocates nothing).
 */
static void
settle_numbers(bool committed)
{
	HASH_SEQ_STATUS status;
	SessionNumbers *entry;

	if (!session_numbers_pending)
		return;
	hash_seq_init(&status, session_numbers);
	while ((entry = hash_seq_search(&status)) != NULL)
	{
		if (entry->pending && committed)
		{
			entry->committed = true;
			entry->first = entry->pending_first;
			entry->last = entry->pending_last;
		}
		entry->pending = false;
	}
	session_numbers_pending = false;
}

/*
 * stream_seq_last_numbers
 *		SQL: last_numbers(stream regclass, OUT first bigint, OUT last
 *		bigint): the lowest and the highest number of the last transaction
 *		of this session that committed rows to the stream; NULL, NULL when
 *		none did.  Every number that transaction's rows got lies between
 *		them.  Backend-local: a pooler that runs the next transaction on
 *		another backend gets that backend's answer.  Requires SELECT on the
 *		table.
 */
Datum
stream_seq_last_numbers(PG_FUNCTION_ARGS)
{
	Oid			relid = PG_GETARG_OID(0);
	TupleDesc	tupdesc;
	Datum		values[2] = {0, 0};
	bool		nulls[2] = {true, true};
	SessionNumbers *entry = NULL;
	StreamRef  *ref;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("function returning record called in context that cannot accept type record")));
	ref = stream_lookup(relid, false);
	stream_check_select(ref->relid);
	if (session_numbers != NULL)
		entry = hash_search(session_numbers, &ref->relid, HASH_FIND, NULL);
	if (entry != NULL && entry->committed)
	{
		values[0] = Int64GetDatum(entry->first);
		values[1] = Int64GetDatum(entry->last);
		nulls[0] = nulls[1] = false;
	}
	tupdesc = BlessTupleDesc(tupdesc);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

/*
 * notify_stream
 *		Queue NOTIFY stream_seq, '<schema>.<table>', delivered when this
 *		transaction commits (the horizon may have moved).
 */
static void
notify_stream(Oid relid)
{
	char	   *relname = get_rel_name(relid);

	if (relname == NULL)
		return;
	Async_Notify("stream_seq",
				 quote_qualified_identifier(get_namespace_name(get_rel_namespace(relid)),
											relname));
}

/*
 * decide_slots_to_free
 *		At pre-commit, which of the streams this transaction disabled or
 *		dropped are really gone: those whose catalog row this transaction
 *		has deleted, and not restored by a rollback to a savepoint or by
 *		enabling the table again.  Their slots are freed at commit.
 */
static void
decide_slots_to_free(void)
{
	ListCell   *lc;

	foreach(lc, released_streams)
	{
		Oid			relid = lfirst_oid(lc);

		if (!list_member_oid(slots_to_free, relid) &&
			!stream_catalog_has(relid))
		{
			MemoryContext oldcxt = MemoryContextSwitchTo(TopTransactionContext);

			slots_to_free = lappend_oid(slots_to_free, relid);
			MemoryContextSwitchTo(oldcxt);
		}
	}
}

/*
 * mark_committing
 *		The transaction begins to commit: the entries it made early (see
 *		numbering_early) are shown as committing from now on.  Called for
 *		a COMMIT statement, before the deferred triggers of any table fire,
 *		and at pre-commit for the other ways to commit (a procedure's
 *		COMMIT, the end of an implicit transaction).
 */
static void
mark_committing(void)
{
	HASH_SEQ_STATUS status;
	XactStream *xs;

	if (xact_streams == NULL)
		return;
	hash_seq_init(&status, xact_streams);
	while ((xs = hash_seq_search(&status)) != NULL)
	{
		if (xs->has_entry && xs->early)
		{
			stream_entry_committing(xs->slotno, xs->generation);
			xs->early = false;
		}
	}
}

/*
 * stream_xact_callback
 *		Before commit: give back unused reservations and close the writers.
 *		At commit or abort: record the outcome.  Before PREPARE: refuse, as
 *		a prepared transaction could commit after a restart, in another
 *		backend, with no callback to record it.
 */
static void
stream_xact_callback(XactEvent event, void *arg)
{
	HASH_SEQ_STATUS status;
	XactStream *xs;
	ListCell   *lc;

	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
			past_pre_commit = true;
			mark_committing();
			decide_slots_to_free();
			foreach(lc, xact_writers)
			{
				XactWriter *w = lfirst(lc);

				/* rows queued after the deferred triggers fired */
				if (AfterTriggerPendingOnRel(w->relid))
					report_late_row(stream_rel_name(w->relid));
				close_writer(w);
			}
			if (xact_streams == NULL)
				break;
			hash_seq_init(&status, xact_streams);
			while ((xs = hash_seq_search(&status)) != NULL)
			{
				if (xs->has_entry && xs->cur_next < xs->cur_end &&
					!stream_xact_computed_horizon())
					stream_shrink(xs->ref, xs->cur_next, xs->cur_end);
				if (xs->has_entry && stream_seq_notify)
					notify_stream(xs->relid);
				if (xs->numbered > 0)
					remember_numbers(xs);
			}
			break;

		case XACT_EVENT_PRE_PREPARE:
			if (xact_streams == NULL)
				break;
			hash_seq_init(&status, xact_streams);
			while ((xs = hash_seq_search(&status)) != NULL)
			{
				if (xs->inserted > 0 || xs->has_entry)
				{
					hash_seq_term(&status);
					ereport(ERROR,
							(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
							 errmsg("cannot PREPARE a transaction that has written to stream table \"%s\"",
									stream_rel_name(xs->relid)),
							 errdetail("Stream numbers are assigned at commit, which a prepared transaction would do later without stream_seq.")));
				}
			}
			break;

		case XACT_EVENT_COMMIT:
			foreach(lc, slots_to_free)
				stream_slot_release(MyDatabaseId, lfirst_oid(lc));
			finish_xact(true);
			settle_numbers(true);
			break;

		case XACT_EVENT_ABORT:
		case XACT_EVENT_PREPARE:
			finish_xact(false);
			settle_numbers(false);
			break;

		default:
			break;
	}
}

/*
 * count_executor_start, count_executor_end
 *		ExecutorStart and ExecutorEnd hooks: count the transaction's queries
 *		in progress (open_executors), for may_be_heap_only.
 */
static void
count_executor_start(QueryDesc *queryDesc, int eflags)
{
	if (prev_executor_start)
		prev_executor_start(queryDesc, eflags);
	else
		standard_ExecutorStart(queryDesc, eflags);
	open_executors++;
}

static void
count_executor_end(QueryDesc *queryDesc)
{
	open_executors--;
	if (prev_executor_end)
		prev_executor_end(queryDesc);
	else
		standard_ExecutorEnd(queryDesc);
}

/*
 * count_constraints_set
 *		ProcessUtility hook: count the SET CONSTRAINTS statements in
 *		progress (constraints_being_set), for may_be_heap_only, and the COPY
 *		statements (copies_in_progress), for numbering_early; the counts go
 *		back down on error too.  At COMMIT, show the entries made early as
 *		committing (mark_committing).
 */
static void
count_constraints_set(PlannedStmt *pstmt, const char *queryString,
					  bool readOnlyTree, ProcessUtilityContext context,
					  ParamListInfo params, QueryEnvironment *queryEnv,
					  DestReceiver *dest, QueryCompletion *qc)
{
	bool		setting = IsA(pstmt->utilityStmt, ConstraintsSetStmt);
	bool		copying = IsA(pstmt->utilityStmt, CopyStmt);

	if (setting)
		constraints_being_set++;
	if (copying)
		copies_in_progress++;
	if (IsA(pstmt->utilityStmt, TransactionStmt) &&
		((TransactionStmt *) pstmt->utilityStmt)->kind == TRANS_STMT_COMMIT)
		mark_committing();
	PG_TRY();
	{
		if (prev_process_utility)
			prev_process_utility(pstmt, queryString, readOnlyTree, context,
								 params, queryEnv, dest, qc);
		else
			standard_ProcessUtility(pstmt, queryString, readOnlyTree, context,
									params, queryEnv, dest, qc);
	}
	PG_FINALLY();
	{
		if (setting)
			constraints_being_set--;
		if (copying)
			copies_in_progress--;
	}
	PG_END_TRY();
}

/*
 * stream_subxact_callback
 *		Keep open_executors right across subtransactions: remember it when
 *		one starts, and put it back when one rolls back (its executors are
 *		released without ExecutorEnd).
 */
static void
stream_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
						SubTransactionId parentSubid, void *arg)
{
	MemoryContext oldcxt;

	switch (event)
	{
		case SUBXACT_EVENT_START_SUB:
			oldcxt = MemoryContextSwitchTo(TopTransactionContext);
			open_executors_at_subxact = lcons_int(open_executors,
												  open_executors_at_subxact);
			MemoryContextSwitchTo(oldcxt);
			break;
		case SUBXACT_EVENT_COMMIT_SUB:
		case SUBXACT_EVENT_ABORT_SUB:
			if (open_executors_at_subxact == NIL)
				break;			/* started before the extension was loaded */
			if (event == SUBXACT_EVENT_ABORT_SUB)
				open_executors = linitial_int(open_executors_at_subxact);
			open_executors_at_subxact = list_delete_first(open_executors_at_subxact);
			break;
		case SUBXACT_EVENT_PRE_COMMIT_SUB:
			break;
	}
}

/*
 * count_relcache_change
 *		Relcache callback: count every invalidation processed (see
 *		relcache_changes).  Must not fail or access catalogs.
 */
static void
count_relcache_change(Datum arg, Oid relid)
{
	relcache_changes++;
	if (OidIsValid(heap_only_relid) &&
		(relid == InvalidOid || relid == heap_only_relid))
		heap_only_entry_changed = true;
}

/*
 * stream_assign_init
 *		Register the callbacks, the executor hooks and the utility hook
 *		(from _PG_init).
 */
void
stream_assign_init(void)
{
	RegisterXactCallback(stream_xact_callback, NULL);
	RegisterSubXactCallback(stream_subxact_callback, NULL);
	CacheRegisterRelcacheCallback(count_relcache_change, (Datum) 0);
	prev_executor_start = ExecutorStart_hook;
	ExecutorStart_hook = count_executor_start;
	prev_executor_end = ExecutorEnd_hook;
	ExecutorEnd_hook = count_executor_end;
	prev_process_utility = ProcessUtility_hook;
	ProcessUtility_hook = count_constraints_set;
}

/*
 * stream_xact_has_entry
 *		Make the current transaction's state say that it holds an entry on
 *		the stream, added by stream_add_entry (enable()), so that its
 *		outcome is recorded at commit or abort.
 */
void
stream_xact_has_entry(StreamRef *ref)
{
	XactStream *xs = xact_stream_get(ref);

	xs->has_entry = true;
	xs->early = true;			/* held from enable() to the end */
	xs->slotno = ref->slotno;
	xs->generation = ref->generation;
}

/*
 * stream_release_at_commit
 *		The current transaction disabled stream "relid" or dropped its
 *		table: free the shared slot if, at commit, its catalog row is gone
 *		(see decide_slots_to_free).
 */
void
stream_release_at_commit(Oid relid)
{
	MemoryContext oldcxt = MemoryContextSwitchTo(TopTransactionContext);

	released_streams = lappend_oid(released_streams, relid);
	MemoryContextSwitchTo(oldcxt);
}

