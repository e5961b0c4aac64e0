/*-------------------------------------------------------------------------
 *
 * pagewrite.h
 *	  What pagewrite.c offers to the files of its own layer and of the
 *	  layers above it (src/README.md).
 *
 * The commit-time write of numbers into the rows of one heap page, in the
 * versions the rows were inserted as, with one WAL record of the
 * extension's resource manager; its replay.
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAM_SEQ_PAGEWRITE_H
#define STREAM_SEQ_PAGEWRITE_H

#include "access/htup_details.h"
#include "access/xlogreader.h"
#include "lib/stringinfo.h"
#include "storage/buf.h"
#include "storage/off.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

#include "shmem.h"

/* record types of the extension's resource manager (shmem.h has the others) */
#define XLOG_STREAM_INPLACE			0x40	/* 0.6.0: one row's number */
#define XLOG_STREAM_PAGE			0x50	/* the numbers of rows of a page */

/*
 * The placeholders a stream row is inserted with (the columns' defaults):
 * 8 bytes each in the inserted version, where the commit-time write puts
 * the number and the time.  No number is 0 (numbers start at 1), and no
 * index on the stream column takes a row that has 0 (their predicates
 * say "seq > 0").
 */
#define STREAM_SEQ_PLACEHOLDER		((int64) 0)
#define STREAM_TIME_PLACEHOLDER		DT_NOBEGIN

/* One row to number: where its values go, and its number. */
typedef struct StreamPageRow
{
	OffsetNumber offnum;
	uint16		seq_off;		/* offset of the number in the tuple */
	uint16		time_off;		/* of the time, or 0 without a time column */
	int64		number;
} StreamPageRow;

/*
 * XLOG_STREAM_PAGE, the data of block 0 (the heap page), nothing aligned,
 * in this order; "u" is an unsigned integer and "s" a signed one (zigzag)
 * in as many bytes as its value needs, seven bits a byte (pagewrite.c,
 * put_uvar):
 *	- flags (1 byte);
 *	- with STREAM_PAGE_RESERVE, the reservation the transaction made for
 *	  these rows (what XLOG_STREAM_NUMBERS would tell, see shmem.h): the
 *	  stream's OID (u; the database is the block's), the first number
 *	  reserved (s), the first number the transaction holds unless
 *	  STREAM_PAGE_ENTRY_IS_LO (s), the counter after it unless
 *	  STREAM_PAGE_NEXT_AFTER_ROWS (s: else the first reserved plus the
 *	  rows here);
 *	- the number of the first row (s), unless STREAM_PAGE_FIRST_IS_LO;
 *	- with STREAM_PAGE_HAS_TIME the time (8 bytes);
 *	- unless STREAM_PAGE_ONE_ROW the number of rows (u);
 *	- with STREAM_PAGE_SAME_OFFSETS (always for one row) the offset of
 *	  the number in every tuple (u) and, with a time, of the time (u);
 *	- for each row: its line pointer (u); without STREAM_PAGE_SAME_OFFSETS
 *	  its offsets (u, or u u with a time); with STREAM_PAGE_NUMBERS_LISTED
 *	  its number (s), else row i gets the first number plus i.
 * A transaction of one row on a stream without a time column writes about
 * 10 bytes of data: the record takes 56 bytes of WAL, the least a record
 * with a block reference takes (24 of header, 20 of block header) once
 * aligned.
 */
#define STREAM_PAGE_RESERVE			0x01
#define STREAM_PAGE_ENTRY_IS_LO		0x02
#define STREAM_PAGE_NEXT_AFTER_ROWS	0x04
#define STREAM_PAGE_FIRST_IS_LO		0x08
#define STREAM_PAGE_HAS_TIME		0x10
#define STREAM_PAGE_ONE_ROW			0x20
#define STREAM_PAGE_SAME_OFFSETS	0x40
#define STREAM_PAGE_NUMBERS_LISTED	0x80

extern uint16 stream_tuple_value_offset(TupleDesc desc, HeapTupleHeader tuple,
										AttrNumber attnum);
extern void stream_page_write(Relation rel, Buffer buffer,
							  StreamPageRow *rows, int nrows,
							  TimestampTz at, StreamReservation *res);
extern void stream_page_redo(XLogReaderState *record);
extern void stream_page_desc(StringInfo buf, XLogReaderState *record);
extern void stream_inplace_redo(XLogReaderState *record);
extern void stream_inplace_desc(StringInfo buf, XLogReaderState *record);

#endif							/* STREAM_SEQ_PAGEWRITE_H */
