/*-------------------------------------------------------------------------
 *
 * horizon.h
 *	  What horizon.c offers to the files of its own layer and of the layers
 *	  above it (src/README.md).
 *
 * The horizon of a snapshot, on a primary and on a standby.
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAM_SEQ_HORIZON_H
#define STREAM_SEQ_HORIZON_H

#include "utils/snapshot.h"

#include "stream_seq.h"
#include "shmem.h"

extern int64 stream_compute_horizon(StreamRef *ref, Snapshot snapshot,
									int64 *visible_horizon);
extern int64 stream_statement_horizon(StreamRef *ref);
extern Snapshot stream_statement_snapshot(void);
extern void stream_horizon_init(void);
extern bool stream_xact_computed_horizon(void);
extern StandbyHorizonResult stream_standby_horizon(StreamRef *ref,
												   Snapshot snapshot,
												   int64 *horizon);

#endif							/* STREAM_SEQ_HORIZON_H */
