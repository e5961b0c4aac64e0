/*-------------------------------------------------------------------------
 *
 * ddl.h
 *	  What ddl.c offers to the files of its own layer and of the layers
 *	  above it (src/README.md).
 *
 * The event triggers and the utility hook.
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAM_SEQ_DDL_H
#define STREAM_SEQ_DDL_H

#include "stream_seq.h"

extern void stream_ddl_init(void);

#endif							/* STREAM_SEQ_DDL_H */
