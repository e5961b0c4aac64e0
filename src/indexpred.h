/*-------------------------------------------------------------------------
 *
 * indexpred.h
 *	  What indexpred.c offers to the files of its own layer and of the
 *	  layers above it (src/README.md).
 *
 * The predicate of a stream table's partial indexes, prepared once per
 * session for the executor.
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAM_SEQ_INDEXPRED_H
#define STREAM_SEQ_INDEXPRED_H

extern void stream_indexpred_init(void);

#endif							/* STREAM_SEQ_INDEXPRED_H */
