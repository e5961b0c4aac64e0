/*-------------------------------------------------------------------------
 *
 * insertindexes.h
 *	  What insertindexes.c offers to the files of its own layer and of the
 *	  layers above it (src/README.md).
 *
 * The indexes an INSERT into a stream table opens: not those its rows
 * cannot enter.
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAM_SEQ_INSERTINDEXES_H
#define STREAM_SEQ_INSERTINDEXES_H

extern void stream_insertindexes_init(void);

#endif							/* STREAM_SEQ_INSERTINDEXES_H */
