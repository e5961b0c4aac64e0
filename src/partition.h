/*-------------------------------------------------------------------------
 *
 * partition.h
 *	  What partition.c offers to the files of its own layer and of the layers
 *	  above it (src/README.md).
 *
 * Partitioned streams: which stream a partition's rows belong to, the
 * checks of DDL on partitions, and dropping old partitions.
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAM_SEQ_PARTITION_H
#define STREAM_SEQ_PARTITION_H

#include "utils/relcache.h"
#include "utils/timestamp.h"

#include "stream_seq.h"

/*
 * The table a stream trigger fired on: the stream table itself, or a
 * partition of a partitioned stream (partition.c).  Cached per backend.
 */
typedef struct StreamTarget
{
	Oid			relid;			/* hash key */
	bool		valid;
	Oid			stream;			/* the stream table its rows belong to */
	AttrNumber	seq_attnum;		/* the stream column, in this table */
	AttrNumber	time_attnum;	/* the time column, or InvalidAttrNumber */
	bool		sealed;			/* a sealed partition: takes no rows */
	bool		detaching;		/* being detached concurrently: neither */
	bool		pglogical;		/* pglogical installed: look at its sets */
} StreamTarget;

/* What stream_drop_old_partitions may drop, and what it did. */
typedef struct DropLimits
{
	bool		force;			/* pass consumers */
	bool		keep_tables;	/* detach only */
	int32		retain;			/* keep this many of the sealed ones */
	int64		before;			/* only numbers below this */
	bool		use_time;		/* only partitions ending by "time" */
	TimestampTz time;
	char	   *held_by;		/* out: the consumer that stopped it */
	int64		held_at;		/* out: its position */
	int64		dropped_upto;	/* out: highest number dropped, 0 if none */
} DropLimits;

extern int	stream_drop_old_partitions(StreamRef *ref, DropLimits *limits);
extern bool stream_partitioned_by_time(Oid relid);
extern StreamTarget *stream_lookup_target(Relation rel);
extern void stream_check_partitions_supported(void);
extern Oid	stream_root_of(Oid relid);
extern void stream_partition_detached(Oid stream, Oid relid);
extern void stream_partition_detached_end(Oid stream, Oid relid);
extern void stream_check_attached(Oid stream, Oid relid);
extern void stream_check_partition(Oid stream, Oid relid, bool add_trigger);
extern void stream_add_truncate_trigger(Oid relid);
extern void stream_partition_truncated(Oid stream, Oid relid);
extern void stream_partition_dropped(Oid relid);
extern void stream_partition_xact_end(void);
extern void stream_partition_init(void);
extern void stream_partition_detaching(Oid stream, Oid relid);

#endif							/* STREAM_SEQ_PARTITION_H */
