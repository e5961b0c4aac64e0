/*-------------------------------------------------------------------------
 *
 * replication.c
 *	  Stream tables and logical replication that does not go through
 *	  stream_seq's numbering: rows that arrive with their numbers, and
 *	  replication sets that would carry rows without them.
 *
 *	- The replica trigger (stream_seq_replica, BEFORE INSERT OR UPDATE,
 *	  ENABLE REPLICA) fires only where session_replication_role
 *	  is "replica": in a subscription's apply worker, and in a session that
 *	  set it.  None of the other stream triggers fire there, so a row comes
 *	  with its number or without one.  A number moves the stream's counter
 *	  above it: after a cut-over the subscriber's own numbers continue
 *	  above every replicated one.  A row without one is let through only
 *	  in a replication worker, which writes the number by the UPDATE that
 *	  follows (the publisher wrote it at commit); anywhere else it would
 *	  never get a number and no reader would see it, so it is refused.
 *	- pglogical's replication sets are rows in pglogical's own tables, not
 *	  publications PostgreSQL knows of: a stream table in a set that
 *	  replicates inserts but not updates (pglogical's default_insert_only)
 *	  would reach subscribers without its numbers.  The first insert of a
 *	  transaction into such a table is refused, as for a publication.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "commands/trigger.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "replication/logicalworker.h"
#include "replication/origin.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"

#include "stream_seq.h"
#include "replication.h"
#include "shmem.h"
#include "catalog.h"
#include "counter.h"
#include "partition.h"

PG_FUNCTION_INFO_V1(stream_seq_replica_trigger);

/*
 * stream_in_replication_worker
 *		Whether this backend applies changes replicated from elsewhere:
 *		PostgreSQL's apply and table synchronization workers, or a session
 *		that replays changes under a replication origin (pglogical's apply
 *		does).  Those write a stream row's number by the UPDATE that
 *		follows its INSERT.
 */
bool
stream_in_replication_worker(void)
{
	return IsLogicalWorker() || replorigin_session_origin != InvalidRepOriginId;
}

/*
 * keep_times_rising
 *		A replicated row with a number, on a stream with a time column:
 *		its time (the origin's) is kept unless it is earlier than the
 *		time of a number taken here before, or missing (an origin without
 *		the column); then it gets that time, or the current one, so that
 *		times never go down as numbers go up (position_at() relies on
 *		it).  Returns the row to store.
 */
static HeapTuple
keep_times_rising(Relation rel, HeapTuple tuple, AttrNumber time_attnum,
				  StreamRef *ref)
{
	bool		isnull;
	Datum		value = heap_getattr(tuple, time_attnum, RelationGetDescr(rel),
									 &isnull);
	TimestampTz at;
	int			column = time_attnum;
	bool		nulls = false;

	if (!stream_time_floor_known(ref))
		stream_raise_time_floor(ref);
	at = stream_time_floor(ref, isnull ? DT_NOBEGIN : DatumGetTimestampTz(value),
						   isnull);
	if (!isnull && at == DatumGetTimestampTz(value))
		return tuple;
	value = TimestampTzGetDatum(at);
	return heap_modify_tuple_by_cols(tuple, RelationGetDescr(rel), 1, &column,
									 &value, &nulls);
}

/*
 * stream_seq_replica_trigger
 *		BEFORE INSERT / BEFORE UPDATE (any column: pglogical's apply says
 *		not which it updates), fired only in replica mode: a row that comes
 *		with a new number moves the counter above it; a row inserted
 *		without one outside a replication worker is refused, and so is an
 *		update that removes a number.
 */
Datum
stream_seq_replica_trigger(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	Relation	rel;
	HeapTuple	tuple;
	StreamTarget *target;
	Datum		value;
	bool		isnull;

	if (!CALLED_AS_TRIGGER(fcinfo) ||
		!TRIGGER_FIRED_BEFORE(trigdata->tg_event) ||
		!TRIGGER_FIRED_FOR_ROW(trigdata->tg_event) ||
		!(TRIGGER_FIRED_BY_INSERT(trigdata->tg_event) ||
		  TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event)))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("stream_seq.replica_trigger() must be fired BEFORE INSERT OR UPDATE ... FOR EACH ROW")));

	rel = trigdata->tg_relation;
	tuple = TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event) ?
		trigdata->tg_newtuple : trigdata->tg_trigtuple;

	/*
	 * Fired in origin mode too between a restore's CREATE TRIGGER and its
	 * ENABLE REPLICA TRIGGER: the guard trigger does the work there.
	 */
	if (SessionReplicationRole != SESSION_REPLICATION_ROLE_REPLICA)
		return PointerGetDatum(tuple);

	target = stream_lookup_target(rel);
	value = heap_getattr(tuple, target->seq_attnum, RelationGetDescr(rel),
						 &isnull);
	if (TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event))
	{
		bool		old_isnull;
		Datum		old_value = heap_getattr(trigdata->tg_trigtuple,
											 target->seq_attnum,
											 RelationGetDescr(rel),
											 &old_isnull);

		if (isnull && !old_isnull)
			ereport(ERROR,
					(errcode(ERRCODE_GENERATED_ALWAYS),
					 errmsg("cannot remove the number of a row of stream table \"%s\"",
							stream_rel_name(target->stream)),
					 errdetail("Readers may have passed the row by its number.")));
		/* most replicated updates leave the number as it was */
		if (isnull || (!old_isnull &&
					   DatumGetInt64(old_value) == DatumGetInt64(value)))
			return PointerGetDatum(tuple);
	}
	if (!isnull)
	{
		StreamRef  *ref = stream_lookup(target->stream, false);

		stream_counter_raise(ref, DatumGetInt64(value));
		if (target->time_attnum != InvalidAttrNumber)
			tuple = keep_times_rising(rel, tuple, target->time_attnum, ref);
		return PointerGetDatum(tuple);
	}
	if (TRIGGER_FIRED_BY_INSERT(trigdata->tg_event) && !stream_in_replication_worker())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("cannot insert a row without a number into stream table \"%s\" while session_replication_role is \"replica\"",
						stream_rel_name(target->stream)),
				 errdetail("Stream numbers are assigned at commit by triggers that do not fire in replica mode; the row would never get one."),
				 errhint("Insert the row with session_replication_role = origin, or give it the number it has where it came from.")));
	return PointerGetDatum(tuple);
}

/*
 * stream_replica_number
 *		A row stored in replica mode with the number it has where it came
 *		from (told by the capture index, capture.c): move the stream's
 *		counter above it, so that after a cut-over the numbers handed out
 *		here continue above every replicated one.
 */
void
stream_replica_number(StreamTarget *target, int64 number)
{
	stream_counter_raise(stream_lookup(target->stream, false), number);
}

/*
 * stream_replica_time
 *		A row stored in replica mode with a number, on a stream with a time
 *		column holding "value" (or none, "isnull"): the time it must have
 *		so that times never go down as numbers go up (position_at() relies
 *		on it), raising the stream's time floor to it.  False when its own
 *		time will do; else the time goes to *at.
 */
bool
stream_replica_time(StreamTarget *target, bool isnull, TimestampTz value,
					TimestampTz *at)
{
	StreamRef  *ref = stream_lookup(target->stream, false);

	if (!stream_time_floor_known(ref))
		stream_raise_time_floor(ref);
	*at = stream_time_floor(ref, isnull ? DT_NOBEGIN : value, isnull);
	return isnull || *at != value;
}

/*
 * stream_report_replica_unnumbered
 *		The error for a row inserted without a number in replica mode
 *		outside a replication worker: nothing would ever number it.
 */
void
stream_report_replica_unnumbered(StreamTarget *target)
{
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("cannot insert a row without a number into stream table \"%s\" while session_replication_role is \"replica\"",
					stream_rel_name(target->stream)),
			 errdetail("Stream numbers are assigned at commit, which does not happen in replica mode; the row would never get one."),
			 errhint("Insert the row with session_replication_role = origin, or give it the number it has where it came from.")));
}

/*
 * stream_check_pglogical
 *		Refuse to write into a stream table that one of pglogical's
 *		replication sets carries with its inserts but without its updates.
 *		The sets of the table and, for a partition, of its stream are
 *		looked up once per transaction and stream (where pglogical is
 *		installed): pglogical.alter_replication_set() changes a set without
 *		telling the tables in it.
 */
void
stream_check_pglogical(Relation rel, Oid stream)
{
	Oid			argtypes[2] = {OIDOID, OIDOID};
	Datum		values[2];
	char	   *set_name = NULL;

	if (!OidIsValid(get_namespace_oid("pglogical", true)))
		return;

	values[0] = ObjectIdGetDatum(RelationGetRelid(rel));
	values[1] = ObjectIdGetDatum(stream);
	set_name = stream_catalog_text("SELECT s.set_name::pg_catalog.text "
								   "FROM pglogical.replication_set s "
								   "JOIN pglogical.replication_set_table t USING (set_id) "
								   "WHERE t.set_reloid::pg_catalog.oid IN ($1, $2) "
								   "AND s.replicate_insert AND NOT s.replicate_update "
								   "ORDER BY 1 LIMIT 1",
								   2, argtypes, values);
	if (set_name != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("stream table \"%s\" is in pglogical replication set \"%s\", which replicates inserts but not updates",
						stream_rel_name(stream), set_name),
				 errdetail("Stream numbers are written by an update at commit; subscribers would get the rows without them."),
				 errhint("Add the table to a replication set that replicates updates too (pglogical's \"default\"), and remove it from \"%s\".",
						 set_name)));
}
