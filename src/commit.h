/*-------------------------------------------------------------------------
 *
 * commit.h
 *	  What commit.c offers to the files of its own layer and of the layers
 *	  above it (src/README.md).
 *
 * The commit-time write and the transaction callbacks that drive it.
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAM_SEQ_COMMIT_H
#define STREAM_SEQ_COMMIT_H

#include "utils/relcache.h"

extern bool stream_index_admits_placeholder(Relation index, AttrNumber seq,
											AttrNumber at);
extern void stream_commit_init(void);

#endif							/* STREAM_SEQ_COMMIT_H */
