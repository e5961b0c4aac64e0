/*-------------------------------------------------------------------------
 *
 * horizon.c
 *	  The read horizon of a stream for a snapshot, remembered for the
 *	  snapshot's life, and the SQL functions horizon() and head().
 *
 * horizon(S) is the smallest "lo" over the entries that S cannot yet see as
 * committed and durable, or the counter if there is none (shmem.c computes
 * it).  Every row with a number below it that ever commits is visible in S.
 *
 * For one snapshot the value must never change: a scan that filtered some
 * rows with a lower horizon and later ones with a higher one could return
 * rows 3-6 and not 1-2, and a reader that moves its cursor to 6 skips 1-2.
 * A later computation for the same snapshot can only give a higher value
 * (a commit record got flushed, a finished transaction was recorded), so
 * the first value computed for a snapshot is remembered for as long as the
 * snapshot can be in use (see the memo below), not for a fixed number of
 * entries.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "common/hashfn.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/acl.h"
#include "utils/hsearch.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

#include "stream_seq.h"
#include "horizon.h"
#include "shmem.h"
#include "catalog.h"
#include "counter.h"

PG_FUNCTION_INFO_V1(stream_seq_horizon);
PG_FUNCTION_INFO_V1(stream_seq_head);

/*
 * The memo: for each (stream, snapshot content) the horizon first computed
 * for it in this transaction.  A snapshot is identified by what decides
 * visibility of a top-level xid in it (xmin, xmax, xip, and subxip where
 * the snapshot has one), not by its address: two snapshots with the same
 * content see the same rows, so the same value is right for both, and an
 * address can be reused by a later snapshot.  The key holds the scalar
 * parts and a hash of the arrays; the arrays themselves are compared in
 * the variants of an entry.
 *
 * Lifetime: the memo lives in TopTransactionContext until transaction end.
 * Entries whose xmin precedes MyProc->xmin are dropped: every snapshot this
 * backend still uses has an xmin at or above MyProc->xmin (PostgreSQL
 * advances it only to the oldest registered snapshot, and only while no
 * snapshot is active), and every later one will too, so no live or future
 * snapshot can match them.
 *
 * That is the only bound.  While another session holds the xmin back, a
 * long READ COMMITTED transaction adds an entry (about 200 bytes) for each
 * statement that computes a horizon, none of which can be dropped, until
 * it ends: 40,000 such statements held 8 MB.  Dropping entries by any
 * other rule is not safe.  A horizon computed again for a snapshot still
 * in use can be higher than the one given before (an entry whose
 * transaction aborted meanwhile no longer counts), and a statement that
 * evaluates "seq < horizon()" per row in physical order (a sequential
 * scan's filter, a cursor fetched over many statements) would then reject
 * a row with the old value and return a later one with the new value: a
 * reader moving its cursor to the later row skips the earlier.  Nothing
 * tells a finished snapshot from a live one by its content, so all stay.
 */
typedef struct SnapshotKey
{
	Oid			relid;
	TransactionId xmin;
	TransactionId xmax;
	uint32		xcnt;
	int32		subxcnt;		/* -1: no subxip (overflowed snapshot) */
	uint32		xids_hash;
} SnapshotKey;

typedef struct MemoVariant
{
	TransactionId *xids;		/* xip, then subxip if the snapshot has one */
	int64		horizon;
} MemoVariant;

typedef struct HorizonMemo
{
	SnapshotKey key;			/* hash key */
	List	   *variants;		/* MemoVariant, usually exactly one */
} HorizonMemo;

static HTAB *horizon_memo = NULL;
static long horizon_memo_count = 0;
static long horizon_memo_prune_at = 0;

/*
 * Whether this transaction computed a horizon for a statement (assign.c
 * then keeps its whole reservation: it may have seen the counter above
 * what it used while skipping its own entry).
 */
static bool computed_horizon = false;

#define MEMO_PRUNE_MIN 64

/*
 * forget_at_xact_end
 *		Transaction callback: forget the memo at transaction end, when its
 *		memory in TopTransactionContext goes away.  Cannot fail.
 */
static void
forget_at_xact_end(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT ||
		event == XACT_EVENT_PREPARE)
	{
		horizon_memo = NULL;
		horizon_memo_count = 0;
		horizon_memo_prune_at = 0;
		computed_horizon = false;
	}
}

/*
 * stream_horizon_init
 *		Register the transaction callback (from _PG_init).
 */
void
stream_horizon_init(void)
{
	RegisterXactCallback(forget_at_xact_end, NULL);
}

/*
 * stream_xact_computed_horizon
 *		Whether the current transaction computed a statement's horizon.
 */
bool
stream_xact_computed_horizon(void)
{
	return computed_horizon;
}

/*
 * snapshot_subxcnt
 *		How many subxip entries the snapshot carries: none when it is
 *		overflowed, as CopySnapshot then leaves subxip NULL whatever
 *		subxcnt says, except for a snapshot taken during recovery, whose
 *		subxip holds every running xid and is always copied.
 */
static int32
snapshot_subxcnt(Snapshot snapshot)
{
	if (snapshot->suboverflowed && !snapshot->takenDuringRecovery)
		return -1;
	return snapshot->subxcnt;
}

/*
 * snapshot_key
 *		The memo key of (relid, snapshot).
 */
static void
snapshot_key(Oid relid, Snapshot snapshot, SnapshotKey *key)
{
	int32		subxcnt = snapshot_subxcnt(snapshot);
	uint32		hash;

	memset(key, 0, sizeof(SnapshotKey));
	key->relid = relid;
	key->xmin = snapshot->xmin;
	key->xmax = snapshot->xmax;
	key->xcnt = snapshot->xcnt;
	key->subxcnt = subxcnt;
	hash = hash_bytes((const unsigned char *) snapshot->xip,
					  sizeof(TransactionId) * snapshot->xcnt);
	if (subxcnt > 0)
		hash = hash_combine(hash,
							hash_bytes((const unsigned char *) snapshot->subxip,
									   sizeof(TransactionId) * subxcnt));
	key->xids_hash = hash;
}

/*
 * variant_matches
 *		Whether a remembered variant has the snapshot's arrays.
 */
static bool
variant_matches(MemoVariant *variant, Snapshot snapshot)
{
	int32		subxcnt = snapshot_subxcnt(snapshot);

	if (memcmp(variant->xids, snapshot->xip,
			   sizeof(TransactionId) * snapshot->xcnt) != 0)
		return false;
	return subxcnt <= 0 ||
		memcmp(variant->xids + snapshot->xcnt, snapshot->subxip,
			   sizeof(TransactionId) * subxcnt) == 0;
}

/*
 * prune_memo
 *		Drop the entries no live or future snapshot can match (see above).
 *		Called when the memo has doubled since the last pruning, so the
 *		work is constant per entry.
 */
static void
prune_memo(void)
{
	TransactionId backend_xmin = MyProc->xmin;
	HASH_SEQ_STATUS status;
	HorizonMemo *memo;

	horizon_memo_prune_at = Max(MEMO_PRUNE_MIN, 2 * horizon_memo_count);
	if (!TransactionIdIsNormal(backend_xmin))
		return;
	hash_seq_init(&status, horizon_memo);
	while ((memo = hash_seq_search(&status)) != NULL)
	{
		ListCell   *lc;

		if (!TransactionIdPrecedes(memo->key.xmin, backend_xmin))
			continue;
		foreach(lc, memo->variants)
		{
			MemoVariant *variant = lfirst(lc);

			pfree(variant->xids);
			pfree(variant);
		}
		list_free(memo->variants);
		hash_search(horizon_memo, &memo->key, HASH_REMOVE, NULL);
		horizon_memo_count--;
	}
	horizon_memo_prune_at = Max(MEMO_PRUNE_MIN, 2 * horizon_memo_count);
}

/*
 * memo_lookup
 *		The remembered horizon of (relid, snapshot), if any.
 */
static bool
memo_lookup(Oid relid, Snapshot snapshot, int64 *horizon)
{
	SnapshotKey key;
	HorizonMemo *memo;
	ListCell   *lc;

	if (horizon_memo == NULL)
		return false;
	snapshot_key(relid, snapshot, &key);
	memo = hash_search(horizon_memo, &key, HASH_FIND, NULL);
	if (memo == NULL)
		return false;
	foreach(lc, memo->variants)
	{
		MemoVariant *variant = lfirst(lc);

		if (variant_matches(variant, snapshot))
		{
			*horizon = variant->horizon;
			return true;
		}
	}
	return false;
}

/*
 * memo_store
 *		Remember the horizon of (relid, snapshot) for the snapshot's life.
 */
static void
memo_store(Oid relid, Snapshot snapshot, int64 horizon)
{
	MemoryContext oldcxt = MemoryContextSwitchTo(TopTransactionContext);
	int32		subxcnt = snapshot_subxcnt(snapshot);
	SnapshotKey key;
	HorizonMemo *memo;
	MemoVariant *variant;
	bool		found;

	if (horizon_memo == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(SnapshotKey);
		ctl.entrysize = sizeof(HorizonMemo);
		ctl.hcxt = TopTransactionContext;
		horizon_memo = hash_create("stream_seq horizons", 16, &ctl,
								   HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
		horizon_memo_count = 0;
		horizon_memo_prune_at = MEMO_PRUNE_MIN;
	}
	else if (horizon_memo_count >= horizon_memo_prune_at)
		prune_memo();

	snapshot_key(relid, snapshot, &key);
	memo = hash_search(horizon_memo, &key, HASH_ENTER, &found);
	if (!found)
	{
		memo->variants = NIL;
		horizon_memo_count++;
	}
	variant = palloc(sizeof(MemoVariant));
	variant->xids = palloc(sizeof(TransactionId) *
						   Max(snapshot->xcnt + Max(subxcnt, 0), 1));
	memcpy(variant->xids, snapshot->xip,
		   sizeof(TransactionId) * snapshot->xcnt);
	if (subxcnt > 0)
		memcpy(variant->xids + snapshot->xcnt, snapshot->subxip,
			   sizeof(TransactionId) * subxcnt);
	variant->horizon = horizon;
	memo->variants = lappend(memo->variants, variant);
	MemoryContextSwitchTo(oldcxt);
}

/*
 * stream_standby_horizon
 *		The horizon of the stream for a snapshot of a standby, from what
 *		the standby replayed of the primary's reservations (shmem.c); what
 *		stands in the way if there is none (see standby_horizon).  For a
 *		stream nothing was replayed for since the standby knows every open
 *		reservation, no transaction holds numbers of it, and every number
 *		not yet replayed is above every number handed out so far: the
 *		highest number the snapshot sees, plus one, is a horizon.
 */
StandbyHorizonResult
stream_standby_horizon(StreamRef *ref, Snapshot snapshot, int64 *horizon)
{
	StandbyHorizonResult result;

	/*
	 * Redo takes the slot of a stream that holds nothing a snapshot needs
	 * when it runs out of slots (shmem.c, reclaim_idle_slot): look the
	 * stream up again, which finds the slot redo gave it since, if any.
	 */
	while ((result = stream_slot_standby_horizon(ref, snapshot, horizon)) ==
		   STANDBY_HORIZON_MOVED)
		ref = stream_lookup(ref->relid, false);
	if (result == STANDBY_HORIZON_NOT_STARTED)
	{
		int64		max_number = stream_table_max(ref, snapshot);

		*horizon = max_number == PG_INT64_MIN ? 1 : max_number + 1;
		result = STANDBY_HORIZON_DONE;
	}
	return result;
}

/*
 * standby_horizon
 *		stream_standby_horizon, or the error that says why there is none:
 *		retryable until the standby has replayed a whole listing of the
 *		primary's open reservations (written every stream_seq.round_interval
 *		while the primary is busy), and for a snapshot taken before that
 *		which might not see such a reservation's rows.
 */
static int64
standby_horizon(StreamRef *ref, Snapshot snapshot)
{
	int64		horizon = 0;

	switch (stream_standby_horizon(ref, snapshot, &horizon))
	{
		case STANDBY_HORIZON_DONE:
		case STANDBY_HORIZON_NOT_STARTED:
		case STANDBY_HORIZON_MOVED:
			break;
		case STANDBY_HORIZON_INCOMPLETE:
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("stream horizons are not yet available on this standby"),
					 errdetail("The standby has not yet replayed the primary's list of transactions holding stream numbers."),
					 errhint("Try again shortly: the primary writes that list every \"stream_seq.round_interval\" while it writes WAL.")));
			break;
		case STANDBY_HORIZON_OLD_SNAPSHOT:
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("stream horizons are not available for a snapshot taken before this standby knew every transaction holding stream numbers"),
					 errhint("Start a new transaction.")));
			break;
		case STANDBY_HORIZON_LOST:
			ereport(ERROR,
					(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
					 errmsg("stream horizons are not available on this standby: more streams are in use than \"stream_seq.max_streams\" allows"),
					 errhint("Set \"stream_seq.max_streams\" on the standby at least as high as on the primary and restart the standby.")));
			break;
	}
	return horizon;
}

/*
 * stream_compute_horizon
 *		The horizon of the stream for "snapshot", computed afresh (starting
 *		the stream's counter first if need be).  If "visible_horizon" is
 *		given, it gets the horizon by visibility alone (see
 *		stream_slot_horizon).
 *
 *		On a standby, computed from the replayed reservations
 *		(standby_horizon).  Refused for a snapshot taken during recovery
 *		and used after a promotion: such a snapshot does not see rows the
 *		primary committed before the promotion that were not yet replayed
 *		when it was taken, and no entry of the promoted server says so.
 */
int64
stream_compute_horizon(StreamRef *ref, Snapshot snapshot,
					   int64 *visible_horizon)
{
	int64		horizon;
	int64		visible;

	if (RecoveryInProgress())
	{
		horizon = standby_horizon(ref, snapshot);
		if (visible_horizon != NULL)
			*visible_horizon = horizon;
		return horizon;
	}
	if (snapshot->takenDuringRecovery)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("stream horizons are not available for a snapshot taken during recovery"),
				 errdetail("The snapshot was taken before this server was promoted and may not see rows the horizon would pass."),
				 errhint("Start a new transaction.")));

	while (!stream_slot_horizon(ref, snapshot, &horizon, &visible))
		(void) stream_start_counter(ref);
	if (visible_horizon != NULL)
		*visible_horizon = visible;
	return horizon;
}

/*
 * stream_statement_snapshot
 *		The snapshot of the calling statement.
 */
Snapshot
stream_statement_snapshot(void)
{
	if (ActiveSnapshotSet())
		return GetActiveSnapshot();
	return GetTransactionSnapshot();
}

/*
 * stream_statement_horizon
 *		The horizon for the calling statement's snapshot, the same value
 *		for as long as that snapshot is in use.
 */
int64
stream_statement_horizon(StreamRef *ref)
{
	Snapshot	snapshot = stream_statement_snapshot();
	int64		horizon;

	if (!memo_lookup(ref->relid, snapshot, &horizon))
	{
		horizon = stream_compute_horizon(ref, snapshot, NULL);
		memo_store(ref->relid, snapshot, horizon);
	}
	computed_horizon = true;
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
	int64		next;
	int64		block_end;

	stream_check_select(relid);
	if (!stream_counter_read(ref, &next, &block_end))
		next = stream_start_counter(ref);	/* only computed in recovery */
	if (next <= 1)
		PG_RETURN_NULL();
	PG_RETURN_INT64(next - 1);
}
