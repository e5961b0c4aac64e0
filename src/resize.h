/*-------------------------------------------------------------------------
 *
 * resize.h
 *	  What resize.c offers to the files of its own layer and of the layers
 *	  above it (src/README.md).
 *
 * Resizing a consumer group: what group.c and disable() need.
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAM_SEQ_RESIZE_H
#define STREAM_SEQ_RESIZE_H

#include "stream_seq.h"

extern bool stream_resize_try_switch(Oid relid, const char *consumer);
extern int64 stream_resize_fence(Oid relid, const char *consumer);
extern bool stream_resize_removed_slot(Oid relid, const char *consumer,
									   int slot);
extern void stream_resize_drop_indexes(Oid relid, const char *consumer);

#endif							/* STREAM_SEQ_RESIZE_H */
