/*-------------------------------------------------------------------------
 *
 * startup.c
 *	  Module start-up of stream_seq: _PG_init defines the settings
 *	  (settings.c) and starts every module that needs it, and, when the
 *	  library is preloaded, hooks the set-up of shared memory (shmem.c).
 *	  The one file that calls into the modules at start; none calls it.
 *
 * Without shared_preload_libraries the library still loads (CREATE
 * EXTENSION works), but every function that needs the shared state raises
 * ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE naming the setting
 * (stream_check_preloaded).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "storage/ipc.h"

#include "stream_seq.h"
#include "stats.h"
#include "shmem.h"
#include "catalog.h"
#include "horizon.h"
#include "replica.h"
#include "partition.h"
#include "retention_policy.h"
#include "commit.h"
#include "planner.h"
#include "insertindexes.h"
#include "ddl.h"
#include "roles.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

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
 * _PG_init
 *		Define the settings; register the transaction callbacks, the
 *		relcache callbacks and the utility hooks of every case (commit.c,
 *		ddl.c; they do nothing until a stream is used, which needs the
 *		shared state, or is given a new index); when preloaded, also the WAL
 *		resource manager and the lister (replica.c), the retention
 *		launcher (retention_policy.c), the utility hook
 *		(roles.c), the cumulative statistics (stats.c), the hint of the
 *		missing schema privilege (catalog.c) and the set-up of shared
 *		memory.  The backend's stream
 *		cache is made on first use (catalog.c).
 */
void
_PG_init(void)
{
	stream_define_settings();
	stream_commit_init();
	stream_planner_init();
	stream_insertindexes_init();
	stream_ddl_init();
	stream_horizon_init();
	stream_partition_init();
	if (!process_shared_preload_libraries_in_progress)
		return;

	stream_replica_init();
	stream_retention_init();
	stream_roles_init();
	stream_stats_init();
	stream_catalog_init();

	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = request_shmem;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = startup_shmem;
}
