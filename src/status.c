/*-------------------------------------------------------------------------
 *
 * status.c
 *	  What the stream_seq.streams and stream_seq.holders views show: each
 *	  stream's head and horizon, and the transactions holding horizons
 *	  back.  Only streams whose table the caller may read are shown.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"

#include "stream_seq.h"
#include "shmem.h"
#include "catalog.h"
#include "horizon.h"

PG_FUNCTION_INFO_V1(stream_seq_status);
PG_FUNCTION_INFO_V1(stream_seq_holders);

/*
 * may_read
 *		Whether the caller may read the table: what the views require to
 *		show anything about a stream.
 */
static bool
may_read(Oid relid)
{
	bool		is_missing = false;

	return pg_class_aclcheck_ext(relid, GetUserId(), ACL_SELECT,
								 &is_missing) == ACLCHECK_OK && !is_missing;
}

/*
 * stream_seq_status
 *		SQL: _status(stream regclass) RETURNS record, for the streams view:
 *		head, horizon for the caller's snapshot, transactions holding
 *		numbers, and the oldest of them.  All NULL for a table the caller
 *		may not read, and for a stream no shared slot is free for (more
 *		streams enabled in the cluster than stream_seq.max_streams holds):
 *		the view goes on with the other streams.
 */
Datum
stream_seq_status(PG_FUNCTION_ARGS)
{
	Oid			relid = PG_GETARG_OID(0);
	TupleDesc	tupdesc;
	Datum		values[10];
	bool		nulls[10];
	StreamRef  *ref;
	StreamStatus status;
	bool		no_slot;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	memset(nulls, true, sizeof(nulls));

	ref = stream_lookup_if_slot(relid, &no_slot);
	if (ref == NULL && !no_slot)
		stream_report_not_stream(relid);
	if (ref != NULL && may_read(relid))
	{
		Snapshot	snapshot = stream_statement_snapshot();
		bool		standby = RecoveryInProgress();
		int64		standby_horizon = 0;
		bool		standby_known = false;

		/*
		 * Fetch the horizon the usual way, which starts the counter; on a
		 * standby, without the errors horizon() raises while the standby
		 * does not know it yet (the view then shows it as NULL).
		 */
		if (!standby)
			(void) stream_compute_horizon(ref, snapshot, NULL);
		else
			standby_known = stream_standby_horizon(ref, snapshot,
												   &standby_horizon) ==
				STANDBY_HORIZON_DONE;
		if (stream_slot_status(ref, snapshot, &status))
		{
			memset(nulls, false, sizeof(nulls));
			values[0] = Int64GetDatum(status.next - 1);
			nulls[0] = status.next <= 1;
			values[1] = Int64GetDatum(status.horizon);
			values[2] = Int32GetDatum(status.committing);
			values[3] = Int32GetDatum(status.oldest_pid);
			values[4] = TransactionIdGetDatum(status.oldest_xid);
			values[5] = TimestampTzGetDatum(status.oldest_since);
			nulls[3] = nulls[4] = nulls[5] = status.committing == 0;
			values[6] = Int32GetDatum(status.tracked);
			values[7] = Int64GetDatum((int64) status.evictions);
			values[8] = Int64GetDatum((int64) status.assigned_xacts);
			values[9] = Int64GetDatum(status.visible_horizon);
		}
		if (standby)
		{
			/* nothing replayed for the stream: the rest stays NULL */
			values[1] = values[9] = Int64GetDatum(standby_horizon);
			nulls[1] = nulls[9] = !standby_known;
		}
	}
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

/*
 * stream_seq_holders
 *		SQL: _holders() RETURNS SETOF record: every transaction holding the
 *		horizon of a stream of this database back (still committing, or
 *		committed with its commit record not yet flushed, or not committing
 *		yet but holding numbers it took early), for the streams
 *		the caller may read.  Behind the stream_seq.holders view.
 */
Datum
stream_seq_holders(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	StreamHolder *holders;
	int			n;
	int			i;

	stream_check_preloaded();
	InitMaterializedSRF(fcinfo, 0);
	n = stream_slot_holders(&holders);
	for (i = 0; i < n; i++)
	{
		StreamHolder *h = &holders[i];
		Datum		values[7];
		bool		nulls[7] = {0};

		if (!may_read(h->relid))
			continue;
		values[0] = ObjectIdGetDatum(h->relid);
		values[1] = Int32GetDatum(h->pid);
		values[2] = TransactionIdGetDatum(h->xid);
		values[3] = Int64GetDatum(h->first_number);
		values[4] = Int64GetDatum(h->numbers);
		values[5] = CStringGetTextDatum(h->committed ?
										"committed, not yet flushed" :
										h->early ? "numbered early" :
										"committing");
		values[6] = TimestampTzGetDatum(h->since);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc,
							 values, nulls);
	}
	return (Datum) 0;
}
