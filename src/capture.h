/*-------------------------------------------------------------------------
 *
 * capture.h
 *	  What capture.c offers to the files of its own layer and of the layers
 *	  above it (src/README.md).
 *
 * The rows a transaction inserts into stream tables, captured as they are
 * inserted (by the index access method stream_seq_capture) for the
 * commit-time write; the refusal of numbers written by hand.
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAM_SEQ_CAPTURE_H
#define STREAM_SEQ_CAPTURE_H

#include "storage/itemptr.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

#include "stream_seq.h"
#include "partition.h"

/* A table the transaction inserted stream rows into. */
typedef struct CapturedRel
{
	Oid			relid;
	StreamTarget *target;		/* partition.c's cache entry (never freed) */
	StreamStorage storage;		/* the storage the TIDs point into */
	bool		rewritten;		/* the storage changed between captures */
	int64		first_row;		/* its first live captured row, or -1 */
} CapturedRel;

/* A captured row: the table (index into the tables) and the TID. */
typedef struct CapturedRow
{
	uint32		rel;
	ItemPointerData tid;
} CapturedRow;

/* A replicated row whose time must be raised at commit (see capture.c). */
typedef struct CapturedTimeFix
{
	uint32		rel;
	ItemPointerData tid;
	TimestampTz at;
} CapturedTimeFix;

extern void stream_capture_row(Relation rel, ItemPointer tid);
extern int64 stream_captured_time_fixes(CapturedTimeFix **fixes);
extern int64 stream_captured(CapturedRow **rows);
extern int	stream_captured_rels(CapturedRel **rels);
extern bool stream_capture_has_rows_of(Oid stream);
extern bool stream_capture_has_rows_in(Oid relid);
extern void stream_capture_close(void);
extern bool stream_capture_closed(void);
extern void stream_capture_reset(void);
extern void stream_capture_subxact_start(void);
extern void stream_capture_subxact_end(bool committed);
extern StreamTarget *stream_capture_target(CapturedRel *crel);
extern bool stream_is_capture_index(Relation index);
extern StreamTarget *stream_capture_target_of(Relation rel);
extern void stream_capture_refuse_numbered(IndexInfo *capture_info);
extern bool stream_capture_refuses_numbered(IndexInfo *capture_info);
extern void stream_report_written_value(Relation rel, StreamTarget *target,
										AttrNumber attnum);
extern void stream_report_late_row(const char *relname);

#endif							/* STREAM_SEQ_CAPTURE_H */
