/*-------------------------------------------------------------------------
 *
 * retention_policy.c
 *	  Retention policies applied by the extension: set_retention() and
 *	  drop_retention() keep one policy per stream in
 *	  stream_seq.retention_policy (keep rows for at least keep_for, keep at
 *	  least the newest keep_rows rows, respect consumers or not);
 *	  apply_retention() and the retention workers apply it, and every run
 *	  is recorded in stream_seq.retention_run.
 *
 * What a run does, for one stream, in a subtransaction:
 *	- the number below which rows may go: below the newest keep_rows rows
 *	  (an index scan of keep_rows entries) and below what was committed
 *	  keep_for ago (stream_seq.position_at(), called by name: it needs the
 *	  stream's time column); a partitioned stream partitioned by time goes
 *	  by the partitions' upper bounds for keep_for instead.  With both, a
 *	  row goes only when both allow it.
 *	- never at or past the horizon, and, with respect_consumers, never
 *	  past the slowest consumer, slot of a group, or parked row (what
 *	  trim() and drop_partitions() respect); the consumer that held the
 *	  run back is recorded with its position.
 *	- an ordinary stream: stream_seq.trim(); a partitioned one: what
 *	  drop_partitions() does (stream_drop_old_partitions), whole sealed
 *	  partitions only.
 * An error rolls the subtransaction back and is recorded (SQLSTATE and
 * message) and reported as a WARNING, which for a worker goes to the
 * server log; the next stream is handled all the same.  Only a cancel is
 * passed on.  The last RETENTION_RUNS_KEPT runs of each stream are kept.
 *
 * Whose privileges: a run executes as the stream table's current owner
 * (with SECURITY_RESTRICTED_OPERATION and search_path pg_catalog, as
 * maintenance commands do), whoever set the policy and whoever runs it:
 * only the owner (or a member of the owning role) may set, drop or apply a
 * policy, and a run then does what the owner could do with trim() or
 * drop_partitions().  A new owner (ALTER TABLE ... OWNER TO) takes the
 * policy over.
 *
 * The workers.  The lister (replica.c) has no database connection; runs
 * need one per database.  A "retention launcher" background worker,
 * connected to no database (it reads only the shared catalog
 * pg_database), every stream_seq.retention_interval starts one short-lived
 * "retention worker" per database that allows connections and is not a
 * template, one database after another, and waits for it to exit.  That
 * worker checks that stream_seq is installed there in a version with
 * policies, runs each policy in its own transaction, and exits.  So it is
 * connected for as long as its runs take, and not at all to templates;
 * meanwhile CREATE DATABASE ... TEMPLATE that database and DROP DATABASE
 * without FORCE wait for it (up to their 5 seconds) or fail, as with any
 * session.  A worker that fails (even FATAL) ends alone: the launcher
 * goes on with the next database.  Both start only when recovery has
 * finished, so a standby runs nothing until promoted; both exist only when
 * the library is preloaded.  The launcher is restarted by the postmaster
 * if it dies (SIGTERM included), and after a crash restart.  Runs take
 * locks with lock_timeout 100ms, so a run waiting behind a long reader
 * fails (recorded, 55P03) and is tried again next time: while it waits
 * for ACCESS EXCLUSIVE (dropping a partition), every reader and writer of
 * the table queues behind it, so it must not wait long.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_database.h"
#include "catalog/pg_type.h"
#include "commands/dbcommands.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "stream_seq.h"
#include "stats.h"
#include "retention_policy.h"
#include "catalog.h"
#include "horizon.h"
#include "consumer.h"
#include "partition.h"

/* runs kept per stream in stream_seq.retention_run */
#define RETENTION_RUNS_KEPT 100

PG_FUNCTION_INFO_V1(stream_seq_set_retention);
PG_FUNCTION_INFO_V1(stream_seq_drop_retention);
PG_FUNCTION_INFO_V1(stream_seq_apply_retention);

/* A stream's policy, as stream_seq.retention_policy holds it. */
typedef struct RetentionPolicy
{
	bool		has_keep_for;
	Interval	keep_for;
	bool		has_keep_rows;
	int64		keep_rows;
	bool		respect_consumers;
} RetentionPolicy;

/* What one run did. */
typedef struct RetentionRun
{
	int64		removed_rows;	/* -1: not an ordinary stream */
	int32		removed_partitions; /* -1: not a partitioned stream */
	int64		removed_before; /* 0: nothing removed */
	char	   *held_by;		/* consumer that held it back, or NULL */
	int64		held_at;
	char	   *sqlstate;		/* the error, or NULL */
	char	   *error;
} RetentionRun;

/*
 * policy_table_exists
 *		Whether this database's stream_seq has the policy table (it has not
 *		before ALTER EXTENSION ... UPDATE to 0.5.0).
 */
static bool
policy_table_exists(void)
{
	Oid			nsp = stream_namespace(true);

	return OidIsValid(nsp) &&
		OidIsValid(get_relname_relid("retention_policy", nsp)) &&
		OidIsValid(get_relname_relid("retention_run", nsp));
}

/*
 * check_policy_table
 *		The error of the SQL functions when the policy table is missing.
 */
static void
check_policy_table(void)
{
	if (!policy_table_exists())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the stream_seq extension must be updated to use retention policies"),
				 errhint("Run ALTER EXTENSION stream_seq UPDATE.")));
}

/*
 * check_policy_owner
 *		The checks of set_retention(), drop_retention() and
 *		apply_retention(): "relid" is a stream table, and the caller has the
 *		privileges of its owner, as whose role a run executes.
 */
static void
check_policy_owner(Oid relid)
{
	check_policy_table();
	stream_check_locked(relid, NoLock);	/* reports what it is not */
	if (!pg_class_ownercheck(relid, GetUserId()))
		aclcheck_error(ACLCHECK_NOT_OWNER, OBJECT_TABLE, stream_rel_name(relid));
}

/*
 * rel_owner
 *		The current owner of relation "relid".
 */
static Oid
rel_owner(Oid relid)
{
	HeapTuple	tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	Oid			owner;

	if (!HeapTupleIsValid(tuple))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation with OID %u does not exist", relid)));
	owner = ((Form_pg_class) GETSTRUCT(tuple))->relowner;
	ReleaseSysCache(tuple);
	return owner;
}

/*
 * stream_time_column_missing
 *		Whether the catalog says stream "relid" has no time column (the
 *		column stream_seq.stream.time_column exists and is NULL).  Without
 *		that column in the catalog, not known: false.
 */
static bool
stream_time_column_missing(Oid relid)
{
	Oid			catalog = stream_catalog_relid(false);
	Oid			argtypes[1] = {OIDOID};
	Datum		values[1];
	int64		row[1];
	bool		found;

	if (get_attnum(catalog, "time_column") == InvalidAttrNumber)
		return false;
	values[0] = ObjectIdGetDatum(relid);
	stream_catalog_exec("SELECT CASE WHEN time_column IS NULL THEN 1 ELSE 0 END::pg_catalog.int8 FROM stream_seq.stream "
						"WHERE relid::pg_catalog.oid = $1",
						1, argtypes, values, row, 1, &found);
	return found && row[0] == 1;
}

/*
 * keep_for_cutoff
 *		The time before which rows are older than keep_for: the start of
 *		the transaction less keep_for (22008 if out of range).
 */
static TimestampTz
keep_for_cutoff(Interval *keep_for)
{
	return DatumGetTimestampTz(DirectFunctionCall2(timestamptz_mi_interval,
												   TimestampTzGetDatum(GetCurrentTransactionStartTimestamp()),
												   IntervalPGetDatum(keep_for)));
}

/*
 * stream_seq_set_retention
 *		SQL: set_retention(stream regclass, keep_for interval DEFAULT NULL,
 *		keep_rows bigint DEFAULT NULL, respect_consumers boolean DEFAULT
 *		true) RETURNS void: create or replace the stream's policy.  At least
 *		one of keep_for and keep_rows; keep_for positive, keep_rows not
 *		negative.  keep_for on a stream that is not partitioned by time
 *		needs the stream's time column.
 */
Datum
stream_seq_set_retention(PG_FUNCTION_ARGS)
{
	Oid			relid;
	bool		has_keep_for = !PG_ARGISNULL(1);
	bool		has_keep_rows = !PG_ARGISNULL(2);
	Oid			argtypes[4] = {REGCLASSOID, INTERVALOID, INT8OID, BOOLOID};
	Datum		values[4];
	char		nulls[4] = {' ', ' ', ' ', ' '};

	if (PG_ARGISNULL(0) || PG_ARGISNULL(3))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("stream table and respect_consumers must not be null")));
	relid = PG_GETARG_OID(0);
	check_policy_owner(relid);
	if (!has_keep_for && !has_keep_rows)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("a retention policy needs keep_for or keep_rows"),
				 errhint("Use stream_seq.drop_retention() to remove a policy.")));
	if (has_keep_rows && PG_GETARG_INT64(2) < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("keep_rows must not be negative")));
	if (has_keep_for)
	{
		Interval	zero;

		memset(&zero, 0, sizeof(zero));
		if (DatumGetBool(DirectFunctionCall2(interval_le,
											 PG_GETARG_DATUM(1),
											 IntervalPGetDatum(&zero))))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("keep_for must be positive")));
		/* an interval that reaches out of the range of timestamps */
		(void) keep_for_cutoff(PG_GETARG_INTERVAL_P(1));
		if (!stream_partitioned_by_time(relid) &&
			stream_time_column_missing(relid))
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("stream table \"%s\" has no time column",
							stream_rel_name(relid)),
					 errdetail("keep_for needs the commit times of rows, or partitions by time."),
					 errhint("Enable the stream with a time column, or use keep_rows.")));
	}

	values[0] = ObjectIdGetDatum(relid);
	values[1] = has_keep_for ? PG_GETARG_DATUM(1) : (Datum) 0;
	values[2] = has_keep_rows ? PG_GETARG_DATUM(2) : (Datum) 0;
	values[3] = PG_GETARG_DATUM(3);
	if (!has_keep_for)
		nulls[1] = 'n';
	if (!has_keep_rows)
		nulls[2] = 'n';
	stream_catalog_hold(relid, NULL);
	stream_catalog_exec_nulls("INSERT INTO stream_seq.retention_policy "
							  "(stream, keep_for, keep_rows, respect_consumers) "
							  "VALUES ($1, $2, $3, $4) "
							  "ON CONFLICT (stream) DO UPDATE SET "
							  "keep_for = EXCLUDED.keep_for, keep_rows = EXCLUDED.keep_rows, "
							  "respect_consumers = EXCLUDED.respect_consumers, "
							  "set_at = EXCLUDED.set_at",
							  4, argtypes, values, nulls);
	PG_RETURN_VOID();
}

/*
 * stream_seq_drop_retention
 *		SQL: drop_retention(stream regclass) RETURNS boolean: remove the
 *		stream's policy (its recorded runs stay); whether there was one.
 */
Datum
stream_seq_drop_retention(PG_FUNCTION_ARGS)
{
	Oid			relid;
	Oid			argtypes[1] = {OIDOID};
	Datum		values[1];
	uint64		removed;

	stream_check_not_null(fcinfo, 1, "stream table");
	relid = PG_GETARG_OID(0);
	check_policy_owner(relid);
	values[0] = ObjectIdGetDatum(relid);
	removed = stream_catalog_exec("DELETE FROM stream_seq.retention_policy "
								  "WHERE stream::pg_catalog.oid = $1",
								  1, argtypes, values, NULL, 0, NULL);
	PG_RETURN_BOOL(removed > 0);
}

/*
 * read_policy
 *		The policy of stream "relid"; false if it has none.
 */
static bool
read_policy(Oid relid, RetentionPolicy *policy)
{
	int			save_nestlevel;
	Oid			save_userid;
	int			save_sec_context;
	Oid			argtypes[1] = {OIDOID};
	Datum		values[1];
	bool		found = false;

	stream_run_as(stream_catalog_owner(), &save_nestlevel, &save_userid,
				  &save_sec_context);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	values[0] = ObjectIdGetDatum(relid);
	if (SPI_execute_with_args("SELECT keep_for, keep_rows, respect_consumers "
							  "FROM stream_seq.retention_policy "
							  "WHERE stream::pg_catalog.oid = $1",
							  1, argtypes, values, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read the retention policy");
	if (SPI_processed > 0)
	{
		HeapTuple	tuple = SPI_tuptable->vals[0];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;
		Datum		value;

		found = true;
		value = SPI_getbinval(tuple, desc, 1, &isnull);
		policy->has_keep_for = !isnull;
		if (!isnull)
			policy->keep_for = *DatumGetIntervalP(value);
		value = SPI_getbinval(tuple, desc, 2, &isnull);
		policy->has_keep_rows = !isnull;
		policy->keep_rows = isnull ? 0 : DatumGetInt64(value);
		value = SPI_getbinval(tuple, desc, 3, &isnull);
		policy->respect_consumers = isnull ? true : DatumGetBool(value);
	}
	SPI_finish();
	stream_run_as_end(save_nestlevel, save_userid, save_sec_context);
	return found;
}

/*
 * query_number
 *		Run a query of one bigint (or NULL) as the current user; *found
 *		says whether it gave a non-NULL value.
 */
static int64
query_number(const char *sql, int nargs, Oid *argtypes, Datum *values,
			 bool *found)
{
	int64		result = 0;

	*found = false;
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SPI_execute_with_args(sql, nargs, argtypes, values, NULL, false, 1) < 0)
		elog(ERROR, "SPI_execute_with_args failed for \"%s\"", sql);
	if (SPI_processed > 0)
	{
		bool		isnull;
		Datum		value = SPI_getbinval(SPI_tuptable->vals[0],
										  SPI_tuptable->tupdesc, 1, &isnull);

		if (!isnull)
		{
			result = DatumGetInt64(value);
			*found = true;
		}
	}
	SPI_finish();
	return result;
}

/*
 * apply_policy
 *		One run of "policy" on stream "relid", as the current user (the
 *		table's owner, see run_policy); fills "run".
 */
static void
apply_policy(Oid relid, RetentionPolicy *policy, RetentionRun *run)
{
	StreamRef  *ref = stream_lookup(relid, false);
	bool		partitioned = get_rel_relkind(relid) == RELKIND_PARTITIONED_TABLE;
	int64		before = PG_INT64_MAX;
	bool		use_time = false;
	TimestampTz cutoff = 0;
	char	   *column = get_attname(relid, ref->seq_attnum, false);

	/* below the newest keep_rows rows */
	if (policy->has_keep_rows)
	{
		Oid			argtypes[1] = {INT8OID};
		Datum		values[1];
		bool		found;
		int64		oldest_kept;

		values[0] = Int64GetDatum(policy->keep_rows);
		oldest_kept = query_number(psprintf("SELECT %s FROM %s WHERE %s IS NOT NULL "
											"ORDER BY %s DESC OFFSET $1 LIMIT 1",
											quote_identifier(column),
											stream_source(relid),
											quote_identifier(column),
											quote_identifier(column)),
								   1, argtypes, values, &found);
		/* fewer rows than keep_rows: nothing goes */
		before = found ? oldest_kept + 1 : 1;
	}

	/* committed before keep_for ago */
	if (policy->has_keep_for)
	{
		cutoff = keep_for_cutoff(&policy->keep_for);
		if (partitioned && stream_partitioned_by_time(relid))
			use_time = true;
		else
		{
			Oid			argtypes[2] = {REGCLASSOID, TIMESTAMPTZOID};
			Datum		values[2];
			bool		found;
			int64		last;

			values[0] = ObjectIdGetDatum(relid);
			values[1] = TimestampTzGetDatum(cutoff);
			last = query_number("SELECT stream_seq.position_at($1, $2)",
								2, argtypes, values, &found);
			before = Min(before, found ? last + 1 : 1);

			/*
			 * Rows without a time (numbered before the stream had its time
			 * column) are at the bottom, and position_at() counts them as
			 * before any time: keep_for does not know their age, so it
			 * removes nothing while they are there.
			 */
			last = query_number(psprintf("SELECT pg_catalog.count(*) FROM (SELECT FROM %s "
										 "WHERE %s <= stream_seq.position_at($1, '-infinity') LIMIT 1) x",
										 stream_source(relid), quote_identifier(column)),
								1, argtypes, values, &found);
			if (found && last > 0)
			{
				before = Min(before, 1);
				run->held_by = pstrdup("rows without a time");
				run->held_at = query_number("SELECT stream_seq.first($1) - 1",
											1, argtypes, values, &found);
			}
		}
	}

	if (partitioned)
	{
		DropLimits	limits;

		memset(&limits, 0, sizeof(limits));
		limits.force = !policy->respect_consumers;
		limits.before = before;
		limits.use_time = use_time;
		limits.time = cutoff;
		run->removed_partitions = stream_drop_old_partitions(ref, &limits);
		if (limits.dropped_upto > 0)
			run->removed_before = limits.dropped_upto + 1;
		run->held_by = limits.held_by;
		run->held_at = limits.held_at;
	}
	else
	{
		int64		horizon = stream_statement_horizon(ref);
		char	   *consumer;
		int64		position;

		before = Min(before, horizon);
		if (policy->respect_consumers &&
			stream_slowest_consumer(relid, &consumer, &position) &&
			before > position + 1)
		{
			before = position + 1;
			run->held_by = consumer;
			run->held_at = position;
		}
		run->removed_rows = 0;
		if (before > stream_catalog_first(relid))
		{
			Oid			argtypes[3] = {REGCLASSOID, INT8OID, BOOLOID};
			Datum		values[3];
			bool		found;

			values[0] = ObjectIdGetDatum(relid);
			values[1] = Int64GetDatum(before);
			values[2] = BoolGetDatum(!policy->respect_consumers);
			run->removed_rows = query_number("SELECT stream_seq.trim($1, $2, $3)",
											 3, argtypes, values, &found);
			run->removed_before = before;
		}
	}
}

/*
 * record_run
 *		Insert "run" of stream "relid" into stream_seq.retention_run, drop
 *		the stream's runs beyond the newest RETENTION_RUNS_KEPT.  A run that
 *		removed nothing and failed not, and says what the stream's newest
 *		recorded run says (the same consumer holding it back at the same
 *		position, say), moves that row's ran_at instead: an idle stream
 *		keeps one row, the time of its last check, and does not push the
 *		runs that did something out of the record.  With "tupdesc" (the
 *		table's row type), returns the new or moved row as a datum of that
 *		type, in the caller's memory context.
 */
static Datum
record_run(Oid relid, bool by_worker, RetentionRun *run, TupleDesc tupdesc)
{
	MemoryContext caller = CurrentMemoryContext;
	int			save_nestlevel;
	Oid			save_userid;
	int			save_sec_context;
	Oid			argtypes[9] = {REGCLASSOID, BOOLOID, INT8OID, INT4OID, INT8OID,
	TEXTOID, INT8OID, TEXTOID, TEXTOID};
	Datum		values[9];
	char		nulls[9] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};
	Oid			delargtypes[2] = {OIDOID, INT4OID};
	Datum		delvalues[2];
	Datum		result;
	bool		moved;

	values[0] = ObjectIdGetDatum(relid);
	values[1] = BoolGetDatum(by_worker);
	values[2] = Int64GetDatum(run->removed_rows);
	nulls[2] = run->removed_rows < 0 ? 'n' : ' ';
	values[3] = Int32GetDatum(run->removed_partitions);
	nulls[3] = run->removed_partitions < 0 ? 'n' : ' ';
	values[4] = Int64GetDatum(run->removed_before);
	nulls[4] = run->removed_before <= 0 ? 'n' : ' ';
	values[5] = run->held_by ? CStringGetTextDatum(run->held_by) : (Datum) 0;
	nulls[5] = run->held_by ? ' ' : 'n';
	values[6] = Int64GetDatum(run->held_at);
	nulls[6] = run->held_by ? ' ' : 'n';
	values[7] = run->sqlstate ? CStringGetTextDatum(run->sqlstate) : (Datum) 0;
	nulls[7] = run->sqlstate ? ' ' : 'n';
	values[8] = run->error ? CStringGetTextDatum(run->error) : (Datum) 0;
	nulls[8] = run->error ? ' ' : 'n';
	if (run->sqlstate != NULL)
		nulls[2] = nulls[3] = nulls[4] = 'n';

	stream_run_as(stream_catalog_owner(), &save_nestlevel, &save_userid,
				  &save_sec_context);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	moved = false;
	if (run->sqlstate == NULL && run->removed_rows <= 0 &&
		run->removed_partitions <= 0)
	{
		/* an idle run: the newest row, if it says the same, moves */
		if (SPI_execute_with_args("UPDATE stream_seq.retention_run r "
								  "SET ran_at = pg_catalog.clock_timestamp() "
								  "FROM (SELECT ctid FROM stream_seq.retention_run "
								  "       WHERE stream = $1 ORDER BY ran_at DESC LIMIT 1) newest "
								  "WHERE r.ctid = newest.ctid AND r.by_worker = $2 "
								  "  AND r.removed_rows IS NOT DISTINCT FROM $3 "
								  "  AND r.removed_partitions IS NOT DISTINCT FROM $4 "
								  "  AND r.removed_before IS NOT DISTINCT FROM $5 "
								  "  AND r.held_by IS NOT DISTINCT FROM $6 "
								  "  AND r.held_at IS NOT DISTINCT FROM $7 "
								  "  AND r.sqlstate IS NULL AND r.error IS NULL "
								  "  AND $8::pg_catalog.text IS NULL AND $9::pg_catalog.text IS NULL "
								  "RETURNING r.*",
								  9, argtypes, values, nulls, false, 0) != SPI_OK_UPDATE_RETURNING)
			elog(ERROR, "could not record a retention run");
		moved = SPI_processed == 1;
	}
	if (!moved &&
		(SPI_execute_with_args("INSERT INTO stream_seq.retention_run "
							   "(stream, by_worker, removed_rows, removed_partitions, "
							   " removed_before, held_by, held_at, sqlstate, error) "
							   "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING *",
							   9, argtypes, values, nulls, false, 0) != SPI_OK_INSERT_RETURNING ||
		 SPI_processed != 1))
		elog(ERROR, "could not record a retention run");
	result = (Datum) 0;
	if (tupdesc != NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(caller);

		result = heap_copy_tuple_as_datum(SPI_tuptable->vals[0], tupdesc);
		MemoryContextSwitchTo(old);
	}
	delvalues[0] = ObjectIdGetDatum(relid);
	delvalues[1] = Int32GetDatum(RETENTION_RUNS_KEPT);
	if (SPI_execute_with_args("DELETE FROM stream_seq.retention_run "
							  "WHERE stream::pg_catalog.oid = $1 AND ctid NOT IN "
							  "(SELECT ctid FROM stream_seq.retention_run "
							  "  WHERE stream::pg_catalog.oid = $1 "
							  "  ORDER BY ran_at DESC LIMIT $2)",
							  2, delargtypes, delvalues, NULL, false, 0) < 0)
		elog(ERROR, "could not remove old retention runs");
	SPI_finish();
	stream_run_as_end(save_nestlevel, save_userid, save_sec_context);
	return result;
}

/*
 * run_policy
 *		Apply the policy of stream "relid" as the table's owner, in a
 *		subtransaction, and record the run, also a failed one (whose error
 *		is then reported as a WARNING).  Returns the recorded row (see
 *		record_run), or
 *		(Datum) 0 with *found false if the stream has no policy.
 */
static Datum
run_policy(Oid relid, bool by_worker, TupleDesc tupdesc, bool *found)
{
	RetentionPolicy policy;
	RetentionRun run;
	MemoryContext oldcontext = CurrentMemoryContext;
	ResourceOwner oldowner = CurrentResourceOwner;
	Oid			owner;

	*found = read_policy(relid, &policy);
	if (!*found)
		return (Datum) 0;
	memset(&run, 0, sizeof(run));
	run.removed_rows = -1;
	run.removed_partitions = -1;
	owner = rel_owner(relid);

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(oldcontext);
	PG_TRY();
	{
		int			save_nestlevel;
		Oid			save_userid;
		int			save_sec_context;

		stream_run_as(owner, &save_nestlevel, &save_userid, &save_sec_context);
		apply_policy(relid, &policy, &run);
		stream_run_as_end(save_nestlevel, save_userid, save_sec_context);
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcontext);
		CurrentResourceOwner = oldowner;
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(oldcontext);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcontext);
		CurrentResourceOwner = oldowner;
		if (edata->sqlerrcode == ERRCODE_QUERY_CANCELED)
			ReThrowError(edata);
		run.removed_rows = run.removed_partitions = -1;
		run.removed_before = 0;
		run.held_by = NULL;
		run.sqlstate = pstrdup(unpack_sql_state(edata->sqlerrcode));
		run.error = edata->message ? pstrdup(edata->message) : pstrdup("?");
		ereport(WARNING,
				(errcode(edata->sqlerrcode),
				 errmsg("retention policy of stream table \"%s\" failed: %s",
						stream_rel_name(relid),
						run.error),
				 by_worker ?
				 errcontext("retention worker for database \"%s\"",
							get_database_name(MyDatabaseId)) : 0));
	}
	PG_END_TRY();
	stream_stats_count_retention_run(run.sqlstate != NULL, run.removed_rows);
	return record_run(relid, by_worker, &run, tupdesc);
}

/*
 * stream_seq_apply_retention
 *		SQL: apply_retention(stream regclass) RETURNS
 *		stream_seq.retention_run: run the stream's policy now, as the
 *		worker would (as the table's owner), and return the recorded run;
 *		an error of the run is recorded and reported as a WARNING, not
 *		raised.  Only the owner may.
 */
Datum
stream_seq_apply_retention(PG_FUNCTION_ARGS)
{
	Oid			relid;
	bool		found;
	Datum		result;
	TupleDesc	tupdesc;

	stream_check_not_null(fcinfo, 1, "stream table");
	relid = PG_GETARG_OID(0);
	check_policy_owner(relid);
	if (RecoveryInProgress())
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("cannot apply a retention policy during recovery"),
				 errhint("Retention runs on the primary; a standby replays what it removes.")));
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	tupdesc = BlessTupleDesc(tupdesc);
	result = run_policy(relid, false, tupdesc, &found);
	if (!found)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("stream table \"%s\" has no retention policy",
						stream_rel_name(relid))));
	PG_RETURN_DATUM(result);
}

/*
 * stream_retention_init
 *		Register the retention launcher (from _PG_init, when preloaded);
 *		not in a server pg_upgrade runs (-b): its workers' connections
 *		would make pg_upgrade's DROP DATABASE and CREATE DATABASE fail.
 */
void
stream_retention_init(void)
{
	BackgroundWorker worker;

	if (IsBinaryUpgrade)
		return;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = 10;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "stream_seq");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "stream_seq_retention_launcher_main");
	snprintf(worker.bgw_name, BGW_MAXLEN, "stream_seq retention launcher");
	snprintf(worker.bgw_type, BGW_MAXLEN, "stream_seq retention launcher");
	RegisterBackgroundWorker(&worker);
}

/*
 * list_databases
 *		The databases a retention worker may connect to: those that allow
 *		connections, are not templates, and are not half-dropped.
 */
static List *
list_databases(MemoryContext context)
{
	List	   *result = NIL;
	Relation	rel;
	TableScanDesc scan;
	HeapTuple	tuple;

	StartTransactionCommand();
	(void) GetTransactionSnapshot();
	rel = table_open(DatabaseRelationId, AccessShareLock);
	scan = table_beginscan_catalog(rel, 0, NULL);
	while (HeapTupleIsValid(tuple = heap_getnext(scan, ForwardScanDirection)))
	{
		Form_pg_database db = (Form_pg_database) GETSTRUCT(tuple);
		MemoryContext old;

		if (!db->datallowconn || db->datistemplate)
			continue;
#ifdef DATCONNLIMIT_INVALID_DB
		if (db->datconnlimit == DATCONNLIMIT_INVALID_DB)
			continue;
#endif
		old = MemoryContextSwitchTo(context);
		result = lappend_oid(result, db->oid);
		MemoryContextSwitchTo(old);
	}
	table_endscan(scan);
	table_close(rel, AccessShareLock);
	CommitTransactionCommand();
	return result;
}

/*
 * run_database
 *		Start the retention worker of database "dboid" and wait for it to
 *		exit, whatever its end.
 */
static void
run_database(Oid dboid)
{
	BackgroundWorker worker;
	BackgroundWorkerHandle *handle;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "stream_seq");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "stream_seq_retention_worker_main");
	snprintf(worker.bgw_name, BGW_MAXLEN, "stream_seq retention worker for database %u", dboid);
	snprintf(worker.bgw_type, BGW_MAXLEN, "stream_seq retention worker");
	worker.bgw_main_arg = ObjectIdGetDatum(dboid);
	worker.bgw_notify_pid = MyProcPid;
	if (!RegisterDynamicBackgroundWorker(&worker, &handle))
	{
		ereport(LOG,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("could not start a stream_seq retention worker for database %u", dboid),
				 errhint("Increase \"max_worker_processes\"; the runs are tried again in the next interval.")));
		return;
	}
	if (WaitForBackgroundWorkerShutdown(handle) == BGWH_POSTMASTER_DIED)
		proc_exit(1);
}

/*
 * stream_seq_retention_launcher_main
 *		The retention launcher: at start and then every
 *		stream_seq.retention_interval, one retention worker per database,
 *		one after another.  Connected to no database.  SIGTERM ends it (an
 *		error exit: the postmaster starts it again, unless shutting down).
 */
void
stream_seq_retention_launcher_main(Datum main_arg)
{
	MemoryContext context;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);
	context = AllocSetContextCreate(TopMemoryContext,
									"stream_seq retention launcher",
									ALLOCSET_DEFAULT_SIZES);

	for (;;)
	{
		long		timeout;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		if (stream_seq_retention_interval > 0 && !RecoveryInProgress())
		{
			List	   *databases = list_databases(context);
			ListCell   *lc;

			foreach(lc, databases)
			{
				CHECK_FOR_INTERRUPTS();
				run_database(lfirst_oid(lc));
			}
			MemoryContextReset(context);
			timeout = stream_seq_retention_interval * 1000L;
		}
		else
			timeout = 60 * 1000L;	/* disabled: a reload wakes it up */

		(void) WaitLatch(MyLatch,
						 WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 timeout, stream_wait_event(STREAM_WAIT_RETENTION));
		ResetLatch(MyLatch);
	}
}

/*
 * list_policies
 *		The streams with a policy in this database, if stream_seq is
 *		installed here in a version that has them.  Not inlined into the
 *		worker's PG_TRY loop, where its locals could be clobbered by a
 *		longjmp.
 */
static pg_noinline List *
list_policies(MemoryContext context)
{
	List	   *result = NIL;
	uint64		i;

	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	if (OidIsValid(get_extension_oid("stream_seq", true)) && policy_table_exists())
	{
		if (SPI_connect() != SPI_OK_CONNECT)
			elog(ERROR, "SPI_connect failed");
		if (SPI_execute("SELECT stream::pg_catalog.oid FROM stream_seq.retention_policy "
						"ORDER BY 1", true, 0) != SPI_OK_SELECT)
			elog(ERROR, "could not list the retention policies");
		for (i = 0; i < SPI_processed; i++)
		{
			bool		isnull;
			Datum		value = SPI_getbinval(SPI_tuptable->vals[i],
											  SPI_tuptable->tupdesc, 1, &isnull);
			MemoryContext old = MemoryContextSwitchTo(context);

			result = lappend_oid(result, DatumGetObjectId(value));
			MemoryContextSwitchTo(old);
		}
		SPI_finish();
	}
	PopActiveSnapshot();
	CommitTransactionCommand();
	return result;
}

/*
 * stream_seq_retention_worker_main
 *		The retention worker of one database (main_arg): run each policy
 *		in a transaction of its own, and exit.  An error that escapes
 *		run_policy (recording the run failed, say) is logged and that
 *		stream's transaction rolled back; the others still run.
 */
void
stream_seq_retention_worker_main(Datum main_arg)
{
	Oid			dboid = DatumGetObjectId(main_arg);
	MemoryContext context;
	List	   *streams;
	ListCell   *lc;

	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnectionByOid(dboid, InvalidOid, 0);
	if (RecoveryInProgress())
		proc_exit(0);
	pgstat_report_appname("stream_seq retention worker");
	SetConfigOption("lock_timeout", "100ms", PGC_SUSET, PGC_S_OVERRIDE);
	stream_untracked_statements(true);
	context = AllocSetContextCreate(TopMemoryContext,
									"stream_seq retention worker",
									ALLOCSET_DEFAULT_SIZES);
	streams = list_policies(context);

	foreach(lc, streams)
	{
		Oid			relid = lfirst_oid(lc);
		MemoryContext old = CurrentMemoryContext;

		CHECK_FOR_INTERRUPTS();
		StartTransactionCommand();
		PushActiveSnapshot(GetTransactionSnapshot());
		pgstat_report_activity(STATE_RUNNING, "stream_seq retention run");
		PG_TRY();
		{
			bool		found;

			(void) run_policy(relid, true, NULL, &found);
			PopActiveSnapshot();
			CommitTransactionCommand();
		}
		PG_CATCH();
		{
			HOLD_INTERRUPTS();
			MemoryContextSwitchTo(old);
			EmitErrorReport();
			FlushErrorState();
			AbortCurrentTransaction();
			RESUME_INTERRUPTS();
		}
		PG_END_TRY();
		pgstat_report_activity(STATE_IDLE, NULL);
	}
	proc_exit(0);
}
