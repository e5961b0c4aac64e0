/*-------------------------------------------------------------------------
 *
 * stream_seq.c
 *	  Module entry point of stream_seq: settings, and the hooks that set up
 *	  shared memory when the library is preloaded.
 *
 * Without shared_preload_libraries the library still loads (CREATE
 * EXTENSION works), but every function that needs the shared state raises
 * ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE naming the setting.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>

#include "access/rmgr.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "utils/guc.h"

#include "stream_seq.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

int			stream_seq_max_streams = 64;
int			stream_seq_max_tracked_xacts = 1024;
int			stream_seq_head_interval = 1000;
int			stream_seq_seal_grace = 3600;
bool		stream_seq_notify = false;
int			stream_seq_round_interval = 5000;
int			stream_seq_rmgr_id = RM_EXPERIMENTAL_ID;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/*
 * request_shmem
 *		shmem_request_hook: reserve the extension's shared memory.
 */
static void
request_shmem(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	stream_shmem_request();
}

/*
 * startup_shmem
 *		shmem_startup_hook: create or attach the shared state.
 */
static void
startup_shmem(void)
{
	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	stream_shmem_startup();
}

/*
 * stream_check_preloaded
 *		Raise the documented error when the library is not preloaded; every
 *		entry point that needs shared memory calls this first.
 */
void
stream_check_preloaded(void)
{
	if (!stream_shmem_ready())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("stream_seq must be loaded via \"shared_preload_libraries\""),
				 errhint("Add stream_seq to the \"shared_preload_libraries\" setting and restart the server.")));
}

/*
 * _PG_init
 *		Define the settings; when preloaded, also those that size shared
 *		memory, and hook its set-up.  The transaction callbacks are
 *		registered in every case: they do nothing until a stream is used,
 *		which needs the shared state.  The backend's stream cache is made
 *		on first use (catalog.c).
 */
void
_PG_init(void)
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
	DefineCustomIntVariable("stream_seq.seal_grace",
							"How long after its upper bound has passed a partition of a stream partitioned by time may be sealed.",
							"A partition whose upper bound lies less than this before the current time still takes rows.",
							&stream_seq_seal_grace,
							3600, 0, INT_MAX,
							PGC_USERSET, GUC_UNIT_S,
							NULL, NULL, NULL);
	stream_assign_init();
	stream_horizon_init();
	stream_partition_init();

	/*
	 * Settings that size shared memory exist only when preloaded: a
	 * PGC_POSTMASTER setting cannot be defined after startup.  The prefix
	 * is reserved after the last definition, as reserving it drops any
	 * stream_seq.* placeholder not yet defined.
	 */
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
	DefineCustomIntVariable("stream_seq.rmgr_id",
							"WAL resource manager id of stream_seq's records.",
							"The same on a primary and its standbys; change it only after a clean shutdown "
							"of every server that may replay WAL written with the old one.",
							&stream_seq_rmgr_id,
							RM_EXPERIMENTAL_ID, RM_MIN_CUSTOM_ID, RM_MAX_CUSTOM_ID,
							PGC_POSTMASTER, 0,
							NULL, NULL, NULL);
	MarkGUCPrefixReserved("stream_seq");

	stream_replica_init();
	stream_roles_init();

	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = request_shmem;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = startup_shmem;
}
