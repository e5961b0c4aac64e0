/*-------------------------------------------------------------------------
 *
 * wait.c
 *	  wait(): block until a stream's horizon passes a position, woken by
 *	  the commits and aborts on that stream, not by polling.
 *
 * Every transaction that finishes on a stream broadcasts the stream's
 * condition variable (stream_finish_entry).  The waiter computes the
 * horizon with a fresh snapshot each time it wakes; it only sleeps on a
 * timer when the horizon is held back by a commit record that is not yet
 * flushed (synchronous_commit = off), since no commit signals the flush,
 * and on a hot standby, where replay wakes it when a reservation is
 * replayed but nothing announces the replayed commits that make rows
 * readable: there it looks again every STANDBY_RECHECK_MS.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>

#include "access/xact.h"
#include "access/xlog.h"
#include "common/int.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "stream_seq.h"
#include "stats.h"
#include "shmem.h"
#include "catalog.h"
#include "horizon.h"

PG_FUNCTION_INFO_V1(stream_seq_wait);

/* How often to look again while the horizon waits for a WAL flush. */
#define FLUSH_RECHECK_MS 5

/*
 * How often to look again on a standby: replay announces reservations but
 * not the commits that make their rows visible.
 */
#define STANDBY_RECHECK_MS 10

/*
 * deadline_after
 *		The time "timeout" from now, or DT_NOEND for a timeout too long to
 *		represent (the wait then ends only by its condition or a cancel).
 *		A negative timeout is an error.
 */
static TimestampTz
deadline_after(Interval *timeout)
{
	TimestampTz now = GetCurrentTimestamp();
	int64		days;
	int64		usecs;
	int64		deadline;

	if (pg_mul_s64_overflow((int64) timeout->month, DAYS_PER_MONTH, &days) ||
		pg_add_s64_overflow(days, (int64) timeout->day, &days) ||
		pg_mul_s64_overflow(days, USECS_PER_DAY, &usecs) ||
		pg_add_s64_overflow(usecs, timeout->time, &usecs))
	{
		if (timeout->month < 0 || timeout->day < 0 || timeout->time < 0)
			usecs = -1;
		else
			return DT_NOEND;
	}
	if (usecs < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("timeout must not be negative")));
	if (pg_add_s64_overflow(now, usecs, &deadline) || deadline >= DT_NOEND)
		return DT_NOEND;
	return deadline;
}

/*
 * stream_seq_wait
 *		SQL: wait(stream regclass, after bigint, timeout interval) RETURNS
 *		bigint.  Returns the horizon as soon as it is above after + 1 (the
 *		row after "after" is readable), or when the timeout ends.  The value
 *		is a horizon for a snapshot taken now; the reading statement must
 *		still bound itself by horizon().
 */
Datum
stream_seq_wait(PG_FUNCTION_ARGS)
{
	Oid			relid;
	int64		after;
	TimestampTz deadline;
	StreamRef  *ref;
	ConditionVariable *cv;
	int64		horizon;
	MemoryContext per_check;
	MemoryContext caller;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1) || PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("stream table, position and timeout must not be null")));
	relid = PG_GETARG_OID(0);
	after = PG_GETARG_INT64(1);
	deadline = deadline_after(PG_GETARG_INTERVAL_P(2));
	ref = stream_lookup(relid, false);

	stream_check_select(relid);
	if (IsolationUsesXactSnapshot())
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("stream_seq.wait() cannot be used in a REPEATABLE READ or SERIALIZABLE transaction"),
				 errdetail("The transaction's snapshot would not see the rows it waits for.")));

	/*
	 * Each check may allocate (on a standby with nothing replayed for the
	 * stream, it reads the table's maximum every STANDBY_RECHECK_MS): in a
	 * context of its own, emptied before the next, so that a long timeout
	 * does not grow the caller's memory.
	 */
	per_check = AllocSetContextCreate(CurrentMemoryContext,
									  "stream_seq wait",
									  ALLOCSET_SMALL_SIZES);
	caller = MemoryContextSwitchTo(per_check);
	cv = stream_slot_advanced_cv(ref);
	for (;;)
	{
		int64		visible_horizon;
		long		sleep_ms;
		TimestampTz now;

		MemoryContextReset(per_check);
		ConditionVariablePrepareToSleep(cv);
		horizon = stream_compute_horizon(ref, GetLatestSnapshot(),
										 &visible_horizon);
		/* the row after "after" is readable: horizon > after + 1 */
		if (horizon - 1 > after)
			break;

		now = GetCurrentTimestamp();
		if (now >= deadline)
			break;
		sleep_ms = (long) Min(TimestampDifferenceMilliseconds(now, deadline),
							  (int64) INT_MAX);
		if (visible_horizon > horizon)	/* waiting for a WAL flush */
			sleep_ms = Min(sleep_ms, FLUSH_RECHECK_MS);
		if (RecoveryInProgress())
			sleep_ms = Min(sleep_ms, STANDBY_RECHECK_MS);
		(void) ConditionVariableTimedSleep(cv, Max(sleep_ms, 1),
										   stream_wait_event(STREAM_WAIT_ADVANCE));

		/*
		 * The wake-up may come from disable() or DROP TABLE: take in their
		 * invalidations and look the stream up again (the slot's owner is
		 * checked when it is locked, and a changed owner is an error).
		 */
		AcceptInvalidationMessages();
		ref = stream_lookup(relid, false);
		if (stream_slot_advanced_cv(ref) != cv)
		{
			ConditionVariableCancelSleep();
			cv = stream_slot_advanced_cv(ref);
		}
	}
	ConditionVariableCancelSleep();
	MemoryContextSwitchTo(caller);
	MemoryContextDelete(per_check);
	PG_RETURN_INT64(horizon);
}
