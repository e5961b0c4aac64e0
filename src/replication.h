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
#include "utils/timestamp.h"

#include "stream_seq.h"
#include "partition.h"

extern bool stream_in_replication_worker(void);
extern void stream_replica_number(StreamTarget *target, int64 number);
extern bool stream_replica_time(StreamTarget *target, bool isnull,
								TimestampTz value, TimestampTz *at);
extern void stream_report_replica_unnumbered(StreamTarget *target);
extern void stream_check_pglogical(Relation rel, Oid stream);

#endif							/* STREAM_SEQ_REPLICATION_H */
