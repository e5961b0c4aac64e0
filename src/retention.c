/*-------------------------------------------------------------------------
 *
 * retention.c
 *	  Where a stream starts: trim() deletes old rows, the BEFORE TRUNCATE
 *	  trigger records a truncation, and both move first() forward in the
 *	  catalog, in the same transaction as the deletion, so that numbering
 *	  continues above them and consumers left behind are told.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"

#include "stream_seq.h"
#include "retention.h"
#include "shmem.h"
#include "catalog.h"
#include "counter.h"
#include "horizon.h"
#include "consumer.h"
#include "partition.h"

PG_FUNCTION_INFO_V1(stream_seq_trim);
PG_FUNCTION_INFO_V1(stream_seq_truncate_trigger);

/*
 * stream_check_trim
 *		What trim() checks before it records the new start and deletes:
 *		DELETE on the table; never at or past the horizon (nobody can have
 *		read there yet); never past the slowest consumer, whoever owns it,
 *		unless forced.
 */
void
stream_check_trim(StreamRef *ref, int64 before, bool force)
{
	AclResult	aclresult;
	int64		horizon;
	char	   *consumer;
	int64		position;

	aclresult = pg_class_aclcheck(ref->relid, GetUserId(), ACL_DELETE);
	if (aclresult != ACLCHECK_OK)
		aclcheck_error(aclresult, OBJECT_TABLE, stream_rel_name(ref->relid));

	horizon = stream_statement_horizon(ref);
	if (before > horizon)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("cannot trim stream table \"%s\" up to " INT64_FORMAT,
						stream_rel_name(ref->relid), before),
				 errdetail("The horizon is " INT64_FORMAT "; rows at or above it may not have been read yet.",
						   horizon)));
	if (!force && stream_slowest_consumer(ref->relid, &consumer, &position) &&
		before > position + 1)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("cannot trim stream table \"%s\" past consumer \"%s\"",
						stream_rel_name(ref->relid), consumer),
				 errdetail("The consumer has finished up to " INT64_FORMAT ".", position),
				 errhint("Advance or drop the consumer, or pass force => true.")));
}

/*
 * stream_seq_trim
 *		SQL: trim(stream regclass, before bigint, force boolean DEFAULT
 *		false) RETURNS bigint: delete the rows numbered below "before" and
 *		return how many.  Never at or past the horizon (nobody can have
 *		read there yet); never past the slowest consumer unless forced.
 *		Needs DELETE on the table; the deletion runs as the caller.
 */
Datum
stream_seq_trim(PG_FUNCTION_ARGS)
{
	Oid			relid;
	int64		before;
	bool		force;
	StreamRef  *ref;
	Oid			argtypes[1] = {INT8OID};
	Datum		values[1];
	uint64		deleted;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1) || PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("stream table, position and force must not be null")));
	relid = PG_GETARG_OID(0);
	before = PG_GETARG_INT64(1);
	force = PG_GETARG_BOOL(2);

	/* the lock the DELETE takes, first: a stream dropped meanwhile is 42P01 */
	ref = stream_lookup_locked(relid, RowExclusiveLock);
	stream_check_trim(ref, before, force);
	stream_catalog_record_start(relid, before);
	if (!force)
		stream_slots_raise(relid, before - 1);
	values[0] = Int64GetDatum(before);
	deleted = stream_caller_exec(psprintf("DELETE FROM %s WHERE %s < $1",
										  stream_source(relid),
										  quote_identifier(get_attname(relid, ref->seq_attnum, false))),
								 1, argtypes, values);
	PG_RETURN_INT64((int64) deleted);
}

/*
 * stream_seq_truncate_trigger
 *		BEFORE TRUNCATE: record that every number handed out so far is gone,
 *		in the same transaction as the truncation, so that after a restart
 *		numbering continues above them although the table is empty.
 */
Datum
stream_seq_truncate_trigger(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	StreamRef  *ref;
	int64		next;
	int64		block_end;

	if (!CALLED_AS_TRIGGER(fcinfo) ||
		!TRIGGER_FIRED_BY_TRUNCATE(trigdata->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("stream_seq.truncate_trigger() must be fired BEFORE TRUNCATE")));

	if (trigdata->tg_relation->rd_rel->relispartition)
	{
		Oid			stream = stream_root_of(RelationGetRelid(trigdata->tg_relation));

		/* a partition truncated on its own, or with its stream */
		if (OidIsValid(stream))
			stream_partition_truncated(stream,
									   RelationGetRelid(trigdata->tg_relation));
		return PointerGetDatum(NULL);
	}
	/* a table that left a stream and kept the trigger: nothing to record */
	if (!stream_catalog_has(RelationGetRelid(trigdata->tg_relation)))
		return PointerGetDatum(NULL);
	ref = stream_lookup(RelationGetRelid(trigdata->tg_relation), false);
	if (!stream_counter_read(ref, &next, &block_end))
		next = stream_start_counter(ref);
	stream_catalog_record_start(ref->relid, next);
	return PointerGetDatum(NULL);
}
