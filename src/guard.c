/*-------------------------------------------------------------------------
 *
 * guard.c
 *	  Refusing numbers written by hand into rows an UPDATE stores: the
 *	  UPDATE triggers of a stream table; and the INSERT triggers that
 *	  stream tables enabled by versions before 0.7.0 still have until
 *	  ALTER EXTENSION UPDATE (or stream_seq.upgrade_write_path()) replaces
 *	  them, which now feed the commit-time write of this version.
 *
 * The triggers of a stream table:
 *	- stream_seq_guard, BEFORE UPDATE OF the stream column (and the time
 *	  column): writing back the value a row has (ORMs write back every
 *	  column of a row they loaded) is no change; NULL or the placeholder
 *	  (SET seq = DEFAULT, or an ORM that read the row before its commit)
 *	  keeps the value; anything else is refused;
 *	- stream_seq_guard_update, AFTER UPDATE, for the rows whose number or
 *	  time changed (its WHEN says which): refused.  A BEFORE trigger that
 *	  fires after the guard (they fire in the order of their names) can
 *	  still change the row; an AFTER trigger sees the version the UPDATE
 *	  stored, whatever changed it.
 * An INSERT needs no trigger: the capture index (capture.c) refuses a row
 * stored with a value of its own.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/tableam.h"
#include "catalog/pg_trigger.h"
#include "commands/trigger.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

#include "stream_seq.h"
#include "capture.h"
#include "catalog.h"
#include "pagewrite.h"
#include "partition.h"

PG_FUNCTION_INFO_V1(stream_seq_guard_trigger);
PG_FUNCTION_INFO_V1(stream_seq_guard_update_trigger);
PG_FUNCTION_INFO_V1(stream_seq_guard_insert_trigger);
PG_FUNCTION_INFO_V1(stream_seq_assign_trigger);

#define APPLICATIONS_HINT \
	"Leave the column out of the statement, or write back the value the row has; see the stream_seq documentation, doc/applications.md."

/*
 * value_of
 *		Column "attnum" of a row: false when it is null or holds the
 *		placeholder (no value given), true with the value in *value.
 */
static bool
value_of(Relation rel, HeapTuple tuple, AttrNumber attnum, AttrNumber seq_attnum,
		 int64 *value)
{
	bool		isnull;
	Datum		datum;

	if (attnum == InvalidAttrNumber)
		return false;
	datum = heap_getattr(tuple, attnum, RelationGetDescr(rel), &isnull);
	if (isnull)
		return false;
	*value = DatumGetInt64(datum);	/* bigint or timestamptz, by value */
	if (attnum == seq_attnum)
		return *value != STREAM_SEQ_PLACEHOLDER;
	return *value != STREAM_TIME_PLACEHOLDER;
}

/*
 * column_changed
 *		Whether column "attnum" has a value in one version of a row and not
 *		the same value in the other (the placeholder counts as none).
 */
static bool
column_changed(Relation rel, HeapTuple oldtuple, HeapTuple newtuple,
			   AttrNumber attnum, AttrNumber seq_attnum)
{
	int64		oldvalue;
	int64		newvalue;
	bool		oldset = value_of(rel, oldtuple, attnum, seq_attnum, &oldvalue);
	bool		newset = value_of(rel, newtuple, attnum, seq_attnum, &newvalue);

	if (!oldset || !newset)
		return oldset != newset;
	return oldvalue != newvalue;
}

/*
 * changed_column
 *		The column of the stream column and the time column that an UPDATE
 *		changes, or InvalidAttrNumber: writing back the value a row has
 *		writes nothing.
 */
static AttrNumber
changed_column(Relation rel, StreamTarget *target, HeapTuple oldtuple,
			   HeapTuple newtuple)
{
	if (column_changed(rel, oldtuple, newtuple, target->seq_attnum,
					   target->seq_attnum))
		return target->seq_attnum;
	if (target->time_attnum != InvalidAttrNumber &&
		column_changed(rel, oldtuple, newtuple, target->time_attnum,
					   target->seq_attnum))
		return target->time_attnum;
	return InvalidAttrNumber;
}

/*
 * report_update
 *		The error for an UPDATE that changes column "attnum" (the stream
 *		column or the time column) of a row of "rel"; named after the
 *		stream, which is what a partition's rows belong to.
 */
static void
report_update(Relation rel, StreamTarget *target, AttrNumber attnum)
{
	ereport(ERROR,
			(errcode(ERRCODE_GENERATED_ALWAYS),
			 errmsg("column \"%s\" of stream table \"%s\" cannot be updated",
					get_attname(RelationGetRelid(rel), attnum, false),
					stream_rel_name(target->stream)),
			 attnum == target->seq_attnum ?
			 errdetail("Stream numbers are assigned by stream_seq when the inserting transaction commits.") :
			 errdetail("It is the stream's time column: stream_seq writes it together with the number when the inserting transaction commits."),
			 errhint(APPLICATIONS_HINT)));
}

/*
 * keep_value
 *		An UPDATE that stores NULL or the placeholder in column "attnum" of
 *		a row that has a value there: give the new version the old value
 *		back.  PostgreSQL hands triggers SET col = DEFAULT as the default
 *		(the placeholder), and DEFAULT must leave the number alone, as it
 *		does a generated column; a number cannot be taken away, so NULL or
 *		the placeholder mean no value given.  Returns the tuple to store.
 */
static HeapTuple
keep_value(Relation rel, HeapTuple oldtuple, HeapTuple newtuple,
		   AttrNumber attnum, AttrNumber seq_attnum)
{
	int64		oldvalue;
	int64		newvalue;
	Datum		value;
	bool		isnull = false;
	int			column = attnum;

	if (attnum == InvalidAttrNumber ||
		value_of(rel, newtuple, attnum, seq_attnum, &newvalue) ||
		!value_of(rel, oldtuple, attnum, seq_attnum, &oldvalue))
		return newtuple;
	value = heap_getattr(oldtuple, attnum, RelationGetDescr(rel), &isnull);
	return heap_modify_tuple_by_cols(newtuple, RelationGetDescr(rel), 1,
									 &column, &value, &isnull);
}

/*
 * has_insert_guard
 *		Whether the table has 0.6.0's AFTER INSERT trigger that refuses a
 *		row inserted with a number or a time (stream_seq_guard_insert),
 *		enabled for origin mode: only then may the BEFORE INSERT guard of
 *		those versions let such a row through to the conflict check of
 *		INSERT ... ON CONFLICT.
 */
static bool
has_insert_guard(Relation rel)
{
	TriggerDesc *trigdesc = rel->trigdesc;
	int			i;

	for (i = 0; trigdesc != NULL && i < trigdesc->numtriggers; i++)
	{
		Trigger    *trigger = &trigdesc->triggers[i];
		const char *runs_for = NULL;

		if (strcmp(trigger->tgname, "stream_seq_guard_insert") == 0 &&
			TRIGGER_FOR_ROW(trigger->tgtype) &&
			TRIGGER_FOR_AFTER(trigger->tgtype) &&
			TRIGGER_FOR_INSERT(trigger->tgtype) &&
			!trigger->tgdeferrable &&
			trigger->tgenabled == TRIGGER_FIRES_ON_ORIGIN &&
			stream_is_own_trigger_function(trigger->tgfoid, &runs_for) &&
			strcmp(runs_for, "stream_seq_guard_insert") == 0)
			return true;
	}
	return false;
}

/*
 * written_column
 *		The stream column or the time column, whichever a stored row has a
 *		value of its own in, or InvalidAttrNumber.
 */
static AttrNumber
written_column(Relation rel, StreamTarget *target, HeapTuple tuple)
{
	int64		value;

	if (value_of(rel, tuple, target->seq_attnum, target->seq_attnum, &value))
		return target->seq_attnum;
	if (value_of(rel, tuple, target->time_attnum, target->seq_attnum, &value))
		return target->time_attnum;
	return InvalidAttrNumber;
}

/*
 * stream_seq_guard_trigger
 *		BEFORE UPDATE OF the stream column (and the time column): see the
 *		top of the file.  Before 0.7.0 it also fired BEFORE INSERT: a row
 *		with a value was refused there unless 0.6.0's insert guard would
 *		refuse it once stored.
 */
Datum
stream_seq_guard_trigger(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	Relation	rel;
	StreamTarget *target;
	HeapTuple	newtuple;
	AttrNumber	changed;

	if (!CALLED_AS_TRIGGER(fcinfo) ||
		!TRIGGER_FIRED_BEFORE(trigdata->tg_event) ||
		!TRIGGER_FIRED_FOR_ROW(trigdata->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("stream_seq.guard_trigger() must be fired BEFORE ... FOR EACH ROW")));

	rel = trigdata->tg_relation;
	target = stream_lookup_target(rel);

	if (TRIGGER_FIRED_BY_INSERT(trigdata->tg_event))
	{
		AttrNumber	written = written_column(rel, target, trigdata->tg_trigtuple);

		if (written != InvalidAttrNumber &&
			(target->sealed || target->detaching || !has_insert_guard(rel)))
			stream_report_written_value(rel, target, written);
		return PointerGetDatum(trigdata->tg_trigtuple);
	}
	if (!TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("stream_seq.guard_trigger() must be fired for INSERT or UPDATE")));

	/* DEFAULT, NULL or the placeholder keeps the value */
	newtuple = keep_value(rel, trigdata->tg_trigtuple, trigdata->tg_newtuple,
						  target->seq_attnum, target->seq_attnum);
	newtuple = keep_value(rel, trigdata->tg_trigtuple, newtuple,
						  target->time_attnum, target->seq_attnum);
	changed = changed_column(rel, target, trigdata->tg_trigtuple, newtuple);
	if (changed != InvalidAttrNumber)
		report_update(rel, target, changed);
	return PointerGetDatum(newtuple);
}

/*
 * stream_seq_guard_update_trigger
 *		AFTER UPDATE, for the rows whose number or time an UPDATE changed
 *		(the trigger's WHEN says which): refuse it.
 */
Datum
stream_seq_guard_update_trigger(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	Relation	rel;
	StreamTarget *target;
	AttrNumber	changed;

	if (!CALLED_AS_TRIGGER(fcinfo) ||
		!TRIGGER_FIRED_AFTER(trigdata->tg_event) ||
		!TRIGGER_FIRED_FOR_ROW(trigdata->tg_event) ||
		!TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("stream_seq.guard_update_trigger() must be fired AFTER UPDATE ... FOR EACH ROW")));

	rel = trigdata->tg_relation;
	target = stream_lookup_target(rel);
	changed = changed_column(rel, target, trigdata->tg_trigtuple,
							 trigdata->tg_newtuple);
	if (changed != InvalidAttrNumber)
		report_update(rel, target, changed);
	return PointerGetDatum(NULL);
}

/*
 * stream_seq_guard_insert_trigger
 *		0.6.0's AFTER INSERT trigger, for the rows inserted with a value in
 *		the stream column or the time column: refuse the statement.  The
 *		placeholders are no value.
 */
Datum
stream_seq_guard_insert_trigger(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	Relation	rel;
	StreamTarget *target;
	AttrNumber	written;

	if (!CALLED_AS_TRIGGER(fcinfo) ||
		!TRIGGER_FIRED_AFTER(trigdata->tg_event) ||
		!TRIGGER_FIRED_FOR_ROW(trigdata->tg_event) ||
		!TRIGGER_FIRED_BY_INSERT(trigdata->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("stream_seq.guard_insert_trigger() must be fired AFTER INSERT ... FOR EACH ROW")));

	rel = trigdata->tg_relation;
	target = stream_lookup_target(rel);
	written = written_column(rel, target, trigdata->tg_trigtuple);
	if (written != InvalidAttrNumber)
		stream_report_written_value(rel, target, written);
	return PointerGetDatum(NULL);
}

/*
 * has_capture_index
 *		Whether the table has an index of access method stream_seq_capture,
 *		which captures its rows for the commit-time write.
 */
static bool
has_capture_index(Relation rel)
{
	List	   *indexes = RelationGetIndexList(rel);
	ListCell   *lc;
	bool		found = false;

	foreach(lc, indexes)
	{
		Relation	index = index_open(lfirst_oid(lc), AccessShareLock);

		found = stream_is_capture_index(index) && index->rd_index->indisready;
		index_close(index, AccessShareLock);
		if (found)
			break;
	}
	list_free(indexes);
	return found;
}

/*
 * stream_seq_assign_trigger
 *		The deferred AFTER INSERT constraint trigger of streams enabled
 *		before 0.7.0: capture the row for the commit-time write, which
 *		follows it (it fires in the commit's deferred-trigger loop, or
 *		earlier with SET CONSTRAINTS ... IMMEDIATE), unless the table's
 *		capture index did.
 */
Datum
stream_seq_assign_trigger(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;

	if (!CALLED_AS_TRIGGER(fcinfo) ||
		!TRIGGER_FIRED_AFTER(trigdata->tg_event) ||
		!TRIGGER_FIRED_FOR_ROW(trigdata->tg_event) ||
		!TRIGGER_FIRED_BY_INSERT(trigdata->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("stream_seq.assign_trigger() must be fired AFTER INSERT ... FOR EACH ROW")));

	if (!has_capture_index(trigdata->tg_relation))
		stream_capture_row(trigdata->tg_relation,
						   &trigdata->tg_trigtuple->t_self);
	return PointerGetDatum(NULL);
}
