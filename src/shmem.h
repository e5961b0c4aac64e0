/*-------------------------------------------------------------------------
 *
 * shmem.h
 *	  What shmem.c offers to the files of its own layer and of the layers
 *	  above it (src/README.md).
 *
 * The shared slots of the streams, of which shmem.c is the only writer:
 * the counter, the transactions that hold numbers, the horizon computed
 * from them, and the WAL records that tell a standby the same.
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAM_SEQ_SHMEM_H
#define STREAM_SEQ_SHMEM_H

#include "access/transam.h"
#include "access/xlogdefs.h"
#include "storage/condition_variable.h"
#include "utils/snapshot.h"
#include "utils/timestamp.h"

#include "stream_seq.h"

/*
 * What the WAL record of a reservation tells a standby (log_numbers; or a
 * record of the caller's that carries it, see StreamReservationLogger).
 */
typedef struct StreamReservation
{
	Oid			dboid;
	Oid			relid;
	int64		entry_lo;		/* the first number the transaction holds */
	int64		lo;				/* the first of this reservation */
	int64		next;			/* the stream's counter after it */
	TimestampTz numbered_at;	/* the reservation's time */
	bool		logged;			/* the logger wrote it into WAL */
} StreamReservation;

/*
 * A caller's writer of the WAL record of a reservation: called under the
 * stream's lock right after the reservation, so that the stream's records
 * stay in the order of its numbers; it must not fail (it runs in a
 * critical section of its own), and sets "logged" if its record carries
 * the reservation (else log_numbers writes one).
 */
typedef void (*StreamReservationLogger) (StreamReservation *res, void *arg);

/* What stream_reserve needs before it can hand out numbers. */
typedef enum StreamReserveResult
{
	RESERVE_DONE,				/* numbers reserved */
	RESERVE_NEEDS_START,		/* counter not started since server start */
	RESERVE_NEEDS_BLOCK,		/* recorded block used up */
	RESERVE_NEEDS_TIME_FLOOR	/* time floor not yet raised to the
								 * table's newest time since the start */
} StreamReserveResult;

/* Identity of a slot in use, for reclaiming slots left behind. */
typedef struct StreamSlotIdent
{
	int			slotno;
	uint32		generation;
	Oid			dboid;
	Oid			relid;
	FullTransactionId attached_by;	/* transaction that took the slot */
} StreamSlotIdent;

/* A snapshot of one stream's shared state, for the streams view. */
typedef struct StreamStatus
{
	int64		next;			/* next number to hand out */
	int64		horizon;		/* for the snapshot, durable */
	int64		visible_horizon;	/* for the snapshot, by visibility */
	int			committing;		/* transactions holding numbers */
	int			oldest_pid;		/* the oldest of them, if any */
	TransactionId oldest_xid;
	TimestampTz oldest_since;
	int			in_commit;		/* of them, those not numbered early: in
								 * their commit */
	TimestampTz oldest_commit_since;	/* the oldest of those, if any */
	int			tracked;		/* entries in the list */
	uint64		evictions;
	uint64		assigned_xacts;
} StreamStatus;

/* A transaction that holds a stream's horizon back, for the holders view. */
typedef struct StreamHolder
{
	Oid			relid;
	int			pid;
	TransactionId xid;
	int64		first_number;
	int64		numbers;
	bool		committed;		/* committed, commit record not flushed */
	bool		early;			/* numbered early, not committing yet */
	TimestampTz since;
} StreamHolder;

/*
 * WAL records of stream_seq's resource manager (replica.c replays them,
 * shmem.c writes them under the lock of the slot they describe, so that
 * one stream's records are in the order of its numbers).  Its id is the
 * setting stream_seq.rmgr_id, by default the one PostgreSQL sets aside for
 * experiments; see doc/replicas.md.
 */
#define STREAM_SEQ_RMGR_NAME		"stream_seq"

#define XLOG_STREAM_NUMBERS			0x00	/* a transaction holds numbers */
#define XLOG_STREAM_ROUND_START		0x10	/* a listing of all streams begins */
#define XLOG_STREAM_LISTING			0x20	/* one stream's open reservations */
#define XLOG_STREAM_ROUND_END		0x30	/* the listing is complete */

/*
 * XLOG_STREAM_NUMBERS: transaction "xid" holds numbers of stream (dboid,
 * relid) from "lo" on, and the stream's counter is now at "next" (when
 * "counter_started"; enable() records an entry before the counter runs).
 * Written when a transaction first takes numbers, takes more, or gives
 * back the unused tail; always before its commit record.
 */
typedef struct xl_stream_numbers
{
	int64		lo;
	int64		next;
	Oid			dboid;
	Oid			relid;
	TransactionId xid;			/* running: its epoch is that of nextXid */
	bool		counter_started;
} xl_stream_numbers;

#define SizeOfStreamNumbers \
	(offsetof(xl_stream_numbers, counter_started) + sizeof(bool))

/* XLOG_STREAM_ROUND_START: every xid that took numbers before is below this */
typedef struct xl_stream_round
{
	FullTransactionId next_xid;
} xl_stream_round;

/* One open reservation in a listing. */
typedef struct xl_stream_listed
{
	FullTransactionId xid;
	int64		lo;
	int64		hi;
} xl_stream_listed;

/* XLOG_STREAM_LISTING: a stream's counter and its open reservations. */
typedef struct xl_stream_listing
{
	Oid			dboid;
	Oid			relid;
	int64		next;
	int32		nlisted;
	xl_stream_listed listed[FLEXIBLE_ARRAY_MEMBER];
} xl_stream_listing;

/* What a standby can say about a stream's horizon (shmem.c). */
typedef enum StandbyHorizonResult
{
	STANDBY_HORIZON_DONE,
	STANDBY_HORIZON_INCOMPLETE, /* no whole listing replayed yet */
	STANDBY_HORIZON_OLD_SNAPSHOT,	/* taken before the standby knew enough */
	STANDBY_HORIZON_NOT_STARTED,	/* nothing replayed for this stream */
	STANDBY_HORIZON_LOST,		/* a replayed stream found no free slot */
	STANDBY_HORIZON_MOVED		/* the stream's slot was reclaimed by redo */
} StandbyHorizonResult;

extern void stream_check_preloaded(void);
extern void stream_shmem_request(void);
extern void stream_shmem_startup(void);
extern bool stream_shmem_ready(void);
extern bool stream_slot_attach(StreamRef *ref);
extern int	stream_slot_list(StreamSlotIdent *idents, int max);
extern bool stream_slot_free(int slotno, uint32 generation);
extern void stream_slot_release(Oid dboid, Oid relid);
extern void stream_slot_restart(StreamRef *ref);
extern bool stream_counter_at_least(StreamRef *ref, int64 next);
extern bool stream_counter_start(StreamRef *ref, int64 start);
extern TimestampTz stream_time_floor(StreamRef *ref, TimestampTz at, bool now);
extern void stream_time_floor_newest(StreamRef *ref, TimestampTz newest);
extern bool stream_time_floor_known(StreamRef *ref);
extern bool stream_counter_read(StreamRef *ref, int64 *next,
								int64 *block_end);
extern void stream_counter_extend(StreamRef *ref, int64 block_start,
								  int64 block_end);
extern StreamReserveResult stream_reserve(StreamRef *ref, int64 count,
										  bool have_entry, int64 *lo,
										  TimestampTz *numbered_at,
										  StreamReservationLogger logger,
										  void *logger_arg);
extern void stream_add_entry(StreamRef *ref, int64 lo);
extern void stream_shrink(StreamRef *ref, int64 unused_from, int64 unused_to);
extern void stream_reserving_early(bool early);
extern void stream_entry_committing(int slotno, uint32 generation);
extern void stream_finish_entry(int slotno, uint32 generation,
								bool committed, XLogRecPtr commit_end);
extern bool stream_slot_horizon(StreamRef *ref, Snapshot snapshot,
								int64 *horizon, int64 *visible_horizon);
extern bool stream_slot_status(StreamRef *ref, Snapshot snapshot,
							   StreamStatus *status);
extern int	stream_slot_holders(StreamHolder **holders);
extern ConditionVariable *stream_slot_advanced_cv(StreamRef *ref);
extern StandbyHorizonResult stream_slot_standby_horizon(StreamRef *ref,
														Snapshot snapshot,
														int64 *horizon);
extern void stream_replay_numbers(const xl_stream_numbers *rec);
extern void stream_replay_reservation(const StreamReservation *res,
									  TransactionId xid);
extern void stream_replay_listing(const xl_stream_listing *rec);
extern void stream_replay_round(bool start, const xl_stream_round *rec);
extern void stream_log_round(void);

#endif							/* STREAM_SEQ_SHMEM_H */
