/*-------------------------------------------------------------------------
 *
 * ddl.c
 *	  The extension's event triggers: what keeps a stream consistent while
 *	  its table is altered or dropped, and refuses DDL that would break it.
 *
 * Event triggers run for every DDL command of every role in every database
 * that has the extension, as the role that issued the command.  So they
 * are C functions that need no privilege on the extension's schema, and
 * that decide from the command's own objects, through syscache and
 * relcache lookups that PostgreSQL makes anyway, whether a stream is
 * involved at all: a table is a stream only if it has a trigger running
 * one of the extension's trigger functions; a dropped stream table drops
 * triggers named stream_seq_*; a head sequence lives in the extension's
 * schema.  Only then is the extension's catalog read (and locked).
 *
 * No event trigger fires for CREATE INDEX: a utility hook protects a
 * stream's new unique index after it is created (stream_index_created).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/relation.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/indexing.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_inherits.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_trigger.h"
#include "catalog/pg_type.h"
#include "commands/event_trigger.h"
#include "commands/extension.h"
#include "commands/trigger.h"
#include "executor/executor.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "tcop/deparse_utility.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/syscache.h"

#include "stream_seq.h"
#include "ddl.h"
#include "shmem.h"
#include "catalog.h"
#include "partition.h"
#include "xactstate.h"
#include "lifecycle.h"
#include "commit.h"
#include "group.h"

PG_FUNCTION_INFO_V1(stream_seq_on_sql_drop);
PG_FUNCTION_INFO_V1(stream_seq_on_ddl_end);
PG_FUNCTION_INFO_V1(stream_seq_on_ddl_start);

static ProcessUtility_hook_type prev_process_utility = NULL;

/*
 * event_rows
 *		The rows of pg_event_trigger_dropped_objects() or
 *		pg_event_trigger_ddl_commands(), called directly (no SQL, no lookup
 *		of a function by name).
 */
static Tuplestorestate *
event_rows(Oid fnoid, TupleDesc *tupdesc)
{
	FmgrInfo	flinfo;
	LOCAL_FCINFO(fcinfo, 0);
	ReturnSetInfo rsinfo;

	fmgr_info(fnoid, &flinfo);
	MemSet(&rsinfo, 0, sizeof(rsinfo));
	rsinfo.type = T_ReturnSetInfo;
	rsinfo.econtext = CreateStandaloneExprContext();
	rsinfo.allowedModes = (int) SFRM_Materialize;
	rsinfo.returnMode = SFRM_ValuePerCall;
	InitFunctionCallInfoData(*fcinfo, &flinfo, 0, InvalidOid, NULL,
							 (Node *) &rsinfo);
	(void) FunctionCallInvoke(fcinfo);
	*tupdesc = rsinfo.setDesc;
	return rsinfo.setResult;
}

/*
 * text_attr
 *		A text column of a row as a C string, or NULL.
 */
static char *
text_attr(TupleTableSlot *slot, int attnum)
{
	bool		isnull;
	Datum		value = slot_getattr(slot, attnum, &isnull);

	return isnull ? NULL : TextDatumGetCString(value);
}

/*
 * address_names
 *		The address_names column of a dropped object: for a trigger,
 *		{schema, table, trigger}.
 */
static List *
address_names(TupleTableSlot *slot, int attnum)
{
	bool		isnull;
	Datum		value = slot_getattr(slot, attnum, &isnull);
	Datum	   *elems;
	bool	   *nulls;
	int			n;
	int			i;
	List	   *result = NIL;

	if (isnull)
		return NIL;
	deconstruct_array(DatumGetArrayTypeP(value), TEXTOID, -1, false,
					  TYPALIGN_INT, &elems, &nulls, &n);
	for (i = 0; i < n; i++)
		result = lappend(result, nulls[i] ? NULL : TextDatumGetCString(elems[i]));
	return result;
}

/* A dropped table, and a dropped trigger named like ours. */
typedef struct DroppedTable
{
	Oid			relid;
	char	   *schema;
	char	   *name;
} DroppedTable;

typedef struct DroppedTrigger
{
	char	   *schema;
	char	   *table;
	char	   *name;
} DroppedTrigger;

/*
 * head_sequence_of
 *		The stream whose head sequence is "seqid", or InvalidOid.
 */
static Oid
head_sequence_of(Oid seqid)
{
	Oid			argtypes[1] = {OIDOID};
	Datum		values[1];
	int64		relid;
	bool		found;

	values[0] = ObjectIdGetDatum(seqid);
	stream_catalog_exec_latest("SELECT relid::pg_catalog.oid::pg_catalog.int8 FROM stream_seq.stream "
							   "WHERE head_seq::pg_catalog.oid = $1",
							   1, argtypes, values, &relid, 1, &found);
	return found ? (Oid) relid : InvalidOid;
}

/*
 * forget_dropped_stream
 *		A stream table was dropped: remove its catalog row (and with it its
 *		consumers) and its head sequence; its shared slot is freed if the
 *		drop commits.
 */
static void
forget_dropped_stream(Oid relid)
{
	Oid			argtypes[1] = {OIDOID};
	Datum		values[1];
	int64		head_seq;
	bool		found;

	values[0] = ObjectIdGetDatum(relid);
	stream_catalog_exec_latest("SELECT head_seq::pg_catalog.oid::pg_catalog.int8 FROM stream_seq.stream "
							   "WHERE relid::pg_catalog.oid = $1",
							   1, argtypes, values, &head_seq, 1, &found);
	if (!found)
		return;
	stream_catalog_delete(relid);
	CommandCounterIncrement();
	if (get_rel_name((Oid) head_seq) != NULL)
		stream_catalog_exec(psprintf("DROP SEQUENCE IF EXISTS %s",
									 stream_qualified_name((Oid) head_seq)),
							0, NULL, NULL, NULL, 0, NULL);
	if (stream_shmem_ready())
		stream_release_at_commit(relid);
}

/*
 * stream_seq_on_sql_drop
 *		sql_drop event trigger: a dropped stream table leaves the catalog;
 *		dropping what a live stream needs (its triggers, which its column
 *		and unique index take with them, or its head sequence) is refused.
 *		Objects that are not ours cost a scan of the dropped-objects list.
 */
Datum
stream_seq_on_sql_drop(PG_FUNCTION_ARGS)
{
	Tuplestorestate *rows;
	TupleDesc	tupdesc;
	TupleTableSlot *slot;
	List	   *tables = NIL;
	List	   *triggers = NIL;
	List	   *sequences = NIL;
	ListCell   *lc;
	ListCell   *lc2;
	const char *ours;

	if (!CALLED_AS_EVENT_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("stream_seq._on_sql_drop() must be called as an event trigger")));
	if (creating_extension)
		PG_RETURN_VOID();

	ours = get_namespace_name(stream_namespace(true));
	rows = event_rows(F_PG_EVENT_TRIGGER_DROPPED_OBJECTS, &tupdesc);
	slot = MakeSingleTupleTableSlot(tupdesc, &TTSOpsMinimalTuple);
	while (tuplestore_gettupleslot(rows, true, false, slot))
	{
		bool		isnull;
		Oid			classid = DatumGetObjectId(slot_getattr(slot, 1, &isnull));
		Oid			objid = DatumGetObjectId(slot_getattr(slot, 2, &isnull));
		int32		objsubid = DatumGetInt32(slot_getattr(slot, 3, &isnull));
		char	   *type = text_attr(slot, 7);
		char	   *schema = text_attr(slot, 8);

		if (classid == TriggerRelationId)
		{
			List	   *names = address_names(slot, 11);

			if (list_length(names) == 3 &&
				stream_is_own_trigger_name(list_nth(names, 2)))
			{
				DroppedTrigger *t = palloc(sizeof(DroppedTrigger));

				t->schema = list_nth(names, 0);
				t->table = list_nth(names, 1);
				t->name = list_nth(names, 2);
				triggers = lappend(triggers, t);
			}
		}
		else if (classid == RelationRelationId && objsubid == 0 &&
				 type != NULL && strcmp(type, "table") == 0)
		{
			DroppedTable *t = palloc(sizeof(DroppedTable));

			t->relid = objid;
			t->schema = schema;
			t->name = text_attr(slot, 9);
			tables = lappend(tables, t);
		}
		else if (classid == RelationRelationId && objsubid == 0 &&
				 type != NULL && strcmp(type, "sequence") == 0 &&
				 ours != NULL && schema != NULL && strcmp(schema, ours) == 0)
			sequences = lappend_oid(sequences, objid);
	}
	ExecDropSingleTupleTableSlot(slot);

	/* partitions of streams take their numbers out of the stream */
	if (OidIsValid(stream_catalog_relid(true)))
	{
		foreach(lc, tables)
			stream_partition_dropped(((DroppedTable *) lfirst(lc))->relid);
	}

	/* nothing of a stream was dropped, or the extension itself is going */
	if ((triggers == NIL && sequences == NIL) ||
		!OidIsValid(stream_catalog_relid(true)))
		PG_RETURN_VOID();

	foreach(lc, triggers)
	{
		DroppedTrigger *trigger = lfirst(lc);
		Oid			relid = InvalidOid;
		bool		table_dropped = false;

		foreach(lc2, tables)
		{
			DroppedTable *table = lfirst(lc2);

			if (strcmp(table->schema, trigger->schema) == 0 &&
				strcmp(table->name, trigger->table) == 0)
			{
				relid = table->relid;
				table_dropped = true;
				break;
			}
		}
		if (table_dropped)
		{
			forget_dropped_stream(relid);
			continue;
		}
		relid = get_relname_relid(trigger->table,
								  get_namespace_oid(trigger->schema, true));
		/* what 0.7.0 does without (upgrade_write_path() drops them) */
		if (OidIsValid(relid) && stream_trigger_obsolete(relid, trigger->name))
			continue;
		if (OidIsValid(relid) && get_rel_relispartition(relid) &&
			OidIsValid(stream_root_of(relid)))
			ereport(ERROR,
					(errcode(ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST),
					 errmsg("cannot drop trigger \"%s\" of partition \"%s\" of stream table \"%s\"",
							trigger->name, stream_rel_name(relid),
							stream_rel_name(stream_root_of(relid))),
					 errdetail("A partition truncated without it would take its numbers out of the stream unannounced."),
					 errhint("Detach the partition, or use stream_seq.disable() to stop numbering the table.")));
		if (OidIsValid(relid) && stream_catalog_has(relid))
			ereport(ERROR,
					(errcode(ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST),
					 errmsg("cannot drop trigger \"%s\" of stream table \"%s\"",
							trigger->name, stream_rel_name(relid)),
					 errdetail("Its column, its unique index and its triggers are needed to number the table's rows."),
					 errhint("Use stream_seq.disable() to stop numbering the table.")));
	}

	foreach(lc, sequences)
	{
		Oid			relid = head_sequence_of(lfirst_oid(lc));

		if (OidIsValid(relid))
			ereport(ERROR,
					(errcode(ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST),
					 errmsg("cannot drop the head sequence of stream table \"%s\"",
							stream_rel_name(relid)),
					 errhint("Use stream_seq.disable() to stop numbering the table.")));
	}
	PG_RETURN_VOID();
}

/*
 * guard_columns
 *		The stream column's number, from the guard trigger's UPDATE OF
 *		list (attribute numbers survive a rename, names do not), and the
 *		time column's, the second in the list if there is one (else
 *		InvalidAttrNumber in *time_attnum, when asked).
 */
static AttrNumber
guard_columns(Relation rel, AttrNumber *time_attnum)
{
	int			i;

	if (time_attnum != NULL)
		*time_attnum = InvalidAttrNumber;
	if (rel->trigdesc == NULL)
		return InvalidAttrNumber;
	for (i = 0; i < rel->trigdesc->numtriggers; i++)
	{
		Trigger    *trigger = &rel->trigdesc->triggers[i];
		const char *name;

		if (stream_is_own_trigger_function(trigger->tgfoid, &name) &&
			strcmp(name, "stream_seq_guard") == 0 &&
			(trigger->tgnattr == 1 || trigger->tgnattr == 2))
		{
			if (time_attnum != NULL && trigger->tgnattr == 2)
				*time_attnum = trigger->tgattr[1];
			return trigger->tgattr[0];
		}
	}
	return InvalidAttrNumber;
}

/*
 * stream_guard_column
 *		The stream column's number (see guard_columns).
 */
static AttrNumber
stream_guard_column(Relation rel)
{
	return guard_columns(rel, NULL);
}

/*
 * check_time_column
 *		After DDL on a stream table with a time column: it stays a nullable
 *		timestamptz without a default, and the catalog follows a rename.
 */
static void
check_time_column(Relation rel, AttrNumber attnum)
{
	Form_pg_attribute att;
	Oid			argtypes[2] = {OIDOID, TEXTOID};
	Datum		values[2];

	if (attnum == InvalidAttrNumber || attnum > RelationGetNumberOfAttributes(rel))
		return;
	att = TupleDescAttr(RelationGetDescr(rel), attnum - 1);
	if (att->atttypid != TIMESTAMPTZOID)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot change the type of time column \"%s\" of stream table \"%s\"",
						NameStr(att->attname), RelationGetRelationName(rel)),
				 errhint("Run stream_seq.disable() first.")));
	if (att->attnotnull || !stream_default_is_placeholder(rel, attnum, true))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TABLE_DEFINITION),
				 errmsg("time column \"%s\" of stream table \"%s\" cannot have NOT NULL or a default of its own",
						NameStr(att->attname), RelationGetRelationName(rel)),
				 errdetail("The time column is written at commit, with the number; rows hold the placeholder -infinity (the default stream_seq gives the column) or NULL until then.")));
	values[0] = ObjectIdGetDatum(RelationGetRelid(rel));
	values[1] = CStringGetTextDatum(NameStr(att->attname));
	if (stream_catalog_exec("UPDATE stream_seq.stream SET time_column = $2::pg_catalog.name "
							"WHERE relid::pg_catalog.oid = $1 "
							"AND time_column OPERATOR(pg_catalog.<>) $2::pg_catalog.name",
							2, argtypes, values, NULL, 0, NULL) > 0)
		CacheInvalidateRelcacheByRelid(RelationGetRelid(rel));
}

/*
 * command_drops
 *		Whether ALTER TABLE command "cmd" drops a constraint or a column:
 *		what can take the unique index of the stream's column with it.  A
 *		command not collected (NULL) is taken to drop.
 */
static bool
command_drops(CollectedCommand *cmd)
{
	ListCell   *lc;

	if (cmd == NULL)
		return true;
	if (cmd->type != SCT_AlterTable)
		return false;
	foreach(lc, cmd->d.alterTable.subcmds)
	{
		AlterTableCmd *at = (AlterTableCmd *) ((CollectedATSubcmd *) lfirst(lc))->parsetree;

		if (!IsA(at, AlterTableCmd))
			continue;
		switch (at->subtype)
		{
			case AT_DropConstraint:
			case AT_DropColumn:
#if PG_VERSION_NUM < 160000
			case AT_DropConstraintRecurse:
			case AT_DropColumnRecurse:
#endif
				return true;
			default:
				break;
		}
	}
	return false;
}

/*
 * check_placeholder_indexes
 *		A stream table whose rows hold the placeholders until commit (its
 *		stream column has the placeholder default) must not have a unique or
 *		exclusion index that takes such rows: every two would conflict.  An
 *		index that takes them otherwise (an index on the column without the
 *		predicate "seq > 0") keeps rows from being numbered in place, which
 *		a warning says.  Partitions are checked as they are created
 *		(PostgreSQL creates their indexes through this too).
 */
static void
check_placeholder_indexes(Relation rel, AttrNumber attnum,
						  AttrNumber time_attnum)
{
	List	   *indexes;
	ListCell   *lc;

	if (!TupleDescAttr(RelationGetDescr(rel), attnum - 1)->atthasdef)
		return;					/* rows are stored with NULL */
	indexes = RelationGetIndexList(rel);
	foreach(lc, indexes)
	{
		Relation	index = index_open(lfirst_oid(lc), AccessShareLock);
		char	   *column = NameStr(TupleDescAttr(RelationGetDescr(rel), attnum - 1)->attname);

		if (stream_index_admits_placeholder(index, attnum, time_attnum))
		{
			Oid			stream = rel->rd_rel->relispartition ?
				stream_root_of(RelationGetRelid(rel)) : InvalidOid;

			if ((index->rd_index->indisunique || index->rd_index->indisexclusion) &&
				OidIsValid(stream))
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_OBJECT_DEFINITION),
						 errmsg("index \"%s\" of partition \"%s\" of stream table \"%s\" takes rows before they are numbered",
								RelationGetRelationName(index), RelationGetRelationName(rel),
								stream_rel_name(stream)),
						 errdetail("Rows hold the placeholder 0 in column \"%s\" until their transaction commits; any two of them would conflict in this index.",
								   column),
						 errhint("Add WHERE %s > 0 to the index.", quote_identifier(column))));
			if (index->rd_index->indisunique || index->rd_index->indisexclusion)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_OBJECT_DEFINITION),
						 errmsg("index \"%s\" of stream table \"%s\" takes rows before they are numbered",
								RelationGetRelationName(index), RelationGetRelationName(rel)),
						 errdetail("Rows hold the placeholder 0 in column \"%s\" until their transaction commits; any two of them would conflict in this index.",
								   column),
						 errhint("Add WHERE %s > 0 to the index.", quote_identifier(column))));
			if (OidIsValid(stream))
				ereport(WARNING,
						(errcode(ERRCODE_WARNING),
						 errmsg("rows of partition \"%s\" of stream table \"%s\" are numbered by an update while index \"%s\" exists",
								RelationGetRelationName(rel), stream_rel_name(stream),
								RelationGetRelationName(index)),
						 errdetail("The index takes rows before they are numbered (with the placeholder 0 in column \"%s\"); numbering them in place would leave its entries behind.",
								   column),
						 errhint("Add WHERE %s > 0 to the index, so that rows are numbered in place.",
								 quote_identifier(column))));
			else
				ereport(WARNING,
						(errcode(ERRCODE_WARNING),
						 errmsg("rows of stream table \"%s\" are numbered by an update while index \"%s\" exists",
								RelationGetRelationName(rel), RelationGetRelationName(index)),
						 errdetail("The index takes rows before they are numbered (with the placeholder 0 in column \"%s\"); numbering them in place would leave its entries behind.",
								   column),
						 errhint("Add WHERE %s > 0 to the index, so that rows are numbered in place.",
								 quote_identifier(column))));
		}
		index_close(index, AccessShareLock);
	}
	list_free(indexes);
}

/*
 * check_stream_table
 *		After DDL "cmd" on a stream table: follow a renamed column; refuse
 *		what would break the stream (NOT NULL or a default on the column,
 *		an unlogged table, disabled triggers, a deferrable unique
 *		constraint, a CHECK, foreign key or generated column on the columns
 *		written at commit, dropping the unique index on the column); give
 *		a unique index it created (a UNIQUE or PRIMARY KEY constraint) the
 *		protection of stream_protect_index.
 *
 *		A table without the unique index is refused only when the command
 *		dropped something.  Otherwise the index is not there yet: a
 *		parallel pg_restore may create the stream's triggers (and run the
 *		ALTER TABLE that comes with one of them) before the index, and the
 *		index's creation protects it then (stream_index_created).  Refusing
 *		there failed such a restore with nothing wrong.
 */
static void
check_stream_table(Oid relid, CollectedCommand *cmd)
{
	Relation	rel = relation_open(relid, AccessShareLock);
	AttrNumber	time_attnum;
	AttrNumber	attnum = guard_columns(rel, &time_attnum);
	char	   *relname = pstrdup(RelationGetRelationName(rel));
	Form_pg_attribute att;
	int			i;

	if (attnum == InvalidAttrNumber || attnum > RelationGetNumberOfAttributes(rel))
	{
		relation_close(rel, AccessShareLock);
		return;
	}
	att = TupleDescAttr(RelationGetDescr(rel), attnum - 1);
	if (att->atttypid != INT8OID)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot change the type of column \"%s\" of stream table \"%s\"",
						NameStr(att->attname), relname),
				 errhint("Run stream_seq.disable() first.")));
	if (att->attnotnull || !stream_default_is_placeholder(rel, attnum, false))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TABLE_DEFINITION),
				 errmsg("column \"%s\" of stream table \"%s\" cannot have NOT NULL or a default of its own",
						NameStr(att->attname), relname),
				 errdetail("Stream numbers are assigned at commit; rows hold the placeholder 0 (the default stream_seq gives the column) or NULL until then.")));
	if (rel->rd_rel->relpersistence != RELPERSISTENCE_PERMANENT)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("stream table \"%s\" must stay logged", relname),
				 errdetail("A crash empties an unlogged table, and numbers must survive crashes.")));
	for (i = 0; rel->trigdesc != NULL && i < rel->trigdesc->numtriggers; i++)
	{
		Trigger    *trigger = &rel->trigdesc->triggers[i];

		if (stream_trigger_disabled(RelationGetRelid(rel), trigger))
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("cannot disable the triggers of stream table \"%s\"", relname),
					 errdetail("Rows inserted without them would never get a number, and numbers replicated into the table would not move its counter."),
					 errhint("Run stream_seq.disable() to stop numbering the table.")));
	}
	stream_check_no_deferrable_index(rel);
	stream_check_written_columns_free(rel, attnum, time_attnum);
	check_placeholder_indexes(rel, attnum, time_attnum);
	stream_set_placeholder_defaults(relid, attnum,
									time_attnum != InvalidAttrNumber ?
									get_attname(relid, time_attnum, false) : NULL);
	if (OidIsValid(stream_unique_index(relid, attnum)))
		stream_protect_index(relid, attnum);
	else if (command_drops(cmd))
		ereport(ERROR,
				(errcode(ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST),
				 errmsg("cannot drop the unique index on column \"%s\" of stream table \"%s\"",
						NameStr(att->attname), relname),
				 errdetail("Readers and the restart of the stream's counter use it.")));

	/* follow a renamed column */
	{
		Oid			argtypes[2] = {OIDOID, TEXTOID};
		Datum		values[2];

		values[0] = ObjectIdGetDatum(relid);
		values[1] = CStringGetTextDatum(NameStr(att->attname));
		if (stream_catalog_exec("UPDATE stream_seq.stream SET seq_column = $2::pg_catalog.name "
								"WHERE relid::pg_catalog.oid = $1 "
								"AND seq_column OPERATOR(pg_catalog.<>) $2::pg_catalog.name",
								2, argtypes, values, NULL, 0, NULL) > 0)
			CacheInvalidateRelcacheByRelid(relid);
	}
	check_time_column(rel, time_attnum);
	relation_close(rel, AccessShareLock);
}

/*
 * check_partition
 *		A table that is a partition of stream "stream" after DDL: what
 *		partition.c checks of a partition, and no deferrable unique or
 *		exclusion constraint, CHECK, foreign key or generated column on the
 *		columns written at commit (as on the stream table).
 */
static void
check_partition(Oid stream, Oid relid, bool created)
{
	Relation	rel;
	StreamRef  *ref;

	stream_check_partition(stream, relid, created);
	ref = stream_lookup(stream, false);
	rel = relation_open(relid, AccessShareLock);
	stream_check_no_deferrable_index(rel);
	stream_check_written_columns_free(rel,
									  get_attnum(relid, get_attname(stream, ref->seq_attnum, false)),
									  ref->time_attnum == InvalidAttrNumber ? InvalidAttrNumber :
									  get_attnum(relid, get_attname(stream, ref->time_attnum, false)));
	relation_close(rel, AccessShareLock);
}

/*
 * check_inheritance
 *		Refuse a table that inherits from a stream table (CREATE TABLE ...
 *		INHERITS, ALTER TABLE ... INHERIT): its rows would have no number,
 *		or one written by hand, and reading the parent would return them.
 *		A partition of a partitioned stream is checked instead (it gets the
 *		stream's row triggers from PostgreSQL, and the TRUNCATE trigger
 *		from us when it is created: not on other DDL, such as a restore's
 *		ALTER TABLE before the dump's own CREATE TRIGGER of it).
 */
static void
check_inheritance(Oid relid, CommandTag tag)
{
	Relation	inherits;
	SysScanDesc scan;
	ScanKeyData key;
	HeapTuple	tuple;

	if (!has_superclass(relid))
		return;
	if (get_rel_relispartition(relid))
	{
		Oid			stream = stream_root_of(relid);

		if (OidIsValid(stream))
			check_partition(stream, relid, tag == CMDTAG_CREATE_TABLE);
		return;
	}
	inherits = table_open(InheritsRelationId, AccessShareLock);
	ScanKeyInit(&key, Anum_pg_inherits_inhrelid, BTEqualStrategyNumber,
				F_OIDEQ, ObjectIdGetDatum(relid));
	scan = systable_beginscan(inherits, InheritsRelidSeqnoIndexId, true,
							  NULL, 1, &key);
	while (HeapTupleIsValid(tuple = systable_getnext(scan)))
	{
		Oid			parent = ((Form_pg_inherits) GETSTRUCT(tuple))->inhparent;

		if (stream_table_has_triggers(parent) && stream_catalog_has(parent))
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("table \"%s\" cannot inherit from stream table \"%s\"",
							stream_rel_name(relid), stream_rel_name(parent)),
					 errdetail("Rows of an inheriting table would have no number, or one written by hand.")));
	}
	systable_endscan(scan);
	table_close(inherits, AccessShareLock);
}

/*
 * refuse_change_capture
 *		Refuse pg_repack's log trigger on a stream table or a partition of
 *		one.  pg_repack copies the table, replays the changes its trigger
 *		logged meanwhile, and swaps the copy in; the trigger logs a new
 *		row's INSERT with the column NULL, and the number written at commit
 *		fires no trigger, so the row would stay without a number for good.
 *		Its trigger is created by DDL, before anything is copied: refused
 *		here, pg_repack stops and cleans up with nothing changed.
 */
static void
refuse_change_capture(Oid relid, Oid funcid)
{
	Oid			stream;
	char	   *nspname;

	if (strcmp(get_func_name(funcid), "repack_trigger") != 0)
		return;
	nspname = get_namespace_name(get_func_namespace(funcid));
	if (nspname == NULL || strcmp(nspname, "repack") != 0)
		return;
	stream = get_rel_relispartition(relid) ? stream_root_of(relid) : relid;
	if (!OidIsValid(stream) || !stream_table_has_triggers(stream) ||
		!stream_catalog_has(stream))
		return;
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("pg_repack cannot repack stream table \"%s\"",
					stream_rel_name(stream)),
			 errdetail("pg_repack replays the rows inserted while it copies the table as they were inserted, without the numbers stream_seq writes at commit; they would never get one."),
			 errhint("Use VACUUM FULL or CLUSTER, which keep every number (they lock the table while they run), or pg_repack --only-indexes for its indexes.")));
}

/*
 * check_trigger
 *		After CREATE TRIGGER or ALTER TRIGGER: the triggers of a stream keep
 *		the names disable() and the sql_drop event trigger know them by;
 *		once a restore has created the assignment trigger, the guard
 *		trigger and the unique index, the trigger gets its dependency on
 *		the index back.
 */
static void
check_trigger(Oid trigid, CommandTag tag)
{
	Relation	triggers = table_open(TriggerRelationId, AccessShareLock);
	SysScanDesc scan;
	ScanKeyData key;
	HeapTuple	tuple;
	Oid			relid = InvalidOid;
	Oid			funcid = InvalidOid;
	const char *expected;

	ScanKeyInit(&key, Anum_pg_trigger_oid, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(trigid));
	scan = systable_beginscan(triggers, TriggerOidIndexId, true, NULL, 1, &key);
	tuple = systable_getnext(scan);
	if (HeapTupleIsValid(tuple))
	{
		relid = ((Form_pg_trigger) GETSTRUCT(tuple))->tgrelid;
		funcid = ((Form_pg_trigger) GETSTRUCT(tuple))->tgfoid;
	}
	systable_endscan(scan);
	table_close(triggers, AccessShareLock);

	if (OidIsValid(relid) && tag == CMDTAG_CREATE_TRIGGER)
		refuse_change_capture(relid, funcid);
	if (!OidIsValid(relid) || !stream_is_own_trigger_function(funcid, &expected) ||
		!stream_catalog_has(relid))
		return;
	if (tag == CMDTAG_ALTER_TRIGGER)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("cannot alter trigger \"%s\" of stream table \"%s\"",
						expected, stream_rel_name(relid)),
				 errhint("Use stream_seq.disable() to stop numbering the table.")));
	/*
	 * The index is protected through the assignment trigger, and its
	 * column is known from the guard trigger: a restore creates them (and
	 * the index) in any order, so each of them tries.
	 */
	if (tag == CMDTAG_CREATE_TRIGGER)
	{
		Relation	rel = relation_open(relid, AccessShareLock);
		AttrNumber	attnum = stream_guard_column(rel);

		relation_close(rel, AccessShareLock);
		if (attnum != InvalidAttrNumber)
			stream_protect_index(relid, attnum);
	}
}

/*
 * stream_index_created
 *		After CREATE INDEX "stmt" (ProcessUtility): an index on a stream
 *		table or on one of its partitions that would take the placeholder
 *		is refused or warned of (check_placeholder_indexes); an index on a
 *		stream table may be the unique index of its column that a restore
 *		creates after the stream's triggers (a parallel pg_restore runs them
 *		in either order): give it the protection of stream_protect_index.
 *		Costs a syscache lookup for a table that is not a stream.
 */
static void
stream_index_created(IndexStmt *stmt)
{
	Oid			relid;
	Oid			stream;
	Relation	rel;
	AttrNumber	attnum;
	AttrNumber	time_attnum;

	if (creating_extension || !IsTransactionState() || stmt->relation == NULL ||
		!OidIsValid(stream_namespace(true)))
		return;
	relid = RangeVarGetRelid(stmt->relation, NoLock, true);
	if (!OidIsValid(relid) || !stream_table_has_triggers(relid))
		return;
	if (stream_catalog_has(relid))
		stream = relid;
	else if (get_rel_relispartition(relid))
		stream = stream_root_of(relid);
	else
		return;
	if (!OidIsValid(stream))
		return;
	rel = relation_open(relid, AccessShareLock);
	attnum = guard_columns(rel, &time_attnum);
	if (attnum != InvalidAttrNumber)
		check_placeholder_indexes(rel, attnum, time_attnum);
	relation_close(rel, AccessShareLock);
	if (attnum != InvalidAttrNumber && stream == relid)
		stream_protect_index(relid, attnum);
}

/*
 * refuse_second_capture_index
 *		Before CREATE INDEX "stmt" (ProcessUtility): a table gets one index
 *		of access method stream_seq_capture, the one enable() creates (or a
 *		restore brings back).  A second would record every row once more,
 *		and the commit would give each row one number of several (the rest
 *		gaps), so that a transaction's rows no longer get consecutive
 *		numbers.  Refused before the index is built, as CREATE INDEX
 *		CONCURRENTLY commits it before the command ends.
 */
static void
refuse_second_capture_index(IndexStmt *stmt)
{
	Oid			relid;
	Oid			existing;

	if (stmt->accessMethod == NULL ||
		strcmp(stmt->accessMethod, "stream_seq_capture") != 0 ||
		stmt->relation == NULL || !IsTransactionState())
		return;
	relid = RangeVarGetRelid(stmt->relation, NoLock, true);
	if (!OidIsValid(relid))
		return;
	/* IF NOT EXISTS naming an existing relation: PostgreSQL skips it */
	if (stmt->if_not_exists && stmt->idxname != NULL &&
		OidIsValid(get_relname_relid(stmt->idxname, get_rel_namespace(relid))))
		return;
	existing = stream_capture_index(relid);
	if (OidIsValid(existing))
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("table \"%s\" already has index \"%s\" of access method \"stream_seq_capture\"",
						get_rel_name(relid), get_rel_name(existing)),
				 errdetail("A second one would record every row twice, and the rows of a transaction would no longer get consecutive numbers."),
				 errhint("To rebuild the index, use REINDEX.")));
}

/*
 * protect_created_index
 *		ProcessUtility hook: before CREATE INDEX, refuse a second capture
 *		index (refuse_second_capture_index); after it, protect a stream's
 *		new unique index (stream_index_created): no event trigger of ours
 *		fires for CREATE INDEX.
 */
static void
protect_created_index(PlannedStmt *pstmt, const char *queryString,
					  bool readOnlyTree, ProcessUtilityContext context,
					  ParamListInfo params, QueryEnvironment *queryEnv,
					  DestReceiver *dest, QueryCompletion *qc)
{
	if (IsA(pstmt->utilityStmt, IndexStmt))
		refuse_second_capture_index((IndexStmt *) pstmt->utilityStmt);
	if (prev_process_utility)
		prev_process_utility(pstmt, queryString, readOnlyTree, context,
							 params, queryEnv, dest, qc);
	else
		standard_ProcessUtility(pstmt, queryString, readOnlyTree, context,
								params, queryEnv, dest, qc);
	if (IsA(pstmt->utilityStmt, IndexStmt))
		stream_index_created((IndexStmt *) pstmt->utilityStmt);
}

/*
 * stream_ddl_init
 *		Install the utility hook (from _PG_init, preloaded or not, as the
 *		event triggers work in either case).
 */
void
stream_ddl_init(void)
{
	prev_process_utility = ProcessUtility_hook;
	ProcessUtility_hook = protect_created_index;
}

/*
 * check_partition_commands
 *		After ALTER TABLE on partitioned stream "stream", or on one of its
 *		sub-partitioned partitions: a table attached
 *		must be empty and fit the stream; a table detached takes its
 *		numbers out of the stream (first() moves past them), also when it
 *		is the FINALIZE of an interrupted DETACH ... CONCURRENTLY.  The
 *		subcommands come from the collected command, which names the
 *		partition.
 */
static void
check_partition_commands(Oid stream, CollectedCommand *cmd)
{
	ListCell   *lc;

	if (cmd == NULL || cmd->type != SCT_AlterTable)
		return;
	foreach(lc, cmd->d.alterTable.subcmds)
	{
		CollectedATSubcmd *sub = lfirst(lc);
		AlterTableCmd *at = (AlterTableCmd *) sub->parsetree;
		PartitionCmd *part;
		Oid			relid;

		if (!IsA(at, AlterTableCmd) ||
			(at->subtype != AT_AttachPartition &&
			 at->subtype != AT_DetachPartition &&
			 at->subtype != AT_DetachPartitionFinalize))
			continue;
		part = (PartitionCmd *) at->def;
		relid = RangeVarGetRelid(part->name, NoLock, true);
		if (!OidIsValid(relid))
			continue;
		if (at->subtype == AT_AttachPartition)
		{
			stream_check_attached(stream, relid);
			check_partition(stream, relid, true);
		}
		else
		{
			stream_partition_detached(stream, relid);
			stream_partition_detached_end(stream, relid);
		}
	}
}

/*
 * stream_seq_on_ddl_end
 *		ddl_command_end event trigger for ALTER TABLE, ALTER SEQUENCE,
 *		CREATE TABLE, CREATE TRIGGER and ALTER TRIGGER.  For each object the
 *		command touched: a stream table is checked (check_stream_table); a
 *		table that now inherits from one is refused; a head sequence may
 *		not be altered (it must never go back); the stream triggers keep
 *		their names; after ALTER TABLE of a stream, its groups' slot
 *		expressions are printed again from their indexes.
 */
Datum
stream_seq_on_ddl_end(PG_FUNCTION_ARGS)
{
	EventTriggerData *trigdata = (EventTriggerData *) fcinfo->context;
	Tuplestorestate *rows;
	TupleDesc	tupdesc;
	TupleTableSlot *slot;
	Oid			ours;

	if (!CALLED_AS_EVENT_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("stream_seq._on_ddl_end() must be called as an event trigger")));
	if (creating_extension)
		PG_RETURN_VOID();
	ours = stream_namespace(true);
	if (!OidIsValid(ours))
		PG_RETURN_VOID();

	rows = event_rows(F_PG_EVENT_TRIGGER_DDL_COMMANDS, &tupdesc);
	slot = MakeSingleTupleTableSlot(tupdesc, &TTSOpsMinimalTuple);
	while (tuplestore_gettupleslot(rows, true, false, slot))
	{
		bool		isnull;
		Oid			classid = DatumGetObjectId(slot_getattr(slot, 1, &isnull));
		Oid			objid = DatumGetObjectId(slot_getattr(slot, 2, &isnull));

		if (classid == TriggerRelationId)
		{
			check_trigger(objid, trigdata->tag);
			continue;
		}
		if (classid != RelationRelationId)
			continue;

		switch (get_rel_relkind(objid))
		{
			case RELKIND_SEQUENCE:
				if (get_rel_namespace(objid) == ours &&
					OidIsValid(stream_catalog_relid(true)) &&
					OidIsValid(head_sequence_of(objid)))
					ereport(ERROR,
							(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
							 errmsg("cannot alter the head sequence of stream table \"%s\"",
									stream_rel_name(head_sequence_of(objid))),
							 errdetail("It records every number the stream handed out; it must never go back.")));
				break;
			case RELKIND_RELATION:
				check_inheritance(objid, trigdata->tag);
				if (stream_table_has_triggers(objid) && stream_catalog_has(objid))
				{
					check_stream_table(objid, (CollectedCommand *)
									   DatumGetPointer(slot_getattr(slot, 9, &isnull)));
					if (trigdata->tag == CMDTAG_ALTER_TABLE)
						stream_group_refresh_slot_exprs(objid);
				}
				break;
			case RELKIND_PARTITIONED_TABLE:
				if (get_rel_relispartition(objid))
					check_inheritance(objid, trigdata->tag);
				if (stream_table_has_triggers(objid) && stream_catalog_has(objid))
				{
					check_stream_table(objid, (CollectedCommand *)
									   DatumGetPointer(slot_getattr(slot, 9, &isnull)));
					check_partition_commands(objid, (CollectedCommand *)
											 DatumGetPointer(slot_getattr(slot, 9, &isnull)));
					if (trigdata->tag == CMDTAG_ALTER_TABLE)
						stream_group_refresh_slot_exprs(objid);
				}
				else if (get_rel_relispartition(objid))
				{
					/*
					 * A sub-partitioned partition of a stream: what is
					 * attached to it or detached from it joins or leaves
					 * the stream just the same.
					 */
					Oid			root = stream_root_of(objid);

					if (OidIsValid(root))
						check_partition_commands(root, (CollectedCommand *)
												 DatumGetPointer(slot_getattr(slot, 9, &isnull)));
				}
				break;
			default:
				break;
		}
	}
	ExecDropSingleTupleTableSlot(slot);
	PG_RETURN_VOID();
}

/*
 * stream_seq_on_ddl_start
 *		ddl_command_start event trigger for ALTER TABLE.  ALTER TABLE ...
 *		DETACH PARTITION ... CONCURRENTLY commits its first transaction,
 *		after which new snapshots no longer see the partition, then waits
 *		for older snapshots before it finishes and ddl_command_end runs.  A
 *		consumer reading in between would advance past the partition's
 *		numbers without seeing its rows, and first() would move past them
 *		only afterwards: nobody told.  So before the command starts, in its
 *		first transaction, the partition's writers are waited for and
 *		first() moves past its highest number (stream_partition_detaching);
 *		rows that would still arrive there are refused by its guard trigger
 *		once the detach is pending (assign.c).
 */
Datum
stream_seq_on_ddl_start(PG_FUNCTION_ARGS)
{
	EventTriggerData *trigdata = (EventTriggerData *) fcinfo->context;
	AlterTableStmt *stmt;
	ListCell   *lc;

	if (!CALLED_AS_EVENT_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("stream_seq._on_ddl_start() must be called as an event trigger")));
	if (creating_extension || !OidIsValid(stream_namespace(true)) ||
		!IsA(trigdata->parsetree, AlterTableStmt))
		PG_RETURN_VOID();
	stmt = (AlterTableStmt *) trigdata->parsetree;
	foreach(lc, stmt->cmds)
	{
		AlterTableCmd *at = lfirst(lc);
		PartitionCmd *part;
		Oid			parent;
		Oid			relid;
		Oid			stream;

		if (!IsA(at, AlterTableCmd) || at->subtype != AT_DetachPartition)
			continue;
		part = (PartitionCmd *) at->def;
		if (!part->concurrent)
			continue;
		parent = RangeVarGetRelid(stmt->relation, NoLock, true);
		relid = RangeVarGetRelid(part->name, NoLock, true);
		if (!OidIsValid(parent) || !OidIsValid(relid))
			continue;

		/*
		 * This runs before PostgreSQL checks the command: a role that may
		 * not detach (it must own the partitioned table) must not get to
		 * lock the partition either; PostgreSQL refuses it right after.
		 */
		if (!pg_class_ownercheck(parent, GetUserId()) ||
			!get_rel_relispartition(relid))
			continue;
		stream = stream_catalog_has(parent) ? parent : stream_root_of(parent);
		if (OidIsValid(stream))
			stream_partition_detaching(stream, relid);
	}
	PG_RETURN_VOID();
}
