/*-------------------------------------------------------------------------
 *
 * settings.c
 *	  The settings of stream_seq (stream_seq.*): their variables, which
 *	  every module reads, and their definitions.  Those that size shared
 *	  memory or that standbys must agree on exist only when the library
 *	  is preloaded: a PGC_POSTMASTER setting cannot be defined later.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>

#include "access/rmgr.h"
#include "miscadmin.h"
#include "utils/guc.h"

#include "stream_seq.h"
#include "stats.h"

int			stream_seq_max_streams = 64;
int			stream_seq_max_tracked_xacts = 1024;
int			stream_seq_head_interval = 1000;
int			stream_seq_seal_grace = 3600;
bool		stream_seq_notify = false;
bool		stream_seq_in_place = true;
int			stream_seq_round_interval = 5000;
int			stream_seq_rmgr_id = RM_EXPERIMENTAL_ID;
int			stream_seq_retention_interval = 60;
int			stream_seq_hold_after_numbering = 0;

/*
 * stream_define_settings
 *		Define the settings (from _PG_init): those any session may set in
 *		every case, the others only while the library is preloaded.  The
 *		prefix is reserved after the last definition, as reserving it
 *		drops any stream_seq.* placeholder not yet defined.
 */
void
stream_define_settings(void)
{
	DefineCustomIntVariable("stream_seq.head_interval",
							"Stream numbers recorded durably at a time, for streams enabled from now on.",
							"The head of each stream is written to its head sequence once per this many numbers.",
							&stream_seq_head_interval,
							1000, 1, 1000000000,
							PGC_USERSET, 0,
							NULL, NULL, NULL);
	DefineCustomBoolVariable("stream_seq.notify",
							 "Sends NOTIFY stream_seq with the table name when a transaction that wrote a stream commits.",
							 "Off by default: PostgreSQL serializes the commits of notifying transactions.",
							 &stream_seq_notify,
							 false,
							 PGC_USERSET, 0,
							 NULL, NULL, NULL);
	DefineCustomBoolVariable("stream_seq.in_place",
							 "Writes the number of a stream row at commit into the version the row was inserted as.",
							 "Off: every row is numbered by an ordinary update (a second version, an entry in every index), "
							 "as with wal_level logical.",
							 &stream_seq_in_place,
							 true,
							 PGC_SUSET, 0,
							 NULL, NULL, NULL);
	DefineCustomIntVariable("stream_seq.hold_after_numbering",
							"For tests: a committing transaction waits, once its rows have their numbers, for the shared advisory lock with this key.",
							"0 (the default) waits for nothing. It holds a transaction between numbering and commit, where a user deferred trigger no longer can.",
							&stream_seq_hold_after_numbering,
							0, 0, INT_MAX,
							PGC_SUSET, GUC_NO_SHOW_ALL | GUC_NOT_IN_SAMPLE,
							NULL, NULL, NULL);
	DefineCustomIntVariable("stream_seq.seal_grace",
							"How long after its upper bound has passed a partition of a stream partitioned by time may be sealed.",
							"A partition whose upper bound lies less than this before the current time still takes rows.",
							&stream_seq_seal_grace,
							3600, 0, INT_MAX,
							PGC_USERSET, GUC_UNIT_S,
							NULL, NULL, NULL);
	if (!process_shared_preload_libraries_in_progress)
		return;

	DefineCustomIntVariable("stream_seq.max_streams",
							"Maximum number of stream tables in use at once, across all databases.",
							NULL,
							&stream_seq_max_streams,
							64, 1, 65536,
							PGC_POSTMASTER, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("stream_seq.max_tracked_xacts",
							"Transactions tracked per stream table for computing horizons.",
							"At least one more than the maximum number of backends is always used. "
							"When full, the oldest committed one is folded into a conservative floor.",
							&stream_seq_max_tracked_xacts,
							1024, 16, 1048576,
							PGC_POSTMASTER, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("stream_seq.round_interval",
							"Time between listings of the transactions holding stream numbers, for standbys.",
							"A standby answers horizon() once it has replayed one whole listing. "
							"No listing is written while the server writes no other WAL.",
							&stream_seq_round_interval,
							5000, 100, 3600 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);
	DefineCustomIntVariable("stream_seq.retention_interval",
							"Time between runs of the retention policies of every database.",
							"0 or -1 disables the runs; stream_seq.apply_retention() still works.",
							&stream_seq_retention_interval,
							60, -1, INT_MAX / 1000,
							PGC_SIGHUP, GUC_UNIT_S,
							NULL, NULL, NULL);
	DefineCustomIntVariable("stream_seq.rmgr_id",
							"WAL resource manager id of stream_seq's records.",
							"The same on a primary and its standbys; change it only after a clean shutdown "
							"of every server that may replay WAL written with the old one.",
							&stream_seq_rmgr_id,
							RM_EXPERIMENTAL_ID, RM_MIN_CUSTOM_ID, RM_MAX_CUSTOM_ID,
							PGC_POSTMASTER, 0,
							NULL, NULL, NULL);
	stream_stats_define_setting();
	MarkGUCPrefixReserved("stream_seq");

}
