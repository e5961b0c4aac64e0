/*-------------------------------------------------------------------------
 *
 * shmem.c
 *	  Shared memory of stream_seq: one slot per stream holding the number
 *	  counter and the list of transactions that hold numbers, and the
 *	  horizon computed from them.  This file is the only one that reads or
 *	  writes a slot; the layout below is private to it.
 *
 * Invariants, for every stream slot, all under the slot's lock:
 *
 *	(1) every number ever handed out is below "next"; "next" only moves
 *		forward, except that a transaction may give back the unused tail of
 *		its own reservation before it commits (stream_shrink);
 *	(2) every number ever handed out is below "block_end", and "block_end"
 *		is recorded durably in the stream's head sequence before numbers
 *		below it are handed out (counter.c), so a restart never reuses one;
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
 * Transaction ids are kept as FullTransactionIds: a quiet stream in a busy
 * cluster can keep an entry for longer than 2^31 transactions, after which
 * a 32-bit xid would compare as being in the future.
 *
 * Note about locking
 * ------------------
 * Locks, in the order they are taken:
 *	1. heavyweight locks: the stream table's (DDL, enable(), disable(),
 *	   TRUNCATE) and its head sequence's ShareUpdateExclusiveLock, which
 *	   serializes block refills (counter.c).  On a partitioned stream,
 *	   writers lock the partitioned table, then the partition (PostgreSQL's
 *	   order); sealing takes ShareLock on an old partition only (waiting
 *	   for its writers), and drop_partitions() then DETACH's ACCESS
 *	   EXCLUSIVE lock on the partitioned table: the reverse order, so a
 *	   writer routing a late row into a partition being sealed can deadlock
 *	   with drop_partitions(); PostgreSQL's deadlock detector ends one of
 *	   them, and the late row would have been refused by the seal anyway
 *	   (partition.c);
 *	2. the global LWLock ("shared->lock"): slot identity and allocation;
 *	3. one slot's LWLock.
 * A slot lock is taken with or without the global lock, never the global
 * lock while a slot lock is held, and never two slot locks at once.  While
 * a slot lock is held, no other lock is taken but the spinlock behind
 * GetFlushRecPtr and WAL insertion (the insertion locks, and when the WAL
 * buffers are full, WALWriteLock: XLogInsert of the extension's records,
 * which must be in the order of the changes they describe; WAL code never
 * takes a slot lock): the next full xid (XidGenLock) and the oldest snapshot
 * xmin (ProcArrayLock) are read before, and the floor check, which may
 * consult the proc array (ProcArrayLock), pg_xact and pg_subtrans (their
 * SLRU locks) through TransactionIdIsInProgress, runs after the lock is
 * released (apply_floor).  Stale values are only cautious.  No slot lock
 * or the global lock is held across SPI, nextval, catalog or syscache
 * access, memory allocation or ereport: every such step happens before
 * the lock is taken or after it is released, and functions here that
 * would have to raise an error return a code instead or raise it after
 * releasing the lock.  Commit and abort callbacks take one slot lock at a
 * time and hold nothing else.
 *
 * Read without a lock: a slot's identity (dboid, relid, in_use, generation)
 * in find_slot under the global lock only; "nentries" and
 * "appends_since_prune" in maybe_prune, where a wrong guess only delays or
 * hastens pruning, and the entry is re-checked under the lock.
 *
 * horizon.c builds the read horizon per snapshot from
 * stream_slot_horizon; the argument that it never lets a reader skip a row
 * is in doc/how-it-works.md ("Why the horizon is safe").
 *
 * On a hot standby the slots hold what was replayed of the primary's
 * records (replica.c): entries in state ENTRY_REPLAYED, whose outcome each
 * snapshot decides, and the primary's counter.  The startup process is
 * their writer there, through the stream_replay_* functions below; it
 * follows the same lock order, and prunes with the standby's own oldest
 * xmin and oldest running xid.  After a promotion the replayed entries
 * stay until pruned; their transactions all ended with recovery.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/transam.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "access/xloginsert.h"
#include "access/xlogrecovery.h"
#include "access/xlogutils.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "storage/shmem.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"

#include "stream_seq.h"
#include "stats.h"
#include "shmem.h"

#define STREAM_SEQ_TRANCHE "stream_seq"

/* State of one tracked transaction. */
typedef enum StreamEntryState
{
	ENTRY_ASSIGNED = 0,			/* holds numbers, outcome not yet recorded */
	ENTRY_COMMITTED,			/* committed; commit_end says where in WAL */
	ENTRY_ABORTED,				/* aborted; holds nothing back */
	ENTRY_REPLAYED				/* replayed from the primary's WAL: the
								 * outcome is what each snapshot sees */
} StreamEntryState;

/*
 * One transaction that took numbers from a stream.  Its numbers all lie in
 * [lo, hi); lo is what holds the horizon back.
 */
typedef struct StreamEntry
{
	FullTransactionId xid;		/* top-level xid of the transaction */
	int			pid;			/* backend that assigned the numbers */
	uint8		state;			/* StreamEntryState */
	int64		lo;
	int64		hi;
	XLogRecPtr	commit_end;		/* end of the commit record, when committed */
	TimestampTz assigned_at;
	bool		early;			/* numbered before the transaction began to
								 * commit (constraints set IMMEDIATE) and
								 * not committing yet */
} StreamEntry;

/* A committed transaction moved out of a full list. */
typedef struct EvictedXact
{
	FullTransactionId xid;
	int64		lo;
} EvictedXact;

/*
 * Shared state of one stream.  Protected by "lock", except the identity
 * fields, which are changed only under the global lock and the slot's lock
 * and re-checked under "lock" by users (see lock_slot).
 */
typedef struct StreamSlot
{
	Oid			dboid;
	Oid			relid;
	bool		in_use;
	uint32		generation;		/* bumped whenever the slot changes owner */
	FullTransactionId attached_by;	/* transaction that took it, if any */
	LWLock	   *lock;

	bool		started;		/* next/block_end are valid */
	int64		next;			/* next number to hand out */
	int64		block_end;		/* numbers below this are recorded durably */
	TimestampTz numbered_at;	/* time given to the last reservation: the
								 * times of reservations never go down */
	bool		time_floor_set; /* numbered_at was raised to the table's
								 * newest time since the counter started */

	/*
	 * Committed entries that neither the list nor the evicted store could
	 * keep are summarized by a conservative floor: for any snapshot that
	 * might see one of them as in progress, or while one of their commit
	 * records is not yet flushed, the horizon stays at or below floor_lo.
	 */
	bool		floor_active;
	int64		floor_lo;
	FullTransactionId floor_min_xid;	/* oldest xid folded in */
	FullTransactionId floor_xid;	/* newest xid folded in */
	XLogRecPtr	floor_lsn;		/* latest commit end folded in */

	int			nevicted;		/* entries in the evicted store */
	bool		floor_may_run;	/* a replayed entry, perhaps running, was
								 * folded into the floor */

	uint64		evictions;		/* statistics */
	uint64		assigned_xacts;
	uint32		appends_since_prune;
	int			nentries;		/* entries[0 .. nentries-1], assignment order */

	ConditionVariable advanced; /* broadcast when a commit may move horizon */

	StreamEntry entries[FLEXIBLE_ARRAY_MEMBER];
} StreamSlot;

/* Header of the extension's shared memory; slots follow it. */
typedef struct StreamShared
{
	LWLock	   *lock;			/* protects slot identity and allocation */
	int			nslots;
	int			capacity;		/* entries per slot */
	int			evicted_capacity;	/* evicted store entries per slot */
	Size		evicted_offset; /* where a slot's evicted store starts */
	Size		slot_size;

	/*
	 * What a standby knows of the primary's reservations (replica.c
	 * replays them), under "lock": whether a whole round of the primary's
	 * listing was replayed since this server started ("complete"), the
	 * xid bound of the first such round (every transaction that took
	 * numbers before it has an xid below it), and whether a replayed
	 * stream found no free slot.
	 */
	bool		round_open;
	FullTransactionId round_next_xid;
	bool		complete;
	FullTransactionId complete_next_xid;
	bool		replay_lost;

	char		slots[FLEXIBLE_ARRAY_MEMBER];
} StreamShared;

static StreamShared *shared = NULL;

/* Prune once this many entries exist and this many appends happened... */
#define PRUNE_MIN_ENTRIES	16
#define PRUNE_MIN_APPENDS	8
/* ... or once the oldest entry is this many transactions old. */
#define PRUNE_AGE_XIDS		((uint64) 1000000)

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
 * get_slot
 *		Address of slot number "slotno".
 */
static StreamSlot *
get_slot(int slotno)
{
	Assert(slotno >= 0 && slotno < shared->nslots);
	return (StreamSlot *) (shared->slots + (Size) slotno * shared->slot_size);
}

/*
 * evicted_of
 *		The evicted store of a slot: nevicted entries sorted by xid.
 */
static EvictedXact *
evicted_of(StreamSlot *slot)
{
	return (EvictedXact *) ((char *) slot + shared->evicted_offset);
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
		shared->round_open = false;
		shared->complete = false;
		shared->replay_lost = false;
		for (i = 0; i < shared->nslots; i++)
		{
			StreamSlot *slot = get_slot(i);

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
 *		Raise the documented error when the library is not preloaded (the
 *		shared state does not exist); every entry point that needs shared
 *		memory calls this first.
 */
void
stream_check_preloaded(void)
{
	if (!stream_shmem_ready())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("stream_seq must be loaded via \"shared_preload_libraries\""),
				 errhint("Add stream_seq to the \"shared_preload_libraries\" setting and restart the server.")));
}

/*
 * full_xid
 *		The FullTransactionId of a normal xid that is not older than 2^31
 *		transactions before "next" (a snapshot's xmin or xmax, an xid of a
 *		running transaction).
 */
static FullTransactionId
full_xid(FullTransactionId next, TransactionId xid)
{
	Assert(TransactionIdIsNormal(xid));
	return FullTransactionIdFromU64(U64FromFullTransactionId(next) +
									(int32) (xid - XidFromFullTransactionId(next)));
}

/*
 * reset_slot
 *		Give a slot to stream (dboid, relid) with a counter not yet started.
 *		Caller holds the global lock and the slot's lock exclusively.
 */
static void
reset_slot(StreamSlot *slot, Oid dboid, Oid relid)
{
	TransactionId xid = GetTopTransactionIdIfAny();

	slot->dboid = dboid;
	slot->relid = relid;
	slot->in_use = true;
	slot->generation++;
	slot->attached_by = TransactionIdIsValid(xid) ?
		GetTopFullTransactionId() : InvalidFullTransactionId;
	slot->started = false;
	slot->next = 0;
	slot->block_end = 0;
	slot->numbered_at = 0;
	slot->time_floor_set = false;
	slot->floor_active = false;
	slot->floor_may_run = false;
	slot->nevicted = 0;
	slot->evictions = 0;
	slot->assigned_xacts = 0;
	slot->appends_since_prune = 0;
	slot->nentries = 0;
}

/*
 * find_slot_of
 *		Slot number of stream (dboid, relid), or -1.  Caller holds the
 *		global lock.
 */
static int
find_slot_of(Oid dboid, Oid relid)
{
	int			i;

	for (i = 0; i < shared->nslots; i++)
	{
		StreamSlot *slot = get_slot(i);

		if (slot->in_use && slot->relid == relid && slot->dboid == dboid)
			return i;
	}
	return -1;
}

/*
 * find_free_slot
 *		Number of a slot not in use, or -1.  Caller holds the global lock.
 */
static int
find_free_slot(void)
{
	int			i;

	for (i = 0; i < shared->nslots; i++)
	{
		if (!get_slot(i)->in_use)
			return i;
	}
	return -1;
}

/*
 * stream_slot_attach
 *		Point "ref" at the shared slot of its stream, taking a free slot if
 *		the stream has none yet.  Returns false if every slot is taken; the
 *		caller may reclaim slots left behind (catalog.c) and try again.
 */
bool
stream_slot_attach(StreamRef *ref)
{
	int			slotno;

	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	slotno = find_slot_of(MyDatabaseId, ref->relid);
	if (slotno < 0)
	{
		slotno = find_free_slot();
		if (slotno < 0)
		{
			LWLockRelease(shared->lock);
			return false;
		}
		LWLockAcquire(get_slot(slotno)->lock, LW_EXCLUSIVE);
		reset_slot(get_slot(slotno), MyDatabaseId, ref->relid);
		LWLockRelease(get_slot(slotno)->lock);
	}
	ref->slotno = slotno;
	ref->generation = get_slot(slotno)->generation;
	LWLockRelease(shared->lock);
	return true;
}

/*
 * stream_slot_list
 *		The identities of up to "max" slots in use, for deciding which of
 *		them were left behind (catalog.c).  Returns how many were stored.
 */
int
stream_slot_list(StreamSlotIdent *idents, int max)
{
	int			n = 0;
	int			i;

	LWLockAcquire(shared->lock, LW_SHARED);
	for (i = 0; i < shared->nslots && n < max; i++)
	{
		StreamSlot *slot = get_slot(i);

		if (!slot->in_use)
			continue;
		idents[n].slotno = i;
		idents[n].generation = slot->generation;
		idents[n].dboid = slot->dboid;
		idents[n].relid = slot->relid;
		idents[n].attached_by = slot->attached_by;
		n++;
	}
	LWLockRelease(shared->lock);
	return n;
}

/*
 * free_slot
 *		Mark a slot free and wake its waiters.  Caller holds the global lock.
 */
static void
free_slot(StreamSlot *slot)
{
	LWLockAcquire(slot->lock, LW_EXCLUSIVE);
	slot->in_use = false;
	slot->generation++;
	slot->nentries = 0;
	slot->nevicted = 0;
	slot->floor_active = false;
	slot->floor_may_run = false;
	LWLockRelease(slot->lock);
	ConditionVariableBroadcast(&slot->advanced);
}

/*
 * stream_slot_free
 *		Free slot "slotno" if it has not changed owner since it was listed
 *		with "generation".  Returns whether it was freed.
 */
bool
stream_slot_free(int slotno, uint32 generation)
{
	StreamSlot *slot = get_slot(slotno);
	bool		freed = false;

	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	if (slot->in_use && slot->generation == generation)
	{
		free_slot(slot);
		freed = true;
	}
	LWLockRelease(shared->lock);
	return freed;
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
		StreamSlot *slot = get_slot(i);

		if (slot->in_use && slot->relid == relid && slot->dboid == dboid)
			free_slot(slot);
	}
	LWLockRelease(shared->lock);
}

/*
 * lock_slot
 *		Lock the slot of "ref" in "mode" and return it, or NULL if the slot
 *		changed owner since the backend looked the stream up: the stream was
 *		disabled or its table dropped (and perhaps enabled again) meanwhile.
 *		That is never silently re-attached, which could give a dropped
 *		stream a new slot or this stream another one's horizon; callers
 *		report it with report_lost_slot once the lock is released.
 */
static StreamSlot *
lock_slot(StreamRef *ref, LWLockMode mode)
{
	StreamSlot *slot = get_slot(ref->slotno);

	LWLockAcquire(slot->lock, mode);
	if (slot->in_use && slot->generation == ref->generation &&
		slot->relid == ref->relid && slot->dboid == MyDatabaseId)
		return slot;
	LWLockRelease(slot->lock);
	ref->valid = false;
	return NULL;
}

/*
 * report_lost_slot
 *		The error for a stream whose slot changed owner while in use.  The
 *		next transaction looks the stream up afresh.
 */
static void
report_lost_slot(StreamRef *ref)
{
	char	   *relname = get_rel_name(ref->relid);

	if (relname != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("stream table \"%s\" was disabled or dropped while in use",
						relname)));
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("stream table with OID %u was disabled or dropped while in use",
					ref->relid)));
}

/*
 * lock_slot_or_error
 *		lock_slot for callers that can raise the error right away.
 */
static StreamSlot *
lock_slot_or_error(StreamRef *ref, LWLockMode mode)
{
	StreamSlot *slot = lock_slot(ref, mode);

	if (slot == NULL)
		report_lost_slot(ref);
	return slot;
}

/*
 * stream_slot_restart
 *		Forget the counter of a stream's slot, so that it is started afresh
 *		from the catalog and table: enable() of a table whose slot survived
 *		an earlier stream on it.
 */
void
stream_slot_restart(StreamRef *ref)
{
	StreamSlot *slot = lock_slot_or_error(ref, LW_EXCLUSIVE);

	slot->started = false;
	slot->time_floor_set = false;
	LWLockRelease(slot->lock);
}

/*
 * stream_counter_start
 *		Start the counter at "start" unless another backend started it
 *		first (counter.c computed "start" from the table and the head).
 *		Returns false if the slot changed owner.
 */
bool
stream_counter_start(StreamRef *ref, int64 start)
{
	StreamSlot *slot = lock_slot(ref, LW_EXCLUSIVE);

	if (slot == NULL)
		return false;
	if (!slot->started)
	{
		slot->next = start;
		slot->block_end = start;
		slot->started = true;
	}
	LWLockRelease(slot->lock);
	return true;
}

/*
 * stream_time_floor
 *		The stream's time floor, the time of its last reservation, raised
 *		to "at" if that is later; with "now", the current time is taken
 *		as "at", as a reservation would.  Returns the time to record: "at"
 *		or the floor, whichever is later.  Used where a time comes from
 *		elsewhere than a reservation (the table's newest row when the
 *		counter starts, a replicated row), so that times never go down as
 *		numbers go up.
 */
TimestampTz
stream_time_floor(StreamRef *ref, TimestampTz at, bool now)
{
	StreamSlot *slot = lock_slot_or_error(ref, LW_EXCLUSIVE);

	if (now)
		at = GetCurrentTimestamp();
	if (at < slot->numbered_at)
		at = slot->numbered_at;
	slot->numbered_at = at;
	LWLockRelease(slot->lock);
	return at;
}

/*
 * stream_time_floor_newest
 *		Raise the stream's time floor to "newest", the time of the table's
 *		newest row read after the counter started (counter.c), and record
 *		that it was: until then stream_reserve hands out no time.  A counter
 *		can be started without counter.c reading the table: redo of the
 *		stream's WAL records starts it, in crash recovery as on a standby
 *		that is then promoted, and what redo knows carries no time.
 */
void
stream_time_floor_newest(StreamRef *ref, TimestampTz newest)
{
	StreamSlot *slot = lock_slot_or_error(ref, LW_EXCLUSIVE);

	if (newest > slot->numbered_at)
		slot->numbered_at = newest;
	slot->time_floor_set = true;
	LWLockRelease(slot->lock);
}

/*
 * stream_time_floor_known
 *		Whether the stream's time floor was raised to the table's newest
 *		time since its counter started (stream_time_floor_newest).
 */
bool
stream_time_floor_known(StreamRef *ref)
{
	StreamSlot *slot = lock_slot_or_error(ref, LW_SHARED);
	bool		known = slot->time_floor_set;

	LWLockRelease(slot->lock);
	return known;
}

/*
 * stream_counter_read
 *		The next number of a started counter in *next, and the end of its
 *		recorded block in *block_end; false if the counter is not started.
 */
bool
stream_counter_read(StreamRef *ref, int64 *next, int64 *block_end)
{
	StreamSlot *slot = lock_slot_or_error(ref, LW_SHARED);
	bool		started = slot->started;

	*next = slot->next;
	*block_end = slot->block_end;
	LWLockRelease(slot->lock);
	return started;
}

/*
 * stream_counter_extend
 *		Install a block [block_start, block_end) that counter.c has recorded
 *		in the head sequence.  Blocks of one stream are installed in the
 *		order the sequence handed them out (counter.c serializes refills),
 *		so block_end only grows; a block that does not follow the current
 *		one makes the counter jump to its start.
 */
void
stream_counter_extend(StreamRef *ref, int64 block_start, int64 block_end)
{
	StreamSlot *slot = lock_slot_or_error(ref, LW_EXCLUSIVE);

	if (block_end > slot->block_end)
	{
		/*
		 * A block right after the current one extends it (a reservation of
		 * more numbers than a block holds takes several); a block further
		 * on (the sequence was moved forward) starts the counter there.
		 */
		if (block_start > slot->block_end && block_start > slot->next)
			slot->next = block_start;
		slot->block_end = block_end;
	}
	LWLockRelease(slot->lock);
}

/*
 * stream_counter_at_least
 *		Move a started counter up to "next" if it is below: numbers below
 *		"next" are in use elsewhere (replication wrote them).  An end of
 *		the recorded block below "next" is moved up with it: the block is
 *		used up, and the caller records a new one (counter.c) before any
 *		reservation can take a number from it.  Returns false if the
 *		counter is not started.
 */
bool
stream_counter_at_least(StreamRef *ref, int64 next)
{
	StreamSlot *slot = lock_slot_or_error(ref, LW_EXCLUSIVE);
	bool		started = slot->started;

	if (started && next > slot->next)
	{
		slot->next = next;
		if (slot->block_end < next)
			slot->block_end = next;
	}
	LWLockRelease(slot->lock);
	return started;
}

/*
 * entry_of
 *		The entry of transaction "xid", or NULL.  Searched from the end: the
 *		caller's entry is usually among the newest.
 */
static StreamEntry *
entry_of(StreamSlot *slot, FullTransactionId xid)
{
	int			i;

	for (i = slot->nentries - 1; i >= 0; i--)
	{
		if (FullTransactionIdEquals(slot->entries[i].xid, xid))
			return &slot->entries[i];
	}
	return NULL;
}

/*
 * prune_slot
 *		Drop entries no snapshot can need any more (invariant 4), and retire
 *		the floor once everything folded into it is equally finished.
 *		"oldest_xmin" and "flushed" may be stale: older values only keep
 *		more.  Caller holds the slot's lock exclusively.
 */
static void
prune_slot(StreamSlot *slot, FullTransactionId oldest_xmin, XLogRecPtr flushed)
{
	int			i;
	int			kept = 0;

	for (i = 0; i < slot->nentries; i++)
	{
		StreamEntry *e = &slot->entries[i];
		bool		removable;

		removable = e->state == ENTRY_ABORTED ||
			(e->state != ENTRY_ASSIGNED && e->commit_end <= flushed &&
			 FullTransactionIdPrecedes(e->xid, oldest_xmin));
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
		EvictedXact *evicted = evicted_of(slot);
		int			n = 0;

		while (n < slot->nevicted &&
			   FullTransactionIdPrecedes(evicted[n].xid, oldest_xmin))
			n++;
		if (n > 0)
		{
			memmove(evicted, evicted + n,
					sizeof(EvictedXact) * (slot->nevicted - n));
			slot->nevicted -= n;
		}
	}

	if (slot->floor_active &&
		FullTransactionIdPrecedes(slot->floor_xid, oldest_xmin) &&
		slot->floor_lsn <= flushed)
	{
		slot->floor_active = false;
		slot->floor_may_run = false;
	}
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
	EvictedXact *evicted = evicted_of(slot);
	int			pos = slot->nevicted;

	if (slot->nevicted >= shared->evicted_capacity)
		return false;
	while (pos > 0 && FullTransactionIdPrecedes(e->xid, evicted[pos - 1].xid))
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
	if (e->state == ENTRY_REPLAYED)
		slot->floor_may_run = true;
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
		if (FullTransactionIdPrecedes(e->xid, slot->floor_min_xid))
			slot->floor_min_xid = e->xid;
		if (FullTransactionIdFollows(e->xid, slot->floor_xid))
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
evict_oldest_finished(StreamSlot *slot, XLogRecPtr flushed)
{
	int			i;

	for (i = 0; i < slot->nentries; i++)
	{
		StreamEntry *e = &slot->entries[i];

		if (e->state == ENTRY_ASSIGNED)
			continue;
		if (e->state != ENTRY_ABORTED)
		{
			if (e->commit_end > flushed || !store_evicted(slot, e))
				fold_into_floor(slot, e);
			slot->evictions++;
			stream_stats_count_eviction();
		}
		memmove(&slot->entries[i], &slot->entries[i + 1],
				sizeof(StreamEntry) * (slot->nentries - i - 1));
		slot->nentries--;
		return true;
	}
	return false;
}

/*
 * Whether the numbers this backend reserves next are taken while its
 * transaction commits (the deferred triggers of COMMIT) rather than before
 * (constraints set IMMEDIATE): set by the caller through
 * stream_reserving_early, shown by the holders view.
 */
static bool reserving_early = false;

/*
 * stream_reserving_early
 *		Say whether the reservations that follow are made before the
 *		transaction began to commit (see reserving_early).
 */
void
stream_reserving_early(bool early)
{
	reserving_early = early;
}

/*
 * append_entry
 *		Record that transaction "xid" holds numbers from "lo" on.  Returns
 *		false if the list is full of unfinished entries.  Caller holds the
 *		slot's lock exclusively; "flushed" was read before it was taken.
 */
static bool
append_entry(StreamSlot *slot, FullTransactionId xid, int64 lo,
			 XLogRecPtr flushed, TimestampTz now, StreamEntryState state)
{
	StreamEntry *e;

	if (slot->nentries >= shared->capacity &&
		!evict_oldest_finished(slot, flushed))
		return false;

	e = &slot->entries[slot->nentries++];
	e->xid = xid;
	e->pid = state == ENTRY_ASSIGNED ? MyProcPid : 0;
	e->state = state;
	e->lo = lo;
	e->hi = lo;
	e->commit_end = InvalidXLogRecPtr;
	e->assigned_at = now;
	e->early = state == ENTRY_ASSIGNED && reserving_early;
	slot->appends_since_prune++;
	slot->assigned_xacts++;
	return true;
}

/*
 * log_numbers
 *		Write the XLOG_STREAM_NUMBERS record of what transaction "xid" now
 *		holds of the slot's stream, for standbys (replica.c).  Called under
 *		the slot's exclusive lock, right after the change it describes, so
 *		that a stream's records follow the order in which its numbers were
 *		handed out and given back: a standby that replayed a record has
 *		replayed every earlier change to that counter.  Nothing is written
 *		below wal_level replica, where there is no standby to read it.
 */
static void
log_numbers(StreamSlot *slot, FullTransactionId xid, int64 lo)
{
	xl_stream_numbers rec;

	if (!XLogStandbyInfoActive())
		return;
	rec.dboid = slot->dboid;
	rec.relid = slot->relid;
	rec.xid = XidFromFullTransactionId(xid);
	rec.lo = lo;
	rec.next = slot->next;
	rec.counter_started = slot->started;
	XLogBeginInsert();
	XLogRegisterData((char *) &rec, SizeOfStreamNumbers);
	(void) XLogInsert(stream_seq_rmgr_id, XLOG_STREAM_NUMBERS);
}

/*
 * report_list_full
 *		The error for a list with no finished entry to evict; raised after
 *		the slot's lock is released.
 */
static void
report_list_full(StreamRef *ref)
{
	ereport(ERROR,
			(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
			 errmsg("too many transactions are committing on stream table \"%s\"",
					stream_rel_name(ref->relid)),
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
static FullTransactionId
oldest_snapshot_xmin(void)
{
	FullTransactionId next = ReadNextFullTransactionId();
	TransactionId result = XidFromFullTransactionId(next);
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
	if (!TransactionIdIsNormal(result))
		return next;
	return full_xid(next, result);
}

/*
 * flushed_lsn
 *		How far this server's WAL is flushed, to compare commit records with.
 *		During recovery, where GetFlushRecPtr may not be called, how far it
 *		is replayed: replayed WAL is flushed, and a slot then holds nothing
 *		committed here.
 */
static XLogRecPtr
flushed_lsn(void)
{
	if (RecoveryInProgress())
		return GetXLogReplayRecPtr(NULL);
	return GetFlushRecPtr(NULL);
}

/*
 * maybe_prune
 *		Prune before an append when the list has grown, or when its oldest
 *		entry is old.  The horizon of removable xids is computed before
 *		taking the slot's lock, so that no ProcArray scan happens under it;
 *		a stale value is merely cautious.
 */
static void
maybe_prune(StreamRef *ref, FullTransactionId next)
{
	StreamSlot *slot = get_slot(ref->slotno);
	FullTransactionId oldest_xmin;
	XLogRecPtr	flushed;
	bool		old;

	/* unlocked peek; a wrong guess only delays or hastens pruning */
	old = slot->nentries > 0 &&
		U64FromFullTransactionId(slot->entries[0].xid) + PRUNE_AGE_XIDS <
		U64FromFullTransactionId(next);
	if (!old && slot->nentries < shared->capacity &&
		(slot->nentries < PRUNE_MIN_ENTRIES ||
		 slot->appends_since_prune < PRUNE_MIN_APPENDS))
		return;

	oldest_xmin = oldest_snapshot_xmin();
	flushed = flushed_lsn();
	slot = lock_slot_or_error(ref, LW_EXCLUSIVE);
	prune_slot(slot, oldest_xmin, flushed);
	LWLockRelease(slot->lock);
}

/*
 * stream_reserve
 *		Reserve "count" consecutive numbers for the current transaction, the
 *		first in *lo: all of them or none.  The first reservation of a
 *		transaction ("have_entry" false) appends its entry in the same lock
 *		acquisition that advances the counter (invariant 3).  A counter not
 *		yet started, with fewer than "count" numbers left in its recorded
 *		block, or without its time floor, is reported to the caller
 *		(counter.c), which does the catalog work and asks again.
 *
 *		*numbered_at gets the reservation's time: the current time, or the
 *		time of the stream's previous reservation if the clock says
 *		earlier, so that times never go down as numbers go up.  Before the
 *		first time after a start, the caller raises that to the table's
 *		newest time (RESERVE_NEEDS_TIME_FLOOR), so that they do not go down
 *		across a restart, a crash or a promotion either.  The stream's time
 *		column records it (commit.c).
 *
 *		The reservation is logged for standbys under the slot's lock: by
 *		"logger" if given (a record of the caller's that carries it), else
 *		by a record of its own (log_numbers).
 */
StreamReserveResult
stream_reserve(StreamRef *ref, int64 count, bool have_entry, int64 *lo,
			   TimestampTz *numbered_at, StreamReservationLogger logger,
			   void *logger_arg)
{
	FullTransactionId xid = GetTopFullTransactionId();
	FullTransactionId next_xid = ReadNextFullTransactionId();
	XLogRecPtr	flushed = flushed_lsn();
	TimestampTz now = GetCurrentTimestamp();
	StreamSlot *slot;
	StreamEntry *e;
	StreamReservation res;

	Assert(count > 0);

	if (!have_entry)
		maybe_prune(ref, next_xid);

	slot = lock_slot_or_error(ref, LW_EXCLUSIVE);
	if (!slot->started)
	{
		LWLockRelease(slot->lock);
		return RESERVE_NEEDS_START;
	}
	if (slot->block_end - slot->next < count)
	{
		LWLockRelease(slot->lock);
		return RESERVE_NEEDS_BLOCK;
	}
	if (ref->time_attnum != InvalidAttrNumber && !slot->time_floor_set)
	{
		LWLockRelease(slot->lock);
		return RESERVE_NEEDS_TIME_FLOOR;
	}
	if (!have_entry &&
		!append_entry(slot, xid, slot->next, flushed, now, ENTRY_ASSIGNED))
	{
		LWLockRelease(slot->lock);
		report_list_full(ref);
	}
	*lo = slot->next;
	slot->next += count;
	if (now < slot->numbered_at)
		now = slot->numbered_at;
	slot->numbered_at = now;
	*numbered_at = now;
	e = entry_of(slot, xid);
	if (e != NULL)
	{
		e->hi = slot->next;
		if (!reserving_early)
			e->early = false;	/* numbering again, now at commit */
	}

	res.dboid = slot->dboid;
	res.relid = slot->relid;
	res.entry_lo = e != NULL ? e->lo : *lo;
	res.lo = *lo;
	res.next = slot->next;
	res.numbered_at = now;
	res.logged = false;
	if (logger != NULL)
		logger(&res, logger_arg);
	if (!res.logged)
		log_numbers(slot, xid, res.entry_lo);
	LWLockRelease(slot->lock);
	return RESERVE_DONE;
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
	FullTransactionId xid = GetTopFullTransactionId();
	XLogRecPtr	flushed = flushed_lsn();
	TimestampTz now = GetCurrentTimestamp();
	StreamSlot *slot = lock_slot_or_error(ref, LW_EXCLUSIVE);
	bool		ok = append_entry(slot, xid, lo, flushed, now, ENTRY_ASSIGNED);

	if (ok)
	{
		/* the numbers are held from this statement to the end */
		slot->entries[slot->nentries - 1].early = true;
		log_numbers(slot, xid, lo);
	}
	LWLockRelease(slot->lock);
	if (!ok)
		report_list_full(ref);
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
	FullTransactionId xid = GetTopFullTransactionId();
	StreamSlot *slot = lock_slot_or_error(ref, LW_EXCLUSIVE);

	if (slot->next == unused_to)
	{
		StreamEntry *e = entry_of(slot, xid);

		if (e != NULL && e->lo <= unused_from)
		{
			slot->next = unused_from;
			e->hi = unused_from;
			log_numbers(slot, xid, e->lo);
		}
	}
	LWLockRelease(slot->lock);
}

/*
 * stream_entry_committing
 *		The current transaction, which numbered rows of the stream early,
 *		has begun to commit: its entry is shown as committing from now on.
 *		Called at pre-commit.
 */
void
stream_entry_committing(int slotno, uint32 generation)
{
	FullTransactionId xid = GetTopFullTransactionIdIfAny();
	StreamSlot *slot;
	StreamEntry *e;

	if (shared == NULL || !FullTransactionIdIsValid(xid))
		return;
	slot = get_slot(slotno);
	LWLockAcquire(slot->lock, LW_EXCLUSIVE);
	if (slot->in_use && slot->generation == generation &&
		(e = entry_of(slot, xid)) != NULL)
		e->early = false;
	LWLockRelease(slot->lock);
}

/*
 * stream_finish_entry
 *		Record the outcome of the current transaction on a stream and wake
 *		the waiters.  Runs in commit and abort callbacks: must not
 *		fail, hence no allocation and no catalog access.
 */
void
stream_finish_entry(int slotno, uint32 generation, bool committed,
					XLogRecPtr commit_end)
{
	FullTransactionId xid = GetTopFullTransactionIdIfAny();
	StreamSlot *slot;
	StreamEntry *e;

	if (shared == NULL || !FullTransactionIdIsValid(xid))
		return;
	slot = get_slot(slotno);
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

/*
 * snapshot_running_xids
 *		The array of a snapshot in which a running top-level xid appears:
 *		xip, or for a snapshot taken during recovery, where every xid the
 *		standby knows to be running is in subxip and xip is empty, subxip
 *		(copied whole by CopySnapshot even when overflowed: the overflow
 *		there concerns subtransactions only, and top-level xids are never
 *		left out).
 */
static void
snapshot_running_xids(Snapshot snapshot, TransactionId **xids, uint32 *n)
{
	if (snapshot->takenDuringRecovery)
	{
		*xids = snapshot->subxip;
		*n = snapshot->subxcnt > 0 ? (uint32) snapshot->subxcnt : 0;
	}
	else
	{
		*xids = snapshot->xip;
		*n = snapshot->xcnt;
	}
}

/*
 * xid_in_progress_for
 *		Whether top-level transaction "xid" is in progress for "snapshot",
 *		given the full forms of the snapshot's xmin and xmax.  This is
 *		XidInMVCCSnapshot for a top-level xid, without its 32-bit
 *		comparisons (the xid may be older than 2^31 transactions) and
 *		without pg_subtrans: a running top-level xid is always in the array
 *		snapshot_running_xids returns.
 */
static bool
xid_in_progress_for(FullTransactionId xid, Snapshot snapshot,
					FullTransactionId xmin, FullTransactionId xmax)
{
	TransactionId xid32 = XidFromFullTransactionId(xid);
	TransactionId *xids;
	uint32		n;
	uint32		i;

	if (FullTransactionIdPrecedes(xid, xmin))
		return false;
	if (FullTransactionIdFollowsOrEquals(xid, xmax))
		return true;
	snapshot_running_xids(snapshot, &xids, &n);
	for (i = 0; i < n; i++)
	{
		if (TransactionIdEquals(xids[i], xid32))
			return true;
	}
	return false;
}

/*
 * evicted_find
 *		Index of the first evicted entry whose xid does not precede "xid".
 */
static int
evicted_find(EvictedXact *evicted, int n, FullTransactionId xid)
{
	int			low = 0;
	int			high = n;

	while (low < high)
	{
		int			mid = low + (high - low) / 2;

		if (FullTransactionIdPrecedes(evicted[mid].xid, xid))
			low = mid + 1;
		else
			high = mid;
	}
	return low;
}

/*
 * evicted_horizon
 *		The lowest "lo" over evicted entries in progress for the snapshot,
 *		or PG_INT64_MAX.  Evicted entries are top-level transactions
 *		(committed, or replayed from the primary), so this is
 *		xid_in_progress_for each, done with the store's xid order: those at
 *		or above the snapshot's xmax, and those in its array of running
 *		xids.  A fresh snapshot on a primary finds none.
 */
static int64
evicted_horizon(StreamSlot *slot, Snapshot snapshot, FullTransactionId next,
				FullTransactionId xmax)
{
	EvictedXact *evicted = evicted_of(slot);
	int			n = slot->nevicted;
	int64		result = PG_INT64_MAX;
	TransactionId *xids;
	uint32		nxids;
	uint32		i;
	int			j;

	for (j = evicted_find(evicted, n, xmax); j < n; j++)
		result = Min(result, evicted[j].lo);
	snapshot_running_xids(snapshot, &xids, &nxids);
	for (i = 0; i < nxids; i++)
	{
		FullTransactionId xid = full_xid(next, xids[i]);
		int			pos = evicted_find(evicted, n, xid);

		if (pos < n && FullTransactionIdEquals(evicted[pos].xid, xid))
			result = Min(result, evicted[pos].lo);
	}
	return result;
}

/*
 * What horizon_locked reads from a slot under its lock; the floor is
 * applied by apply_floor once the lock is released, as that may consult
 * the proc array and pg_xact.
 */
typedef struct HorizonParts
{
	int64		horizon;		/* held back by visibility */
	int64		durable_horizon;	/* by unflushed commits as well */
	bool		floor_active;
	int64		floor_lo;
	FullTransactionId floor_min_xid;
	FullTransactionId floor_xid;
	XLogRecPtr	floor_lsn;
	bool		floor_may_run;
} HorizonParts;

/*
 * floor_in_progress
 *		Whether the snapshot might see a transaction folded into the floor
 *		as in progress.  Those are committed top-level transactions with
 *		xids between floor_min_xid and floor_xid; one is in progress for the
 *		snapshot only if it is at or above its xmax, or in its array of
 *		running xids.  An xid there that is still running cannot be one of
 *		them, which keeps an open transaction (on another table, say) from
 *		holding readers back; that shortcut is not taken once a replayed
 *		entry, whose transaction may still be running, was folded in.
 */
static bool
floor_in_progress(HorizonParts *parts, Snapshot snapshot, FullTransactionId next)
{
	FullTransactionId xmax = full_xid(next, snapshot->xmax);
	TransactionId *xids;
	uint32		n;
	uint32		i;

	if (!FullTransactionIdPrecedes(parts->floor_xid, xmax))
		return true;
	snapshot_running_xids(snapshot, &xids, &n);
	for (i = 0; i < n; i++)
	{
		FullTransactionId xid = full_xid(next, xids[i]);

		if (FullTransactionIdPrecedes(xid, parts->floor_min_xid) ||
			FullTransactionIdFollows(xid, parts->floor_xid))
			continue;
		if (parts->floor_may_run || !TransactionIdIsInProgress(xids[i]))
			return true;
	}
	return false;
}

/*
 * horizon_locked
 *		The horizon of a started slot for "snapshot" by its list and evicted
 *		store; see stream_slot_horizon.  Caller holds the slot's lock.
 */
static void
horizon_locked(StreamSlot *slot, Snapshot snapshot, FullTransactionId next,
			   HorizonParts *parts)
{
	FullTransactionId xmin = full_xid(next, snapshot->xmin);
	FullTransactionId xmax = full_xid(next, snapshot->xmax);
	FullTransactionId self = GetTopFullTransactionIdIfAny();
	XLogRecPtr	flushed = InvalidXLogRecPtr;
	int64		horizon = slot->next;
	int64		durable_horizon = slot->next;
	int			i;

	for (i = 0; i < slot->nentries; i++)
	{
		StreamEntry *e = &slot->entries[i];

		if (e->state == ENTRY_ABORTED || e->lo >= durable_horizon)
			continue;
		if (FullTransactionIdEquals(e->xid, self))
			continue;
		if (e->state == ENTRY_ASSIGNED ||
			xid_in_progress_for(e->xid, snapshot, xmin, xmax))
		{
			horizon = Min(horizon, e->lo);
			durable_horizon = e->lo;
			continue;
		}
		if (flushed == InvalidXLogRecPtr)
			flushed = flushed_lsn();
		if (e->commit_end > flushed)
			durable_horizon = e->lo;
	}
	if (slot->nevicted > 0)
	{
		int64		lo = evicted_horizon(slot, snapshot, next, xmax);

		horizon = Min(horizon, lo);
		durable_horizon = Min(durable_horizon, lo);
	}
	parts->horizon = horizon;
	parts->durable_horizon = durable_horizon;
	parts->floor_active = slot->floor_active;
	parts->floor_lo = slot->floor_lo;
	parts->floor_min_xid = slot->floor_min_xid;
	parts->floor_xid = slot->floor_xid;
	parts->floor_lsn = slot->floor_lsn;
	parts->floor_may_run = slot->floor_may_run;
}

/*
 * apply_floor
 *		Lower the horizons of "parts" to the floor where the snapshot might
 *		need what was folded into it (see floor_in_progress), or where one
 *		of its commit records is not yet flushed.  Runs without the slot's
 *		lock: the floor read under it covers every transaction folded in
 *		before the list was read.
 */
static void
apply_floor(HorizonParts *parts, Snapshot snapshot, FullTransactionId next)
{
	if (!parts->floor_active || parts->floor_lo >= parts->durable_horizon)
		return;
	if (floor_in_progress(parts, snapshot, next))
	{
		parts->horizon = Min(parts->horizon, parts->floor_lo);
		parts->durable_horizon = parts->floor_lo;
	}
	else if (parts->floor_lsn > flushed_lsn())
		parts->durable_horizon = parts->floor_lo;
}

/*
 * stream_slot_horizon
 *		The horizon of the stream for "snapshot", computed afresh; false if
 *		the counter is not started (counter.c starts it).
 *
 *		An entry holds the horizon back at its "lo" when its transaction
 *		is in progress for the snapshot (so its rows are invisible in it),
 *		or finished but its outcome is not yet recorded, or committed but
 *		its commit record is not yet flushed (a crash could take it back).
 *		The caller's own entries are skipped: its rows are visible to it.
 *		*visible_horizon gets the horizon by visibility alone; where it is
 *		higher, commit records not yet flushed hold the result back (no
 *		commit will signal when that changes, so a waiter has to look again
 *		soon).  On a standby, stream_slot_standby_horizon is the caller.
 */
bool
stream_slot_horizon(StreamRef *ref, Snapshot snapshot, int64 *horizon,
					int64 *visible_horizon)
{
	FullTransactionId next = ReadNextFullTransactionId();
	StreamSlot *slot;
	HorizonParts parts;

	slot = lock_slot_or_error(ref, LW_SHARED);
	if (!slot->started)
	{
		LWLockRelease(slot->lock);
		return false;
	}
	horizon_locked(slot, snapshot, next, &parts);
	LWLockRelease(slot->lock);
	apply_floor(&parts, snapshot, next);
	*horizon = parts.durable_horizon;
	*visible_horizon = parts.horizon;
	return true;
}

/*
 * stream_slot_status
 *		The state of a stream for the streams view, with its horizon for
 *		"snapshot"; false if the counter is not started.
 */
bool
stream_slot_status(StreamRef *ref, Snapshot snapshot, StreamStatus *status)
{
	FullTransactionId next = ReadNextFullTransactionId();
	StreamSlot *slot;
	HorizonParts parts;
	int			oldest = -1;
	int			i;

	slot = lock_slot_or_error(ref, LW_SHARED);
	if (!slot->started)
	{
		LWLockRelease(slot->lock);
		return false;
	}
	horizon_locked(slot, snapshot, next, &parts);
	status->next = slot->next;
	status->committing = 0;
	status->in_commit = 0;
	status->oldest_commit_since = 0;
	for (i = 0; i < slot->nentries; i++)
	{
		if (slot->entries[i].state != ENTRY_ASSIGNED)
			continue;
		status->committing++;
		if (oldest < 0)
			oldest = i;
		if (!slot->entries[i].early)
		{
			if (status->in_commit == 0)
				status->oldest_commit_since = slot->entries[i].assigned_at;
			status->in_commit++;
		}
	}
	status->oldest_pid = 0;
	status->oldest_xid = InvalidTransactionId;
	status->oldest_since = 0;
	if (oldest >= 0)
	{
		StreamEntry *e = &slot->entries[oldest];

		status->oldest_pid = e->pid;
		status->oldest_xid = XidFromFullTransactionId(e->xid);
		status->oldest_since = e->assigned_at;
	}
	status->tracked = slot->nentries;
	status->evictions = slot->evictions;
	status->assigned_xacts = slot->assigned_xacts;
	LWLockRelease(slot->lock);
	apply_floor(&parts, snapshot, next);
	status->horizon = parts.durable_horizon;
	status->visible_horizon = parts.horizon;
	return true;
}

/*
 * stream_slot_holders
 *		Every tracked transaction of every stream of this database that
 *		holds its stream's horizon back for new snapshots: still
 *		committing, or committed with its commit record not yet flushed.
 *		Returns how many, in a palloc'd array.  Copied one slot at a time
 *		into a buffer sized before the slot's lock is taken.
 */
int
stream_slot_holders(StreamHolder **holders)
{
	XLogRecPtr	flushed = flushed_lsn();
	int			allocated = 16;
	int			n = 0;
	int			slotno;

	*holders = palloc(sizeof(StreamHolder) * allocated);
	for (slotno = 0; slotno < shared->nslots; slotno++)
	{
		StreamSlot *slot = get_slot(slotno);
		int			i;

		/* room for a full list before the lock, as nothing may allocate under it */
		if (allocated - n < shared->capacity)
		{
			allocated = n + shared->capacity;
			*holders = repalloc(*holders, sizeof(StreamHolder) * allocated);
		}
		LWLockAcquire(slot->lock, LW_SHARED);
		if (!slot->in_use || slot->dboid != MyDatabaseId)
		{
			LWLockRelease(slot->lock);
			continue;
		}
		for (i = 0; i < slot->nentries; i++)
		{
			StreamEntry *e = &slot->entries[i];
			StreamHolder *h;

			/* replayed entries: their transactions run on the primary */
			if (e->state == ENTRY_ABORTED || e->state == ENTRY_REPLAYED ||
				(e->state == ENTRY_COMMITTED && e->commit_end <= flushed))
				continue;
			h = &(*holders)[n++];
			h->relid = slot->relid;
			h->pid = e->pid;
			h->xid = XidFromFullTransactionId(e->xid);
			h->first_number = e->lo;
			h->numbers = e->hi - e->lo;
			h->committed = e->state == ENTRY_COMMITTED;
			h->early = e->state == ENTRY_ASSIGNED && e->early;
			h->since = e->assigned_at;
		}
		LWLockRelease(slot->lock);
	}
	return n;
}

/*
 * stream_slot_advanced_cv
 *		The condition variable broadcast when a transaction finishes on the
 *		stream, for wait().
 */
ConditionVariable *
stream_slot_advanced_cv(StreamRef *ref)
{
	return &get_slot(ref->slotno)->advanced;
}

static FullTransactionId replay_removable_before(void);

/*
 * replay_may_prune
 *		Whether redo may drop replayed entries by the oldest xmin: on a hot
 *		standby only once it tracks the primary's running xids (before its
 *		first complete running-xacts record, GetOldestNonRemovableTransactionId
 *		can be above an xid the primary still runs), and in crash recovery
 *		or a standby without hot_standby, where no snapshot exists until
 *		recovery ends and the transactions it did not see end had vanished
 *		(there only aborted entries go: replay_removable_before).
 */
static bool
replay_may_prune(void)
{
	return standbyState == STANDBY_DISABLED ||
		standbyState == STANDBY_SNAPSHOT_READY;
}

/*
 * give_slot
 *		Give free slot "slotno" to stream (dboid, relid) for replay.
 *		Caller holds the global lock exclusively.
 */
static void
give_slot(int slotno, Oid dboid, Oid relid)
{
	StreamSlot *slot = get_slot(slotno);

	LWLockAcquire(slot->lock, LW_EXCLUSIVE);
	reset_slot(slot, dboid, relid);
	LWLockRelease(slot->lock);
}

/*
 * reclaim_idle_slot
 *		On a standby whose slots are all taken, free a slot whose entries,
 *		pruned with "removable" (replay_removable_before), are all gone: no
 *		snapshot can see one of its transactions running, so the horizon
 *		of its stream no longer depends on them.  Slots whose counter never
 *		started (taken by a reader for a stream nothing was replayed for)
 *		go first.  The stream keeps working: with no slot, its horizon is
 *		the highest number a snapshot sees plus one (horizon.c), which is at
 *		or below the forgotten counter, and every later reservation of it
 *		is replayed into a slot again; a backend holding the old slot looks
 *		the stream up again (lock_slot).  Returns the slot number, or -1.
 *		Caller holds the global lock exclusively.
 */
static int
reclaim_idle_slot(FullTransactionId removable)
{
	int			pass;
	int			i;

	/* before a hot standby tracks the primary's running xids, nothing is */
	if (!replay_may_prune())
		return -1;
	for (pass = 0; pass < 2; pass++)
	{
		for (i = 0; i < shared->nslots; i++)
		{
			StreamSlot *slot = get_slot(i);
			bool		idle;

			if (pass == 0 && slot->started)
				continue;
			LWLockAcquire(slot->lock, LW_EXCLUSIVE);
			prune_slot(slot, removable, InvalidXLogRecPtr);
			idle = slot->nentries == 0 && slot->nevicted == 0 &&
				!slot->floor_active;
			LWLockRelease(slot->lock);
			if (idle)
			{
				free_slot(slot);
				return i;
			}
		}
	}
	return -1;
}

/*
 * replay_slot
 *		The slot of stream (dboid, relid) for replay, taking a free one if
 *		it has none; -1 (and the standby marked as having lost a stream) if
 *		every slot is taken.  Redo must not fail, so that is reported by
 *		horizon() instead.
 */
static int
replay_slot(Oid dboid, Oid relid)
{
	int			slotno;
	FullTransactionId removable;

	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	slotno = find_slot_of(dboid, relid);
	if (slotno < 0)
	{
		slotno = find_free_slot();
		if (slotno >= 0)
			give_slot(slotno, dboid, relid);
	}
	LWLockRelease(shared->lock);
	if (slotno >= 0)
		return slotno;

	/*
	 * Every slot taken.  The primary frees a stream's slot at the commit of
	 * its DROP TABLE or disable() without a record, so a standby's slots
	 * fill up as streams come and go; take one that holds nothing any
	 * snapshot still needs.  The oldest xmin is read without the global
	 * lock (see the lock order at the top of the file), and everything is
	 * looked up again once it is retaken: a backend may have given the
	 * stream a slot, or freed one, meanwhile.
	 */
	removable = replay_removable_before();
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	slotno = find_slot_of(dboid, relid);
	if (slotno < 0)
	{
		slotno = find_free_slot();
		if (slotno < 0)
			slotno = reclaim_idle_slot(removable);
		if (slotno >= 0)
			give_slot(slotno, dboid, relid);
		else
			shared->replay_lost = true;
	}
	LWLockRelease(shared->lock);
	return slotno;
}

/*
 * replay_removable_before
 *		On a standby, entries of transactions with xids below this can be
 *		dropped: they are finished (below the oldest xid the standby knows
 *		to be running) and no snapshot of the standby sees them running
 *		(below every backend's xmin).  Computed before a slot lock is taken.
 */
static FullTransactionId
replay_removable_before(void)
{
	FullTransactionId next;
	TransactionId oldest;

	/*
	 * In crash recovery, or on a standby without hot_standby, the process
	 * array has no horizon to give until redo ends (latestCompletedXid is
	 * set then; GetOldestNonRemovableTransactionId asserts that it is):
	 * nothing is dropped by xid meanwhile, as with the horizon the process
	 * array computed without the assertion, and a full list makes room by
	 * eviction (add_replayed).
	 */
	if (standbyState == STANDBY_DISABLED)
		return FirstNormalFullTransactionId;
	next = ReadNextFullTransactionId();
	oldest = GetOldestNonRemovableTransactionId(NULL);
	if (!TransactionIdIsNormal(oldest))
		return FirstNormalFullTransactionId;
	return full_xid(next, oldest);
}

/*
 * add_replayed
 *		Record a replayed reservation of transaction "xid" in a locked slot
 *		unless it is there: an entry whose outcome each snapshot decides.
 *		A full list makes room by eviction; it always can, as no replayed
 *		entry counts as unfinished.
 */
static StreamEntry *
add_replayed(StreamSlot *slot, FullTransactionId xid, int64 lo)
{
	StreamEntry *e = entry_of(slot, xid);

	if (e == NULL &&
		append_entry(slot, xid, lo, InvalidXLogRecPtr, 0, ENTRY_REPLAYED))
		e = &slot->entries[slot->nentries - 1];
	return e;
}

/*
 * stream_replay_numbers
 *		Redo of XLOG_STREAM_NUMBERS on a standby: the transaction's entry
 *		and the stream's counter, as the primary had them right after the
 *		change.  Pruned with the standby's own snapshots (see
 *		replay_removable_before), not the primary's.
 */
void
stream_replay_numbers(const xl_stream_numbers *rec)
{
	int			slotno = replay_slot(rec->dboid, rec->relid);
	FullTransactionId xid;
	StreamSlot *slot;
	StreamEntry *e;

	if (slotno < 0)
		return;
	/* replay of the record advanced nextXid past its running xid */
	xid = full_xid(ReadNextFullTransactionId(), rec->xid);
	slot = get_slot(slotno);
	/*
	 * Pruning trusts GetOldestNonRemovableTransactionId() to be at or
	 * below every xid the primary still runs.  Until the standby has
	 * replayed a running-xacts record that tracks them all
	 * (STANDBY_SNAPSHOT_READY), it does not know those xids and the value
	 * can be above one of them: an entry of an open transaction would be
	 * dropped, and once a round completes a snapshot could get a horizon
	 * above its numbers.  So nothing is pruned before that (see
	 * replay_may_prune); the list makes room by eviction meanwhile
	 * (add_replayed).
	 */
	if (replay_may_prune() &&
		slot->nentries >= PRUNE_MIN_ENTRIES &&
		slot->appends_since_prune >= PRUNE_MIN_APPENDS)
	{
		FullTransactionId removable = replay_removable_before();

		LWLockAcquire(slot->lock, LW_EXCLUSIVE);
		prune_slot(slot, removable, InvalidXLogRecPtr);
		LWLockRelease(slot->lock);
	}

	LWLockAcquire(slot->lock, LW_EXCLUSIVE);
	e = add_replayed(slot, xid, rec->lo);
	if (e != NULL)
		e->hi = rec->counter_started ? rec->next : rec->lo;
	if (rec->counter_started)
	{
		slot->next = rec->next;
		slot->started = true;
	}
	LWLockRelease(slot->lock);
	ConditionVariableBroadcast(&slot->advanced);
}

/*
 * stream_replay_reservation
 *		Replay a reservation that a record of the commit-time write carried
 *		(pagewrite.c): as XLOG_STREAM_NUMBERS of transaction "xid".
 */
void
stream_replay_reservation(const StreamReservation *res, TransactionId xid)
{
	xl_stream_numbers rec;

	rec.dboid = res->dboid;
	rec.relid = res->relid;
	rec.xid = xid;
	rec.lo = res->entry_lo;
	rec.next = res->next;
	rec.counter_started = true;
	stream_replay_numbers(&rec);
}

/*
 * stream_replay_listing
 *		Redo of XLOG_STREAM_LISTING: the stream's counter, and its open
 *		reservations, some of which may have been taken before this standby
 *		began to replay.  The primary wrote it under the slot's lock, so the
 *		counter is exact at this point of the WAL.
 */
void
stream_replay_listing(const xl_stream_listing *rec)
{
	int			slotno = replay_slot(rec->dboid, rec->relid);
	StreamSlot *slot;
	int			i;

	if (slotno < 0)
		return;
	slot = get_slot(slotno);
	LWLockAcquire(slot->lock, LW_EXCLUSIVE);
	for (i = 0; i < rec->nlisted; i++)
	{
		StreamEntry *e = add_replayed(slot, rec->listed[i].xid,
									  rec->listed[i].lo);

		if (e != NULL)
			e->hi = Max(e->hi, rec->listed[i].hi);
	}
	slot->next = rec->next;
	slot->started = true;
	LWLockRelease(slot->lock);
}

/*
 * stream_replay_round
 *		Redo of XLOG_STREAM_ROUND_START and _END.  A standby knows every
 *		open reservation once it has replayed a whole round, from its start
 *		on: reservations before the start that were still open are listed,
 *		and later ones were replayed.  A round whose start came before this
 *		server began to replay does not count.
 */
void
stream_replay_round(bool start, const xl_stream_round *rec)
{
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	if (start)
	{
		shared->round_open = true;
		shared->round_next_xid = rec->next_xid;
	}
	else if (shared->round_open)
	{
		if (!shared->complete)
		{
			shared->complete = true;
			shared->complete_next_xid = shared->round_next_xid;
		}
		shared->round_open = false;
	}
	LWLockRelease(shared->lock);
}

/*
 * log_listing
 *		Write the XLOG_STREAM_LISTING record of one slot under its lock, so
 *		that no reservation falls between what it lists and where it is in
 *		the WAL.  "buf" has room for a full list.
 */
static void
log_listing(StreamSlot *slot, xl_stream_listing *buf)
{
	int			i;

	buf->dboid = slot->dboid;
	buf->relid = slot->relid;
	buf->next = slot->next;
	buf->nlisted = 0;
	for (i = 0; i < slot->nentries; i++)
	{
		StreamEntry *e = &slot->entries[i];

		if (e->state != ENTRY_ASSIGNED)
			continue;
		buf->listed[buf->nlisted].xid = e->xid;
		buf->listed[buf->nlisted].lo = e->lo;
		buf->listed[buf->nlisted].hi = e->hi;
		buf->nlisted++;
	}
	XLogBeginInsert();
	XLogSetRecordFlags(XLOG_MARK_UNIMPORTANT);
	XLogRegisterData((char *) buf,
					 offsetof(xl_stream_listing, listed) +
					 sizeof(xl_stream_listed) * buf->nlisted);
	(void) XLogInsert(stream_seq_rmgr_id, XLOG_STREAM_LISTING);
}

/*
 * log_round_mark
 *		Write a round's start (with the next xid) or end; returns the end
 *		of the record.
 */
static XLogRecPtr
log_round_mark(uint8 info)
{
	xl_stream_round rec;

	rec.next_xid = ReadNextFullTransactionId();
	XLogBeginInsert();
	XLogSetRecordFlags(XLOG_MARK_UNIMPORTANT);
	XLogRegisterData((char *) &rec, sizeof(rec));
	return XLogInsert(stream_seq_rmgr_id, info);
}

/*
 * stream_log_round
 *		On a primary, list every started stream's counter and open
 *		reservations in the WAL, between a start and an end record, so
 *		that a standby that begins replaying anywhere learns what it
 *		missed (replica.c calls this periodically).  Slots are listed one
 *		at a time, each under its own lock.  The round is flushed: nothing
 *		else may flush it soon on a quiet primary, and a standby receives
 *		only flushed WAL.
 */
void
stream_log_round(void)
{
	xl_stream_listing *buf;
	int			slotno;

	if (!XLogStandbyInfoActive() || RecoveryInProgress())
		return;
	buf = palloc(offsetof(xl_stream_listing, listed) +
				 sizeof(xl_stream_listed) * shared->capacity);
	(void) log_round_mark(XLOG_STREAM_ROUND_START);
	for (slotno = 0; slotno < shared->nslots; slotno++)
	{
		StreamSlot *slot = get_slot(slotno);

		LWLockAcquire(slot->lock, LW_SHARED);
		if (slot->in_use && slot->started)
			log_listing(slot, buf);
		LWLockRelease(slot->lock);
	}
	XLogFlush(log_round_mark(XLOG_STREAM_ROUND_END));
	pfree(buf);
}

/*
 * Beyond this many xids between a snapshot's xmax and the bound, a snapshot
 * is refused without looking at each (see snapshot_predates_knowledge).
 */
#define PREDATES_MAX_XIDS 4096

/*
 * snapshot_predates_knowledge
 *		Whether "snapshot" may count as running a transaction that took
 *		numbers before this standby began to replay and finished before the
 *		round that completed its knowledge ("bound" is the round's next
 *		xid): such a snapshot cannot see that transaction's rows, and no
 *		entry says so.  Candidates are the xids below the bound that the
 *		snapshot counts as running, those in its array and those from its
 *		xmax on, that are no longer running; an xid the standby does not
 *		yet know as completed counts as running, and if it holds numbers
 *		the round listed it.  Runs without a slot lock.
 */
static bool
snapshot_predates_knowledge(Snapshot snapshot, FullTransactionId bound)
{
	FullTransactionId next = ReadNextFullTransactionId();
	FullTransactionId xmax = full_xid(next, snapshot->xmax);
	TransactionId *xids;
	uint32		n;
	uint32		i;
	uint64		x;

	if (!FullTransactionIdPrecedes(full_xid(next, snapshot->xmin), bound))
		return false;
	snapshot_running_xids(snapshot, &xids, &n);
	for (i = 0; i < n; i++)
	{
		if (FullTransactionIdPrecedes(full_xid(next, xids[i]), bound) &&
			!TransactionIdIsInProgress(xids[i]))
			return true;
	}
	if (!FullTransactionIdPrecedes(xmax, bound))
		return false;
	if (U64FromFullTransactionId(bound) - U64FromFullTransactionId(xmax) >
		PREDATES_MAX_XIDS)
		return true;
	for (x = U64FromFullTransactionId(xmax); x < U64FromFullTransactionId(bound); x++)
	{
		TransactionId xid = XidFromFullTransactionId(FullTransactionIdFromU64(x));

		if (TransactionIdIsNormal(xid) && !TransactionIdIsInProgress(xid))
			return true;
	}
	return false;
}

/*
 * stream_slot_standby_horizon
 *		The horizon of the stream for "snapshot" on a standby, from the
 *		replayed entries: the lowest "lo" of the transactions the snapshot
 *		sees as running, or the counter.  Every number not yet replayed
 *		will be at or above the replayed counter, since a stream's records
 *		are in the order of its numbers.  Not available before a whole
 *		round was replayed, for a snapshot older than that knowledge, or
 *		for a stream nothing was replayed for (horizon.c then reads the
 *		table): the result says which.
 */
StandbyHorizonResult
stream_slot_standby_horizon(StreamRef *ref, Snapshot snapshot, int64 *horizon)
{
	FullTransactionId next;
	FullTransactionId bound;
	StreamSlot *slot;
	HorizonParts parts;
	bool		complete;
	bool		lost;

	LWLockAcquire(shared->lock, LW_SHARED);
	complete = shared->complete;
	bound = shared->complete_next_xid;
	lost = shared->replay_lost;
	LWLockRelease(shared->lock);
	if (lost)
		return STANDBY_HORIZON_LOST;
	if (!complete)
		return STANDBY_HORIZON_INCOMPLETE;
	if (snapshot_predates_knowledge(snapshot, bound))
		return STANDBY_HORIZON_OLD_SNAPSHOT;

	next = ReadNextFullTransactionId();
	slot = lock_slot(ref, LW_SHARED);
	if (slot == NULL)
		return STANDBY_HORIZON_MOVED;
	if (!slot->started)
	{
		LWLockRelease(slot->lock);
		return STANDBY_HORIZON_NOT_STARTED;
	}
	horizon_locked(slot, snapshot, next, &parts);
	LWLockRelease(slot->lock);
	apply_floor(&parts, snapshot, next);
	*horizon = parts.horizon;
	return STANDBY_HORIZON_DONE;
}
