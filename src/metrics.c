/*-------------------------------------------------------------------------
 *
 * metrics.c
 *	  stream_seq.metrics(): numeric gauges and counters of every stream,
 *	  consumer and slot of the database, for monitoring systems that
 *	  scrape them (postgres_exporter, a pg_monitor role).
 *
 * The views (streams, consumers, consumer_slots) show only the streams the
 * caller may read, and their intervals and alert conditions do not suit a
 * scraper.  metrics() shows every stream to whoever may execute it (the
 * extension grants EXECUTE to pg_monitor only), but nothing of a row's
 * contents: numbers, counts, seconds and 0/1 flags, with the names of the
 * streams and consumers as labels.  So that its caller needs no privilege
 * on the stream tables, it reads the extension's tables as their owner and
 * counts the rows of a stream table as the table's owner (a group's slot
 * expression runs there, and it is the owner's code), under
 * SECURITY_RESTRICTED_OPERATION with search_path pinned (stream_run_as).
 *
 * What costs: the backlog of a consumer in rows.  Positions and lags in
 * numbers come from the catalog and shared memory.  The rows are counted
 * once per stream for all its consumers, from the newest rows below the
 * horizon, at most "backlog_cap" of them (one backward index scan): a
 * consumer whose position lies within them gets its exact count, one below
 * them gets the cap, flagged, and its lag in numbers is then an upper
 * bound.  A group also needs the slot of each of those rows, read once
 * per group.  The cost of a call is therefore at most backlog_cap index
 * entries per stream with consumers and backlog_cap rows per group,
 * whatever the backlog.
 *
 * One stream's trouble does not blind the scrape.  The stream table is
 * locked without waiting: one that another transaction holds in ACCESS
 * EXCLUSIVE mode (an uncommitted DROP TABLE or disable(), LOCK TABLE,
 * VACUUM FULL) is shown with its figures NULL; so is one no shared slot is
 * free for (more streams enabled than stream_seq.max_streams), or whose
 * figures fail to come (any error but a cancel).  Every other lock the
 * call needs (the extension's tables, a stream's index, partitions and
 * head sequence, what a group's slot expression reads) it waits for at
 * most METRICS_LOCK_WAIT_MS, or lock_timeout if lower: past it, that
 * stream's figures (or backlogs) are NULL, or for the extension's tables
 * the call fails with 55P03.  What one stream needs runs in a
 * subtransaction of its own, which a cancel (a scraper's timeout) rolls
 * back before it ends the call.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "storage/proc.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "stream_seq.h"
#include "catalog.h"
#include "horizon.h"
#include "shmem.h"

PG_FUNCTION_INFO_V1(stream_seq_metrics);

/* the largest backlog_cap accepted: rows held in memory by one count */
#define METRICS_MAX_BACKLOG_CAP 100000

/*
 * The longest a call waits for any one lock but a stream table's (which it
 * does not wait for at all), in ms; lock_timeout if lower.
 * doc/monitoring.md says so.
 */
#define METRICS_LOCK_WAIT_MS 100

/* columns of the result, in the order of the SQL declaration */
enum
{
	M_KIND,
	M_STREAM,
	M_STREAM_NAME,
	M_CONSUMER,
	M_SLOT,
	M_HEAD,
	M_HORIZON,
	M_FIRST,
	M_WAITING,
	M_DURABLE_LAG,
	M_COMMITTING,
	M_OLDEST_COMMIT_SECONDS,
	M_TRACKED,
	M_EVICTED,
	M_ASSIGNED_XACTS,
	M_SLOTS,
	M_POSITION,
	M_LAG,
	M_SINCE_ADVANCE_SECONDS,
	M_BACKLOG_ROWS,
	M_BACKLOG_CAPPED,
	M_PARKED,
	M_DEAD_LETTERS,
	M_RETRIES_DUE,
	M_OLDEST_PARKED_SECONDS,
	M_OLDEST_DUE_SECONDS,
	M_RESIZE_PENDING,
	M_LEASED,
	M_HELD,						/* since 0.8.0: the last column */
	M_NCOLUMNS
};

/* One stream, from stream_seq.stream. */
typedef struct MetricsStream
{
	Oid			relid;
	int64		first;
} MetricsStream;

/* One consumer, plain or group, from stream_seq.consumer and parked. */
typedef struct MetricsConsumer
{
	Oid			relid;
	char	   *name;
	int			slots;			/* 0: a plain consumer */
	char	   *slot_expr;
	bool		have_position;	/* a group without slots has none */
	int64		position;		/* a group: its slowest slot */
	double		since_advance;	/* a group: since any slot advanced */
	int			resize_pending;
	int64		parked;
	int64		dead_letters;
	int64		retries_due;
	int64		held;
	double		oldest_parked;
	double		oldest_due;
	bool		have_backlog;
	int64		backlog;
	bool		capped;
	int			first_slot;		/* its slots: MetricsSlot[first_slot..] */
	int			nslots;
} MetricsConsumer;

/* One slot of a group, from stream_seq.consumer_slot. */
typedef struct MetricsSlot
{
	Oid			relid;
	char	   *consumer;
	int			slot;
	int64		position;
	double		since_advance;
	int			leased;
	bool		have_backlog;
	int64		backlog;
	bool		capped;
} MetricsSlot;

/* What metrics_read_stream() reads of one stream. */
typedef struct MetricsRead
{
	Oid			relid;			/* the stream */
	bool		standby;		/* RecoveryInProgress() */
	StreamRef  *ref;			/* NULL: not a stream now, or no slot */
	bool		no_slot;		/* no shared slot was free for it */
	bool		have_status;
	bool		have_horizon;
	int64		horizon;
	StreamStatus status;
} MetricsRead;

/* A step of metrics_isolated(). */
typedef void (*MetricsStep) (void *arg);

/* What one call reads, and where. */
typedef struct MetricsState
{
	MemoryContext cxt;			/* the call's context: outlives SPI */
	MetricsStream *streams;
	int			nstreams;
	MetricsConsumer *consumers;
	int			nconsumers;
	MetricsSlot *slots;
	int			nslots;
} MetricsState;

/*
 * metrics_text
 *		Column "col" of row "row" of the last SPI result as a string in the
 *		call's context, or NULL.
 */
static char *
metrics_text(MetricsState *st, int row, int col)
{
	char	   *value = SPI_getvalue(SPI_tuptable->vals[row],
									 SPI_tuptable->tupdesc, col);

	return value == NULL ? NULL : MemoryContextStrdup(st->cxt, value);
}

/*
 * metrics_datum
 *		Column "col" of row "row" of the last SPI result; *isnull says
 *		whether it is NULL.  Only for pass-by-value types.
 */
static Datum
metrics_datum(int row, int col, bool *isnull)
{
	return SPI_getbinval(SPI_tuptable->vals[row], SPI_tuptable->tupdesc,
						 col, isnull);
}

/*
 * metrics_query
 *		Run a read-only query in the statement's snapshot (so that the
 *		catalog queries of one call agree with each other and with the
 *		horizons), failing on an error.
 */
static void
metrics_query(const char *sql, int nargs, Oid *argtypes, Datum *values)
{
	if (SPI_execute_with_args(sql, nargs, argtypes, values, NULL, true, 0) !=
		SPI_OK_SELECT)
		elog(ERROR, "SPI_execute_with_args failed for \"%s\"", sql);
}

/*
 * metrics_have_held
 *		Whether the extension's tables have held rows (per-key order): a
 *		database not yet updated to 0.8.0 has none.
 */
static bool
metrics_have_held(void)
{
	Oid			parked = get_relname_relid("parked", stream_namespace(false));

	return OidIsValid(parked) && get_attnum(parked, "held") != InvalidAttrNumber;
}

/*
 * metrics_read_catalog
 *		Read the streams, and if "want_consumers" the consumers, parked row
 *		counts and slots, as the owner of the extension's tables, which
 *		its caller need not be able to read.
 */
static void
metrics_read_catalog(MetricsState *st, bool want_consumers)
{
	int			save_nestlevel;
	Oid			save_userid;
	int			save_sec_context;
	int			i;
	int			c;

	stream_run_as(stream_catalog_owner(), &save_nestlevel, &save_userid,
				  &save_sec_context);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");

	metrics_query("SELECT s.relid::pg_catalog.oid, s.trimmed_before "
				  "FROM stream_seq.stream s ORDER BY 1", 0, NULL, NULL);
	st->nstreams = (int) SPI_processed;
	st->streams = MemoryContextAllocZero(st->cxt, sizeof(MetricsStream) *
										 Max(st->nstreams, 1));
	for (i = 0; i < st->nstreams; i++)
	{
		bool		isnull;

		st->streams[i].relid = DatumGetObjectId(metrics_datum(i, 1, &isnull));
		st->streams[i].first = DatumGetInt64(metrics_datum(i, 2, &isnull));
	}

	if (want_consumers)
	{
		/*
		 * Since 0.8.0 rows held behind a parked row of their key are
		 * counted apart: not failures, not waiting for a replay by hand.
		 */
		bool		have_held = metrics_have_held();

		metrics_query(psprintf("SELECT c.stream::pg_catalog.oid, c.consumer, "
					  "       COALESCE(c.slots, 0), c.slot_expr, c.position, "
					  "       pg_catalog.date_part('epoch', pg_catalog.now() - c.advanced_at), "
					  "       (c.resize_fence IS NOT NULL)::pg_catalog.int4, "
					  "       COALESCE(k.parked, 0), "
					  "       COALESCE(k.dead, 0), "
					  "       COALESCE(k.due, 0), "
					  "       COALESCE(pg_catalog.date_part('epoch', "
					  "           pg_catalog.now() - k.oldest_unscheduled), 0), "
					  "       COALESCE(pg_catalog.date_part('epoch', "
					  "           pg_catalog.now() - k.oldest_due), 0), "
					  "       COALESCE(k.held, 0) "
					  "  FROM stream_seq.consumer c "
					  "  LEFT JOIN (SELECT x.stream, x.consumer, "
					  "                    pg_catalog.count(*) FILTER (WHERE NOT x.dead AND NOT %1$s) AS parked, "
					  "                    pg_catalog.count(*) FILTER (WHERE %1$s) AS held, "
					  "                    pg_catalog.count(*) FILTER (WHERE x.dead) AS dead, "
					  "                    pg_catalog.count(*) FILTER (WHERE NOT x.dead "
					  "                        AND x.due_at <= pg_catalog.now()) AS due, "
					  "                    pg_catalog.min(x.first_failed) FILTER (WHERE NOT x.dead "
					  "                        AND x.due_at IS NULL AND NOT %1$s) AS oldest_unscheduled, "
					  "                    pg_catalog.min(x.due_at) FILTER (WHERE NOT x.dead "
					  "                        AND x.due_at <= pg_catalog.now()) AS oldest_due "
					  "               FROM stream_seq.parked x WHERE NOT x.resolved "
					  "              GROUP BY x.stream, x.consumer) k "
					  "    ON k.stream = c.stream AND k.consumer = c.consumer "
					  " ORDER BY 1, c.consumer COLLATE \"C\"",
					  have_held ? "x.held" : "false"), 0, NULL, NULL);
		st->nconsumers = (int) SPI_processed;
		st->consumers = MemoryContextAllocZero(st->cxt, sizeof(MetricsConsumer) *
											   Max(st->nconsumers, 1));
		for (i = 0; i < st->nconsumers; i++)
		{
			MetricsConsumer *mc = &st->consumers[i];
			bool		isnull;

			mc->relid = DatumGetObjectId(metrics_datum(i, 1, &isnull));
			mc->name = metrics_text(st, i, 2);
			mc->slots = DatumGetInt32(metrics_datum(i, 3, &isnull));
			mc->slot_expr = metrics_text(st, i, 4);
			mc->position = DatumGetInt64(metrics_datum(i, 5, &isnull));
			mc->have_position = mc->slots == 0;
			mc->since_advance = DatumGetFloat8(metrics_datum(i, 6, &isnull));
			mc->resize_pending = DatumGetInt32(metrics_datum(i, 7, &isnull));
			mc->parked = DatumGetInt64(metrics_datum(i, 8, &isnull));
			mc->dead_letters = DatumGetInt64(metrics_datum(i, 9, &isnull));
			mc->retries_due = DatumGetInt64(metrics_datum(i, 10, &isnull));
			mc->oldest_parked = DatumGetFloat8(metrics_datum(i, 11, &isnull));
			mc->oldest_due = DatumGetFloat8(metrics_datum(i, 12, &isnull));
			mc->held = DatumGetInt64(metrics_datum(i, 13, &isnull));
		}

		metrics_query("SELECT s.stream::pg_catalog.oid, s.consumer, s.slot, s.position, "
					  "       pg_catalog.date_part('epoch', pg_catalog.now() - s.advanced_at), "
					  "       (s.lease_until IS NOT NULL AND "
					  "        s.lease_until > pg_catalog.clock_timestamp())::pg_catalog.int4 "
					  "  FROM stream_seq.consumer_slot s "
					  " ORDER BY 1, s.consumer COLLATE \"C\", s.slot", 0, NULL, NULL);
		st->nslots = (int) SPI_processed;
		st->slots = MemoryContextAllocZero(st->cxt, sizeof(MetricsSlot) *
										   Max(st->nslots, 1));
		for (i = 0; i < st->nslots; i++)
		{
			MetricsSlot *ms = &st->slots[i];
			bool		isnull;

			ms->relid = DatumGetObjectId(metrics_datum(i, 1, &isnull));
			ms->consumer = metrics_text(st, i, 2);
			ms->slot = DatumGetInt32(metrics_datum(i, 3, &isnull));
			ms->position = DatumGetInt64(metrics_datum(i, 4, &isnull));
			ms->since_advance = DatumGetFloat8(metrics_datum(i, 5, &isnull));
			ms->leased = DatumGetInt32(metrics_datum(i, 6, &isnull));
		}
	}
	SPI_finish();
	stream_run_as_end(save_nestlevel, save_userid, save_sec_context);

	/*
	 * Each group's slots, by walking both lists, which are in the same
	 * order; a slot whose group is not listed (created between the two
	 * queries cannot happen in one snapshot, but a group without slots
	 * can) is left out.  A group's position is its slowest slot's, and it
	 * advanced when any slot did.
	 */
	c = 0;
	for (i = 0; i < st->nslots; i++)
	{
		MetricsSlot *ms = &st->slots[i];
		MetricsConsumer *mc;

		while (c < st->nconsumers &&
			   (st->consumers[c].relid < ms->relid ||
				(st->consumers[c].relid == ms->relid &&
				 strcmp(st->consumers[c].name, ms->consumer) < 0)))
			c++;
		if (c >= st->nconsumers)
			break;
		mc = &st->consumers[c];
		if (mc->relid != ms->relid || strcmp(mc->name, ms->consumer) != 0 ||
			mc->slots == 0)
			continue;
		if (mc->nslots == 0)
		{
			mc->first_slot = i;
			mc->have_position = true;
			mc->position = ms->position;
			mc->since_advance = ms->since_advance;
		}
		mc->nslots++;
		mc->position = Min(mc->position, ms->position);
		mc->since_advance = Min(mc->since_advance, ms->since_advance);
	}
}

/*
 * metrics_count_after
 *		How many of the "n" ascending numbers in "rows" are above "position".
 */
static int64
metrics_count_after(const int64 *rows, int n, int64 position)
{
	int			lo = 0;
	int			hi = n;

	/* the first index whose number is above position */
	while (lo < hi)
	{
		int			mid = lo + (hi - lo) / 2;

		if (rows[mid] > position)
			hi = mid;
		else
			lo = mid + 1;
	}
	return n - lo;
}

/*
 * metrics_window
 *		The newest numbers of stream rows above "after" and below "horizon",
 *		at most "cap" of them, ascending, in a palloc'd array; returns how
 *		many.  One backward scan of the stream column's index (index-only
 *		where the pages are all-visible).  Runs inside an SPI connection as
 *		the table's owner; the array lives until SPI_finish.
 */
static int
metrics_window(const char *source, const char *column, int64 after,
			   int64 horizon, int cap, int64 **rows)
{
	Oid			argtypes[3] = {INT8OID, INT8OID, INT4OID};
	Datum		values[3];
	int			n;
	int			i;

	values[0] = Int64GetDatum(after);
	values[1] = Int64GetDatum(horizon);
	values[2] = Int32GetDatum(cap);
	metrics_query(psprintf("SELECT t.%s FROM %s t WHERE t.%s > $1 AND t.%s < $2 "
						   "ORDER BY t.%s DESC LIMIT $3",
						   column, source, column, column, column),
				  3, argtypes, values);
	n = (int) SPI_processed;
	*rows = palloc(sizeof(int64) * Max(n, 1));
	for (i = 0; i < n; i++)
	{
		bool		isnull;

		(*rows)[n - 1 - i] = DatumGetInt64(metrics_datum(i, 1, &isnull));
	}
	return n;
}

/*
 * metrics_count_plain
 *		The backlog in rows of the plain consumers of a stream (those in
 *		consumers[from..to)) from the stream's window (metrics_count_stream):
 *		each counts the rows of it above its position, and is capped when
 *		the window is full and stops above its position.
 */
static void
metrics_count_plain(MetricsState *st, int from, int to, const int64 *window,
					int nwindow, int cap)
{
	int			i;

	for (i = from; i < to; i++)
	{
		MetricsConsumer *mc = &st->consumers[i];

		if (mc->slots != 0)
			continue;
		mc->have_backlog = true;
		mc->backlog = nwindow > 0 ?
			metrics_count_after(window, nwindow, mc->position) : 0;
		/* rows between its position and the oldest read were not read */
		mc->capped = nwindow == cap && mc->position + 1 < window[0];
	}
}

/*
 * metrics_count_group
 *		The backlog in rows of each slot of group "mc", and of the group
 *		(their sum), from the stream's window (metrics_count_stream): the
 *		slot of each row of it, fetched by the window's range of numbers,
 *		then each slot counts its rows above its position, and is capped
 *		(the count is then a lower bound) when the window is full and stops
 *		above its position.  Runs inside an SPI connection as the table's
 *		owner, whose code the slot expression is.
 */
static void
metrics_count_group(MetricsState *st, MetricsConsumer *mc, const char *source,
					const char *column, int64 horizon, const int64 *window,
					int nwindow, int cap)
{
	Oid			argtypes[3] = {INT8OID, INT8OID, INT8OID};
	Datum		values[3];
	int64		slowest = PG_INT64_MAX;
	int			max_slot = -1;
	int		   *index_of;		/* slot number -> index in st->slots */
	int			n;
	int			i;

	if (mc->slot_expr == NULL)
		return;
	for (i = mc->first_slot; i < mc->first_slot + mc->nslots; i++)
	{
		MetricsSlot *ms = &st->slots[i];

		ms->have_backlog = true;
		ms->backlog = 0;
		ms->capped = false;
		if (ms->position < horizon - 1)
			slowest = Min(slowest, ms->position);
		max_slot = Max(max_slot, ms->slot);
	}
	mc->have_backlog = true;
	mc->backlog = 0;
	mc->capped = false;
	/* no slot has a row to read, or none is in the window */
	if (slowest == PG_INT64_MAX || nwindow == 0 ||
		window[nwindow - 1] <= slowest)
		return;

	index_of = palloc(sizeof(int) * (max_slot + 1));
	for (i = 0; i <= max_slot; i++)
		index_of[i] = -1;
	for (i = mc->first_slot; i < mc->first_slot + mc->nslots; i++)
		if (st->slots[i].slot >= 0)
			index_of[st->slots[i].slot] = i;

	/* the window's rows above the slowest slot (the same snapshot) */
	values[0] = Int64GetDatum(window[0]);
	values[1] = Int64GetDatum(horizon);
	values[2] = Int64GetDatum(slowest);
	metrics_query(psprintf("SELECT t.%s, (%s)::pg_catalog.int4 FROM %s t "
						   "WHERE t.%s >= $1 AND t.%s < $2 AND t.%s > $3",
						   column, mc->slot_expr, source, column, column,
						   column),
				  3, argtypes, values);
	n = (int) SPI_processed;
	for (i = 0; i < n; i++)
	{
		bool		isnull;
		bool		slot_isnull;
		int64		seq = DatumGetInt64(metrics_datum(i, 1, &isnull));
		int32		slot = DatumGetInt32(metrics_datum(i, 2, &slot_isnull));

		if (slot_isnull || slot < 0 || slot > max_slot || index_of[slot] < 0)
			continue;
		if (seq > st->slots[index_of[slot]].position)
			st->slots[index_of[slot]].backlog++;
	}
	for (i = mc->first_slot; i < mc->first_slot + mc->nslots; i++)
	{
		MetricsSlot *ms = &st->slots[i];

		ms->capped = nwindow == cap && ms->position + 1 < window[0];
		mc->backlog += ms->backlog;
		mc->capped |= ms->capped;
	}
	pfree(index_of);
}

/*
 * metrics_count_stream
 *		The backlogs of the consumers of stream "ref" (consumers[from..to)),
 *		counted as the table's owner: the stream's window, the newest rows
 *		below "horizon" and above the slowest lagging consumer or slot, at
 *		most "cap" of them, is read once (one backward scan of the stream
 *		column's index, index-only where the pages are all-visible), and
 *		every plain consumer and group counts from it; a group also reads
 *		the slots of the window's rows.  Left unknown if the owner may not
 *		read its own table.
 */
static void
metrics_count_stream(MetricsState *st, StreamRef *ref, int from, int to,
					 int64 horizon, int cap)
{
	int			save_nestlevel;
	Oid			save_userid;
	int			save_sec_context;
	char	   *source;
	const char *column;
	int64		slowest = PG_INT64_MAX;
	int64	   *window = NULL;
	int			nwindow = 0;
	int			i;
	int			j;

	if (from == to || cap == 0)
		return;
	if (pg_class_aclcheck(ref->relid, ref->owner, ACL_SELECT) != ACLCHECK_OK)
		return;
	for (i = from; i < to; i++)
	{
		MetricsConsumer *mc = &st->consumers[i];

		if (mc->slots == 0 && mc->position < horizon - 1)
			slowest = Min(slowest, mc->position);
		for (j = mc->first_slot; mc->slots != 0 && j < mc->first_slot + mc->nslots; j++)
			if (st->slots[j].position < horizon - 1)
				slowest = Min(slowest, st->slots[j].position);
	}
	source = stream_source(ref->relid);
	column = quote_identifier(get_attname(ref->relid, ref->seq_attnum, false));

	stream_run_as(ref->owner, &save_nestlevel, &save_userid, &save_sec_context);

	/*
	 * The window must come from the stream column's index, from the
	 * horizon down, stopping at the cap.  Without statistics (a table
	 * loaded since its last ANALYZE, as a stream table usually is) the
	 * planner takes the range for a few hundred rows and prefers a bitmap
	 * scan of all of them and a sort: the whole backlog.  So no other plan
	 * is allowed.
	 */
	(void) set_config_option("enable_sort", "off", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	(void) set_config_option("enable_bitmapscan", "off", PGC_USERSET,
							 PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	(void) set_config_option("enable_seqscan", "off", PGC_USERSET,
							 PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	/* none has a row to read: no scan */
	if (slowest != PG_INT64_MAX)
		nwindow = metrics_window(source, column, slowest, horizon, cap, &window);
	metrics_count_plain(st, from, to, window, nwindow, cap);
	for (i = from; i < to; i++)
		if (st->consumers[i].slots != 0)
			metrics_count_group(st, &st->consumers[i], source, column,
								horizon, window, nwindow, cap);
	SPI_finish();				/* frees the window */
	stream_run_as_end(save_nestlevel, save_userid, save_sec_context);
}

/*
 * metrics_isolated
 *		Run "step" in a subtransaction: what one stream's figures need runs
 *		as its owner (a group's slot expression, the owner's privileges),
 *		waits for locks at most METRICS_LOCK_WAIT_MS, needs a shared slot,
 *		and may fail: it must not take the series of every other stream
 *		with it.  Returns false if it failed, its error dropped.  A cancel
 *		(statement_timeout, pg_cancel_backend(): a scraper's timeout) is
 *		raised again, but only once the subtransaction is rolled back and
 *		the caller's memory context and resource owner are back, as
 *		run_policy() (retention_policy.c) does: raised before, it left the
 *		subtransaction open under the aborted statement, the session's
 *		next statement failed with 25P02 outside any transaction block and
 *		its ROLLBACK with FATAL, and a PL/pgSQL block that caught it leaked
 *		the subtransaction's snapshots and plans into its transaction.
 */
static bool
metrics_isolated(MetricsStep step, void *arg)
{
	MemoryContext oldcxt = CurrentMemoryContext;
	ResourceOwner oldowner = CurrentResourceOwner;
	volatile bool ok = true;	/* set in PG_CATCH */

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(oldcxt);
	PG_TRY();
	{
		step(arg);
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcxt);
		CurrentResourceOwner = oldowner;
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(oldcxt);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcxt);
		CurrentResourceOwner = oldowner;
		if (edata->sqlerrcode == ERRCODE_QUERY_CANCELED)
			ReThrowError(edata);
		FreeErrorData(edata);
		ok = false;
	}
	PG_END_TRY();
	return ok;
}

/* The arguments of metrics_count_step(). */
typedef struct MetricsCount
{
	MetricsState *st;
	StreamRef  *ref;
	int			from;
	int			to;
	int64		horizon;
	int			cap;
} MetricsCount;

/*
 * metrics_count_step
 *		metrics_count_stream() as a step of metrics_isolated().
 */
static void
metrics_count_step(void *arg)
{
	MetricsCount *mc = (MetricsCount *) arg;

	metrics_count_stream(mc->st, mc->ref, mc->from, mc->to, mc->horizon,
						 mc->cap);
}

/*
 * metrics_count_stream_isolated
 *		metrics_count_stream() in a subtransaction (metrics_isolated): on
 *		failure its consumers' and slots' backlogs are left unknown (NULL).
 */
static void
metrics_count_stream_isolated(MetricsState *st, StreamRef *ref, int from,
							  int to, int64 horizon, int cap)
{
	MetricsCount args;
	int			i;
	int			j;

	args.st = st;
	args.ref = ref;
	args.from = from;
	args.to = to;
	args.horizon = horizon;
	args.cap = cap;
	if (metrics_isolated(metrics_count_step, &args))
		return;
	for (i = from; i < to; i++)
	{
		MetricsConsumer *mc = &st->consumers[i];

		mc->have_backlog = false;
		for (j = mc->first_slot; mc->slots != 0 && j < mc->first_slot + mc->nslots; j++)
			st->slots[j].have_backlog = false;
	}
}

/*
 * metrics_read_stream
 *		A step of metrics_isolated(): the handle, head and horizon of a
 *		stream whose table is locked, as the streams view reads them
 *		(status.c).  A stream no longer in the catalog gets no handle; one
 *		no shared slot is free for neither, and no_slot set.
 */
static void
metrics_read_stream(void *arg)
{
	MetricsRead *rd = (MetricsRead *) arg;
	Snapshot	snapshot;

	rd->ref = stream_lookup_if_slot(rd->relid, &rd->no_slot);
	if (rd->ref == NULL)
		return;
	snapshot = stream_statement_snapshot();
	if (!rd->standby)
	{
		(void) stream_compute_horizon(rd->ref, snapshot, NULL);
		rd->have_status = stream_slot_status(rd->ref, snapshot, &rd->status);
		rd->have_horizon = rd->have_status;
		rd->horizon = rd->status.horizon;
	}
	else
	{
		rd->have_horizon = stream_standby_horizon(rd->ref, snapshot,
												  &rd->horizon) ==
			STANDBY_HORIZON_DONE;
		rd->have_status = stream_slot_status(rd->ref, snapshot, &rd->status);
		if (rd->have_status)
			rd->status.horizon = rd->status.visible_horizon = rd->horizon;
	}
}

/*
 * metrics_stream_name
 *		schema.name of relation "relid", quoted, or NULL if it no longer
 *		exists; read without a lock on it (its table may be locked by
 *		another transaction).
 */
static char *
metrics_stream_name(Oid relid)
{
	char	   *relname = get_rel_name(relid);
	char	   *nspname = relname != NULL ?
		get_namespace_name(get_rel_namespace(relid)) : NULL;

	if (relname == NULL || nspname == NULL)
		return NULL;
	return quote_qualified_identifier(nspname, relname);
}

/*
 * stream_seq_metrics
 *		SQL: metrics(only_kind text DEFAULT NULL, backlog_cap integer
 *		DEFAULT 1000) RETURNS TABLE (...): one row per stream, consumer and
 *		slot of the database ("only_kind": only those of one kind), with
 *		numbers, counts, seconds and 0/1 flags.  Executable by pg_monitor
 *		(and whom its members grant it to); needs no privilege on the
 *		stream tables, and shows nothing of their rows but how many there
 *		are.
 */
Datum
stream_seq_metrics(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	bool		want_streams = true;
	bool		want_consumers = true;
	bool		want_slots = true;
	int			cap;
	MetricsState st = {0};
	TimestampTz now = GetCurrentTransactionStartTimestamp();
	bool		standby = RecoveryInProgress();
	int			c = 0;
	int			s;
	int			save_nestlevel;

	if (!PG_ARGISNULL(0))
	{
		char	   *kind = text_to_cstring(PG_GETARG_TEXT_PP(0));

		want_streams = strcmp(kind, "stream") == 0;
		want_consumers = strcmp(kind, "consumer") == 0;
		want_slots = strcmp(kind, "slot") == 0;
		if (!want_streams && !want_consumers && !want_slots)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("invalid metrics kind \"%s\"", kind),
					 errhint("Use \"stream\", \"consumer\", \"slot\", or NULL for all of them.")));
	}
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("backlog_cap must not be null")));
	cap = PG_GETARG_INT32(1);
	if (cap < 0 || cap > METRICS_MAX_BACKLOG_CAP)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("backlog_cap must be between 0 and %d",
						METRICS_MAX_BACKLOG_CAP)));

	stream_check_preloaded();
	InitMaterializedSRF(fcinfo, 0);
	st.cxt = CurrentMemoryContext;

	/* no lock is waited for longer than METRICS_LOCK_WAIT_MS */
	save_nestlevel = NewGUCNestLevel();
	if (LockTimeout <= 0 || LockTimeout > METRICS_LOCK_WAIT_MS)
		(void) set_config_option("lock_timeout",
								 psprintf("%d", METRICS_LOCK_WAIT_MS),
								 PGC_USERSET, PGC_S_SESSION,
								 GUC_ACTION_SAVE, true, 0, false);

	metrics_read_catalog(&st, want_consumers || want_slots);

	for (s = 0; s < st.nstreams; s++)
	{
		Oid			relid = st.streams[s].relid;
		MetricsRead rd;
		bool		locked;
		bool		have_status;
		bool		have_horizon;
		int64		horizon = 0;
		StreamStatus status;
		char	   *name;
		int			from;
		int			i;
		Datum		values[M_NCOLUMNS];
		bool		nulls[M_NCOLUMNS];

		/* its consumers: consumers[from..c) */
		while (c < st.nconsumers && st.consumers[c].relid < relid)
			c++;
		from = c;
		while (c < st.nconsumers && st.consumers[c].relid == relid)
			c++;

		/*
		 * Locked without waiting, then checked: a stream whose table
		 * another transaction holds in ACCESS EXCLUSIVE mode is shown with
		 * its figures NULL; one dropped or disabled since the catalog was
		 * read is left out.  Its figures are read in a subtransaction: one
		 * that cannot be had (no shared slot free, a lock not granted
		 * within the bound, any error but a cancel) leaves them NULL.
		 */
		locked = ConditionalLockRelationOid(relid, AccessShareLock);
		if (locked && !SearchSysCacheExists1(RELOID, ObjectIdGetDatum(relid)))
		{
			UnlockRelationOid(relid, AccessShareLock);
			continue;
		}
		name = metrics_stream_name(relid);
		if (name == NULL)
		{
			if (locked)
				UnlockRelationOid(relid, AccessShareLock);
			continue;
		}
		memset(&rd, 0, sizeof(rd));
		rd.relid = relid;
		rd.standby = standby;
		if (locked && metrics_isolated(metrics_read_stream, &rd))
		{
			if (rd.ref == NULL && !rd.no_slot)
			{
				UnlockRelationOid(relid, AccessShareLock);
				continue;
			}
		}
		else
			rd.ref = NULL;
		have_status = rd.ref != NULL && rd.have_status;
		have_horizon = rd.ref != NULL && rd.have_horizon;
		if (have_horizon)
			horizon = rd.horizon;
		status = rd.status;

		if (want_streams)
		{
			memset(nulls, true, sizeof(nulls));
			values[M_KIND] = CStringGetTextDatum("stream");
			values[M_STREAM] = ObjectIdGetDatum(relid);
			values[M_STREAM_NAME] = CStringGetTextDatum(name);
			values[M_FIRST] = Int64GetDatum(st.streams[s].first);
			nulls[M_KIND] = nulls[M_STREAM] = nulls[M_STREAM_NAME] =
				nulls[M_FIRST] = false;
			if (have_status)
			{
				int64		head = status.next - 1;

				values[M_HEAD] = Int64GetDatum(Max(head, 0));
				/* not the transactions that numbered early and are idle */
				values[M_COMMITTING] = Int32GetDatum(status.in_commit);
				values[M_OLDEST_COMMIT_SECONDS] = Float8GetDatum(status.in_commit > 0 ?
																 Max(now - status.oldest_commit_since, 0) / 1000000.0 : 0.0);
				values[M_TRACKED] = Int32GetDatum(status.tracked);
				values[M_EVICTED] = Int64GetDatum((int64) status.evictions);
				values[M_ASSIGNED_XACTS] = Int64GetDatum((int64) status.assigned_xacts);
				nulls[M_HEAD] = nulls[M_COMMITTING] =
					nulls[M_OLDEST_COMMIT_SECONDS] = nulls[M_TRACKED] =
					nulls[M_EVICTED] = nulls[M_ASSIGNED_XACTS] = false;
				if (have_horizon)
				{
					values[M_WAITING] = Int64GetDatum(Max(status.next - status.horizon, 0));
					values[M_DURABLE_LAG] = Int64GetDatum(status.visible_horizon -
														  status.horizon);
					nulls[M_WAITING] = nulls[M_DURABLE_LAG] = false;
				}
			}
			if (have_horizon)
			{
				values[M_HORIZON] = Int64GetDatum(horizon);
				nulls[M_HORIZON] = false;
			}
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc,
								 values, nulls);
		}
		if (!want_consumers && !want_slots)
			continue;

		if (have_horizon)
			metrics_count_stream_isolated(&st, rd.ref, from, c, horizon, cap);

		for (i = from; i < c; i++)
		{
			MetricsConsumer *mc = &st.consumers[i];
			int			j;

			if (want_consumers)
			{
				memset(nulls, true, sizeof(nulls));
				values[M_KIND] = CStringGetTextDatum("consumer");
				values[M_STREAM] = ObjectIdGetDatum(relid);
				values[M_STREAM_NAME] = CStringGetTextDatum(name);
				values[M_CONSUMER] = CStringGetTextDatum(mc->name);
				values[M_SLOTS] = Int32GetDatum(mc->slots);
				values[M_PARKED] = Int64GetDatum(mc->parked);
				values[M_DEAD_LETTERS] = Int64GetDatum(mc->dead_letters);
				values[M_RETRIES_DUE] = Int64GetDatum(mc->retries_due);
				values[M_OLDEST_PARKED_SECONDS] = Float8GetDatum(Max(mc->oldest_parked, 0));
				values[M_OLDEST_DUE_SECONDS] = Float8GetDatum(Max(mc->oldest_due, 0));
				values[M_RESIZE_PENDING] = Int32GetDatum(mc->resize_pending);
				values[M_HELD] = Int64GetDatum(mc->held);
				nulls[M_HELD] = false;
				nulls[M_KIND] = nulls[M_STREAM] = nulls[M_STREAM_NAME] =
					nulls[M_CONSUMER] = nulls[M_SLOTS] = nulls[M_PARKED] =
					nulls[M_DEAD_LETTERS] = nulls[M_RETRIES_DUE] =
					nulls[M_OLDEST_PARKED_SECONDS] =
					nulls[M_OLDEST_DUE_SECONDS] = nulls[M_RESIZE_PENDING] = false;
				if (mc->have_position)
				{
					values[M_POSITION] = Int64GetDatum(mc->position);
					values[M_SINCE_ADVANCE_SECONDS] = Float8GetDatum(Max(mc->since_advance, 0));
					nulls[M_POSITION] = nulls[M_SINCE_ADVANCE_SECONDS] = false;
					if (have_horizon)
					{
						values[M_LAG] = Int64GetDatum(Max(horizon - 1 - mc->position, 0));
						nulls[M_LAG] = false;
					}
				}
				if (mc->have_backlog)
				{
					values[M_BACKLOG_ROWS] = Int64GetDatum(mc->backlog);
					values[M_BACKLOG_CAPPED] = Int32GetDatum(mc->capped ? 1 : 0);
					nulls[M_BACKLOG_ROWS] = nulls[M_BACKLOG_CAPPED] = false;
				}
				tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc,
									 values, nulls);
			}
			if (!want_slots)
				continue;
			for (j = mc->first_slot; j < mc->first_slot + mc->nslots; j++)
			{
				MetricsSlot *ms = &st.slots[j];

				memset(nulls, true, sizeof(nulls));
				values[M_KIND] = CStringGetTextDatum("slot");
				values[M_STREAM] = ObjectIdGetDatum(relid);
				values[M_STREAM_NAME] = CStringGetTextDatum(name);
				values[M_CONSUMER] = CStringGetTextDatum(mc->name);
				values[M_SLOT] = Int32GetDatum(ms->slot);
				values[M_POSITION] = Int64GetDatum(ms->position);
				values[M_SINCE_ADVANCE_SECONDS] = Float8GetDatum(Max(ms->since_advance, 0));
				values[M_LEASED] = Int32GetDatum(ms->leased);
				nulls[M_KIND] = nulls[M_STREAM] = nulls[M_STREAM_NAME] =
					nulls[M_CONSUMER] = nulls[M_SLOT] = nulls[M_POSITION] =
					nulls[M_SINCE_ADVANCE_SECONDS] = nulls[M_LEASED] = false;
				if (have_horizon)
				{
					values[M_LAG] = Int64GetDatum(Max(horizon - 1 - ms->position, 0));
					nulls[M_LAG] = false;
				}
				if (ms->have_backlog)
				{
					values[M_BACKLOG_ROWS] = Int64GetDatum(ms->backlog);
					values[M_BACKLOG_CAPPED] = Int32GetDatum(ms->capped ? 1 : 0);
					nulls[M_BACKLOG_ROWS] = nulls[M_BACKLOG_CAPPED] = false;
				}
				tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc,
									 values, nulls);
			}
		}
	}
	AtEOXact_GUC(true, save_nestlevel);
	return (Datum) 0;
}
