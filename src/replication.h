/*-------------------------------------------------------------------------
 *
 * replication.h
 *	  What replication.c offers to the files of its own layer and of the layers
 *	  above it (src/README.md).
 *
 * Stream tables written by logical replication.
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAM_SEQ_REPLICATION_H
#define STREAM_SEQ_REPLICATION_H

#include "utils/relcache.h"

#include "stream_seq.h"

extern void stream_check_pglogical(Relation rel, Oid stream);

#endif							/* STREAM_SEQ_REPLICATION_H */
