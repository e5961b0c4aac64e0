/*-------------------------------------------------------------------------
 *
 * stats.c
 *	  How stream_seq shows in PostgreSQL's own statistics views.
 *
 * pg_stat_statements: the statements stream_seq runs through SPI on its
 * own (catalog reads and writes as the catalog's owner, the retention
 * workers' queries, the commit-time numbering's lookups) are the
 * extension's, not the user's workload.  pg_stat_statements decides what
 * is top level by its own count of nested executors and utility
 * statements, which misses them when they run outside any statement of
 * the user: at COMMIT (the deferred triggers fire after the COMMIT
 * statement has ended), in a background worker (nothing encloses its
 * SPI), and, on 15, inside a CALL or DO when pg_stat_statements.track_utility
 * is off.  So while such a statement runs, pg_stat_statements.track is
 * set to "none" (at the caller's GUC nesting level, undone with it), and
 * the retention workers set it for their whole life.  Their cost stays in
 * the calling statement's figures.  Nothing is set when pg_stat_statements
 * is not loaded: the setting is then at most a placeholder from the
 * configuration file, which is left alone.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/guc.h"

#include "stream_seq.h"

#define PGSS_TRACK_SETTING "pg_stat_statements.track"

/*
 * pgss_loaded
 *		Whether pg_stat_statements defined its tracking setting in this
 *		process.  It can only be loaded through shared_preload_libraries,
 *		so the answer is kept once known.
 */
static bool
pgss_loaded(void)
{
	static int	loaded = -1;

	if (loaded < 0)
	{
		/* a placeholder (from the configuration file) is not the module's */
		loaded = GetConfigOption(PGSS_TRACK_SETTING, true, false) != NULL &&
			(GetConfigOptionFlags(PGSS_TRACK_SETTING, true) &
			 GUC_CUSTOM_PLACEHOLDER) == 0;
	}
	return loaded > 0;
}

/*
 * stream_untracked_statements
 *		Keep pg_stat_statements from tracking the statements that follow:
 *		with "session", for the rest of the process (a background worker's
 *		own statements); otherwise until the caller's GUC nesting level
 *		(NewGUCNestLevel) is closed with AtEOXact_GUC.
 */
void
stream_untracked_statements(bool session)
{
	if (!pgss_loaded())
		return;
	if (session)
		SetConfigOption(PGSS_TRACK_SETTING, "none", PGC_SUSET, PGC_S_OVERRIDE);
	else
		(void) set_config_option(PGSS_TRACK_SETTING, "none",
								 PGC_SUSET, PGC_S_SESSION,
								 GUC_ACTION_SAVE, true, 0, false);
}
