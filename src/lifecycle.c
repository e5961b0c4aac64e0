/*-------------------------------------------------------------------------
 *
 * lifecycle.c
 *	  Making a table a stream and back: enable() and disable().
 *
 * Both run as the caller, who must own the table.  Every rule is checked
 * here in C, before anything changes: a failed call changes nothing.  DDL on
 * the caller's table runs as the caller, with search_path pinned; writes
 * to the extension's own tables and head sequences run as the extension's
 * owner (stream_catalog_exec).
 *
 * A table's numbers are never handed out again: disable() records in
 * stream_seq.retired where its numbering ended, and enable() starts above
 * that, above the table's highest number, and above the last value of a
 * sequence the column owned (a migrated bigserial column).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/relation.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/catalog.h"
#include "catalog/dependency.h"
#include "catalog/index.h"
#include "catalog/namespace.h"
#include "catalog/pg_am.h"
#include "catalog/pg_attrdef.h"
#include "catalog/pg_class.h"
#include "catalog/pg_depend.h"
#include "catalog/pg_inherits.h"
#include "catalog/pg_opfamily.h"
#include "catalog/pg_trigger.h"
#include "catalog/pg_type.h"
#include "commands/defrem.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "nodes/primnodes.h"
#include "optimizer/optimizer.h"
#include "rewrite/rewriteHandler.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/syscache.h"

#include "stream_seq.h"
#include "lifecycle.h"
#include "shmem.h"
#include "catalog.h"
#include "counter.h"
#include "consumer.h"
#include "resize.h"
#include "partition.h"
#include "pagewrite.h"
#include "xactstate.h"
#include "capture.h"
#include "commit.h"

PG_FUNCTION_INFO_V1(stream_seq_enable);
PG_FUNCTION_INFO_V1(stream_seq_disable);

/*
 * qualified_name
 *		The table's schema-qualified, quoted name, for statements.
 */
static char *
qualified_name(Oid relid)
{
	return stream_qualified_name(relid);
}

/*
 * check_table_owner
 *		Only the table's owner (or a member of its role) may turn a stream
 *		on or off.
 */
static void
check_table_owner(Oid relid)
{
	if (!pg_class_ownercheck(relid, GetUserId()))
		aclcheck_error(ACLCHECK_NOT_OWNER, OBJECT_TABLE, stream_rel_name(relid));
}

/*
 * check_enable_target
 *		What enable() refuses before it locks the table: anything but an
 *		ordinary, permanent user table; a caller who does not own it; a
 *		transaction whose snapshot would miss rows committed meanwhile.
 *		Syscache lookups only, so that no lock is taken for a refusal.
 */
static void
check_enable_target(Oid relid)
{
	HeapTuple	tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	Form_pg_class form;
	char	   *nspname;

	if (!HeapTupleIsValid(tuple))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation with OID %u does not exist", relid)));
	form = (Form_pg_class) GETSTRUCT(tuple);
	nspname = get_namespace_name(form->relnamespace);

	if (IsCatalogNamespace(form->relnamespace) ||
		IsToastNamespace(form->relnamespace) ||
		strcmp(nspname, "information_schema") == 0 ||
		form->relnamespace == stream_namespace(false))
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("table \"%s\" is a system table", NameStr(form->relname)),
				 errdetail("Only ordinary user tables can be stream tables.")));
	if (form->relispartition)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("partition \"%s\" cannot be a stream table on its own",
						NameStr(form->relname)),
				 errhint("Enable the stream on the partitioned table at the top of its partition tree.")));
	if (form->relkind != RELKIND_RELATION &&
		form->relkind != RELKIND_PARTITIONED_TABLE)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("\"%s\" is not an ordinary table", NameStr(form->relname)),
				 errdetail("Views, materialized views, foreign tables, sequences and indexes cannot be stream tables.")));
	if (form->relpersistence == RELPERSISTENCE_TEMP)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("temporary table \"%s\" cannot be a stream table",
						NameStr(form->relname))));
	if (form->relpersistence == RELPERSISTENCE_UNLOGGED)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("unlogged table \"%s\" cannot be a stream table",
						NameStr(form->relname)),
				 errdetail("A crash empties an unlogged table, and numbers must survive crashes.")));
	ReleaseSysCache(tuple);

	check_table_owner(relid);

	if (IsolationUsesXactSnapshot())
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("stream_seq.enable() cannot run in a REPEATABLE READ or SERIALIZABLE transaction"),
				 errdetail("Rows committed after the transaction's snapshot was taken would stay without a number."),
				 errhint("Run it in a READ COMMITTED transaction.")));

}

static void drop_own_triggers(Oid relid);

/*
 * check_enable_partitions
 *		What enable() refuses in the partitions of a partitioned table
 *		(locked by the caller): foreign or unlogged partitions, and a
 *		stream column with NOT NULL or a default of its own.
 */
static void
check_enable_partitions(Oid relid)
{
	List	   *parts = find_all_inheritors(relid, NoLock, NULL);
	ListCell   *lc;

	foreach(lc, parts)
	{
		Oid			part = lfirst_oid(lc);
		Relation	rel;

		if (part == relid)
			continue;
		rel = relation_open(part, NoLock);
		if (rel->rd_rel->relkind != RELKIND_RELATION &&
			rel->rd_rel->relkind != RELKIND_PARTITIONED_TABLE)
			ereport(ERROR,
					(errcode(ERRCODE_WRONG_OBJECT_TYPE),
					 errmsg("partition \"%s\" of table \"%s\" is not an ordinary table",
							RelationGetRelationName(rel), stream_rel_name(relid)),
					 errdetail("Foreign tables cannot hold the rows of a stream table.")));
		if (rel->rd_rel->relpersistence != RELPERSISTENCE_PERMANENT)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("unlogged partition \"%s\" cannot hold the rows of a stream table",
							RelationGetRelationName(rel)),
					 errdetail("A crash empties an unlogged table, and numbers must survive crashes.")));
		stream_check_no_deferrable_index(rel);
		relation_close(rel, NoLock);
	}
}

/*
 * check_partition_columns
 *		After the column exists: no partition may give it NOT NULL or a
 *		default of its own.
 */
static void
check_partition_columns(Oid relid, const char *column, bool time)
{
	List	   *parts = find_all_inheritors(relid, NoLock, NULL);
	ListCell   *lc;

	foreach(lc, parts)
	{
		Oid			part = lfirst_oid(lc);
		AttrNumber	attnum = get_attnum(part, column);
		HeapTuple	tuple;
		Form_pg_attribute att;
		Relation	rel;
		bool		bad;

		if (part == relid || attnum == InvalidAttrNumber)
			continue;
		tuple = SearchSysCache2(ATTNUM, ObjectIdGetDatum(part),
								Int16GetDatum(attnum));
		if (!HeapTupleIsValid(tuple))
			continue;
		att = (Form_pg_attribute) GETSTRUCT(tuple);
		bad = att->attnotnull;
		ReleaseSysCache(tuple);
		rel = relation_open(part, NoLock);
		bad = bad || !stream_default_is_placeholder(rel, attnum, time);
		relation_close(rel, NoLock);
		if (bad)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_TABLE_DEFINITION),
					 errmsg("column \"%s\" of partition \"%s\" has NOT NULL or a default",
							column, stream_rel_name(part)),
					 errdetail("Stream numbers are assigned at commit; stream_seq gives the column a default of its own.")));
	}
}

/*
 * check_enable_locked
 *		What enable() refuses once it holds its lock on the table: an
 *		existing stream, inheritance children (their rows would have no
 *		triggers and could carry any number), a deferrable unique or
 *		exclusion constraint.
 */
static void
check_enable_locked(Oid relid)
{
	Relation	rel;

	if (!SearchSysCacheExists1(RELOID, ObjectIdGetDatum(relid)))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation with OID %u does not exist", relid)));
	if (stream_catalog_has(relid))
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("table \"%s\" is already a stream table",
						stream_rel_name(relid))));
	if (get_rel_relkind(relid) == RELKIND_PARTITIONED_TABLE)
	{
		stream_check_partitions_supported();
		check_enable_partitions(relid);
	}
	else if (find_inheritance_children(relid, NoLock) != NIL)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("table \"%s\" has inheritance children", stream_rel_name(relid)),
				 errdetail("Rows of an inheriting table would have no number, or one written by hand.")));

	rel = relation_open(relid, NoLock);
	stream_check_no_deferrable_index(rel);
	relation_close(rel, NoLock);
}

/*
 * stream_check_no_deferrable_index
 *		Refuse a table with a deferrable unique or exclusion constraint: it
 *		cannot be checked for the rows numbered at commit (index insertion
 *		there cannot queue a recheck).  For enable() and for DDL on a
 *		stream table.
 */
void
stream_check_no_deferrable_index(Relation rel)
{
	List	   *indexes = RelationGetIndexList(rel);
	ListCell   *lc;

	foreach(lc, indexes)
	{
		HeapTuple	indtuple = SearchSysCache1(INDEXRELID,
											   ObjectIdGetDatum(lfirst_oid(lc)));
		bool		deferrable;

		if (!HeapTupleIsValid(indtuple))
			continue;
		deferrable = !((Form_pg_index) GETSTRUCT(indtuple))->indimmediate;
		ReleaseSysCache(indtuple);
		if (deferrable)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("table \"%s\" has a deferrable unique or exclusion constraint",
							RelationGetRelationName(rel)),
					 errdetail("Such a constraint cannot be checked for the rows stream_seq numbers at commit.")));
	}
}

/*
 * expression_uses
 *		Whether the stored expression "text" (nodeToString form) uses
 *		column "attnum" or "time_attnum" of its relation, or the whole row.
 */
static bool
expression_uses(const char *text, AttrNumber attnum, AttrNumber time_attnum)
{
	Bitmapset  *attrs = NULL;

	pull_varattnos(stringToNode(text), 1, &attrs);
	return bms_is_member(attnum - FirstLowInvalidHeapAttributeNumber, attrs) ||
		(time_attnum != InvalidAttrNumber &&
		 bms_is_member(time_attnum - FirstLowInvalidHeapAttributeNumber, attrs)) ||
		bms_is_member(InvalidAttrNumber - FirstLowInvalidHeapAttributeNumber, attrs);
}

/*
 * stream_check_written_columns_free
 *		Refuse CHECK constraints, foreign keys and stored generated columns
 *		that use the stream column "attnum" or the time column
 *		"time_attnum" (if valid) of "rel": the commit-time write sets them
 *		without any of these seeing the new values, so a CHECK would not
 *		hold (and pg_restore, which checks it, would then fail to load the
 *		table), a foreign key would not be checked and a generated column
 *		would stay NULL.  For enable() and for DDL on a stream table or
 *		partition.
 */
void
stream_check_written_columns_free(Relation rel, AttrNumber attnum,
								  AttrNumber time_attnum)
{
	TupleDesc	desc = RelationGetDescr(rel);
	TupleConstr *constr = desc->constr;
	List	   *fkeys;
	ListCell   *lc;
	int			i;

	for (i = 0; constr != NULL && i < constr->num_check; i++)
	{
		if (expression_uses(constr->check[i].ccbin, attnum, time_attnum))
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("check constraint \"%s\" of table \"%s\" uses a column stream_seq writes at commit",
							constr->check[i].ccname, RelationGetRelationName(rel)),
					 errdetail("The number (and time) written at commit are not checked by CHECK constraints; pg_restore would refuse rows that fail it."),
					 errhint("Drop the constraint, or check other columns only.")));
	}
	for (i = 0; constr != NULL && i < constr->num_defval; i++)
	{
		AttrNumber	generated = constr->defval[i].adnum;

		if (TupleDescAttr(desc, generated - 1)->attgenerated != '\0' &&
			expression_uses(constr->defval[i].adbin, attnum, time_attnum))
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("generated column \"%s\" of table \"%s\" uses a column stream_seq writes at commit",
							NameStr(TupleDescAttr(desc, generated - 1)->attname),
							RelationGetRelationName(rel)),
					 errdetail("Generated columns are not computed again when the number (and time) are written at commit."),
					 errhint("Compute it in a view, or when reading.")));
	}
	fkeys = RelationGetFKeyList(rel);
	foreach(lc, fkeys)
	{
		ForeignKeyCacheInfo *fk = lfirst(lc);

		if (fk->conrelid != RelationGetRelid(rel))
			continue;
		for (i = 0; i < fk->nkeys; i++)
		{
			if (fk->conkey[i] == attnum ||
				(time_attnum != InvalidAttrNumber && fk->conkey[i] == time_attnum))
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("foreign key \"%s\" of table \"%s\" uses a column stream_seq writes at commit",
								get_constraint_name(fk->conoid), RelationGetRelationName(rel)),
						 errdetail("The number (and time) written at commit are not checked against foreign keys.")));
		}
	}
}

/*
 * stream_unique_index
 *		The unique index on the stream column that readers and the counter
 *		use: a btree index with one key column, no expression, and no
 *		predicate or one that selects the numbered rows
 *		(stream_predicate_is_numbered).  InvalidOid if there is none.  On a
 *		partitioned table the index cannot be unique (it would have to
 *		contain the partition key); any such partitioned index will do, as
 *		stream_seq itself keeps the numbers unique (see partition.c).
 */
Oid
stream_unique_index(Oid relid, AttrNumber attnum)
{
	Relation	rel = relation_open(relid, AccessShareLock);
	List	   *indexes = RelationGetIndexList(rel);
	bool		partitioned = rel->rd_rel->relkind == RELKIND_PARTITIONED_TABLE;
	Oid			result = InvalidOid;
	ListCell   *lc;

	foreach(lc, indexes)
	{
		Relation	index = index_open(lfirst_oid(lc), AccessShareLock);
		Form_pg_index form = index->rd_index;
		List	   *pred;

		if ((form->indisunique || partitioned) &&
			(form->indisvalid || partitioned) &&
			index->rd_rel->relam == BTREE_AM_OID &&
			form->indnkeyatts == 1 && form->indkey.values[0] == attnum &&
			RelationGetIndexExpressions(index) == NIL)
		{
			pred = RelationGetIndexPredicate(index);
			if (pred == NIL || stream_predicate_is_numbered(pred, attnum))
				result = RelationGetRelid(index);
		}
		index_close(index, AccessShareLock);
		if (OidIsValid(result))
			break;
	}
	relation_close(rel, AccessShareLock);
	return result;
}

/*
 * trigger_depends_on
 *		Whether trigger "trigger" already depends on relation "index".
 */
static bool
trigger_depends_on(Oid trigger, Oid index)
{
	Relation	depend = table_open(DependRelationId, AccessShareLock);
	ScanKeyData key[2];
	SysScanDesc scan;
	HeapTuple	tuple;
	bool		found = false;

	ScanKeyInit(&key[0], Anum_pg_depend_classid, BTEqualStrategyNumber,
				F_OIDEQ, ObjectIdGetDatum(TriggerRelationId));
	ScanKeyInit(&key[1], Anum_pg_depend_objid, BTEqualStrategyNumber,
				F_OIDEQ, ObjectIdGetDatum(trigger));
	scan = systable_beginscan(depend, DependDependerIndexId, true, NULL, 2, key);
	while (!found && HeapTupleIsValid(tuple = systable_getnext(scan)))
	{
		Form_pg_depend form = (Form_pg_depend) GETSTRUCT(tuple);

		found = form->refclassid == RelationRelationId &&
			form->refobjid == index && form->refobjsubid == 0;
	}
	systable_endscan(scan);
	table_close(depend, AccessShareLock);
	return found;
}

/*
 * stream_protect_index
 *		Make the stream's guard trigger depend on the unique index of its
 *		column and on its capture index, so that PostgreSQL itself refuses
 *		DROP INDEX of either (and DROP INDEX ... CASCADE drops the trigger,
 *		which the sql_drop event trigger refuses).  Called by enable(), and,
 *		since pg_dump does not carry such dependencies, whenever a restore
 *		may have brought the trigger and the indexes back: when the trigger
 *		is created, when an index is created on the table, and after ALTER
 *		TABLE (which creates the index of a UNIQUE or PRIMARY KEY
 *		constraint).  A parallel pg_restore creates them in any order, so
 *		whichever comes last records the dependency.  Does nothing while
 *		the trigger or an index is missing, or for a dependency already
 *		there.
 */
void
stream_protect_index(Oid relid, AttrNumber attnum)
{
	Oid			trigger = get_trigger_oid(relid, "stream_seq_guard", true);
	Oid			indexes[2];
	int			i;

	if (!OidIsValid(trigger))
		return;
	indexes[0] = stream_unique_index(relid, attnum);
	indexes[1] = stream_capture_index(relid);
	for (i = 0; i < 2; i++)
	{
		ObjectAddress depender;
		ObjectAddress referenced;

		if (!OidIsValid(indexes[i]) || trigger_depends_on(trigger, indexes[i]))
			continue;
		ObjectAddressSet(depender, TriggerRelationId, trigger);
		ObjectAddressSet(referenced, RelationRelationId, indexes[i]);
		recordDependencyOn(&depender, &referenced, DEPENDENCY_NORMAL);
	}
}

/*
 * owned_sequence_next
 *		The number after everything a sequence owned by the column handed
 *		out (a bigserial column being migrated), or PG_INT64_MIN.
 */
static int64
owned_sequence_next(Oid relid, AttrNumber attnum)
{
	List	   *seqs = getOwnedSequences(relid);
	int64		result = PG_INT64_MIN;
	ListCell   *lc;

	foreach(lc, seqs)
	{
		Oid			seq = lfirst_oid(lc);
		Oid			table;
		int32		column;
		char	   *query;
		int64		next;
		bool		found;

		if (!sequenceIsOwned(seq, DEPENDENCY_AUTO, &table, &column) ||
			table != relid || column != attnum)
			continue;
		query = psprintf("SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END FROM %s",
						 qualified_name(seq));
		stream_catalog_exec_latest(query, 0, NULL, NULL, &next, 1, &found);
		if (found)
			result = Max(result, next);
	}
	return result;
}

/*
 * retired_next
 *		Where the numbering of an earlier stream on this table ended, or
 *		PG_INT64_MIN.
 */
static int64
retired_next(Oid relid)
{
	Oid			argtypes[1] = {OIDOID};
	Datum		values[1];
	int64		next;
	bool		found;

	values[0] = ObjectIdGetDatum(relid);
	stream_catalog_exec("SELECT next FROM stream_seq.retired WHERE relid::pg_catalog.oid = $1",
						1, argtypes, values, &next, 1, &found);
	return found ? next : PG_INT64_MIN;
}

/*
 * table_numbers
 *		The lowest and highest number in the table and how many rows have
 *		none, read as the extension's owner (row-level security must not
 *		hide a row) with the latest snapshot.
 */
static void
table_numbers(Oid relid, const char *column, int64 *lowest, int64 *highest,
			  int64 *unnumbered)
{
	char	   *query;
	int64		row[3];
	bool		found;

	query = psprintf("SELECT pg_catalog.min(%s), pg_catalog.max(%s), "
					 "pg_catalog.count(*) FILTER (WHERE %s IS NULL) FROM %s",
					 quote_identifier(column), quote_identifier(column),
					 quote_identifier(column), stream_source(relid));
	stream_catalog_exec_latest(query, 0, NULL, NULL, row, 3, &found);
	*lowest = row[0];
	*highest = row[1];
	*unnumbered = row[2];
}

/*
 * check_no_duplicates
 *		A partitioned table's existing numbers must be unique across its
 *		partitions, which no index checks; refuse it otherwise.
 */
static void
check_no_duplicates(Oid relid, const char *column)
{
	char	   *query;
	int64		duplicate;
	bool		found;

	query = psprintf("SELECT %s FROM %s WHERE %s IS NOT NULL GROUP BY 1 HAVING pg_catalog.count(*) > 1 LIMIT 1",
					 quote_identifier(column), qualified_name(relid),
					 quote_identifier(column));
	stream_catalog_exec_latest(query, 0, NULL, NULL, &duplicate, 1, &found);
	if (found)
		ereport(ERROR,
				(errcode(ERRCODE_UNIQUE_VIOLATION),
				 errmsg("number " INT64_FORMAT " appears more than once in column \"%s\" of table \"%s\"",
						duplicate, column, stream_rel_name(relid)),
				 errdetail("The numbers of a stream must be unique across its partitions."),
				 errhint("Set the duplicates to NULL: stream_seq.enable() numbers rows without a number.")));
}

/*
 * check_numbers_positive
 *		A stream whose index on the column leaves out the placeholder
 *		("seq > 0") must hold no number below 1: its indexes would leave
 *		such a row out (its number would not be unique, and a reader's
 *		index scan would miss it where a sequential scan finds it), and a
 *		row holding 0 looks unnumbered.  Refuse it.
 */
static void
check_numbers_positive(Oid relid, const char *column, AttrNumber attnum)
{
	Oid			index = stream_unique_index(relid, attnum);
	Relation	rel;
	bool		excludes;
	char	   *query;
	int64		value;
	bool		found;

	if (!OidIsValid(index))
		return;
	rel = index_open(index, AccessShareLock);
	excludes = stream_predicate_excludes_placeholder(RelationGetIndexPredicate(rel),
													  rel->rd_index->indkey.values[0]);
	index_close(rel, AccessShareLock);
	if (!excludes)
		return;
	query = psprintf("SELECT %s FROM %s WHERE %s <= 0 LIMIT 1",
					 quote_identifier(column), stream_source(relid),
					 quote_identifier(column));
	stream_catalog_exec_latest(query, 0, NULL, NULL, &value, 1, &found);
	if (found)
		ereport(ERROR,
				(errcode(ERRCODE_CHECK_VIOLATION),
				 errmsg("column \"%s\" of table \"%s\" holds number " INT64_FORMAT ", below 1",
						column, stream_rel_name(relid), value),
				 errdetail("Stream numbers start at 1: rows hold 0 until their transaction commits, and the stream's indexes leave out every value below 1."),
				 errhint("Set such numbers to NULL: stream_seq.enable() numbers rows without a number.")));
}

/*
 * prepare_column
 *		Check the stream column, or add it if missing; returns its number.
 */
static AttrNumber
prepare_column(Oid relid, const char *column)
{
	AttrNumber	attnum = get_attnum(relid, column);
	HeapTuple	tuple;
	Form_pg_attribute att;
	char	   *relname = get_rel_name(relid);
	Relation	rel;
	bool		placeholder;
	bool		notnull;

	if (attnum == InvalidAttrNumber)
	{
		stream_caller_exec(psprintf("ALTER TABLE %s ADD COLUMN %s pg_catalog.int8",
							   qualified_name(relid), quote_identifier(column)), 0, NULL, NULL);
		CommandCounterIncrement();
		return get_attnum(relid, column);
	}
	if (attnum < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("\"%s\" is a system column", column)));

	tuple = SearchSysCache2(ATTNUM, ObjectIdGetDatum(relid),
							Int16GetDatum(attnum));
	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "cache lookup failed for attribute %d of relation %u",
			 attnum, relid);
	att = (Form_pg_attribute) GETSTRUCT(tuple);
	if (att->atttypid != INT8OID)
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("column \"%s\" of table \"%s\" is of type %s, not bigint",
						column, relname, format_type_be(att->atttypid))));
	if (att->attidentity != '\0' || att->attgenerated != '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TABLE_DEFINITION),
				 errmsg("column \"%s\" of table \"%s\" is an identity or generated column",
						column, relname),
				 errhint("Drop the identity or generation expression first.")));
	notnull = att->attnotnull;
	ReleaseSysCache(tuple);
	rel = relation_open(relid, NoLock);
	placeholder = stream_default_is_placeholder(rel, attnum, false);
	relation_close(rel, NoLock);
	if (!placeholder)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TABLE_DEFINITION),
				 errmsg("column \"%s\" of table \"%s\" has a default", column, relname),
				 errdetail("Stream numbers are assigned at commit; stream_seq gives the column a default of its own, the placeholder 0."),
				 errhint("Run ALTER TABLE %s ALTER COLUMN %s DROP DEFAULT first.",
						 qualified_name(relid), quote_identifier(column))));
	if (notnull)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TABLE_DEFINITION),
				 errmsg("column \"%s\" of table \"%s\" does not allow nulls",
						column, relname),
				 errdetail("Stream numbers are assigned at commit; rows hold NULL until then."),
				 errhint("Run ALTER TABLE %s ALTER COLUMN %s DROP NOT NULL first (a primary key on it must be dropped too).",
						 qualified_name(relid), quote_identifier(column))));
	return attnum;
}

/*
 * prepare_time_column
 *		Check the time column (enable()'s time_column), or add it if
 *		missing: a nullable timestamptz without a default, written only by
 *		the commit-time write.  Rows already in the table keep what they
 *		have (NULL in a new column: they count as numbered before any
 *		time, see position_at()).
 */
static void
prepare_time_column(Oid relid, const char *column, const char *seq_column)
{
	AttrNumber	attnum = get_attnum(relid, column);
	HeapTuple	tuple;
	Form_pg_attribute att;
	char	   *relname = get_rel_name(relid);
	Relation	rel;
	bool		bad;

	if (strcmp(column, seq_column) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the time column must differ from the stream column")));
	if (attnum == InvalidAttrNumber)
	{
		stream_caller_exec(psprintf("ALTER TABLE %s ADD COLUMN %s pg_catalog.timestamptz",
							   qualified_name(relid), quote_identifier(column)), 0, NULL, NULL);
		CommandCounterIncrement();
		return;
	}
	if (attnum < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("\"%s\" is a system column", column)));
	tuple = SearchSysCache2(ATTNUM, ObjectIdGetDatum(relid),
							Int16GetDatum(attnum));
	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "cache lookup failed for attribute %d of relation %u",
			 attnum, relid);
	att = (Form_pg_attribute) GETSTRUCT(tuple);
	if (att->atttypid != TIMESTAMPTZOID)
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("column \"%s\" of table \"%s\" is of type %s, not timestamp with time zone",
						column, relname, format_type_be(att->atttypid))));
	bad = att->attidentity != '\0' || att->attgenerated != '\0' ||
		att->attnotnull;
	ReleaseSysCache(tuple);
	rel = relation_open(relid, NoLock);
	bad = bad || !stream_default_is_placeholder(rel, attnum, true);
	relation_close(rel, NoLock);
	if (bad)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TABLE_DEFINITION),
				 errmsg("column \"%s\" of table \"%s\" has NOT NULL, a default or a generation expression",
						column, relname),
				 errdetail("The time column is written at commit, with the number; stream_seq gives it a default of its own, the placeholder -infinity.")));
}

/*
 * check_written_columns
 *		enable(): stream_check_written_columns_free on the table and each
 *		of its partitions.
 */
static void
check_written_columns(Oid relid, const char *column, const char *time_column)
{
	List	   *tables = find_all_inheritors(relid, NoLock, NULL);
	ListCell   *lc;

	foreach(lc, tables)
	{
		Relation	rel = relation_open(lfirst_oid(lc), NoLock);

		stream_check_written_columns_free(rel, get_attnum(RelationGetRelid(rel), column),
										  time_column == NULL ? InvalidAttrNumber :
										  get_attnum(RelationGetRelid(rel), time_column));
		relation_close(rel, NoLock);
	}
}

/*
 * check_times_rising
 *		enable() with a time column that already holds times: they must
 *		go up with the numbers the rows already have (NULLs only below
 *		the first time), as position_at() relies on.  Times a migration
 *		brought along may not.
 */
static void
check_times_rising(Oid relid, const char *column, const char *time_column)
{
	int64		seq;
	bool		found;

	stream_catalog_exec_latest(psprintf("SELECT n FROM (SELECT %s AS n, %s AS t, "
										"pg_catalog.max(%s) OVER (ORDER BY %s ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before "
										"FROM %s WHERE %s IS NOT NULL) x "
										"WHERE before IS NOT NULL AND (t IS NULL OR t < before) "
										"ORDER BY n LIMIT 1",
										quote_identifier(column), quote_identifier(time_column),
										quote_identifier(time_column), quote_identifier(column),
										stream_source(relid), quote_identifier(column)),
							   0, NULL, NULL, &seq, 1, &found);
	if (found)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("time column \"%s\" of table \"%s\" does not go up with column \"%s\"",
						time_column, stream_rel_name(relid), column),
				 errdetail("Row " INT64_FORMAT " has an earlier time than a row numbered below it, or none.", seq),
				 errhint("Stream times must never go down as numbers go up. Set the column to NULL where it is not so, or name another column.")));
}

/*
 * stream_create_capture_index
 *		The index of access method stream_seq_capture that captures the
 *		rows stored into the table for the commit-time write (capture.c):
 *		on the stream column and the time column, whose values it checks.
 *		On a partitioned table a partitioned index, which PostgreSQL
 *		creates on every partition, now and later.
 */
void
stream_create_capture_index(Oid relid, const char *column, const char *time_column)
{
	char	   *name = ChooseRelationName(get_rel_name(relid), NULL,
										  "stream_seq_capture",
										  get_rel_namespace(relid), false);

	stream_caller_exec(psprintf("CREATE INDEX %s ON %s USING stream_seq_capture (%s%s%s)",
						   quote_identifier(name), qualified_name(relid),
						   quote_identifier(column),
						   time_column != NULL ? ", " : "",
						   time_column != NULL ? quote_identifier(time_column) : ""),
					   0, NULL, NULL);
	CommandCounterIncrement();
}

/*
 * stream_conflicting_placeholder_index
 *		A unique or exclusion index of table "relid" (a stream table or a
 *		partition, with the stream column "column" and the time column
 *		"time_column") that takes rows holding the placeholders: two such
 *		rows would conflict in it.  InvalidOid if there is none.
 */
Oid
stream_conflicting_placeholder_index(Oid relid, const char *column,
									 const char *time_column)
{
	Relation	rel = relation_open(relid, AccessShareLock);
	List	   *indexes = RelationGetIndexList(rel);
	AttrNumber	seq = get_attnum(relid, column);
	AttrNumber	at = time_column != NULL ? get_attnum(relid, time_column) :
		InvalidAttrNumber;
	ListCell   *lc;
	Oid			result = InvalidOid;

	foreach(lc, indexes)
	{
		Relation	index = index_open(lfirst_oid(lc), AccessShareLock);

		if ((index->rd_index->indisunique || index->rd_index->indisexclusion) &&
			stream_index_admits_placeholder(index, seq, at))
			result = RelationGetRelid(index);
		index_close(index, AccessShareLock);
		if (OidIsValid(result))
			break;
	}
	list_free(indexes);
	relation_close(rel, AccessShareLock);
	return result;
}

/*
 * placeholder_default
 *		The default of the stream column: a bigint constant ('0'::bigint
 *		in \d and pg_dump).  Not what "DEFAULT 0" stores (an int4 constant
 *		cast to bigint): the planner would fold that cast in every INSERT
 *		it plans.
 */
static Node *
placeholder_default(void)
{
	return (Node *) makeConst(INT8OID, -1, InvalidOid, sizeof(int64),
							  Int64GetDatum(STREAM_SEQ_PLACEHOLDER),
							  false, FLOAT8PASSBYVAL);
}

/*
 * stream_set_placeholder_defaults
 *		Give the stream column (and the time column) of table "relid" the
 *		defaults that put the placeholders into stored rows, the room the
 *		commit-time write writes the number (and the time) into; those of
 *		its partitions too (a partition made later copies them; one
 *		attached later gets them when ddl.c calls this after ALTER TABLE).
 *		A table that has them is not locked.  Only when the stream's
 *		unique index leaves such rows out (its predicate excludes 0): an
 *		index without a predicate (a UNIQUE column the table had) would
 *		find every placeholder a duplicate; such a table's rows are stored
 *		with NULL and numbered by an update.  A column that has a default
 *		keeps it.
 *
 *		Stored as ALTER TABLE ... SET DEFAULT stores them, but under the
 *		ShareRowExclusiveLock the caller holds (enable(), an update of the
 *		extension): a default concerns writers only, which that lock keeps
 *		out (PostgreSQL takes AccessExclusiveLock, noting that
 *		ShareRowExclusiveLock would do); readers go on.
 */
void
stream_set_placeholder_defaults(Oid relid, AttrNumber attnum,
								const char *time_column)
{
	Oid			index = stream_unique_index(relid, attnum);
	List	   *tables;
	ListCell   *lc;
	char	   *column = get_attname(relid, attnum, false);
	Relation	rel;
	bool		excludes;

	if (!OidIsValid(index))
		return;
	rel = index_open(index, AccessShareLock);
	excludes = stream_predicate_excludes_placeholder(RelationGetIndexPredicate(rel),
											  rel->rd_index->indkey.values[0]);
	index_close(rel, AccessShareLock);
	if (!excludes)
		return;

	/* no unique or exclusion index may take two placeholders */
	tables = find_all_inheritors(relid, NoLock, NULL);
	foreach(lc, tables)
	{
		if (stream_conflicting_placeholder_index(lfirst_oid(lc), column,
												 time_column) != InvalidOid)
			return;
	}

	foreach(lc, tables)
	{
		AttrNumber	seq = get_attnum(lfirst_oid(lc), column);
		AttrNumber	at = time_column != NULL ?
			get_attnum(lfirst_oid(lc), time_column) : InvalidAttrNumber;

		rel = table_open(lfirst_oid(lc), AccessShareLock);
		if ((seq == InvalidAttrNumber ||
			 TupleDescAttr(RelationGetDescr(rel), seq - 1)->atthasdef) &&
			(at == InvalidAttrNumber ||
			 TupleDescAttr(RelationGetDescr(rel), at - 1)->atthasdef))
		{
			table_close(rel, AccessShareLock);
			continue;			/* has them */
		}
		table_close(rel, AccessShareLock);
		rel = table_open(lfirst_oid(lc), ShareRowExclusiveLock);
		if (seq != InvalidAttrNumber &&
			!TupleDescAttr(RelationGetDescr(rel), seq - 1)->atthasdef)
			(void) stream_store_attr_default(rel, seq, placeholder_default());
		if (at != InvalidAttrNumber &&
			!TupleDescAttr(RelationGetDescr(rel), at - 1)->atthasdef)
			(void) stream_store_attr_default(rel, at,
											 (Node *) makeConst(TIMESTAMPTZOID, -1, InvalidOid,
																sizeof(TimestampTz),
																TimestampTzGetDatum(STREAM_TIME_PLACEHOLDER),
																false, FLOAT8PASSBYVAL));
		table_close(rel, NoLock);
	}
	CommandCounterIncrement();
}

/*
 * create_stream_triggers
 *		The triggers enable() gives a stream table: with "capture" (the SQL
 *		objects of 0.7.0 and later), the guards of UPDATE, the TRUNCATE
 *		trigger and the replica trigger (for UPDATE); without it, those of
 *		the installed earlier version (guard.c numbers through them).
 */
static void
create_stream_triggers(Oid relid, const char *column, const char *time_column,
					   bool capture)
{
	char	   *table = qualified_name(relid);

	/* UPDATE OF lists the stream column first (ddl.c follows renames) */
	stream_caller_exec(psprintf("CREATE TRIGGER stream_seq_guard BEFORE %sUPDATE OF %s%s%s ON %s "
						   "FOR EACH ROW EXECUTE FUNCTION stream_seq.guard_trigger()",
						   capture ? "" : "INSERT OR ",
						   quote_identifier(column),
						   time_column != NULL ? ", " : "",
						   time_column != NULL ? quote_identifier(time_column) : "",
						   table), 0, NULL, NULL);
	if (!capture)
		stream_caller_exec(psprintf("CREATE CONSTRAINT TRIGGER stream_seq_assign AFTER INSERT ON %s "
							   "DEFERRABLE INITIALLY DEFERRED "
							   "FOR EACH ROW EXECUTE FUNCTION stream_seq.assign_trigger()",
							   table), 0, NULL, NULL);
	/* an event only for rows whose number or time an UPDATE changed */
	if (stream_trigger_function_installed("guard_update_trigger"))
		stream_caller_exec(psprintf("CREATE TRIGGER stream_seq_guard_update AFTER UPDATE ON %s "
							   "FOR EACH ROW WHEN (OLD.%s IS DISTINCT FROM NEW.%s%s%s%s%s) "
							   "EXECUTE FUNCTION stream_seq.guard_update_trigger()",
							   table, quote_identifier(column), quote_identifier(column),
							   time_column != NULL ? " OR OLD." : "",
							   time_column != NULL ? quote_identifier(time_column) : "",
							   time_column != NULL ? " IS DISTINCT FROM NEW." : "",
							   time_column != NULL ? quote_identifier(time_column) : ""),
						   0, NULL, NULL);
	/* 0.6.0: an event only for rows inserted with a number or a time */
	if (!capture && stream_trigger_function_installed("guard_insert_trigger"))
		stream_caller_exec(psprintf("CREATE TRIGGER stream_seq_guard_insert AFTER INSERT ON %s "
							   "FOR EACH ROW WHEN (NEW.%s IS NOT NULL%s%s%s) "
							   "EXECUTE FUNCTION stream_seq.guard_insert_trigger()",
							   table, quote_identifier(column),
							   time_column != NULL ? " OR NEW." : "",
							   time_column != NULL ? quote_identifier(time_column) : "",
							   time_column != NULL ? " IS NOT NULL" : ""),
						   0, NULL, NULL);
	stream_caller_exec(psprintf("CREATE TRIGGER stream_seq_truncate BEFORE TRUNCATE ON %s "
						   "FOR EACH STATEMENT EXECUTE FUNCTION stream_seq.truncate_trigger()",
						   table), 0, NULL, NULL);
	if (stream_trigger_function_installed("replica_trigger"))
	{
		stream_caller_exec(psprintf("CREATE TRIGGER stream_seq_replica BEFORE %sUPDATE ON %s "
							   "FOR EACH ROW EXECUTE FUNCTION stream_seq.replica_trigger()",
							   capture ? "" : "INSERT OR ", table), 0, NULL, NULL);
		stream_caller_exec(psprintf("ALTER TABLE %s ENABLE REPLICA TRIGGER stream_seq_replica",
							   table), 0, NULL, NULL);
	}
}

/*
 * stream_seq_enable
 *		SQL: enable(stream regclass, seq_column name DEFAULT 'seq',
 *		time_column name DEFAULT NULL): make an ordinary table a stream
 *		table.  Adds the column if missing, a partial unique index on it if
 *		there is none, numbers the rows that have no number (above every
 *		number the table ever had), creates the head sequence and the
 *		triggers, and records the stream.  With a time column (0.5.0) the
 *		commit-time write also records when each number was taken there.
 */
Datum
stream_seq_enable(PG_FUNCTION_ARGS)
{
	Oid			relid;
	char	   *column;
	AttrNumber	attnum;
	int64		floor;
	int64		lowest;
	int64		highest;
	int64		unnumbered;
	int64		base;
	int64		start;
	Oid			head_seq;
	char	   *table;
	StreamRef  *ref;
	bool		partitioned;
	char	   *time_column = NULL;
	bool		capture;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("stream table and column must not be null")));
	relid = PG_GETARG_OID(0);
	column = NameStr(*PG_GETARG_NAME(1));
	if (PG_NARGS() > 2 && !PG_ARGISNULL(2))
		time_column = NameStr(*PG_GETARG_NAME(2));
	/* an empty name is no column (and no identifier to add one by) */
	if (column[0] == '\0' || (time_column != NULL && time_column[0] == '\0'))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("column name must not be empty")));
	stream_check_preloaded();

	check_enable_target(relid);

	/* keep writers out while existing rows are numbered */
	LockRelationOid(relid, ShareRowExclusiveLock);
	partitioned = get_rel_relkind(relid) == RELKIND_PARTITIONED_TABLE;
	if (partitioned)
		list_free(find_all_inheritors(relid, ShareRowExclusiveLock, NULL));
	check_enable_locked(relid);
	table = qualified_name(relid);

	attnum = prepare_column(relid, column);
	if (partitioned)
		check_partition_columns(relid, column, false);
	if (time_column != NULL)
	{
		prepare_time_column(relid, time_column, column);
		if (partitioned)
			check_partition_columns(relid, time_column, true);
	}
	/*
	 * The capture index first, so that it sees a row before the unique
	 * index (the executor goes by index OID) and refuses a number written
	 * by hand before the unique index can call it a duplicate.  Under the
	 * SQL objects of a version before 0.7.0 (this library is installed and
	 * ALTER EXTENSION UPDATE has not run yet) there is no capture access
	 * method: the stream gets the triggers of those versions (guard.c).
	 * A capture index the table has already (a restore of the table alone,
	 * pg_dump -t, brings it back) is kept: a second one would capture every
	 * row twice.
	 */
	capture = OidIsValid(get_index_am_oid("stream_seq_capture", true));
	if (capture && !OidIsValid(stream_capture_index(relid)))
		stream_create_capture_index(relid, column, time_column);
	if (!OidIsValid(stream_unique_index(relid, attnum)))
	{
		stream_caller_exec(psprintf("CREATE %sINDEX ON %s (%s) WHERE %s %s",
							   partitioned ? "" : "UNIQUE ",
							   table, quote_identifier(column),
							   quote_identifier(column),
							   capture ? "> 0" : "IS NOT NULL"), 0, NULL, NULL);
		CommandCounterIncrement();
	}
	if (partitioned)
		check_no_duplicates(relid, column);

	/* never below what this table or its old sequence ever handed out */
	floor = Max(Max(retired_next(relid), owned_sequence_next(relid, attnum)), 1);
	check_numbers_positive(relid, column, attnum);
	table_numbers(relid, column, &lowest, &highest, &unnumbered);
	base = Max(Max(highest, 0), floor - 1);
	check_written_columns(relid, column, time_column);
	if (time_column != NULL)
		check_times_rising(relid, column, time_column);
	if (unnumbered > 0)
	{
		/*
		 * The rows numbered here get the time of this numbering, no earlier
		 * than any time in the table: their numbers are above every number
		 * there.
		 */
		char	   *set_time = "";

		if (time_column != NULL)
			set_time = psprintf(", %s = (SELECT GREATEST(pg_catalog.clock_timestamp(), pg_catalog.max(%s)) FROM %s)",
								quote_identifier(time_column), quote_identifier(time_column),
								stream_source(relid));
		stream_caller_exec(psprintf("UPDATE %s t SET %s = s.n%s "
							   "FROM (SELECT tableoid, ctid, " INT64_FORMAT " + row_number() OVER (ORDER BY tableoid, ctid) AS n "
							   "FROM %s WHERE %s IS NULL) s "
							   "WHERE t.tableoid = s.tableoid AND t.ctid = s.ctid",
							   stream_source(relid), quote_identifier(column), set_time, base,
							   stream_source(relid), quote_identifier(column)), 0, NULL, NULL);
		CommandCounterIncrement();
		table_numbers(relid, column, &lowest, &highest, &unnumbered);
		if (unnumbered > 0)
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("could not number every row of table \"%s\"",
							stream_rel_name(relid)),
					 errdetail("The rows stream_seq updated as the table's owner did not include " INT64_FORMAT " rows without a number.",
							   unnumbered),
					 errhint("Row-level security that applies to the table's owner (FORCE ROW LEVEL SECURITY) hides rows from it; disable it while enabling the stream.")));
	}
	start = Max(base, highest == PG_INT64_MIN ? 0 : highest) + 1;

	head_seq = stream_create_head_sequence(relid, column, start,
										   stream_seq_head_interval);

	create_stream_triggers(relid, column, time_column, capture);
	if (capture)
		stream_set_placeholder_defaults(relid, attnum, time_column);
	if (partitioned)
	{
		List	   *parts = find_all_inheritors(relid, NoLock, NULL);
		ListCell   *lc;

		foreach(lc, parts)
		{
			if (lfirst_oid(lc) != relid)
				stream_add_truncate_trigger(lfirst_oid(lc));
		}
	}
	CommandCounterIncrement();
	stream_protect_index(relid, attnum);

	stream_catalog_insert(relid, column, head_seq);
	{
		Oid			argtypes[2] = {OIDOID, TEXTOID};
		Datum		values[2];

		values[0] = ObjectIdGetDatum(relid);
		if (time_column != NULL)
		{
			values[1] = CStringGetTextDatum(time_column);
			stream_catalog_exec("UPDATE stream_seq.stream SET time_column = $2::pg_catalog.name "
								"WHERE relid::pg_catalog.oid = $1",
								2, argtypes, values, NULL, 0, NULL);
		}
		stream_catalog_exec("DELETE FROM stream_seq.retired WHERE relid::pg_catalog.oid = $1",
							1, argtypes, values, NULL, 0, NULL);
	}
	CommandCounterIncrement();
	CacheInvalidateRelcacheByRelid(relid);

	/*
	 * Attach the slot (one left by an earlier stream on this table starts
	 * afresh) and record this transaction as holding numbers from the
	 * lowest in the table: the rows it numbered, and rows that were in the
	 * table before, are invisible to snapshots taken before it commits, so
	 * those snapshots must get a horizon at or below them.
	 */
	ref = stream_lookup(relid, false);
	stream_slot_restart(ref);
	stream_add_entry(ref, lowest == PG_INT64_MIN ? start : Min(lowest, start));
	stream_xact_has_entry(ref);
	PG_RETURN_VOID();
}

/*
 * drop_stream_triggers
 *		Drop the triggers of the stream, found by their functions.
 */
static void
drop_stream_triggers(Oid relid)
{
	drop_own_triggers(relid);

	/* then what each partition has of its own: the TRUNCATE trigger */
	if (get_rel_relkind(relid) == RELKIND_PARTITIONED_TABLE)
	{
		List	   *parts = find_all_inheritors(relid, AccessShareLock, NULL);
		ListCell   *lc;

		CommandCounterIncrement();
		foreach(lc, parts)
		{
			if (lfirst_oid(lc) != relid)
				drop_own_triggers(lfirst_oid(lc));
		}
	}
}

/*
 * drop_own_triggers
 *		Drop the triggers of table "relid" that run stream_seq's functions.
 */
static void
drop_own_triggers(Oid relid)
{
	Relation	rel = relation_open(relid, AccessShareLock);
	List	   *names = NIL;
	ListCell   *lc;
	int			i;

	if (rel->trigdesc != NULL)
	{
		for (i = 0; i < rel->trigdesc->numtriggers; i++)
		{
			Trigger    *trigger = &rel->trigdesc->triggers[i];

			if (stream_is_own_trigger_function(trigger->tgfoid, NULL))
				names = lappend(names, pstrdup(trigger->tgname));
		}
	}
	relation_close(rel, AccessShareLock);
	foreach(lc, names)
		stream_caller_exec(psprintf("DROP TRIGGER %s ON %s",
							   quote_identifier(lfirst(lc)),
							   qualified_name(relid)), 0, NULL, NULL);
}

/*
 * drop_group_indexes
 *		Drop the indexes that consumer groups of the stream made on its
 *		table (create_group()); the groups go with the catalog row.
 */
static void
drop_group_indexes(Oid relid)
{
	Oid			argtypes[1] = {OIDOID};
	Datum		values[1];
	int64	   *rows;
	uint64		n;
	uint64		i;

	if (!OidIsValid(get_relname_relid("consumer_slot", stream_namespace(false))))
		return;				/* before 0.3.0: no groups */
	stream_resize_drop_indexes(relid, NULL);	/* resize.c */
	values[0] = ObjectIdGetDatum(relid);
	n = stream_catalog_rows("SELECT pg_catalog.to_regclass(slot_index::pg_catalog.text)"
							"::pg_catalog.oid::pg_catalog.int8 "
							"FROM stream_seq.consumer "
							"WHERE stream::pg_catalog.oid = $1 "
							"AND pg_catalog.to_regclass(slot_index::pg_catalog.text) IS NOT NULL",
							1, argtypes, values, 1, &rows);
	for (i = 0; i < n; i++)
	{
		Oid			index = (Oid) rows[i];

		if (get_rel_name(index) != NULL)
			stream_drop_group_index(relid, qualified_name(index));
	}
}

/*
 * stream_retire
 *		Record where a stream's numbering ends, for a later enable() of the
 *		same table, and remove its catalog row (with its consumers) and its
 *		head sequence.  Used by disable().
 */
void
stream_retire(StreamRef *ref)
{
	int64		next = stream_recorded_end(ref->head_seq, ref->head_interval);
	int64		counter;
	int64		block_end;
	Oid			argtypes[2] = {REGCLASSOID, INT8OID};
	Datum		values[2];

	if (stream_counter_read(ref, &counter, &block_end))
		next = Max(next, counter);
	next = Max(next, stream_catalog_first(ref->relid));

	values[0] = ObjectIdGetDatum(ref->relid);
	values[1] = Int64GetDatum(next);
	/* versions before 0.3.0 have no such table: their update adds it */
	if (OidIsValid(get_relname_relid("retired", stream_namespace(false))))
		stream_catalog_exec("INSERT INTO stream_seq.retired (relid, next) VALUES ($1, $2) "
						"ON CONFLICT (relid) DO UPDATE "
						"SET next = greatest(retired.next, excluded.next), "
						"disabled_at = pg_catalog.now()",
						2, argtypes, values, NULL, 0, NULL);
	drop_group_indexes(ref->relid);
	stream_catalog_delete(ref->relid);
	CommandCounterIncrement();
	stream_catalog_exec(psprintf("DROP SEQUENCE IF EXISTS %s",
								 qualified_name(ref->head_seq)),
						0, NULL, NULL, NULL, 0, NULL);
}

/*
 * stream_seq_disable
 *		SQL: disable(stream regclass): stop numbering a stream table.  Its
 *		triggers, head sequence, consumers and catalog row go; the column,
 *		its index and the data stay, and a later enable() continues above
 *		every number handed out.
 */
Datum
stream_seq_disable(PG_FUNCTION_ARGS)
{
	Oid			relid;
	StreamRef  *ref;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("stream table must not be null")));
	relid = PG_GETARG_OID(0);
	stream_check_preloaded();

	ref = stream_lookup(relid, false);
	check_table_owner(relid);

	/* wait for transactions that are writing to the stream */
	LockRelationOid(relid, ExclusiveLock);
	if (stream_capture_has_rows_of(relid))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("cannot disable stream table \"%s\" because it has rows not yet numbered",
						stream_rel_name(relid)),
				 errdetail("This transaction inserted rows into it."),
				 errhint("Commit them before disabling the stream.")));
	ref = stream_lookup(relid, false);

	stream_retire(ref);
	drop_stream_triggers(relid);
	stream_drop_write_path(relid, ref->seq_attnum, ref->time_attnum);
	stream_release_at_commit(relid);
	CacheInvalidateRelcacheByRelid(relid);
	PG_RETURN_VOID();
}
