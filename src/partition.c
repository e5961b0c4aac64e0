/*-------------------------------------------------------------------------
 *
 * partition.c
 *	  Partitioned streams: which stream a partition's rows belong to,
 *	  sealed partitions and the pages that skip them, retention by dropping
 *	  partitions, and what a partition leaving the stream records.
 *
 * A partitioned stream is numbered as one stream: the triggers enable()
 * creates on the partitioned table are cloned by PostgreSQL onto every
 * partition, present and future, and they number each row from the
 * stream's one counter.  No index can make the number unique across
 * partitions (a unique index must contain the partition key); numbers are
 * unique because stream_seq hands each out once, refuses numbers written
 * by hand, and refuses to attach a table that already has rows.
 *
 * A partition is sealed (stream_seq.partition_range holds its lowest and
 * highest number) once no row can arrive in it any more: sealing waits for
 * the transactions writing to it and refuses rows inserted later.  Pages
 * read through stream_seq.read(), read_slot() and page() leave out the
 * sealed partitions whose numbers all lie at or below the cursor, and
 * those of read() and page() also the sealed ones whose numbers all lie
 * above the rows the page can hold (stream_seq_page_source).
 *
 * When a partition leaves the stream (DETACH PARTITION, DROP TABLE, or
 * drop_partitions()), first() moves past its highest number, as trim()
 * does, so that a consumer that had not read its rows is told.  For DROP
 * that number is read just before PostgreSQL deletes the partition (an
 * object access hook) and recorded by the sql_drop event trigger.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/relation.h"
#include "access/relscan.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/index.h"
#include "catalog/objectaccess.h"
#include "catalog/partition.h"
#include "catalog/pg_am.h"
#include "catalog/pg_class.h"
#include "catalog/pg_index.h"
#include "catalog/pg_inherits.h"
#include "catalog/pg_trigger.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/tuptable.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "nodes/primnodes.h"
#include "partitioning/partbounds.h"
#include "partitioning/partdesc.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/partcache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

#include "stream_seq.h"
#include "partition.h"
#include "shmem.h"
#include "catalog.h"
#include "horizon.h"
#include "consumer.h"

static int	partitions_ending_by(Oid stream, List *parts, TimestampTz present_time);

PG_FUNCTION_INFO_V1(stream_seq_page_source);
PG_FUNCTION_INFO_V1(stream_seq_seal_partitions);
PG_FUNCTION_INFO_V1(stream_seq_drop_partitions);
PG_FUNCTION_INFO_V1(stream_seq_unseal_partition);

/* Backend-local cache of the tables the triggers fire on. */
static HTAB *target_cache = NULL;

/*
 * Partitions the current transaction is dropping, with their highest
 * number read just before the drop; consumed by the sql_drop event
 * trigger.  In TopTransactionContext, forgotten at transaction end.
 */
typedef struct DroppedPartition
{
	Oid			relid;
	Oid			stream;
	bool		has_numbers;
	int64		highest;
} DroppedPartition;

static List *dropped_partitions = NIL;

static object_access_hook_type prev_object_access_hook = NULL;

/*
 * invalidate_targets
 *		Relcache invalidation callback: forget what we know of a table, and
 *		of every partition of a stream whose table was invalidated.
 */
static void
invalidate_targets(Datum arg, Oid relid)
{
	HASH_SEQ_STATUS status;
	StreamTarget *target;

	if (target_cache == NULL)
		return;
	hash_seq_init(&status, target_cache);
	while ((target = hash_seq_search(&status)) != NULL)
	{
		if (!OidIsValid(relid) || target->relid == relid ||
			target->stream == relid)
			target->valid = false;
	}
}

/*
 * partition_range_table
 *		OID of stream_seq.partition_range, or InvalidOid before the
 *		extension was updated to a version that has it.
 */
static Oid
partition_range_table(void)
{
	Oid			nsp = stream_namespace(true);

	if (!OidIsValid(nsp))
		return InvalidOid;
	return get_relname_relid("partition_range", nsp);
}

/*
 * stream_check_partitions_supported
 *		Refuse to make a partitioned table a stream while the database has
 *		the SQL objects of a version before 0.4.0: their read() reads a
 *		stream table with ONLY, which finds no row of a partitioned one.
 */
void
stream_check_partitions_supported(void)
{
	if (!OidIsValid(partition_range_table()))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the stream_seq extension must be updated to make a partitioned table a stream table"),
				 errhint("Run ALTER EXTENSION stream_seq UPDATE.")));
}

/*
 * partition_is_sealed
 *		Whether a partition has a row in stream_seq.partition_range, as
 *		the latest snapshot sees it.
 */
static bool
partition_is_sealed(Oid relid)
{
	Oid			argtypes[1] = {OIDOID};
	Datum		values[1];
	int64		one;
	bool		found;

	if (!OidIsValid(partition_range_table()))
		return false;
	values[0] = ObjectIdGetDatum(relid);
	stream_catalog_exec_latest("SELECT 1::pg_catalog.int8 FROM stream_seq.partition_range "
							   "WHERE partition::pg_catalog.oid = $1",
							   1, argtypes, values, &one, 1, &found);
	return found;
}

/*
 * stream_root_of
 *		The stream a partition belongs to: its topmost ancestor, if that is
 *		a stream table; InvalidOid otherwise.
 */
Oid
stream_root_of(Oid relid)
{
	List	   *ancestors = get_partition_ancestors(relid);
	Oid			root;

	if (ancestors == NIL)
		return InvalidOid;
	root = llast_oid(ancestors);
	list_free(ancestors);
	return stream_catalog_has(root) ? root : InvalidOid;
}

/*
 * partition_detaching
 *		Whether partition "relid", or a partitioned table above it, is
 *		being detached concurrently (its DETACH ... CONCURRENTLY committed
 *		its first transaction and has not finished).
 */
static bool
partition_detaching(Oid relid)
{
	List	   *ancestors = get_partition_ancestors(relid);
	ListCell   *lc;
	bool		detaching = PartitionHasPendingDetach(relid);

	foreach(lc, ancestors)
	{
		if (!detaching && get_rel_relispartition(lfirst_oid(lc)))
			detaching = PartitionHasPendingDetach(lfirst_oid(lc));
	}
	list_free(ancestors);
	return detaching;
}

/*
 * stream_lookup_target
 *		What the triggers need to know of the table they fired on: the
 *		stream its rows belong to (itself, or the partitioned table at the
 *		top of its partition tree), where the stream column is in it (an
 *		attached table may order its columns differently), and whether it
 *		is a sealed partition or one being detached.  Cached until the table's relcache entry,
 *		or its stream's, is invalidated.
 */
StreamTarget *
stream_lookup_target(Relation rel)
{
	Oid			relid = RelationGetRelid(rel);
	StreamTarget *target;
	bool		found;

	if (target_cache == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(Oid);
		ctl.entrysize = sizeof(StreamTarget);
		ctl.hcxt = TopMemoryContext;
		target_cache = hash_create("stream_seq trigger targets", 16, &ctl,
								   HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
		CacheRegisterRelcacheCallback(invalidate_targets, (Datum) 0);
	}
	target = hash_search(target_cache, &relid, HASH_ENTER, &found);
	if (found && target->valid)
		return target;
	target->valid = false;

	if (!rel->rd_rel->relispartition)
	{
		StreamRef  *ref = stream_lookup(relid, false);

		target->stream = relid;
		target->seq_attnum = ref->seq_attnum;
		target->time_attnum = ref->time_attnum;
		target->sealed = false;
		target->detaching = false;
	}
	else
	{
		Oid			root = stream_root_of(relid);
		StreamRef  *ref;
		char	   *column;

		if (!OidIsValid(root))
			ereport(ERROR,
					(errcode(ERRCODE_WRONG_OBJECT_TYPE),
					 errmsg("table \"%s\" is not a partition of a stream table",
							RelationGetRelationName(rel)),
					 errhint("Remove the stream_seq triggers it was given, or attach it to a stream table.")));
		ref = stream_lookup(root, false);
		column = get_attname(root, ref->seq_attnum, false);
		target->stream = root;
		target->seq_attnum = get_attnum(relid, column);
		if (target->seq_attnum == InvalidAttrNumber)
			elog(ERROR, "partition \"%s\" has no column \"%s\"",
				 RelationGetRelationName(rel), column);
		target->time_attnum = InvalidAttrNumber;
		if (ref->time_attnum != InvalidAttrNumber)
		{
			column = get_attname(root, ref->time_attnum, false);
			target->time_attnum = get_attnum(relid, column);
			if (target->time_attnum == InvalidAttrNumber)
				elog(ERROR, "partition \"%s\" has no column \"%s\"",
					 RelationGetRelationName(rel), column);
		}
		target->sealed = partition_is_sealed(relid);
		target->detaching = partition_detaching(relid);
	}
	target->pglogical = stream_pglogical_installed();
	target->valid = true;
	return target;
}

/*
 * qualified
 *		schema.table of a relation, quoted.
 */
static char *
qualified(Oid relid)
{
	return stream_qualified_name(relid);
}

/*
 * index_orders_column
 *		Whether btree "index" has every row with a number, in the order of
 *		column "attnum": its first key column is "attnum", and it has no
 *		predicate but one that selects the numbered rows ("attnum > 0",
 *		the index enable() makes, or "attnum IS NOT NULL" before 0.7.0).
 *		Only then do its two ends give a partition's lowest and highest
 *		number; a partial index would miss rows.  (A descending one has
 *		them at the other ends: index_end_number turns round.)
 */
static bool
index_orders_column(Relation index, AttrNumber attnum)
{
	List	   *pred;

	if (index->rd_rel->relam != BTREE_AM_OID ||
		!index->rd_index->indisvalid ||
		index->rd_index->indkey.values[0] != attnum)
		return false;
	pred = RelationGetIndexPredicate(index);
	return pred == NIL || stream_predicate_is_numbered(pred, attnum);
}

/*
 * index_on_column
 *		An index of "rel" that gives the number range of a partition (see
 *		index_orders_column).  InvalidOid if there is none.
 */
static Oid
index_on_column(Relation rel, AttrNumber attnum)
{
	List	   *indexes = RelationGetIndexList(rel);
	ListCell   *lc;
	Oid			result = InvalidOid;

	foreach(lc, indexes)
	{
		Oid			indexid = lfirst_oid(lc);
		Relation	index = index_open(indexid, AccessShareLock);

		if (index_orders_column(index, attnum))
			result = indexid;
		index_close(index, AccessShareLock);
		if (OidIsValid(result))
			break;
	}
	list_free(indexes);
	return result;
}

/*
 * index_end_number
 *		The lowest (ForwardScanDirection) or highest number that the latest
 *		snapshot sees in "heap", read from the btree "index" whose first
 *		key is the number.  Returns false if there is none.
 */
static bool
index_end_number(Relation heap, Relation index, AttrNumber attnum,
				 ScanDirection direction, int64 *number)
{
	Snapshot	snapshot = RegisterSnapshot(GetLatestSnapshot());
	TupleTableSlot *slot = table_slot_create(heap, NULL);
	IndexScanDesc scan;
	ScanKeyData key;
	bool		found = false;

	/* a descending index has the lowest number at its end */
	if ((index->rd_indoption[0] & INDOPTION_DESC) != 0)
		direction = (direction == ForwardScanDirection) ?
			BackwardScanDirection : ForwardScanDirection;
	ScanKeyEntryInitialize(&key, SK_ISNULL | SK_SEARCHNOTNULL, 1,
						   InvalidStrategy, InvalidOid, InvalidOid,
						   InvalidOid, (Datum) 0);
	scan = stream_index_beginscan(heap, index, snapshot, 1);
	index_rescan(scan, &key, 1, NULL, 0);
	while (index_getnext_slot(scan, direction, slot))
	{
		bool		isnull;
		Datum		value = slot_getattr(slot, attnum, &isnull);

		if (!isnull)
		{
			*number = DatumGetInt64(value);
			found = true;
			break;
		}
	}
	index_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	UnregisterSnapshot(snapshot);
	return found;
}

/*
 * widen_range
 *		Make [*lowest, *highest] cover [lo, hi]; "*found" says whether it
 *		covers anything yet, and is set.
 */
static void
widen_range(bool *found, int64 lo, int64 hi, int64 *lowest, int64 *highest)
{
	if (!*found || lo < *lowest)
		*lowest = lo;
	if (!*found || hi > *highest)
		*highest = hi;
	*found = true;
}

/*
 * heap_number_range
 *		The lowest and highest number in "heap" that the latest snapshot
 *		sees, by a scan of the whole table: for a partition without an
 *		index on the number.  Returns false if there is none.
 */
static bool
heap_number_range(Relation heap, AttrNumber attnum, int64 *lowest,
				  int64 *highest)
{
	Snapshot	snapshot = RegisterSnapshot(GetLatestSnapshot());
	TupleTableSlot *slot = table_slot_create(heap, NULL);
	TableScanDesc scan = table_beginscan(heap, snapshot, 0, NULL);
	bool		found = false;

	while (table_scan_getnextslot(scan, ForwardScanDirection, slot))
	{
		bool		isnull;
		Datum		value = slot_getattr(slot, attnum, &isnull);
		int64		number;

		CHECK_FOR_INTERRUPTS();
		if (isnull)
			continue;
		number = DatumGetInt64(value);
		widen_range(&found, number, number, lowest, highest);
	}
	table_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	UnregisterSnapshot(snapshot);
	return found;
}

/*
 * partition_number_range
 *		The lowest and highest number in partition "relid" (locked by the
 *		caller), through its index on the number if it has one.  Returns
 *		false if it has none.
 */
static bool
partition_number_range(Oid relid, AttrNumber attnum, int64 *lowest,
					   int64 *highest)
{
	Relation	heap;
	Oid			indexid;
	bool		found;

	/* a partition that is partitioned itself: the range of its leaves */
	if (get_rel_relkind(relid) == RELKIND_PARTITIONED_TABLE)
	{
		List	   *leaves = find_all_inheritors(relid, AccessShareLock, NULL);
		char	   *column = get_attname(relid, attnum, false);
		ListCell   *lc;

		found = false;
		foreach(lc, leaves)
		{
			Oid			leaf = lfirst_oid(lc);
			int64		leaf_lowest;
			int64		leaf_highest;

			if (get_rel_relkind(leaf) != RELKIND_RELATION ||
				!partition_number_range(leaf, get_attnum(leaf, column),
										&leaf_lowest, &leaf_highest))
				continue;
			widen_range(&found, leaf_lowest, leaf_highest, lowest, highest);
		}
		return found;
	}

	heap = table_open(relid, NoLock);
	indexid = index_on_column(heap, attnum);

	if (OidIsValid(indexid))
	{
		Relation	index = index_open(indexid, AccessShareLock);

		found = index_end_number(heap, index, attnum, ForwardScanDirection,
								 lowest) &&
			index_end_number(heap, index, attnum, BackwardScanDirection,
							 highest);
		index_close(index, AccessShareLock);
	}
	else
		found = heap_number_range(heap, attnum, lowest, highest);
	table_close(heap, NoLock);
	return found;
}

/*
 * partition_column
 *		Where stream "stream"'s column is in its partition "relid".
 */
static AttrNumber
partition_column(StreamRef *ref, Oid relid)
{
	char	   *column = get_attname(ref->relid, ref->seq_attnum, false);
	AttrNumber	attnum = get_attnum(relid, column);

	if (attnum == InvalidAttrNumber)
		elog(ERROR, "partition \"%s\" has no column \"%s\"",
			 stream_rel_name(relid), column);
	return attnum;
}

/*
 * record_partition_gone
 *		A partition left stream "stream": its numbers up to "highest" may be
 *		gone, so first() moves past it (never back), and its range is
 *		forgotten.
 */
static void
record_partition_gone(Oid stream, Oid relid, bool has_numbers, int64 highest)
{
	if (has_numbers && highest < PG_INT64_MAX)
		stream_catalog_record_start(stream, highest + 1);
	if (OidIsValid(partition_range_table()))
	{
		Oid			argtypes[1] = {OIDOID};
		Datum		values[1];

		values[0] = ObjectIdGetDatum(relid);
		stream_catalog_exec("DELETE FROM stream_seq.partition_range "
							"WHERE partition::pg_catalog.oid = $1",
							1, argtypes, values, NULL, 0, NULL);
	}
}

/*
 * stream_partition_detached
 *		After ALTER TABLE ... DETACH PARTITION of stream "stream": record
 *		that the detached table's numbers left the stream.  The table still
 *		has its rows and its index.
 */
void
stream_partition_detached(Oid stream, Oid relid)
{
	StreamRef  *ref = stream_lookup(stream, false);
	int64		lowest;
	int64		highest;
	bool		found;

	found = partition_number_range(relid, partition_column(ref, relid),
								   &lowest, &highest);
	record_partition_gone(stream, relid, found, highest);
}

/*
 * stream_partition_detaching
 *		Before ALTER TABLE ... DETACH PARTITION ... CONCURRENTLY of
 *		partition "relid" of stream "stream", in the command's first
 *		transaction: wait for the transactions writing to the partition
 *		(SHARE lock, until that transaction commits), then record that its
 *		numbers leave the stream, so that first() has moved by the time new
 *		snapshots stop seeing the partition.  Later writers find it
 *		detaching and are refused (stream_lookup_target).  ddl_command_end
 *		records it once more when the detach is done.
 */
void
stream_partition_detaching(Oid stream, Oid relid)
{
	List	   *tables;
	ListCell   *lc;

	/*
	 * A sub-partitioned partition: every table under it, as rows inserted
	 * into a leaf directly do not lock the tables above it for writing.
	 * Their cached trigger targets are invalidated at commit, as the
	 * detach itself invalidates only the table it detaches from.
	 */
	LockRelationOid(relid, ShareLock);
	tables = find_all_inheritors(relid, ShareLock, NULL);	/* the others */
	foreach(lc, tables)
		CacheInvalidateRelcacheByRelid(lfirst_oid(lc));
	stream_partition_detached(stream, relid);
}

/*
 * stream_partition_detached_end
 *		After DETACH PARTITION of "relid" from stream "stream": the table,
 *		no longer part of the stream, loses the TRUNCATE trigger it was
 *		given (PostgreSQL drops the cloned row triggers itself), its capture
 *		index and its placeholder defaults.  Done as the extension's owner:
 *		detaching needs only ownership of the stream table.
 */
void
stream_partition_detached_end(Oid stream, Oid relid)
{
	StreamRef  *ref = stream_lookup(stream, false);
	AttrNumber	time_attnum = InvalidAttrNumber;

	if (get_rel_relkind(relid) == RELKIND_RELATION &&
		OidIsValid(get_trigger_oid(relid, "stream_seq_truncate", true)))
		stream_catalog_exec(psprintf("DROP TRIGGER stream_seq_truncate ON %s",
									 qualified(relid)),
							0, NULL, NULL, NULL, 0, NULL);
	if (ref->time_attnum != InvalidAttrNumber)
		time_attnum = get_attnum(relid, get_attname(stream, ref->time_attnum, false));
	stream_drop_write_path(relid, partition_column(ref, relid), time_attnum);
}

/*
 * stream_check_attached
 *		After ALTER TABLE ... ATTACH PARTITION to stream "stream": refuse a
 *		table that already has rows (their numbers, or their lack of one,
 *		did not come from this stream: a reader could skip them or see a
 *		number twice) or that is a stream table itself.
 */
void
stream_check_attached(Oid stream, Oid relid)
{
	char	   *query;
	int64		one;
	bool		found;

	if (stream_catalog_has(relid))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("cannot attach stream table \"%s\" as a partition of stream table \"%s\"",
						stream_rel_name(relid), stream_rel_name(stream)),
				 errhint("Run stream_seq.disable() on it first, and attach it empty.")));
	if (get_rel_relkind(relid) == RELKIND_PARTITIONED_TABLE)
		query = psprintf("SELECT 1::pg_catalog.int8 FROM %s LIMIT 1", qualified(relid));
	else
		query = psprintf("SELECT 1::pg_catalog.int8 FROM ONLY %s LIMIT 1", qualified(relid));
	stream_catalog_exec_latest(query, 0, NULL, NULL, &one, 1, &found);
	if (found)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("cannot attach table \"%s\" with rows to stream table \"%s\"",
						stream_rel_name(relid), stream_rel_name(stream)),
				 errdetail("Its rows were not numbered by the stream: readers could skip them or see a number twice."),
				 errhint("Attach an empty table and insert the rows through the stream table.")));
}

/*
 * stream_partition_dropped
 *		sql_drop: partition "relid" was dropped.  If the object access hook
 *		saw it go and its stream is still there, record that its numbers
 *		left the stream.
 */
void
stream_partition_dropped(Oid relid)
{
	ListCell   *lc;

	foreach(lc, dropped_partitions)
	{
		DroppedPartition *dropped = lfirst(lc);

		if (dropped->relid != relid)
			continue;
		if (stream_catalog_has(dropped->stream))
			record_partition_gone(dropped->stream, relid,
								  dropped->has_numbers, dropped->highest);
		dropped_partitions = foreach_delete_current(dropped_partitions, lc);
		break;
	}
}

/*
 * note_dropped_partition
 *		Just before PostgreSQL deletes relation "relid" (an index of a
 *		partition, or the partition): if it is a partition of a stream, or
 *		an index on the number of one, read the partition's highest number
 *		while it can still be read.  The partition's own indexes are deleted
 *		before it, so the number usually comes from its index; a partition
 *		without one is scanned.
 */
static void
note_dropped_partition(Oid relid)
{
	char		relkind = get_rel_relkind(relid);
	Oid			table;
	Oid			stream;
	StreamRef  *ref;
	AttrNumber	attnum;
	DroppedPartition *dropped;
	ListCell   *lc;
	MemoryContext oldcxt;
	int64		lowest = 0;
	int64		highest = 0;
	bool		found;

	if (relkind == RELKIND_INDEX)
		table = IndexGetRelation(relid, true);
	else if (relkind == RELKIND_RELATION)
		table = relid;
	else
		return;
	if (!OidIsValid(table) || !get_rel_relispartition(table) ||
		!OidIsValid(stream_catalog_relid(true)) || !stream_shmem_ready())
		return;
	foreach(lc, dropped_partitions)
	{
		if (((DroppedPartition *) lfirst(lc))->relid == table)
			return;
	}
	stream = stream_root_of(table);
	if (!OidIsValid(stream))
		return;
	ref = stream_lookup(stream, false);
	attnum = partition_column(ref, table);

	if (relkind == RELKIND_INDEX)
	{
		Relation	heap = table_open(table, AccessShareLock);
		Relation	index = index_open(relid, NoLock);

		if (!index_orders_column(index, attnum))
		{
			index_close(index, NoLock);
			table_close(heap, AccessShareLock);
			return;
		}
		found = index_end_number(heap, index, attnum, BackwardScanDirection,
								 &highest);
		index_close(index, NoLock);
		table_close(heap, AccessShareLock);
	}
	else
	{
		Relation	heap = table_open(table, NoLock);

		found = heap_number_range(heap, attnum, &lowest, &highest);
		table_close(heap, NoLock);
	}

	oldcxt = MemoryContextSwitchTo(TopTransactionContext);
	dropped = palloc(sizeof(DroppedPartition));
	dropped->relid = table;
	dropped->stream = stream;
	dropped->has_numbers = found;
	dropped->highest = highest;
	dropped_partitions = lappend(dropped_partitions, dropped);
	MemoryContextSwitchTo(oldcxt);
}

/*
 * partition_object_access
 *		object_access_hook: note partitions of streams about to be dropped.
 */
static void
partition_object_access(ObjectAccessType access, Oid classId, Oid objectId,
						int subId, void *arg)
{
	if (prev_object_access_hook)
		prev_object_access_hook(access, classId, objectId, subId, arg);
	if (access == OAT_DROP && classId == RelationRelationId && subId == 0 &&
		IsTransactionState())
		note_dropped_partition(objectId);
}

/*
 * stream_partition_xact_end
 *		Forget the partitions noted as dropped (transaction end).
 */
void
stream_partition_xact_end(void)
{
	dropped_partitions = NIL;
}

/*
 * stream_partition_init
 *		Install the object access hook (from _PG_init).
 */
void
stream_partition_init(void)
{
	prev_object_access_hook = object_access_hook;
	object_access_hook = partition_object_access;
}

/*
 * stream_add_truncate_trigger
 *		Give a partition of a stream the BEFORE TRUNCATE trigger, unless it
 *		has it: PostgreSQL clones row triggers onto partitions but not
 *		statement triggers, and a partition truncated on its own takes its
 *		numbers out of the stream.  Created as the extension's owner: the
 *		role creating or attaching the partition owns the table, but need
 *		not have USAGE on schema stream_seq, and its DDL must not fail for
 *		that.
 */
void
stream_add_truncate_trigger(Oid relid)
{
	if (OidIsValid(get_trigger_oid(relid, "stream_seq_truncate", true)))
		return;
	stream_catalog_exec(psprintf("CREATE TRIGGER stream_seq_truncate BEFORE TRUNCATE ON %s "
								 "FOR EACH STATEMENT EXECUTE FUNCTION stream_seq.truncate_trigger()",
								 qualified(relid)),
						0, NULL, NULL, NULL, 0, NULL);
}

/*
 * stream_partition_truncated
 *		BEFORE TRUNCATE of partition "relid" of stream "stream": its numbers
 *		leave the stream, as with DETACH.
 */
void
stream_partition_truncated(Oid stream, Oid relid)
{
	stream_partition_detached(stream, relid);
}

/*
 * stream_check_partition
 *		After DDL that made "relid" a partition of stream "stream" (CREATE
 *		TABLE ... PARTITION OF, ATTACH PARTITION): its stream column (and
 *		time column) must take NULL until commit, and the table must be
 *		logged.  With
 *		"add_trigger" (a new partition) it gets the TRUNCATE trigger.
 */
void
stream_check_partition(Oid stream, Oid relid, bool add_trigger)
{
	StreamRef  *ref = stream_lookup(stream, false);
	Relation	rel = relation_open(relid, AccessShareLock);
	AttrNumber	attnum = partition_column(ref, relid);
	Form_pg_attribute att = TupleDescAttr(RelationGetDescr(rel), attnum - 1);
	int			i;

	if (att->attnotnull || !stream_default_is_placeholder(rel, attnum, false))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TABLE_DEFINITION),
				 errmsg("column \"%s\" of partition \"%s\" of stream table \"%s\" cannot have NOT NULL or a default of its own",
						NameStr(att->attname), RelationGetRelationName(rel),
						stream_rel_name(stream)),
				 errdetail("Stream numbers are assigned at commit; rows hold the placeholder 0 (the default stream_seq gives the column) or NULL until then.")));
	if (ref->time_attnum != InvalidAttrNumber)
	{
		AttrNumber	time_attnum = get_attnum(relid, get_attname(ref->relid, ref->time_attnum, false));

		att = time_attnum == InvalidAttrNumber ? NULL :
			TupleDescAttr(RelationGetDescr(rel), time_attnum - 1);
		if (att != NULL &&
			(att->attnotnull || !stream_default_is_placeholder(rel, time_attnum, true)))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_TABLE_DEFINITION),
					 errmsg("time column \"%s\" of partition \"%s\" of stream table \"%s\" cannot have NOT NULL or a default of its own",
							NameStr(att->attname), RelationGetRelationName(rel),
							stream_rel_name(stream)),
					 errdetail("The time column is written at commit, with the number; rows hold the placeholder -infinity (the default stream_seq gives the column) or NULL until then.")));
	}
	if (rel->rd_rel->relpersistence != RELPERSISTENCE_PERMANENT)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("partition \"%s\" of stream table \"%s\" must be logged",
						RelationGetRelationName(rel), stream_rel_name(stream)),
				 errdetail("A crash empties an unlogged table, and numbers must survive crashes.")));
	if (rel->rd_rel->relkind != RELKIND_RELATION &&
		rel->rd_rel->relkind != RELKIND_PARTITIONED_TABLE)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("partition \"%s\" of stream table \"%s\" is not an ordinary table",
						RelationGetRelationName(rel), stream_rel_name(stream))));
	for (i = 0; rel->trigdesc != NULL && i < rel->trigdesc->numtriggers; i++)
	{
		Trigger    *trigger = &rel->trigdesc->triggers[i];

		if (stream_trigger_disabled(RelationGetRelid(rel), trigger))
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("cannot disable the triggers of partition \"%s\" of stream table \"%s\"",
							RelationGetRelationName(rel), stream_rel_name(stream)),
					 errdetail("Rows inserted without them would never get a number, and numbers replicated into the table would not move its counter."),
					 errhint("Run stream_seq.disable() to stop numbering the table.")));
	}
	relation_close(rel, AccessShareLock);
	if (!add_trigger)
		return;
	if (get_rel_relkind(relid) == RELKIND_RELATION)
		stream_add_truncate_trigger(relid);
	else
	{
		List	   *parts = find_all_inheritors(relid, AccessShareLock, NULL);
		ListCell   *lc;

		foreach(lc, parts)
			stream_add_truncate_trigger(lfirst_oid(lc));
	}
}

/*
 * range_partitions
 *		The partitions of a stream partitioned by range, in the order of
 *		their bounds, without the default partition.  Retention and sealing
 *		need that order; other partitioning has none.
 */
static List *
range_partitions(Oid stream)
{
	Relation	rel = stream_relation_open(stream, AccessShareLock);
	PartitionKey key;
	PartitionDesc desc;
	List	   *result = NIL;
	int			i;

	if (rel->rd_rel->relkind != RELKIND_PARTITIONED_TABLE)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("stream table \"%s\" is not partitioned",
						RelationGetRelationName(rel)),
				 errhint("Use stream_seq.trim() to remove old rows.")));
	key = RelationGetPartitionKey(rel);
	if (key->strategy != PARTITION_STRATEGY_RANGE)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("stream table \"%s\" is not partitioned by range",
						RelationGetRelationName(rel)),
				 errdetail("Partitions are sealed and dropped oldest first, in the order of their range bounds."),
				 errhint("Use stream_seq.trim() to remove old rows.")));
	desc = RelationGetPartitionDesc(rel, true);
	for (i = 0; i < desc->nparts; i++)
	{
		if (desc->boundinfo != NULL && i == desc->boundinfo->default_index)
			continue;
		if (get_rel_relkind(desc->oids[i]) != RELKIND_RELATION)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("partition \"%s\" of stream table \"%s\" is partitioned",
							stream_rel_name(desc->oids[i]), RelationGetRelationName(rel)),
					 errdetail("Sealing and dropping partitions work on one level of range partitions.")));
		result = lappend_oid(result, desc->oids[i]);
	}
	table_close(rel, AccessShareLock);
	return result;
}

/*
 * lock_partition
 *		Lock partition "part" of stream "stream" in "lockmode", then make
 *		sure it still is one.  The partitions are listed before they are
 *		locked, and a DROP TABLE or DETACH PARTITION that held the lock may
 *		have committed meanwhile: opened by its old OID, a dropped partition
 *		is an internal error, and a detached one would be sealed or dropped
 *		as if it still held the stream's rows.  Returns false, with the
 *		lock released, for a partition that is gone: it is no longer there
 *		to seal or drop, and its range was forgotten when it left
 *		(record_partition_gone).  LockRelationOid() takes in the
 *		invalidations of what committed while it waited, so the syscache
 *		shows the present.
 */
static bool
lock_partition(Oid stream, Oid part, LOCKMODE lockmode)
{
	LockRelationOid(part, lockmode);
	if (SearchSysCacheExists1(RELOID, ObjectIdGetDatum(part)) &&
		get_rel_relispartition(part) &&
		get_partition_parent(part, true) == stream)
		return true;
	UnlockRelationOid(part, lockmode);
	return false;
}

/*
 * partition_has_rows
 *		Whether partition "relid" holds a row the latest snapshot sees.
 */
static bool
partition_has_rows(Oid relid)
{
	int64		one;
	bool		found;

	stream_catalog_exec_latest(psprintf("SELECT 1::pg_catalog.int8 FROM ONLY %s LIMIT 1",
										qualified(relid)),
							   0, NULL, NULL, &one, 1, &found);
	return found;
}

/*
 * present_bound
 *		For a stream partitioned by range on a key whose first column (or
 *		expression) is of type timestamptz, timestamp or date: the time
 *		"present", in that type.  Returns false for any other partition key.
 */
static bool
present_bound(PartitionKey key, TimestampTz present, Datum *value)
{
	/* the first column of the key, or an expression, of a type of time */
	switch (key->parttypid[0])
	{
		case TIMESTAMPTZOID:
			*value = TimestampTzGetDatum(present);
			return true;
		case TIMESTAMPOID:
			*value = DirectFunctionCall1(timestamptz_timestamp,
										 TimestampTzGetDatum(present));
			return true;
		case DATEOID:
			*value = DirectFunctionCall1(timestamptz_date,
										 TimestampTzGetDatum(present));
			return true;
		default:
			return false;
	}
}

/*
 * partitions_past
 *		How many of the range partitions "parts" of stream "stream" (in
 *		bound order, as range_partitions gives them) lie wholly in the past:
 *		for a stream partitioned by time, those whose upper bound (its first
 *		column, for a key of several) is at or
 *		before the current time less stream_seq.seal_grace; for any other
 *		partition key, all of them.
 *
 *		Sealing stops there whatever rows later partitions hold: a row dated
 *		in the future (clock skew, back-filled or scheduled events) lands in
 *		a later partition, and sealing every partition before it would seal
 *		the one the table's default, now(), routes every new row to.  The
 *		grace keeps a partition open for writers whose transaction (and so
 *		now()) began before its upper bound passed.
 */
static int
partitions_past(Oid stream, List *parts)
{
	return partitions_ending_by(stream, parts,
								GetCurrentTimestamp() -
								(TimestampTz) stream_seq_seal_grace * USECS_PER_SEC);
}

/*
 * partitions_ending_by
 *		How many of the range partitions "parts" (in bound order), from the
 *		first, end at or before the time "present": for a stream partitioned
 *		by time, those whose upper bound is at or before it; for any other
 *		partition key, all of them.  For partitions_past and retention
 *		policies (keep_for).
 */
static int
partitions_ending_by(Oid stream, List *parts, TimestampTz present_time)
{
	Relation	rel = stream_relation_open(stream, AccessShareLock);
	PartitionKey key = RelationGetPartitionKey(rel);
	PartitionDesc desc = RelationGetPartitionDesc(rel, true);
	PartitionBoundInfo bounds = desc->boundinfo;
	Datum		present;
	int			past = 0;
	ListCell   *lc;

	if (!present_bound(key, present_time, &present) || bounds == NULL)
	{
		table_close(rel, AccessShareLock);
		return list_length(parts);
	}
	foreach(lc, parts)
	{
		Oid			part = lfirst_oid(lc);
		int			partindex = -1;
		int			i;
		bool		before = false;

		for (i = 0; i < desc->nparts; i++)
		{
			if (desc->oids[i] == part)
				partindex = i;
		}
		/* detached since range_partitions listed it: stop there */
		if (partindex < 0)
			break;
		/* the bound at which partition "partindex" ends */
		for (i = 0; i < bounds->ndatums; i++)
		{
			if (bounds->indexes[i] != partindex)
				continue;
			before = bounds->kind[i][0] == PARTITION_RANGE_DATUM_VALUE &&
				DatumGetInt32(FunctionCall2Coll(&key->partsupfunc[0],
												key->partcollation[0],
												bounds->datums[i][0],
												present)) <= 0;
			break;
		}
		if (!before)
			break;
		past++;
	}
	table_close(rel, AccessShareLock);
	return past;
}

/*
 * seal_old_partitions
 *		Seal every partition of a range-partitioned stream that comes before
 *		the last one holding rows and, partitioned by time, lies wholly in
 *		the past (partitions_past): rows go to the newest partitions, and
 *		these take none any more.  Sealing one waits for the transactions
 *		writing to it (SHARE lock, held to the end of the transaction),
 *		reads its lowest and highest number, records them, and from then
 *		on its guard trigger refuses new rows.  Returns how many partitions
 *		it sealed (not those a concurrent transaction sealed first);
 *		"sealed" gets every sealed partition, oldest first.
 */
static int
seal_old_partitions(StreamRef *ref, List **sealed)
{
	List	   *parts = range_partitions(ref->relid);
	int			last_with_rows = -1;
	int			count = 0;
	int			i;

	if (!OidIsValid(partition_range_table()))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the stream_seq extension must be updated to seal partitions"),
				 errhint("Run ALTER EXTENSION stream_seq UPDATE.")));

	for (i = list_length(parts) - 1; i >= 0; i--)
	{
		/* a partition gone since it was listed holds no rows */
		if (lock_partition(ref->relid, list_nth_oid(parts, i),
						   AccessShareLock) &&
			partition_has_rows(list_nth_oid(parts, i)))
		{
			last_with_rows = i;
			break;
		}
	}
	last_with_rows = Min(last_with_rows, partitions_past(ref->relid, parts));
	*sealed = NIL;
	for (i = 0; i < last_with_rows; i++)
	{
		Oid			part = list_nth_oid(parts, i);
		Oid			argtypes[5] = {REGCLASSOID, REGCLASSOID, INT8OID, INT8OID, BOOLOID};
		Datum		values[5];
		char		nulls[5] = {' ', ' ', ' ', ' ', ' '};
		int64		lowest;
		int64		highest;
		bool		found;

		if (partition_is_sealed(part))
		{
			*sealed = lappend_oid(*sealed, part);
			continue;
		}
		if (!lock_partition(ref->relid, part, ShareLock))
			continue;
		found = partition_number_range(part, partition_column(ref, part),
									   &lowest, &highest);
		values[0] = ObjectIdGetDatum(part);
		values[1] = ObjectIdGetDatum(ref->relid);
		values[2] = Int64GetDatum(lowest);
		values[3] = Int64GetDatum(highest);
		if (!found)
			nulls[2] = nulls[3] = 'n';
		stream_catalog_hold(ref->relid, NULL);

		/*
		 * Another transaction may be sealing the same partition: the SHARE
		 * locks do not conflict with each other, and it was not sealed
		 * when looked at.  The insert waits for that transaction; if it
		 * committed, the partition is sealed (with the same range, as no
		 * row could arrive meanwhile) and nothing is inserted.  Under
		 * REPEATABLE READ that seal is invisible, and the insert fails
		 * with a serialization failure instead.
		 */
		if (stream_catalog_exec_nulls("INSERT INTO stream_seq.partition_range "
									  "(partition, stream, lowest, highest) "
									  "VALUES ($1, $2, $3, $4) "
									  "ON CONFLICT (partition) DO NOTHING",
									  4, argtypes, values, nulls) > 0)
		{
			CacheInvalidateRelcacheByRelid(part);
			count++;
		}
		*sealed = lappend_oid(*sealed, part);
	}
	CommandCounterIncrement();
	return count;
}

/*
 * partition_retention_start
 *		The checks seal_partitions() and drop_partitions() start with: no
 *		NULL argument, and the privilege trim() needs, DELETE on the stream
 *		table (dropping partitions needs their ownership too, which DETACH
 *		and DROP TABLE check).  Returns the stream.
 */
static StreamRef *
partition_retention_start(FunctionCallInfo fcinfo, int nargs)
{
	Oid			relid;
	AclResult	aclresult;

	stream_check_not_null(fcinfo, nargs, "stream table and options");
	relid = PG_GETARG_OID(0);
	aclresult = pg_class_aclcheck(relid, GetUserId(), ACL_DELETE);
	if (aclresult != ACLCHECK_OK)
		aclcheck_error(aclresult, OBJECT_TABLE, stream_rel_name(relid));

	/*
	 * Checked again under a lock: a DROP TABLE or disable() this waited
	 * for is the documented error.  The lock is released at once (held,
	 * two sessions detaching partitions would deadlock on its upgrade);
	 * the partitions are locked and checked again one by one below.
	 */
	stream_check_locked(relid, AccessShareLock);
	UnlockRelationOid(relid, AccessShareLock);
	return stream_lookup(relid, false);
}

/*
 * stream_seq_seal_partitions
 *		SQL: seal_partitions(stream regclass) RETURNS integer: seal the
 *		partitions before the newest one that holds rows (see
 *		seal_old_partitions), so that pages skip them; returns how many
 *		were sealed now.
 */
Datum
stream_seq_seal_partitions(PG_FUNCTION_ARGS)
{
	StreamRef  *ref = partition_retention_start(fcinfo, 1);
	List	   *sealed;

	PG_RETURN_INT32(seal_old_partitions(ref, &sealed));
}

/*
 * stream_seq_unseal_partition
 *		SQL: unseal_partition(partition regclass) RETURNS boolean: let a
 *		sealed partition take rows again (one sealed too early, say by
 *		0.4.0, which sealed the partition of the present when a row dated
 *		in the future arrived).  Safe for readers: pages always read a
 *		partition that is not sealed, and its new rows get new numbers.
 *		Needs DELETE on the stream table, as sealing does.  The lock on the
 *		partition makes a drop_partitions() that is about to drop it wait,
 *		and then find it unsealed.  Returns whether it was sealed.
 */
Datum
stream_seq_unseal_partition(PG_FUNCTION_ARGS)
{
	Oid			part;
	Oid			stream;
	AclResult	aclresult;
	Oid			argtypes[1] = {OIDOID};
	Datum		values[1];
	uint64		removed;

	stream_check_not_null(fcinfo, 1, "partition");
	part = PG_GETARG_OID(0);
	if (!SearchSysCacheExists1(RELOID, ObjectIdGetDatum(part)))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation with OID %u does not exist", part)));
	stream = stream_root_of(part);
	if (!OidIsValid(stream))
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("table \"%s\" is not a partition of a stream table",
						stream_rel_name(part))));
	aclresult = pg_class_aclcheck(stream, GetUserId(), ACL_DELETE);
	if (aclresult != ACLCHECK_OK)
		aclcheck_error(aclresult, OBJECT_TABLE, stream_rel_name(stream));
	if (!OidIsValid(partition_range_table()))
		PG_RETURN_BOOL(false);
	LockRelationOid(part, ShareUpdateExclusiveLock);
	values[0] = ObjectIdGetDatum(part);
	removed = stream_catalog_exec("DELETE FROM stream_seq.partition_range "
								  "WHERE partition::pg_catalog.oid = $1",
								  1, argtypes, values, NULL, 0, NULL);
	if (removed > 0)
		CacheInvalidateRelcacheByRelid(part);
	PG_RETURN_BOOL(removed > 0);
}

/*
 * stream_seq_drop_partitions
 *		SQL: drop_partitions(stream regclass, force boolean DEFAULT false,
 *		keep_tables boolean DEFAULT false, retain integer DEFAULT 0)
 *		RETURNS integer: seal the old partitions, then drop (or only
 *		detach, with keep_tables) them oldest first, except the "retain"
 *		newest of them, while every number in the partition is below the
 *		horizon and, unless forced, at or below the slowest consumer's
 *		position; first() moves past each.  Stops at the first partition
 *		that does not qualify.  Returns how many partitions left the stream.
 *
 *		DETACH and DROP of a partition take an ACCESS EXCLUSIVE lock on the
 *		stream table, as PostgreSQL requires, for as long as the catalog
 *		change takes; the rows themselves are not touched, so nothing is
 *		left for VACUUM in the partitions that remain.
 */
Datum
stream_seq_drop_partitions(PG_FUNCTION_ARGS)
{
	StreamRef  *ref = partition_retention_start(fcinfo, 4);
	bool		force = PG_GETARG_BOOL(1);
	bool		keep_tables = PG_GETARG_BOOL(2);
	int32		retain = PG_GETARG_INT32(3);
	DropLimits	limits;

	if (retain < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("retain must not be negative")));
	memset(&limits, 0, sizeof(limits));
	limits.force = force;
	limits.keep_tables = keep_tables;
	limits.retain = retain;
	limits.before = PG_INT64_MAX;
	PG_RETURN_INT32(stream_drop_old_partitions(ref, &limits));
}

/*
 * stream_drop_old_partitions
 *		What drop_partitions() does, within "limits": seal the old
 *		partitions, then drop (or only detach) them oldest first, except
 *		the "retain" newest of them, while every number in the partition is
 *		below the horizon and below limits->before, unless forced at or
 *		below the slowest consumer's position, and, with limits->use_time,
 *		the partition ends at or before limits->time (a stream partitioned
 *		by time; other partition keys pass).  first() moves past each.
 *		Stops at the first partition that does not qualify; if that was for
 *		a consumer, names it in limits->held_by and limits->held_at.  Sets
 *		limits->dropped_upto to the highest number dropped (0: none).
 *		Returns how many partitions left the stream.  Runs as the caller:
 *		its privileges are checked by DETACH and DROP TABLE.
 */
int
stream_drop_old_partitions(StreamRef *ref, DropLimits *limits)
{
	int			candidates;
	List	   *sealed;
	ListCell   *lc;
	int64		horizon;
	char	   *consumer = NULL;
	int64		position = PG_INT64_MAX;
	bool		has_consumer;
	int			dropped = 0;
	int64		dropped_upto = 0;

	seal_old_partitions(ref, &sealed);
	horizon = stream_statement_horizon(ref);
	has_consumer = stream_slowest_consumer(ref->relid, &consumer, &position);
	candidates = list_length(sealed) - limits->retain;
	if (limits->use_time)
		candidates = Min(candidates,
						 partitions_ending_by(ref->relid, sealed, limits->time));
	limits->held_by = NULL;
	limits->held_at = 0;

	foreach(lc, sealed)
	{
		Oid			part = lfirst_oid(lc);
		Oid			argtypes[1] = {OIDOID};
		Datum		values[1];
		int64		range[1];
		bool		found;
		bool		isnull_highest;
		char	   *name;

		if (foreach_current_index(lc) >= candidates)
			break;

		/*
		 * Locked before its range is read: an unseal_partition() still
		 * running is waited for, and then the range is gone.  A partition
		 * dropped or detached meanwhile is skipped: it has left the stream
		 * already, and the next one may go.
		 */
		if (!lock_partition(ref->relid, part, ShareLock))
			continue;
		name = qualified(part);
		values[0] = ObjectIdGetDatum(part);
		range[0] = 0;
		stream_catalog_exec("SELECT coalesce(highest, -1) FROM stream_seq.partition_range "
							"WHERE partition::pg_catalog.oid = $1",
							1, argtypes, values, range, 1, &found);
		if (!found)
			break;
		isnull_highest = (range[0] == -1);
		if (!isnull_highest)
		{
			if (range[0] >= horizon || range[0] >= limits->before)
				break;
			if (!limits->force && has_consumer && range[0] > position)
			{
				limits->held_by = consumer;
				limits->held_at = position;
				break;
			}
		}
		/* record first, then let the event triggers see the partition go */
		record_partition_gone(ref->relid, part, !isnull_highest, range[0]);
		stream_caller_exec(psprintf("ALTER TABLE %s DETACH PARTITION %s",
									qualified(ref->relid), name),
						   0, NULL, NULL);
		if (!limits->keep_tables)
			stream_caller_exec(psprintf("DROP TABLE %s", name), 0, NULL, NULL);
		if (!isnull_highest)
			dropped_upto = Max(dropped_upto, range[0]);
		dropped++;
	}
	if (!limits->force && dropped_upto > 0)
		stream_slots_raise(ref->relid, dropped_upto);
	limits->dropped_upto = dropped_upto;
	return dropped;
}

/*
 * stream_partitioned_by_time
 *		Whether stream "relid" is partitioned by range on a key whose first
 *		column is of a type of time (keep_for can then go by the bounds).
 */
bool
stream_partitioned_by_time(Oid relid)
{
	Relation	rel = table_open(relid, AccessShareLock);
	bool		result = false;
	Datum		value;

	if (rel->rd_rel->relkind == RELKIND_PARTITIONED_TABLE)
	{
		PartitionKey key = RelationGetPartitionKey(rel);

		result = key->strategy == PARTITION_STRATEGY_RANGE &&
			present_bound(key, GetCurrentTimestamp(), &value);
	}
	table_close(rel, AccessShareLock);
	return result;
}

/*
 * A sealed partition as page sources see it: its number range.
 */
typedef struct SealedRange
{
	Oid			relid;
	int64		lowest;			/* PG_INT64_MIN: empty */
	int64		highest;
} SealedRange;

/*
 * compare_lowest
 *		qsort comparator: sealed ranges by their lowest number.
 */
static int
compare_lowest(const void *a, const void *b)
{
	int64		la = ((const SealedRange *) a)->lowest;
	int64		lb = ((const SealedRange *) b)->lowest;

	return (la > lb) - (la < lb);
}

/*
 * count_after
 *		How many of partition "relid"'s rows with a number above "after"
 *		the active snapshot sees, up to "limit", and the highest number
 *		among those counted ("upto").  Read from its index on the number;
 *		without one, reports "limit" rows up to PG_INT64_MAX (no bound).
 */
static int64
count_after(Oid relid, AttrNumber attnum, int64 after, int64 limit,
			int64 *upto)
{
	Relation	heap = table_open(relid, AccessShareLock);
	Oid			indexid = index_on_column(heap, attnum);
	Relation	index;
	TupleTableSlot *slot;
	IndexScanDesc scan;
	ScanKeyData key;
	ScanDirection direction = ForwardScanDirection;
	int64		count = 0;

	*upto = PG_INT64_MAX;
	if (!OidIsValid(indexid))
	{
		table_close(heap, AccessShareLock);
		return limit;
	}
	index = index_open(indexid, AccessShareLock);
	if ((index->rd_indoption[0] & INDOPTION_DESC) != 0)
		direction = BackwardScanDirection;
	ScanKeyInit(&key, 1, BTGreaterStrategyNumber, F_INT8GT,
				Int64GetDatum(after));
	slot = table_slot_create(heap, NULL);
	scan = stream_index_beginscan(heap, index, GetActiveSnapshot(), 1);
	index_rescan(scan, &key, 1, NULL, 0);
	while (count < limit && index_getnext_slot(scan, direction, slot))
	{
		bool		isnull;
		Datum		value = slot_getattr(slot, attnum, &isnull);

		if (isnull)
			continue;
		count++;
		*upto = DatumGetInt64(value);
	}
	index_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	index_close(index, AccessShareLock);
	table_close(heap, AccessShareLock);
	return count;
}

/*
 * sealed_ranges
 *		The sealed partitions of stream "relid" with their ranges.
 */
static int
sealed_ranges(Oid relid, SealedRange **ranges)
{
	Oid			argtypes[1] = {REGCLASSOID};
	Datum		values[1];
	int64	   *rows;
	uint64		n;
	uint64		i;

	if (!OidIsValid(partition_range_table()))
	{
		*ranges = NULL;
		return 0;
	}
	values[0] = ObjectIdGetDatum(relid);
	n = stream_catalog_rows("SELECT partition::pg_catalog.oid::pg_catalog.int8, lowest, highest "
							"FROM stream_seq.partition_range WHERE stream = $1",
							1, argtypes, values, 3, &rows);
	*ranges = palloc(sizeof(SealedRange) * Max(n, 1));
	for (i = 0; i < n; i++)
	{
		(*ranges)[i].relid = (Oid) rows[i * 3];
		(*ranges)[i].lowest = rows[i * 3 + 1];	/* PG_INT64_MIN if NULL */
		(*ranges)[i].highest = rows[i * 3 + 2];
	}
	return (int) n;
}

/*
 * stream_seq_page_source
 *		SQL: _page_source(stream regclass, after bigint, max_rows integer
 *		DEFAULT NULL) RETURNS text: what read(), read_slot() and page()
 *		read a page of at most "max_rows" rows after "after" from.  For an
 *		unpartitioned stream, the table.  For a partitioned one, the union
 *		of the partitions the page may need, each read with ONLY and the
 *		stream's columns in the stream's order:
 *
 *		- every partition that is not sealed (its numbers are not final);
 *		- the sealed ones whose highest number is above "after", in the
 *		  order of their lowest, up to a bound: once the sealed partitions
 *		  taken so far hold "max_rows" rows above "after" that the active
 *		  snapshot sees (counted on their index), all at or below "upto",
 *		  the page holds no number above "upto" (if those rows are all
 *		  below the horizon, they fill it; if not, "upto" is at or above
 *		  the horizon, where the page stops anyway), so the sealed
 *		  partitions whose lowest number is above "upto" are left out.
 *		  Sealed ranges overlap (a late row lands in an older range), so
 *		  "upto" is the highest number counted over all the partitions
 *		  taken, not the highest in the last one: with ranges [1,7], [2,2],
 *		  [3,6] and three rows, the rows counted are 1, 7 and 2, and the
 *		  partition holding 3..6 must still be read.
 *
 *		Without "max_rows" (read_slot(), whose page holds only some rows)
 *		there is no bound.  When the caller may not read each partition
 *		directly, or the stream table has row-level security (reading a
 *		partition directly would bypass its policies), the result is the
 *		stream table itself, which PostgreSQL reads partition by partition.
 */
Datum
stream_seq_page_source(PG_FUNCTION_ARGS)
{
	Oid			relid;
	int64		after;
	int64		max_rows = 0;
	StreamRef  *ref;
	char	   *column;
	Relation	rel;
	StringInfoData columns;
	StringInfoData source;
	List	   *leaves;
	List	   *chosen = NIL;
	ListCell   *lc;
	SealedRange *ranges;
	int			nranges;
	int			i;
	bool		direct = true;
	int64		counted = 0;
	int64		highest_counted = PG_INT64_MIN;
	int64		bound = PG_INT64_MAX;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("stream table and position must not be null")));
	relid = PG_GETARG_OID(0);
	after = PG_GETARG_INT64(1);
	if (PG_NARGS() > 2 && !PG_ARGISNULL(2))
		max_rows = Max(PG_GETARG_INT32(2), 1);

	/*
	 * Callable by any role (the readers that use it run as their caller):
	 * it must name a stream the caller may read, checked under the lock the
	 * page's query takes anyway, before any name of it is used.
	 */
	stream_check_locked(relid, AccessShareLock);
	stream_check_select(relid);
	if (get_rel_relkind(relid) != RELKIND_PARTITIONED_TABLE)
		PG_RETURN_TEXT_P(cstring_to_text(stream_source(relid)));

	ref = stream_lookup(relid, false);
	column = get_attname(relid, ref->seq_attnum, false);
	rel = table_open(relid, AccessShareLock);
	initStringInfo(&columns);
	for (i = 0; i < RelationGetNumberOfAttributes(rel); i++)
	{
		Form_pg_attribute att = TupleDescAttr(RelationGetDescr(rel), i);

		if (att->attisdropped)
			continue;
		appendStringInfo(&columns, "%s%s", columns.len > 0 ? ", " : "",
						 quote_identifier(NameStr(att->attname)));
	}
	if (rel->rd_rel->relrowsecurity)
		direct = false;
	table_close(rel, AccessShareLock);
	if (!direct)
		PG_RETURN_TEXT_P(cstring_to_text(qualified(relid)));

	/*
	 * Partitions that are not sealed: all of them.  The caller must be
	 * allowed to read every partition directly, before any is looked at.
	 */
	if (pg_class_aclcheck(relid, GetUserId(), ACL_SELECT) != ACLCHECK_OK)
		PG_RETURN_TEXT_P(cstring_to_text(qualified(relid)));
	nranges = sealed_ranges(relid, &ranges);
	leaves = find_all_inheritors(relid, NoLock, NULL);
	foreach(lc, leaves)
	{
		Oid			leaf = lfirst_oid(lc);
		bool		sealed = false;
		bool		is_missing = false;

		if (get_rel_relkind(leaf) != RELKIND_RELATION)
			continue;

		/*
		 * The partitions were listed without a lock: one dropped since is
		 * missing here, and left out (it is not locked and read below).
		 */
		if (pg_class_aclcheck_ext(leaf, GetUserId(), ACL_SELECT,
								  &is_missing) != ACLCHECK_OK)
		{
			if (is_missing)
				continue;
			PG_RETURN_TEXT_P(cstring_to_text(qualified(relid)));
		}
		for (i = 0; i < nranges; i++)
		{
			if (ranges[i].relid == leaf)
				sealed = true;
		}
		if (!sealed)
			chosen = lappend_oid(chosen, leaf);
	}

	/* sealed partitions, lowest first, up to the bound */
	qsort(ranges, nranges, sizeof(SealedRange), compare_lowest);
	for (i = 0; i < nranges; i++)
	{
		SealedRange *range = &ranges[i];
		int64		upto;
		int64		here;

		if (range->lowest == PG_INT64_MIN || range->highest <= after ||
			!list_member_oid(leaves, range->relid))
			continue;
		if (range->lowest > bound)
			break;
		chosen = lappend_oid(chosen, range->relid);
		if (max_rows > 0 && bound == PG_INT64_MAX)
		{
			LockRelationOid(range->relid, AccessShareLock);
			if (!SearchSysCacheExists1(RELOID, ObjectIdGetDatum(range->relid)))
				continue;
			here = count_after(range->relid, get_attnum(range->relid, column),
							   after, max_rows - counted, &upto);
			/* a partition with no row counted says nothing of the bound */
			if (here > 0)
				highest_counted = Max(highest_counted, upto);
			counted += here;
			if (counted >= max_rows)
				bound = highest_counted;
		}
	}
	/*
	 * Only the partitions read are locked (as the query will): one dropped
	 * meanwhile is left out.
	 */
	initStringInfo(&source);
	i = 0;
	foreach(lc, chosen)
	{
		Oid			leaf = lfirst_oid(lc);

		LockRelationOid(leaf, AccessShareLock);
		if (!SearchSysCacheExists1(RELOID, ObjectIdGetDatum(leaf)))
		{
			UnlockRelationOid(leaf, AccessShareLock);
			continue;
		}
		appendStringInfo(&source, "%sSELECT %s FROM ONLY %s",
						 i > 0 ? " UNION ALL " : "",
						 columns.data, qualified(leaf));
		i++;
	}
	if (i == 0)
		PG_RETURN_TEXT_P(cstring_to_text(psprintf("(SELECT %s FROM %s WHERE false)",
												  columns.data, qualified(relid))));
	PG_RETURN_TEXT_P(cstring_to_text(psprintf("(%s)", source.data)));
}
