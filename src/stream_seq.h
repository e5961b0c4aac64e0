/*-------------------------------------------------------------------------
 *
 * stream_seq.h
 *	  Declarations shared by the files of the stream_seq extension.
 *
 * A stream is an ordinary table with one bigint column whose values are
 * assigned by the extension when the inserting transaction commits.  Shared
 * memory holds, per stream, the next number and the list of transactions
 * that hold numbers ("entries"); the horizon of a snapshot is computed from
 * that list.  See README.md and the comments in shmem.c for the argument
 * why the horizon never lets a reader skip a row.
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAM_SEQ_H
#define STREAM_SEQ_H

#include "access/transam.h"
#include "access/xlogdefs.h"
#include "storage/condition_variable.h"
#include "storage/lwlock.h"
#include "utils/relcache.h"
#include "utils/snapshot.h"
#include "utils/timestamp.h"

/* GUC variables (stream_seq.c) */
extern int	stream_seq_max_streams;
extern int	stream_seq_max_tracked_xacts;
extern int	stream_seq_head_interval;
extern bool stream_seq_notify;

/* State of one tracked transaction. */
typedef enum StreamEntryState
{
	ENTRY_ASSIGNED = 0,			/* holds numbers, outcome not yet recorded */
	ENTRY_COMMITTED,			/* committed; commit_end says where in WAL */
	ENTRY_ABORTED				/* aborted; holds nothing back */
} StreamEntryState;

/*
 * One transaction that took numbers from a stream.  Its numbers all lie in
 * [lo, hi); lo is what holds the horizon back.
 */
typedef struct StreamEntry
{
	TransactionId xid;			/* top-level xid of the transaction */
	int			pid;			/* backend that assigned the numbers */
	uint8		state;			/* StreamEntryState */
	int64		lo;
	int64		hi;
	XLogRecPtr	commit_end;		/* end of the commit record, when committed */
	TimestampTz assigned_at;
} StreamEntry;

/*
 * A committed transaction moved out of a full list; see shmem.c.
 */
typedef struct EvictedXact
{
	TransactionId xid;
	int64		lo;
} EvictedXact;

/*
 * Shared state of one stream.  Protected by "lock", except the identity
 * fields, which are changed only under the global lock and re-checked under
 * "lock" by readers (see stream_slot_acquire).
 */
typedef struct StreamSlot
{
	Oid			dboid;
	Oid			relid;
	bool		in_use;
	uint32		generation;		/* bumped whenever the slot changes owner */
	LWLock	   *lock;

	bool		initialized;	/* next/block_end are valid */
	int64		next;			/* next number to hand out */
	int64		block_end;		/* numbers below this are recorded durably */

	/*
	 * Committed entries that neither the list nor the evicted store could
	 * keep are summarized by a conservative floor: for any snapshot that
	 * might see one of them as in progress, or while one of their commit
	 * records is not yet flushed, the horizon stays at or below floor_lo.
	 */
	bool		floor_active;
	int64		floor_lo;
	TransactionId floor_min_xid;	/* oldest xid folded in */
	TransactionId floor_xid;	/* newest xid folded in */
	XLogRecPtr	floor_lsn;		/* latest commit end folded in */

	int			nevicted;		/* entries in the evicted store */

	uint64		evictions;		/* statistics */
	uint64		assigned_xacts;
	uint32		appends_since_prune;
	int			nentries;		/* entries[0 .. nentries-1], assignment order */

	ConditionVariable advanced; /* broadcast when a commit may move horizon */

	StreamEntry entries[FLEXIBLE_ARRAY_MEMBER];
} StreamSlot;

/*
 * A backend's handle on a stream: what the catalog says about it and which
 * shared slot holds its state.  Kept in a backend-local cache (catalog.c),
 * dropped on relcache invalidation of the table.
 */
typedef struct StreamRef
{
	Oid			relid;			/* hash key */
	bool		valid;
	AttrNumber	seq_attnum;
	Oid			head_seq;		/* sequence that records the head */
	int64		head_interval;	/* its increment: numbers per recorded block */
	Oid			owner;			/* table owner, for internal queries */
	int			slotno;
	uint32		generation;
} StreamRef;

/* shmem.c */
extern void stream_shmem_request(void);
extern void stream_shmem_startup(void);
extern bool stream_shmem_ready(void);
extern void stream_check_preloaded(void);
extern StreamSlot *stream_slot_get(int slotno);
extern EvictedXact *stream_slot_evicted(StreamSlot *slot);
extern StreamSlot *stream_slot_lock(StreamRef *ref, LWLockMode mode);
extern void stream_slot_attach(StreamRef *ref);
extern void stream_slot_release(Oid dboid, Oid relid);
extern int64 stream_reserve(StreamRef *ref, int64 count, bool have_entry,
							int64 *lo);
extern void stream_shrink(StreamRef *ref, int64 unused_from, int64 unused_to);
extern void stream_add_entry(StreamRef *ref, int64 lo);
extern void stream_finish_entry(int slotno, uint32 generation,
								TransactionId xid, bool committed,
								XLogRecPtr commit_end);
extern void stream_prune(StreamSlot *slot, TransactionId oldest_xmin,
						 XLogRecPtr flushed);

/* catalog.c */
extern StreamRef *stream_lookup(Oid relid, bool missing_ok);
extern Oid	stream_catalog_relid(void);
extern int64 stream_initialize_counter(StreamRef *ref);
extern StreamSlot *stream_slot_lock_started(StreamRef *ref, LWLockMode mode);
extern void stream_refill_block(StreamRef *ref);
extern void stream_catalog_init(void);
extern void stream_catalog_insert(Oid relid, Name column, Oid head_seq);
extern void stream_catalog_delete(Oid relid);
extern void stream_catalog_record_start(Oid relid, int64 first);
extern uint64 stream_catalog_exec(const char *sql, int nargs, Oid *argtypes,
								  Datum *values, int64 *row, int ncols,
								  bool *found);

/* horizon.c */
extern int64 stream_compute_horizon(StreamRef *ref, Snapshot snapshot,
									int64 *visible_horizon);
extern int64 stream_statement_horizon(StreamRef *ref);
extern void stream_check_select(Oid relid);
extern void stream_horizon_reset_cache(void);

/* assign.c */
extern void stream_assign_init(void);
extern bool stream_xact_computed_horizon;
extern void stream_release_at_commit(Oid relid);

#endif							/* STREAM_SEQ_H */
