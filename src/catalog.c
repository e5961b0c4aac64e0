/*-------------------------------------------------------------------------
 *
 * catalog.c
 *	  The stream catalog (table stream_seq.stream), the backend's cache of
 *	  it, and the durable record of each stream's head.
 *
 * The head of a stream is recorded in a sequence owned by the stream's
 * column (created by enable()), whose increment is the number of stream
 * numbers recorded at a time.  A backend hands out numbers only below the
 * end of a block it obtained from that sequence (invariant 2 of shmem.c),
 * so the recorded head is WAL-logged, survives crashes, follows the
 * primary onto streaming standbys and is restored by pg_dump, all by
 * PostgreSQL's own machinery, and is written once per block, not per
 * number.  After a restart the counter starts at the table's maximum + 1;
 * the first reservation then jumps to a fresh block above everything the
 * sequence ever recorded, which covers numbers whose rows were deleted.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/xlog.h"
#include "access/table.h"
#include "catalog/namespace.h"
#include "catalog/pg_sequence.h"
#include "catalog/pg_type.h"
#include "commands/sequence.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

#include "stream_seq.h"

/* Column numbers of stream_seq.stream. */
#define Anum_stream_relid		1
#define Anum_stream_seq_column	2
#define Anum_stream_head_seq	3

static HTAB *stream_cache = NULL;

/*
 * How many blocks a crash can leave the head sequence ahead of the numbers
 * handed out: the block in use plus the 32 values (SEQ_LOG_VALS in
 * sequence.c) that PostgreSQL WAL-logs ahead for every sequence.
 */
#define HEAD_MARGIN_BLOCKS 33

/*
 * invalidate_stream_cache
 *		Relcache invalidation callback: forget what we know of the table (or
 *		of all tables).  Entries are marked, not removed, so that pointers
 *		held by the current transaction stay valid.
 */
static void
invalidate_stream_cache(Datum arg, Oid relid)
{
	HASH_SEQ_STATUS status;
	StreamRef  *ref;

	if (stream_cache == NULL)
		return;
	if (OidIsValid(relid))
	{
		ref = hash_search(stream_cache, &relid, HASH_FIND, NULL);
		if (ref != NULL)
			ref->valid = false;
		return;
	}
	hash_seq_init(&status, stream_cache);
	while ((ref = hash_seq_search(&status)) != NULL)
		ref->valid = false;
}

/*
 * stream_catalog_init
 *		Set up the backend's cache (called from _PG_init).
 */
void
stream_catalog_init(void)
{
	HASHCTL		ctl;

	ctl.keysize = sizeof(Oid);
	ctl.entrysize = sizeof(StreamRef);
	ctl.hcxt = TopMemoryContext;
	stream_cache = hash_create("stream_seq streams", 16, &ctl,
							   HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	CacheRegisterRelcacheCallback(invalidate_stream_cache, (Datum) 0);
}

/*
 * stream_catalog_relid
 *		OID of the table stream_seq.stream.
 */
Oid
stream_catalog_relid(void)
{
	Oid			nsp = get_namespace_oid("stream_seq", false);
	Oid			relid = get_relname_relid("stream", nsp);

	if (!OidIsValid(relid))
		elog(ERROR, "stream_seq catalog table is missing");
	return relid;
}

/*
 * load_stream
 *		Fill "ref" from the catalog row of its table; false if there is none.
 *		Reads with a fresh catalog snapshot, not the caller's: a transaction
 *		whose snapshot predates enable() still writes through the triggers
 *		enable() created.
 */
static bool
load_stream(StreamRef *ref)
{
	Relation	catalog;
	SysScanDesc scan;
	ScanKeyData key;
	HeapTuple	tuple;
	bool		found = false;

	catalog = table_open(stream_catalog_relid(), AccessShareLock);
	ScanKeyInit(&key, Anum_stream_relid, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(ref->relid));
	scan = systable_beginscan(catalog, InvalidOid, false, NULL, 1, &key);
	tuple = systable_getnext(scan);
	if (HeapTupleIsValid(tuple))
	{
		TupleDesc	desc = RelationGetDescr(catalog);
		bool		isnull;
		Name		column;
		HeapTuple	seqtuple;
		HeapTuple	reltuple;

		column = DatumGetName(heap_getattr(tuple, Anum_stream_seq_column,
										   desc, &isnull));
		ref->head_seq = DatumGetObjectId(heap_getattr(tuple,
													  Anum_stream_head_seq,
													  desc, &isnull));
		ref->seq_attnum = get_attnum(ref->relid, NameStr(*column));
		if (ref->seq_attnum == InvalidAttrNumber ||
			get_atttype(ref->relid, ref->seq_attnum) != INT8OID)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("stream column \"%s\" of table \"%s\" is missing or not of type bigint",
							NameStr(*column), get_rel_name(ref->relid)),
					 errhint("Disable the stream with stream_seq.disable() and enable it again.")));

		seqtuple = SearchSysCache1(SEQRELID, ObjectIdGetDatum(ref->head_seq));
		if (!HeapTupleIsValid(seqtuple))
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("head sequence of stream table \"%s\" is missing",
							get_rel_name(ref->relid)),
					 errhint("Disable the stream with stream_seq.disable() and enable it again.")));
		ref->head_interval = ((Form_pg_sequence) GETSTRUCT(seqtuple))->seqincrement;
		ReleaseSysCache(seqtuple);

		reltuple = SearchSysCache1(RELOID, ObjectIdGetDatum(ref->relid));
		if (!HeapTupleIsValid(reltuple))
			elog(ERROR, "cache lookup failed for relation %u", ref->relid);
		ref->owner = ((Form_pg_class) GETSTRUCT(reltuple))->relowner;
		ReleaseSysCache(reltuple);
		found = true;
	}
	systable_endscan(scan);
	table_close(catalog, AccessShareLock);
	return found;
}

/*
 * stream_lookup
 *		The backend's handle on stream "relid", loaded from the catalog and
 *		attached to its shared slot if not cached.  A table that is not a
 *		stream gets NULL if "missing_ok", else an error.
 */
StreamRef *
stream_lookup(Oid relid, bool missing_ok)
{
	StreamRef  *ref;
	bool		found;

	stream_check_preloaded();

	ref = hash_search(stream_cache, &relid, HASH_ENTER, &found);
	if (!found)
		ref->valid = false;
	if (ref->valid)
		return ref;

	if (!load_stream(ref))
	{
		char	   *relname = get_rel_name(relid);

		if (missing_ok)
			return NULL;
		if (relname == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_TABLE),
					 errmsg("relation with OID %u does not exist", relid)));
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("table \"%s\" is not a stream table", relname),
				 errhint("Use stream_seq.enable() to make it one.")));
	}
	stream_slot_attach(ref);
	ref->valid = true;
	return ref;
}

/*
 * Saved state of the caller while an internal operation runs as another
 * role (see begin_internal).
 */
typedef struct InternalContext
{
	Oid			save_userid;
	int			save_sec_context;
	int			save_nestlevel;
} InternalContext;

/*
 * begin_internal
 *		Run what follows as "role", with search_path pinned to pg_catalog:
 *		internal queries must resolve operators and functions the same way
 *		whatever the caller's search_path holds, since they may run as the
 *		extension's owner.  Used to read a stream as its table's owner (a
 *		role allowed to insert into a stream need not be allowed to read it
 *		or use its head sequence) and to write the extension's tables.
 */
static void
begin_internal(Oid role, InternalContext *cxt)
{
	GetUserIdAndSecContext(&cxt->save_userid, &cxt->save_sec_context);
	SetUserIdAndSecContext(role,
						   cxt->save_sec_context | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
	cxt->save_nestlevel = NewGUCNestLevel();
	(void) set_config_option("search_path", "pg_catalog, pg_temp",
							 PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
}

/*
 * end_internal
 *		Back to the caller's role and settings.
 */
static void
end_internal(InternalContext *cxt)
{
	AtEOXact_GUC(false, cxt->save_nestlevel);
	SetUserIdAndSecContext(cxt->save_userid, cxt->save_sec_context);
}

/*
 * read_stream_state
 *		What the table and the catalog say after a start, read with the
 *		latest snapshot: the highest number in the table (PG_INT64_MIN if
 *		none, found through the unique index), the end of the numbers the
 *		head sequence records as handed out, and where trimming left the
 *		stream's start.
 */
static void
read_stream_state(StreamRef *ref, int64 *max_number, int64 *recorded_end,
				  int64 *first)
{
	InternalContext cxt;
	char	   *query;
	SPIPlanPtr	plan;
	HeapTuple	row;
	TupleDesc	desc;
	bool		isnull;
	Datum		value;
	Oid			argtypes[1] = {OIDOID};
	Datum		args[1];

	if (get_rel_name(ref->relid) == NULL || get_rel_name(ref->head_seq) == NULL ||
		get_attname(ref->relid, ref->seq_attnum, true) == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("stream table with OID %u was disabled or dropped while in use",
						ref->relid)));

	begin_internal(ref->owner, &cxt);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	query = psprintf("SELECT (SELECT max(%s) FROM %s), "
					 "CASE WHEN h.is_called THEN h.last_value + %lld ELSE h.last_value END, "
					 "(SELECT s.trimmed_before FROM stream_seq.stream s WHERE s.relid = $1) "
					 "FROM %s h",
					 quote_identifier(get_attname(ref->relid, ref->seq_attnum,
												  false)),
					 quote_qualified_identifier(get_namespace_name(get_rel_namespace(ref->relid)),
												get_rel_name(ref->relid)),
					 (long long) ref->head_interval,
					 quote_qualified_identifier(get_namespace_name(get_rel_namespace(ref->head_seq)),
												get_rel_name(ref->head_seq)));
	plan = SPI_prepare(query, 1, argtypes);
	if (plan == NULL)
		elog(ERROR, "SPI_prepare failed for \"%s\"", query);
	args[0] = ObjectIdGetDatum(ref->relid);
	if (SPI_execute_snapshot(plan, args, NULL, GetLatestSnapshot(),
							 InvalidSnapshot, true, false, 1) != SPI_OK_SELECT ||
		SPI_processed != 1)
		elog(ERROR, "SPI_execute_snapshot failed for \"%s\"", query);
	row = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;
	value = SPI_getbinval(row, desc, 1, &isnull);
	*max_number = isnull ? PG_INT64_MIN : DatumGetInt64(value);
	value = SPI_getbinval(row, desc, 2, &isnull);
	*recorded_end = isnull ? PG_INT64_MIN : DatumGetInt64(value);
	value = SPI_getbinval(row, desc, 3, &isnull);
	*first = isnull ? 1 : DatumGetInt64(value);
	SPI_finish();
	end_internal(&cxt);
}

/*
 * stream_initialize_counter
 *		Start the counter of a stream after a server start (or enable()):
 *		next = the table's maximum + 1 (or the point the stream was trimmed
 *		or truncated to, if higher), with no recorded block yet, so the
 *		first reservation fetches a block from the head sequence and jumps
 *		above every number recorded before.  Until then, horizons are
 *		computed from the table's maximum, which is safe because no number
 *		has been handed out since the start.
 *
 *		The recorded head is verified against the table.  One behind the
 *		table is reported here and moved forward by the first refill.  One
 *		ahead of the table by more than a crash can explain is reported
 *		too, in the server log only, and kept: rows above the table's
 *		maximum may have been deleted, transactions that failed after taking
 *		numbers leave them unused, and moving the head back could hand
 *		numbers out again.  A crash alone can leave it HEAD_MARGIN_BLOCKS
 *		blocks ahead: the block in use, and the values PostgreSQL logs ahead
 *		for every sequence.
 *
 *		During recovery the value is only computed, not kept: a standby
 *		replays new rows and a new head without this backend knowing, so a
 *		counter set now would be stale after promotion.
 */
int64
stream_initialize_counter(StreamRef *ref)
{
	int64		max_number;
	int64		recorded_end;
	int64		first;
	int64		start;
	int64		explained;
	StreamSlot *slot;

	read_stream_state(ref, &max_number, &recorded_end, &first);
	start = (max_number == PG_INT64_MIN) ? 1 : max_number + 1;
	explained = Max(start, first);
	/* numbers below the trim point were handed out, even if none remain */
	start = explained;

	if (recorded_end < start)
		ereport(WARNING,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("recorded head of stream table \"%s\" is behind its rows",
						get_rel_name(ref->relid)),
				 errdetail("Head sequence \"%s\" records numbers below " INT64_FORMAT " but numbers below " INT64_FORMAT " were handed out.",
						   get_rel_name(ref->head_seq), recorded_end,
						   start),
				 errhint("The head is rebuilt from the table before the next number is handed out.")));
	else if (recorded_end > explained + HEAD_MARGIN_BLOCKS * ref->head_interval)
		ereport(LOG,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("recorded head of stream table \"%s\" is ahead of its rows",
						get_rel_name(ref->relid)),
				 errdetail("Head sequence \"%s\" records numbers below " INT64_FORMAT ", more than %d blocks of " INT64_FORMAT " above the stream's rows, which end below " INT64_FORMAT ".",
						   get_rel_name(ref->head_seq), recorded_end,
						   HEAD_MARGIN_BLOCKS, ref->head_interval, explained),
				 errhint("New numbers continue above the recorded head: rows above the table's highest number may have been deleted, and their numbers are never handed out again.")));

	if (RecoveryInProgress())
		return start;

	slot = stream_slot_lock(ref, LW_EXCLUSIVE);
	if (!slot->initialized)
	{
		slot->next = start;
		slot->block_end = start;
		slot->initialized = true;
	}
	start = slot->next;
	LWLockRelease(slot->lock);
	return start;
}

/*
 * stream_slot_lock_started
 *		Lock the stream's slot with its counter started, starting it first
 *		if need be.  Not during recovery, where the counter is never kept.
 */
StreamSlot *
stream_slot_lock_started(StreamRef *ref, LWLockMode mode)
{
	Assert(!RecoveryInProgress());
	for (;;)
	{
		StreamSlot *slot = stream_slot_lock(ref, mode);

		if (slot->initialized)
			return slot;
		LWLockRelease(slot->lock);
		(void) stream_initialize_counter(ref);
	}
}

/*
 * stream_refill_block
 *		Record a new block of numbers in the head sequence and make it
 *		available.  Refills of one stream are serialized by a lock on the
 *		sequence that conflicts only with itself, so blocks are installed in
 *		the order the sequence handed them out.  A sequence found behind the
 *		counter (set back by hand) is moved forward first; it never moves
 *		back.
 */
void
stream_refill_block(StreamRef *ref)
{
	StreamSlot *slot;
	int64		next;
	int64		block;
	InternalContext cxt;

	LockRelationOid(ref->head_seq, ShareUpdateExclusiveLock);

	slot = stream_slot_lock(ref, LW_SHARED);
	next = slot->next;
	if (slot->next < slot->block_end)
	{
		/* another backend refilled while we waited */
		LWLockRelease(slot->lock);
		UnlockRelationOid(ref->head_seq, ShareUpdateExclusiveLock);
		return;
	}
	LWLockRelease(slot->lock);

	begin_internal(ref->owner, &cxt);
	block = nextval_internal(ref->head_seq, false);
	if (block + ref->head_interval <= next)
	{
		ereport(LOG,
				(errmsg("moving recorded head of stream table \"%s\" forward to " INT64_FORMAT,
						get_rel_name(ref->relid), next),
				 errdetail("Head sequence \"%s\" gave block " INT64_FORMAT ", below numbers already in use.",
						   get_rel_name(ref->head_seq), block)));
		DirectFunctionCall3(setval3_oid, ObjectIdGetDatum(ref->head_seq),
							Int64GetDatum(next), BoolGetDatum(false));
		block = nextval_internal(ref->head_seq, false);
	}
	end_internal(&cxt);

	slot = stream_slot_lock(ref, LW_EXCLUSIVE);
	if (block + ref->head_interval > slot->block_end)
	{
		slot->block_end = block + ref->head_interval;
		if (block > slot->next)
			slot->next = block;
	}
	LWLockRelease(slot->lock);

	UnlockRelationOid(ref->head_seq, ShareUpdateExclusiveLock);
}

/*
 * stream_catalog_exec
 *		Run one statement against the extension's tables as their owner
 *		(see begin_internal): ordinary roles may not write them, and the SQL
 *		entry points that do run as the caller, having checked the caller's
 *		privileges first.
 *		Returns the number of rows processed; if "row" is given, the first
 *		"ncols" columns of the first row (all int8) go there, and *found
 *		says whether there was a row.
 */
uint64
stream_catalog_exec(const char *sql, int nargs, Oid *argtypes, Datum *values,
					int64 *row, int ncols, bool *found)
{
	InternalContext cxt;
	HeapTuple	reltuple;
	Oid			owner;
	uint64		processed;

	reltuple = SearchSysCache1(RELOID, ObjectIdGetDatum(stream_catalog_relid()));
	if (!HeapTupleIsValid(reltuple))
		elog(ERROR, "cache lookup failed for stream_seq catalog");
	owner = ((Form_pg_class) GETSTRUCT(reltuple))->relowner;
	ReleaseSysCache(reltuple);

	begin_internal(owner, &cxt);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SPI_execute_with_args(sql, nargs, argtypes, values, NULL, false, 0) < 0)
		elog(ERROR, "SPI_execute_with_args failed for \"%s\"", sql);
	processed = SPI_processed;
	if (found != NULL)
		*found = false;
	if (row != NULL && SPI_tuptable != NULL && SPI_processed > 0)
	{
		int			i;

		for (i = 0; i < ncols; i++)
		{
			bool		isnull;
			Datum		value = SPI_getbinval(SPI_tuptable->vals[0],
											  SPI_tuptable->tupdesc, i + 1,
											  &isnull);

			row[i] = isnull ? 0 : DatumGetInt64(value);
		}
		if (found != NULL)
			*found = true;
	}
	SPI_finish();
	end_internal(&cxt);
	return processed;
}

/*
 * stream_catalog_insert
 *		Add the catalog row of a new stream.
 */
void
stream_catalog_insert(Oid relid, Name column, Oid head_seq)
{
	Oid			argtypes[3] = {REGCLASSOID, NAMEOID, REGCLASSOID};
	Datum		values[3];

	values[0] = ObjectIdGetDatum(relid);
	values[1] = NameGetDatum(column);
	values[2] = ObjectIdGetDatum(head_seq);
	stream_catalog_exec("INSERT INTO stream_seq.stream (relid, seq_column, head_seq) "
						"VALUES ($1, $2, $3)", 3, argtypes, values, NULL, 0, NULL);
}

/*
 * stream_catalog_delete
 *		Remove the catalog row of a stream.
 */
void
stream_catalog_delete(Oid relid)
{
	Oid			argtypes[1] = {REGCLASSOID};
	Datum		values[1];

	values[0] = ObjectIdGetDatum(relid);
	stream_catalog_exec("DELETE FROM stream_seq.stream WHERE relid = $1",
						1, argtypes, values, NULL, 0, NULL);
}

/*
 * stream_catalog_record_start
 *		Record that the stream now starts at "first" at the earliest: rows
 *		and numbers below it are gone (trim() or TRUNCATE).  Never moves it
 *		back.
 */
void
stream_catalog_record_start(Oid relid, int64 first)
{
	Oid			argtypes[2] = {REGCLASSOID, INT8OID};
	Datum		values[2];

	values[0] = ObjectIdGetDatum(relid);
	values[1] = Int64GetDatum(first);
	stream_catalog_exec("UPDATE stream_seq.stream "
						"SET trimmed_before = greatest(trimmed_before, $2) "
						"WHERE relid = $1", 2, argtypes, values, NULL, 0, NULL);
}
