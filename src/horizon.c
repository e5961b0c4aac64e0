/*-------------------------------------------------------------------------
 *
 * horizon.c
 *	  The read horizon of a stream for a snapshot, and the SQL functions
 *	  that report it: horizon(), head() and the per-stream status behind
 *	  the stream_seq.streams view.
 *
 * horizon(S) is the smallest "lo" over the entries that S cannot yet see as
 * committed and durable, or the counter if there is none.  Every row with a
 * number below it that ever commits is visible in S.
 *
 * Within one statement the value must not change: a scan that filtered
 * some rows with a lower horizon and later ones with a higher one could
 * return row 7 and not row 5.  So the value is remembered per snapshot for
 * the rest of the statement (see horizon_cache_lookup).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/procarray.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

#include "stream_seq.h"

PG_FUNCTION_INFO_V1(stream_seq_horizon);
PG_FUNCTION_INFO_V1(stream_seq_head);
PG_FUNCTION_INFO_V1(stream_seq_status);
PG_FUNCTION_INFO_V1(stream_seq_holders);

/*
 * One remembered horizon: the stream, the snapshot it was computed for
 * (its address and its contents, so that a reused address with different
 * contents never matches), and the value.
 */
typedef struct HorizonCacheEntry
{
	Oid			relid;
	Snapshot	snapshot;
	TransactionId xmin;
	TransactionId xmax;
	uint32		xcnt;
	int32		subxcnt;
	bool		suboverflowed;
	CommandId	curcid;
	TransactionId *xip;			/* copies, in TopTransactionContext */
	TransactionId *subxip;
	int64		horizon;
} HorizonCacheEntry;

#define HORIZON_CACHE_SIZE 8

static HorizonCacheEntry horizon_cache[HORIZON_CACHE_SIZE];
static int	horizon_cache_used = 0;
static int	horizon_cache_victim = 0;

/*
 * stream_horizon_reset_cache
 *		Forget remembered horizons; called at transaction end, when their
 *		copies in TopTransactionContext go away.
 */
void
stream_horizon_reset_cache(void)
{
	horizon_cache_used = 0;
	horizon_cache_victim = 0;
}

static bool
same_snapshot(HorizonCacheEntry *entry, Snapshot snapshot)
{
	return entry->snapshot == snapshot &&
		entry->xmin == snapshot->xmin &&
		entry->xmax == snapshot->xmax &&
		entry->xcnt == snapshot->xcnt &&
		entry->subxcnt == snapshot->subxcnt &&
		entry->suboverflowed == snapshot->suboverflowed &&
		entry->curcid == snapshot->curcid &&
		memcmp(entry->xip, snapshot->xip,
			   sizeof(TransactionId) * snapshot->xcnt) == 0 &&
		memcmp(entry->subxip, snapshot->subxip,
			   sizeof(TransactionId) * snapshot->subxcnt) == 0;
}

/*
 * horizon_cache_lookup
 *		The horizon already computed for this stream and snapshot, if any.
 */
static bool
horizon_cache_lookup(Oid relid, Snapshot snapshot, int64 *horizon)
{
	int			i;

	for (i = 0; i < horizon_cache_used; i++)
	{
		if (horizon_cache[i].relid == relid &&
			same_snapshot(&horizon_cache[i], snapshot))
		{
			*horizon = horizon_cache[i].horizon;
			return true;
		}
	}
	return false;
}

static void
horizon_cache_store(Oid relid, Snapshot snapshot, int64 horizon)
{
	HorizonCacheEntry *entry;
	MemoryContext oldcxt;

	if (horizon_cache_used < HORIZON_CACHE_SIZE)
		entry = &horizon_cache[horizon_cache_used++];
	else
	{
		entry = &horizon_cache[horizon_cache_victim];
		horizon_cache_victim = (horizon_cache_victim + 1) % HORIZON_CACHE_SIZE;
	}
	oldcxt = MemoryContextSwitchTo(TopTransactionContext);
	entry->relid = relid;
	entry->snapshot = snapshot;
	entry->xmin = snapshot->xmin;
	entry->xmax = snapshot->xmax;
	entry->xcnt = snapshot->xcnt;
	entry->subxcnt = snapshot->subxcnt;
	entry->suboverflowed = snapshot->suboverflowed;
	entry->curcid = snapshot->curcid;
	entry->xip = palloc(sizeof(TransactionId) * Max(snapshot->xcnt, 1));
	memcpy(entry->xip, snapshot->xip, sizeof(TransactionId) * snapshot->xcnt);
	entry->subxip = palloc(sizeof(TransactionId) * Max(snapshot->subxcnt, 1));
	memcpy(entry->subxip, snapshot->subxip,
		   sizeof(TransactionId) * snapshot->subxcnt);
	entry->horizon = horizon;
	MemoryContextSwitchTo(oldcxt);
}

/*
 * evicted_find
 *		Index of the first evicted entry whose xid does not precede "xid".
 */
static int
evicted_find(EvictedXact *evicted, int n, TransactionId xid)
{
	int			low = 0;
	int			high = n;

	while (low < high)
	{
		int			mid = low + (high - low) / 2;

		if (TransactionIdPrecedes(evicted[mid].xid, xid))
			low = mid + 1;
		else
			high = mid;
	}
	return low;
}

/*
 * evicted_horizon
 *		The lowest "lo" over evicted entries in progress for the snapshot,
 *		or PG_INT64_MAX.  Evicted entries are committed top-level
 *		transactions, so this is XidInMVCCSnapshot for each, done with the
 *		store's xid order: those at or above the snapshot's xmax, and those
 *		in its xip.  A fresh snapshot finds none.
 */
static int64
evicted_horizon(StreamSlot *slot, Snapshot snapshot)
{
	EvictedXact *evicted = stream_slot_evicted(slot);
	int			n = slot->nevicted;
	int64		result = PG_INT64_MAX;
	int			i;

	for (i = evicted_find(evicted, n, snapshot->xmax); i < n; i++)
		result = Min(result, evicted[i].lo);
	for (i = 0; i < snapshot->xcnt; i++)
	{
		int			pos = evicted_find(evicted, n, snapshot->xip[i]);

		if (pos < n && TransactionIdEquals(evicted[pos].xid, snapshot->xip[i]))
			result = Min(result, evicted[pos].lo);
	}
	return result;
}

/*
 * floor_in_progress
 *		Whether the snapshot might see a transaction folded into the floor
 *		as in progress.  Those are committed top-level transactions with
 *		xids between floor_min_xid and floor_xid; one is in progress for the
 *		snapshot only if it is at or above its xmax, or in its xip.  An xip
 *		entry that is still running cannot be one of them, which keeps an
 *		open transaction (on another table, say) from holding readers back.
 */
static bool
floor_in_progress(StreamSlot *slot, Snapshot snapshot)
{
	int			i;

	if (!TransactionIdPrecedes(slot->floor_xid, snapshot->xmax))
		return true;
	for (i = 0; i < snapshot->xcnt; i++)
	{
		TransactionId xid = snapshot->xip[i];

		if (TransactionIdPrecedes(xid, slot->floor_min_xid) ||
			TransactionIdFollows(xid, slot->floor_xid))
			continue;
		if (!TransactionIdIsInProgress(xid))
			return true;
	}
	return false;
}

/*
 * stream_compute_horizon
 *		The horizon of the stream for "snapshot", computed afresh.
 *
 *		An entry holds the horizon back at its "lo" when its transaction
 *		is in progress for the snapshot (so its rows are invisible in it),
 *		or finished but its outcome is not yet recorded, or committed but
 *		its commit record is not yet flushed (a crash could take it back).
 *		The caller's own entries are skipped: its rows are visible to it.
 *		If "visible_horizon" is given, it gets the horizon by visibility
 *		alone; where it is higher, commit records not yet flushed hold the
 *		result back (no commit will signal when that changes, so a waiter
 *		has to look again soon).
 */
int64
stream_compute_horizon(StreamRef *ref, Snapshot snapshot,
					   int64 *visible_horizon)
{
	StreamSlot *slot;
	int64		horizon;
	int64		durable_horizon;
	XLogRecPtr	flushed = InvalidXLogRecPtr;
	int			i;

	if (RecoveryInProgress())
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("stream horizons are not available during recovery"),
				 errdetail("A standby does not know which transactions hold numbers on the primary.")));

	slot = stream_slot_lock_started(ref, LW_SHARED);

	/*
	 * "horizon" is held back by visibility, "durable_horizon" by unflushed
	 * commits as well; the result is the lower.
	 */
	horizon = slot->next;
	durable_horizon = slot->next;
	for (i = 0; i < slot->nentries; i++)
	{
		StreamEntry *e = &slot->entries[i];

		if (e->state == ENTRY_ABORTED || e->lo >= durable_horizon)
			continue;
		if (TransactionIdIsCurrentTransactionId(e->xid))
			continue;
		if (e->state == ENTRY_ASSIGNED || XidInMVCCSnapshot(e->xid, snapshot))
		{
			horizon = Min(horizon, e->lo);
			durable_horizon = e->lo;
			continue;
		}
		if (flushed == InvalidXLogRecPtr)
			flushed = GetFlushRecPtr(NULL);
		if (e->commit_end > flushed)
			durable_horizon = e->lo;
	}
	if (slot->nevicted > 0)
	{
		int64		lo = evicted_horizon(slot, snapshot);

		horizon = Min(horizon, lo);
		durable_horizon = Min(durable_horizon, lo);
	}
	if (slot->floor_active && slot->floor_lo < durable_horizon)
	{
		if (floor_in_progress(slot, snapshot))
		{
			horizon = Min(horizon, slot->floor_lo);
			durable_horizon = slot->floor_lo;
		}
		else
		{
			if (flushed == InvalidXLogRecPtr)
				flushed = GetFlushRecPtr(NULL);
			if (slot->floor_lsn > flushed)
				durable_horizon = slot->floor_lo;
		}
	}
	LWLockRelease(slot->lock);
	if (visible_horizon != NULL)
		*visible_horizon = horizon;
	return durable_horizon;
}

/*
 * statement_snapshot
 *		The snapshot of the calling statement.
 */
static Snapshot
statement_snapshot(void)
{
	if (ActiveSnapshotSet())
		return GetActiveSnapshot();
	return GetTransactionSnapshot();
}

/*
 * stream_check_select
 *		Positions in a stream are readable by those who may read the table.
 */
void
stream_check_select(Oid relid)
{
	AclResult	aclresult = pg_class_aclcheck(relid, GetUserId(), ACL_SELECT);

	if (aclresult != ACLCHECK_OK)
		aclcheck_error(aclresult, OBJECT_TABLE, get_rel_name(relid));
}

/*
 * stream_statement_horizon
 *		The horizon for the calling statement's snapshot, the same value
 *		every time within the statement.
 */
int64
stream_statement_horizon(StreamRef *ref)
{
	Snapshot	snapshot = statement_snapshot();
	int64		horizon;

	if (!horizon_cache_lookup(ref->relid, snapshot, &horizon))
	{
		horizon = stream_compute_horizon(ref, snapshot, NULL);
		horizon_cache_store(ref->relid, snapshot, horizon);
	}
	stream_xact_computed_horizon = true;
	return horizon;
}

/*
 * stream_seq_horizon
 *		SQL: horizon(stream regclass) RETURNS bigint.  Requires SELECT on
 *		the table.
 */
Datum
stream_seq_horizon(PG_FUNCTION_ARGS)
{
	Oid			relid = PG_GETARG_OID(0);
	StreamRef  *ref = stream_lookup(relid, false);

	stream_check_select(relid);
	PG_RETURN_INT64(stream_statement_horizon(ref));
}

/*
 * stream_seq_head
 *		SQL: head(stream regclass) RETURNS bigint, the highest number handed
 *		out since the server started (before any is, and on a standby, the
 *		highest in the table); NULL for a stream that never had a number.
 *		Requires SELECT on the table.
 */
Datum
stream_seq_head(PG_FUNCTION_ARGS)
{
	Oid			relid = PG_GETARG_OID(0);
	StreamRef  *ref = stream_lookup(relid, false);
	StreamSlot *slot;
	int64		next;

	stream_check_select(relid);

	slot = stream_slot_lock(ref, LW_SHARED);
	if (slot->initialized)
	{
		next = slot->next;
		LWLockRelease(slot->lock);
	}
	else
	{
		/* during recovery this computes the value without keeping it */
		LWLockRelease(slot->lock);
		next = stream_initialize_counter(ref);
	}
	if (next <= 1)
		PG_RETURN_NULL();
	PG_RETURN_INT64(next - 1);
}

/*
 * stream_seq_status
 *		SQL: _status(stream regclass) RETURNS record, for the streams view:
 *		head, horizon for the caller's snapshot, transactions holding
 *		numbers, and the oldest of them.
 */
Datum
stream_seq_status(PG_FUNCTION_ARGS)
{
	Oid			relid = PG_GETARG_OID(0);
	StreamRef  *ref = stream_lookup(relid, false);
	TupleDesc	tupdesc;
	Datum		values[10];
	bool		nulls[10];
	StreamSlot *slot;
	int64		horizon;
	int64		visible_horizon;
	int			holding = 0;
	int			oldest = -1;
	int			i;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	memset(nulls, 0, sizeof(nulls));

	horizon = stream_compute_horizon(ref, statement_snapshot(),
									 &visible_horizon);

	slot = stream_slot_lock(ref, LW_SHARED);
	for (i = 0; i < slot->nentries; i++)
	{
		if (slot->entries[i].state != ENTRY_ASSIGNED)
			continue;
		holding++;
		if (oldest < 0)
			oldest = i;
	}
	values[0] = Int64GetDatum(slot->next - 1);
	nulls[0] = slot->next <= 1;
	values[1] = Int64GetDatum(horizon);
	values[2] = Int32GetDatum(holding);
	if (oldest >= 0)
	{
		StreamEntry *e = &slot->entries[oldest];

		values[3] = Int32GetDatum(e->pid);
		values[4] = TransactionIdGetDatum(e->xid);
		values[5] = TimestampTzGetDatum(e->assigned_at);
	}
	else
		nulls[3] = nulls[4] = nulls[5] = true;
	values[6] = Int32GetDatum(slot->nentries);
	values[7] = Int64GetDatum((int64) slot->evictions);
	values[8] = Int64GetDatum((int64) slot->assigned_xacts);
	values[9] = Int64GetDatum(visible_horizon);
	LWLockRelease(slot->lock);

	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

/*
 * stream_seq_holders
 *		SQL: _holders() RETURNS SETOF record: every tracked transaction of
 *		every stream of this database that still holds its stream's horizon
 *		back for new snapshots: still committing, or committed with its
 *		commit record not yet flushed.  Behind the stream_seq.holders view.
 */
Datum
stream_seq_holders(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	XLogRecPtr	flushed;
	int			slotno;

	stream_check_preloaded();
	InitMaterializedSRF(fcinfo, 0);
	flushed = GetFlushRecPtr(NULL);

	for (slotno = 0; slotno < stream_seq_max_streams; slotno++)
	{
		StreamSlot *slot = stream_slot_get(slotno);
		int			i;

		LWLockAcquire(slot->lock, LW_SHARED);
		if (!slot->in_use || slot->dboid != MyDatabaseId)
		{
			LWLockRelease(slot->lock);
			continue;
		}
		for (i = 0; i < slot->nentries; i++)
		{
			StreamEntry *e = &slot->entries[i];
			Datum		values[7];
			bool		nulls[7] = {0};

			if (e->state == ENTRY_ABORTED ||
				(e->state == ENTRY_COMMITTED && e->commit_end <= flushed))
				continue;
			values[0] = ObjectIdGetDatum(slot->relid);
			values[1] = Int32GetDatum(e->pid);
			values[2] = TransactionIdGetDatum(e->xid);
			values[3] = Int64GetDatum(e->lo);
			values[4] = Int64GetDatum(e->hi - e->lo);
			values[5] = CStringGetTextDatum(e->state == ENTRY_ASSIGNED ?
											"committing" :
											"committed, not yet flushed");
			values[6] = TimestampTzGetDatum(e->assigned_at);
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc,
								 values, nulls);
		}
		LWLockRelease(slot->lock);
	}
	return (Datum) 0;
}
