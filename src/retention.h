/*-------------------------------------------------------------------------
 *
 * retention.h
 *	  What retention.c offers to the files of its own layer and of the layers
 *	  above it (src/README.md).
 *
 * trim() and the BEFORE TRUNCATE trigger: what the entry points of earlier
 * versions need.
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAM_SEQ_RETENTION_H
#define STREAM_SEQ_RETENTION_H

#include "stream_seq.h"

extern void stream_check_trim(StreamRef *ref, int64 before, bool force);

#endif							/* STREAM_SEQ_RETENTION_H */
