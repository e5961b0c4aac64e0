/*-------------------------------------------------------------------------
 *
 * stream_seq.h
 *	  Declarations shared by the files of the stream_seq extension.
 *
 * A stream is an ordinary table with one bigint column whose values are
 * assigned by the extension when the inserting transaction commits.  Shared
 * memory holds, per stream, the next number and the list of transactions
 * that hold numbers; the horizon of a snapshot is computed from that list.
 * The layout of that shared state is private to shmem.c, its only writer;
 * the other files go through the functions declared here.  See README.md
 * and the comments at the top of shmem.c for the argument why the horizon
 * never lets a reader skip a row, and for the lock order.
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAM_SEQ_H
#define STREAM_SEQ_H

#include "access/transam.h"
#include "fmgr.h"
#include "access/rmgr.h"
#include "access/xlogdefs.h"
#include "storage/condition_variable.h"
#include "storage/lockdefs.h"
#include "utils/relcache.h"
#include "utils/reltrigger.h"
#include "utils/snapshot.h"
#include "utils/timestamp.h"

/*
 * Server API that changed after PostgreSQL 15, under the names this source
 * uses (the 15 names): one tree builds against each major version.
 */
#if PG_VERSION_NUM >= 160000
#include "catalog/pg_class.h"
#include "utils/acl.h"
#define pg_class_ownercheck(relid, roleid) \
	object_ownercheck(RelationRelationId, (relid), (roleid))
#define check_is_member_of_role(member, role) \
	check_can_set_role((member), (role))
#endif
#if PG_VERSION_NUM >= 170000
#define STREAM_MY_LXID (MyProc->vxid.lxid)
#else
#define STREAM_MY_LXID (MyProc->lxid)
#endif
#if PG_VERSION_NUM >= 180000
#define stream_index_beginscan(heap, index, snapshot, nkeys) \
	index_beginscan((heap), (index), (snapshot), NULL, (nkeys), 0)
#else
#define stream_index_beginscan(heap, index, snapshot, nkeys) \
	index_beginscan((heap), (index), (snapshot), (nkeys), 0)
#endif

/* settings.c: the settings, defined by _PG_init (startup.c) */
extern int	stream_seq_max_streams;
extern int	stream_seq_max_tracked_xacts;
extern int	stream_seq_head_interval;
extern int	stream_seq_seal_grace;
extern bool stream_seq_notify;
extern bool stream_seq_heap_only;
extern int	stream_seq_round_interval;
extern int	stream_seq_rmgr_id;
extern int	stream_seq_retention_interval;
extern void stream_define_settings(void);

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
	AttrNumber	time_attnum;	/* the time column (0.5.0), or
								 * InvalidAttrNumber */
	Oid			head_seq;		/* sequence that records the head */
	int64		head_interval;	/* its increment: numbers per recorded block */
	Oid			owner;			/* table owner */
	int			slotno;
	uint32		generation;
} StreamRef;

/*
 * The table a stream trigger fired on: the stream table itself, or a
 * partition of a partitioned stream (partition.c).  Cached per backend.
 */
typedef struct StreamTarget
{
	Oid			relid;			/* hash key */
	bool		valid;
	Oid			stream;			/* the stream table its rows belong to */
	AttrNumber	seq_attnum;		/* the stream column, in this table */
	AttrNumber	time_attnum;	/* the time column, or InvalidAttrNumber */
	bool		sealed;			/* a sealed partition: takes no rows */
	bool		detaching;		/* being detached concurrently: neither */
	bool		pglogical;		/* pglogical installed: look at its sets */
} StreamTarget;

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
 * experiments; see README.md, "Replicas".
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

/* shmem.c: the only writer of the shared slots */
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
										  int64 *reserved,
										  TimestampTz *numbered_at);
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
extern void stream_replay_listing(const xl_stream_listing *rec);
extern void stream_replay_round(bool start, const xl_stream_round *rec);
extern void stream_log_round(void);

/* replica.c: the resource manager and the listing worker */
extern void stream_replica_init(void);
extern PGDLLEXPORT void stream_seq_lister_main(Datum main_arg);

/* catalog.c */
extern Oid	stream_namespace(bool missing_ok);
extern bool stream_is_own_trigger_function(Oid funcid, const char **name);
extern bool stream_is_own_trigger_name(const char *name);
extern bool stream_trigger_disabled(Trigger *trigger);
extern Oid	stream_database_owner(void);
extern void stream_grant_head_access(Oid head_seq);
extern void stream_lock_role(Oid role);
extern bool stream_pglogical_installed(void);
extern bool stream_trigger_function_installed(const char *name);
extern bool stream_table_has_triggers(Oid relid);
extern StreamRef *stream_lookup(Oid relid, bool missing_ok);
extern char *stream_rel_name(Oid relid);
extern void stream_report_not_stream(Oid relid);
extern void stream_check_locked(Oid relid, LOCKMODE lockmode);
extern StreamRef *stream_lookup_locked(Oid relid, LOCKMODE lockmode);
extern Relation stream_relation_open(Oid relid, LOCKMODE lockmode);
extern char *stream_qualified_name(Oid relid);
extern Oid	stream_catalog_relid(bool missing_ok);
extern char *stream_source(Oid relid);
extern char *stream_clip_name(const char *name, int max_bytes);
extern Oid	stream_catalog_owner(void);
extern bool stream_catalog_has(Oid relid);
extern void stream_catalog_insert(Oid relid, const char *column, Oid head_seq);
extern void stream_catalog_delete(Oid relid);
extern void stream_catalog_hold(Oid relid, const char *consumer);
extern void stream_catalog_record_start(Oid relid, int64 first);
extern int64 stream_catalog_first(Oid relid);
extern uint64 stream_catalog_exec(const char *sql, int nargs, Oid *argtypes,
								  Datum *values, int64 *row, int ncols,
								  bool *found);
extern uint64 stream_catalog_exec_nulls(const char *sql, int nargs,
										Oid *argtypes, Datum *values,
										const char *nulls);
extern uint64 stream_catalog_exec_latest(const char *sql, int nargs,
										 Oid *argtypes, Datum *values,
										 int64 *row, int ncols, bool *found);
extern uint64 stream_catalog_exec_in(const char *sql, Snapshot snapshot,
									 int64 *row, int ncols, bool *found);
extern char *stream_catalog_text(const char *sql, int nargs, Oid *argtypes,
								 Datum *values);
extern uint64 stream_catalog_rows(const char *sql, int nargs, Oid *argtypes,
								  Datum *values, int ncols, int64 **rows);
extern uint64 stream_caller_exec(const char *sql, int nargs, Oid *argtypes,
								 Datum *values);
extern void stream_run_as(Oid role, int *save_nestlevel, Oid *save_userid,
						  int *save_sec_context);
extern void stream_run_as_end(int save_nestlevel, Oid save_userid,
							  int save_sec_context);

/* counter.c: the durable head */
extern void stream_counter_raise(StreamRef *ref, int64 number);
extern int64 stream_start_counter(StreamRef *ref);
extern TimestampTz stream_table_newest_time(StreamRef *ref, Snapshot snapshot);
extern void stream_raise_time_floor(StreamRef *ref);
extern int64 stream_take_numbers(StreamRef *ref, int64 count, bool have_entry,
								 int64 *lo, TimestampTz *numbered_at);
extern int64 stream_recorded_end(Oid head_seq, int64 interval);
extern int64 stream_table_max(StreamRef *ref, Snapshot snapshot);
extern Oid	stream_create_head_sequence(Oid relid, const char *column,
										int64 start, int64 interval);

/* horizon.c */
extern int64 stream_compute_horizon(StreamRef *ref, Snapshot snapshot,
									int64 *visible_horizon);
extern int64 stream_statement_horizon(StreamRef *ref);
extern Snapshot stream_statement_snapshot(void);
extern void stream_check_select(Oid relid);
extern void stream_horizon_init(void);
extern bool stream_xact_computed_horizon(void);
extern StandbyHorizonResult stream_standby_horizon(StreamRef *ref,
												   Snapshot snapshot,
												   int64 *horizon);

/* assign.c */
extern void stream_assign_init(void);
extern void stream_release_at_commit(Oid relid);
extern void stream_xact_has_entry(StreamRef *ref);

/* retention.c */
extern void stream_check_trim(StreamRef *ref, int64 before, bool force);

/* partition.c */

/* What stream_drop_old_partitions may drop, and what it did. */
typedef struct DropLimits
{
	bool		force;			/* pass consumers */
	bool		keep_tables;	/* detach only */
	int32		retain;			/* keep this many of the sealed ones */
	int64		before;			/* only numbers below this */
	bool		use_time;		/* only partitions ending by "time" */
	TimestampTz time;
	char	   *held_by;		/* out: the consumer that stopped it */
	int64		held_at;		/* out: its position */
	int64		dropped_upto;	/* out: highest number dropped, 0 if none */
} DropLimits;

extern int	stream_drop_old_partitions(StreamRef *ref, DropLimits *limits);
extern bool stream_partitioned_by_time(Oid relid);
extern StreamTarget *stream_lookup_target(Relation rel);
extern void stream_check_partitions_supported(void);
extern Oid	stream_root_of(Oid relid);
extern void stream_partition_detached(Oid stream, Oid relid);
extern void stream_partition_detached_end(Oid relid);
extern void stream_check_attached(Oid stream, Oid relid);
extern void stream_check_partition(Oid stream, Oid relid, bool add_trigger);
extern void stream_add_truncate_trigger(Oid relid);
extern void stream_partition_truncated(Oid stream, Oid relid);
extern void stream_partition_dropped(Oid relid);
extern void stream_partition_xact_end(void);
extern void stream_partition_init(void);

/* consumer.c */
extern bool stream_have_groups(void);
extern void stream_check_not_null(FunctionCallInfo fcinfo, int nargs,
								  const char *what);
extern void stream_check_consumer_name(const char *consumer);
extern void stream_partition_detaching(Oid stream, Oid relid);
extern bool stream_slot_index_is_name(void);
extern int64 stream_consumer_lookup(Oid relid, const char *consumer,
									bool for_update, Oid *owner, int *slots);
extern void stream_check_consumer_owner(Oid relid, const char *consumer,
										Oid owner);
extern void stream_check_advance(StreamRef *ref, const char *what,
								 int64 position, int64 to_position);

/* group.c */
extern void stream_slots_raise(Oid relid, int64 upto);
extern bool stream_slowest_consumer(Oid relid, char **consumer,
									int64 *position);
extern bool stream_slots_floor(Oid relid, int64 horizon, char **consumer,
							   int64 *position);
extern int64 stream_slot_finished_upto(Oid relid, const char *slot_expr,
									   int slot, int64 position, int64 horizon);

/* resize.c */
extern bool stream_resize_supported(void);
extern bool stream_resize_try_switch(Oid relid, const char *consumer);
extern int64 stream_resize_fence(Oid relid, const char *consumer);
extern bool stream_resize_removed_slot(Oid relid, const char *consumer,
									   int slot);
extern void stream_resize_drop_indexes(Oid relid, const char *consumer);

/* SQLSTATE of a worker whose lease on a slot of a group was lost */
#define ERRCODE_STREAM_LEASE_LOST MAKE_SQLSTATE('S','S','0','0','1')

/* lifecycle.c */
extern Oid	stream_unique_index(Oid relid, AttrNumber attnum);
extern void stream_check_no_deferrable_index(Relation rel);
extern void stream_drop_group_index(Oid relid, const char *name);
extern void stream_check_written_columns_free(Relation rel, AttrNumber attnum,
											  AttrNumber time_attnum);
extern void stream_protect_index(Oid relid, AttrNumber attnum);
struct IndexStmt;
extern void stream_index_created(struct IndexStmt *stmt);
extern void stream_retire(StreamRef *ref);

/* replication.c */
extern void stream_check_pglogical(Relation rel, Oid stream);

/* retention_policy.c: policies applied by the retention workers */
extern void stream_retention_init(void);
extern PGDLLEXPORT void stream_seq_retention_launcher_main(Datum main_arg);
extern PGDLLEXPORT void stream_seq_retention_worker_main(Datum main_arg);

/* roles.c */
extern void stream_roles_init(void);
extern Datum stream_seq_drop_consumer(PG_FUNCTION_ARGS);

/* stats.c: how stream_seq shows in PostgreSQL's statistics views */
typedef enum StreamWaitEvent
{
	STREAM_WAIT_ADVANCE,		/* a backend in wait() */
	STREAM_WAIT_LISTER,			/* the lister between rounds */
	STREAM_WAIT_RETENTION		/* the retention launcher between runs */
} StreamWaitEvent;

extern void stream_untracked_statements(bool session);
extern uint32 stream_wait_event(StreamWaitEvent event);
extern void stream_stats_define_setting(void);
extern void stream_stats_init(void);
extern void stream_stats_count_commit(int64 numbers);
extern void stream_stats_count_eviction(void);
extern void stream_stats_count_retention_run(bool failed, int64 removed_rows);

#endif							/* STREAM_SEQ_H */
