/*-------------------------------------------------------------------------
 *
 * inplace.h
 *	  What inplace.c offers to the files of its own layer and of the layers
 *	  above it (src/README.md).
 *
 * The in-place commit-time write: the room a row is inserted with, the
 * write of its number into that room, and the WAL record that replays it.
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAM_SEQ_INPLACE_H
#define STREAM_SEQ_INPLACE_H

#include "access/htup.h"
#include "access/xlogreader.h"
#include "lib/stringinfo.h"
#include "storage/itemptr.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

/* record type of the extension's resource manager (shmem.h has the others) */
#define XLOG_STREAM_INPLACE			0x40	/* a number written into a row */

/*
 * XLOG_STREAM_INPLACE, the data of block 0: the tuple at "offnum" gets the
 * null bitmap that follows (BITMAPLEN of its attributes), and its data,
 * from byte "start" on, is rewritten: first "moved" bytes are moved from
 * "start" to "start + nbytes", then the "nbytes" bytes that follow the
 * bitmap are written at "start".  The tuple's length does not change.
 */
typedef struct xl_stream_inplace
{
	OffsetNumber offnum;
	uint16		start;
	uint16		nbytes;
	uint16		moved;
} xl_stream_inplace;

#define SizeOfStreamInplace		(offsetof(xl_stream_inplace, moved) + sizeof(uint16))

extern void stream_inplace_wal_ready(void);
extern HeapTuple stream_inplace_room(Relation rel, HeapTuple tuple,
									 AttrNumber seq_attnum,
									 AttrNumber time_attnum);
extern bool stream_inplace_write(Relation rel, ItemPointer tid,
								 AttrNumber seq_attnum, int64 number,
								 AttrNumber time_attnum,
								 TimestampTz numbered_at);
extern void stream_inplace_redo(XLogReaderState *record);
extern void stream_inplace_desc(StringInfo buf, XLogReaderState *record);

#endif							/* STREAM_SEQ_INPLACE_H */
