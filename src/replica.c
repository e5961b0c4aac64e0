/*-------------------------------------------------------------------------
 *
 * replica.c
 *	  Stream horizons on hot standbys: the extension's WAL resource
 *	  manager, whose records tell a standby which transactions hold
 *	  numbers, and the background worker that periodically lists the open
 *	  reservations so that a standby starting anywhere in the WAL learns
 *	  those it did not see taken.
 *
 * A primary writes XLOG_STREAM_NUMBERS whenever a transaction takes numbers
 * or gives some back (shmem.c, under the stream's slot lock, before the
 * transaction's commit record).  Replaying it, a standby keeps the same
 * per-stream list in its own shared memory, with entries whose outcome
 * each snapshot decides by whether it sees the transaction as running; the
 * standby's snapshots already count a transaction as running until its
 * commit or abort record is replayed, or, for one that vanished in a crash
 * of the primary, until the primary's next running-transactions record.
 *
 * Reservations logged before a standby began to replay are unknown to it.
 * So every stream_seq.round_interval, if WAL other than its own was
 * written since the last time, the "lister" worker writes a round: a start
 * record with the next xid, one listing per started stream (its counter
 * and its open reservations, written under the slot's lock), and an end
 * record.  A standby that replayed a round from its start knows every open
 * reservation (shmem.c, stream_replay_round); before that, horizon()
 * there fails with a retryable error.  The round's records are marked
 * unimportant, so an idle primary does not checkpoint, or list again, for
 * their sake.
 *
 * All shared state is written by shmem.c; this file decodes records and
 * decides when to write a round.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "access/xlogreader.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/procsignal.h"
#include "utils/guc.h"

#include "stream_seq.h"
#include "stats.h"
#include "replica.h"
#include "pagewrite.h"
#include "shmem.h"

/*
 * stream_rmgr_redo
 *		Replay one of the extension's records.  Redo must not fail: the
 *		functions it calls report what they cannot do through horizon().
 */
static void
stream_rmgr_redo(XLogReaderState *record)
{
	uint8		info = XLogRecGetInfo(record) & ~XLR_INFO_MASK;
	char	   *data = XLogRecGetData(record);

	switch (info)
	{
		case XLOG_STREAM_NUMBERS:
			stream_replay_numbers((xl_stream_numbers *) data);
			break;
		case XLOG_STREAM_ROUND_START:
			stream_replay_round(true, (xl_stream_round *) data);
			break;
		case XLOG_STREAM_LISTING:
			stream_replay_listing((xl_stream_listing *) data);
			break;
		case XLOG_STREAM_ROUND_END:
			stream_replay_round(false, (xl_stream_round *) data);
			break;
		case XLOG_STREAM_INPLACE:
			stream_inplace_redo(record);
			break;
		case XLOG_STREAM_PAGE:
			stream_page_redo(record);
			break;
		default:
			ereport(PANIC,
					(errcode(ERRCODE_DATA_CORRUPTED),
					 errmsg("stream_seq redo: unknown record type %u", info),
					 errdetail("The WAL was written by a newer version of the stream_seq library than this server has (%s).",
							   STREAM_SEQ_LIBRARY_VERSION),
					 errhint("Install the stream_seq library of the primary on this server, then start it again; upgrade standbys before their primary.")));
	}
}

/*
 * stream_rmgr_desc
 *		Describe a record, for the server's WAL debugging output.
 */
static void
stream_rmgr_desc(StringInfo buf, XLogReaderState *record)
{
	uint8		info = XLogRecGetInfo(record) & ~XLR_INFO_MASK;
	char	   *data = XLogRecGetData(record);

	switch (info)
	{
		case XLOG_STREAM_NUMBERS:
			{
				xl_stream_numbers *rec = (xl_stream_numbers *) data;

				appendStringInfo(buf, "db %u rel %u xid %u lo " INT64_FORMAT " next " INT64_FORMAT "%s",
								 rec->dboid, rec->relid, rec->xid,
								 rec->lo, rec->next,
								 rec->counter_started ? "" : " (counter not started)");
				break;
			}
		case XLOG_STREAM_ROUND_START:
		case XLOG_STREAM_ROUND_END:
			{
				xl_stream_round *rec = (xl_stream_round *) data;

				appendStringInfo(buf, "next xid %u:%u",
								 EpochFromFullTransactionId(rec->next_xid),
								 XidFromFullTransactionId(rec->next_xid));
				break;
			}
		case XLOG_STREAM_LISTING:
			{
				xl_stream_listing *rec = (xl_stream_listing *) data;

				appendStringInfo(buf, "db %u rel %u next " INT64_FORMAT " open %d",
								 rec->dboid, rec->relid, rec->next,
								 rec->nlisted);
				break;
			}
		case XLOG_STREAM_INPLACE:
			stream_inplace_desc(buf, record);
			break;
		case XLOG_STREAM_PAGE:
			stream_page_desc(buf, record);
			break;
	}
}

/*
 * stream_rmgr_identify
 *		The name of a record type.
 */
static const char *
stream_rmgr_identify(uint8 info)
{
	switch (info & ~XLR_INFO_MASK)
	{
		case XLOG_STREAM_NUMBERS:
			return "NUMBERS";
		case XLOG_STREAM_ROUND_START:
			return "ROUND_START";
		case XLOG_STREAM_LISTING:
			return "LISTING";
		case XLOG_STREAM_ROUND_END:
			return "ROUND_END";
		case XLOG_STREAM_INPLACE:
			return "INPLACE";
		case XLOG_STREAM_PAGE:
			return "PAGE";
	}
	return NULL;
}

static RmgrData stream_rmgr = {
	.rm_name = STREAM_SEQ_RMGR_NAME,
	.rm_redo = stream_rmgr_redo,
	.rm_desc = stream_rmgr_desc,
	.rm_identify = stream_rmgr_identify,
};

/*
 * stream_replica_init
 *		Register the resource manager and the lister worker (from _PG_init,
 *		when preloaded).
 */
void
stream_replica_init(void)
{
	BackgroundWorker worker;

	RegisterCustomRmgr(stream_seq_rmgr_id, &stream_rmgr);

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = 5;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "stream_seq");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "stream_seq_lister_main");
	snprintf(worker.bgw_name, BGW_MAXLEN, "stream_seq lister");
	snprintf(worker.bgw_type, BGW_MAXLEN, "stream_seq lister");
	RegisterBackgroundWorker(&worker);
}

/*
 * stream_seq_lister_main
 *		The lister worker: write a round when the server started (or was
 *		promoted) and then every stream_seq.round_interval, skipping rounds
 *		while nothing but rounds was written since the last one.
 */
void
stream_seq_lister_main(Datum main_arg)
{
	XLogRecPtr	last_important = InvalidXLogRecPtr;
	bool		first = true;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	BackgroundWorkerUnblockSignals();

	while (!ShutdownRequestPending)
	{
		XLogRecPtr	important;

		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}

		important = GetLastImportantRecPtr();
		if (first || important != last_important)
		{
			stream_log_round();
			last_important = important;
			first = false;
		}

		(void) WaitLatch(MyLatch,
						 WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 stream_seq_round_interval,
						 stream_wait_event(STREAM_WAIT_LISTER));
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
	proc_exit(0);
}
