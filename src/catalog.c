/*-------------------------------------------------------------------------
 *
 * catalog.c
 *	  The stream catalog (table stream_seq.stream), the backend's cache of
 *	  it, and the way internal statements run as another role.
 *
 * What is the extension's own is recognised here without reading the
 * catalog (its schema, its trigger functions and the names enable() gives
 * the triggers), for the event triggers' cheap first test.
 *
 * Also what other modules need to know of the database around the stream:
 * its owner (who may read what pg_dump reads), locks on roles that own
 * consumers, and whether pglogical is installed; and the checks the SQL
 * functions of every layer above start with (no NULL argument, SELECT on
 * the stream table).
 *
 * And the hint a role gets when it may not use the extension's schema: the
 * error is PostgreSQL's own, raised by the name lookup before any function
 * of stream_seq runs, so it gets its hint as it is reported
 * (emit_log_hook).
 *
 * A backend looks a stream up once per relcache invalidation of its table:
 * the catalog row says which column is numbered and which sequence records
 * the head; the lookup attaches the stream's shared slot, reclaiming slots
 * that disabled, dropped or never-committed streams left behind when every
 * slot is taken.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/relation.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_inherits.h"
#include "catalog/pg_attrdef.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_class.h"
#include "catalog/pg_database.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_sequence.h"
#include "funcapi.h"
#include "catalog/pg_type.h"
#include "access/stratnum.h"
#include "catalog/pg_opfamily.h"
#include "commands/defrem.h"
#include "commands/extension.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "storage/procarray.h"
#include "optimizer/optimizer.h"
#include "rewrite/rewriteHandler.h"
#include "utils/acl.h"
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
#include "stats.h"
#include "catalog.h"
#include "pagewrite.h"
#include "shmem.h"

PG_FUNCTION_INFO_V1(stream_seq_first);
PG_FUNCTION_INFO_V1(stream_seq_stream_info);
PG_FUNCTION_INFO_V1(stream_seq_stream_of_row_type);

/* Column numbers of stream_seq.stream. */
#define Anum_stream_relid		1
#define Anum_stream_seq_column	2
#define Anum_stream_head_seq	3
#define Anum_stream_trimmed_before 4

static HTAB *stream_cache = NULL;

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
 * The entry of stream_cache that lookup_stream returned or loaded last:
 * entries are never removed, so the pointer stays good; an invalidation
 * clears its "valid" as any other entry's.
 */
static StreamRef *last_ref = NULL;

/*
 * ensure_cache
 *		Set up the backend's cache on first use.
 */
static void
ensure_cache(void)
{
	HASHCTL		ctl;

	if (stream_cache != NULL)
		return;
	ctl.keysize = sizeof(Oid);
	ctl.entrysize = sizeof(StreamRef);
	ctl.hcxt = TopMemoryContext;
	stream_cache = hash_create("stream_seq streams", 16, &ctl,
							   HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	CacheRegisterRelcacheCallback(invalidate_stream_cache, (Datum) 0);
}

/*
 * Names enable() gives the triggers, and their functions.  The last fires
 * only where session_replication_role is "replica" (ENABLE REPLICA
 * TRIGGER): it is how rows that replication writes with their numbers
 * move the counter.
 */
static const char *const trigger_names[] = {
	"stream_seq_guard", "stream_seq_assign", "stream_seq_truncate",
	"stream_seq_replica", "stream_seq_guard_update", "stream_seq_guard_insert"
};
static const char *const trigger_functions[] = {
	"guard_trigger", "assign_trigger", "truncate_trigger",
	"replica_trigger", "guard_update_trigger", "guard_insert_trigger"
};

#define NUM_STREAM_TRIGGERS 6

/* The message of aclcheck_error() for a schema, untranslated. */
#define SCHEMA_DENIED_MESSAGE "permission denied for schema %s"

static emit_log_hook_type prev_emit_log_hook = NULL;

/*
 * schema_denied_hint
 *		emit_log_hook: give the error "permission denied for schema
 *		stream_seq" a hint naming the GRANT that lets the role call the
 *		extension's functions.
 *
 * The error is raised by PostgreSQL's name lookup (aclcheck_error) before
 * any function of the extension runs, so no errhint() of ours can reach it;
 * the hook sees every report this backend emits, and changes only that
 * one: an ERROR with SQLSTATE 42501, the untranslated message of a schema's
 * missing privilege, the extension's schema in the (possibly translated)
 * text, and no hint yet.  The hint is allocated in ErrorContext, as the
 * rest of the report, and reaches the client and the server log alike.
 *
 * Only the caches are asked whether the role has USAGE (see below); no
 * catalog is scanned here, in the middle of reporting an error: the role is
 * named from the settings session_authorization and role when it is the
 * one they name (not inside a SECURITY DEFINER function), and left as a
 * placeholder otherwise.  A report the server does not log (log_min_messages
 * above ERROR) does not go through the hook and keeps no hint.
 */
static void
schema_denied_hint(ErrorData *edata)
{
	if (edata->elevel == ERROR &&
		edata->sqlerrcode == ERRCODE_INSUFFICIENT_PRIVILEGE &&
		edata->hint == NULL &&
		edata->message != NULL &&
		edata->message_id != NULL &&
		strcmp(edata->message_id, SCHEMA_DENIED_MESSAGE) == 0)
	{
		MemoryContext oldcontext = MemoryContextSwitchTo(ErrorContext);
		char	   *ours;
		bool		give_hint;

		ours = psprintf(dgettext(edata->domain ? edata->domain :
								 PG_TEXTDOMAIN("postgres"),
								 SCHEMA_DENIED_MESSAGE),
						"stream_seq");
		give_hint = strcmp(ours, edata->message) == 0;
		/*
		 * The same error refuses CREATE on the schema to a role that has
		 * USAGE (an object created in it), which the GRANT would not
		 * change: no hint then.  Asked of the caches (as error context
		 * callbacks do), only within a transaction, where the error came
		 * from the same check.
		 */
		if (give_hint && IsTransactionState())
		{
			Oid			nsp = get_namespace_oid("stream_seq", true);

			if (OidIsValid(nsp) &&
				pg_namespace_aclcheck(nsp, GetUserId(), ACL_USAGE) == ACLCHECK_OK)
				give_hint = false;
		}
		if (give_hint)
		{
			const char *role = "<role>";
			const char *name = NULL;

			/* the current role's name, where a setting holds it */
			if (GetUserId() == GetSessionUserId())
				name = GetConfigOption("session_authorization", true, false);
			else if (GetUserId() == GetOuterUserId())
				name = GetConfigOption("role", true, false);
			if (name != NULL && name[0] != '\0')
				role = quote_identifier(name);
			edata->hint =
				psprintf("To let the role call the functions of stream_seq, a superuser runs GRANT USAGE ON SCHEMA stream_seq TO %s; "
						 "each function then checks its privileges on the stream table (\"Privileges\" in stream_seq's doc/usage.md).",
						 role);
		}
		pfree(ours);
		MemoryContextSwitchTo(oldcontext);
	}

	if (prev_emit_log_hook)
		prev_emit_log_hook(edata);
}

/*
 * stream_catalog_init
 *		Install the hint of the missing schema privilege
 *		(schema_denied_hint).  Only a preloaded library is there when
 *		the name lookup fails.
 */
void
stream_catalog_init(void)
{
	prev_emit_log_hook = emit_log_hook;
	emit_log_hook = schema_denied_hint;
}

/*
 * stream_namespace
 *		OID of the extension's schema (InvalidOid if missing and
 *		"missing_ok").  A syscache lookup: no privilege on it is needed.
 */
Oid
stream_namespace(bool missing_ok)
{
	return get_namespace_oid("stream_seq", missing_ok);
}

/*
 * stream_trigger_function_installed
 *		Whether the installed SQL objects have trigger function "name"
 *		(without arguments) in the extension's schema: this library may
 *		run under the SQL of an earlier version until ALTER EXTENSION
 *		UPDATE.
 */
bool
stream_trigger_function_installed(const char *name)
{
	Oid			nsp = stream_namespace(true);

	if (!OidIsValid(nsp))
		return false;
	return OidIsValid(GetSysCacheOid3(PROCNAMEARGSNSP, Anum_pg_proc_oid,
									  CStringGetDatum(name),
									  PointerGetDatum(buildoidvector(NULL, 0)),
									  ObjectIdGetDatum(nsp)));
}

/*
 * stream_is_own_trigger_function
 *		Whether "funcid" is one of the extension's trigger functions; if so
 *		and "trigger_name" is given, it gets the name enable() gives the
 *		trigger that runs it.
 */
bool
stream_is_own_trigger_function(Oid funcid, const char **trigger_name)
{
	HeapTuple	tuple = SearchSysCache1(PROCOID, ObjectIdGetDatum(funcid));
	Form_pg_proc proc;
	bool		result = false;
	int			i;

	if (!HeapTupleIsValid(tuple))
		return false;
	proc = (Form_pg_proc) GETSTRUCT(tuple);
	if (proc->pronamespace == stream_namespace(true))
	{
		for (i = 0; i < NUM_STREAM_TRIGGERS; i++)
		{
			if (strcmp(NameStr(proc->proname), trigger_functions[i]) == 0)
			{
				result = true;
				if (trigger_name != NULL)
					*trigger_name = trigger_names[i];
				break;
			}
		}
	}
	ReleaseSysCache(tuple);
	return result;
}

/*
 * stream_is_own_trigger_name
 *		Whether a trigger has one of the names enable() gives.
 */
bool
stream_is_own_trigger_name(const char *name)
{
	int			i;

	for (i = 0; i < NUM_STREAM_TRIGGERS; i++)
	{
		if (name != NULL && strcmp(name, trigger_names[i]) == 0)
			return true;
	}
	return false;
}

/*
 * stream_drop_write_path
 *		Drop the capture index and the placeholder defaults of a table (and
 *		of its partitions), whose stream column and time column (or
 *		InvalidAttrNumber) are "seq_attnum" and "time_attnum": its rows are
 *		stored as any other table's from then on.  For disable(), and for a
 *		table detached from a partitioned stream (whose capture index
 *		PostgreSQL leaves it, detached from the parent's).  The index is
 *		dropped as the extension's owner: detaching needs only ownership of
 *		the stream table.
 */
void
stream_drop_write_path(Oid relid, AttrNumber seq_attnum, AttrNumber time_attnum)
{
	Oid			index = stream_capture_index(relid);
	List	   *tables;
	ListCell   *lc;
	char	   *column = get_attname(relid, seq_attnum, false);
	char	   *time_column = time_attnum != InvalidAttrNumber ?
		get_attname(relid, time_attnum, false) : NULL;

	if (OidIsValid(index))
		stream_catalog_exec(psprintf("DROP INDEX %s", stream_qualified_name(index)),
							0, NULL, NULL, NULL, 0, NULL);
	CommandCounterIncrement();
	tables = find_all_inheritors(relid, NoLock, NULL);
	foreach(lc, tables)
	{
		Oid			table = lfirst_oid(lc);
		Relation	rel = relation_open(table, NoLock);
		AttrNumber	seq = get_attnum(table, column);
		AttrNumber	at = time_column != NULL ? get_attnum(table, time_column) :
			InvalidAttrNumber;
		bool		drop_seq = seq != InvalidAttrNumber &&
			TupleDescAttr(RelationGetDescr(rel), seq - 1)->atthasdef &&
			stream_default_is_placeholder(rel, seq, false);
		bool		drop_at = at != InvalidAttrNumber &&
			TupleDescAttr(RelationGetDescr(rel), at - 1)->atthasdef &&
			stream_default_is_placeholder(rel, at, true);

		relation_close(rel, NoLock);
		if (drop_seq)
			RemoveAttrDefault(table, seq, DROP_RESTRICT, false, true);
		if (drop_at)
			RemoveAttrDefault(table, at, DROP_RESTRICT, false, true);
	}
	CommandCounterIncrement();
}

/*
 * stream_capture_index
 *		The table's index of access method stream_seq_capture, or
 *		InvalidOid.
 */
Oid
stream_capture_index(Oid relid)
{
	Oid			am = get_index_am_oid("stream_seq_capture", true);
	Relation	rel;
	List	   *indexes;
	ListCell   *lc;
	Oid			result = InvalidOid;

	if (!OidIsValid(am))
		return InvalidOid;
	rel = relation_open(relid, AccessShareLock);
	indexes = RelationGetIndexList(rel);
	foreach(lc, indexes)
	{
		HeapTuple	tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(lfirst_oid(lc)));
		bool		ours = false;

		if (HeapTupleIsValid(tuple))
		{
			ours = ((Form_pg_class) GETSTRUCT(tuple))->relam == am;
			ReleaseSysCache(tuple);
		}
		if (ours)
		{
			result = lfirst_oid(lc);
			break;
		}
	}
	list_free(indexes);
	relation_close(rel, AccessShareLock);
	return result;
}

/*
 * integer_constant
 *		The value of an integer constant (int2, int4 or int8), or false.
 */
static bool
integer_constant(Node *node, int64 *value)
{
	Const	   *c = (Const *) node;

	if (!IsA(node, Const) || c->constisnull)
		return false;
	switch (c->consttype)
	{
		case INT2OID:
			*value = DatumGetInt16(c->constvalue);
			return true;
		case INT4OID:
			*value = DatumGetInt32(c->constvalue);
			return true;
		case INT8OID:
			*value = DatumGetInt64(c->constvalue);
			return true;
	}
	return false;
}

/*
 * The built-in ">" of bigint against bigint, integer and smallint (their
 * OIDs are fixed in pg_operator.dat, and pinned): "seq > 0" is one of them.
 */
#define INT8_GT_INT8_OPERATOR	413
#define INT8_GT_INT4_OPERATOR	419
#define INT8_GT_INT2_OPERATOR	1871

/*
 * stream_predicate_excludes_placeholder
 *		Whether an index predicate is "column > 0": true for every number,
 *		false for the placeholder (and NULL).  The predicate of the index
 *		enable() makes since 0.7.0.
 */
bool
stream_predicate_excludes_placeholder(List *pred, AttrNumber attnum)
{
	OpExpr	   *op;
	int64		value;

	if (list_length(pred) != 1 || !IsA(linitial(pred), OpExpr))
		return false;
	op = linitial(pred);
	if (list_length(op->args) != 2 ||
		!IsA(linitial(op->args), Var) ||
		((Var *) linitial(op->args))->varattno != attnum ||
		!integer_constant(lsecond(op->args), &value) || value != 0)
		return false;
	/* the built-in ones, told without the catalog (asked for each INSERT) */
	if (op->opno == INT8_GT_INT8_OPERATOR || op->opno == INT8_GT_INT4_OPERATOR ||
		op->opno == INT8_GT_INT2_OPERATOR)
		return true;
	return op_in_opfamily(op->opno, INTEGER_BTREE_FAM_OID) &&
		get_op_opfamily_strategy(op->opno, INTEGER_BTREE_FAM_OID) == BTGreaterStrategyNumber;
}

/*
 * stream_predicate_is_numbered
 *		Whether an index predicate selects exactly the numbered rows:
 *		"column > 0", or "column IS NOT NULL" (the predicate enable() gave
 *		before 0.7.0, when rows were stored with NULL).
 */
bool
stream_predicate_is_numbered(List *pred, AttrNumber attnum)
{
	NullTest   *test;

	if (stream_predicate_excludes_placeholder(pred, attnum))
		return true;
	if (list_length(pred) != 1 || !IsA(linitial(pred), NullTest))
		return false;
	test = linitial(pred);
	return test->nulltesttype == IS_NOT_NULL && IsA(test->arg, Var) &&
		((Var *) test->arg)->varattno == attnum;
}

/*
 * stream_default_is_placeholder
 *		Whether column "attnum" of "rel" (the stream column, or with
 *		"time" the time column) has no default or the placeholder that
 *		stream_set_placeholder_defaults gives it.
 */
bool
stream_default_is_placeholder(Relation rel, AttrNumber attnum, bool time)
{
	Form_pg_attribute att = TupleDescAttr(RelationGetDescr(rel), attnum - 1);
	Node	   *expr;
	Const	   *c;

	if (!att->atthasdef)
		return true;
	expr = build_column_default(rel, attnum);
	if (expr != NULL)
		expr = eval_const_expressions(NULL, expr);
	if (expr == NULL || !IsA(expr, Const))
		return false;
	c = (Const *) expr;
	if (c->constisnull)
		return true;
	if (time)
		return c->consttype == TIMESTAMPTZOID &&
			DatumGetTimestampTz(c->constvalue) == STREAM_TIME_PLACEHOLDER;
	return c->consttype == INT8OID &&
		DatumGetInt64(c->constvalue) == STREAM_SEQ_PLACEHOLDER;
}

/*
 * stream_trigger_obsolete
 *		Whether a trigger of a stream table is one that versions before
 *		0.7.0 made and this version's write path does not use: the
 *		assignment trigger and the insert guard of a table that has its
 *		capture index (until then they capture its rows, guard.c).
 *		Disabled or dropped, they change nothing.
 */
bool
stream_trigger_obsolete(Oid relid, const char *name)
{
	return (strcmp(name, "stream_seq_assign") == 0 ||
			strcmp(name, "stream_seq_guard_insert") == 0) &&
		OidIsValid(stream_capture_index(relid));
}

/*
 * stream_trigger_disabled
 *		Whether one of the extension's triggers on a stream table is in a
 *		state where it does not do its job: the replica trigger must fire
 *		in replica mode (REPLICA or ALWAYS), the others in origin mode.
 *		A restore creates the replica trigger and enables it for replica
 *		mode in one step (pg_dump puts both in the trigger's entry), with
 *		no ALTER TABLE between them.  Not one of ours: false.
 */
bool
stream_trigger_disabled(Oid relid, Trigger *trigger)
{
	const char *name;

	if (!stream_is_own_trigger_function(trigger->tgfoid, &name))
		return false;
	if (stream_trigger_obsolete(relid, name))
		return false;
	if (strcmp(name, "stream_seq_replica") == 0)
		return trigger->tgenabled != TRIGGER_FIRES_ON_REPLICA &&
			trigger->tgenabled != TRIGGER_FIRES_ALWAYS;
	return trigger->tgenabled != TRIGGER_FIRES_ON_ORIGIN;
}

/*
 * stream_table_has_triggers
 *		Whether the table has a trigger running one of the extension's
 *		functions, as every stream table does: the cheap first test of
 *		whether a table is a stream.  A table without triggers costs one
 *		syscache lookup.
 */
bool
stream_table_has_triggers(Oid relid)
{
	HeapTuple	tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	bool		has_triggers;
	Relation	rel;
	bool		result = false;
	int			i;

	if (!HeapTupleIsValid(tuple))
		return false;
	has_triggers = ((Form_pg_class) GETSTRUCT(tuple))->relhastriggers &&
		(((Form_pg_class) GETSTRUCT(tuple))->relkind == RELKIND_RELATION ||
		 ((Form_pg_class) GETSTRUCT(tuple))->relkind == RELKIND_PARTITIONED_TABLE);
	ReleaseSysCache(tuple);
	if (!has_triggers)
		return false;

	rel = try_relation_open(relid, AccessShareLock);
	if (rel == NULL)
		return false;
	if (rel->trigdesc != NULL)
	{
		for (i = 0; i < rel->trigdesc->numtriggers && !result; i++)
			result = stream_is_own_trigger_function(rel->trigdesc->triggers[i].tgfoid,
													NULL);
	}
	relation_close(rel, AccessShareLock);
	return result;
}

/*
 * stream_catalog_relid
 *		OID of the table stream_seq.stream; InvalidOid if "missing_ok" and
 *		the extension's schema or table is gone.  Syscache lookups only: no
 *		privilege on the schema is needed.
 */
Oid
stream_catalog_relid(bool missing_ok)
{
	Oid			nsp = stream_namespace(missing_ok);
	Oid			relid = OidIsValid(nsp) ? get_relname_relid("stream", nsp) :
		InvalidOid;

	if (!OidIsValid(relid) && !missing_ok)
		elog(ERROR, "stream_seq catalog table is missing");
	return relid;
}

/*
 * stream_catalog_owner
 *		Owner of the extension's tables: the role internal statements that
 *		write them run as.
 */
Oid
stream_catalog_owner(void)
{
	HeapTuple	reltuple;
	Oid			owner;

	reltuple = SearchSysCache1(RELOID,
							   ObjectIdGetDatum(stream_catalog_relid(false)));
	if (!HeapTupleIsValid(reltuple))
		elog(ERROR, "cache lookup failed for stream_seq catalog");
	owner = ((Form_pg_class) GETSTRUCT(reltuple))->relowner;
	ReleaseSysCache(reltuple);
	return owner;
}

/*
 * read_catalog_row
 *		Look up the catalog row of "relid" with a fresh snapshot (not the
 *		caller's: a transaction whose snapshot predates enable() still
 *		writes through the objects enable() created): its stream column,
 *		time column (empty if none) and head sequence.  Returns whether
 *		there is a row.  Raises no error of its own.
 */
static bool
read_catalog_row(Oid relid, NameData *column, NameData *time_column,
				 Oid *head_seq)
{
	Oid			catalog_relid = stream_catalog_relid(true);
	Relation	catalog;
	SysScanDesc scan;
	ScanKeyData key;
	HeapTuple	tuple;
	Snapshot	snapshot;
	bool		found = false;
	AttrNumber	time_anum;

	if (!OidIsValid(catalog_relid))
		return false;
	catalog = table_open(catalog_relid, AccessShareLock);
	snapshot = RegisterSnapshot(GetLatestSnapshot());
	ScanKeyInit(&key, Anum_stream_relid, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(relid));
	scan = systable_beginscan(catalog, InvalidOid, false, snapshot, 1, &key);
	tuple = systable_getnext(scan);
	if (HeapTupleIsValid(tuple))
	{
		TupleDesc	desc = RelationGetDescr(catalog);
		bool		isnull;
		Datum		time_datum = (Datum) 0;

		found = true;
		namestrcpy(column,
				   NameStr(*DatumGetName(heap_getattr(tuple, Anum_stream_seq_column,
													  desc, &isnull))));

		/* the time column, from 0.5.0 on; an older catalog has none */
		time_anum = get_attnum(catalog_relid, "time_column");
		isnull = true;
		if (time_anum != InvalidAttrNumber)
			time_datum = heap_getattr(tuple, time_anum, desc, &isnull);
		if (isnull)
			NameStr(*time_column)[0] = '\0';
		else
			namestrcpy(time_column, NameStr(*DatumGetName(time_datum)));
		*head_seq = DatumGetObjectId(heap_getattr(tuple, Anum_stream_head_seq,
												  desc, &isnull));
	}
	systable_endscan(scan);
	UnregisterSnapshot(snapshot);
	table_close(catalog, AccessShareLock);
	return found;
}

/*
 * stream_catalog_seq_column
 *		The name of the stream column of stream table "relid", or NULL if
 *		it is none.  Raises no error of its own (the planner asks).
 */
char *
stream_catalog_seq_column(Oid relid)
{
	NameData	column;
	NameData	time_column;
	Oid			head_seq;

	if (!read_catalog_row(relid, &column, &time_column, &head_seq))
		return NULL;
	return pstrdup(NameStr(column));
}

/*
 * scan_catalog_row
 *		Look up the catalog row of "relid" (read_catalog_row), and copy what
 *		it says into "ref" if given.  Returns whether there is a row.
 */
static bool
scan_catalog_row(Oid relid, StreamRef *ref)
{
	NameData	column;
	NameData	time_column;
	Oid			head_seq = InvalidOid;
	bool		found = read_catalog_row(relid, &column, &time_column, &head_seq);

	if (found && ref != NULL)
		ref->head_seq = head_seq;
	if (found && ref != NULL)
	{
		HeapTuple	seqtuple;
		HeapTuple	reltuple;

		ref->seq_attnum = get_attnum(relid, NameStr(column));
		if (ref->seq_attnum == InvalidAttrNumber ||
			get_atttype(relid, ref->seq_attnum) != INT8OID)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("stream column \"%s\" of table \"%s\" is missing or not of type bigint",
							NameStr(column), stream_rel_name(relid)),
					 errhint("Disable the stream with stream_seq.disable() and enable it again.")));

		seqtuple = SearchSysCache1(SEQRELID, ObjectIdGetDatum(ref->head_seq));
		if (!HeapTupleIsValid(seqtuple))
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("head sequence of stream table \"%s\" is missing",
							stream_rel_name(relid)),
					 errhint("Disable the stream with stream_seq.disable() and enable it again.")));
		ref->time_attnum = InvalidAttrNumber;
		if (NameStr(time_column)[0] != '\0')
		{
			ref->time_attnum = get_attnum(relid, NameStr(time_column));
			if (ref->time_attnum == InvalidAttrNumber ||
				get_atttype(relid, ref->time_attnum) != TIMESTAMPTZOID)
				ereport(ERROR,
						(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
						 errmsg("time column \"%s\" of stream table \"%s\" is missing or not of type timestamp with time zone",
								NameStr(time_column), stream_rel_name(relid)),
						 errhint("Disable the stream with stream_seq.disable() and enable it again.")));
		}
		ref->head_interval = ((Form_pg_sequence) GETSTRUCT(seqtuple))->seqincrement;
		ReleaseSysCache(seqtuple);

		reltuple = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
		if (!HeapTupleIsValid(reltuple))
			elog(ERROR, "cache lookup failed for relation %u", relid);
		ref->owner = ((Form_pg_class) GETSTRUCT(reltuple))->relowner;
		ReleaseSysCache(reltuple);
	}
	return found;
}

/*
 * stream_catalog_has
 *		Whether "relid" has a catalog row, as the current transaction sees
 *		it now (its own changes included).
 */
bool
stream_catalog_has(Oid relid)
{
	return scan_catalog_row(relid, NULL);
}

/*
 * xact_may_be_running
 *		Whether the transaction that attached a slot may still be running.
 *		An xid more than 2^31 transactions old is long finished, and would
 *		compare wrongly as a 32-bit xid.
 */
static bool
xact_may_be_running(FullTransactionId xid)
{
	FullTransactionId next = ReadNextFullTransactionId();

	if (!FullTransactionIdIsValid(xid))
		return false;
	if (U64FromFullTransactionId(next) - U64FromFullTransactionId(xid) >=
		(uint64) 1 << 31)
		return false;
	return TransactionIdIsInProgress(XidFromFullTransactionId(xid));
}

/*
 * reclaim_slots
 *		Free the shared slots that streams left behind: those of databases
 *		that no longer exist, and those of this database whose catalog row
 *		is gone (a stream disabled or dropped by a prepared transaction, an
 *		enable() that rolled back, a DROP EXTENSION).  A slot taken by a
 *		transaction that may still be running is kept: its catalog row may
 *		be uncommitted.  Slots of other databases whose rows are gone can
 *		only be judged from those databases.  Returns how many were freed.
 */
static int
reclaim_slots(void)
{
	StreamSlotIdent *idents;
	int			n;
	int			freed = 0;
	int			i;

	idents = palloc(sizeof(StreamSlotIdent) * stream_seq_max_streams);
	n = stream_slot_list(idents, stream_seq_max_streams);
	for (i = 0; i < n; i++)
	{
		StreamSlotIdent *id = &idents[i];
		bool		stale;

		if (id->dboid != MyDatabaseId)
			stale = !SearchSysCacheExists1(DATABASEOID,
										   ObjectIdGetDatum(id->dboid));
		else
			stale = !xact_may_be_running(id->attached_by) &&
				!stream_catalog_has(id->relid);
		if (stale && stream_slot_free(id->slotno, id->generation))
			freed++;
	}
	pfree(idents);
	return freed;
}

/*
 * stream_report_not_stream
 *		The error for a table that is not a stream (or does not exist).
 */
void
stream_report_not_stream(Oid relid)
{
	char	   *relname = get_rel_name(relid);

	if (relname == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation with OID %u does not exist", relid)));
	ereport(ERROR,
			(errcode(ERRCODE_WRONG_OBJECT_TYPE),
			 errmsg("table \"%s\" is not a stream table", relname),
			 errhint("Use stream_seq.enable() to make it one.")));
}

/*
 * stream_check_select
 *		Positions in a stream are readable by those who may read the table.
 */
void
stream_check_select(Oid relid)
{
	AclResult	aclresult = pg_class_aclcheck(relid, GetUserId(), ACL_SELECT);

	if (aclresult != ACLCHECK_OK)
		aclcheck_error(aclresult, OBJECT_TABLE, stream_rel_name(relid));
}

/*
 * stream_check_not_null
 *		Functions that create or change something take no NULL argument:
 *		as STRICT functions they would silently do nothing.  Checks the
 *		first "nargs" arguments.
 */
void
stream_check_not_null(FunctionCallInfo fcinfo, int nargs, const char *what)
{
	int			i;

	for (i = 0; i < nargs; i++)
	{
		if (PG_ARGISNULL(i))
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("%s must not be null", what)));
	}
}

#define report_not_stream(relid) stream_report_not_stream(relid)

/*
 * stream_check_locked
 *		Lock relation "relid" in "lockmode" (NoLock: only check) and then,
 *		with the lock held, make sure it still exists (42P01) and is a
 *		stream (42809).  An OID looked up before its lock can name nothing
 *		once the lock is granted: a DROP TABLE or disable() that held the
 *		lock committed meanwhile.  Every SQL entry point that takes a
 *		stream by OID and opens or reads it checks here first, so that such
 *		a race ends in the documented SQLSTATE and never in an internal
 *		error from relation_open().  LockRelationOid() takes in the
 *		invalidations of what committed while it waited, so the syscache
 *		and the catalog scan (with a fresh snapshot) see the present.  The
 *		lock is kept until the transaction ends, as the statement that
 *		reads or writes the table would keep it.  Needs neither the library
 *		preloaded nor any privilege.
 */
void
stream_check_locked(Oid relid, LOCKMODE lockmode)
{
	if (lockmode != NoLock)
		LockRelationOid(relid, lockmode);
	if (!SearchSysCacheExists1(RELOID, ObjectIdGetDatum(relid)))
	{
		if (lockmode != NoLock)
			UnlockRelationOid(relid, lockmode);
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation with OID %u does not exist", relid)));
	}
	if (!stream_catalog_has(relid))
		report_not_stream(relid);
}

/*
 * stream_lookup_locked
 *		stream_check_locked, then the backend's handle on the stream.
 */
StreamRef  *
stream_lookup_locked(Oid relid, LOCKMODE lockmode)
{
	stream_check_locked(relid, lockmode);
	return stream_lookup(relid, false);
}

/*
 * stream_qualified_name
 *		schema.name of relation "relid", quoted, for a statement; 42P01 if
 *		it no longer exists (dropped meanwhile), rather than the NULL names
 *		that would crash quote_qualified_identifier().
 */
char *
stream_qualified_name(Oid relid)
{
	char	   *relname = get_rel_name(relid);
	char	   *nspname = relname != NULL ?
		get_namespace_name(get_rel_namespace(relid)) : NULL;

	if (relname == NULL || nspname == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation with OID %u does not exist", relid)));
	return quote_qualified_identifier(nspname, relname);
}

/*
 * stream_relation_open
 *		relation_open() for an OID that came from a caller or from a list
 *		read without the lock (partitions, a stream's table): a relation
 *		dropped while the lock was awaited is the documented 42P01, not
 *		relation_open()'s internal "could not open relation".
 */
Relation
stream_relation_open(Oid relid, LOCKMODE lockmode)
{
	Relation	rel = try_relation_open(relid, lockmode);

	if (rel == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation with OID %u does not exist", relid)));
	return rel;
}

/*
 * lookup_stream
 *		stream_lookup(), and stream_lookup_if_slot() when "no_slot" is not
 *		NULL: then a stream no shared slot is free for gets NULL with
 *		*no_slot set, instead of the error.
 */
static StreamRef *
lookup_stream(Oid relid, bool missing_ok, bool *no_slot)
{
	StreamRef  *ref;
	bool		found;

	if (no_slot != NULL)
		*no_slot = false;

	stream_check_preloaded();
	ensure_cache();

	/* the stream of the last call, valid: no hash lookup (most calls) */
	if (last_ref != NULL && last_ref->relid == relid && last_ref->valid)
		return last_ref;
	ref = hash_search(stream_cache, &relid, HASH_ENTER, &found);
	if (!found)
		ref->valid = false;
	last_ref = ref;
	if (ref->valid)
		return ref;

	if (!scan_catalog_row(relid, ref))
	{
		if (missing_ok)
			return NULL;
		report_not_stream(relid);
	}
	if (!stream_slot_attach(ref) &&
		(reclaim_slots() == 0 || !stream_slot_attach(ref)))
	{
		if (no_slot != NULL)
		{
			*no_slot = true;
			return NULL;
		}
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("too many stream tables in use"),
				 errdetail("All %d stream slots are taken.",
						   stream_seq_max_streams),
				 errhint("Increase \"stream_seq.max_streams\" and restart the server.")));
	}
	ref->valid = true;
	return ref;
}

/*
 * stream_lookup
 *		The backend's handle on stream "relid", loaded from the catalog and
 *		attached to its shared slot if not cached.  A table that is not a
 *		stream gets NULL if "missing_ok", else an error; a stream no shared
 *		slot is free for (stream_seq.max_streams are in use in the cluster)
 *		53400.
 */
StreamRef  *
stream_lookup(Oid relid, bool missing_ok)
{
	return lookup_stream(relid, missing_ok, NULL);
}

/*
 * stream_lookup_if_slot
 *		stream_lookup(relid, true), but a stream no shared slot is free for
 *		gets NULL with *no_slot set instead of 53400: for what only shows
 *		streams (the streams view, metrics()), which must go on with the
 *		others when more streams are enabled in the cluster than
 *		stream_seq.max_streams holds (enable() cannot see the other
 *		databases, and a restart empties the slots).
 */
StreamRef  *
stream_lookup_if_slot(Oid relid, bool *no_slot)
{
	return lookup_stream(relid, true, no_slot);
}

/*
 * stream_run_as
 *		Run what follows as "role", with search_path pinned to pg_catalog:
 *		internal statements must resolve operators and functions the same
 *		way whatever the caller's search_path holds, since they may run as
 *		the extension's owner.  Used to write the extension's tables and
 *		head sequences, and to read a stream's table whatever its
 *		row-level security says.  What runs meanwhile is not the user's
 *		workload: pg_stat_statements does not track it (see stats.c).
 *		Undone by stream_run_as_end, or by the transaction's abort.
 */
void
stream_run_as(Oid role, int *save_nestlevel, Oid *save_userid,
			  int *save_sec_context)
{
	GetUserIdAndSecContext(save_userid, save_sec_context);
	SetUserIdAndSecContext(role,
						   *save_sec_context | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
	*save_nestlevel = NewGUCNestLevel();
	(void) set_config_option("search_path", "pg_catalog, pg_temp",
							 PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	stream_untracked_statements(false);
}

/*
 * stream_run_as_end
 *		Back to the caller's role and settings.
 */
void
stream_run_as_end(int save_nestlevel, Oid save_userid, int save_sec_context)
{
	AtEOXact_GUC(false, save_nestlevel);
	SetUserIdAndSecContext(save_userid, save_sec_context);
}

/*
 * catalog_exec
 *		Run one statement as the owner of the extension's tables (see
 *		stream_run_as): ordinary roles may not write them, and the SQL entry
 *		points that do run as the caller, having checked the caller's
 *		privileges first.  With a "snapshot", reads see what it sees rather
 *		than what the caller's snapshot does.  Returns the number of rows
 *		processed; if "text" is given, the first column of the first row as
 *		text (NULL if none); if "row" is given, the "ncols" columns of the
 *		first row that follow it (all int8, NULL as PG_INT64_MIN) go there;
 *		*found says whether there was a row.
 */
static uint64
catalog_exec(const char *sql, int nargs, Oid *argtypes, Datum *values,
			 const char *nulls, Snapshot snapshot, int64 *row, int ncols,
			 char **text, bool *found)
{
	int			save_nestlevel;
	Oid			save_userid;
	int			save_sec_context;
	SPIPlanPtr	plan;
	uint64		processed;
	int			rc;

	stream_run_as(stream_catalog_owner(), &save_nestlevel, &save_userid,
				  &save_sec_context);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	plan = SPI_prepare(sql, nargs, argtypes);
	if (plan == NULL)
		elog(ERROR, "SPI_prepare failed for \"%s\"", sql);
	if (snapshot != NULL)
		rc = SPI_execute_snapshot(plan, values, nulls, snapshot,
								  InvalidSnapshot, false, false, 0);
	else
		rc = SPI_execute_plan(plan, values, nulls, false, 0);
	if (rc < 0)
		elog(ERROR, "SPI execution failed for \"%s\"", sql);
	processed = SPI_processed;
	if (found != NULL)
		*found = SPI_tuptable != NULL && SPI_processed > 0;
	if (text != NULL)
		*text = NULL;
	if (SPI_tuptable != NULL && SPI_processed > 0)
	{
		int			i;

		int			first_int = text != NULL ? 2 : 1;

		for (i = 0; row != NULL && i < ncols; i++)
		{
			bool		isnull;
			Datum		value = SPI_getbinval(SPI_tuptable->vals[0],
											  SPI_tuptable->tupdesc,
											  first_int + i, &isnull);

			row[i] = isnull ? PG_INT64_MIN : DatumGetInt64(value);
		}
		if (text != NULL)
		{
			char	   *value = SPI_getvalue(SPI_tuptable->vals[0],
											 SPI_tuptable->tupdesc, 1);

			if (value != NULL)
			{
				*text = SPI_palloc(strlen(value) + 1);
				strcpy(*text, value);
			}
		}
	}
	SPI_finish();
	stream_run_as_end(save_nestlevel, save_userid, save_sec_context);
	return processed;
}

/*
 * stream_catalog_rows
 *		Run a query as in stream_catalog_exec and return all its rows: the
 *		first "ncols" columns (int8, NULL as PG_INT64_MIN) of each, in a
 *		palloc'd array of nrows * ncols in *rows.  Returns the row count.
 */
uint64
stream_catalog_rows(const char *sql, int nargs, Oid *argtypes, Datum *values,
					int ncols, int64 **rows)
{
	int			save_nestlevel;
	Oid			save_userid;
	int			save_sec_context;
	uint64		n;
	uint64		i;
	int			j;

	stream_run_as(stream_catalog_owner(), &save_nestlevel, &save_userid,
				  &save_sec_context);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SPI_execute_with_args(sql, nargs, argtypes, values, NULL, false, 0) < 0)
		elog(ERROR, "SPI_execute_with_args failed for \"%s\"", sql);
	n = SPI_processed;
	*rows = SPI_palloc(sizeof(int64) * Max(n * ncols, 1));
	for (i = 0; i < n; i++)
	{
		for (j = 0; j < ncols; j++)
		{
			bool		isnull;
			Datum		value = SPI_getbinval(SPI_tuptable->vals[i],
											  SPI_tuptable->tupdesc, j + 1,
											  &isnull);

			(*rows)[i * ncols + j] = isnull ? PG_INT64_MIN : DatumGetInt64(value);
		}
	}
	SPI_finish();
	stream_run_as_end(save_nestlevel, save_userid, save_sec_context);
	return n;
}

/*
 * stream_catalog_exec
 *		catalog_exec with the caller's snapshot: consumers' positions are
 *		read and locked as the caller's transaction sees them.
 */
uint64
stream_catalog_exec(const char *sql, int nargs, Oid *argtypes, Datum *values,
					int64 *row, int ncols, bool *found)
{
	return catalog_exec(sql, nargs, argtypes, values, NULL, NULL, row, ncols,
						NULL, found);
}

/*
 * stream_catalog_exec_nulls
 *		stream_catalog_exec for a statement with NULL parameters ("nulls"
 *		as SPI_execute_plan takes them); returns the rows processed.
 */
uint64
stream_catalog_exec_nulls(const char *sql, int nargs, Oid *argtypes,
						  Datum *values, const char *nulls)
{
	return catalog_exec(sql, nargs, argtypes, values, nulls, NULL, NULL, 0,
						NULL, NULL);
}

/*
 * stream_catalog_exec_latest
 *		catalog_exec with the latest snapshot: what the table, the catalog
 *		and the head sequence say now, whatever the caller's snapshot.
 */
uint64
stream_catalog_exec_latest(const char *sql, int nargs, Oid *argtypes,
						   Datum *values, int64 *row, int ncols, bool *found)
{
	return catalog_exec(sql, nargs, argtypes, values, NULL,
						GetLatestSnapshot(), row, ncols, NULL, found);
}

/*
 * stream_catalog_exec_in
 *		catalog_exec reading with "snapshot": what a given snapshot sees.
 */
uint64
stream_catalog_exec_in(const char *sql, Snapshot snapshot, int64 *row,
					   int ncols, bool *found)
{
	return catalog_exec(sql, 0, NULL, NULL, NULL, snapshot, row, ncols,
						NULL, found);
}

/*
 * stream_catalog_text
 *		The first column of the first row of a query run as in
 *		stream_catalog_exec, as text; NULL if there is none.
 */
char *
stream_catalog_text(const char *sql, int nargs, Oid *argtypes, Datum *values)
{
	char	   *text;

	(void) catalog_exec(sql, nargs, argtypes, values, NULL, NULL, NULL, 0,
						&text, NULL);
	return text;
}

/*
 * stream_catalog_text_row
 *		stream_catalog_text, and the "ncols" int8 columns that follow the
 *		text in the first row in *row (NULL as PG_INT64_MIN; untouched if
 *		there is no row): a text and its flags in one query.
 */
char *
stream_catalog_text_row(const char *sql, int nargs, Oid *argtypes,
						Datum *values, int64 *row, int ncols)
{
	char	   *text;

	(void) catalog_exec(sql, nargs, argtypes, values, NULL, NULL, row, ncols,
						&text, NULL);
	return text;
}

/*
 * stream_caller_exec
 *		Run one statement as the current user with search_path pinned to
 *		pg_catalog, so that the names and operators in it mean what they
 *		say; DDL and DML on the caller's own table, not tracked by
 *		pg_stat_statements (see stats.c).  Returns the number of rows
 *		processed.
 */
uint64
stream_caller_exec(const char *sql, int nargs, Oid *argtypes, Datum *values)
{
	int			save_nestlevel = NewGUCNestLevel();
	uint64		processed;

	(void) set_config_option("search_path", "pg_catalog, pg_temp",
							 PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	stream_untracked_statements(false);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SPI_execute_with_args(sql, nargs, argtypes, values, NULL, false, 0) < 0)
		elog(ERROR, "SPI_execute_with_args failed for \"%s\"", sql);
	processed = SPI_processed;
	SPI_finish();
	AtEOXact_GUC(false, save_nestlevel);
	return processed;
}

/*
 * stream_clip_name
 *		The first "max_bytes" bytes of "name" at most, cut at a character
 *		boundary: for names made from a table's or consumer's name, which
 *		must stay valid in the database's encoding (a dump of a name cut
 *		inside a character does not load).
 */
char *
stream_clip_name(const char *name, int max_bytes)
{
	return pnstrdup(name, pg_mbcliplen(name, strlen(name), max_bytes));
}

/*
 * stream_source
 *		The relation a statement reads a stream's rows from: "ONLY
 *		schema.table" for an ordinary stream table (legacy inheritance
 *		children are refused, ONLY keeps them out anyway), the table itself
 *		for a partitioned one.
 */
char *
stream_source(Oid relid)
{
	char	   *nspname = get_namespace_name(get_rel_namespace(relid));
	char	   *relname = get_rel_name(relid);
	char	   *name;

	/* callers hold a lock on a stream; a name gone anyway is no crash */
	if (nspname == NULL || relname == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation with OID %u does not exist", relid)));
	name = quote_qualified_identifier(nspname, relname);
	if (get_rel_relkind(relid) == RELKIND_PARTITIONED_TABLE)
		return name;
	return psprintf("ONLY %s", name);
}

/*
 * stream_catalog_insert
 *		Add the catalog row of a new stream.
 */
void
stream_catalog_insert(Oid relid, const char *column, Oid head_seq)
{
	Oid			argtypes[3] = {REGCLASSOID, TEXTOID, REGCLASSOID};
	Datum		values[3];

	values[0] = ObjectIdGetDatum(relid);
	values[1] = CStringGetTextDatum(column);
	values[2] = ObjectIdGetDatum(head_seq);
	stream_catalog_exec("INSERT INTO stream_seq.stream (relid, seq_column, head_seq) "
						"VALUES ($1, $2::pg_catalog.name, $3)",
						3, argtypes, values, NULL, 0, NULL);
}

/*
 * The extension's tables that hang off a stream's catalog row, children
 * first.  Since 0.4.1 no foreign key ties them to it: pg_restore -j loads
 * the rows of an extension's tables in any order, and a foreign key made
 * the rows that came first fail.  The extension keeps them consistent
 * itself: these rows go with the stream (stream_catalog_delete), a
 * consumer's with the consumer (drop_consumer), and a row that refers to
 * a stream or consumer is inserted only while that one's row is locked
 * FOR KEY SHARE (stream_catalog_hold), as a foreign key check would.
 */
static const char *const stream_dependents[] = {
	"parked", "consumer_worker", "consumer_slot", "consumer", "partition_range",
	"retention_policy", "retention_run"
};

/*
 * stream_catalog_delete
 *		Remove the catalog row of a stream, and the rows of its consumers,
 *		their slots, workers and parked rows, and its sealed partitions.
 */
void
stream_catalog_delete(Oid relid)
{
	Oid			argtypes[1] = {OIDOID};
	Datum		values[1];
	Oid			nsp = stream_namespace(false);
	int			i;

	values[0] = ObjectIdGetDatum(relid);
	for (i = 0; i < lengthof(stream_dependents); i++)
	{
		if (!OidIsValid(get_relname_relid(stream_dependents[i], nsp)))
			continue;			/* an older version's catalog */
		stream_catalog_exec(psprintf("DELETE FROM stream_seq.%s "
									 "WHERE stream::pg_catalog.oid = $1",
									 stream_dependents[i]),
							1, argtypes, values, NULL, 0, NULL);
	}
	stream_catalog_exec("DELETE FROM stream_seq.stream WHERE relid::pg_catalog.oid = $1",
						1, argtypes, values, NULL, 0, NULL);
}

/*
 * stream_catalog_hold
 *		Lock the catalog row of stream "relid" (with "consumer", the row of
 *		that consumer of it) FOR KEY SHARE until the end of the transaction,
 *		before inserting a row that refers to it: a concurrent drop of the
 *		stream or the consumer then waits, or this fails, as with a foreign
 *		key.  An error if the row is gone.
 */
void
stream_catalog_hold(Oid relid, const char *consumer)
{
	Oid			argtypes[2] = {OIDOID, TEXTOID};
	Datum		values[2];
	int64		one;
	bool		found;

	values[0] = ObjectIdGetDatum(relid);
	if (consumer == NULL)
	{
		stream_catalog_exec("SELECT 1::pg_catalog.int8 FROM stream_seq.stream "
							"WHERE relid::pg_catalog.oid = $1 FOR KEY SHARE",
							1, argtypes, values, &one, 1, &found);
		if (!found)
			report_not_stream(relid);
		return;
	}
	values[1] = CStringGetTextDatum(consumer);
	stream_catalog_exec("SELECT 1::pg_catalog.int8 FROM stream_seq.consumer "
						"WHERE stream::pg_catalog.oid = $1 AND consumer = $2 FOR KEY SHARE",
						2, argtypes, values, &one, 1, &found);
	if (!found)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("consumer \"%s\" of stream table \"%s\" does not exist",
						consumer, stream_rel_name(relid))));
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

/*
 * stream_seq_first
 *		SQL: first(stream regclass) RETURNS bigint: where the retained
 *		stream starts; numbers below it were trimmed or truncated.  Reads
 *		only the catalog, so it works without the library preloaded too.
 */
Datum
stream_seq_first(PG_FUNCTION_ARGS)
{
	Oid			relid = PG_GETARG_OID(0);

	if (!stream_catalog_has(relid))
		report_not_stream(relid);
	PG_RETURN_INT64(stream_catalog_first(relid));
}

/*
 * stream_catalog_first
 *		Where the retained stream starts (first()): numbers below it were
 *		trimmed or truncated.
 */
int64
stream_catalog_first(Oid relid)
{
	Oid			argtypes[1] = {REGCLASSOID};
	Datum		values[1];
	int64		first;
	bool		found;

	values[0] = ObjectIdGetDatum(relid);
	stream_catalog_exec_latest("SELECT trimmed_before FROM stream_seq.stream WHERE relid = $1",
							   1, argtypes, values, &first, 1, &found);
	return found ? first : 1;
}

/*
 * stream_database_owner
 *		The owner of the current database.
 */
Oid
stream_database_owner(void)
{
	HeapTuple	tuple = SearchSysCache1(DATABASEOID, ObjectIdGetDatum(MyDatabaseId));
	Oid			owner;

	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "cache lookup failed for database %u", MyDatabaseId);
	owner = ((Form_pg_database) GETSTRUCT(tuple))->datdba;
	ReleaseSysCache(tuple);
	return owner;
}

/*
 * stream_grant_head_access
 *		SELECT on a new head sequence for the database's owner (enable()).
 */
void
stream_grant_head_access(Oid head_seq)
{
	Oid			owner = stream_database_owner();

	if (superuser_arg(owner))
		return;
	stream_catalog_exec(psprintf("GRANT SELECT ON SEQUENCE %s TO %s",
								 stream_qualified_name(head_seq),
								 quote_identifier(GetUserNameFromId(owner, false))),
						0, NULL, NULL, NULL, 0, NULL);
}

/*
 * stream_lock_role
 *		Before a consumer is given to "role" (created by it, or passed to
 *		it): lock the role against DROP ROLE until the transaction ends,
 *		and make sure it still exists.
 */
void
stream_lock_role(Oid role)
{
	LockSharedObject(AuthIdRelationId, role, 0, AccessShareLock);
	if (!SearchSysCacheExists1(AUTHOID, ObjectIdGetDatum(role)))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("role with OID %u does not exist", role)));
}

/*
 * stream_pglogical_installed
 *		Whether pglogical is installed in this database; the trigger
 *		targets remember it (partition.c).  A table added to one of its
 *		sets gets its relcache entry invalidated by pglogical, so a target
 *		filled before CREATE EXTENSION pglogical is filled again then.
 */
bool
stream_pglogical_installed(void)
{
	return OidIsValid(get_extension_oid("pglogical", true));
}

/*
 * stream_seq_stream_info
 *		SQL (internal): _stream_info(stream regclass, OUT seq_column name,
 *		OUT time_column name, OUT first bigint): what the readers written
 *		in PL/pgSQL (page(), read(), due(), replay(), position_at() and the
 *		typed reads) need of the catalog row of a stream.  The catalog
 *		table is not readable by PUBLIC (a role learns of a stream only
 *		what the streams view shows it: nothing, for a table it may not
 *		read), and those readers run as their caller, so they ask here.
 *		Executable by PUBLIC, and safe for any role: NULL is 22004, an OID
 *		that names no relation 42P01, a relation the caller may not read
 *		42501, one that is not a stream 42809 (checked under an ACCESS SHARE
 *		lock, kept, which the caller's query of the table takes anyway);
 *		only then is the row read (without a privilege check of the
 *		catalog table, as the library reads it), with the snapshot of the
 *		calling statement.
 */
Datum
stream_seq_stream_info(PG_FUNCTION_ARGS)
{
	Oid			relid;
	TupleDesc	tupdesc;
	Datum		values[3];
	bool		nulls[3] = {false, false, false};
	int64		first = 1;
	bool		found = false;
	char	   *seq_column = NULL;
	char	   *time_column = NULL;
	AttrNumber	time_anum;
	Oid			catalog_relid;
	Relation	catalog;
	SysScanDesc scan;
	ScanKeyData key;
	HeapTuple	tuple;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("stream table must not be null")));
	relid = PG_GETARG_OID(0);
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	/* SELECT first: a role that may not read the table learns nothing */
	LockRelationOid(relid, AccessShareLock);
	stream_check_select(relid);
	stream_check_locked(relid, NoLock);

	/*
	 * The row, read directly (readers call this on every page: no SPI),
	 * with the snapshot of the calling statement, as the statement reading
	 * the table will see it.
	 */
	catalog_relid = stream_catalog_relid(false);
	catalog = table_open(catalog_relid, AccessShareLock);
	ScanKeyInit(&key, Anum_stream_relid, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(relid));
	scan = systable_beginscan(catalog, InvalidOid, false,
							  ActiveSnapshotSet() ? GetActiveSnapshot() :
							  GetTransactionSnapshot(), 1, &key);
	tuple = systable_getnext(scan);
	if (HeapTupleIsValid(tuple))
	{
		TupleDesc	desc = RelationGetDescr(catalog);
		bool		isnull;
		Datum		datum;

		found = true;
		datum = heap_getattr(tuple, Anum_stream_seq_column, desc, &isnull);
		seq_column = pstrdup(NameStr(*DatumGetName(datum)));
		datum = heap_getattr(tuple, Anum_stream_trimmed_before, desc, &isnull);
		if (!isnull)
			first = DatumGetInt64(datum);
		time_anum = get_attnum(catalog_relid, "time_column");
		if (time_anum != InvalidAttrNumber)
		{
			datum = heap_getattr(tuple, time_anum, desc, &isnull);
			if (!isnull)
				time_column = pstrdup(NameStr(*DatumGetName(datum)));
		}
	}
	systable_endscan(scan);
	table_close(catalog, AccessShareLock);
	if (!found)
		report_not_stream(relid);

	values[0] = DirectFunctionCall1(namein, CStringGetDatum(seq_column));
	if (time_column == NULL)
		nulls[1] = true;
	else
		values[1] = DirectFunctionCall1(namein, CStringGetDatum(time_column));
	values[2] = Int64GetDatum(first);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(tupdesc),
													  values, nulls)));
}

/*
 * stream_seq_stream_of_row_type
 *		SQL (internal): _stream_of_row_type(row_type regtype) RETURNS
 *		regclass: the stream table whose row type the typed reads
 *		(page_rows(), read_rows(), read_slot_rows()) were given.  In C since
 *		the catalog table is not readable by PUBLIC; tells no more than
 *		whether the type is a stream's row type (as the triggers on the
 *		table, in pg_trigger, do): the privileges are checked by what
 *		reads the stream next.
 */
Datum
stream_seq_stream_of_row_type(PG_FUNCTION_ARGS)
{
	Oid			typid = PG_ARGISNULL(0) ? InvalidOid : PG_GETARG_OID(0);
	Oid			relid = OidIsValid(typid) ? get_typ_typrelid(typid) : InvalidOid;

	if (!OidIsValid(relid) || !stream_catalog_has(relid))
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("type %s is not the row type of a stream table",
						OidIsValid(typid) ?
						format_type_extended(typid, -1, FORMAT_TYPE_ALLOW_INVALID) :
						"NULL"),
				 errhint("Name the stream by a value of its row type, such as NULL::events.")));
	PG_RETURN_OID(relid);
}
