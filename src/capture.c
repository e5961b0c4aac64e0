/*-------------------------------------------------------------------------
 *
 * capture.c
 *	  Capturing the rows a transaction inserts into stream tables: the
 *	  index access method stream_seq_capture, whose one index on a stream
 *	  table (or partition) stores nothing and records, for each row the
 *	  executor indexes, its TID in the transaction's capture log; and the
 *	  refusal of a number or time written by hand.  The commit-time write
 *	  (commit.c) numbers the captured rows.
 *
 * PostgreSQL calls an index's insert function for every row an INSERT,
 * COPY (batched or not), INSERT ... ON CONFLICT, a non-heap-only UPDATE
 * or logical replication's apply stores, on the leaf partition it went
 * to, in the order the rows are stored (ExecInsertIndexTuples), once the
 * row is on its page; an index without predicate gets every row.  Unlike
 * a row trigger it costs the executor nothing else, and it leaves COPY's
 * batches alone.  Not called: by table rewrites (ALTER TABLE, CLUSTER,
 * VACUUM FULL), which build indexes instead (the write checks the
 * table's storage, see CapturedRel); for a heap-only UPDATE (the number
 * does not change; the write follows the chain); and by CREATE INDEX
 * CONCURRENTLY and REINDEX CONCURRENTLY's validation, which insert every
 * existing row with ii_Concurrent set: ignored.
 *
 * The log follows subtransactions: an entry made in a subtransaction that
 * rolls back is dropped (the log is cut back to where it stood when the
 * subtransaction began).  An entry for a row that is gone by commit (a
 * DELETE, the conflict of INSERT ... ON CONFLICT, which "super-deletes"
 * the row it had inserted: its line pointer may then be taken by another
 * row) is recognised by the write from the tuple, which it checks anyway.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/amapi.h"
#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/reloptions.h"
#include "access/xact.h"
#include "catalog/pg_publication.h"
#include "commands/trigger.h"
#include "commands/vacuum.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "nodes/pathnodes.h"
#include "storage/bufmgr.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

#include "stream_seq.h"
#include "capture.h"
#include "catalog.h"
#include "pagewrite.h"
#include "partition.h"
#include "replication.h"

PG_FUNCTION_INFO_V1(stream_seq_capture_handler);

/*
 * The transaction's capture log, in TopTransactionContext: the tables and
 * the rows, in the order they were stored.
 */
static CapturedRel *captured_rels = NULL;
static int	ncaptured_rels = 0;
static int	captured_rels_size = 0;
static CapturedRow *captured_rows = NULL;
static int64 ncaptured_rows = 0;
static int64 captured_rows_size = 0;

/*
 * Rows stored in replica mode with a number and a time below the
 * stream's time floor (or none): their time is raised at commit, by an
 * update (the row's entries in indexes on the time column were made with
 * the time it came with).
 */
static CapturedTimeFix *captured_fixes = NULL;
static int64 ncaptured_fixes = 0;
static int64 captured_fixes_size = 0;

/* The table the last row was captured for (most rows follow one). */
static Oid	last_relid = InvalidOid;
static int	last_rel = -1;

/*
 * The table of the last first row of a transaction, and partition.c's
 * entry for it (never freed; a relcache invalidation marks it invalid):
 * kept across transactions, as most write into one table.
 */
static Oid	cached_target_relid = InvalidOid;
static StreamTarget *cached_target = NULL;

/*
 * Where the log (rows, time fixes) stood when each open subtransaction
 * began (newest first).
 */
typedef struct CaptureMark
{
	int64		rows;
	int64		fixes;
} CaptureMark;

static List *captured_at_subxact = NIL;

/*
 * The last table found to be neither a stream table nor a partition of
 * one although it has a capture index (CREATE TABLE ... (LIKE stream
 * INCLUDING ALL) copies it): its rows are not captured.  Forgotten at any
 * invalidation of its relcache entry (enable(), ATTACH PARTITION).
 */
static Oid	not_stream_relid = InvalidOid;
static bool not_stream_callback = false;

/* Set once the commit-time write has begun: no row may follow. */
static bool capture_closed = false;

/*
 * The hint of every refusal of a written number: the page that says what
 * is accepted, and how each ORM keeps the column read-only.
 */
#define APPLICATIONS_HINT \
	"Leave the column out of the statement, or write back the value the row has; see the stream_seq documentation, doc/applications.md."

/*
 * stream_report_late_row
 *		The error for a row inserted into a stream table after the
 *		commit-time write began (by another extension's pre-commit callback,
 *		say): it would commit without a number.
 */
void
stream_report_late_row(const char *relname)
{
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("cannot insert into stream table \"%s\" while the transaction is committing",
					relname),
			 errdetail("The row was inserted after stream_seq assigned the transaction's numbers; it would have been committed without one.")));
}

/*
 * stream_report_written_value
 *		The error for a row inserted with a value in the stream column or
 *		the time column ("attnum") other than the placeholder its default
 *		puts there.
 */
void
stream_report_written_value(Relation rel, StreamTarget *target,
							AttrNumber attnum)
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
 * check_update_publishable
 *		PostgreSQL's check that the publications of "rel" can publish an
 *		UPDATE of it (a replica identity, a row filter and a column list
 *		within it), with what the user sees added: the update is the
 *		commit-time write's, not one of the statement's.  PostgreSQL's
 *		message and SQLSTATE are kept; the hint says why an INSERT meets
 *		them.
 */
static void
check_update_publishable(Relation rel)
{
	MemoryContext cxt = CurrentMemoryContext;

	PG_TRY();
	{
		CheckCmdReplicaIdentity(rel, CMD_UPDATE);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		ereport(ERROR,
				(errcode(edata->sqlerrcode),
				 errmsg_internal("%s", edata->message),
				 edata->detail != NULL ? errdetail_internal("%s", edata->detail) : 0,
				 errhint("With wal_level logical, rows of stream table \"%s\" get their numbers by an UPDATE at commit, which its publications must be able to publish. %s",
						 RelationGetRelationName(rel),
						 edata->hint != NULL ? edata->hint :
						 "Make the columns of the publication's row filter and column list part of the replica identity (ALTER TABLE ... REPLICA IDENTITY), or take the table out of the publication.")));
	}
	PG_END_TRY();
}

/*
 * check_publications
 *		Refuse, at the first row of a transaction in a stream table, what
 *		would only fail later: with wal_level logical the number is written
 *		by an UPDATE at commit, so a published stream table must publish
 *		updates (else subscribers get the rows without their numbers) and
 *		have a replica identity (else the publisher commits and every
 *		subscriber's apply fails).  Where pglogical is installed, its
 *		replication sets too (replication.c).
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
	/* an update no publication publishes is refused by none */
	if (pubdesc.pubactions.pubupdate)
		check_update_publishable(rel);
}

/*
 * forget_not_stream
 *		Relcache callback: the table remembered as not a stream may have
 *		become one.  Must not fail.
 */
static void
forget_not_stream(Datum arg, Oid relid)
{
	if (!OidIsValid(relid) || relid == not_stream_relid)
		not_stream_relid = InvalidOid;
}

/*
 * in_a_stream
 *		Whether "rel", which has a capture index, is a stream table or a
 *		partition of one.  A copy of a stream table's definition
 *		(CREATE TABLE ... (LIKE ... INCLUDING INDEXES)), a table restored
 *		alone before enable(), is not: an ordinary table, whose rows
 *		nothing numbers.
 */
static bool
in_a_stream(Relation rel)
{
	Oid			relid = RelationGetRelid(rel);

	if (relid == not_stream_relid)
		return false;
	if (stream_catalog_has(relid) ||
		(rel->rd_rel->relispartition && OidIsValid(stream_root_of(relid))))
		return true;
	if (!not_stream_callback)
	{
		CacheRegisterRelcacheCallback(forget_not_stream, (Datum) 0);
		not_stream_callback = true;
	}
	not_stream_relid = relid;
	return false;
}

/*
 * stream_capture_target_of
 *		What partition.c says of "rel", which has a capture index, if it is
 *		a stream table or a partition of one (in_a_stream), else NULL.  The
 *		entry is kept for the table's rows, and tells while it is valid.
 */
StreamTarget *
stream_capture_target_of(Relation rel)
{
	Oid			relid = RelationGetRelid(rel);

	if (relid == cached_target_relid && cached_target->valid)
		return cached_target;
	if (!in_a_stream(rel))
		return NULL;
	cached_target = stream_lookup_target(rel);
	cached_target_relid = relid;
	return cached_target;
}

/*
 * captured_rel_for
 *		The index of "rel" in the transaction's tables, added (and its
 *		publications checked) on its first row; -1 if it is not in a
 *		stream (in_a_stream).  A table whose storage changed since
 *		(TRUNCATE, or a rewrite by ALTER TABLE or CLUSTER in this
 *		transaction) is marked: the TIDs captured before point into
 *		storage that is gone.
 */
static int
captured_rel_for(Relation rel)
{
	Oid			relid = RelationGetRelid(rel);
	CapturedRel *crel;
	int			i;

	if (relid == last_relid)
		i = last_rel;
	else
	{
		for (i = 0; i < ncaptured_rels; i++)
		{
			if (captured_rels[i].relid == relid)
				break;
		}
		if (i == ncaptured_rels)
		{
			StreamTarget *target;

			target = stream_capture_target_of(rel);
			if (target == NULL)
				return -1;

			check_publications(rel, target);
			if (ncaptured_rels == captured_rels_size)
			{
				captured_rels_size = Max(4, captured_rels_size * 2);
				if (captured_rels == NULL)
					captured_rels = MemoryContextAlloc(TopTransactionContext,
													   captured_rels_size * sizeof(CapturedRel));
				else
					captured_rels = repalloc(captured_rels,
											 captured_rels_size * sizeof(CapturedRel));
			}
			crel = &captured_rels[ncaptured_rels++];
			crel->relid = relid;
			crel->target = target;
			crel->storage = stream_rel_storage(rel);
			crel->rewritten = false;
			crel->first_row = -1;
		}
		last_relid = relid;
		last_rel = i;
	}
	crel = &captured_rels[i];
	if (memcmp(&crel->storage, &stream_rel_storage(rel), sizeof(StreamStorage)) != 0)
	{
		crel->rewritten = true;
		crel->storage = stream_rel_storage(rel);
	}
	return i;
}

/*
 * stream_capture_target
 *		What partition.c says now about a captured table: its cache entry,
 *		looked up again if a relcache invalidation marked it.
 */
StreamTarget *
stream_capture_target(CapturedRel *crel)
{
	if (!crel->target->valid)
	{
		Relation	rel = relation_open(crel->relid, NoLock);

		crel->target = stream_lookup_target(rel);
		relation_close(rel, NoLock);
	}
	return crel->target;
}

/*
 * stream_capture_row
 *		Record that the current transaction stored the row at "tid" of
 *		"rel" (a stream table or a partition of one), to be numbered at
 *		commit.
 */
void
stream_capture_row(Relation rel, ItemPointer tid)
{
	int			rel_index;
	CapturedRow *row;

	if (capture_closed)
		stream_report_late_row(RelationGetRelationName(rel));
	rel_index = captured_rel_for(rel);
	if (rel_index < 0)
		return;					/* not in a stream: nothing to number */
	if (ncaptured_rows == captured_rows_size)
	{
		/*
		 * Small at first: a log of 1,024 rows would be a block of its own,
		 * allocated and freed by every transaction however few rows it
		 * stores.
		 */
		captured_rows_size = Max(64, captured_rows_size * 2);
		if (captured_rows == NULL)
			captured_rows = MemoryContextAllocHuge(TopTransactionContext,
												   captured_rows_size * sizeof(CapturedRow));
		else
			captured_rows = repalloc_huge(captured_rows,
										  captured_rows_size * sizeof(CapturedRow));
	}
	if (captured_rels[rel_index].first_row < 0)
		captured_rels[rel_index].first_row = ncaptured_rows;
	row = &captured_rows[ncaptured_rows++];
	row->rel = rel_index;
	row->tid = *tid;
}

/*
 * capture_time_fix
 *		Record that the replicated row at "tid" of the table "rel_index"
 *		gets the time "at" at commit.
 */
static void
capture_time_fix(int rel_index, ItemPointer tid, TimestampTz at)
{
	CapturedTimeFix *fix;

	if (ncaptured_fixes == captured_fixes_size)
	{
		captured_fixes_size = Max(64, captured_fixes_size * 2);
		if (captured_fixes == NULL)
			captured_fixes = MemoryContextAllocHuge(TopTransactionContext,
													captured_fixes_size * sizeof(CapturedTimeFix));
		else
			captured_fixes = repalloc_huge(captured_fixes,
										   captured_fixes_size * sizeof(CapturedTimeFix));
	}
	fix = &captured_fixes[ncaptured_fixes++];
	fix->rel = rel_index;
	fix->tid = *tid;
	fix->at = at;
}

/*
 * stream_captured_time_fixes
 *		The replicated rows whose time is raised at commit.
 */
int64
stream_captured_time_fixes(CapturedTimeFix **fixes)
{
	*fixes = captured_fixes;
	return ncaptured_fixes;
}

/*
 * stream_captured, stream_captured_rels
 *		The transaction's captured rows, in the order they were stored, and
 *		the tables they belong to.
 */
int64
stream_captured(CapturedRow **rows)
{
	*rows = captured_rows;
	return ncaptured_rows;
}

int
stream_captured_rels(CapturedRel **rels)
{
	*rels = captured_rels;
	return ncaptured_rels;
}

/*
 * stream_capture_has_rows_of
 *		Whether the transaction has stored rows of stream "stream" (in its
 *		table or a partition) that are not yet numbered.
 */
bool
stream_capture_has_rows_of(Oid stream)
{
	int			i;

	for (i = 0; i < ncaptured_rels; i++)
	{
		CapturedRel *crel = &captured_rels[i];

		if (crel->first_row >= 0 &&
			(crel->relid == stream || crel->target->stream == stream))
			return true;
	}
	return false;
}

/*
 * stream_capture_has_rows_in
 *		Whether the transaction has stored rows into table "relid" (itself,
 *		not its partitions) that are not yet numbered: rows its snapshots
 *		see with the placeholder.  For the planner (planner.c).
 */
bool
stream_capture_has_rows_in(Oid relid)
{
	int			i;

	for (i = 0; i < ncaptured_rels; i++)
	{
		if (captured_rels[i].relid == relid)
			return captured_rels[i].first_row >= 0;
	}
	return false;
}

/*
 * stream_capture_close, stream_capture_closed
 *		The commit-time write begins: a row stored after it would commit
 *		without a number, and is refused.
 */
void
stream_capture_close(void)
{
	capture_closed = true;
}

bool
stream_capture_closed(void)
{
	return capture_closed;
}

/*
 * stream_capture_reset
 *		Forget the log at the end of the transaction (its memory goes with
 *		TopTransactionContext).  Must not fail.
 */
void
stream_capture_reset(void)
{
	captured_rels = NULL;
	ncaptured_rels = 0;
	captured_rels_size = 0;
	captured_rows = NULL;
	ncaptured_rows = 0;
	captured_rows_size = 0;
	captured_fixes = NULL;
	ncaptured_fixes = 0;
	captured_fixes_size = 0;
	last_relid = InvalidOid;
	last_rel = -1;
	captured_at_subxact = NIL;
	capture_closed = false;
}

/*
 * stream_capture_subxact_start, stream_capture_subxact_end
 *		A subtransaction begins: remember where the log stands.  It ends:
 *		if it rolled back, cut the log back to there (its rows are gone).
 */
void
stream_capture_subxact_start(void)
{
	MemoryContext oldcxt = MemoryContextSwitchTo(TopTransactionContext);
	CaptureMark *mark = palloc(sizeof(CaptureMark));

	mark->rows = ncaptured_rows;
	mark->fixes = ncaptured_fixes;
	captured_at_subxact = lcons(mark, captured_at_subxact);
	MemoryContextSwitchTo(oldcxt);
}

void
stream_capture_subxact_end(bool committed)
{
	CaptureMark *mark;

	if (captured_at_subxact == NIL)
		return;					/* began before the library was loaded */
	mark = linitial(captured_at_subxact);
	if (!committed)
	{
		int			i;

		ncaptured_rows = Min(ncaptured_rows, mark->rows);
		ncaptured_fixes = Min(ncaptured_fixes, mark->fixes);
		for (i = 0; i < ncaptured_rels; i++)
		{
			if (captured_rels[i].first_row >= ncaptured_rows)
				captured_rels[i].first_row = -1;
		}
	}
	pfree(mark);
	captured_at_subxact = list_delete_first(captured_at_subxact);
}

/*
 * stored_by_update
 *		Whether the row version at "tid" was made by an UPDATE (not an
 *		INSERT): looked at only for a row that came with a value.
 */
static bool
stored_by_update(Relation rel, ItemPointer tid)
{
	Buffer		buffer = ReadBuffer(rel, ItemPointerGetBlockNumber(tid));
	Page		page;
	ItemId		lp;
	bool		updated = false;

	LockBuffer(buffer, BUFFER_LOCK_SHARE);
	page = BufferGetPage(buffer);
	lp = PageGetItemId(page, ItemPointerGetOffsetNumber(tid));
	if (ItemIdIsNormal(lp))
		updated = (((HeapTupleHeader) PageGetItem(page, lp))->t_infomask &
				   HEAP_UPDATED) != 0;
	UnlockReleaseBuffer(buffer);
	return updated;
}

/*
 * guard_switched_off
 *		Whether the table's guard trigger is disabled, as a data-only
 *		restore with --disable-triggers leaves it while it loads rows with
 *		their numbers (stream_seq lets it be disabled only while the table
 *		is not in its catalog yet, see check_stream_table): such rows are
 *		stored as they come, as they were when the guard trigger refused
 *		them.  Looked at only for a row that came with a value.
 */
static bool
guard_switched_off(Relation rel)
{
	int			i;

	for (i = 0; rel->trigdesc != NULL && i < rel->trigdesc->numtriggers; i++)
	{
		Trigger    *trigger = &rel->trigdesc->triggers[i];

		if (strcmp(trigger->tgname, "stream_seq_guard") == 0 &&
			stream_trigger_disabled(RelationGetRelid(rel), trigger))
			return true;
	}
	return false;
}

/*
 * target_written_column
 *		Of the index's columns, the stream column or the time column of
 *		"target" if it has a value other than its placeholder (the stream
 *		column first), or InvalidAttrNumber; *number gets the stream
 *		column's value (0 if none).
 */
static AttrNumber
target_written_column(IndexInfo *indexInfo, StreamTarget *target,
					  Datum *values, bool *isnull, int64 *number)
{
	AttrNumber	written = InvalidAttrNumber;
	int			i;

	*number = 0;
	for (i = 0; i < indexInfo->ii_NumIndexAttrs; i++)
	{
		AttrNumber	attnum = indexInfo->ii_IndexAttrNumbers[i];

		if (isnull[i])
			continue;
		if (attnum == target->seq_attnum &&
			DatumGetInt64(values[i]) != STREAM_SEQ_PLACEHOLDER)
		{
			written = attnum;
			*number = DatumGetInt64(values[i]);
		}
		else if (attnum == target->time_attnum && written == InvalidAttrNumber &&
				 DatumGetTimestampTz(values[i]) != STREAM_TIME_PLACEHOLDER)
			written = attnum;
	}
	return written;
}

/*
 * written_column
 *		target_written_column before the table's stream is looked up: the
 *		index's first column is the stream column, its second the time
 *		column (enable() makes it so).
 */
static AttrNumber
written_column(IndexInfo *indexInfo, Relation heapRel, Datum *values,
			   bool *isnull, int64 *number)
{
	StreamTarget assumed;

	memset(&assumed, 0, sizeof(assumed));
	assumed.seq_attnum = indexInfo->ii_IndexAttrNumbers[0];
	assumed.time_attnum = indexInfo->ii_NumIndexAttrs > 1 ?
		indexInfo->ii_IndexAttrNumbers[1] : InvalidAttrNumber;
	return target_written_column(indexInfo, &assumed, values, isnull, number);
}

/*
 * replica_time
 *		A row stored in replica mode with a number: if the stream has a time
 *		column and the row's time would go below a time taken here before
 *		(or it has none), its time is raised at commit (an INSERT, not an
 *		UPDATE, whose trigger does it; see stream_replica_time).
 */
static void
replica_time(IndexInfo *indexInfo, StreamTarget *target, Datum *values,
			 bool *isnull, int rel_index, Relation heapRel, ItemPointer tid)
{
	int			i;
	TimestampTz at;

	if (target->time_attnum == InvalidAttrNumber || stored_by_update(heapRel, tid))
		return;
	for (i = 0; i < indexInfo->ii_NumIndexAttrs; i++)
	{
		if (indexInfo->ii_IndexAttrNumbers[i] != target->time_attnum)
			continue;
		if (stream_replica_time(target, isnull[i],
								isnull[i] ? 0 : DatumGetTimestampTz(values[i]), &at))
			capture_time_fix(rel_index, tid, at);
		return;
	}
}

/*
 * The mark of a statement that left out the stream column's "seq > 0"
 * indexes (insertindexes.c), in the capture index's information: every
 * row with a number is refused, as no index the row would enter gets it.
 */
static const char numbered_rows_refused = 0;

/*
 * stream_capture_refuse_numbered
 *		Mark the capture index's information of a statement that left out
 *		the indexes a row with a number would enter: every such row is
 *		refused (capture_insert), whatever the session's state lets through
 *		otherwise.
 */
void
stream_capture_refuse_numbered(IndexInfo *capture_info)
{
	capture_info->ii_AmCache = (void *) &numbered_rows_refused;
}

/*
 * stream_capture_refuses_numbered
 *		Whether "capture_info" was marked by stream_capture_refuse_numbered.
 */
bool
stream_capture_refuses_numbered(IndexInfo *capture_info)
{
	return capture_info->ii_AmCache == &numbered_rows_refused;
}

/*
 * refuse_in_replica_mode
 *		The error for a row with a number that comes in replica mode to a
 *		statement that began in origin mode and left out the indexes such
 *		a row enters.
 */
static void
refuse_in_replica_mode(Relation rel)
{
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("cannot insert a row with a number into stream table \"%s\" in this statement",
					RelationGetRelationName(rel)),
			 errdetail("session_replication_role was set to replica after the INSERT began; the INSERT was set up for rows without a number."),
			 errhint("Set session_replication_role before the statement that inserts the rows.")));
}

/*
 * capture_insert
 *		The index's insert function: capture the row, unless it has a value
 *		of its own.  "values" are the index's columns: the stream column
 *		and, on a stream with one, the time column.
 *
 *		A row an INSERT stores with a number or a time other than the
 *		placeholders is refused here, at once (the refusal of rows that an
 *		INSERT ... ON CONFLICT turns into an update never comes here: the
 *		conflict is found before the row is stored).  A version an UPDATE
 *		stores comes here only when it is not heap-only and the UPDATE
 *		names a column of the index: it has the number the row had (the
 *		guard triggers, guard.c, refuse a change), or the placeholder of a
 *		row of this transaction, whose version as inserted was captured and
 *		leads the write to this one.
 */
static bool
capture_insert(Relation index, Datum *values, bool *isnull,
			   ItemPointer heap_tid, Relation heapRel,
			   IndexUniqueCheck checkUnique, bool indexUnchanged,
			   IndexInfo *indexInfo)
{
	StreamTarget *target;
	int			rel_index;
	AttrNumber	written;
	int64		number = 0;
	bool		refuse;

	if (indexInfo->ii_Concurrent || indexUnchanged)
		return false;

	/*
	 * A version an UPDATE stored with a number of its own (the one the row
	 * had; the guard triggers refuse a change): nothing to capture.  Found
	 * from the tuple, for a row with a value only; in replica mode, such a
	 * row moves the counter below.
	 */
	written = written_column(indexInfo, heapRel, values, isnull, &number);
	refuse = indexInfo->ii_AmCache == &numbered_rows_refused;
	if (written != InvalidAttrNumber && refuse &&
		SessionReplicationRole == SESSION_REPLICATION_ROLE_REPLICA)
		refuse_in_replica_mode(heapRel);
	if (written != InvalidAttrNumber && !refuse &&
		SessionReplicationRole != SESSION_REPLICATION_ROLE_REPLICA &&
		(stored_by_update(heapRel, heap_tid) || guard_switched_off(heapRel)))
		return false;

	rel_index = captured_rel_for(heapRel);
	if (rel_index < 0)
	{
		/* the statement found the table in a stream, under its lock */
		if (refuse && written != InvalidAttrNumber)
			elog(ERROR, "table \"%s\" left its stream during an INSERT",
				 RelationGetRelationName(heapRel));
		return false;			/* not in a stream: nothing to number */
	}
	target = stream_capture_target(&captured_rels[rel_index]);
	written = target_written_column(indexInfo, target, values, isnull,
									&number);

	/*
	 * Replica mode (a subscription's apply worker, or a session that set
	 * it): a row comes with the number it has where it came from, or
	 * without one, which the update that follows brings (replication.c).
	 */
	if (SessionReplicationRole == SESSION_REPLICATION_ROLE_REPLICA)
	{
		if (number != 0)
		{
			stream_replica_number(target, number);
			replica_time(indexInfo, target, values, isnull, rel_index,
						 heapRel, heap_tid);
		}
		else if (!stream_in_replication_worker() &&
				 !stored_by_update(heapRel, heap_tid))
			stream_report_replica_unnumbered(target);
		return false;
	}
	if (written != InvalidAttrNumber)
		stream_report_written_value(heapRel, target, written);
	if (target->sealed)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("partition \"%s\" of stream table \"%s\" is sealed",
						RelationGetRelationName(heapRel), stream_rel_name(target->stream)),
				 errdetail("A sealed partition takes no more rows; its range of numbers is final."),
				 errhint("Insert rows whose partition key falls in a newer partition, or let it take rows again with stream_seq.unseal_partition().")));
	if (target->detaching)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("partition \"%s\" of stream table \"%s\" is being detached",
						RelationGetRelationName(heapRel), stream_rel_name(target->stream)),
				 errdetail("Its numbers have left the stream; readers no longer see it."),
				 errhint("Insert the row again: it goes to another partition.")));
	stream_capture_row(heapRel, heap_tid);
	return false;
}

/*
 * stream_is_capture_index
 *		Whether "index" is of access method stream_seq_capture (told by its
 *		insert function, without a catalog lookup).
 */
bool
stream_is_capture_index(Relation index)
{
	return index->rd_indam != NULL && index->rd_indam->aminsert == capture_insert;
}

/*
 * capture_build
 *		Build the index: there is nothing to store.  Rows stored before the
 *		index existed were numbered by enable(), or by the write that
 *		captured them otherwise (see commit.c's rewritten tables).
 */
static IndexBuildResult *
capture_build(Relation heap, Relation index, IndexInfo *indexInfo)
{
	IndexBuildResult *result = palloc0(sizeof(IndexBuildResult));

	return result;
}

/*
 * capture_buildempty
 *		The initialization fork of an unlogged table's index: empty (stream
 *		tables are never unlogged).
 */
static void
capture_buildempty(Relation index)
{
}

/*
 * capture_bulkdelete, capture_vacuumcleanup
 *		VACUUM: the index holds no entry to delete or count.
 */
static IndexBulkDeleteResult *
capture_bulkdelete(IndexVacuumInfo *info, IndexBulkDeleteResult *stats,
				   IndexBulkDeleteCallback callback, void *callback_state)
{
	return NULL;
}

static IndexBulkDeleteResult *
capture_vacuumcleanup(IndexVacuumInfo *info, IndexBulkDeleteResult *stats)
{
	return NULL;
}

/*
 * capture_costestimate
 *		The planner never builds a path for an index that cannot be scanned
 *		(no amgettuple, no amgetbitmap); should it ask, the answer is: too
 *		costly to use.
 */
static void
capture_costestimate(PlannerInfo *root, IndexPath *path, double loop_count,
					 Cost *indexStartupCost, Cost *indexTotalCost,
					 Selectivity *indexSelectivity, double *indexCorrelation,
					 double *indexPages)
{
	*indexStartupCost = 1.0e10;
	*indexTotalCost = 1.0e10;
	*indexSelectivity = 1.0;
	*indexCorrelation = 0.0;
	*indexPages = 1;
}

/*
 * capture_options
 *		Storage parameters: none are accepted.
 */
static bytea *
capture_options(Datum reloptions, bool validate)
{
	if (validate && PointerIsValid(DatumGetPointer(reloptions)))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("access method \"stream_seq_capture\" takes no storage parameters")));
	return NULL;
}

/*
 * capture_validate
 *		Operator classes of the access method hold nothing to check (they
 *		name the column types it may be created on).
 */
static bool
capture_validate(Oid opclassoid)
{
	return true;
}

/*
 * capture_beginscan, capture_rescan, capture_endscan
 *		Never called (the index has no scan functions), but required.
 */
static IndexScanDesc
capture_beginscan(Relation r, int nkeys, int norderbys)
{
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("an index of access method \"stream_seq_capture\" cannot be scanned")));
	return NULL;
}

static void
capture_rescan(IndexScanDesc scan, ScanKey scankey, int nscankeys,
			   ScanKey orderbys, int norderbys)
{
}

static void
capture_endscan(IndexScanDesc scan)
{
}

/*
 * stream_seq_capture_handler
 *		SQL: the handler of access method stream_seq_capture.
 */
Datum
stream_seq_capture_handler(PG_FUNCTION_ARGS)
{
	IndexAmRoutine *amroutine = makeNode(IndexAmRoutine);

	amroutine->amstrategies = 0;
	amroutine->amsupport = 0;
	amroutine->amcanmulticol = true;
	amroutine->amoptionalkey = true;
	amroutine->amparallelvacuumoptions = VACUUM_OPTION_NO_PARALLEL;
	amroutine->amkeytype = InvalidOid;

	amroutine->ambuild = capture_build;
	amroutine->ambuildempty = capture_buildempty;
	amroutine->aminsert = capture_insert;
	amroutine->ambulkdelete = capture_bulkdelete;
	amroutine->amvacuumcleanup = capture_vacuumcleanup;
	amroutine->amcostestimate = capture_costestimate;
	amroutine->amoptions = capture_options;
	amroutine->amvalidate = capture_validate;
	amroutine->ambeginscan = capture_beginscan;
	amroutine->amrescan = capture_rescan;
	amroutine->amendscan = capture_endscan;

	PG_RETURN_POINTER(amroutine);
}
