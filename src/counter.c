/*-------------------------------------------------------------------------
 *
 * counter.c
 *	  The durable head of a stream: starting its counter after a server
 *	  start, refilling blocks of numbers from its head sequence, and
 *	  creating that sequence.
 *
 * The head of a stream is recorded in a sequence of its own in the
 * extension's schema (created by enable(), owned by the extension's owner,
 * not owned by any column), whose increment is the number of stream
 * numbers recorded at a time.  A backend hands out numbers only below the
 * end of a block it obtained from that sequence (invariant 2 of shmem.c),
 * so the recorded head is WAL-logged, survives crashes, follows the
 * primary onto streaming standbys and is restored by pg_dump, all by
 * PostgreSQL's own machinery, and is written once per block, not per
 * number.  Since no column owns it, TRUNCATE ... RESTART IDENTITY leaves it
 * alone, and only its owner (a superuser) could set it back.  After a
 * restart the counter starts at the table's maximum + 1; the first
 * reservation then jumps to a fresh block above everything the sequence
 * ever recorded, which covers numbers whose rows were deleted.
 *
 * shmem.c owns the counter; this file does the catalog and sequence work
 * that it asks for (RESERVE_NEEDS_START, RESERVE_NEEDS_BLOCK,
 * RESERVE_NEEDS_TIME_FLOOR) and hands the result back through
 * stream_counter_start, stream_counter_extend and stream_time_floor_newest.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "catalog/dependency.h"
#include "catalog/namespace.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "commands/sequence.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"

#include "stream_seq.h"
#include "counter.h"
#include "shmem.h"
#include "catalog.h"

/*
 * How many blocks a crash can leave the head sequence ahead of the numbers
 * handed out: the block in use plus the 32 values (SEQ_LOG_VALS in
 * sequence.c) that PostgreSQL WAL-logs ahead for every sequence.
 */
#define HEAD_MARGIN_BLOCKS 33

/*
 * stream_recorded_end
 *		The end of the numbers a head sequence records as handed out: every
 *		number handed out is below it.
 */
int64
stream_recorded_end(Oid head_seq, int64 interval)
{
	char	   *query;
	int64		end;
	bool		found;

	query = psprintf("SELECT CASE WHEN is_called THEN last_value + %lld ELSE last_value END "
					 "FROM %s",
					 (long long) interval,
					 stream_qualified_name(head_seq));
	stream_catalog_exec_latest(query, 0, NULL, NULL, &end, 1, &found);
	if (!found)
		elog(ERROR, "could not read head sequence %u", head_seq);
	pfree(query);
	return end;
}

/*
 * stream_table_max
 *		The highest number in the stream table (PG_INT64_MIN if none) that
 *		"snapshot" sees, read through the unique index, as the extension's
 *		owner so that row-level security cannot hide a row.
 *
 *		The query says "column > 0": the first commit after a start runs it
 *		in a transaction that stored rows not yet numbered, for which the
 *		planner keeps the index's predicate "column > 0" as it is
 *		(planner.c), and "max(column)" alone would read the whole table.
 *		Only a table without a number above 0 (empty, or restored from a
 *		version that let numbers start at 0 or below) is read whole.  One
 *		query, not two: between two, PostgreSQL 18 clears the
 *		transaction's xmin when the first one's snapshot is popped, and
 *		planning the second (transient, planner.c) asserts that it is set.
 */
int64
stream_table_max(StreamRef *ref, Snapshot snapshot)
{
	char	   *relname = get_rel_name(ref->relid);
	const char *column = get_attname(ref->relid, ref->seq_attnum, true);
	const char *source;
	char	   *query;
	int64		max_number;
	bool		found;

	if (relname == NULL || column == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("stream table with OID %u was disabled or dropped while in use",
						ref->relid)));
	source = stream_source(ref->relid);
	column = quote_identifier(column);
	query = psprintf("SELECT COALESCE((SELECT pg_catalog.max(%s) FROM %s WHERE %s > 0), "
					 "(SELECT pg_catalog.max(%s) FROM %s))",
					 column, source, column, column, source);
	stream_catalog_exec_in(query, snapshot, &max_number, 1, &found);
	pfree(query);
	return found ? max_number : PG_INT64_MIN;
}

/*
 * stream_table_newest_time
 *		The time column of the stream's highest-numbered row that
 *		"snapshot" sees (DT_NOBEGIN if none, or if it has no time): times
 *		go up with the numbers, so it is the newest time of the table.
 */
TimestampTz
stream_table_newest_time(StreamRef *ref, Snapshot snapshot)
{
	const char *column = quote_identifier(get_attname(ref->relid,
													  ref->seq_attnum, false));
	const char *time_column = quote_identifier(get_attname(ref->relid,
														   ref->time_attnum,
														   false));
	char	   *source = stream_source(ref->relid);
	char	   *query;
	int64		newest;
	bool		found;

	/* "column > 0" when there is such a row, for the index: see stream_table_max */
	query = psprintf("SELECT CASE WHEN (SELECT pg_catalog.max(%s) FROM %s WHERE %s > 0) IS NOT NULL "
					 "THEN (SELECT %s FROM %s WHERE %s > 0 ORDER BY %s DESC LIMIT 1) "
					 "ELSE (SELECT %s FROM %s WHERE %s IS NOT NULL ORDER BY %s DESC LIMIT 1) END",
					 column, source, column,
					 time_column, source, column, column,
					 time_column, source, column, column);
	stream_catalog_exec_in(query, snapshot, &newest, 1, &found);
	pfree(query);
	return found ? (TimestampTz) newest : DT_NOBEGIN;
}

/*
 * stream_start_counter
 *		Start the counter of a stream after a server start (or enable()):
 *		next = the table's maximum + 1 (or the point the stream was trimmed
 *		or truncated to, if higher), with no recorded block yet, so the
 *		first reservation fetches a block from the head sequence and jumps
 *		above every number recorded before.  Until then, horizons are
 *		computed from the table's maximum, which is safe because no number
 *		has been handed out since the start.  Returns the counter's value.
 *
 *		The recorded head is verified against the table.  One behind the
 *		table is reported here and moved forward by the first refill.  One
 *		ahead of the table by more than a crash can explain is reported
 *		too, in the server log only, and kept: rows above the table's
 *		maximum may have been deleted, transactions that failed after taking
 *		numbers leave them unused, and moving the head back could hand
 *		numbers out again.
 *
 *		During recovery the value is only computed, not kept: a standby
 *		replays new rows and a new head without this backend knowing, so a
 *		counter set now would be stale after promotion.
 */
int64
stream_start_counter(StreamRef *ref)
{
	int64		max_number = stream_table_max(ref, GetLatestSnapshot());
	int64		recorded_end = stream_recorded_end(ref->head_seq,
												   ref->head_interval);
	int64		first = stream_catalog_first(ref->relid);
	int64		start;
	int64		block_end;

	/* numbers below the trim point were handed out, even if none remain */
	start = (max_number == PG_INT64_MIN) ? 1 : max_number + 1;
	start = Max(start, first);

	if (recorded_end < start)
		ereport(WARNING,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("recorded head of stream table \"%s\" is behind its rows",
						stream_rel_name(ref->relid)),
				 errdetail("Head sequence \"%s\" records numbers below " INT64_FORMAT " but numbers below " INT64_FORMAT " were handed out.",
						   stream_rel_name(ref->head_seq), recorded_end, start),
				 errhint("The head is rebuilt from the table before the next number is handed out.")));
	else if (recorded_end > start + HEAD_MARGIN_BLOCKS * ref->head_interval)
		ereport(LOG,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("recorded head of stream table \"%s\" is ahead of its rows",
						stream_rel_name(ref->relid)),
				 errdetail("Head sequence \"%s\" records numbers below " INT64_FORMAT ", more than %d blocks of " INT64_FORMAT " above the stream's rows, which end below " INT64_FORMAT ".",
						   stream_rel_name(ref->head_seq), recorded_end,
						   HEAD_MARGIN_BLOCKS, ref->head_interval, start),
				 errhint("New numbers continue above the recorded head: rows above the table's highest number may have been deleted, and their numbers are never handed out again.")));

	if (RecoveryInProgress())
		return start;
	if (!stream_counter_start(ref, start) ||
		!stream_counter_read(ref, &start, &block_end))
		elog(ERROR, "could not start the counter of stream table \"%s\"",
			 stream_rel_name(ref->relid));

	if (ref->time_attnum != InvalidAttrNumber)
		stream_raise_time_floor(ref);
	return start;
}

/*
 * stream_raise_time_floor
 *		Times never go down as numbers go up, also across a restart, a
 *		crash or a promotion whose clock is behind: raise the stream's time
 *		floor to its newest row's time, which new times then start at.
 *		Called once the counter is started, by whichever backend first
 *		needs a time (stream_reserve hands none out before): the counter
 *		may have been started by redo (crash recovery, or a standby's
 *		replay before its promotion), which knows no time.  Every row the
 *		latest snapshot misses took its time from the floor while this
 *		server ran, so it is covered already.
 */
void
stream_raise_time_floor(StreamRef *ref)
{
	stream_time_floor_newest(ref, stream_table_newest_time(ref, GetLatestSnapshot()));
}

/*
 * refill_block
 *		Record new blocks of numbers in the head sequence until the
 *		counter's block has "count" numbers left, and make them available.
 *		Refills of one stream are serialized by a lock on the sequence that
 *		conflicts only with itself, so blocks are installed in the order
 *		the sequence handed them out: one after the other.  A sequence
 *		found behind the counter (set back by its owner) is moved forward
 *		first; it never moves back.
 */
static void
refill_block(StreamRef *ref, int64 count)
{
	int64		next;
	int64		block_end;
	int64		block;

	LockRelationOid(ref->head_seq, ShareUpdateExclusiveLock);

	while (stream_counter_read(ref, &next, &block_end) &&
		   block_end - next < count)
	{
		block = nextval_internal(ref->head_seq, false);
		if (block + ref->head_interval <= next)
		{
			int			save_nestlevel;
			Oid			save_userid;
			int			save_sec_context;

			ereport(LOG,
					(errmsg("moving recorded head of stream table \"%s\" forward to " INT64_FORMAT,
							stream_rel_name(ref->relid), next),
					 errdetail("Head sequence \"%s\" gave block " INT64_FORMAT ", below numbers already in use.",
							   stream_rel_name(ref->head_seq), block)));
			stream_run_as(stream_catalog_owner(), &save_nestlevel, &save_userid,
						  &save_sec_context);
			DirectFunctionCall3(setval3_oid, ObjectIdGetDatum(ref->head_seq),
								Int64GetDatum(next), BoolGetDatum(false));
			stream_run_as_end(save_nestlevel, save_userid, save_sec_context);
			block = nextval_internal(ref->head_seq, false);
		}
		stream_counter_extend(ref, block, block + ref->head_interval);
	}

	UnlockRelationOid(ref->head_seq, ShareUpdateExclusiveLock);
}

/*
 * stream_try_take_numbers
 *		Reserve "count" consecutive numbers for the current transaction (see
 *		stream_reserve), the first in *lo and the reservation's time in
 *		*numbered_at, without any catalog work: false when some is needed
 *		first (stream_prepare_numbers), as it may be again after another
 *		transaction took numbers meanwhile.  "logger" writes the record that
 *		tells standbys, if given.
 */
bool
stream_try_take_numbers(StreamRef *ref, int64 count, bool have_entry,
						int64 *lo, TimestampTz *numbered_at,
						StreamReservationLogger logger, void *logger_arg)
{
	return stream_reserve(ref, count, have_entry, lo, numbered_at, logger,
						  logger_arg) == RESERVE_DONE;
}

/*
 * stream_prepare_numbers
 *		The catalog work a reservation of "count" numbers needs first:
 *		start the counter, record blocks enough for them, raise the time
 *		floor.  Done when stream_reserve says nothing is missing.
 */
void
stream_prepare_numbers(StreamRef *ref, int64 count)
{
	int64		next;
	int64		block_end;
	bool		started = stream_counter_read(ref, &next, &block_end);

	/* read again only after a start: the reservation checks it anyway */
	if (!started)
	{
		(void) stream_start_counter(ref);
		started = stream_counter_read(ref, &next, &block_end);
	}
	if (started && block_end - next < count)
		refill_block(ref, count);
	if (ref->time_attnum != InvalidAttrNumber && !stream_time_floor_known(ref))
		stream_raise_time_floor(ref);
}

/*
 * stream_take_numbers
 *		Reserve "count" consecutive numbers for the current transaction (see
 *		stream_reserve), doing the catalog work it asks for first.  The
 *		first is in *lo, the reservation's time in *numbered_at.
 */
void
stream_take_numbers(StreamRef *ref, int64 count, bool have_entry, int64 *lo,
					TimestampTz *numbered_at)
{
	while (!stream_try_take_numbers(ref, count, have_entry, lo, numbered_at,
									NULL, NULL))
		stream_prepare_numbers(ref, count);
}

/*
 * stream_counter_raise
 *		Make sure the stream never hands out "number" or anything below
 *		it: a row arrived with that number from elsewhere (a subscription's
 *		apply worker, or a session with session_replication_role =
 *		replica).  The counter is started first if it was not: started
 *		later, it would read the table's maximum without this row, which
 *		is not committed yet.  The head sequence records it (refill_block
 *		does nothing while the recorded block still covers it).
 */
void
stream_counter_raise(StreamRef *ref, int64 number)
{
	int64		next;
	int64		block_end;

	if (number == PG_INT64_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("stream number " INT64_FORMAT " of stream table \"%s\" is out of range",
						number, stream_rel_name(ref->relid)),
				 errdetail("No number could follow it.")));
	while (!stream_counter_at_least(ref, number + 1))
		(void) stream_start_counter(ref);

	/*
	 * Past the recorded block: record one above the number now, so that
	 * the head sequence (which replication does not copy) stays ahead of
	 * every number in use, as after a reservation; a restart then starts
	 * above it even if the newest rows are deleted.
	 */
	if (stream_counter_read(ref, &next, &block_end) && next >= block_end)
		refill_block(ref, 1);
}

/*
 * stream_create_head_sequence
 *		Create the head sequence of a new stream in the extension's schema,
 *		owned by the extension's owner, recording numbers below "start" as
 *		handed out.  Its name says which table and column it serves; a
 *		suffix keeps it unique.
 */
Oid
stream_create_head_sequence(Oid relid, const char *column, int64 start,
							int64 interval)
{
	Oid			nsp = stream_namespace(false);
	char	   *base;
	char	   *name;
	int			suffix = 0;
	char	   *query;
	Oid			seqid;

	base = psprintf("%s_%s_head", stream_clip_name(stream_rel_name(relid), 30),
					stream_clip_name(column, 20));
	name = pstrdup(base);
	while (OidIsValid(get_relname_relid(name, nsp)))
		name = psprintf("%s%d", base, ++suffix);

	query = psprintf("CREATE SEQUENCE stream_seq.%s INCREMENT BY %lld "
					 "MINVALUE %lld START WITH %lld NO CYCLE",
					 quote_identifier(name), (long long) interval,
					 (long long) Min(start, 1), (long long) start);
	stream_catalog_exec(query, 0, NULL, NULL, NULL, 0, NULL);
	seqid = get_relname_relid(name, nsp);

	/*
	 * Made while ALTER EXTENSION UPDATE runs, it would become a member of
	 * the extension, which pg_dump skips and only DROP EXTENSION drops: it
	 * belongs to the stream, like those enable() makes.
	 */
	if (creating_extension)
		deleteDependencyRecordsForClass(RelationRelationId, seqid,
										ExtensionRelationId,
										DEPENDENCY_EXTENSION);
	query = psprintf("COMMENT ON SEQUENCE stream_seq.%s IS %s",
					 quote_identifier(name),
					 quote_literal_cstr(psprintf("records the head of stream table %s (stream_seq)",
												 stream_qualified_name(relid))));
	stream_catalog_exec(query, 0, NULL, NULL, NULL, 0, NULL);
	stream_grant_head_access(seqid);	/* for pg_dump -U owner */
	return seqid;
}
