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
 * flushed (synchronous_commit = off), since no commit signals the flush.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "utils/inval.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "stream_seq.h"

PG_FUNCTION_INFO_V1(stream_seq_wait);

/* How often to look again while the horizon waits for a WAL flush. */
#define FLUSH_RECHECK_MS 5

/*
 * interval_to_ms
 *		Length of a timeout interval in milliseconds; negative is an error.
 */
static int64
interval_to_ms(Interval *timeout)
{
	int64		ms;

	ms = timeout->time / 1000 +
		((int64) timeout->day * SECS_PER_DAY +
		 (int64) timeout->month * DAYS_PER_MONTH * SECS_PER_DAY) * 1000;
	if (ms < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("timeout must not be negative")));
	return ms;
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
	Oid			relid = PG_GETARG_OID(0);
	int64		after = PG_GETARG_INT64(1);
	int64		timeout_ms = interval_to_ms(PG_GETARG_INTERVAL_P(2));
	StreamRef  *ref = stream_lookup(relid, false);
	TimestampTz deadline;
	StreamSlot *slot;
	int64		horizon;

	stream_check_select(relid);
	if (IsolationUsesXactSnapshot())
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("stream_seq.wait() cannot be used in a REPEATABLE READ or SERIALIZABLE transaction"),
				 errdetail("The transaction's snapshot would not see the rows it waits for.")));

	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms);
	slot = stream_slot_get(ref->slotno);
	for (;;)
	{
		int64		visible_horizon;
		long		sleep_ms;
		TimestampTz now;

		ConditionVariablePrepareToSleep(&slot->advanced);
		horizon = stream_compute_horizon(ref, GetLatestSnapshot(),
										 &visible_horizon);
		if (horizon > after + 1)
			break;

		now = GetCurrentTimestamp();
		if (now >= deadline)
			break;
		sleep_ms = (long) Min(TimestampDifferenceMilliseconds(now, deadline),
							  (int64) INT_MAX);
		if (visible_horizon > horizon)	/* waiting for a WAL flush */
			sleep_ms = Min(sleep_ms, FLUSH_RECHECK_MS);
		(void) ConditionVariableTimedSleep(&slot->advanced, Max(sleep_ms, 1),
										   PG_WAIT_EXTENSION);

		/*
		 * The wake-up may come from disable() or DROP TABLE: take in their
		 * invalidations and look the stream up again (stream_slot_lock
		 * raises an error if its slot changed owner before they arrive).
		 */
		AcceptInvalidationMessages();
		ref = stream_lookup(relid, false);
		slot = stream_slot_get(ref->slotno);
	}
	ConditionVariableCancelSleep();
	PG_RETURN_INT64(horizon);
}
