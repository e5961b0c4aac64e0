/*-------------------------------------------------------------------------
 *
 * xactstate.c
 *	  The current transaction's state on each stream: the numbers it took
 *	  and its entry in the stream's shared list, which the commit and abort
 *	  callbacks finish; the numbers of the session's last commit on each
 *	  stream (last_numbers()); the streams it disabled or dropped, whose
 *	  shared slots are freed at commit.
 *
 * Whether a disabled or dropped stream's slot is freed is decided at
 * pre-commit from the catalog, which rolls back with a savepoint.  The
 * commit and abort callbacks only record what was decided: they must not
 * fail.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "commands/async.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"

#include "stream_seq.h"
#include "stats.h"
#include "xactstate.h"
#include "shmem.h"
#include "catalog.h"
#include "counter.h"
#include "horizon.h"

PG_FUNCTION_INFO_V1(stream_seq_last_numbers);

/*
 * What the current transaction does on one stream.
 */
typedef struct XactStream
{
	Oid			relid;			/* hash key */
	StreamRef  *ref;
	int			slotno;			/* where the entry lives, for callbacks */
	uint32		generation;
	bool		has_entry;		/* our entry is in the shared list */
	bool		early;			/* and it was made before commit began
								 * (enable()) */
	int64		numbered;		/* rows numbered */
	int64		first_number;	/* lowest and highest number written (0: */
	int64		last_number;	/* none yet; numbers start at 1) */
} XactStream;

/*
 * The numbers of the last transaction of this session that committed rows
 * to a stream, for last_numbers(): one entry per stream, in
 * TopMemoryContext.  The entry is made (and "pending" set) before commit,
 * where an allocation may fail; the commit callback, which must not fail,
 * only moves "pending" into place, and an abort drops it.
 */
typedef struct SessionNumbers
{
	Oid			relid;			/* hash key: the stream table */
	bool		committed;		/* first and last are set */
	int64		first;
	int64		last;
	bool		pending;		/* the committing transaction's numbers */
	int64		pending_first;
	int64		pending_last;
} SessionNumbers;

/*
 * Per-transaction state, one entry a stream (a transaction writes few
 * streams: a list searched in order costs less than a hash table made for
 * each transaction), in TopTransactionContext; none when idle.  Entries
 * are allocated one by one: a pointer to one stays valid as the list
 * grows.
 */
static XactStream **xact_streams = NULL;
static int	nxact_streams = 0;
static int	xact_streams_size = 0;

/*
 * Streams disabled or dropped by this transaction (or one of its
 * subtransactions, which may have rolled back), and those of them whose
 * catalog row is gone at pre-commit: slots to free at commit.
 */
static List *released_streams = NIL;
static List *slots_to_free = NIL;

static HTAB *session_numbers = NULL;
static bool session_numbers_pending = false;	/* an entry has "pending" */

/*
 * The entries made pending by the transaction, as long as they fit here
 * (else every entry is looked at), so that settling them reads no hash
 * table.
 */
#define MAX_PENDING_KEPT 8
static SessionNumbers *pending_entries[MAX_PENDING_KEPT];
static int	npending_entries = 0;	/* MAX_PENDING_KEPT + 1: more */

/*
 * xact_stream_get
 *		The transaction's state for a stream, created on first use.
 */
static XactStream *
xact_stream_get(StreamRef *ref)
{
	XactStream *xs;
	int			i;

	for (i = 0; i < nxact_streams; i++)
	{
		if (xact_streams[i]->relid == ref->relid)
		{
			xs = xact_streams[i];
			xs->ref = ref;
			return xs;
		}
	}
	if (nxact_streams == xact_streams_size)
	{
		xact_streams_size = Max(4, xact_streams_size * 2);
		if (xact_streams == NULL)
			xact_streams = MemoryContextAlloc(TopTransactionContext,
											  xact_streams_size * sizeof(XactStream *));
		else
			xact_streams = repalloc(xact_streams,
									xact_streams_size * sizeof(XactStream *));
	}
	xs = MemoryContextAllocZero(TopTransactionContext, sizeof(XactStream));
	xs->relid = ref->relid;
	xs->ref = ref;
	xact_streams[nxact_streams++] = xs;
	return xs;
}

/*
 * stream_xact_take_numbers
 *		Reserve "count" consecutive numbers of the stream for the current
 *		transaction, the first in *lo and the reservation's time in
 *		*numbered_at; the first reservation appends the transaction's entry
 *		to the stream's list in the same step.  With "logger" (see
 *		StreamReservationLogger), only try, without catalog work: false if
 *		stream_prepare_numbers must run first.
 */
bool
stream_xact_take_numbers(StreamRef *ref, int64 count, int64 *lo,
						 TimestampTz *numbered_at,
						 StreamReservationLogger logger, void *logger_arg)
{
	XactStream *xs = xact_stream_get(ref);

	stream_reserving_early(false);
	if (logger != NULL)
	{
		if (!stream_try_take_numbers(ref, count, xs->has_entry, lo,
									 numbered_at, logger, logger_arg))
			return false;
	}
	else
		stream_take_numbers(ref, count, xs->has_entry, lo, numbered_at);
	if (!xs->has_entry)
		xs->early = false;
	xs->has_entry = true;
	xs->slotno = ref->slotno;
	xs->generation = ref->generation;
	return true;
}

/*
 * stream_xact_numbered
 *		Note that "count" rows of the stream were numbered, from "first" to
 *		"last" (for last_numbers() and the statistics).
 */
void
stream_xact_numbered(StreamRef *ref, int64 first, int64 last, int64 count)
{
	XactStream *xs = xact_stream_get(ref);

	if (count == 0)
		return;
	if (xs->first_number == 0 || first < xs->first_number)
		xs->first_number = first;
	if (last > xs->last_number)
		xs->last_number = last;
	xs->numbered += count;
}

/*
 * stream_xact_give_back
 *		Give back [from, to), the unused tail of the transaction's last
 *		reservation on the stream, unless the transaction computed a
 *		horizon (which may rest on it).
 */
void
stream_xact_give_back(StreamRef *ref, int64 from, int64 to)
{
	if (from < to && !stream_xact_computed_horizon())
		stream_shrink(ref, from, to);
}

/*
 * stream_xact_holds_numbers
 *		Whether the transaction holds an entry on any stream.
 */
bool
stream_xact_holds_numbers(void)
{
	int			i;

	for (i = 0; i < nxact_streams; i++)
	{
		if (xact_streams[i]->has_entry)
			return true;
	}
	return false;
}

/*
 * remember_numbers
 *		Before commit: note the numbers the transaction wrote on a stream
 *		as pending in the session's entry for it, made here if missing.
 */
static void
remember_numbers(XactStream *xs)
{
	SessionNumbers *entry;
	bool		found;

	if (session_numbers == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(Oid);
		ctl.entrysize = sizeof(SessionNumbers);
		ctl.hcxt = TopMemoryContext;
		session_numbers = hash_create("stream_seq last numbers", 8, &ctl,
									  HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	entry = hash_search(session_numbers, &xs->relid, HASH_ENTER, &found);
	if (!found)
	{
		entry->committed = false;
		entry->pending = false;
	}
	if (!entry->pending && npending_entries <= MAX_PENDING_KEPT)
	{
		if (npending_entries < MAX_PENDING_KEPT)
			pending_entries[npending_entries] = entry;
		npending_entries++;
	}
	entry->pending = true;
	entry->pending_first = xs->first_number;
	entry->pending_last = xs->last_number;
	session_numbers_pending = true;
}

/*
 * settle_entry
 *		At commit the pending numbers of one entry become its last ones; at
 *		abort they are dropped.
 */
static void
settle_entry(SessionNumbers *entry, bool committed)
{
	if (entry->pending && committed)
	{
		entry->committed = true;
		entry->first = entry->pending_first;
		entry->last = entry->pending_last;
	}
	entry->pending = false;
}

/*
 * settle_numbers
 *		At commit, the pending numbers become the session's last ones; at
 *		abort (or PREPARE) they are dropped.  Called from commit and abort
 *		callbacks: must not fail (a sequential scan of the hash table
 *		allocates nothing).
 */
static void
settle_numbers(bool committed)
{
	HASH_SEQ_STATUS status;
	SessionNumbers *entry;

	if (!session_numbers_pending)
		return;
	if (npending_entries <= MAX_PENDING_KEPT)
	{
		int			i;

		for (i = 0; i < npending_entries; i++)
			settle_entry(pending_entries[i], committed);
	}
	else
	{
		hash_seq_init(&status, session_numbers);
		while ((entry = hash_seq_search(&status)) != NULL)
			settle_entry(entry, committed);
	}
	npending_entries = 0;
	session_numbers_pending = false;
}

/*
 * stream_seq_last_numbers
 *		SQL: last_numbers(stream regclass, OUT first bigint, OUT last
 *		bigint): the lowest and the highest number of the last transaction
 *		of this session that committed rows to the stream; NULL, NULL when
 *		none did.  Every number that transaction's rows got lies between
 *		them.  Backend-local: a pooler that runs the next transaction on
 *		another backend gets that backend's answer.  Requires SELECT on the
 *		table.
 */
Datum
stream_seq_last_numbers(PG_FUNCTION_ARGS)
{
	Oid			relid = PG_GETARG_OID(0);
	TupleDesc	tupdesc;
	Datum		values[2] = {0, 0};
	bool		nulls[2] = {true, true};
	SessionNumbers *entry = NULL;
	StreamRef  *ref;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("function returning record called in context that cannot accept type record")));
	ref = stream_lookup(relid, false);
	stream_check_select(ref->relid);
	if (session_numbers != NULL)
		entry = hash_search(session_numbers, &ref->relid, HASH_FIND, NULL);
	if (entry != NULL && entry->committed)
	{
		values[0] = Int64GetDatum(entry->first);
		values[1] = Int64GetDatum(entry->last);
		nulls[0] = nulls[1] = false;
	}
	tupdesc = BlessTupleDesc(tupdesc);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

/*
 * notify_stream
 *		Queue NOTIFY stream_seq, '<schema>.<table>', delivered when this
 *		transaction commits (the horizon may have moved).
 */
static void
notify_stream(Oid relid)
{
	char	   *relname = get_rel_name(relid);

	if (relname == NULL)
		return;
	Async_Notify("stream_seq",
				 quote_qualified_identifier(get_namespace_name(get_rel_namespace(relid)),
											relname));
}

/*
 * decide_slots_to_free
 *		At pre-commit, which of the streams this transaction disabled or
 *		dropped are really gone: those whose catalog row this transaction
 *		has deleted, and not restored by a rollback to a savepoint or by
 *		enabling the table again.  Their slots are freed at commit.
 */
static void
decide_slots_to_free(void)
{
	ListCell   *lc;

	foreach(lc, released_streams)
	{
		Oid			relid = lfirst_oid(lc);

		if (!list_member_oid(slots_to_free, relid) &&
			!stream_catalog_has(relid))
		{
			MemoryContext oldcxt = MemoryContextSwitchTo(TopTransactionContext);

			slots_to_free = lappend_oid(slots_to_free, relid);
			MemoryContextSwitchTo(oldcxt);
		}
	}
}

/*
 * stream_xact_mark_committing
 *		The transaction begins to commit: an entry it made before (by
 *		enable()) is shown as committing from now on.  Called for a COMMIT
 *		statement and at pre-commit.
 */
void
stream_xact_mark_committing(void)
{
	int			i;

	for (i = 0; i < nxact_streams; i++)
	{
		XactStream *xs = xact_streams[i];

		if (xs->has_entry && xs->early)
		{
			stream_entry_committing(xs->slotno, xs->generation);
			xs->early = false;
		}
	}
}

/*
 * stream_xact_pre_commit
 *		After the commit-time write: decide which slots to free, queue the
 *		notifications and note the numbers for last_numbers().
 */
void
stream_xact_pre_commit(void)
{
	int			i;

	stream_xact_mark_committing();
	decide_slots_to_free();
	for (i = 0; i < nxact_streams; i++)
	{
		XactStream *xs = xact_streams[i];

		if (xs->has_entry && stream_seq_notify)
			notify_stream(xs->relid);
		if (xs->numbered > 0)
			remember_numbers(xs);
	}
}

/*
 * stream_xact_check_prepare
 *		Before PREPARE: refuse, as a prepared transaction could commit after
 *		a restart, in another backend, with no callback to record it.
 */
void
stream_xact_check_prepare(void)
{
	int			i;

	for (i = 0; i < nxact_streams; i++)
	{
		XactStream *xs = xact_streams[i];

		if (xs->has_entry)
		{
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("cannot PREPARE a transaction that has written to stream table \"%s\"",
							stream_rel_name(xs->relid)),
					 errdetail("Stream numbers are assigned at commit, which a prepared transaction would do later without stream_seq.")));
		}
	}
}

/*
 * stream_xact_finish
 *		Record the transaction's outcome in every stream it holds numbers
 *		on (and, committed, in the cumulative statistics), free the slots
 *		of the streams it dropped, and forget its state.  Called from
 *		commit and abort callbacks: must not fail.
 */
void
stream_xact_finish(bool committed)
{
	ListCell   *lc;

	if (committed)
	{
		foreach(lc, slots_to_free)
			stream_slot_release(MyDatabaseId, lfirst_oid(lc));
	}
	if (nxact_streams > 0)
	{
		int64		numbered = 0;
		int			i;

		for (i = 0; i < nxact_streams; i++)
		{
			XactStream *xs = xact_streams[i];

			if (xs->has_entry)
			{
				stream_finish_entry(xs->slotno, xs->generation, committed,
									committed ? XactLastCommitEnd : InvalidXLogRecPtr);
				numbered += xs->numbered;
			}
		}
		if (committed && numbered > 0)
			stream_stats_count_commit(numbered);
	}
	xact_streams = NULL;
	nxact_streams = 0;
	xact_streams_size = 0;
	released_streams = NIL;
	slots_to_free = NIL;
	settle_numbers(committed);
}

/*
 * stream_xact_has_entry
 *		Make the current transaction's state say that it holds an entry on
 *		the stream, added by stream_add_entry (enable()), so that its
 *		outcome is recorded at commit or abort.
 */
void
stream_xact_has_entry(StreamRef *ref)
{
	XactStream *xs = xact_stream_get(ref);

	xs->has_entry = true;
	xs->early = true;			/* held from enable() to the end */
	xs->slotno = ref->slotno;
	xs->generation = ref->generation;
}

/*
 * stream_release_at_commit
 *		The current transaction disabled stream "relid" or dropped its
 *		table: free the shared slot if, at commit, its catalog row is gone
 *		(see decide_slots_to_free).
 */
void
stream_release_at_commit(Oid relid)
{
	MemoryContext oldcxt = MemoryContextSwitchTo(TopTransactionContext);

	released_streams = lappend_oid(released_streams, relid);
	MemoryContextSwitchTo(oldcxt);
}
