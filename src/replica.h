/*-------------------------------------------------------------------------
 *
 * replica.h
 *	  What replica.c offers to the files of its own layer and of the layers
 *	  above it (src/README.md).
 *
 * The WAL resource manager and the listing worker of standbys.
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAM_SEQ_REPLICA_H
#define STREAM_SEQ_REPLICA_H

#include "fmgr.h"

#include "stream_seq.h"

extern void stream_replica_init(void);
extern PGDLLEXPORT void stream_seq_lister_main(Datum main_arg);

#endif							/* STREAM_SEQ_REPLICA_H */
