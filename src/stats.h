/*-------------------------------------------------------------------------
 *
 * stats.h
 *	  What stats.c offers: how stream_seq shows in PostgreSQL's own
 *	  statistics views (pg_stat_statements, wait events, cumulative
 *	  statistics).
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAM_SEQ_STATS_H
#define STREAM_SEQ_STATS_H

typedef enum StreamWaitEvent
{
	STREAM_WAIT_ADVANCE,		/* a backend in wait() */
	STREAM_WAIT_LISTER,			/* the lister between rounds */
	STREAM_WAIT_RETENTION		/* the retention launcher between runs */
} StreamWaitEvent;

extern void stream_untracked_statements(bool session);
extern uint32 stream_wait_event(StreamWaitEvent event);
extern void stream_stats_define_setting(void);
extern void stream_stats_init(void);
extern void stream_stats_count_commit(int64 numbers);
extern void stream_stats_count_eviction(void);
extern void stream_stats_count_retention_run(bool failed, int64 removed_rows);

#endif							/* STREAM_SEQ_STATS_H */
