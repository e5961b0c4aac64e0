/*-------------------------------------------------------------------------
 *
 * parking.c
 *	  Rows a consumer sets aside (parks) instead of stopping at them:
 *	  retries with a delay or a backoff, a maximum number of attempts after
 *	  which a row is a dead letter, and handing parked rows back, by
 *	  schedule (due()) or by hand (replay(), revive()).  For plain
 *	  consumers and groups alike.
 *
 * A parked row is a row of stream_seq.parked: the consumer, the number,
 * why it failed, how often (attempts), when it is due for another try
 * (due_at; NULL: only by hand), whether it is dead (past the consumer's
 * maximum of attempts), and whether a replay or due() took it (resolved).
 * park() sets a row aside in the transaction that advances past it;
 * replay() and due() return parked rows and mark them resolved in the
 * caller's transaction, so each is applied once, when that transaction
 * commits (a rollback leaves it parked; parking it again in the same
 * transaction counts one more attempt and keeps its history).  Resolved
 * rows are deleted by the next replay() or due() of another transaction.
 *
 * Retry policy.  A consumer may have one (set_retry_policy()): at most
 * max_attempts failures, the n-th of them followed by a wait of
 * delay * backoff^(n-1), at most max_delay (backoff 1: a fixed delay).
 * park() then schedules the row (due_at), or, at the maximum, makes it a
 * dead letter, which only replay() or revive() hand back.  A delay passed
 * to park() itself schedules the row without a policy, or overrides the
 * policy's delay; the maximum still applies.  Without either, a parked
 * row waits for replay(), as before 0.5.0.
 *
 * Order.  By default later rows of a parked row's key are not held back:
 * its retry is applied after them.  A group may keep per-key order
 * (set_key_order()): park() then records the row's key, and the key is
 * held while it has a parked row that holds it (not resolved, not released
 * by release_key(), and not a dead letter unless the group holds keys
 * until released).  read_slot() parks the later rows of a held key as
 * held rows (group.c: attempts 0, not failures) and moves the slot past
 * them, so that the slot's other keys go on; due() and replay() hand back
 * a keyed row only when no row of its key before it holds the key, so at
 * most one row of a key per call, in number order, each once the one
 * before it was applied (its resolution committed).  A held row that then
 * fails is parked as a failure and holds its key in turn.  Held rows are
 * unresolved parked rows: trim() and retention keep them, and a resize
 * changes nothing for them (a key is held by its value, whatever its
 * slot).
 *
 * Privileges, as for consumers: the consumer's owner or the table's owner,
 * with SELECT on the table.  The rows live in an extension table that only
 * these functions write, as the extension's owner.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "access/transam.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"

#include "stream_seq.h"
#include "catalog.h"
#include "horizon.h"
#include "consumer.h"

PG_FUNCTION_INFO_V1(stream_seq_park);
PG_FUNCTION_INFO_V1(stream_seq_take_parked);
PG_FUNCTION_INFO_V1(stream_seq_set_retry_policy);
PG_FUNCTION_INFO_V1(stream_seq_revive);
PG_FUNCTION_INFO_V1(stream_seq_set_key_order);
PG_FUNCTION_INFO_V1(stream_seq_release_key);

/* The highest backoff factor: 10^100 seconds still fits a double. */
#define MAX_RETRY_BACKOFF 10.0
/* The longest wait before a retry, so that its time stays representable. */
#define MAX_RETRY_DELAY "100 years"
/* Whether the consumer $2 of stream $1 holds a key behind a dead letter. */
#define UNTIL_RELEASED \
	"COALESCE((SELECT c.key_order = 'until_released' FROM stream_seq.consumer c " \
	"          WHERE c.stream = $1 AND c.consumer = $2), false)"

/*
 * check_parking_caller
 *		The checks every function here makes: the arguments that must not
 *		be null, SELECT on the table, an existing consumer that the caller
 *		owns (or whose table it owns).  Returns the consumer's name.
 */
static char *
check_parking_caller(FunctionCallInfo fcinfo, int nargs, const char *what)
{
	Oid			relid;
	char	   *consumer;
	Oid			owner;

	stream_check_not_null(fcinfo, nargs, what);
	relid = PG_GETARG_OID(0);
	consumer = text_to_cstring(PG_GETARG_TEXT_PP(1));
	stream_check_select(relid);
	/* replay() and due() read the table next: lock it, check it again */
	(void) stream_lookup_locked(relid, AccessShareLock);
	(void) stream_consumer_lookup(relid, consumer, false, &owner, NULL);
	stream_check_consumer_owner(relid, consumer, owner);
	return consumer;
}

/*
 * have_retries
 *		Whether the extension's tables have what retries need: a database
 *		not yet updated to 0.5.0 parks rows for replay() only.
 */
static bool
have_retries(void)
{
	Oid			parked = get_relname_relid("parked", stream_namespace(false));

	return OidIsValid(parked) && get_attnum(parked, "dead") != InvalidAttrNumber;
}

/*
 * interval_is_negative
 *		Whether an interval is below zero (compared as PostgreSQL compares
 *		intervals).
 */
static bool
interval_is_negative(Interval *span)
{
	Interval	zero;

	memset(&zero, 0, sizeof(zero));
	return DatumGetInt32(DirectFunctionCall2(interval_cmp,
											 IntervalPGetDatum(span),
											 IntervalPGetDatum(&zero))) < 0;
}

/*
 * parked_row_key
 *		The group key (as text) of row "seq", if the consumer is a group
 *		that keeps per-key order; NULL otherwise, or if the key is NULL or
 *		the row is gone.  Read as the caller, who may read the table.
 */
static char *
parked_row_key(Oid relid, const char *consumer, int64 seq)
{
	Oid			argtypes[2] = {REGCLASSOID, TEXTOID};
	Datum		values[2];
	char	   *slot_expr;
	char	   *key_expr;
	char	   *key = NULL;
	StreamRef  *ref = stream_lookup(relid, false);
	Oid			row_types[1] = {INT8OID};
	Datum		row_values[1];
	int			save_nestlevel;
	MemoryContext caller_cxt = CurrentMemoryContext;

	values[0] = ObjectIdGetDatum(relid);
	values[1] = CStringGetTextDatum(consumer);
	slot_expr = stream_catalog_text("SELECT slot_expr FROM stream_seq.consumer "
									"WHERE stream = $1 AND consumer = $2 "
									"AND key_order IS NOT NULL AND slots IS NOT NULL",
									2, argtypes, values);
	if (slot_expr == NULL)
		return NULL;
	key_expr = stream_group_key_expr(slot_expr);
	if (key_expr == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("could not read the key of group \"%s\"", consumer),
				 errdetail("Its slot expression \"%s\" is not the one create_group() makes.",
						   slot_expr)));
	row_values[0] = Int64GetDatum(seq);
	save_nestlevel = NewGUCNestLevel();
	(void) set_config_option("search_path", "pg_catalog, pg_temp",
							 PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	stream_pin_key_output();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SPI_execute_with_args(psprintf("SELECT (%s)::pg_catalog.text FROM %s t WHERE t.%s = $1",
									   key_expr, stream_source(relid),
									   quote_identifier(get_attname(relid, ref->seq_attnum, false))),
							  1, row_types, row_values, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read row " INT64_FORMAT " of stream table \"%s\"",
			 seq, stream_rel_name(relid));
	if (SPI_processed > 0)
	{
		char	   *value = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);

		if (value != NULL)
			key = MemoryContextStrdup(caller_cxt, value);
	}
	SPI_finish();
	AtEOXact_GUC(false, save_nestlevel);
	return key;
}

/*
 * stream_seq_park
 *		SQL: park(stream, consumer, seq, reason text DEFAULT NULL,
 *		retry_after interval DEFAULT NULL): set row "seq" aside, in the
 *		caller's transaction (which then advances past it); parking it
 *		again counts another attempt.  Then, by the consumer's retry policy
 *		and "retry_after" (see the file's comment): schedule it, make it a
 *		dead letter, or leave it for replay().
 */
Datum
stream_seq_park(PG_FUNCTION_ARGS)
{
	Oid			relid;
	char	   *consumer;
	int64		seq;
	int64		horizon;
	Oid			argtypes[6] = {REGCLASSOID, TEXTOID, INT8OID, TEXTOID, INTERVALOID,
	TIMESTAMPTZOID};
	Datum		values[6];
	char		nulls[6] = {' ', ' ', ' ', ' ', ' ', ' '};

	consumer = check_parking_caller(fcinfo, 3, "stream table, consumer name and number");
	relid = PG_GETARG_OID(0);
	seq = PG_GETARG_INT64(2);
	horizon = stream_statement_horizon(stream_lookup(relid, false));
	if (seq < 1 || seq >= horizon)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("cannot park row " INT64_FORMAT " of stream table \"%s\"",
						seq, stream_rel_name(relid)),
				 errdetail("The horizon is " INT64_FORMAT "; a parked row must be below it.",
						   horizon)));
	if (PG_NARGS() > 4 && !PG_ARGISNULL(4) &&
		interval_is_negative(PG_GETARG_INTERVAL_P(4)))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("retry_after must not be negative")));

	values[0] = ObjectIdGetDatum(relid);
	values[1] = CStringGetTextDatum(consumer);
	values[2] = Int64GetDatum(seq);
	if (PG_ARGISNULL(3))
	{
		values[3] = (Datum) 0;
		nulls[3] = 'n';
	}
	else
		values[3] = PointerGetDatum(PG_GETARG_TEXT_PP(3));
	if (PG_NARGS() > 4 && !PG_ARGISNULL(4))
		values[4] = IntervalPGetDatum(PG_GETARG_INTERVAL_P(4));
	else
	{
		values[4] = (Datum) 0;
		nulls[4] = 'n';
	}
	/*
	 * The failure's time is the clock's at this call, not the start of the
	 * caller's transaction (now()): a worker applies a page row by row, and
	 * a row can fail long after its transaction began.  One instant serves
	 * first_failed, last_failed and the start of the wait.
	 */
	values[5] = TimestampTzGetDatum(GetCurrentTimestamp());
	stream_catalog_hold(relid, consumer);
	if (stream_have_key_order())
	{
		Oid			key_types[7] = {REGCLASSOID, TEXTOID, INT8OID, TEXTOID, INTERVALOID,
		TIMESTAMPTZOID, TEXTOID};
		Datum		key_values[7];
		char		key_nulls[7];
		char	   *key = parked_row_key(relid, consumer, seq);

		memcpy(key_values, values, sizeof(values));
		memcpy(key_nulls, nulls, sizeof(nulls));
		key_values[6] = key ? CStringGetTextDatum(key) : (Datum) 0;
		key_nulls[6] = key ? ' ' : 'n';

		/*
		 * A held row that fails is a failure from now on: one attempt,
		 * holding its key.
		 */
		stream_catalog_exec_nulls("INSERT INTO stream_seq.parked "
								  "(stream, consumer, seq, reason, first_failed, last_failed, key) "
								  "VALUES ($1, $2, $3, $4, $6, $6, $7) "
								  "ON CONFLICT (stream, consumer, seq) DO UPDATE "
								  "SET attempts = parked.attempts + 1, resolved = false, "
								  "reason = excluded.reason, last_failed = excluded.last_failed, "
								  "first_failed = CASE WHEN parked.held THEN excluded.first_failed "
								  "               ELSE parked.first_failed END, "
								  "held = false",
								  7, key_types, key_values, key_nulls);
	}
	else
		stream_catalog_exec_nulls("INSERT INTO stream_seq.parked "
								  "(stream, consumer, seq, reason, first_failed, last_failed) "
								  "VALUES ($1, $2, $3, $4, $6, $6) "
								  "ON CONFLICT (stream, consumer, seq) DO UPDATE "
								  "SET attempts = parked.attempts + 1, resolved = false, "
								  "reason = excluded.reason, last_failed = excluded.last_failed",
								  6, argtypes, values, nulls);

	/*
	 * Then its schedule, from the attempts just counted.  The backoff's
	 * exponent is capped so that the arithmetic stays finite; max_delay
	 * caps the result long before.
	 */
	if (!have_retries())
		PG_RETURN_VOID();
	stream_catalog_exec_nulls("UPDATE stream_seq.parked p SET "
							  "dead = (c.max_attempts IS NOT NULL AND p.attempts >= c.max_attempts), "
							  "due_at = CASE "
							  "  WHEN c.max_attempts IS NOT NULL AND p.attempts >= c.max_attempts THEN NULL "
							  "  WHEN $5::pg_catalog.interval IS NOT NULL THEN p.last_failed + $5 "
							  "  WHEN c.max_attempts IS NULL THEN NULL "
							  "  ELSE p.last_failed + pg_catalog.make_interval(secs => LEAST("
							  "       pg_catalog.date_part('epoch', c.retry_delay) * "
							  "       pg_catalog.power(c.retry_backoff, LEAST(p.attempts - 1, 100)), "
							  "       pg_catalog.date_part('epoch', c.retry_max_delay))) END "
							  "FROM stream_seq.consumer c "
							  "WHERE p.stream = $1 AND p.consumer = $2 AND p.seq = $3 "
							  "AND c.stream = p.stream AND c.consumer = p.consumer",
							  6, argtypes, values, nulls);
	PG_RETURN_VOID();
}

/*
 * stream_seq_take_parked
 *		SQL: _take_parked(stream, consumer, max_rows, only_due boolean
 *		DEFAULT false) RETURNS TABLE (seq, reason, attempts), for replay()
 *		and due(): marks up to max_rows parked rows of the consumer
 *		resolved, lowest first, skipping those another caller has locked,
 *		in the caller's transaction; deletes the rows callers that
 *		committed resolved (not those of the caller's own transaction,
 *		which a park() may count one more attempt on).  replay() takes every parked row, dead letters included;
 *		due() ("only_due") only those whose retry is due and not dead.
 */
Datum
stream_seq_take_parked(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Oid			relid;
	char	   *consumer;
	int32		max_rows;
	bool		only_due;
	bool		key_order;
	Oid			argtypes[4] = {REGCLASSOID, TEXTOID, INT4OID, TIMESTAMPTZOID};
	Datum		values[4];
	int			save_nestlevel;
	Oid			save_userid;
	int			save_sec_context;
	uint64		i;

	consumer = check_parking_caller(fcinfo, 3, "stream table, consumer name and max_rows");
	relid = PG_GETARG_OID(0);
	max_rows = PG_GETARG_INT32(2);
	only_due = PG_NARGS() > 3 && !PG_ARGISNULL(3) && PG_GETARG_BOOL(3);
	if (max_rows < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_rows must be at least 1")));

	InitMaterializedSRF(fcinfo, 0);
	values[0] = ObjectIdGetDatum(relid);
	values[1] = CStringGetTextDatum(consumer);
	values[2] = Int32GetDatum(max_rows);
	key_order = stream_have_key_order();
	stream_run_as(stream_catalog_owner(), &save_nestlevel, &save_userid,
				  &save_sec_context);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	/*
	 * Rows resolved by callers that committed are gone for good.  Not
	 * those the caller's own transaction resolved: parking one of them
	 * again in this transaction counts one more attempt on its history.
	 */
	if (SPI_execute_with_args("SELECT seq, xmin FROM stream_seq.parked "
							  "WHERE stream = $1 AND consumer = $2 AND resolved "
							  "FOR UPDATE SKIP LOCKED",
							  2, argtypes, values, NULL, false, 0) < 0)
		elog(ERROR, "could not look for resolved parked rows");
	if (SPI_processed > 0)
	{
		Datum	   *gone = palloc(sizeof(Datum) * SPI_processed);
		int			ngone = 0;
		Oid			delete_types[3] = {REGCLASSOID, TEXTOID, INT8ARRAYOID};
		Datum		delete_values[3];

		for (i = 0; i < SPI_processed; i++)
		{
			bool		isnull;
			Datum		seq = SPI_getbinval(SPI_tuptable->vals[i],
											SPI_tuptable->tupdesc, 1, &isnull);
			TransactionId xmin = DatumGetTransactionId(SPI_getbinval(SPI_tuptable->vals[i],
																	 SPI_tuptable->tupdesc,
																	 2, &isnull));

			if (!TransactionIdIsCurrentTransactionId(xmin))
				gone[ngone++] = seq;
		}
		if (ngone > 0)
		{
			delete_values[0] = values[0];
			delete_values[1] = values[1];
			delete_values[2] = PointerGetDatum(construct_array(gone, ngone, INT8OID,
															   sizeof(int64), FLOAT8PASSBYVAL,
															   TYPALIGN_DOUBLE));
			if (SPI_execute_with_args("DELETE FROM stream_seq.parked "
									  "WHERE stream = $1 AND consumer = $2 "
									  "AND seq = ANY ($3)",
									  3, delete_types, delete_values, NULL, false, 0) < 0)
				elog(ERROR, "could not delete resolved parked rows");
		}
	}

	/*
	 * Due means due by the clock at this call: a worker's transaction may
	 * have begun long before (now() is its start).
	 */
	values[3] = TimestampTzGetDatum(GetCurrentTimestamp());
	if (key_order)
	{

		/*
		 * Per-key order: a keyed row only when no row of its key before it
		 * holds the key (seen in this statement's snapshot: a row another
		 * caller has taken but not committed still holds it), so at most
		 * one row of a key per call.  A held row is due as soon as that
		 * is so.  Whether a dead letter holds its key is the group's
		 * policy, read by the statement.
		 */
		if (SPI_execute_with_args(only_due ?
								  "UPDATE stream_seq.parked p SET resolved = true "
								  "WHERE (stream, consumer, seq) IN ("
								  "  SELECT x.stream, x.consumer, x.seq FROM stream_seq.parked x "
								  "   WHERE x.stream = $1 AND x.consumer = $2 AND NOT x.resolved "
								  "     AND NOT x.dead AND (x.due_at <= $4 OR x.held) "
								  "     AND (x.key IS NULL OR NOT EXISTS ("
								  "          SELECT FROM stream_seq.parked q "
								  "           WHERE q.stream = x.stream AND q.consumer = x.consumer "
								  "             AND pg_catalog.hashtextextended(q.key, 0) = "
								  "                 pg_catalog.hashtextextended(x.key, 0) "
								  "             AND q.key = x.key AND q.seq < x.seq AND "
								  STREAM_KEY_BLOCKS("q", UNTIL_RELEASED) ")) "
								  "   ORDER BY x.seq LIMIT $3 FOR UPDATE OF x SKIP LOCKED) "
								  "RETURNING p.seq, p.reason, p.attempts" :
								  "UPDATE stream_seq.parked p SET resolved = true "
								  "WHERE (stream, consumer, seq) IN ("
								  "  SELECT x.stream, x.consumer, x.seq FROM stream_seq.parked x "
								  "   WHERE x.stream = $1 AND x.consumer = $2 AND NOT x.resolved "
								  "     AND (x.key IS NULL OR NOT EXISTS ("
								  "          SELECT FROM stream_seq.parked q "
								  "           WHERE q.stream = x.stream AND q.consumer = x.consumer "
								  "             AND pg_catalog.hashtextextended(q.key, 0) = "
								  "                 pg_catalog.hashtextextended(x.key, 0) "
								  "             AND q.key = x.key AND q.seq < x.seq AND "
								  STREAM_KEY_BLOCKS("q", UNTIL_RELEASED) ")) "
								  "   ORDER BY x.seq LIMIT $3 FOR UPDATE OF x SKIP LOCKED) "
								  "RETURNING p.seq, p.reason, p.attempts",
								  4, argtypes, values, NULL, false, 0) < 0)
			elog(ERROR, "could not take parked rows");
	}
	else if (SPI_execute_with_args(only_due ?
							  "UPDATE stream_seq.parked p SET resolved = true "
							  "WHERE (stream, consumer, seq) IN ("
							  "  SELECT stream, consumer, seq FROM stream_seq.parked "
							  "   WHERE stream = $1 AND consumer = $2 AND NOT resolved "
							  "     AND NOT dead AND due_at <= $4 "
							  "   ORDER BY seq LIMIT $3 FOR UPDATE SKIP LOCKED) "
							  "RETURNING p.seq, p.reason, p.attempts" :
							  "UPDATE stream_seq.parked p SET resolved = true "
							  "WHERE (stream, consumer, seq) IN ("
							  "  SELECT stream, consumer, seq FROM stream_seq.parked "
							  "   WHERE stream = $1 AND consumer = $2 AND NOT resolved "
							  "   ORDER BY seq LIMIT $3 FOR UPDATE SKIP LOCKED) "
							  "RETURNING p.seq, p.reason, p.attempts",
							  4, argtypes, values, NULL, false, 0) < 0)
		elog(ERROR, "could not take parked rows");
	for (i = 0; i < SPI_processed; i++)
	{
		Datum		out[3];
		bool		nulls[3];
		int			j;

		for (j = 0; j < 3; j++)
			out[j] = SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc,
								   j + 1, &nulls[j]);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, out, nulls);
	}
	SPI_finish();
	stream_run_as_end(save_nestlevel, save_userid, save_sec_context);
	return (Datum) 0;
}

/*
 * stream_seq_set_retry_policy
 *		SQL: set_retry_policy(stream, consumer, max_attempts, delay
 *		DEFAULT '10 seconds', backoff DEFAULT 2, max_delay DEFAULT '1
 *		hour'): the consumer's retry policy (max_attempts NULL: none, rows
 *		parked from then on wait for replay()).  Rows parked before keep
 *		their schedule until they are parked again.
 */
Datum
stream_seq_set_retry_policy(PG_FUNCTION_ARGS)
{
	Oid			relid;
	char	   *consumer;
	Oid			argtypes[6] = {REGCLASSOID, TEXTOID, INT4OID, INTERVALOID,
	FLOAT8OID, INTERVALOID};
	Datum		values[6];
	char		nulls[6] = {' ', ' ', ' ', ' ', ' ', ' '};

	consumer = check_parking_caller(fcinfo, 2, "stream table and consumer name");
	relid = PG_GETARG_OID(0);
	values[0] = ObjectIdGetDatum(relid);
	values[1] = CStringGetTextDatum(consumer);
	if (PG_ARGISNULL(2))
	{
		int			i;

		for (i = 2; i < 6; i++)
		{
			values[i] = (Datum) 0;
			nulls[i] = 'n';
		}
	}
	else
	{
		int32		max_attempts = PG_GETARG_INT32(2);
		Interval   *delay;
		float8		backoff;
		Interval   *max_delay;

		if (PG_ARGISNULL(3) || PG_ARGISNULL(4) || PG_ARGISNULL(5))
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("delay, backoff and max_delay of a retry policy must not be null")));
		delay = PG_GETARG_INTERVAL_P(3);
		backoff = PG_GETARG_FLOAT8(4);
		max_delay = PG_GETARG_INTERVAL_P(5);
		if (max_attempts < 1)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("max_attempts must be at least 1, not %d", max_attempts)));
		if (interval_is_negative(delay))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("the retry delay must not be negative")));
		if (isnan(backoff) || backoff < 1.0 || backoff > MAX_RETRY_BACKOFF)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("backoff must be between 1 and %g", MAX_RETRY_BACKOFF),
					 errhint("1 waits the same delay before every retry; 2 doubles it each time.")));
		if (DatumGetInt32(DirectFunctionCall2(interval_cmp,
											  IntervalPGetDatum(max_delay),
											  IntervalPGetDatum(delay))) < 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("max_delay must not be below the retry delay")));
		if (DatumGetInt32(DirectFunctionCall2(interval_cmp,
											  IntervalPGetDatum(max_delay),
											  DirectFunctionCall3(interval_in,
																  CStringGetDatum(MAX_RETRY_DELAY),
																  ObjectIdGetDatum(InvalidOid),
																  Int32GetDatum(-1)))) > 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("max_delay must be at most %s", MAX_RETRY_DELAY)));
		values[2] = Int32GetDatum(max_attempts);
		values[3] = IntervalPGetDatum(delay);
		values[4] = Float8GetDatum(backoff);
		values[5] = IntervalPGetDatum(max_delay);
	}
	stream_catalog_hold(relid, consumer);
	stream_catalog_exec_nulls("UPDATE stream_seq.consumer SET max_attempts = $3, "
							  "retry_delay = $4, retry_backoff = $5, retry_max_delay = $6 "
							  "WHERE stream = $1 AND consumer = $2",
							  6, argtypes, values, nulls);
	PG_RETURN_VOID();
}

/*
 * stream_seq_revive
 *		SQL: revive(stream, consumer, seq bigint DEFAULT NULL): make dead
 *		letters (one, or all of the consumer's) due again now, in the
 *		caller's transaction, for the consumer's due() to hand back; their
 *		attempts are kept, so the next failure makes one dead again unless
 *		the policy allows more.  Returns how many.
 */
Datum
stream_seq_revive(PG_FUNCTION_ARGS)
{
	Oid			relid;
	char	   *consumer;
	Oid			argtypes[3] = {REGCLASSOID, TEXTOID, INT8OID};
	Datum		values[3];
	char		nulls[3] = {' ', ' ', ' '};

	consumer = check_parking_caller(fcinfo, 2, "stream table and consumer name");
	relid = PG_GETARG_OID(0);
	values[0] = ObjectIdGetDatum(relid);
	values[1] = CStringGetTextDatum(consumer);
	if (PG_NARGS() > 2 && !PG_ARGISNULL(2))
		values[2] = Int64GetDatum(PG_GETARG_INT64(2));
	else
	{
		values[2] = (Datum) 0;
		nulls[2] = 'n';
	}
	stream_catalog_hold(relid, consumer);
	PG_RETURN_INT64((int64) stream_catalog_exec_nulls("UPDATE stream_seq.parked "
													  "SET dead = false, due_at = pg_catalog.now() "
													  "WHERE stream = $1 AND consumer = $2 AND dead AND NOT resolved "
													  "AND ($3::pg_catalog.int8 IS NULL OR seq = $3)",
													  3, argtypes, values, nulls));
}

/*
 * check_key_order_group
 *		Per-key order needs a group (its key) and a database updated to
 *		0.8.0.
 */
static void
check_key_order_group(Oid relid, const char *consumer)
{
	Oid			owner;
	int			slots;

	if (!stream_have_key_order())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("per-key order needs the extension's objects of version 0.8.0"),
				 errhint("Run ALTER EXTENSION stream_seq UPDATE.")));
	(void) stream_consumer_lookup(relid, consumer, false, &owner, &slots);
	if (slots == 0)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("consumer \"%s\" of stream table \"%s\" is not a group",
						consumer, stream_rel_name(relid)),
				 errdetail("Per-key order holds the rows of a group's key; a plain consumer has no key.")));
}

/*
 * stream_seq_set_key_order
 *		SQL: set_key_order(stream, consumer, hold text): the group's per-key
 *		order, in the caller's transaction.  'until_applied': a parked row
 *		holds its key until it is applied, and a dead letter lets its key
 *		go on; 'until_released': a dead letter holds its key until
 *		release_key(); 'off': keys are not held (rows held before are
 *		still handed back by due() in order, and new rows of their keys are
 *		read at once).
 */
Datum
stream_seq_set_key_order(PG_FUNCTION_ARGS)
{
	Oid			relid;
	char	   *consumer;
	char	   *hold;
	Oid			argtypes[3] = {REGCLASSOID, TEXTOID, TEXTOID};
	Datum		values[3];
	char		nulls[3] = {' ', ' ', ' '};

	consumer = check_parking_caller(fcinfo, 3, "stream table, consumer name and hold");
	relid = PG_GETARG_OID(0);
	hold = text_to_cstring(PG_GETARG_TEXT_PP(2));
	if (strcmp(hold, "until_applied") != 0 && strcmp(hold, "until_released") != 0 &&
		strcmp(hold, "off") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid value for hold: \"%s\"", hold),
				 errhint("Use 'until_applied', 'until_released' or 'off'.")));
	check_key_order_group(relid, consumer);
	values[0] = ObjectIdGetDatum(relid);
	values[1] = CStringGetTextDatum(consumer);
	if (strcmp(hold, "off") == 0)
	{
		values[2] = (Datum) 0;
		nulls[2] = 'n';
	}
	else
		values[2] = CStringGetTextDatum(hold);
	stream_catalog_hold(relid, consumer);
	stream_catalog_exec_nulls("UPDATE stream_seq.consumer SET key_order = $3 "
							  "WHERE stream = $1 AND consumer = $2",
							  3, argtypes, values, nulls);
	PG_RETURN_VOID();
}

/*
 * stream_seq_release_key
 *		SQL: release_key(stream, consumer, key text, reason text): let a
 *		held key go on, in the caller's transaction: its parked rows that
 *		hold it (failures and dead letters, not its held rows) are marked
 *		released with the reason and the time; they stay parked (a dead
 *		letter stays dead, a scheduled retry is still due) but no longer
 *		hold the key, whose held rows due() then hands back in order.
 *		Returns how many rows it released (0: the key was not held by a
 *		failed row).
 */
Datum
stream_seq_release_key(PG_FUNCTION_ARGS)
{
	Oid			relid;
	char	   *consumer;
	Oid			argtypes[5] = {REGCLASSOID, TEXTOID, TEXTOID, TEXTOID, TIMESTAMPTZOID};
	Datum		values[5];

	consumer = check_parking_caller(fcinfo, 4, "stream table, consumer name, key and reason");
	relid = PG_GETARG_OID(0);
	check_key_order_group(relid, consumer);
	values[0] = ObjectIdGetDatum(relid);
	values[1] = CStringGetTextDatum(consumer);
	values[2] = PointerGetDatum(PG_GETARG_TEXT_PP(2));
	values[3] = PointerGetDatum(PG_GETARG_TEXT_PP(3));
	values[4] = TimestampTzGetDatum(GetCurrentTimestamp());
	stream_catalog_hold(relid, consumer);
	PG_RETURN_INT64((int64) stream_catalog_exec("UPDATE stream_seq.parked "
												"SET released_at = $5, release_reason = $4 "
												"WHERE stream = $1 AND consumer = $2 "
												"AND pg_catalog.hashtextextended(key, 0) = "
												"    pg_catalog.hashtextextended($3, 0) "
												"AND key = $3 "
												"AND NOT resolved AND NOT held AND released_at IS NULL",
												5, argtypes, values, NULL, 0, NULL));
}
