/*-------------------------------------------------------------------------
 *
 * commit.c
 *	  The commit-time write: at pre-commit, the rows the transaction
 *	  stored in stream tables (captured as they were stored, capture.c)
 *	  get their numbers, in the order they were stored, and the
 *	  transaction's outcome is recorded at commit or abort (xactstate.c).
 *	  Here are the transaction callbacks that drive it.
 *
 * The write, for each stream: one reservation of as many numbers as rows
 * were captured, made at once (xactstate.c, counter.c); then, page by
 * page, the rows of each table of the stream are numbered in place, in
 * the 8 bytes their placeholders took (pagewrite.c), under one exclusive
 * lock of the page and with one WAL record; once the page is released,
 * the indexes that cover the stream column (or the time column) get their
 * one entry for each row.  See pagewrite.c for why this is sound, and
 * the conditions checked here for each row and table.
 *
 * A row the in-place write does not serve gets its number by an ordinary
 * update, as any update would set it (a new version, an entry in every
 * index): with wal_level logical (logical decoding does not decode the
 * in-place record, and must see the number as an update); on a table
 * with an index on the stream column whose predicate the placeholder row
 * satisfies (an index without one holds an entry under the placeholder,
 * which an in-place write would leave pointing at a numbered row); for a
 * row inserted without the placeholders (a NULL written explicitly); a
 * row the transaction updated, locked or deleted before commit (its live
 * version is followed, or none numbered).  A row COPY ... FREEZE stored
 * frozen is numbered in place: its table's storage is new in the
 * transaction, unreadable to other sessions until the commit.  A
 * captured row that is gone (deleted, super-deleted by INSERT ... ON
 * CONFLICT) leaves a gap in the numbers, which is allowed.
 *
 * A table whose storage changed after rows were captured in it (TRUNCATE,
 * ALTER TABLE rewriting it, CLUSTER, in this transaction) is read whole
 * for the rows this transaction stored, which the captured TIDs no longer
 * find; they are numbered after the stream's other rows, in their order
 * in the table.  A table dropped since, or no longer a stream, has
 * nothing to number.
 *
 * Runs at pre-commit, after the deferred triggers and the portals (a row
 * a deferred trigger inserts is captured before), before the commit
 * record: an error aborts the transaction as any other.  A row stored
 * after it began (another extension's pre-commit callback) is refused.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/relscan.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/index.h"
#include "catalog/pg_am.h"
#include "catalog/pg_am_d.h"
#include "catalog/pg_opfamily.h"
#include "access/stratnum.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/optimizer.h"
#include "pgstat.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "tcop/utility.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

#include "stream_seq.h"
#include "commit.h"
#include "capture.h"
#include "catalog.h"
#include "counter.h"
#include "pagewrite.h"
#include "partition.h"
#include "xactstate.h"

/*
 * A row to number: where it is, and its rank among the rows of its
 * stream, in the order they were stored; its number is the first the
 * stream's reservation holds plus its rank.
 */
typedef struct PassRow
{
	ItemPointerData tid;
	int64		rank;
} PassRow;

/* An index that covers the stream or time column, as the write sees it. */
typedef struct WriteIndex
{
	Relation	index;
	IndexInfo  *info;
	bool		simple;			/* its key is made of the stream and time
								 * columns only, and a numbered row
								 * satisfies its predicate whatever else it
								 * holds: no evaluation needed */
	bool		unique;
	ExprState  *predicate;		/* prepared on first use */
} WriteIndex;

/* The write's state for one table: the stream table or a partition. */
typedef struct TableWrite
{
	Relation	rel;
	StreamRef  *ref;
	AttrNumber	seq_attnum;
	AttrNumber	time_attnum;
	TimestampTz at;				/* the time of the stream's reservation */
	bool		in_place;		/* rows may be numbered in place */
	bool		new_storage;	/* the table's storage was created by this
								 * transaction: no other session can have
								 * read its pages */
	bool		scanned;		/* the rows were found by reading the table
								 * (rows_of_rewritten): each is the version
								 * that is live now */
	bool		needs_tuples;	/* some index needs the numbered row */
	struct TableIndexes *cached;	/* what is kept of the table (its recent
								 * buffer) */
	int			nindexes;
	WriteIndex *indexes;
	EState	   *estate;			/* for expressions, made on first need */
	TupleTableSlot *slot;
	/* the ordinary update, made on first need */
	ResultRelInfo *rri;
	TupleTableSlot *newslot;
	TupleTableSlot *fetchslot;
	bool		pushed_snapshot;
} TableWrite;

/*
 * A stream the transaction stored rows in, during the write: its one
 * reservation, of a number for each row, made at the first page written.
 */
typedef struct PassStream
{
	StreamRef  *ref;
	int64		count;			/* rows to number */
	bool		reserved;
	int64		lo;				/* the reservation: [lo, lo + count) */
	TimestampTz at;				/* its time */
	int64		first;			/* lowest and highest number written */
	int64		last;
	int64		written;
} PassStream;

/*
 * A table the transaction stored rows in, during the write: the table as
 * it is now, its stream and its rows to number.
 */
typedef struct PassTable
{
	Relation	rel;
	StreamTarget *target;
	int			stream;			/* index into the pass's streams, -1 none */
	bool		rewritten;		/* its rows are found by reading it */
	PassRow    *rows;
	int64		nrows;
} PassTable;

/* What the reservation's logger writes: the first page (page_logger). */
typedef struct FirstPage
{
	TableWrite *tw;
	Buffer		buffer;
	StreamPageRow *rows;		/* "number" holds the rank until then */
	int			nrows;
} FirstPage;

static ProcessUtility_hook_type prev_process_utility = NULL;

/*
 * What the write needs to know of a table's indexes, cached per table
 * until this backend processes a relation cache invalidation (of any
 * relation; an index's creation, readiness, predicate or removal sends
 * one for its table): which of them cover the stream or time column,
 * and what the planner's proofs say about their predicates.  So the
 * write decides from the indexes as the relation cache has them at the
 * write, and most transactions open only the indexes they insert into.
 */
typedef struct CoveringIndex
{
	Oid			indexoid;
	bool		simple;			/* see WriteIndex */
	IndexInfo  *info;			/* for a simple btree index, kept (btree
								 * reads nothing of it); else NULL */
} CoveringIndex;

typedef struct TableIndexes
{
	Oid			relid;			/* hash key */
	uint64		checked_at;		/* relcache_changes when computed */
	bool		in_place;		/* no index keeps the write from it */
	bool		valid;
	int			ncovering;
	CoveringIndex *covering;	/* in cxt */
	MemoryContext cxt;			/* of what is kept */
	/*
	 * The buffer of the last page the write locked in this table, a hint
	 * only: ReadRecentBuffer checks that it still holds that page of the
	 * table's present storage before pinning it, and a wrong hint costs
	 * a ReadBuffer.
	 */
	BlockNumber recent_block;
	Buffer		recent_buffer;
} TableIndexes;

static HTAB *table_indexes = NULL;
static TableIndexes *last_table_indexes = NULL;

/*
 * What the commit-time write allocates, emptied when it ends and when its
 * transaction aborts (an error in the middle of it): made once, as
 * creating and deleting a context for each commit costs more than
 * emptying one.
 */
static MemoryContext pass_cxt = NULL;
static uint64 relcache_changes = 1;

/*
 * count_relcache_change
 *		Relcache callback: every invalidation processed makes the index
 *		facts computed before it stale (TableIndexes).  Must not fail.
 */
static void
count_relcache_change(Datum arg, Oid relid)
{
	relcache_changes++;
}

/*
 * column_clause
 *		"column op constant" over the indexed table (varno 1, as in index
 *		predicates), for the planner's proofs.
 */
static Expr *
column_clause(AttrNumber attnum, Oid type, Oid opno, Datum value)
{
	Expr	   *clause;

	clause = make_opclause(opno, BOOLOID, false,
						   (Expr *) makeVar(1, attnum, type, -1, InvalidOid, 0),
						   (Expr *) makeConst(type, -1, InvalidOid, 8, value,
											  false, FLOAT8PASSBYVAL),
						   InvalidOid, InvalidOid);
	set_opfuncid((OpExpr *) clause);
	return clause;
}

/*
 * index_covers_column
 *		Whether an index's key, expressions or predicate use column
 *		"attnum", or the whole row (a row-typed argument, "t IS NOT NULL").
 */
static bool
index_covers_column(IndexInfo *info, AttrNumber attnum)
{
	Bitmapset  *attrs = NULL;
	int			i;

	if (attnum == InvalidAttrNumber)
		return false;
	for (i = 0; i < info->ii_NumIndexAttrs; i++)
	{
		if (info->ii_IndexAttrNumbers[i] == attnum)
			return true;
	}
	pull_varattnos((Node *) info->ii_Expressions, 1, &attrs);
	pull_varattnos((Node *) info->ii_Predicate, 1, &attrs);
	return bms_is_member(attnum - FirstLowInvalidHeapAttributeNumber, attrs) ||
		bms_is_member(InvalidAttrNumber - FirstLowInvalidHeapAttributeNumber, attrs);
}

/*
 * index_is_summarizing
 *		Whether an index only summarizes ranges of blocks (BRIN): its entry
 *		for a row widens a summary, so the placeholder it saw at INSERT does
 *		no harm, and the number is added to the summary too.
 */
static bool
index_is_summarizing(Relation index, IndexInfo *info)
{
#if PG_VERSION_NUM >= 160000
	return info->ii_Summarizing;
#else
	return index->rd_rel->relam == BRIN_AM_OID;
#endif
}

/*
 * index_facts
 *		Whether an index of a stream table (or partition) with the stream
 *		column "seq" and the time column "at" covers one of them, whether
 *		its predicate excludes the placeholder row, and whether it is
 *		simple (see WriteIndex).
 */
static void
index_facts(Relation index, IndexInfo *info, AttrNumber seq, AttrNumber at,
			bool *covers, bool *excludes_placeholder, bool *simple)
{
	List	   *placeholder;
	List	   *numbered;
	int			i;

	*covers = index_covers_column(info, seq) || index_covers_column(info, at);
	*excludes_placeholder = false;
	*simple = false;
	if (!*covers)
		return;

	/* "seq = 0" refutes the predicate; "seq > 0" implies it */
	placeholder = list_make1(column_clause(seq, INT8OID,
										   get_opfamily_member(INTEGER_BTREE_FAM_OID, INT8OID, INT8OID,
															   BTEqualStrategyNumber),
										   Int64GetDatum(STREAM_SEQ_PLACEHOLDER)));
	numbered = list_make1(column_clause(seq, INT8OID,
										get_opfamily_member(INTEGER_BTREE_FAM_OID, INT8OID, INT8OID,
															BTGreaterStrategyNumber),
										Int64GetDatum(STREAM_SEQ_PLACEHOLDER)));
	*excludes_placeholder = info->ii_Predicate != NIL &&
		predicate_refuted_by(info->ii_Predicate, placeholder, false);
	*simple = info->ii_Expressions == NIL &&
		info->ii_ExclusionOps == NULL &&
		(info->ii_Predicate == NIL ||
		 predicate_implied_by(info->ii_Predicate, numbered, false));
	for (i = 0; i < info->ii_NumIndexAttrs && *simple; i++)
	{
		AttrNumber	attnum = info->ii_IndexAttrNumbers[i];

		if (attnum != seq && (attnum != at || at == InvalidAttrNumber))
			*simple = false;
	}
}

/*
 * stream_index_admits_placeholder
 *		Whether "index", an index of a stream table (or partition) with the
 *		stream column "seq" and the time column "at", takes a row that holds
 *		the placeholders: it covers one of them and its predicate does not
 *		leave such a row out.  A unique or exclusion index like that would
 *		find every two unnumbered rows in conflict; any index like that
 *		keeps the table's rows from being numbered in place.
 */
bool
stream_index_admits_placeholder(Relation index, AttrNumber seq, AttrNumber at)
{
	IndexInfo  *info = BuildIndexInfo(index);
	bool		covers;
	bool		excludes;
	bool		simple;

	if (stream_is_capture_index(index))
		return false;
	index_facts(index, info, seq, at, &covers, &excludes, &simple);
	return covers && !excludes && !index_is_summarizing(index, info);
}

/*
 * table_indexes_of
 *		The cached facts of the indexes of "rel" (see TableIndexes),
 *		computed again when stale: the relation's index list, each index
 *		that takes inserts (indisready) and is not the capture index.
 */
static TableIndexes *
table_indexes_of(Relation rel, AttrNumber seq, AttrNumber at)
{
	Oid			relid = RelationGetRelid(rel);
	TableIndexes *ti;
	bool		found;
	List	   *indexes;
	ListCell   *lc;
	MemoryContext oldcxt;

	if (table_indexes == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(Oid);
		ctl.entrysize = sizeof(TableIndexes);
		ctl.hcxt = TopMemoryContext;
		table_indexes = hash_create("stream_seq table indexes", 16, &ctl,
									HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	/* the table of the last call: entries are never removed */
	if (last_table_indexes != NULL && last_table_indexes->relid == relid)
	{
		ti = last_table_indexes;
		found = true;
	}
	else
		ti = hash_search(table_indexes, &relid, HASH_ENTER, &found);
	last_table_indexes = ti;
	if (found && ti->valid && ti->checked_at == relcache_changes)
		return ti;
	if (!found)
	{
		ti->cxt = NULL;
		ti->recent_block = InvalidBlockNumber;
		ti->recent_buffer = InvalidBuffer;
	}
	if (ti->cxt != NULL)
		MemoryContextReset(ti->cxt);
	else
		ti->cxt = AllocSetContextCreate(CacheMemoryContext,
										"stream_seq table indexes",
										ALLOCSET_SMALL_SIZES);
	ti->valid = false;
	ti->checked_at = relcache_changes;
	ti->in_place = true;
	ti->ncovering = 0;
	indexes = RelationGetIndexList(rel);
	ti->covering = MemoryContextAlloc(ti->cxt, sizeof(CoveringIndex) *
									  Max(list_length(indexes), 1));
	foreach(lc, indexes)
	{
		Relation	index = index_open(lfirst_oid(lc), RowExclusiveLock);
		IndexInfo  *info;
		bool		covers;
		bool		excludes;
		bool		simple;

		if (!index->rd_index->indisready || stream_is_capture_index(index))
		{
			index_close(index, NoLock);
			continue;
		}
		info = BuildIndexInfo(index);
		index_facts(index, info, seq, at, &covers, &excludes, &simple);
		if (covers)
		{
			CoveringIndex *ci;

			if (!excludes && !index_is_summarizing(index, info))
				ti->in_place = false;
			ci = &ti->covering[ti->ncovering++];
			ci->indexoid = RelationGetRelid(index);
			ci->simple = simple;
			ci->info = NULL;
			if (simple && index->rd_rel->relam == BTREE_AM_OID)
			{
				oldcxt = MemoryContextSwitchTo(ti->cxt);
				ci->info = BuildIndexInfo(index);
				MemoryContextSwitchTo(oldcxt);
			}
		}
		index_close(index, NoLock);
	}
	list_free(indexes);
	/* an invalidation processed meanwhile makes it stale at once */
	ti->valid = ti->checked_at == relcache_changes;
	return ti;
}

/*
 * open_table_write
 *		The write's state for one table: the indexes that cover the stream
 *		or time column (see table_indexes_of), and whether rows may be
 *		numbered in place (see the top of the file).  The table is locked
 *		since its rows were stored; its indexes are locked here (an INSERT
 *		leaves out those whose predicate is "seq > 0", insertindexes.c).
 */
static void
open_table_write(TableWrite *tw, Relation rel, StreamTarget *target,
				 PassStream *ps)
{
	TableIndexes *ti = table_indexes_of(rel, target->seq_attnum,
										target->time_attnum);
	int			i;

	memset(tw, 0, sizeof(TableWrite));
	tw->rel = rel;
	tw->cached = ti;
	tw->ref = ps->ref;
	tw->seq_attnum = target->seq_attnum;
	tw->time_attnum = target->time_attnum;
	tw->at = ps->at;
	tw->in_place = ti->in_place && stream_seq_in_place &&
		!XLogLogicalInfoActive() &&
		rel->rd_rel->relkind == RELKIND_RELATION &&
		rel->rd_rel->relam == HEAP_TABLE_AM_OID;
	tw->indexes = palloc0(sizeof(WriteIndex) * Max(ti->ncovering, 1));
	for (i = 0; i < ti->ncovering; i++)
	{
		CoveringIndex *ci = &ti->covering[i];
		WriteIndex *wi = &tw->indexes[tw->nindexes++];

		wi->index = index_open(ci->indexoid, RowExclusiveLock);
		wi->info = ci->info != NULL ? ci->info : BuildIndexInfo(wi->index);
		wi->simple = ci->simple;
		wi->unique = wi->index->rd_index->indisunique;
		if (!wi->simple)
			tw->needs_tuples = true;
		if (wi->unique && !wi->index->rd_index->indimmediate)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("stream table \"%s\" has a deferrable unique constraint",
							RelationGetRelationName(rel)),
					 errdetail("Deferrable unique constraints cannot be checked for the rows stream_seq numbers at commit.")));
	}
}

/*
 * writer_estate
 *		An executor state for the indexes' expressions and predicates, made
 *		on first need.
 */
static EState *
writer_estate(TableWrite *tw)
{
	if (tw->estate == NULL)
	{
		tw->estate = CreateExecutorState();
		tw->estate->es_output_cid = GetCurrentCommandId(true);
		tw->slot = MakeSingleTupleTableSlot(RelationGetDescr(tw->rel),
											&TTSOpsHeapTuple);
	}
	return tw->estate;
}

/*
 * push_snapshot
 *		What the ordinary update and the evaluation of expressions may
 *		need (TOAST, functions): an active snapshot.  At pre-commit there
 *		is none.
 */
static void
push_snapshot(TableWrite *tw)
{
	if (!tw->pushed_snapshot)
	{
		PushActiveSnapshot(GetTransactionSnapshot());
		tw->pushed_snapshot = true;
	}
}

/*
 * index_numbered_row
 *		Give a numbered row its entries in the indexes that cover the
 *		stream or time column: "tid" is where it is (the version a
 *		numbered row is, in place or updated), "tuple" the numbered row
 *		(needed only for indexes that are not simple).
 */
static void
index_numbered_row(TableWrite *tw, ItemPointer tid, int64 number,
				   HeapTuple tuple)
{
	int			i;

	for (i = 0; i < tw->nindexes; i++)
	{
		WriteIndex *wi = &tw->indexes[i];
		Datum		values[INDEX_MAX_KEYS];
		bool		isnull[INDEX_MAX_KEYS];
		IndexUniqueCheck check = wi->unique ? UNIQUE_CHECK_YES : UNIQUE_CHECK_NO;

		if (wi->simple)
		{
			int			k;

			for (k = 0; k < wi->info->ii_NumIndexAttrs; k++)
			{
				isnull[k] = false;
				values[k] = wi->info->ii_IndexAttrNumbers[k] == tw->seq_attnum ?
					Int64GetDatum(number) : TimestampTzGetDatum(tw->at);
			}
		}
		else
		{
			EState	   *estate = writer_estate(tw);
			ExprContext *econtext = GetPerTupleExprContext(estate);

			push_snapshot(tw);
			ExecStoreHeapTuple(tuple, tw->slot, false);
			econtext->ecxt_scantuple = tw->slot;
			if (wi->info->ii_Predicate != NIL)
			{
				if (wi->predicate == NULL)
					wi->predicate = ExecPrepareQual(wi->info->ii_Predicate, estate);
				if (!ExecQual(wi->predicate, econtext))
					continue;
			}
			FormIndexDatum(wi->info, tw->slot, estate, values, isnull);
		}
		(void) index_insert(wi->index, values, isnull, tid, tw->rel, check,
							false, wi->info);
		if (!wi->simple && wi->info->ii_ExclusionOps != NULL)
			check_exclusion_constraint(tw->rel, wi->index, wi->info, tid,
									   values, isnull, tw->estate, false);
		if (!wi->simple)
		{
			ResetPerTupleExprContext(tw->estate);
			ExecClearTuple(tw->slot);
		}
	}
}

/*
 * open_updater
 *		Executor state for numbering rows by an ordinary update, made on
 *		first need: every index of the table but the capture index gets an
 *		entry for the new version.
 */
static void
open_updater(TableWrite *tw)
{
	if (tw->rri != NULL)
		return;
	push_snapshot(tw);
	(void) writer_estate(tw);
	tw->rri = makeNode(ResultRelInfo);
	InitResultRelInfo(tw->rri, tw->rel, 1, NULL, 0);
	ExecOpenIndices(tw->rri, false);
	tw->newslot = MakeSingleTupleTableSlot(RelationGetDescr(tw->rel),
										   &TTSOpsVirtual);
	tw->fetchslot = table_slot_create(tw->rel, NULL);
}

/*
 * index_updated_row
 *		Index the version an ordinary update made: the indexes that cover
 *		the stream or time column get its new key, checked as usual (unique,
 *		exclusion); every other index gets the key the row had, which was
 *		checked when it was stored and which no other transaction can have
 *		taken since (the old version still holds it), without a check and
 *		told that the key did not change.  The capture index gets nothing.
 */
static void
index_updated_row(TableWrite *tw, TupleTableSlot *slot)
{
	ResultRelInfo *rri = tw->rri;
	ExprContext *econtext = GetPerTupleExprContext(tw->estate);
	int			i;

	econtext->ecxt_scantuple = slot;
	for (i = 0; i < rri->ri_NumIndices; i++)
	{
		Relation	index = rri->ri_IndexRelationDescs[i];
		IndexInfo  *info = rri->ri_IndexRelationInfo[i];
		Datum		values[INDEX_MAX_KEYS];
		bool		isnull[INDEX_MAX_KEYS];
		IndexUniqueCheck check = UNIQUE_CHECK_NO;
		bool		key_changes;

		if (index == NULL || !info->ii_ReadyForInserts ||
			stream_is_capture_index(index))
			continue;
		if (info->ii_Predicate != NIL)
		{
			if (info->ii_PredicateState == NULL)
				info->ii_PredicateState = ExecPrepareQual(info->ii_Predicate,
														  tw->estate);
			if (!ExecQual(info->ii_PredicateState, econtext))
				continue;
		}
		key_changes = index_covers_column(info, tw->seq_attnum) ||
			index_covers_column(info, tw->time_attnum);
		FormIndexDatum(info, slot, tw->estate, values, isnull);
		if (key_changes && index->rd_index->indisunique)
			check = UNIQUE_CHECK_YES;
		(void) index_insert(index, values, isnull, &slot->tts_tid, tw->rel,
							check, !key_changes, info);
		if (key_changes && info->ii_ExclusionOps != NULL)
			check_exclusion_constraint(tw->rel, index, info, &slot->tts_tid,
									   values, isnull, tw->estate, false);
	}
	ResetPerTupleExprContext(tw->estate);
}

/*
 * update_row
 *		Update the live version of the row stored at "tid" (following
 *		updates the transaction made), as an ordinary update: give it
 *		"number" (unless 0: then it keeps its own) and the time "at" (on a
 *		stream with a time column).  Nothing if it was deleted, or if a
 *		number is to be given and it has one.  Returns whether a row was
 *		updated.
 */
static bool
update_row(TableWrite *tw, ItemPointer tid, int64 number, TimestampTz at)
{
	ItemPointerData live = *tid;
	TableScanDesc scan;
	TupleTableSlot *row;
	HeapTuple	htup;
	TM_FailureData tmfd;
	LockTupleMode lockmode;
#if PG_VERSION_NUM >= 160000
	TU_UpdateIndexes update_indexes;
#else
	bool		update_indexes;
#endif
	TM_Result	result;
	AttrNumber	att = tw->seq_attnum;

	open_updater(tw);
	row = tw->fetchslot;
	scan = table_beginscan_tid(tw->rel, SnapshotSelf);
	table_tuple_get_latest_tid(scan, &live);
	table_endscan(scan);
	if (!table_tuple_fetch_row_version(tw->rel, &live, SnapshotSelf, row))
		return false;
	slot_getallattrs(row);
	if (number != 0 && !row->tts_isnull[att - 1] &&
		DatumGetInt64(row->tts_values[att - 1]) != STREAM_SEQ_PLACEHOLDER)
	{
		ExecClearTuple(row);
		return false;			/* numbered already (an update kept a number) */
	}

	/* the row must be visible to the update: it may be from this command */
	htup = ExecFetchSlotHeapTuple(row, false, NULL);
	if (!HeapTupleHeaderXminFrozen(htup->t_data) &&
		HeapTupleHeaderGetCmin(htup->t_data) >= GetCurrentCommandId(false))
		CommandCounterIncrement();

	ExecClearTuple(tw->newslot);
	memcpy(tw->newslot->tts_values, row->tts_values,
		   sizeof(Datum) * row->tts_nvalid);
	memcpy(tw->newslot->tts_isnull, row->tts_isnull,
		   sizeof(bool) * row->tts_nvalid);
	if (number != 0)
	{
		tw->newslot->tts_values[att - 1] = Int64GetDatum(number);
		tw->newslot->tts_isnull[att - 1] = false;
	}
	if (tw->time_attnum != InvalidAttrNumber)
	{
		tw->newslot->tts_values[tw->time_attnum - 1] = TimestampTzGetDatum(at);
		tw->newslot->tts_isnull[tw->time_attnum - 1] = false;
	}
	ExecStoreVirtualTuple(tw->newslot);
	result = table_tuple_update(tw->rel, &live, tw->newslot,
								GetCurrentCommandId(true), GetActiveSnapshot(),
								InvalidSnapshot, true, &tmfd, &lockmode,
								&update_indexes);
	if (result != TM_Ok)
		elog(ERROR, "could not write the number of a row of stream table \"%s\": %d",
			 RelationGetRelationName(tw->rel), (int) result);
	index_updated_row(tw, tw->newslot);
	ExecClearTuple(tw->newslot);
	ExecClearTuple(row);
	return true;
}

/*
 * close_table_write
 *		Release what open_table_write and its users made.
 */
static void
close_table_write(TableWrite *tw)
{
	int			i;

	if (tw->rri != NULL)
	{
		ExecDropSingleTupleTableSlot(tw->newslot);
		ExecDropSingleTupleTableSlot(tw->fetchslot);
		ExecCloseIndices(tw->rri);
	}
	if (tw->slot != NULL)
		ExecDropSingleTupleTableSlot(tw->slot);
	if (tw->estate != NULL)
		FreeExecutorState(tw->estate);
	for (i = 0; i < tw->nindexes; i++)
	{
#if PG_VERSION_NUM >= 170000
		/* what an access method keeps between inserts (BRIN: a pin) */
		index_insert_cleanup(tw->indexes[i].index, tw->indexes[i].info);
#endif
		index_close(tw->indexes[i].index, NoLock);
	}
	if (tw->pushed_snapshot)
		PopActiveSnapshot();
}

/*
 * raise_times
 *		Give the replicated rows of the transaction whose time would go down
 *		(capture.c, replica_time) their raised time.
 */
static void
raise_times(CapturedRel *rels, int nrels)
{
	CapturedTimeFix *fixes;
	int64		nfixes = stream_captured_time_fixes(&fixes);
	int			r;
	int64		i;

	for (r = 0; r < nrels && nfixes > 0; r++)
	{
		TableWrite	tw;
		PassStream	ps;
		Relation	rel = NULL;

		for (i = 0; i < nfixes; i++)
		{
			if (fixes[i].rel != r)
				continue;
			if (rel == NULL)
			{
				StreamTarget *target;

				if (!SearchSysCacheExists1(RELOID, ObjectIdGetDatum(rels[r].relid)))
					break;		/* dropped since */
				rel = table_open(rels[r].relid, RowExclusiveLock);
				target = stream_capture_target(&rels[r]);
				memset(&ps, 0, sizeof(ps));
				ps.ref = stream_lookup(target->stream, false);
				open_table_write(&tw, rel, target, &ps);
			}
			(void) update_row(&tw, &fixes[i].tid, 0, fixes[i].at);
		}
		if (rel != NULL)
		{
			close_table_write(&tw);
			table_close(rel, NoLock);
		}
	}
}

/*
 * note_written
 *		Count a number written on the stream.
 */
static void
note_written(PassStream *ps, int64 number)
{
	if (ps->written == 0 || number < ps->first)
		ps->first = number;
	if (number > ps->last)
		ps->last = number;
	ps->written++;
}

/*
 * page_logger
 *		The logger of the stream's reservation (StreamReservationLogger),
 *		called under the stream's lock: the first page's rows get their
 *		numbers, and its record carries the reservation.
 */
static void
page_logger(StreamReservation *res, void *arg)
{
	FirstPage  *page = arg;
	int			i;

	for (i = 0; i < page->nrows; i++)
		page->rows[i].number += res->lo;
	stream_page_write(page->tw->rel, page->buffer, page->rows, page->nrows,
					  res->numbered_at, res);
}

/*
 * reserve
 *		The stream's reservation, made without a page: its record is one of
 *		its own.
 */
static void
reserve(PassStream *ps)
{
	if (ps->reserved || ps->count == 0)
		return;
	(void) stream_xact_take_numbers(ps->ref, ps->count, &ps->lo, &ps->at,
									NULL, NULL);
	ps->reserved = true;
}

/*
 * read_page
 *		Pin block "blkno" of the table: the buffer that held it when the
 *		write last locked a page of the table, if it still holds it (the
 *		last page of a table written by small transactions, most often),
 *		found without a lookup in the buffer mapping table; else as
 *		ReadBuffer finds it.
 */
static Buffer
read_page(TableWrite *tw, BlockNumber blkno)
{
	TableIndexes *ti = tw->cached;
	Buffer		buffer;

	if (ti->recent_block == blkno && BufferIsValid(ti->recent_buffer) &&
#if PG_VERSION_NUM >= 160000
		ReadRecentBuffer(tw->rel->rd_locator, MAIN_FORKNUM, blkno,
						 ti->recent_buffer)
#else
		ReadRecentBuffer(tw->rel->rd_node, MAIN_FORKNUM, blkno,
						 ti->recent_buffer)
#endif
		)
		return ti->recent_buffer;
	buffer = ReadBuffer(tw->rel, blkno);
	ti->recent_block = blkno;
	ti->recent_buffer = buffer;
	return buffer;
}

/*
 * write_page
 *		Number the rows "rows" (all on block "blkno" of the table): in
 *		place those that may be, under one lock of the page and one WAL
 *		record; the others are added to *updates for the ordinary update.
 *		The stream's reservation is made at its first page with rows
 *		numbered in place, under that page's lock, and carried by its
 *		record.  Then the index entries of the rows numbered in place.
 */
static void
write_page(TableWrite *tw, PassStream *ps, BlockNumber blkno,
		   PassRow *rows, int nrows, List **updates)
{
	Buffer		buffer;
	Page		page;
	OffsetNumber maxoff;
	TupleDesc	desc = RelationGetDescr(tw->rel);
	StreamPageRow *prows = palloc(sizeof(StreamPageRow) * nrows);
	HeapTuple  *tuples = NULL;
	List	   *page_updates;
	int			nprows;
	int			i;

retry:
	page_updates = NIL;
	nprows = 0;
	buffer = read_page(tw, blkno);
	LockBuffer(buffer, BUFFER_LOCK_EXCLUSIVE);
	page = BufferGetPage(buffer);
	maxoff = PageGetMaxOffsetNumber(page);
	for (i = 0; i < nrows; i++)
	{
		OffsetNumber offnum = ItemPointerGetOffsetNumber(&rows[i].tid);
		ItemId		lp;
		HeapTupleHeader htup;
		StreamPageRow *prow;
		int64		value;

		if (offnum < FirstOffsetNumber || offnum > maxoff)
			continue;
		lp = PageGetItemId(page, offnum);
		if (!ItemIdIsNormal(lp))
			continue;
		htup = (HeapTupleHeader) PageGetItem(page, lp);

		/* stored by this transaction, and kept (not a super-deleted row) */
		if (HeapTupleHeaderXminInvalid(htup) ||
			!TransactionIdIsCurrentTransactionId(HeapTupleHeaderGetRawXmin(htup)))
			continue;
		/*
		 * An UPDATE's version: reached from the version it updated, which
		 * was captured too.  Found by reading a rewritten table, it is the
		 * row's live version and the version it updated is gone: numbered
		 * by the ordinary update (a heap-only version cannot take an index
		 * entry of its own).
		 */
		if ((htup->t_infomask & HEAP_UPDATED) != 0 ||
			HeapTupleHeaderIsHeapOnly(htup))
		{
			if (tw->scanned)
				page_updates = lappend(page_updates, &rows[i]);
			continue;
		}
		/*
		 * A row COPY ... FREEZE stored frozen is visible to every snapshot
		 * that can read the table, older ones included.  Its table's
		 * storage is new in this transaction (COPY FREEZE needs it), so no
		 * other session can read the page before the commit, and the
		 * number written in place is what every snapshot sees of it
		 * afterwards; an update would leave older snapshots the frozen
		 * version with the placeholder.
		 */
		if (!tw->in_place ||
			(htup->t_infomask & HEAP_XMAX_INVALID) == 0 ||
			(HeapTupleHeaderXminCommitted(htup) &&
			 !(HeapTupleHeaderXminFrozen(htup) && tw->new_storage)))
		{
			page_updates = lappend(page_updates, &rows[i]);
			continue;
		}

		prow = &prows[nprows];
		prow->offnum = offnum;
		prow->number = rows[i].rank;
		prow->seq_off = stream_tuple_value_offset(desc, htup, tw->seq_attnum);
		prow->time_off = 0;
		if (prow->seq_off == 0)
		{
			/* inserted with NULL */
			page_updates = lappend(page_updates, &rows[i]);
			continue;
		}
		memcpy(&value, (char *) htup + prow->seq_off, sizeof(int64));
		if (value != STREAM_SEQ_PLACEHOLDER)
			continue;
		if (tw->time_attnum != InvalidAttrNumber)
		{
			TimestampTz at;

			prow->time_off = stream_tuple_value_offset(desc, htup, tw->time_attnum);
			if (prow->time_off != 0)
				memcpy(&at, (char *) htup + prow->time_off, sizeof(TimestampTz));
			if (prow->time_off == 0 || at != STREAM_TIME_PLACEHOLDER)
			{
				page_updates = lappend(page_updates, &rows[i]);
				continue;
			}
		}
		nprows++;
	}

	if (nprows > 0 && !ps->reserved)
	{
		FirstPage	first;

		first.tw = tw;
		first.buffer = buffer;
		first.rows = prows;
		first.nrows = nprows;
		if (!stream_xact_take_numbers(ps->ref, ps->count, &ps->lo, &ps->at,
									  page_logger, &first))
		{
			/* catalog work is due first (another took numbers meanwhile) */
			UnlockReleaseBuffer(buffer);
			list_free(page_updates);
			stream_prepare_numbers(ps->ref, ps->count);
			goto retry;
		}
		ps->reserved = true;
	}
	else if (nprows > 0)
	{
		for (i = 0; i < nprows; i++)
			prows[i].number += ps->lo;
		stream_page_write(tw->rel, buffer, prows, nprows, ps->at, NULL);
	}
	if (nprows > 0 && tw->needs_tuples)
	{
		/* the numbered rows, for the indexes that need more than it */
		tuples = palloc(sizeof(HeapTuple) * nprows);
		for (i = 0; i < nprows; i++)
		{
			ItemId		lp = PageGetItemId(page, prows[i].offnum);
			HeapTupleData tuple;

			tuple.t_data = (HeapTupleHeader) PageGetItem(page, lp);
			tuple.t_len = ItemIdGetLength(lp);
			tuple.t_tableOid = RelationGetRelid(tw->rel);
			ItemPointerSet(&tuple.t_self, blkno, prows[i].offnum);
			tuples[i] = heap_copytuple(&tuple);
		}
	}
	UnlockReleaseBuffer(buffer);
	*updates = list_concat(*updates, page_updates);

	tw->at = ps->at;
	for (i = 0; i < nprows; i++)
	{
		ItemPointerData tid;

		ItemPointerSet(&tid, blkno, prows[i].offnum);
		index_numbered_row(tw, &tid, prows[i].number,
						   tuples != NULL ? tuples[i] : NULL);
		note_written(ps, prows[i].number);
		if (tuples != NULL)
			heap_freetuple(tuples[i]);
	}
	pfree(prows);
	if (tuples != NULL)
		pfree(tuples);
}

/*
 * compare_pass_rows
 *		qsort: by TID, then by number (the later of two rows captured at
 *		one TID is the one there now).
 */
static int
compare_pass_rows(const void *a, const void *b)
{
	const PassRow *ra = a;
	const PassRow *rb = b;
	int			c = ItemPointerCompare((ItemPointer) &ra->tid, (ItemPointer) &rb->tid);

	if (c != 0)
		return c;
	return ra->rank < rb->rank ? -1 : ra->rank > rb->rank ? 1 : 0;
}

/*
 * write_table
 *		Number the rows "rows" of one table, page by page, then by an
 *		ordinary update those the in-place write does not serve.
 *		"scanned": the rows were found by reading the table (see
 *		rows_of_rewritten), not captured.
 */
static void
write_table(Relation rel, StreamTarget *target, PassStream *ps,
			PassRow *rows, int64 nrows, bool scanned)
{
	TableWrite	tw;
	List	   *updates = NIL;
	ListCell   *lc;
	BlockNumber nblocks = InvalidBlockNumber;	/* no page is past the end */
	bool		new_storage;
	bool		sorted = true;
	int64		i;
	int64		kept;

	for (i = 1; i < nrows && sorted; i++)
		sorted = ItemPointerCompare(&rows[i - 1].tid, &rows[i].tid) < 0;
	if (!sorted)
	{
		qsort(rows, nrows, sizeof(PassRow), compare_pass_rows);
		/* of rows captured at one TID, the last one is there now */
		kept = 0;
		for (i = 0; i < nrows; i++)
		{
			if (i + 1 < nrows && ItemPointerEquals(&rows[i].tid, &rows[i + 1].tid))
				continue;
			rows[kept++] = rows[i];
		}
		nrows = kept;
	}

	/*
	 * A table whose storage this transaction created (CREATE TABLE, or a
	 * TRUNCATE or rewrite earlier in it) is truncated in place by a
	 * TRUNCATE, keeping its storage: rows captured before point past its
	 * end (they are gone), or at rows stored since, captured again later
	 * (the later capture is kept, above).
	 */
	new_storage = rel->rd_createSubid != InvalidSubTransactionId ||
		stream_rel_first_storage_subid(rel) != InvalidSubTransactionId;
	if (new_storage)
		nblocks = RelationGetNumberOfBlocks(rel);

	open_table_write(&tw, rel, target, ps);
	tw.new_storage = new_storage;
	tw.scanned = scanned;
	i = 0;
	while (i < nrows)
	{
		BlockNumber blkno = ItemPointerGetBlockNumber(&rows[i].tid);
		int64		j = i + 1;

		while (j < nrows && ItemPointerGetBlockNumber(&rows[j].tid) == blkno)
			j++;
		if (blkno >= nblocks)
		{
			i = j;
			continue;
		}

		/*
		 * A cancel between two pages (no lock held) aborts the
		 * transaction, as an error of the write does: the rows numbered
		 * so far die with it, their numbers a gap.  Without it a commit
		 * of millions of rows could not be cancelled or terminated.
		 */
		CHECK_FOR_INTERRUPTS();
		write_page(&tw, ps, blkno, &rows[i], (int) (j - i), &updates);
		i = j;
	}
	if (updates != NIL)
	{
		reserve(ps);
		tw.at = ps->at;
	}
	foreach(lc, updates)
	{
		PassRow    *row = lfirst(lc);

		CHECK_FOR_INTERRUPTS();
		if (update_row(&tw, &row->tid, ps->lo + row->rank, ps->at))
			note_written(ps, ps->lo + row->rank);
	}
	close_table_write(&tw);
}

/*
 * rows_of_rewritten
 *		The rows of "rel" that this transaction stored and that are still
 *		unnumbered, read from the whole table (its storage changed since
 *		they were captured), in their order there.
 */
static PassRow *
rows_of_rewritten(Relation rel, StreamTarget *target, int64 *nrows)
{
	TableScanDesc scan;
	HeapTuple	tuple;
	PassRow    *rows = NULL;
	int64		n = 0;
	int64		size = 0;

	PushActiveSnapshot(GetTransactionSnapshot());
	scan = table_beginscan(rel, GetActiveSnapshot(), 0, NULL);
	while ((tuple = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		bool		isnull;
		Datum		value;

		/*
		 * A version this transaction stored, by INSERT or by UPDATE: the
		 * scan returns the live version of each row only, so a version an
		 * UPDATE stored is the one to number (the version it replaced,
		 * which would lead the write to it, is not returned).
		 */
		if (!TransactionIdIsCurrentTransactionId(HeapTupleHeaderGetRawXmin(tuple->t_data)))
			continue;
		value = heap_getattr(tuple, target->seq_attnum, RelationGetDescr(rel),
							 &isnull);
		if (!isnull && DatumGetInt64(value) != STREAM_SEQ_PLACEHOLDER)
			continue;
		if (n == size)
		{
			size = Max(64, size * 2);
			rows = rows == NULL ? palloc_extended(size * sizeof(PassRow), MCXT_ALLOC_HUGE) :
				repalloc_huge(rows, size * sizeof(PassRow));
		}
		rows[n].tid = tuple->t_self;
		rows[n].rank = 0;
		n++;
	}
	table_endscan(scan);
	PopActiveSnapshot();
	*nrows = n;
	return rows;
}

/*
 * still_in_stream
 *		Whether "rel", whose rows were captured as those of a stream table
 *		or of a partition of one, still is one: DDL of the transaction
 *		since (DETACH PARTITION, DROP EXTENSION ... CASCADE) may have taken
 *		it out, and its rows have no stream to be numbered in.  Looked up
 *		only when its relcache entry was invalidated since the capture.
 */
static bool
still_in_stream(Relation rel, CapturedRel *crel)
{
	if (crel->target->valid)
		return true;
	if (rel->rd_rel->relispartition)
		return OidIsValid(stream_root_of(RelationGetRelid(rel)));
	return stream_catalog_has(RelationGetRelid(rel));
}

/*
 * open_captured_table
 *		The table "relid" whose rows the transaction stored, or NULL if the
 *		transaction dropped it since.  It is locked since its rows were
 *		stored, by the statements that did, so only this transaction can
 *		have dropped it, and a drop removes its relation cache entry: the
 *		entry found (or built again from pg_class as this transaction sees
 *		it) is the answer, with no catalog lookup of its own.  What
 *		table_open adds (the check of the relation's kind, the flag of a
 *		temporary table's use) was done when its rows were stored.
 */
static Relation
open_captured_table(Oid relid)
{
	Relation	rel = RelationIdGetRelation(relid);

	if (rel == NULL)
		return NULL;
	Assert(CheckRelationLockedByMe(rel, RowExclusiveLock, true));
	pgstat_init_relation(rel);
	return rel;
}

/*
 * number_captured_rows
 *		The commit-time write (see the top of the file).
 */
static void
number_captured_rows(void)
{
	CapturedRow *captured;
	CapturedRel *rels;
	int64		ncaptured = stream_captured(&captured);
	int			nrels = stream_captured_rels(&rels);
	MemoryContext oldcxt;
	PassStream *streams;
	int			nstreams = 0;
	PassTable  *tables;
	int			r;
	int64		i;

	stream_capture_close();
	if (nrels == 0)
		return;
	raise_times(rels, nrels);

	if (pass_cxt == NULL)
		pass_cxt = AllocSetContextCreate(TopMemoryContext,
										 "stream_seq commit-time write",
										 ALLOCSET_DEFAULT_SIZES);
	oldcxt = MemoryContextSwitchTo(pass_cxt);
	streams = palloc0(sizeof(PassStream) * nrels);
	tables = palloc0(sizeof(PassTable) * nrels);

	/* the tables, as they are now, and their streams */
	for (r = 0; r < nrels; r++)
	{
		StreamRef  *ref;
		int			s;

		tables[r].stream = -1;
		if (rels[r].first_row < 0)
			continue;			/* its rows rolled back to a savepoint */
		tables[r].rel = open_captured_table(rels[r].relid);
		if (tables[r].rel == NULL)
			continue;			/* dropped since */
		if (!still_in_stream(tables[r].rel, &rels[r]))
		{
			table_close(tables[r].rel, NoLock);
			tables[r].rel = NULL;
			continue;			/* no longer a stream */
		}
		tables[r].target = stream_capture_target(&rels[r]);
		ref = stream_lookup(tables[r].target->stream, true);
		if (ref == NULL)
		{
			table_close(tables[r].rel, NoLock);
			tables[r].rel = NULL;
			continue;			/* no longer a stream */
		}
		tables[r].rewritten = rels[r].rewritten ||
			memcmp(&rels[r].storage, &stream_rel_storage(tables[r].rel),
				   sizeof(StreamStorage)) != 0;
		for (s = 0; s < nstreams; s++)
		{
			if (streams[s].ref->relid == ref->relid)
				break;
		}
		if (s == nstreams)
			streams[nstreams++].ref = ref;
		tables[r].stream = s;
		if (tables[r].rewritten)
			tables[r].rows = rows_of_rewritten(tables[r].rel,
											   tables[r].target,
											   &tables[r].nrows);
	}
	for (i = 0; i < ncaptured; i++)
	{
		r = captured[i].rel;
		if (tables[r].stream >= 0 && !tables[r].rewritten)
			tables[r].nrows++;
	}

	/*
	 * Each table's rows with their ranks in their stream: in the order they
	 * were stored, then those of rewritten tables.
	 */
	for (r = 0; r < nrels; r++)
	{
		if (tables[r].stream >= 0 && !tables[r].rewritten && tables[r].nrows > 0)
		{
			tables[r].rows = palloc_extended(sizeof(PassRow) *
											 tables[r].nrows,
											 MCXT_ALLOC_HUGE);
			tables[r].nrows = 0;
		}
	}
	for (i = 0; i < ncaptured; i++)
	{
		r = captured[i].rel;
		if (tables[r].stream >= 0 && !tables[r].rewritten)
		{
			PassRow    *row = &tables[r].rows[tables[r].nrows++];

			row->tid = captured[i].tid;
			row->rank = streams[tables[r].stream].count++;
		}
	}
	for (r = 0; r < nrels; r++)
	{
		if (tables[r].stream >= 0 && tables[r].rewritten)
		{
			for (i = 0; i < tables[r].nrows; i++)
				tables[r].rows[i].rank = streams[tables[r].stream].count++;
		}
	}

	/* the catalog work each stream's reservation needs, done first */
	for (r = 0; r < nstreams; r++)
	{
		if (streams[r].count > 0)
			stream_prepare_numbers(streams[r].ref, streams[r].count);
	}

	/* the writes */
	for (r = 0; r < nrels; r++)
	{
		if (tables[r].stream < 0)
			continue;
		if (tables[r].nrows > 0)
			write_table(tables[r].rel, tables[r].target,
						&streams[tables[r].stream], tables[r].rows,
						tables[r].nrows, tables[r].rewritten);
		table_close(tables[r].rel, NoLock);
	}

	for (r = 0; r < nstreams; r++)
	{
		PassStream *ps = &streams[r];

		/* numbers of rows gone at the end of the range (a gap otherwise) */
		if (ps->reserved)
			stream_xact_give_back(ps->ref,
								  ps->written > 0 ? ps->last + 1 : ps->lo,
								  ps->lo + ps->count);
		stream_xact_numbered(ps->ref, ps->first, ps->last, ps->written);
	}
	MemoryContextSwitchTo(oldcxt);
	MemoryContextReset(pass_cxt);
}

/*
 * hold_after_numbering
 *		For tests (stream_seq.hold_after_numbering): a transaction that
 *		numbered rows waits here, holding its numbers, for a shared
 *		advisory lock another session holds; a cancel there aborts it with
 *		its numbers taken (a gap).
 */
static void
hold_after_numbering(void)
{
	if (stream_seq_hold_after_numbering == 0 || !stream_xact_holds_numbers())
		return;
	(void) DirectFunctionCall1(pg_advisory_xact_lock_shared_int8,
							   Int64GetDatum((int64) stream_seq_hold_after_numbering));
}

/*
 * check_prepare
 *		Before PREPARE: refuse a transaction that stored stream rows or
 *		holds numbers (see stream_xact_check_prepare).
 */
static void
check_prepare(void)
{
	CapturedRow *captured;
	CapturedRel *rels;

	if (stream_captured(&captured) > 0)
	{
		(void) stream_captured_rels(&rels);
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot PREPARE a transaction that has written to stream table \"%s\"",
						stream_rel_name(rels[captured[0].rel].target->stream)),
				 errdetail("Stream numbers are assigned at commit, which a prepared transaction would do later without stream_seq.")));
	}
	stream_xact_check_prepare();
}

/*
 * stream_xact_callback
 *		Before commit: the commit-time write, then the rest of the
 *		transaction's state.  At commit or abort: record the outcome.
 *		Before PREPARE: refuse a transaction that wrote to a stream.
 */
static void
stream_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
			number_captured_rows();
			hold_after_numbering();
			stream_xact_pre_commit();
			break;

		case XACT_EVENT_PRE_PREPARE:
			check_prepare();
			break;

		case XACT_EVENT_COMMIT:
			stream_xact_finish(true);
			stream_capture_reset();
			break;

		case XACT_EVENT_ABORT:
		case XACT_EVENT_PREPARE:
			stream_xact_finish(false);
			stream_capture_reset();
			if (pass_cxt != NULL)
				MemoryContextReset(pass_cxt);
			break;

		default:
			break;
	}
}

/*
 * stream_subxact_callback
 *		Keep the capture log right across subtransactions.
 */
static void
stream_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
						SubTransactionId parentSubid, void *arg)
{
	switch (event)
	{
		case SUBXACT_EVENT_START_SUB:
			stream_capture_subxact_start();
			break;
		case SUBXACT_EVENT_COMMIT_SUB:
			stream_capture_subxact_end(true);
			break;
		case SUBXACT_EVENT_ABORT_SUB:
			stream_capture_subxact_end(false);
			break;
		case SUBXACT_EVENT_PRE_COMMIT_SUB:
			break;
	}
}

/*
 * mark_commit_statement
 *		ProcessUtility hook: at a COMMIT statement, show the entries the
 *		transaction made before (enable()) as committing.
 */
static void
mark_commit_statement(PlannedStmt *pstmt, const char *queryString,
					  bool readOnlyTree, ProcessUtilityContext context,
					  ParamListInfo params, QueryEnvironment *queryEnv,
					  DestReceiver *dest, QueryCompletion *qc)
{
	if (IsA(pstmt->utilityStmt, TransactionStmt) &&
		((TransactionStmt *) pstmt->utilityStmt)->kind == TRANS_STMT_COMMIT)
		stream_xact_mark_committing();
	if (prev_process_utility)
		prev_process_utility(pstmt, queryString, readOnlyTree, context,
							 params, queryEnv, dest, qc);
	else
		standard_ProcessUtility(pstmt, queryString, readOnlyTree, context,
								params, queryEnv, dest, qc);
}

/*
 * stream_commit_init
 *		Register the callbacks and the utility hook (from _PG_init).
 */
void
stream_commit_init(void)
{
	RegisterXactCallback(stream_xact_callback, NULL);
	RegisterSubXactCallback(stream_subxact_callback, NULL);
	CacheRegisterRelcacheCallback(count_relcache_change, (Datum) 0);
	prev_process_utility = ProcessUtility_hook;
	ProcessUtility_hook = mark_commit_statement;
}
