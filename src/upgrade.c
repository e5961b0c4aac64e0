/*-------------------------------------------------------------------------
 *
 * upgrade.c
 *	  Moving a stream enabled before 0.7.0 to this version's write path:
 *	  upgrade_write_path(), which ALTER EXTENSION stream_seq UPDATE runs
 *	  for every stream, and which a DBA runs again for a stream whose
 *	  leftover triggers it could not drop.
 *
 * Before 0.7.0 a stream row was stored with NULL in the stream column, by
 * way of a BEFORE INSERT trigger, and numbered by a deferred constraint
 * trigger; indexes on the column had the predicate "seq IS NOT NULL".
 * This version captures rows with an index (capture.c) and stores them
 * with placeholders that the commit-time write overwrites (commit.c).
 * The move, under a ShareRowExclusiveLock on the table (writers wait,
 * readers go on), changes no row:
 *	- the capture index is created (it stores nothing: no scan);
 *	- each index whose predicate is "seq IS NOT NULL" (the stream's
 *	  unique index, groups' slot indexes, indexes of the user made as the
 *	  documentation said) gets "seq > 0" instead, in the catalog: both
 *	  select the same rows once no row has a number below 1, which is
 *	  checked first (a stream with such rows keeps NULL and is numbered by
 *	  an update);
 *	- the columns get the placeholder defaults (stream_set_placeholder_
 *	  defaults, which leaves them out if a unique index would take them);
 *	- the guard trigger and the replica trigger fire for UPDATE only
 *	  (CREATE OR REPLACE TRIGGER); the assignment trigger and the insert
 *	  guard are disabled, and dropped if the table's AccessExclusiveLock
 *	  is free at once (DROP TRIGGER takes it): while they stay, disabled,
 *	  they cost little, but COPY into the table goes on in batches only
 *	  without them; running upgrade_write_path() again drops them.
 * Until it runs, the library numbers such a stream through its old
 * triggers (guard.c): its deferred trigger captures each row, and rows
 * stored with NULL are numbered by an update.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/relation.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "catalog/indexing.h"
#include "catalog/pg_index.h"
#include "catalog/pg_inherits.h"
#include "catalog/pg_opfamily.h"
#include "catalog/pg_trigger.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/optimizer.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/syscache.h"

#include "stream_seq.h"
#include "shmem.h"
#include "catalog.h"
#include "lifecycle.h"

PG_FUNCTION_INFO_V1(stream_seq_upgrade_write_path);

/*
 * is_not_null_of
 *		Whether an index predicate is exactly "column IS NOT NULL" on
 *		attribute "attnum".
 */
static bool
is_not_null_of(List *pred, AttrNumber attnum)
{
	NullTest   *test;

	if (list_length(pred) != 1 || !IsA(linitial(pred), NullTest))
		return false;
	test = linitial(pred);
	return test->nulltesttype == IS_NOT_NULL && !test->argisrow &&
		IsA(test->arg, Var) && ((Var *) test->arg)->varattno == attnum;
}

/*
 * numbered_predicate
 *		"column > 0" on attribute "attnum", as CREATE INDEX ... WHERE seq > 0
 *		stores it (bigint > integer).
 */
static Node *
numbered_predicate(AttrNumber attnum)
{
	Oid			opno = get_opfamily_member(INTEGER_BTREE_FAM_OID, INT8OID,
										   INT4OID, BTGreaterStrategyNumber);
	Expr	   *clause;

	clause = make_opclause(opno, BOOLOID, false,
						   (Expr *) makeVar(1, attnum, INT8OID, -1, InvalidOid, 0),
						   (Expr *) makeConst(INT4OID, -1, InvalidOid, sizeof(int32),
											  Int32GetDatum(0), false, true),
						   InvalidOid, InvalidOid);
	set_opfuncid((OpExpr *) clause);
	return (Node *) clause;
}

/*
 * set_index_predicate
 *		Store "pred" as the predicate of index "indexoid" in pg_index (as
 *		CREATE INDEX stores it: one expression, as text), and make every
 *		backend read it again.
 */
static void
set_index_predicate(Oid indexoid, Oid relid, Node *pred)
{
	Relation	pg_index = table_open(IndexRelationId, RowExclusiveLock);
	HeapTuple	tuple = SearchSysCacheCopy1(INDEXRELID, ObjectIdGetDatum(indexoid));
	Datum		values[Natts_pg_index];
	bool		nulls[Natts_pg_index];
	bool		replace[Natts_pg_index];
	HeapTuple	newtuple;

	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "cache lookup failed for index %u", indexoid);
	memset(nulls, false, sizeof(nulls));
	memset(replace, false, sizeof(replace));
	values[Anum_pg_index_indpred - 1] = CStringGetTextDatum(nodeToString(pred));
	replace[Anum_pg_index_indpred - 1] = true;
	newtuple = heap_modify_tuple(tuple, RelationGetDescr(pg_index), values,
								 nulls, replace);
	CatalogTupleUpdate(pg_index, &newtuple->t_self, newtuple);
	table_close(pg_index, RowExclusiveLock);
	CacheInvalidateRelcacheByRelid(indexoid);
	CacheInvalidateRelcacheByRelid(relid);
}

/*
 * has_low_numbers
 *		Whether table "relid" (ONLY) has a row whose number is below 1: with
 *		one, "seq IS NOT NULL" and "seq > 0" select different rows.  Read
 *		through the index on the column, as the extension's owner.
 */
static bool
has_low_numbers(Oid relid, const char *column)
{
	int64		found_seq;
	bool		found;

	stream_catalog_exec_latest(psprintf("SELECT %s FROM ONLY %s WHERE %s <= 0 LIMIT 1",
										quote_identifier(column),
										stream_qualified_name(relid),
										quote_identifier(column)),
							   0, NULL, NULL, &found_seq, 1, &found);
	return found;
}

/*
 * not_null_indexes
 *		The indexes of table "relid" whose predicate is "column IS NOT
 *		NULL"; *low says whether the table has a row numbered below 1.
 */
static List *
not_null_indexes(Oid relid, const char *column, bool *low)
{
	AttrNumber	attnum = get_attnum(relid, column);
	Relation	rel;
	List	   *indexes;
	ListCell   *lc;
	List	   *targets = NIL;

	*low = false;
	if (attnum == InvalidAttrNumber)
		return NIL;
	rel = relation_open(relid, NoLock);
	indexes = RelationGetIndexList(rel);
	foreach(lc, indexes)
	{
		Relation	index = index_open(lfirst_oid(lc), AccessShareLock);

		if (is_not_null_of(RelationGetIndexPredicate(index), attnum))
			targets = lappend_oid(targets, RelationGetRelid(index));
		index_close(index, AccessShareLock);
	}
	list_free(indexes);
	relation_close(rel, NoLock);
	if (targets != NIL && get_rel_relkind(relid) == RELKIND_RELATION)
		*low = has_low_numbers(relid, column);
	return targets;
}

/*
 * swap_predicates
 *		Give every index of the tables "tables" (a stream table and its
 *		partitions) whose predicate is "column IS NOT NULL" the predicate
 *		"column > 0" (see the top of the file), unless a row of one of
 *		them has a number below 1: then none, and false.
 */
static bool
swap_predicates(List *tables, const char *column)
{
	List	   *work = NIL;
	ListCell   *lc;
	ListCell   *lc2;

	foreach(lc, tables)
	{
		bool		low;
		List	   *targets = not_null_indexes(lfirst_oid(lc), column, &low);

		if (low)
			return false;
		work = lappend(work, list_make2(list_make1_oid(lfirst_oid(lc)), targets));
	}
	foreach(lc, work)
	{
		Oid			relid = linitial_oid((List *) linitial((List *) lfirst(lc)));

		foreach(lc2, (List *) lsecond((List *) lfirst(lc)))
			set_index_predicate(lfirst_oid(lc2), relid,
								numbered_predicate(get_attnum(relid, column)));
	}
	CommandCounterIncrement();
	return true;
}

/*
 * replace_triggers
 *		The guard trigger and the replica trigger of "relid" fire for
 *		UPDATE only (CREATE OR REPLACE TRIGGER, under the lock held); the
 *		assignment trigger and the insert guard are disabled.  On a
 *		partitioned table PostgreSQL carries the change to the partitions'
 *		clones.
 */
static void
replace_triggers(Oid relid, const char *column, const char *time_column)
{
	char	   *table = stream_qualified_name(relid);

	stream_caller_exec(psprintf("CREATE OR REPLACE TRIGGER stream_seq_guard BEFORE UPDATE OF %s%s%s ON %s "
								"FOR EACH ROW EXECUTE FUNCTION stream_seq.guard_trigger()",
								quote_identifier(column),
								time_column != NULL ? ", " : "",
								time_column != NULL ? quote_identifier(time_column) : "",
								table), 0, NULL, NULL);
	if (OidIsValid(get_trigger_oid(relid, "stream_seq_replica", true)))
	{
		stream_caller_exec(psprintf("CREATE OR REPLACE TRIGGER stream_seq_replica BEFORE UPDATE ON %s "
									"FOR EACH ROW EXECUTE FUNCTION stream_seq.replica_trigger()",
									table), 0, NULL, NULL);
		stream_caller_exec(psprintf("ALTER TABLE %s ENABLE REPLICA TRIGGER stream_seq_replica",
									table), 0, NULL, NULL);
	}
	if (OidIsValid(get_trigger_oid(relid, "stream_seq_assign", true)))
		stream_caller_exec(psprintf("ALTER TABLE %s DISABLE TRIGGER stream_seq_assign",
									table), 0, NULL, NULL);
	if (OidIsValid(get_trigger_oid(relid, "stream_seq_guard_insert", true)))
		stream_caller_exec(psprintf("ALTER TABLE %s DISABLE TRIGGER stream_seq_guard_insert",
									table), 0, NULL, NULL);
	CommandCounterIncrement();
}

/*
 * drop_leftover_triggers
 *		Drop the assignment trigger and the insert guard of "relid" if its
 *		AccessExclusiveLock (and its partitions') can be had at once;
 *		returns whether none is left.
 */
static bool
drop_leftover_triggers(Oid relid)
{
	static const char *const names[] = {"stream_seq_assign", "stream_seq_guard_insert"};
	List	   *tables;
	ListCell   *lc;
	int			i;
	bool		any = false;

	for (i = 0; i < lengthof(names); i++)
		any = any || OidIsValid(get_trigger_oid(relid, names[i], true));
	if (!any)
		return true;
	tables = find_all_inheritors(relid, NoLock, NULL);
	foreach(lc, tables)
	{
		if (!ConditionalLockRelationOid(lfirst_oid(lc), AccessExclusiveLock))
			return false;
	}
	for (i = 0; i < lengthof(names); i++)
	{
		if (OidIsValid(get_trigger_oid(relid, names[i], true)))
			stream_caller_exec(psprintf("DROP TRIGGER %s ON %s",
										quote_identifier(names[i]),
										stream_qualified_name(relid)),
							   0, NULL, NULL);
	}
	CommandCounterIncrement();
	return true;
}

/*
 * stream_seq_upgrade_write_path
 *		SQL: upgrade_write_path(stream regclass) → text: move the stream to
 *		this version's write path (see the top of the file); what it did,
 *		or what is left, in a sentence.  Idempotent.  The table's owner
 *		only.
 */
Datum
stream_seq_upgrade_write_path(PG_FUNCTION_ARGS)
{
	Oid			relid;
	StreamRef  *ref;
	char	   *column;
	char	   *time_column = NULL;
	bool		swapped;
	List	   *parts;
	ListCell   *lc;
	bool		dropped;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("stream table must not be null")));
	relid = PG_GETARG_OID(0);
	stream_check_preloaded();
	ref = stream_lookup_locked(relid, ShareRowExclusiveLock);
	if (!pg_class_ownercheck(relid, GetUserId()))
		aclcheck_error(ACLCHECK_NOT_OWNER, OBJECT_TABLE, stream_rel_name(relid));
	parts = find_all_inheritors(relid, ShareRowExclusiveLock, NULL);

	/*
	 * Rows this transaction inserted under the old triggers have their
	 * deferred events queued, and PostgreSQL refuses to build an index on
	 * the table until they fire (55006): leave the stream as it is (the
	 * library serves both layouts), so that ALTER EXTENSION UPDATE in such
	 * a transaction still succeeds.
	 */
	foreach(lc, parts)
	{
		if (AfterTriggerPendingOnRel(lfirst_oid(lc)))
			PG_RETURN_TEXT_P(cstring_to_text("not moved: this transaction has trigger events pending on the table; run stream_seq.upgrade_write_path() in a transaction of its own"));
	}

	column = get_attname(relid, ref->seq_attnum, false);
	if (ref->time_attnum != InvalidAttrNumber)
		time_column = get_attname(relid, ref->time_attnum, false);

	if (!OidIsValid(stream_capture_index(relid)))
		stream_create_capture_index(relid, column, time_column);
	swapped = swap_predicates(parts, column);
	if (swapped)
		stream_set_placeholder_defaults(relid, ref->seq_attnum, time_column);
	replace_triggers(relid, column, time_column);
	stream_protect_index(relid, ref->seq_attnum);
	dropped = drop_leftover_triggers(relid);
	CacheInvalidateRelcacheByRelid(relid);

	if (!swapped)
		PG_RETURN_TEXT_P(cstring_to_text(psprintf("moved; rows are stored with NULL and numbered by an update, as column \"%s\" has numbers below 1",
												  column)));
	if (!dropped)
		PG_RETURN_TEXT_P(cstring_to_text("moved; the old insert triggers are disabled, to be dropped by running upgrade_write_path() again when the table is free for a moment"));
	PG_RETURN_TEXT_P(cstring_to_text("moved"));
}
