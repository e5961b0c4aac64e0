/*-------------------------------------------------------------------------
 *
 * group.h
 *	  What group.c offers to the files of its own layer and of the layers
 *	  above it (src/README.md).
 *
 * Consumer groups: what roles.c and ddl.c need of them.
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAM_SEQ_GROUP_H
#define STREAM_SEQ_GROUP_H

#include "fmgr.h"

#include "stream_seq.h"

extern Datum stream_seq_drop_consumer(PG_FUNCTION_ARGS);
extern void stream_group_refresh_slot_exprs(Oid relid);

#endif							/* STREAM_SEQ_GROUP_H */
