/*-------------------------------------------------------------------------
 *
 * assign.h
 *	  What assign.c offers to the files of its own layer and of the layers
 *	  above it (src/README.md).
 *
 * The commit-time write: the transaction's state on each stream.
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAM_SEQ_ASSIGN_H
#define STREAM_SEQ_ASSIGN_H

#include "stream_seq.h"

extern void stream_assign_init(void);
extern void stream_release_at_commit(Oid relid);
extern void stream_xact_has_entry(StreamRef *ref);

#endif							/* STREAM_SEQ_ASSIGN_H */
