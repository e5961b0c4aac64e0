/*-------------------------------------------------------------------------
 *
 * counter.h
 *	  What counter.c offers to the files of its own layer and of the layers
 *	  above it (src/README.md).
 *
 * The durable head of a stream: its counter after a start, blocks of
 * numbers recorded in its head sequence, the time floor.
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAM_SEQ_COUNTER_H
#define STREAM_SEQ_COUNTER_H

#include "utils/snapshot.h"
#include "utils/timestamp.h"

#include "stream_seq.h"
#include "shmem.h"

extern void stream_counter_raise(StreamRef *ref, int64 number);
extern int64 stream_start_counter(StreamRef *ref);
extern TimestampTz stream_table_newest_time(StreamRef *ref, Snapshot snapshot);
extern void stream_raise_time_floor(StreamRef *ref);
extern bool stream_try_take_numbers(StreamRef *ref, int64 count,
									bool have_entry, int64 *lo,
									TimestampTz *numbered_at,
									StreamReservationLogger logger,
									void *logger_arg);
extern void stream_prepare_numbers(StreamRef *ref, int64 count);
extern void stream_take_numbers(StreamRef *ref, int64 count, bool have_entry,
								int64 *lo, TimestampTz *numbered_at);
extern int64 stream_recorded_end(Oid head_seq, int64 interval);
extern int64 stream_table_max(StreamRef *ref, Snapshot snapshot);
extern Oid	stream_create_head_sequence(Oid relid, const char *column,
										int64 start, int64 interval);

#endif							/* STREAM_SEQ_COUNTER_H */
