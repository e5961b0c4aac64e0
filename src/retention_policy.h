/*-------------------------------------------------------------------------
 *
 * retention_policy.h
 *	  What retention_policy.c offers to the files of its own layer and of the layers
 *	  above it (src/README.md).
 *
 * Retention policies and the workers that apply them.
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAM_SEQ_RETENTION_POLICY_H
#define STREAM_SEQ_RETENTION_POLICY_H

#include "fmgr.h"

#include "stream_seq.h"

extern void stream_retention_init(void);
extern PGDLLEXPORT void stream_seq_retention_launcher_main(Datum main_arg);
extern PGDLLEXPORT void stream_seq_retention_worker_main(Datum main_arg);

#endif							/* STREAM_SEQ_RETENTION_POLICY_H */
