/*-------------------------------------------------------------------------
 *
 * lifecycle.h
 *	  What lifecycle.c offers to the files of its own layer and of the layers
 *	  above it (src/README.md).
 *
 * enable() and disable(), and the index that protects a stream's column.
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAM_SEQ_LIFECYCLE_H
#define STREAM_SEQ_LIFECYCLE_H

#include "access/attnum.h"
#include "utils/relcache.h"

#include "stream_seq.h"

extern Oid	stream_unique_index(Oid relid, AttrNumber attnum);
extern void stream_check_no_deferrable_index(Relation rel);
extern void stream_check_written_columns_free(Relation rel, AttrNumber attnum,
											  AttrNumber time_attnum);
extern void stream_create_capture_index(Oid relid, const char *column,
										const char *time_column);
extern Oid	stream_conflicting_placeholder_index(Oid relid, const char *column,
												 const char *time_column);
extern void stream_protect_index(Oid relid, AttrNumber attnum);
extern void stream_set_placeholder_defaults(Oid relid, AttrNumber attnum,
											const char *time_column);
extern void stream_retire(StreamRef *ref);

#endif							/* STREAM_SEQ_LIFECYCLE_H */
