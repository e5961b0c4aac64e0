/*-------------------------------------------------------------------------
 *
 * xactstate.h
 *	  What xactstate.c offers to the files of its own layer and of the
 *	  layers above it (src/README.md).
 *
 * The current transaction's state on each stream: the numbers it holds,
 * its entries in the shared lists to finish at commit or abort, the
 * numbers last_numbers() reports, the streams it disabled or dropped.
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAM_SEQ_XACTSTATE_H
#define STREAM_SEQ_XACTSTATE_H

#include "utils/timestamp.h"

#include "stream_seq.h"
#include "shmem.h"

extern bool stream_xact_take_numbers(StreamRef *ref, int64 count, int64 *lo,
									 TimestampTz *numbered_at,
									 StreamReservationLogger logger,
									 void *logger_arg);
extern void stream_xact_numbered(StreamRef *ref, int64 first, int64 last,
								 int64 count);
extern void stream_xact_give_back(StreamRef *ref, int64 from, int64 to);
extern bool stream_xact_holds_numbers(void);
extern void stream_xact_pre_commit(void);
extern void stream_xact_check_prepare(void);
extern void stream_xact_finish(bool committed);
extern void stream_xact_mark_committing(void);
extern void stream_xact_has_entry(StreamRef *ref);
extern void stream_release_at_commit(Oid relid);

#endif							/* STREAM_SEQ_XACTSTATE_H */
