/*-------------------------------------------------------------------------
 *
 * pagewrite.c
 *	  The commit-time write of stream numbers into the rows of one heap
 *	  page: each row gets its number (and its time) in the version it was
 *	  inserted as, in the 8 bytes its placeholder took, all under one
 *	  exclusive lock of the page and with one WAL record of the extension's
 *	  resource manager.  No second row version is made: no update record,
 *	  no pruning, no dead tuple.  Also the replay of that record, and of
 *	  0.6.0's record of one row written in place.
 *
 * The room.  A stream row is inserted with placeholders in the stream
 * column (0) and the time column (-infinity): the columns' defaults, so
 * that COPY and multi-row INSERT store the row as they store any other,
 * in batches.  The number and the time take exactly the bytes of the
 * placeholders: the write changes no length, no null bitmap, no offset of
 * another attribute.
 *
 * Why writing over the inserted version is safe (the caller, commit.c,
 * checks each point for each row under the page's lock, and makes the
 * index entries):
 *	(a) the tuple was inserted by this transaction, which has not
 *		committed, and nothing updated, locked or deleted it (xmax
 *		invalid), and it was not inserted frozen unless its table's
 *		storage is new in this transaction (COPY FREEZE, which no other
 *		session can read before the commit): no MVCC snapshot of another
 *		transaction, standby or exported snapshot sees it before the
 *		commit record, and every one that sees it afterwards sees the
 *		number.  Other backends may read its bytes with only a pin (a
 *		dirty snapshot's check of a unique index or an exclusion
 *		constraint forms a conflicting row's key after finding it under
 *		the lock): they read the same layout before and after, and only
 *		an index that covers the stream or time column would use the 8
 *		bytes that change; every such index excludes the placeholder row
 *		(point (c)), so no such reader looks at this row through it.
 *	(b) this transaction's own snapshots: the write runs at pre-commit,
 *		after the deferred triggers and the portals, when no query of the
 *		transaction runs or will run; a holdable cursor was materialized
 *		before.
 *	(c) indexes: the key of every index that does not cover the stream
 *		or time column is the same before and after, and its entry, made at
 *		the INSERT, points at the same tuple; every index that covers them
 *		has a predicate that the placeholder row fails (so it had no entry
 *		for it) and gets its one entry afterwards, at the same TID.
 *	(d) crash and replay: the record carries the numbers (and the time)
 *		and where they go, with a full-page image when one is due, so
 *		recovery and standbys rebuild the page as written; a crash before
 *		the commit record leaves numbered tuples with an aborted xmin,
 *		dead to all (frozen ones in storage that the aborted transaction
 *		created, which nothing reads).
 *	(e) logical decoding does not decode the record: with wal_level
 *		logical the caller numbers rows by an update instead.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/xlog.h"
#include "access/xloginsert.h"
#include "access/xlogutils.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/bufpage.h"
#include "utils/datum.h"

#include "stream_seq.h"
#include "pagewrite.h"

/*
 * stream_tuple_value_offset
 *		Where, from the start of "tuple", the value of attribute "attnum"
 *		begins: 0 when it is null or missing.  The walk of
 *		heap_deform_tuple, without fetching anything.
 */
uint16
stream_tuple_value_offset(TupleDesc desc, HeapTupleHeader tuple,
						  AttrNumber attnum)
{
	bool		hasnulls = (tuple->t_infomask & HEAP_HASNULL) != 0;
	bits8	   *bp = tuple->t_bits;
	char	   *tp = (char *) tuple + tuple->t_hoff;
	uint32		off = 0;
	int			i;

	if (attnum > HeapTupleHeaderGetNatts(tuple) || attnum > desc->natts)
		return 0;
	for (i = 0; i < attnum; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		if (hasnulls && att_isnull(i, bp))
		{
			if (i == attnum - 1)
				return 0;
			continue;
		}
		if (att->attlen == -1)
			off = att_align_pointer(off, att->attalign, -1, tp + off);
		else
			off = att_align_nominal(off, att->attalign);
		if (i == attnum - 1)
			return (uint16) (tuple->t_hoff + off);
		off = att_addlength_pointer(off, att->attlen, tp + off);
	}
	return 0;
}

/*
 * row_fits
 *		Whether an 8-byte value at "off" lies inside the tuple at "lp", past
 *		its header: the check redo makes before it writes.
 */
static bool
row_fits(ItemId lp, uint16 off)
{
	if (!ItemIdIsNormal(lp) || off == 0)
		return false;
	return off >= SizeofHeapTupleHeader &&
		(Size) off + sizeof(int64) <= ItemIdGetLength(lp);
}

/*
 * put_values
 *		Write a row's number (and time) at their offsets.  Shared by the
 *		write and its replay, which must agree byte for byte.
 */
static void
put_values(Page page, OffsetNumber offnum, uint16 seq_off, uint16 time_off,
		   int64 number, TimestampTz at)
{
	char	   *tuple = (char *) PageGetItem(page, PageGetItemId(page, offnum));

	memcpy(tuple + seq_off, &number, sizeof(int64));
	if (time_off != 0)
		memcpy(tuple + time_off, &at, sizeof(TimestampTz));
}

/*
 * PageRecord
 *		An XLOG_STREAM_PAGE record, read (or about to be written).
 */
typedef struct PageRecord
{
	uint8		flags;
	StreamReservation res;		/* with STREAM_PAGE_RESERVE */
	int64		first;
	TimestampTz at;
	int			nrows;
	StreamPageRow rows[MaxHeapTuplesPerPage];	/* decoded */
} PageRecord;

/*
 * put, take
 *		Append a field to the record being built / read one (checking the
 *		length left).
 */
static char *
put(char *p, const void *field, Size len)
{
	memcpy(p, field, len);
	return p + len;
}

static bool
take(char **p, Size *left, void *field, Size len)
{
	if (*left < len)
		return false;
	memcpy(field, *p, len);
	*p += len;
	*left -= len;
	return true;
}

/*
 * put_uvar, take_uvar, put_svar, take_svar
 *		The record's integers, in as few bytes as their values need: seven
 *		bits a byte, the high bit set on every byte but the last (a
 *		relation's OID takes 3 bytes, a number below 2^20 3, an offset in
 *		a page 1 or 2).  Numbers are signed (zigzag: 0, -1, 1, -2 ...).
 *		What a 1-row transaction logs then fits a 56-byte record, with its
 *		header and block reference, where fixed widths took 64.
 */
static char *
put_uvar(char *p, uint64 v)
{
	while (v >= 0x80)
	{
		*p++ = (char) ((v & 0x7F) | 0x80);
		v >>= 7;
	}
	*p++ = (char) v;
	return p;
}

static bool
take_uvar(char **p, Size *left, uint64 *v)
{
	uint64		result = 0;
	int			shift;

	for (shift = 0; shift < 64; shift += 7)
	{
		uint8		b;

		if (*left < 1)
			return false;
		b = (uint8) **p;
		(*p)++;
		(*left)--;
		result |= ((uint64) (b & 0x7F)) << shift;
		if ((b & 0x80) == 0)
		{
			*v = result;
			return true;
		}
	}
	return false;
}

static char *
put_svar(char *p, int64 v)
{
	return put_uvar(p, ((uint64) v << 1) ^ (uint64) (v >> 63));
}

static bool
take_svar(char **p, Size *left, int64 *v)
{
	uint64		u;

	if (!take_uvar(p, left, &u))
		return false;
	*v = (int64) (u >> 1) ^ -(int64) (u & 1);
	return true;
}

/* an unsigned field no wider than "max" */
static bool
take_uvar_max(char **p, Size *left, uint64 max, uint64 *v)
{
	return take_uvar(p, left, v) && *v <= max;
}

/*
 * stream_page_write
 *		Write the numbers of "rows" (and "at" into their time column, where
 *		they have one) into the page of "buffer", which the caller has
 *		locked exclusively and checked row by row (see the top of the
 *		file), and log it.  With "res", the record also carries the
 *		reservation the numbers come from, for standbys (the caller runs
 *		under the stream's lock, see StreamReservationLogger), and says so
 *		in res->logged.  Nothing here can fail once the page changes.
 */
void
stream_page_write(Relation rel, Buffer buffer, StreamPageRow *rows, int nrows,
				  TimestampTz at, StreamReservation *res)
{
	Page		page = BufferGetPage(buffer);
	uint8		flags = 0;
	bool		same = true;
	bool		consecutive = true;
	bool		carry = res != NULL && XLogStandbyInfoActive() &&
		RelationNeedsWAL(rel);
	/* at most: flags, 5 + 4 * 10 bytes of reservation and first number, a
	 * time, the row count and offsets, and per row an offset, two and a
	 * number */
	char		data[1 + 45 + 8 + 3 + 6 + MaxHeapTuplesPerPage * (3 + 6 + 10)];
	char	   *p = data;
	int			i;

	Assert(nrows > 0 && nrows <= MaxHeapTuplesPerPage);
	for (i = 1; i < nrows; i++)
	{
		if (rows[i].seq_off != rows[0].seq_off ||
			rows[i].time_off != rows[0].time_off)
			same = false;
		if (rows[i].number != rows[0].number + i)
			consecutive = false;
	}

	/* the record's block data, made before the page changes */
	if (carry)
	{
		flags |= STREAM_PAGE_RESERVE;
		if (res->entry_lo == res->lo)
			flags |= STREAM_PAGE_ENTRY_IS_LO;
		if (consecutive && res->next == res->lo + nrows &&
			rows[0].number == res->lo)
			flags |= STREAM_PAGE_NEXT_AFTER_ROWS;
		if (rows[0].number == res->lo)
			flags |= STREAM_PAGE_FIRST_IS_LO;
	}
	if (rows[0].time_off != 0)
		flags |= STREAM_PAGE_HAS_TIME;
	if (nrows == 1)
		flags |= STREAM_PAGE_ONE_ROW;
	if (same)
		flags |= STREAM_PAGE_SAME_OFFSETS;
	if (!consecutive)
		flags |= STREAM_PAGE_NUMBERS_LISTED;
	p = put(p, &flags, 1);
	if (carry)
	{
		p = put_uvar(p, res->relid);
		p = put_svar(p, res->lo);
		if (!(flags & STREAM_PAGE_ENTRY_IS_LO))
			p = put_svar(p, res->entry_lo);
		if (!(flags & STREAM_PAGE_NEXT_AFTER_ROWS))
			p = put_svar(p, res->next);
	}
	if (!(flags & STREAM_PAGE_FIRST_IS_LO))
		p = put_svar(p, rows[0].number);
	if (flags & STREAM_PAGE_HAS_TIME)
		p = put(p, &at, sizeof(TimestampTz));
	if (!(flags & STREAM_PAGE_ONE_ROW))
		p = put_uvar(p, nrows);
	if (same)
	{
		p = put_uvar(p, rows[0].seq_off);
		if (flags & STREAM_PAGE_HAS_TIME)
			p = put_uvar(p, rows[0].time_off);
	}
	for (i = 0; i < nrows; i++)
	{
		p = put_uvar(p, rows[i].offnum);
		if (!same)
		{
			p = put_uvar(p, rows[i].seq_off);
			if (flags & STREAM_PAGE_HAS_TIME)
				p = put_uvar(p, rows[i].time_off);
		}
		if (!consecutive)
			p = put_svar(p, rows[i].number);
	}
	Assert(p - data <= sizeof(data));

	START_CRIT_SECTION();

	for (i = 0; i < nrows; i++)
		put_values(page, rows[i].offnum, rows[i].seq_off, rows[i].time_off,
				   rows[i].number, at);
	MarkBufferDirty(buffer);

	if (RelationNeedsWAL(rel))
	{
		XLogRecPtr	recptr;

		/*
		 * A record that carries the reservation keeps its data with a
		 * full-page image too: the standby replays the reservation from it
		 * whether or not the page needs the write.
		 */
		XLogBeginInsert();
		XLogRegisterBuffer(0, buffer,
						   REGBUF_STANDARD | (carry ? REGBUF_KEEP_DATA : 0));
		XLogRegisterBufData(0, data, p - data);
		recptr = XLogInsert(stream_seq_rmgr_id, XLOG_STREAM_PAGE);
		PageSetLSN(page, recptr);
	}

	END_CRIT_SECTION();
	if (res != NULL)
		res->logged = carry;
}

/*
 * read_page_record
 *		Parse the block data of an XLOG_STREAM_PAGE record; false when it
 *		is not what its flags say.
 */
static bool
read_page_record(char *data, Size len, PageRecord *rec)
{
	char	   *p = data;
	Size		left = len;
	uint64		u;
	uint16		seq_off = 0;
	uint16		time_off = 0;
	bool		has_time;
	int			i;

	if (data == NULL || !take(&p, &left, &rec->flags, 1))
		return false;
	has_time = (rec->flags & STREAM_PAGE_HAS_TIME) != 0;
	memset(&rec->res, 0, sizeof(StreamReservation));
	if (rec->flags & STREAM_PAGE_RESERVE)
	{
		if (!take_uvar_max(&p, &left, PG_UINT32_MAX, &u) ||
			!take_svar(&p, &left, &rec->res.lo))
			return false;
		rec->res.relid = (Oid) u;
		rec->res.entry_lo = rec->res.lo;
		if (!(rec->flags & STREAM_PAGE_ENTRY_IS_LO) &&
			!take_svar(&p, &left, &rec->res.entry_lo))
			return false;
		if (!(rec->flags & STREAM_PAGE_NEXT_AFTER_ROWS) &&
			!take_svar(&p, &left, &rec->res.next))
			return false;
	}
	else if (rec->flags & (STREAM_PAGE_FIRST_IS_LO | STREAM_PAGE_NEXT_AFTER_ROWS |
						   STREAM_PAGE_ENTRY_IS_LO))
		return false;
	rec->first = rec->res.lo;
	if (!(rec->flags & STREAM_PAGE_FIRST_IS_LO) &&
		!take_svar(&p, &left, &rec->first))
		return false;
	rec->at = 0;
	if (has_time && !take(&p, &left, &rec->at, sizeof(TimestampTz)))
		return false;
	rec->nrows = 1;
	if (!(rec->flags & STREAM_PAGE_ONE_ROW))
	{
		if (!take_uvar_max(&p, &left, MaxHeapTuplesPerPage, &u) || u < 1)
			return false;
		rec->nrows = (int) u;
	}
	if ((rec->flags & STREAM_PAGE_ONE_ROW) &&
		!(rec->flags & STREAM_PAGE_SAME_OFFSETS))
		return false;
	if (rec->flags & STREAM_PAGE_SAME_OFFSETS)
	{
		if (!take_uvar_max(&p, &left, PG_UINT16_MAX, &u))
			return false;
		seq_off = (uint16) u;
		if (has_time)
		{
			if (!take_uvar_max(&p, &left, PG_UINT16_MAX, &u))
				return false;
			time_off = (uint16) u;
		}
	}
	if (rec->flags & STREAM_PAGE_NEXT_AFTER_ROWS)
		rec->res.next = rec->res.lo + rec->nrows;
	for (i = 0; i < rec->nrows; i++)
	{
		StreamPageRow *row = &rec->rows[i];

		if (!take_uvar_max(&p, &left, PG_UINT16_MAX, &u))
			return false;
		row->offnum = (OffsetNumber) u;
		row->seq_off = seq_off;
		row->time_off = time_off;
		if (!(rec->flags & STREAM_PAGE_SAME_OFFSETS))
		{
			if (!take_uvar_max(&p, &left, PG_UINT16_MAX, &u))
				return false;
			row->seq_off = (uint16) u;
			if (has_time)
			{
				if (!take_uvar_max(&p, &left, PG_UINT16_MAX, &u))
					return false;
				row->time_off = (uint16) u;
			}
		}
		row->number = rec->first + i;
		if ((rec->flags & STREAM_PAGE_NUMBERS_LISTED) &&
			!take_svar(&p, &left, &row->number))
			return false;
	}
	return left == 0;
}

/*
 * stream_page_redo
 *		Replay XLOG_STREAM_PAGE: the reservation it carries, into the
 *		standby's state of the stream (whether or not the page needs the
 *		write); then the page, which is as the write found it unless a
 *		full-page image restored it, so the same values go to the same
 *		places.
 */
void
stream_page_redo(XLogReaderState *record)
{
	XLogRecPtr	lsn = record->EndRecPtr;
	Buffer		buffer;
	Size		len;
	char	   *data = XLogRecGetBlockData(record, 0, &len);
	PageRecord	rec;
	bool		parsed = read_page_record(data, len, &rec);

	if (parsed && (rec.flags & STREAM_PAGE_RESERVE))
	{
		StreamStorage rnode;
		ForkNumber	forknum;
		BlockNumber blkno;

		XLogRecGetBlockTag(record, 0, &rnode, &forknum, &blkno);
		rec.res.dboid = stream_storage_db(rnode);
		stream_replay_reservation(&rec.res, XLogRecGetXid(record));
	}
	if (XLogReadBufferForRedo(record, 0, &buffer) == BLK_NEEDS_REDO)
	{
		Page		page = BufferGetPage(buffer);
		int			i;

		if (!parsed)
			elog(PANIC, "stream_seq redo: malformed page record");
		for (i = 0; i < rec.nrows; i++)
		{
			StreamPageRow row = rec.rows[i];

			if (row.offnum < FirstOffsetNumber ||
				row.offnum > PageGetMaxOffsetNumber(page) ||
				!row_fits(PageGetItemId(page, row.offnum), row.seq_off) ||
				(row.time_off != 0 &&
				 !row_fits(PageGetItemId(page, row.offnum), row.time_off)))
				elog(PANIC, "stream_seq redo: page record does not match the tuple at offset %u",
					 row.offnum);
			put_values(page, row.offnum, row.seq_off, row.time_off,
					   row.number, rec.at);
		}
		PageSetLSN(page, lsn);
		MarkBufferDirty(buffer);
	}
	if (BufferIsValid(buffer))
		UnlockReleaseBuffer(buffer);
}

/*
 * stream_page_desc
 *		Describe XLOG_STREAM_PAGE for the server's WAL debugging output.
 */
void
stream_page_desc(StringInfo buf, XLogReaderState *record)
{
	Size		len;
	char	   *data = XLogRecGetBlockData(record, 0, &len);
	PageRecord	rec;

	if (data == NULL)
	{
		/* the image alone: no reservation rode on it */
		appendStringInfoString(buf, "full-page image");
		return;
	}
	if (!read_page_record(data, len, &rec))
	{
		appendStringInfoString(buf, "malformed");
		return;
	}
	appendStringInfo(buf, "rows %d first " INT64_FORMAT "%s%s%s",
					 rec.nrows, rec.first,
					 (rec.flags & STREAM_PAGE_HAS_TIME) ? " time" : "",
					 (rec.flags & STREAM_PAGE_SAME_OFFSETS) ? "" : " offsets",
					 (rec.flags & STREAM_PAGE_NUMBERS_LISTED) ? " numbers" : "");
	if (rec.flags & STREAM_PAGE_RESERVE)
		appendStringInfo(buf, "; rel %u holds " INT64_FORMAT " next " INT64_FORMAT,
						 rec.res.relid, rec.res.entry_lo, rec.res.next);
}

/*
 * XLOG_STREAM_INPLACE (0.6.0's in-place write, one row a record), for
 * replaying WAL that a 0.6.0 server wrote: the data of block 0.  The
 * tuple at "offnum" gets the null bitmap that follows (BITMAPLEN of its
 * attributes), and its data, from byte "start" on, is rewritten: first
 * "moved" bytes are moved from "start" to "start + nbytes", then the
 * "nbytes" bytes that follow the bitmap are written at "start".  The
 * tuple's length does not change.
 */
typedef struct xl_stream_inplace
{
	OffsetNumber offnum;
	uint16		start;
	uint16		nbytes;
	uint16		moved;
} xl_stream_inplace;

#define SizeOfStreamInplace		(offsetof(xl_stream_inplace, moved) + sizeof(uint16))

/*
 * apply_inplace
 *		Rewrite the data of the tuple "htup" (of "len" bytes) as "rec" says,
 *		with "bits" as its null bitmap and "bytes" as the bytes written.
 *		Shared by the write and its replay, which must agree byte for byte.
 */
static void
apply_inplace(HeapTupleHeader htup, Size len, const xl_stream_inplace *rec,
			  const char *bits, const char *bytes)
{
	char	   *data = (char *) htup + htup->t_hoff;

	if (htup->t_hoff + (Size) rec->start + rec->nbytes + rec->moved > len)
		elog(PANIC, "stream_seq: in-place write past the end of tuple at offset %u",
			 rec->offnum);
	memcpy(htup->t_bits, bits, BITMAPLEN(HeapTupleHeaderGetNatts(htup)));
	if (rec->moved > 0)
		memmove(data + rec->start + rec->nbytes, data + rec->start, rec->moved);
	memcpy(data + rec->start, bytes, rec->nbytes);
}

/*
 * stream_inplace_redo
 *		Replay XLOG_STREAM_INPLACE.  The page is as the write found it
 *		unless a full-page image restored it, so the same rewrite applies.
 */
void
stream_inplace_redo(XLogReaderState *record)
{
	XLogRecPtr	lsn = record->EndRecPtr;
	Buffer		buffer;

	if (XLogReadBufferForRedo(record, 0, &buffer) == BLK_NEEDS_REDO)
	{
		Size		datalen;
		char	   *data = XLogRecGetBlockData(record, 0, &datalen);
		Page		page = BufferGetPage(buffer);
		xl_stream_inplace rec;
		ItemId		lp;
		HeapTupleHeader htup;
		Size		bitmaplen;

		memcpy(&rec, data, SizeOfStreamInplace);
		if (rec.offnum < FirstOffsetNumber ||
			rec.offnum > PageGetMaxOffsetNumber(page))
			elog(PANIC, "stream_seq redo: invalid offset %u", rec.offnum);
		lp = PageGetItemId(page, rec.offnum);
		if (!ItemIdIsNormal(lp))
			elog(PANIC, "stream_seq redo: no tuple at offset %u", rec.offnum);
		htup = (HeapTupleHeader) PageGetItem(page, lp);
		bitmaplen = BITMAPLEN(HeapTupleHeaderGetNatts(htup));
		if (!(htup->t_infomask & HEAP_HASNULL) ||
			datalen != SizeOfStreamInplace + bitmaplen + rec.nbytes)
			elog(PANIC, "stream_seq redo: record does not match tuple at offset %u",
				 rec.offnum);
		apply_inplace(htup, ItemIdGetLength(lp), &rec,
					  data + SizeOfStreamInplace,
					  data + SizeOfStreamInplace + bitmaplen);
		PageSetLSN(page, lsn);
		MarkBufferDirty(buffer);
	}
	if (BufferIsValid(buffer))
		UnlockReleaseBuffer(buffer);
}

/*
 * stream_inplace_desc
 *		Describe XLOG_STREAM_INPLACE for the server's WAL debugging output.
 */
void
stream_inplace_desc(StringInfo buf, XLogReaderState *record)
{
	Size		datalen;
	char	   *data = XLogRecGetBlockData(record, 0, &datalen);
	xl_stream_inplace rec;

	if (data == NULL || datalen < SizeOfStreamInplace)
	{
		appendStringInfoString(buf, "full-page image");
		return;
	}
	memcpy(&rec, data, SizeOfStreamInplace);
	appendStringInfo(buf, "off %u start %u bytes %u moved %u",
					 rec.offnum, rec.start, rec.nbytes, rec.moved);
}
