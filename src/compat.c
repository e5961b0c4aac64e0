/*-------------------------------------------------------------------------
 *
 * compat.c
 *	  Entry points that only the SQL objects of earlier versions (0.1.0,
 *	  0.2.0) call, kept so that a database keeps working between
 *	  installing this library and running ALTER EXTENSION stream_seq
 *	  UPDATE, and so that the upgrade path can be installed and tested.
 *	  Each checks in C what the current version checks: being callable
 *	  directly must not let anyone bypass a rule.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/dependency.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"

#include "stream_seq.h"
#include "shmem.h"
#include "catalog.h"
#include "counter.h"
#include "retention.h"
#include "xactstate.h"
#include "lifecycle.h"

PG_FUNCTION_INFO_V1(stream_seq_check_preloaded);
PG_FUNCTION_INFO_V1(stream_seq_register);
PG_FUNCTION_INFO_V1(stream_seq_unregister);
PG_FUNCTION_INFO_V1(stream_seq_record_trim);
PG_FUNCTION_INFO_V1(stream_seq_forget_dropped);
PG_FUNCTION_INFO_V1(stream_seq_rename_column);

/*
 * check_owner
 *		The table's owner only.
 */
static void
check_owner(Oid relid)
{
	if (!pg_class_ownercheck(relid, GetUserId()))
		aclcheck_error(ACLCHECK_NOT_OWNER, OBJECT_TABLE, stream_rel_name(relid));
}

/*
 * stream_seq_check_preloaded
 *		SQL (0.1.0, 0.2.0): _check_preloaded().
 */
Datum
stream_seq_check_preloaded(PG_FUNCTION_ARGS)
{
	stream_check_preloaded();
	PG_RETURN_VOID();
}

/*
 * stream_seq_register
 *		SQL (0.1.0, 0.2.0): _register(stream, seq_column, head_seq, lowest),
 *		the last step of those versions' enable().  The head sequence must
 *		be owned by the stream column, as those versions' enable() makes it;
 *		the entry starts at the lowest number in the table whatever
 *		"lowest" says.
 */
Datum
stream_seq_register(PG_FUNCTION_ARGS)
{
	Oid			relid = PG_GETARG_OID(0);
	Name		column = PG_GETARG_NAME(1);
	Oid			head_seq = PG_GETARG_OID(2);
	AttrNumber	attnum;
	Oid			table;
	int32		owning_column;
	char	   *query;
	int64		lowest;
	bool		found;
	StreamRef  *ref;

	check_owner(relid);
	stream_check_preloaded();
	attnum = get_attnum(relid, NameStr(*column));
	if (!sequenceIsOwned(head_seq, DEPENDENCY_AUTO, &table, &owning_column) ||
		table != relid || owning_column != attnum)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("sequence \"%s\" is not owned by column \"%s\" of table \"%s\"",
						stream_rel_name(head_seq), NameStr(*column),
						stream_rel_name(relid))));

	stream_catalog_insert(relid, NameStr(*column), head_seq);
	CommandCounterIncrement();
	CacheInvalidateRelcacheByRelid(relid);

	query = psprintf("SELECT pg_catalog.min(%s) FROM ONLY %s",
					 quote_identifier(NameStr(*column)),
					 stream_qualified_name(relid));
	stream_catalog_exec_latest(query, 0, NULL, NULL, &lowest, 1, &found);
	ref = stream_lookup(relid, false);
	stream_slot_restart(ref);
	stream_add_entry(ref, lowest == PG_INT64_MIN ? stream_start_counter(ref) : lowest);
	stream_xact_has_entry(ref);
	PG_RETURN_VOID();
}

/*
 * stream_seq_unregister
 *		SQL (0.1.0, 0.2.0): _unregister(stream), the catalog step of those
 *		versions' disable(): records where numbering ended, removes the
 *		catalog row; the slot is freed if the removal commits.
 */
Datum
stream_seq_unregister(PG_FUNCTION_ARGS)
{
	Oid			relid = PG_GETARG_OID(0);

	check_owner(relid);
	stream_check_preloaded();
	stream_retire(stream_lookup(relid, false));
	CacheInvalidateRelcacheByRelid(relid);
	stream_release_at_commit(relid);
	PG_RETURN_VOID();
}

/*
 * stream_seq_record_trim
 *		SQL (0.1.0, 0.2.0): _record_trim(stream, before), called by those
 *		versions' trim() before it deletes.  Checked as trim() checks, past
 *		consumers included (force => true needs the update).
 */
Datum
stream_seq_record_trim(PG_FUNCTION_ARGS)
{
	Oid			relid = PG_GETARG_OID(0);
	int64		before = PG_GETARG_INT64(1);

	stream_check_trim(stream_lookup(relid, false), before, false);
	stream_catalog_record_start(relid, before);
	PG_RETURN_VOID();
}

/*
 * stream_seq_forget_dropped
 *		SQL (0.2.0): _forget_dropped(relid oid), from that version's sql_drop
 *		event trigger: remove the catalog row of a dropped stream table.
 *		Refuses a table that still exists.
 */
Datum
stream_seq_forget_dropped(PG_FUNCTION_ARGS)
{
	Oid			relid = PG_GETARG_OID(0);

	if (get_rel_name(relid) != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("table \"%s\" still exists", stream_rel_name(relid)),
				 errhint("Use stream_seq.disable() to stop numbering a table.")));
	stream_catalog_delete(relid);
	if (stream_shmem_ready())
		stream_release_at_commit(relid);
	PG_RETURN_VOID();
}

/*
 * stream_seq_rename_column
 *		SQL (0.2.0): _rename_column(stream, new_name), from that version's
 *		ddl_command_end event trigger.  Only the table's owner can rename
 *		its columns, so only the owner may record it, and only a column the
 *		table has.
 */
Datum
stream_seq_rename_column(PG_FUNCTION_ARGS)
{
	Oid			relid = PG_GETARG_OID(0);
	Name		new_name = PG_GETARG_NAME(1);
	Oid			argtypes[2] = {REGCLASSOID, TEXTOID};
	Datum		values[2];

	check_owner(relid);
	if (get_attnum(relid, NameStr(*new_name)) == InvalidAttrNumber)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_COLUMN),
				 errmsg("column \"%s\" of relation \"%s\" does not exist",
						NameStr(*new_name), stream_rel_name(relid))));
	values[0] = ObjectIdGetDatum(relid);
	values[1] = CStringGetTextDatum(NameStr(*new_name));
	stream_catalog_exec("UPDATE stream_seq.stream SET seq_column = $2::pg_catalog.name "
						"WHERE relid = $1", 2, argtypes, values, NULL, 0, NULL);
	CacheInvalidateRelcacheByRelid(relid);
	PG_RETURN_VOID();
}

PG_FUNCTION_INFO_V1(stream_seq_upgrade_stream);

/*
 * stream_seq_upgrade_stream
 *		SQL (only while ALTER EXTENSION stream_seq UPDATE TO '0.3.0' runs):
 *		_upgrade_stream(stream): move a stream made by an earlier version to
 *		a head sequence of its own in the extension's schema, recording at
 *		least every number the old one recorded, and protect its unique
 *		index.  Writers and refills are kept out meanwhile.
 */
Datum
stream_seq_upgrade_stream(PG_FUNCTION_ARGS)
{
	Oid			relid = PG_GETARG_OID(0);
	StreamRef  *ref;
	Oid			old_seq;
	int64		end;
	int64		next;
	int64		block_end;
	Oid			new_seq;
	Oid			argtypes[2] = {OIDOID, OIDOID};
	Datum		values[2];

	if (!creating_extension)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("stream_seq._upgrade_stream() may only be called by ALTER EXTENSION stream_seq UPDATE")));

	LockRelationOid(relid, ExclusiveLock);
	ref = stream_lookup(relid, false);
	old_seq = ref->head_seq;
	LockRelationOid(old_seq, ShareUpdateExclusiveLock);

	end = stream_recorded_end(old_seq, ref->head_interval);
	if (stream_counter_read(ref, &next, &block_end))
		end = Max(end, Max(next, block_end));
	end = Max(end, stream_catalog_first(relid));

	new_seq = stream_create_head_sequence(relid,
										  get_attname(relid, ref->seq_attnum, false),
										  end, ref->head_interval);
	values[0] = ObjectIdGetDatum(relid);
	values[1] = ObjectIdGetDatum(new_seq);
	stream_catalog_exec("UPDATE stream_seq.stream SET head_seq = $2::pg_catalog.regclass "
						"WHERE relid::pg_catalog.oid = $1",
						2, argtypes, values, NULL, 0, NULL);
	CommandCounterIncrement();
	stream_catalog_exec(psprintf("DROP SEQUENCE %s",
								 stream_qualified_name(old_seq)),
						0, NULL, NULL, NULL, 0, NULL);
	stream_protect_index(relid, ref->seq_attnum);
	CacheInvalidateRelcacheByRelid(relid);
	PG_RETURN_VOID();
}
