/*-------------------------------------------------------------------------
 *
 * inplace.c
 *	  The in-place commit-time write (stream_seq.in_place): a stream row is
 *	  inserted with room for its number, and at commit the number is
 *	  written into that room, in the version the row was inserted as,
 *	  under a cleanup lock on its buffer and with a WAL record of the
 *	  extension's resource manager.  No second row version is made: no
 *	  update record, no pruning, no dead tuple.
 *
 * The room.  A null column takes no bytes in a heap tuple, so the guard
 * trigger (BEFORE INSERT) gives the row, whose stream column (and time
 * column) is null, as many zero bytes after its last attribute as the
 * numbered row will need: the tuple then has exactly the length it will
 * have numbered, with the same header and null bitmap.  PostgreSQL reads
 * a tuple's attributes up to their count and ignores bytes after them,
 * and the executor stores a tuple a BEFORE trigger returns as it is
 * (copied whole).  What forms the tuple again before it reaches the page
 * (TOAST, a stored generated column, a later BEFORE trigger that returns
 * a tuple of its own) drops the room; the write then finds no room and
 * the heap-only write or the ordinary update numbers the row.
 *
 * Why writing over the inserted version is safe; each point is checked
 * under the buffer's cleanup lock at the write (stream_inplace_write):
 *	(a) the tuple was inserted by this transaction, which has not
 *		committed, and nothing updated, locked or deleted it (xmax
 *		invalid), and it was not inserted frozen: no MVCC snapshot of
 *		another transaction, standby or exported snapshot sees it before
 *		the commit record, and every one that sees it afterwards sees the
 *		number.  Other backends may still read its data: a dirty snapshot
 *		sees an uncommitted tuple (an exclusion constraint's or ON
 *		CONFLICT's check of another inserter forms the index key of this
 *		row and compares it), and having found it with the buffer locked,
 *		reads it with only a pin.  The write moves the tuple's bytes and
 *		changes its null bitmap, which such a reader would see half done;
 *		so, as PostgreSQL requires for moving tuple data (pruning), it is
 *		made only under a cleanup lock: exclusive, and no other pin on the
 *		buffer.  A backend that pins the page afterwards must lock it to
 *		find the tuple, and finds it written.  When another pin is held,
 *		the write is not made and the heap-only write or the ordinary
 *		update numbers the row (they add a version and change only the
 *		old one's header, as any update does).  A standby replays the
 *		record under an exclusive lock: none of its readers sees the
 *		tuple before the commit record, which comes after.
 *	(b) of this transaction's own snapshots, none that saw the row
 *		without its number is used afterwards: the write is made only
 *		where the heap-only write may be (assign.c, may_be_heap_only:
 *		in the commit's deferred-trigger loop, no query running or
 *		suspended, no SET CONSTRAINTS at any depth).  A snapshot that
 *		sees the row at all sees it with its number from then on, and
 *		its command id need not move: there is no new version.
 *	(c) indexes: the key of every index that does not cover the stream
 *		column is the same before and after, and its entry, made at the
 *		INSERT, points at the same tuple; every index that covers it had
 *		no entry for the row (its predicate excluded the null, checked as
 *		for the heap-only write) and gets exactly one afterwards, at the
 *		same TID (assign.c).
 *	(d) crash and replay: the record carries the bytes written (an
 *		unchanged prefix and a shifted tail are described, not copied),
 *		with a full-page image when one is due, so recovery and standbys
 *		rebuild the page as written; a crash before the commit record
 *		leaves the row with its number but an aborted xmin, dead to all.
 *	(e) logical decoding does not decode the record: with wal_level
 *		logical the row is given no room, so its number reaches decoding
 *		as an update, as before.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "access/xloginsert.h"
#include "access/xlogutils.h"
#include "catalog/pg_am.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/bufpage.h"

#include "stream_seq.h"
#include "inplace.h"

/* Whether the resource manager that replays the record is registered. */
static bool inplace_wal_ready = false;

/*
 * stream_inplace_wal_ready
 *		Called once the extension's resource manager is registered (when
 *		preloaded): without it the record could not be replayed, and no
 *		row is given room.
 */
void
stream_inplace_wal_ready(void)
{
	inplace_wal_ready = true;
}

/*
 * inplace_possible
 *		Whether rows of "rel" may be numbered in place now: the setting is
 *		on, the record can be replayed, logical decoding cannot run (it does
 *		not decode the record), and the table is a plain heap table.
 */
static bool
inplace_possible(Relation rel)
{
	return stream_seq_in_place && inplace_wal_ready &&
		!XLogLogicalInfoActive() &&
		rel->rd_rel->relkind == RELKIND_RELATION &&
		rel->rd_rel->relam == HEAP_TABLE_AM_OID;
}

/*
 * numbered_values
 *		Deform "tuple" into values/isnull, and report whether the stream
 *		column (and the time column) is null, as an unnumbered row's is.
 */
static bool
numbered_values(TupleDesc desc, HeapTuple tuple, AttrNumber seq_attnum,
				AttrNumber time_attnum, Datum *values, bool *isnull)
{
	if (HeapTupleHeaderGetNatts(tuple->t_data) != desc->natts ||
		!HeapTupleHasNulls(tuple))
		return false;
	heap_deform_tuple(tuple, desc, values, isnull);
	return isnull[seq_attnum - 1] &&
		(time_attnum == InvalidAttrNumber || isnull[time_attnum - 1]);
}

/*
 * stream_inplace_room
 *		The row "tuple" (a stream row as the guard trigger sees it at
 *		INSERT) with room for its number: zero bytes after its data, as
 *		many as the numbered row needs more.  The tuple itself when in-place
 *		writes are off or the row is not one they serve.
 */
HeapTuple
stream_inplace_room(Relation rel, HeapTuple tuple, AttrNumber seq_attnum,
					AttrNumber time_attnum)
{
	TupleDesc	desc = RelationGetDescr(rel);
	Datum	   *values;
	bool	   *isnull;
	Size		datalen;
	Size		numbered_len;
	HeapTuple	roomy;

	if (!inplace_possible(rel))
		return tuple;
	values = palloc(sizeof(Datum) * desc->natts);
	isnull = palloc(sizeof(bool) * desc->natts);
	if (!numbered_values(desc, tuple, seq_attnum, time_attnum, values, isnull))
		return tuple;

	datalen = tuple->t_len - tuple->t_data->t_hoff;
	values[seq_attnum - 1] = Int64GetDatum(0);
	isnull[seq_attnum - 1] = false;
	if (time_attnum != InvalidAttrNumber)
	{
		values[time_attnum - 1] = TimestampTzGetDatum(0);
		isnull[time_attnum - 1] = false;
	}
	numbered_len = heap_compute_data_size(desc, values, isnull);
	pfree(values);
	pfree(isnull);
	if (numbered_len <= datalen ||
		tuple->t_data->t_hoff + numbered_len > MaxHeapTupleSize)
		return tuple;

	roomy = (HeapTuple) palloc0(HEAPTUPLESIZE + tuple->t_data->t_hoff + numbered_len);
	roomy->t_len = tuple->t_data->t_hoff + numbered_len;
	roomy->t_self = tuple->t_self;
	roomy->t_tableOid = tuple->t_tableOid;
	roomy->t_data = (HeapTupleHeader) ((char *) roomy + HEAPTUPLESIZE);
	memcpy(roomy->t_data, tuple->t_data, tuple->t_len);
	return roomy;
}

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
 * stream_inplace_write
 *		Write "number" (and "numbered_at" into the time column) into the row
 *		at "tid" in place, if it is still the version this transaction
 *		inserted, with room for it (see the top of the file for what makes
 *		this sound; the caller has checked point (b) and makes the index
 *		entries of point (c)).  Returns false, changing nothing, when the
 *		row is not one this write serves, or when another pin on its page
 *		keeps the cleanup lock from being taken.  The caller must hold no
 *		pin of its own on the page (a pin this backend holds twice also
 *		fails the lock).
 */
bool
stream_inplace_write(Relation rel, ItemPointer tid, AttrNumber seq_attnum,
					 int64 number, AttrNumber time_attnum,
					 TimestampTz numbered_at)
{
	TupleDesc	desc = RelationGetDescr(rel);
	Buffer		buffer;
	Page		page;
	OffsetNumber offnum = ItemPointerGetOffsetNumber(tid);
	ItemId		lp;
	HeapTupleHeader htup;
	HeapTupleData tuple;
	Datum	   *values;
	bool	   *isnull;
	Size		len;
	Size		old_datalen;
	Size		new_datalen;
	char	   *old_data;
	char	   *new_data;
	bits8	   *bits;
	uint16		infomask = 0;
	xl_stream_inplace rec;
	bool		written = false;

	if (!inplace_possible(rel))
		return false;

	/* the caller holds no other pin of ours on the page (point (a)) */
	buffer = ReadBuffer(rel, ItemPointerGetBlockNumber(tid));
	if (!ConditionalLockBufferForCleanup(buffer))
	{
		ReleaseBuffer(buffer);
		return false;
	}

	values = palloc(sizeof(Datum) * desc->natts);
	isnull = palloc(sizeof(bool) * desc->natts);
	bits = palloc0(BITMAPLEN(desc->natts));
	page = BufferGetPage(buffer);
	if (offnum < FirstOffsetNumber || offnum > PageGetMaxOffsetNumber(page))
		goto done;
	lp = PageGetItemId(page, offnum);
	if (!ItemIdIsNormal(lp))
		goto done;
	htup = (HeapTupleHeader) PageGetItem(page, lp);
	len = ItemIdGetLength(lp);

	/* (a): inserted by this transaction, untouched since, not frozen */
	if ((htup->t_infomask & HEAP_XMAX_INVALID) == 0 ||
		HeapTupleHeaderXminCommitted(htup) ||
		HeapTupleHeaderXminInvalid(htup) ||
		HeapTupleHeaderIsHeapOnly(htup) ||
		!TransactionIdIsCurrentTransactionId(HeapTupleHeaderGetRawXmin(htup)))
		goto done;

	tuple.t_data = htup;
	tuple.t_len = len;
	tuple.t_self = *tid;
	tuple.t_tableOid = RelationGetRelid(rel);
	if (!numbered_values(desc, &tuple, seq_attnum, time_attnum, values, isnull))
		goto done;
	old_datalen = heap_compute_data_size(desc, values, isnull);

	values[seq_attnum - 1] = Int64GetDatum(number);
	isnull[seq_attnum - 1] = false;
	if (time_attnum != InvalidAttrNumber)
	{
		values[time_attnum - 1] = TimestampTzGetDatum(numbered_at);
		isnull[time_attnum - 1] = false;
	}
	new_datalen = heap_compute_data_size(desc, values, isnull);
	if (htup->t_hoff + new_datalen != len || old_datalen >= new_datalen)
		goto done;				/* no room, or the room was not ours */

	/* the numbered data, formed from the page before it changes */
	new_data = palloc0(new_datalen);
	heap_fill_tuple(desc, values, isnull, new_data, new_datalen, &infomask,
					bits);
	if ((infomask & (HEAP_HASVARWIDTH | HEAP_HASEXTERNAL)) !=
		(htup->t_infomask & (HEAP_HASVARWIDTH | HEAP_HASEXTERNAL)))
		goto done;

	/*
	 * What the record carries: the bytes from the first that changes; of
	 * the old data after that point, if it is found again unchanged at the
	 * end of the new data (the usual case: the attributes after the stream
	 * column keep their alignment), only its move.
	 */
	old_data = (char *) htup + htup->t_hoff;
	rec.offnum = offnum;
	rec.start = 0;
	while (rec.start < old_datalen && old_data[rec.start] == new_data[rec.start])
		rec.start++;
	rec.nbytes = new_datalen - old_datalen;
	rec.moved = old_datalen - rec.start;
	if (memcmp(new_data + rec.start + rec.nbytes, old_data + rec.start,
			   rec.moved) != 0)
	{
		rec.nbytes = new_datalen - rec.start;
		rec.moved = 0;
	}

	START_CRIT_SECTION();

	apply_inplace(htup, len, &rec, (char *) bits, new_data + rec.start);
	MarkBufferDirty(buffer);

	if (RelationNeedsWAL(rel))
	{
		XLogRecPtr	recptr;

		XLogBeginInsert();
		XLogRegisterBuffer(0, buffer, REGBUF_STANDARD);
		XLogRegisterBufData(0, (char *) &rec, SizeOfStreamInplace);
		XLogRegisterBufData(0, (char *) bits, BITMAPLEN(desc->natts));
		XLogRegisterBufData(0, new_data + rec.start, rec.nbytes);
		recptr = XLogInsert(stream_seq_rmgr_id, XLOG_STREAM_INPLACE);
		PageSetLSN(page, recptr);
	}

	END_CRIT_SECTION();
	written = true;

done:
	UnlockReleaseBuffer(buffer);
	pfree(values);
	pfree(isnull);
	pfree(bits);
	return written;
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
