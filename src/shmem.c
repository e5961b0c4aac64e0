/*-------------------------------------------------------------------------
 *
 * shmem.c
 *	  Shared memory of stream_seq: one slot per stream holding the number
 *	  counter and the list of transactions that hold numbers.
 *
 * Invariants, for every stream slot, all under the slot's lock:
 *
 *	(1) every number ever handed out is below "next"; "next" only moves
 *		forward, except that a transaction may give back the unused tail of
 *		its own reservation before it commits (stream_shrink);
 *	(2) every number ever handed out is below "block_end", and "block_end"
 *		is recorded durably in the stream's head sequence before numbers
 *		below it are handed out (catalog.c), so a restart never reuses one;
 *	(3) the reservation that advances "next" and the entry that records it
 *		are made under one exclusive lock acquisition, so a horizon reader
 *		that sees the advanced counter also sees the entry;
 *	(4) an entry is removed only when no snapshot can still need it: its
 *		transaction aborted, or committed with its commit record flushed and
 *		its xid older than the xmin of every live snapshot.  Running xids do
 *		not count: a transaction that holds no snapshot (idle in a
 *		transaction, say) cannot see anything as in progress.  When the
 *		list is full, the oldest committed and flushed entry moves to the
 *		"evicted" store, a compact array of (xid, lo) sorted by xid that the
 *		horizon checks exactly against each snapshot; only when that is
 *		full too does an entry fold into a conservative floor.
 *
 * horizon.c builds the read horizon from these; the argument that it never
 * lets a reader skip a row is in README.md ("Why the horizon is safe").
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/transam.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "storage/shmem.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"

#include "stream_seq.h"

#define STREAM_SEQ_TRANCHE "stream_seq"

/* Header of the extension's shared memory; slots follow it. */
typedef struct StreamShared
{
	LWLock	   *lock;			/* protects slot identity and allocation */
	int			nslots;
	int			capacity;		/* entries per slot */
	int			evicted_capacity;	/* evicted store entries per slot */
	Size		evicted_offset; /* where a slot's evicted store starts */
	Size		slot_size;
	char		slots[FLEXIBLE_ARRAY_MEMBER];
} StreamShared;

static StreamShared *shared = NULL;

/* Prune once this many entries exist and this many appends happened. */
#define PRUNE_MIN_ENTRIES	16
#define PRUNE_MIN_APPENDS	8

/*
 * Entries per slot: the configured number, but at least one more than the
 * number of backends, so that a full list always holds a finished entry
 * that can be folded into the floor (a backend holds at most one unfinished
 * entry per stream, and prepared transactions never hold any).
 */
static int
entries_per_slot(void)
{
	return Max(stream_seq_max_tracked_xacts, MaxBackends + 1);
}

/*
 * Evicted store entries per slot: four times the list, so that it takes a
 * snapshot older than five full lists of commits to reach the floor.
 */
static int
evicted_per_slot(void)
{
	return 4 * entries_per_slot();
}

static Size
evicted_offset(void)
{
	return MAXALIGN(add_size(offsetof(StreamSlot, entries),
							 mul_size(sizeof(StreamEntry), entries_per_slot())));
}

static Size
slot_size(void)
{
	return MAXALIGN(add_size(evicted_offset(),
							 mul_size(sizeof(EvictedXact), evicted_per_slot())));
}

static Size
shared_size(void)
{
	return add_size(MAXALIGN(offsetof(StreamShared, slots)),
					mul_size(slot_size(), stream_seq_max_streams));
}

/*
 * stream_shmem_request
 *		Ask for the shared memory and locks (shmem_request_hook).
 */
void
stream_shmem_request(void)
{
	RequestAddinShmemSpace(shared_size());
	RequestNamedLWLockTranche(STREAM_SEQ_TRANCHE, 1 + stream_seq_max_streams);
}

/*
 * stream_shmem_startup
 *		Create or attach the shared state (shmem_startup_hook).  All slots
 *		start free: counters are rebuilt lazily from the catalog and table.
 */
void
stream_shmem_startup(void)
{
	bool		found;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	shared = ShmemInitStruct("stream_seq", shared_size(), &found);
	if (!found)
	{
		LWLockPadded *locks = GetNamedLWLockTranche(STREAM_SEQ_TRANCHE);
		int			i;

		shared->lock = &locks[0].lock;
		shared->nslots = stream_seq_max_streams;
		shared->capacity = entries_per_slot();
		shared->evicted_capacity = evicted_per_slot();
		shared->evicted_offset = evicted_offset();
		shared->slot_size = slot_size();
		for (i = 0; i < shared->nslots; i++)
		{
			StreamSlot *slot = stream_slot_get(i);

			memset(slot, 0, offsetof(StreamSlot, entries));
			slot->lock = &locks[i + 1].lock;
			ConditionVariableInit(&slot->advanced);
		}
	}
	LWLockRelease(AddinShmemInitLock);
}

/*
 * stream_shmem_ready
 *		Whether the library was preloaded and its shared memory exists.
 */
bool
stream_shmem_ready(void)
{
	return shared != NULL;
}

/*
 * stream_check_preloaded
 *		Raise the documented error when the library is not preloaded; every
 *		entry point that needs shared memory calls this first.
 */
void
stream_check_preloaded(void)
{
	if (shared == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("stream_seq must be loaded via \"shared_preload_libraries\""),
				 errhint("Add stream_seq to the \"shared_preload_libraries\" setting and restart the server.")));
}

/*
 * stream_slot_get
 *		Address of slot number "slotno".
 */
StreamSlot *
stream_slot_get(int slotno)
{
	Assert(slotno >= 0 && slotno < shared->nslots);
	return (StreamSlot *) (shared->slots + (Size) slotno * shared->slot_size);
}

/*
 * stream_slot_evicted
 *		The evicted store of a slot: nevicted entries sorted by xid.
 */
EvictedXact *
stream_slot_evicted(StreamSlot *slot)
{
	return (EvictedXact *) ((char *) slot + shared->evicted_offset);
}

/*
 * reset_slot
 *		Give a slot to stream (dboid, relid) with an uninitialized counter.
 *		Caller holds the global lock and the slot's lock exclusively.
 */
static void
reset_slot(StreamSlot *slot, Oid dboid, Oid relid)
{
	slot->dboid = dboid;
	slot->relid = relid;
	slot->in_use = true;
	slot->generation++;
	slot->initialized = false;
	slot->next = 0;
	slot->block_end = 0;
	slot->floor_active = false;
	slot->nevicted = 0;
	slot->evictions = 0;
	slot->assigned_xacts = 0;
	slot->appends_since_prune = 0;
	slot->nentries = 0;
}

/*
 * find_slot
 *		Slot number of the stream in this database, or -1.  Caller holds the
 *		global lock.
 */
static int
find_slot(Oid relid)
{
	int			i;

	for (i = 0; i < shared->nslots; i++)
	{
		StreamSlot *slot = stream_slot_get(i);

		if (slot->in_use && slot->relid == relid &&
			slot->dboid == MyDatabaseId)
			return i;
	}
	return -1;
}

/*
 * stream_slot_attach
 *		Point "ref" at the shared slot of its stream, taking a free slot if
 *		the stream has none yet.  The caller has checked the catalog.
 */
void
stream_slot_attach(StreamRef *ref)
{
	int			slotno;

	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	slotno = find_slot(ref->relid);
	if (slotno < 0)
	{
		int			i;

		for (i = 0; i < shared->nslots; i++)
		{
			if (!stream_slot_get(i)->in_use)
			{
				slotno = i;
				break;
			}
		}
		if (slotno < 0)
		{
			LWLockRelease(shared->lock);
			ereport(ERROR,
					(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
					 errmsg("too many stream tables in use"),
					 errdetail("All %d stream slots are taken.",
							   shared->nslots),
					 errhint("Increase \"stream_seq.max_streams\" and restart the server.")));
		}
		LWLockAcquire(stream_slot_get(slotno)->lock, LW_EXCLUSIVE);
		reset_slot(stream_slot_get(slotno), MyDatabaseId, ref->relid);
		LWLockRelease(stream_slot_get(slotno)->lock);
	}
	ref->slotno = slotno;
	ref->generation = stream_slot_get(slotno)->generation;
	LWLockRelease(shared->lock);
}

/*
 * stream_slot_release
 *		Free the slot of a stream that was disabled or dropped.  Runs in a
 *		commit callback, so it must not fail.
 */
void
stream_slot_release(Oid dboid, Oid relid)
{
	int			i;

	if (shared == NULL)
		return;
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	for (i = 0; i < shared->nslots; i++)
	{
		StreamSlot *slot = stream_slot_get(i);

		if (slot->in_use && slot->relid == relid && slot->dboid == dboid)
		{
			LWLockAcquire(slot->lock, LW_EXCLUSIVE);
			slot->in_use = false;
			slot->generation++;
			slot->nentries = 0;
			slot->nevicted = 0;
			LWLockRelease(slot->lock);
			ConditionVariableBroadcast(&slot->advanced);
		}
	}
	LWLockRelease(shared->lock);
}

/*
 * stream_slot_lock
 *		Lock the slot of "ref" in "mode" and return it.  A slot that changed
 *		owner since the backend looked up the stream means the stream was
 *		disabled or its table dropped (and perhaps enabled again) meanwhile:
 *		that is an error, never a silent re-attach, which could give a
 *		dropped stream a new slot or this stream another one's horizon.  The
 *		next transaction looks the stream up afresh.
 */
StreamSlot *
stream_slot_lock(StreamRef *ref, LWLockMode mode)
{
	StreamSlot *slot = stream_slot_get(ref->slotno);

	LWLockAcquire(slot->lock, mode);
	if (slot->in_use && slot->generation == ref->generation &&
		slot->relid == ref->relid && slot->dboid == MyDatabaseId)
		return slot;
	LWLockRelease(slot->lock);
	ref->valid = false;
	if (get_rel_name(ref->relid) != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("stream table \"%s\" was disabled or dropped while in use",
						get_rel_name(ref->relid))));
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("stream table with OID %u was disabled or dropped while in use",
					ref->relid)));
	return NULL;				/* keep compiler quiet */
}

/*
 * entry_of
 *		The entry of transaction "xid", or NULL.  Searched from the end: the
 *		caller's entry is usually among the newest.
 */
static StreamEntry *
entry_of(StreamSlot *slot, TransactionId xid)
{
	int			i;

	for (i = slot->nentries - 1; i >= 0; i--)
	{
		if (TransactionIdEquals(slot->entries[i].xid, xid))
			return &slot->entries[i];
	}
	return NULL;
}

/*
 * stream_prune
 *		Drop entries no snapshot can need any more (invariant 4), and retire
 *		the floor once everything folded into it is equally finished.
 *		"oldest_xmin" and "flushed" may be stale: older values only keep
 *		more.  Caller holds the slot's lock exclusively.
 */
void
stream_prune(StreamSlot *slot, TransactionId oldest_xmin, XLogRecPtr flushed)
{
	int			i;
	int			kept = 0;

	for (i = 0; i < slot->nentries; i++)
	{
		StreamEntry *e = &slot->entries[i];
		bool		removable;

		removable = e->state == ENTRY_ABORTED ||
			(e->state == ENTRY_COMMITTED && e->commit_end <= flushed &&
			 TransactionIdPrecedes(e->xid, oldest_xmin));
		if (!removable)
		{
			if (kept != i)
				slot->entries[kept] = *e;
			kept++;
		}
	}
	slot->nentries = kept;
	slot->appends_since_prune = 0;

	/* the evicted store is sorted by xid: what is old enough is a prefix */
	if (slot->nevicted > 0)
	{
		EvictedXact *evicted = stream_slot_evicted(slot);
		int			n = 0;

		while (n < slot->nevicted &&
			   TransactionIdPrecedes(evicted[n].xid, oldest_xmin))
			n++;
		if (n > 0)
		{
			memmove(evicted, evicted + n,
					sizeof(EvictedXact) * (slot->nevicted - n));
			slot->nevicted -= n;
		}
	}

	if (slot->floor_active &&
		TransactionIdPrecedes(slot->floor_xid, oldest_xmin) &&
		slot->floor_lsn <= flushed)
		slot->floor_active = false;
}

/*
 * store_evicted
 *		Keep (xid, lo) of a committed, flushed entry in the evicted store,
 *		in xid order.  Xids arrive nearly in order, so the insertion point
 *		is found from the end.  Returns false if the store is full.
 */
static bool
store_evicted(StreamSlot *slot, StreamEntry *e)
{
	EvictedXact *evicted = stream_slot_evicted(slot);
	int			pos = slot->nevicted;

	if (slot->nevicted >= shared->evicted_capacity)
		return false;
	while (pos > 0 && TransactionIdPrecedes(e->xid, evicted[pos - 1].xid))
		pos--;
	memmove(&evicted[pos + 1], &evicted[pos],
			sizeof(EvictedXact) * (slot->nevicted - pos));
	evicted[pos].xid = e->xid;
	evicted[pos].lo = e->lo;
	slot->nevicted++;
	return true;
}

/*
 * fold_into_floor
 *		The last resort for a committed entry: the conservative floor.
 */
static void
fold_into_floor(StreamSlot *slot, StreamEntry *e)
{
	if (!slot->floor_active)
	{
		slot->floor_active = true;
		slot->floor_lo = e->lo;
		slot->floor_min_xid = e->xid;
		slot->floor_xid = e->xid;
		slot->floor_lsn = e->commit_end;
	}
	else
	{
		slot->floor_lo = Min(slot->floor_lo, e->lo);
		if (TransactionIdPrecedes(e->xid, slot->floor_min_xid))
			slot->floor_min_xid = e->xid;
		if (TransactionIdFollows(e->xid, slot->floor_xid))
			slot->floor_xid = e->xid;
		slot->floor_lsn = Max(slot->floor_lsn, e->commit_end);
	}
}

/*
 * evict_oldest_finished
 *		Make room in a full list: drop the oldest aborted entry, or move the
 *		oldest committed one to the evicted store (or, if its commit record
 *		is not flushed yet or the store is full, into the floor).  Returns
 *		false if every entry is still unfinished, which entries_per_slot()
 *		rules out.
 */
static bool
evict_oldest_finished(StreamSlot *slot)
{
	XLogRecPtr	flushed = GetFlushRecPtr(NULL);
	int			i;

	for (i = 0; i < slot->nentries; i++)
	{
		StreamEntry *e = &slot->entries[i];

		if (e->state == ENTRY_ASSIGNED)
			continue;
		if (e->state == ENTRY_COMMITTED)
		{
			if (e->commit_end > flushed || !store_evicted(slot, e))
				fold_into_floor(slot, e);
			slot->evictions++;
		}
		memmove(&slot->entries[i], &slot->entries[i + 1],
				sizeof(StreamEntry) * (slot->nentries - i - 1));
		slot->nentries--;
		return true;
	}
	return false;
}

/*
 * append_entry
 *		Record that transaction "xid" holds numbers from "lo" on.  Returns
 *		false if the list is full of unfinished entries.  Caller holds the
 *		slot's lock exclusively.
 */
static bool
append_entry(StreamSlot *slot, TransactionId xid, int64 lo)
{
	StreamEntry *e;

	if (slot->nentries >= shared->capacity && !evict_oldest_finished(slot))
		return false;

	e = &slot->entries[slot->nentries++];
	e->xid = xid;
	e->pid = MyProcPid;
	e->state = ENTRY_ASSIGNED;
	e->lo = lo;
	e->hi = lo;
	e->commit_end = InvalidXLogRecPtr;
	e->assigned_at = GetCurrentTimestamp();
	slot->appends_since_prune++;
	slot->assigned_xacts++;
	return true;
}

/*
 * report_list_full
 *		The error for a list with no finished entry to evict; raised after
 *		the slot's lock is released.
 */
static void
report_list_full(Oid relid)
{
	ereport(ERROR,
			(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
			 errmsg("too many transactions are committing on stream table \"%s\"",
					get_rel_name(relid)),
			 errhint("Increase \"stream_seq.max_tracked_xacts\" and restart the server.")));
}

/*
 * oldest_snapshot_xmin
 *		The oldest xmin of any live snapshot in this database, or the next
 *		xid if there is none.  Unlike GetOldestNonRemovableTransactionId this
 *		ignores running xids: a transaction without a snapshot cannot see
 *		an entry as in progress, and any snapshot it takes later sees every
 *		finished entry as finished.  A snapshot that saw an entry's
 *		transaction running published its xmin before that transaction
 *		could end (both happen under ProcArrayLock), so reading after the
 *		entry was marked committed sees it.
 */
static TransactionId
oldest_snapshot_xmin(void)
{
	TransactionId result = ReadNextTransactionId();
	uint32		i;

	LWLockAcquire(ProcArrayLock, LW_SHARED);
	for (i = 0; i < ProcGlobal->allProcCount; i++)
	{
		PGPROC	   *proc = &ProcGlobal->allProcs[i];
		TransactionId xmin = *((volatile TransactionId *) &proc->xmin);

		if (proc->databaseId == MyDatabaseId &&
			TransactionIdIsNormal(xmin) &&
			TransactionIdPrecedes(xmin, result))
			result = xmin;
	}
	LWLockRelease(ProcArrayLock);
	return result;
}

/*
 * maybe_prune
 *		Prune before an append when the list has grown.  The horizon of
 *		removable xids is computed before taking the slot's lock, so that no
 *		ProcArray scan happens under it; a stale value is merely cautious.
 */
static void
maybe_prune(StreamRef *ref)
{
	StreamSlot *slot = stream_slot_get(ref->slotno);
	TransactionId oldest_xmin;
	XLogRecPtr	flushed;

	/* unlocked peek; a wrong guess only delays or hastens pruning */
	if (slot->nentries < shared->capacity &&
		(slot->nentries < PRUNE_MIN_ENTRIES ||
		 slot->appends_since_prune < PRUNE_MIN_APPENDS))
		return;

	oldest_xmin = oldest_snapshot_xmin();
	flushed = GetFlushRecPtr(NULL);
	slot = stream_slot_lock(ref, LW_EXCLUSIVE);
	stream_prune(slot, oldest_xmin, flushed);
	LWLockRelease(slot->lock);
}

/*
 * stream_reserve
 *		Reserve up to "count" consecutive numbers for the current
 *		transaction; returns how many were reserved (at least one) and the
 *		first in *lo.  Fewer than asked are returned at the end of a
 *		recorded block; the caller asks again.  The first reservation of a
 *		transaction ("have_entry" false) appends its entry in the same lock
 *		acquisition that advances the counter (invariant 3).
 */
int64
stream_reserve(StreamRef *ref, int64 count, bool have_entry, int64 *lo)
{
	TransactionId xid = GetTopTransactionId();

	Assert(count > 0);

	if (!have_entry)
		maybe_prune(ref);

	for (;;)
	{
		StreamSlot *slot = stream_slot_lock(ref, LW_EXCLUSIVE);
		int64		n;

		if (!slot->initialized)
		{
			LWLockRelease(slot->lock);
			stream_initialize_counter(ref);
			continue;
		}
		if (slot->next >= slot->block_end)
		{
			LWLockRelease(slot->lock);
			stream_refill_block(ref);
			continue;
		}

		if (!have_entry && !append_entry(slot, xid, slot->next))
		{
			LWLockRelease(slot->lock);
			report_list_full(ref->relid);
		}
		n = Min(count, slot->block_end - slot->next);
		*lo = slot->next;
		slot->next += n;
		{
			StreamEntry *e = entry_of(slot, xid);

			if (e != NULL)
				e->hi = slot->next;
		}
		LWLockRelease(slot->lock);
		return n;
	}
}

/*
 * stream_add_entry
 *		Record that the current transaction holds numbers from "lo" on
 *		without taking any from the counter: used by enable(), whose numbers
 *		for existing rows were chosen before the counter existed.
 */
void
stream_add_entry(StreamRef *ref, int64 lo)
{
	TransactionId xid = GetTopTransactionId();
	StreamSlot *slot = stream_slot_lock(ref, LW_EXCLUSIVE);
	bool		ok = append_entry(slot, xid, lo);

	LWLockRelease(slot->lock);
	if (!ok)
		report_list_full(ref->relid);
}

/*
 * stream_shrink
 *		Give back [unused_from, unused_to), the unused tail of the current
 *		transaction's last reservation, if nobody reserved after it.  Called
 *		before commit: the transaction's entry, whose lo is at or below
 *		unused_from, has held every horizon at or below lo since the
 *		reservation, so no reader can have been told a horizon above it.
 */
void
stream_shrink(StreamRef *ref, int64 unused_from, int64 unused_to)
{
	TransactionId xid = GetTopTransactionId();
	StreamSlot *slot = stream_slot_lock(ref, LW_EXCLUSIVE);

	if (slot->next == unused_to)
	{
		StreamEntry *e = entry_of(slot, xid);

		if (e != NULL && e->lo <= unused_from)
		{
			slot->next = unused_from;
			e->hi = unused_from;
		}
	}
	LWLockRelease(slot->lock);
}

/*
 * stream_finish_entry
 *		Record the outcome of transaction "xid" on a stream and wake the
 *		waiters.  Runs in commit and abort callbacks: must not fail, hence
 *		no allocation and no catalog access.
 */
void
stream_finish_entry(int slotno, uint32 generation, TransactionId xid,
					bool committed, XLogRecPtr commit_end)
{
	StreamSlot *slot;
	StreamEntry *e;

	if (shared == NULL)
		return;
	slot = stream_slot_get(slotno);
	LWLockAcquire(slot->lock, LW_EXCLUSIVE);
	if (slot->in_use && slot->generation == generation &&
		(e = entry_of(slot, xid)) != NULL)
	{
		e->state = committed ? ENTRY_COMMITTED : ENTRY_ABORTED;
		e->commit_end = commit_end;
	}
	LWLockRelease(slot->lock);
	ConditionVariableBroadcast(&slot->advanced);
}
