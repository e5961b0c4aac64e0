/*-------------------------------------------------------------------------
 *
 * lifecycle.c
 *	  What keeps a stream consistent while its table is altered, truncated
 *	  or dropped: the C side of the extension's event triggers and of the
 *	  BEFORE TRUNCATE trigger.
 *
 * The event triggers themselves are PL/pgSQL (see the SQL scripts); they
 * refuse DDL that would break a stream and call the functions here to keep
 * the catalog in step with DDL that does not.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"

#include "stream_seq.h"

PG_FUNCTION_INFO_V1(stream_seq_forget_dropped);
PG_FUNCTION_INFO_V1(stream_seq_rename_column);
PG_FUNCTION_INFO_V1(stream_seq_truncate_trigger);

/*
 * stream_seq_forget_dropped
 *		SQL: _forget_dropped(relid oid), from the sql_drop event trigger:
 *		remove the catalog row (and with it the consumers) of a stream whose
 *		table was dropped, and free its shared slot if the drop commits.
 *		Refuses a table that still exists, so that it cannot be used to
 *		remove a live stream.
 */
Datum
stream_seq_forget_dropped(PG_FUNCTION_ARGS)
{
	Oid			relid = PG_GETARG_OID(0);
	Oid			argtypes[1] = {OIDOID};
	Datum		values[1];

	if (get_rel_name(relid) != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("table \"%s\" still exists", get_rel_name(relid)),
				 errhint("Use stream_seq.disable() to stop numbering a table.")));

	values[0] = ObjectIdGetDatum(relid);
	if (stream_catalog_exec("DELETE FROM stream_seq.stream WHERE relid::oid = $1",
							1, argtypes, values, NULL, 0, NULL) > 0 &&
		stream_shmem_ready())
		stream_release_at_commit(relid);
	PG_RETURN_VOID();
}

/*
 * stream_seq_rename_column
 *		SQL: _rename_column(stream regclass, new_name name), from the
 *		ddl_command_end event trigger after the stream column was renamed.
 *		Only the table's owner can rename its columns, so only the owner
 *		may record it.
 */
Datum
stream_seq_rename_column(PG_FUNCTION_ARGS)
{
	Oid			relid = PG_GETARG_OID(0);
	Name		new_name = PG_GETARG_NAME(1);
	Oid			argtypes[2] = {REGCLASSOID, NAMEOID};
	Datum		values[2];

	if (!pg_class_ownercheck(relid, GetUserId()))
		aclcheck_error(ACLCHECK_NOT_OWNER, OBJECT_TABLE, get_rel_name(relid));

	values[0] = ObjectIdGetDatum(relid);
	values[1] = NameGetDatum(new_name);
	stream_catalog_exec("UPDATE stream_seq.stream SET seq_column = $2 "
						"WHERE relid = $1", 2, argtypes, values, NULL, 0, NULL);
	CacheInvalidateRelcacheByRelid(relid);
	PG_RETURN_VOID();
}

/*
 * stream_seq_truncate_trigger
 *		BEFORE TRUNCATE: record that every number handed out so far is gone,
 *		in the same transaction as the truncation, so that after a restart
 *		numbering continues above them although the table is empty (and even
 *		if RESTART IDENTITY reset the head sequence).
 */
Datum
stream_seq_truncate_trigger(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	StreamRef  *ref;
	StreamSlot *slot;
	int64		next;

	if (!CALLED_AS_TRIGGER(fcinfo) ||
		!TRIGGER_FIRED_BY_TRUNCATE(trigdata->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("stream_seq.truncate_trigger() must be fired BEFORE TRUNCATE")));

	ref = stream_lookup(RelationGetRelid(trigdata->tg_relation), false);
	slot = stream_slot_lock_started(ref, LW_SHARED);
	next = slot->next;
	LWLockRelease(slot->lock);

	stream_catalog_record_start(ref->relid, next);
	return PointerGetDatum(NULL);
}
