/*-------------------------------------------------------------------------
 *
 * stats.c
 *	  How stream_seq shows in PostgreSQL's own statistics views.
 *
 * pg_stat_statements: the statements stream_seq runs through SPI on its
 * own (catalog reads and writes as the catalog's owner, the retention
 * workers' queries, the commit-time numbering's lookups) are the
 * extension's, not the user's workload.  pg_stat_statements decides what
 * is top level by its own count of nested executors and utility
 * statements, which misses them when they run outside any statement of
 * the user: at COMMIT (the deferred triggers fire after the COMMIT
 * statement has ended), in a background worker (nothing encloses its
 * SPI), and, on 15, inside a CALL or DO when pg_stat_statements.track_utility
 * is off.  So while such a statement runs, pg_stat_statements.track is
 * set to "none" (at the caller's GUC nesting level, undone with it), and
 * the retention workers set it for their whole life.  Their cost stays in
 * the calling statement's figures.  Nothing is set when pg_stat_statements
 * is not loaded: the setting is then at most a placeholder from the
 * configuration file, which is left alone.
 *
 * Wait events: named ones on 17 and later.  Cumulative statistics: a
 * kind of its own on 18 and later (see below).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/guc.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"
#if PG_VERSION_NUM >= 180000
#include "storage/lwlock.h"
#include "utils/pgstat_internal.h"
#endif

#include "stream_seq.h"
#include "stats.h"

PG_FUNCTION_INFO_V1(stream_seq_stats);

#define PGSS_TRACK_SETTING "pg_stat_statements.track"

/*
 * pgss_loaded
 *		Whether pg_stat_statements defined its tracking setting in this
 *		process.  It can only be loaded through shared_preload_libraries,
 *		so the answer is kept once known.
 */
static bool
pgss_loaded(void)
{
	static int	loaded = -1;

	if (loaded < 0)
	{
		/* a placeholder (from the configuration file) is not the module's */
		loaded = GetConfigOption(PGSS_TRACK_SETTING, true, false) != NULL &&
			(GetConfigOptionFlags(PGSS_TRACK_SETTING, true) &
			 GUC_CUSTOM_PLACEHOLDER) == 0;
	}
	return loaded > 0;
}

/*
 * stream_untracked_statements
 *		Keep pg_stat_statements from tracking the statements that follow:
 *		with "session", for the rest of the process (a background worker's
 *		own statements); otherwise until the caller's GUC nesting level
 *		(NewGUCNestLevel) is closed with AtEOXact_GUC.
 */
void
stream_untracked_statements(bool session)
{
	if (!pgss_loaded())
		return;
	if (session)
		SetConfigOption(PGSS_TRACK_SETTING, "none", PGC_SUSET, PGC_S_OVERRIDE);
	else
		(void) set_config_option(PGSS_TRACK_SETTING, "none",
								 PGC_SUSET, PGC_S_SESSION,
								 GUC_ACTION_SAVE, true, 0, false);
}

/*
 * Wait events.  On 17 and later each wait of stream_seq has a name of its
 * own (WaitEventExtensionNew), shown as wait_event in pg_stat_activity
 * with wait_event_type "Extension"; before 17 every one of them is the
 * generic "Extension".
 */
static const char *const wait_event_names[] = {
	[STREAM_WAIT_ADVANCE] = "StreamSeqWait",
	[STREAM_WAIT_LISTER] = "StreamSeqListerRound",
	[STREAM_WAIT_RETENTION] = "StreamSeqRetentionInterval",
};

/*
 * stream_wait_event
 *		The wait event to report for "event": its own on 17 and later
 *		(made on first use in each process), PG_WAIT_EXTENSION before.
 */
uint32
stream_wait_event(StreamWaitEvent event)
{
#if PG_VERSION_NUM >= 170000
	static uint32 ids[lengthof(wait_event_names)];

	Assert(event >= 0 && event < lengthof(wait_event_names));
	if (ids[event] == 0)
		ids[event] = WaitEventExtensionNew(wait_event_names[event]);
	return ids[event];
#else
	(void) wait_event_names;
	return PG_WAIT_EXTENSION;
#endif
}

/*
 * Cumulative statistics.  On 18 and later they are a custom fixed-amount
 * kind of the cumulative statistics system (pgstat_register_kind): kept
 * in shared memory, written to the statistics file at a clean shutdown and
 * read back at start, so they survive a clean restart and, like every
 * cumulative statistic, are reset by a crash, a promotion or an immediate
 * shutdown.  Its id is stream_seq.stats_kind_id.  Before 18 there is no
 * such kind: stream_seq.stats() returns NULLs, and the per-stream counters
 * of the streams view (assigned_xacts, evicted, since the server started)
 * are what there is.
 */
/* the kind's id (before 18 the setting exists and has no effect) */
#define STATS_KIND_DEFAULT	24	/* PGSTAT_KIND_EXPERIMENTAL */
#define STATS_KIND_MIN		24	/* PGSTAT_KIND_CUSTOM_MIN */
#define STATS_KIND_MAX		32	/* PGSTAT_KIND_CUSTOM_MAX */
static int	stream_seq_stats_kind_id = STATS_KIND_DEFAULT;

#if PG_VERSION_NUM >= 180000
StaticAssertDecl(STATS_KIND_DEFAULT == PGSTAT_KIND_EXPERIMENTAL &&
				 STATS_KIND_MIN == PGSTAT_KIND_CUSTOM_MIN &&
				 STATS_KIND_MAX == PGSTAT_KIND_CUSTOM_MAX,
				 "custom statistics kind ids changed");

/* the counters, as written to the statistics file */
typedef struct StreamStatsCounters
{
	PgStat_Counter numbers_assigned;	/* numbers in committed transactions */
	PgStat_Counter xacts_committed; /* transactions that committed numbers */
	PgStat_Counter evictions;	/* entries evicted from a full list */
	PgStat_Counter retention_runs;	/* runs of retention policies */
	PgStat_Counter retention_failures;	/* of them, failed ones */
	PgStat_Counter retention_removed_rows;	/* rows they removed */
	TimestampTz stat_reset_timestamp;
} StreamStatsCounters;

/* in shared memory: the counters, and their values at the last reset */
typedef struct StreamStatsShared
{
	LWLock		lock;			/* serializes writers and resets */
	uint32		changecount;
	StreamStatsCounters stats;
	StreamStatsCounters reset_offset;
} StreamStatsShared;

static bool stats_registered = false;

static void stats_init_shmem(void *stats);
static void stats_reset_all(TimestampTz ts);
static void stats_snapshot(void);

static const PgStat_KindInfo stream_stats_kind = {
	.name = "stream_seq",
	.fixed_amount = true,
	.write_to_file = true,
	.shared_size = sizeof(StreamStatsShared),
	.shared_data_off = offsetof(StreamStatsShared, stats),
	.shared_data_len = sizeof(StreamStatsCounters),
	.init_shmem_cb = stats_init_shmem,
	.reset_all_cb = stats_reset_all,
	.snapshot_cb = stats_snapshot,
};

/*
 * stats_init_shmem
 *		init_shmem_cb: set up the shared counters' lock (the counters start
 *		at zero, or as read from the statistics file).
 */
static void
stats_init_shmem(void *stats)
{
	StreamStatsShared *shared = (StreamStatsShared *) stats;

	LWLockInitialize(&shared->lock, LWTRANCHE_PGSTATS_DATA);
}

/*
 * stats_reset_all
 *		reset_all_cb: remember the counters as they are now, to be taken
 *		off what the snapshots show.
 */
static void
stats_reset_all(TimestampTz ts)
{
	StreamStatsShared *shared =
		pgstat_get_custom_shmem_data((PgStat_Kind) stream_seq_stats_kind_id);

	LWLockAcquire(&shared->lock, LW_EXCLUSIVE);
	pgstat_copy_changecounted_stats(&shared->reset_offset, &shared->stats,
									sizeof(shared->stats),
									&shared->changecount);
	shared->stats.stat_reset_timestamp = ts;
	LWLockRelease(&shared->lock);
}

/*
 * stats_snapshot
 *		snapshot_cb: copy the counters into this backend's statistics
 *		snapshot, less their values at the last reset.
 */
static void
stats_snapshot(void)
{
	PgStat_Kind kind = (PgStat_Kind) stream_seq_stats_kind_id;
	StreamStatsShared *shared = pgstat_get_custom_shmem_data(kind);
	StreamStatsCounters *snap = pgstat_get_custom_snapshot_data(kind);
	StreamStatsCounters reset;

	pgstat_copy_changecounted_stats(snap, &shared->stats, sizeof(shared->stats),
									&shared->changecount);
	LWLockAcquire(&shared->lock, LW_SHARED);
	memcpy(&reset, &shared->reset_offset, sizeof(reset));
	LWLockRelease(&shared->lock);
	snap->numbers_assigned -= reset.numbers_assigned;
	snap->xacts_committed -= reset.xacts_committed;
	snap->evictions -= reset.evictions;
	snap->retention_runs -= reset.retention_runs;
	snap->retention_failures -= reset.retention_failures;
	snap->retention_removed_rows -= reset.retention_removed_rows;
}

/*
 * stats_add
 *		Add to the shared counters.  Takes an LWLock and allocates nothing:
 *		safe in a commit callback and under a stream's slot lock (no lock
 *		is taken while this one is held).
 */
static void
stats_add(int64 numbers, int64 xacts, int64 evictions, int64 runs,
		  int64 failures, int64 removed)
{
	StreamStatsShared *shared;

	if (!stats_registered)
		return;
	shared = pgstat_get_custom_shmem_data((PgStat_Kind) stream_seq_stats_kind_id);
	LWLockAcquire(&shared->lock, LW_EXCLUSIVE);
	pgstat_begin_changecount_write(&shared->changecount);
	shared->stats.numbers_assigned += numbers;
	shared->stats.xacts_committed += xacts;
	shared->stats.evictions += evictions;
	shared->stats.retention_runs += runs;
	shared->stats.retention_failures += failures;
	shared->stats.retention_removed_rows += removed;
	pgstat_end_changecount_write(&shared->changecount);
	LWLockRelease(&shared->lock);
}
#endif							/* PG_VERSION_NUM >= 180000 */

/*
 * stream_stats_define_setting
 *		Define stream_seq.stats_kind_id (with the other settings, before the
 *		prefix is reserved).
 */
void
stream_stats_define_setting(void)
{
	DefineCustomIntVariable("stream_seq.stats_kind_id",
							"Id of stream_seq's kind of cumulative statistics (PostgreSQL 18 and later).",
							"0 keeps no cumulative statistics.  The default is the id PostgreSQL sets aside for experiments.",
							&stream_seq_stats_kind_id,
							STATS_KIND_DEFAULT, 0, STATS_KIND_MAX,
							PGC_POSTMASTER, 0,
							NULL, NULL, NULL);
}

/*
 * stream_stats_init
 *		From _PG_init when preloaded: on 18 and later, register the
 *		statistics kind (unless stream_seq.stats_kind_id is 0).
 */
void
stream_stats_init(void)
{
	if (stream_seq_stats_kind_id != 0 && stream_seq_stats_kind_id < STATS_KIND_MIN)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("stream_seq.stats_kind_id must be 0 or between %d and %d",
						STATS_KIND_MIN, STATS_KIND_MAX)));
#if PG_VERSION_NUM >= 180000
	if (stream_seq_stats_kind_id == 0)
		return;
	pgstat_register_kind((PgStat_Kind) stream_seq_stats_kind_id,
						 &stream_stats_kind);
	stats_registered = true;
#endif
}

/*
 * stream_stats_count_commit
 *		A transaction committed "numbers" numbers (on all its streams).
 *		Called from the commit callback: must not fail.
 */
void
stream_stats_count_commit(int64 numbers)
{
#if PG_VERSION_NUM >= 180000
	stats_add(numbers, 1, 0, 0, 0, 0);
#endif
}

/*
 * stream_stats_count_eviction
 *		An entry was evicted from a stream's full list of transactions.
 */
void
stream_stats_count_eviction(void)
{
#if PG_VERSION_NUM >= 180000
	stats_add(0, 0, 1, 0, 0, 0);
#endif
}

/*
 * stream_stats_count_retention_run
 *		A retention policy ran: failed or not, removing "removed_rows"
 *		rows (negative: not known, as for a partitioned stream).
 */
void
stream_stats_count_retention_run(bool failed, int64 removed_rows)
{
#if PG_VERSION_NUM >= 180000
	stats_add(0, 0, 0, 1, failed ? 1 : 0, Max(removed_rows, 0));
#endif
}

/*
 * stream_seq_stats
 *		SQL: stats() RETURNS record: the cumulative counters, and when they
 *		were last reset; NULLs where there are none (before 18, or with
 *		stream_seq.stats_kind_id 0).
 */
Datum
stream_seq_stats(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	Datum		values[7];
	bool		nulls[7];

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	memset(nulls, true, sizeof(nulls));
#if PG_VERSION_NUM >= 180000
	if (stats_registered)
	{
		StreamStatsCounters *c;

		pgstat_snapshot_fixed((PgStat_Kind) stream_seq_stats_kind_id);
		c = pgstat_get_custom_snapshot_data((PgStat_Kind) stream_seq_stats_kind_id);
		memset(nulls, false, sizeof(nulls));
		values[0] = Int64GetDatum(c->numbers_assigned);
		values[1] = Int64GetDatum(c->xacts_committed);
		values[2] = Int64GetDatum(c->evictions);
		values[3] = Int64GetDatum(c->retention_runs);
		values[4] = Int64GetDatum(c->retention_failures);
		values[5] = Int64GetDatum(c->retention_removed_rows);
		values[6] = TimestampTzGetDatum(c->stat_reset_timestamp);
		nulls[6] = c->stat_reset_timestamp == 0;
	}
#endif
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}
