/*-------------------------------------------------------------------------
 *
 * resize.c
 *	  Changing the slot count of a consumer group while its workers run,
 *	  without breaking the order of the rows of a key.
 *
 * Row r of a group of n slots belongs to slot slot_of(key(r), n); with m
 * slots most keys belong to another slot.  The danger is a key whose rows
 * up to some number are still unfinished in its old slot when its new slot
 * starts delivering its later rows: two workers would process one key at
 * once, the later row possibly first.  The protocol, in two steps:
 *
 * 1. resize_group() records the resize as pending: the new count, the new
 *	  slot expression and its index (created here, as create_group()
 *	  creates the first, as the caller, who must own the table), and a
 *	  fence F.  It locks every slot row (in slot order) and adds 1 to every
 *	  token, so that a worker that read rows before the resize cannot
 *	  advance past them (SQLSTATE SS001: it claims again).  F is the
 *	  highest of horizon - 1 and every slot's position, read under those
 *	  locks.  Every row numbered F or lower that ever commits has committed
 *	  by now (it is below a horizon some statement computed), so "the rows
 *	  up to F" is a fixed set.  While the resize is pending, read_slot()
 *	  of an old slot returns no row above F (the read_upto column of
 *	  _slot_state).
 *
 * 2. The switch, made by claim() (each worker's, while a resize is
 *	  pending) or by resize_group() itself: it locks the consumer's row,
 *	  then every slot row in slot order, and checks that every old slot
 *	  has finished up to F: its position is at least F, or none of its
 *	  rows lies between its position and F (slot_finished_upto), looked
 *	  for in a snapshot taken then, which sees every row up to F (the
 *	  caller's statement snapshot may predate some of them).  If so,
 *	  in the same transaction: the slot count becomes m, the slot
 *	  expression and index the new ones; slots m and above are deleted,
 *	  the others (and new ones up to m - 1) are set to position F, without
 *	  worker, with a token above every old token.  Otherwise nothing
 *	  changes and a later claim() tries again.
 *
 * Why a key keeps its order.  The rows of key k up to F belong, under the
 * old count, to one old slot, which is read only up to F and by one
 * worker at a time (its lease and token); its rows above F are not read
 * from it while the resize is pending.  After the switch every slot starts
 * at F, so k's rows above F come from one new slot only, in order.  The
 * switch happens only once k's old slot has finished up to F, under the
 * lock of that slot's row: an advance that had not committed then has
 * either committed before (and is counted) or waits for the switch and
 * then fails on the changed token.  So no row of k above F is delivered
 * until every row of k up to F was finished, and none is delivered twice
 * by committed work: old slots finish exactly the rows up to F (the token
 * change of step 1 fences pages read before F was chosen), new slots
 * exactly the rows above it.  Parked rows are the exception they always
 * were (group.c): they are finished when parked.
 *
 * The old index.  Dropping an index locks its table in ACCESS EXCLUSIVE
 * mode; the switch runs in a worker's transaction, which must not take
 * that lock (it would wait for every reader, and readers wait for it).
 * So the switch only records the old index as retired; a later
 * resize_group() of the group drops it, and drop_consumer() and disable()
 * drop it with the group.  resize_group() takes that lock only if it can
 * at once (tried every millisecond for lock_timeout, or 1 s): a request
 * waiting in the lock queue would stop every writer and reader that comes
 * after it for as long as the transaction it waits for stays open.  If it
 * cannot, the index stays retired (costing writes, nothing else), for a
 * later call; the group records every index retired and not yet dropped.
 *
 * Locks.  resize_group() takes, in the caller's transaction and in this
 * order: the consumer's row, the slot rows in slot order (waiting for
 * workers' uncommitted advances, with no lock on the table held, so that
 * writers go on meanwhile), then, never waiting in the lock queue (as for
 * the drop above; 55P03 after lock_timeout, or 5 s), SHARE on the table
 * and its partitions for building the new index, or ACCESS EXCLUSIVE for
 * dropping a retired one.  Writers wait while the index builds, and both
 * table locks are held until the caller commits: call it in a transaction
 * of its own.
 *
 * An index built beforehand.  CREATE INDEX CONCURRENTLY cannot run in a
 * function, so resize_index() returns the statement of the index a resize
 * would build, for the table's owner to run first; resize_group() then
 * adopts an index that is exactly that one (find_slot_index()) instead of
 * building one, and takes no SHARE lock: writers wait for nothing.  It
 * locks the adopted index in SHARE UPDATE EXCLUSIVE mode (no writer or
 * reader conflicts with it) so that no other resize adopts it too, and
 * never adopts an index a group uses, is pending for or has retired: each
 * group's indexes are dropped with it, so none may be another's.
 *
 * One resize at a time: resize_group() to another count while one is
 * pending fails (SQLSTATE 55000); to the pending count it does nothing
 * more than try the switch; to the current count it cancels the pending
 * resize (dropping the index made for it), which is safe because the
 * old slots then simply read past F again.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_class.h"
#include "catalog/pg_inherits.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "storage/lmgr.h"
#include "storage/proc.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "stream_seq.h"
#include "resize.h"
#include "catalog.h"
#include "horizon.h"
#include "consumer.h"

PG_FUNCTION_INFO_V1(stream_seq_resize_group);
PG_FUNCTION_INFO_V1(stream_seq_resize_index);

/* As in group.c: slots per group. */
#define RESIZE_MAX_SLOTS 1024

/*
 * stream_resize_drop_indexes
 *		Drop the indexes a group's resizes made and left: the one made for a
 *		pending resize, and the retired one of a finished resize.  For
 *		drop_consumer() ("consumer" given) and disable() (every group of the
 *		stream, "consumer" NULL).
 */
void
stream_resize_drop_indexes(Oid relid, const char *consumer)
{
	Oid			argtypes[2] = {OIDOID, TEXTOID};
	Datum		values[2];
	char	   *names;
	char	   *name;
	char	   *saveptr = NULL;
	char		sep[2] = {'\x01', '\0'};

	if (!stream_resize_supported())
		return;
	values[0] = ObjectIdGetDatum(relid);
	values[1] = CStringGetTextDatum(consumer != NULL ? consumer : "");
	names = stream_catalog_text("SELECT pg_catalog.string_agg(i, pg_catalog.chr(1)) FROM ("
								"  SELECT resize_index AS i FROM stream_seq.consumer "
								"   WHERE stream::pg_catalog.oid = $1 AND ($2 = '' OR consumer = $2) "
								"  UNION ALL SELECT retired_index FROM stream_seq.consumer "
								"   WHERE stream::pg_catalog.oid = $1 AND ($2 = '' OR consumer = $2)) n "
								"WHERE i IS NOT NULL",
								2, argtypes, values);
	if (names == NULL)
		return;
	for (name = strtok_r(names, sep, &saveptr); name != NULL;
		 name = strtok_r(NULL, sep, &saveptr))
		stream_drop_group_index(relid, name);
}

/* Without lock_timeout: how long to try for the lock of the index build. */
#define RESIZE_BUILD_LOCK_WAIT_MS 5000
/* Without lock_timeout: how long to try for the lock that drops an index. */
#define RESIZE_DROP_LOCK_WAIT_MS 1000

/*
 * lock_without_queueing
 *		Take "mode" on the stream table and all its partitions without ever
 *		waiting in the lock queue: a waiting SHARE or ACCESS EXCLUSIVE
 *		request makes every writer that comes after it wait too, for as
 *		long as the transaction it waits for stays open.  Tries every
 *		millisecond for up to "wait_ms" (lock_timeout if that is set);
 *		returns whether it got them all (none is kept otherwise).
 */
static bool
lock_without_queueing(Oid relid, LOCKMODE mode, int wait_ms)
{
	List	   *rels = find_all_inheritors(relid, NoLock, NULL);
	TimestampTz start = GetCurrentTimestamp();

	if (LockTimeout > 0)
		wait_ms = LockTimeout;
	for (;;)
	{
		ListCell   *lc;
		List	   *taken = NIL;
		bool		all = true;

		foreach(lc, rels)
		{
			Oid			rel = lfirst_oid(lc);

			if (!ConditionalLockRelationOid(rel, mode))
			{
				all = false;
				break;
			}
			taken = lappend_oid(taken, rel);
		}
		if (all)
			return true;
		foreach(lc, taken)
			UnlockRelationOid(lfirst_oid(lc), mode);
		list_free(taken);
		if (TimestampDifferenceExceeds(start, GetCurrentTimestamp(), wait_ms))
			return false;
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 1L, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * drop_retired_index
 *		Drop the indexes finished resizes of the group left ("names", as the
 *		caller read the group's record of them: one name, or several
 *		separated by chr(1)), if the table can be locked (ACCESS EXCLUSIVE)
 *		without queueing, and take them off the record.  Otherwise leave
 *		them for a later resize_group() (or drop_consumer(), disable(), or
 *		DROP INDEX CONCURRENTLY by hand), with a notice.  A retired index
 *		costs writes, nothing else, while writers stopped behind a waiting
 *		DROP INDEX would cost the stream its writes.
 */
static void
drop_retired_index(Oid relid, const char *consumer, const char *names)
{
	Oid			argtypes[3] = {REGCLASSOID, TEXTOID, TEXTOID};
	Datum		values[3];
	char	   *current;
	char	   *copy;
	char	   *name;
	char	   *saveptr = NULL;
	char		sep[2] = {'\x01', '\0'};
	size_t		len;

	if (names == NULL)
		return;
	values[0] = ObjectIdGetDatum(relid);
	values[1] = CStringGetTextDatum(consumer);
	current = stream_catalog_text("SELECT retired_index FROM stream_seq.consumer "
								  "WHERE stream = $1 AND consumer = $2",
								  2, argtypes, values);
	len = strlen(names);
	if (current == NULL || strncmp(current, names, len) != 0 ||
		(current[len] != '\0' && current[len] != '\x01'))
		return;
	if (!lock_without_queueing(relid, AccessExclusiveLock, RESIZE_DROP_LOCK_WAIT_MS))
	{
		char	   *shown = pstrdup(names);
		char	   *c;

		for (c = shown; *c != '\0'; c++)
			if (*c == '\x01')
				*c = ' ';
		ereport(NOTICE,
				(errmsg("index \"%s\" that a resize of group \"%s\" retired is kept for now",
						shown, consumer),
				 errdetail("Dropping it needs a moment without readers and writers of the table; resize_group() does not make them wait for one."),
				 errhint("Call stream_seq.resize_group() again later, or drop the index with DROP INDEX CONCURRENTLY.")));
		return;
	}
	copy = pstrdup(names);
	for (name = strtok_r(copy, sep, &saveptr); name != NULL;
		 name = strtok_r(NULL, sep, &saveptr))
		stream_drop_group_index(relid, name);
	if (current[len] == '\0')
	{
		values[2] = (Datum) 0;
		stream_catalog_exec_nulls("UPDATE stream_seq.consumer SET retired_index = $3 "
								  "WHERE stream = $1 AND consumer = $2",
								  3, argtypes, values, "  n");
	}
	else
	{
		values[2] = CStringGetTextDatum(current + len + 1);
		stream_catalog_exec("UPDATE stream_seq.consumer SET retired_index = $3 "
							"WHERE stream = $1 AND consumer = $2",
							3, argtypes, values, NULL, 0, NULL);
	}
}

/*
 * try_switch
 *		Step 2 of the protocol (see the top of the file): if a resize of
 *		the group is pending and every old slot has finished up to the
 *		fence, switch to the new slots.  Returns whether it switched.
 *		Locks the consumer's row, then the slot rows in slot order.
 */
static bool
try_switch(Oid relid, const char *consumer)
{
	Oid			argtypes[5] = {REGCLASSOID, TEXTOID, INT4OID, INT8OID, INT8OID};
	Datum		values[5];
	int64		state[3];
	bool		found;
	int			slots;
	int			resize_to;
	int64		fence;
	char	   *old_expr;
	int64	   *rows;
	uint64		n;
	uint64		i;
	int64		token = 0;

	values[0] = ObjectIdGetDatum(relid);
	values[1] = CStringGetTextDatum(consumer);
	stream_catalog_exec("SELECT slots::pg_catalog.int8, resize_to::pg_catalog.int8, resize_fence "
						"FROM stream_seq.consumer WHERE stream = $1 AND consumer = $2 "
						"AND resize_to IS NOT NULL FOR NO KEY UPDATE",
						2, argtypes, values, state, 3, &found);
	if (!found)
		return false;
	slots = (int) state[0];
	resize_to = (int) state[1];
	fence = state[2];
	old_expr = stream_catalog_text("SELECT slot_expr FROM stream_seq.consumer "
								   "WHERE stream = $1 AND consumer = $2",
								   2, argtypes, values);
	if (old_expr == NULL)
		elog(ERROR, "group \"%s\" has no slot expression", consumer);

	n = stream_catalog_rows("SELECT slot::pg_catalog.int8, position, token "
							"FROM stream_seq.consumer_slot "
							"WHERE stream = $1 AND consumer = $2 ORDER BY slot FOR UPDATE",
							2, argtypes, values, 3, &rows);

	/*
	 * The old slots' rows are looked for in a snapshot taken now, not the
	 * caller's statement's (nor, under REPEATABLE READ, its transaction's):
	 * those may be older than rows up to the fence that committed before
	 * the fence was recorded (the fence can be a slot's position, which
	 * an advance set under a later horizon), and would miss them.
	 */
	PushActiveSnapshot(GetLatestSnapshot());
	for (i = 0; i < n; i++)
	{
		int			slot = (int) rows[i * 3];
		int64		position = rows[i * 3 + 1];

		token = Max(token, rows[i * 3 + 2]);
		if (position >= fence)
			continue;
		if (stream_slot_finished_upto(relid, old_expr, slot, position,
									  fence + 1) < fence)
		{
			PopActiveSnapshot();
			return false;
		}
	}
	PopActiveSnapshot();

	values[2] = Int32GetDatum(resize_to);
	values[3] = Int64GetDatum(fence);
	values[4] = Int64GetDatum(token + 1);
	stream_catalog_exec("DELETE FROM stream_seq.consumer_slot "
						"WHERE stream = $1 AND consumer = $2 AND slot >= $3",
						3, argtypes, values, NULL, 0, NULL);
	stream_catalog_exec("UPDATE stream_seq.consumer_slot "
						"SET position = $4, token = $5, worker = NULL, lease_until = NULL, "
						"advanced_at = pg_catalog.now(), reset_at = NULL, reset_by = NULL, "
						"reset_from = NULL "
						"WHERE stream = $1 AND consumer = $2",
						5, argtypes, values, NULL, 0, NULL);
	stream_catalog_exec(psprintf("INSERT INTO stream_seq.consumer_slot "
								 "(stream, consumer, slot, position, token) "
								 "SELECT $1, $2, s, $4, $5 "
								 "FROM pg_catalog.generate_series(%d, $3 - 1) s",
								 slots),
						5, argtypes, values, NULL, 0, NULL);
	stream_catalog_exec("UPDATE stream_seq.consumer "
						"SET slots = resize_to, slot_index = resize_index, "
						"slot_expr = resize_expr, "
						"retired_index = CASE WHEN retired_index IS NULL THEN slot_index "
						"  ELSE retired_index || pg_catalog.chr(1) || slot_index END, "
						"resized_from = slots, resized_at = pg_catalog.now(), "
						"resize_to = NULL, resize_fence = NULL, resize_index = NULL, "
						"resize_expr = NULL, resize_at = NULL "
						"WHERE stream = $1 AND consumer = $2",
						2, argtypes, values, NULL, 0, NULL);
	return true;
}

/*
 * stream_resize_try_switch
 *		For claim(): make the switch of a pending resize of the group if it
 *		is due (see try_switch).  Cheap when none is pending: one read, no
 *		lock.  Returns whether a resize was pending: then the slot count
 *		the caller read may have changed (switched here, or by another
 *		claim() it waited for), and it reads it again.
 */
bool
stream_resize_try_switch(Oid relid, const char *consumer)
{
	Oid			argtypes[2] = {REGCLASSOID, TEXTOID};
	Datum		values[2];
	int64		one;
	bool		found;

	if (!stream_resize_supported())
		return false;
	values[0] = ObjectIdGetDatum(relid);
	values[1] = CStringGetTextDatum(consumer);
	stream_catalog_exec("SELECT 1::pg_catalog.int8 FROM stream_seq.consumer "
						"WHERE stream = $1 AND consumer = $2 AND resize_to IS NOT NULL",
						2, argtypes, values, &one, 1, &found);
	if (!found)
		return false;
	(void) try_switch(relid, consumer);
	return true;
}

/*
 * stream_resize_fence
 *		The fence of the group's pending resize, or -1 if none: for
 *		read_slot(), which reads no row above it meanwhile.
 */
int64
stream_resize_fence(Oid relid, const char *consumer)
{
	Oid			argtypes[2] = {REGCLASSOID, TEXTOID};
	Datum		values[2];
	int64		fence;
	bool		found;

	if (!stream_resize_supported())
		return -1;
	values[0] = ObjectIdGetDatum(relid);
	values[1] = CStringGetTextDatum(consumer);
	stream_catalog_exec("SELECT resize_fence FROM stream_seq.consumer "
						"WHERE stream = $1 AND consumer = $2 AND resize_fence IS NOT NULL",
						2, argtypes, values, &fence, 1, &found);
	return found ? fence : -1;
}

/*
 * stream_resize_removed_slot
 *		Whether slot "slot", which a group of "slots" slots does not have,
 *		was one of the group before a resize made it smaller: then a worker
 *		asking for it lost it (SQLSTATE SS001), rather than asking for a
 *		slot that never was.
 */
bool
stream_resize_removed_slot(Oid relid, const char *consumer, int slot)
{
	Oid			argtypes[2] = {REGCLASSOID, TEXTOID};
	Datum		values[2];
	int64		from;
	bool		found;

	if (slot < 0 || !stream_resize_supported())
		return false;
	values[0] = ObjectIdGetDatum(relid);
	values[1] = CStringGetTextDatum(consumer);
	stream_catalog_exec("SELECT resized_from::pg_catalog.int8 FROM stream_seq.consumer "
						"WHERE stream = $1 AND consumer = $2 AND resized_from IS NOT NULL",
						2, argtypes, values, &from, 1, &found);
	return found && slot < from;
}

/*
 * SlotIndexPlan
 *		The index a resize of a group to a new slot count needs: what
 *		resize_group() builds, resize_index() prints for a build beforehand,
 *		and an index built beforehand must be to be adopted.
 */
typedef struct SlotIndexPlan
{
	char	   *expr;			/* the new slot expression, as printed */
	char	   *name;			/* a name no relation of the schema has */
	char	   *table;			/* the stream table, qualified */
	char	   *column;			/* its seq column */
	AttrNumber	attnum;			/* and that column's number */
	Oid			stream;			/* the stream table */
	const char *consumer;		/* the group */
	int			slots;			/* the new count */
} SlotIndexPlan;

/*
 * plan_slot_index
 *		Work out the index of the group's slot expression for "slots" slots.
 *		The new expression is the old one, as PostgreSQL prints the index
 *		column, with the count changed: slot_of((key)::text, n).
 */
static void
plan_slot_index(Oid relid, const char *consumer, const char *old_expr,
				int old_slots, int slots, SlotIndexPlan *plan)
{
	StreamRef  *ref = stream_lookup(relid, false);
	char	   *suffix = psprintf(", %d)", old_slots);
	size_t		len = strlen(old_expr);
	size_t		slen = strlen(suffix);
	char	   *base;
	int			n = 0;

	if (len <= slen || strcmp(old_expr + len - slen, suffix) != 0 ||
		strncmp(old_expr, "stream_seq.slot_of(", 19) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("could not resize group \"%s\"", consumer),
				 errdetail("Its slot expression \"%s\" is not the one create_group() makes.",
						   old_expr)));
	plan->expr = psprintf("%.*s, %d)", (int) (len - slen), old_expr, slots);
	plan->table = stream_qualified_name(relid);
	plan->attnum = ref->seq_attnum;
	plan->stream = relid;
	plan->consumer = consumer;
	plan->slots = slots;
	plan->column = get_attname(relid, ref->seq_attnum, false);
	base = psprintf("%s_%s_s%d_idx", stream_clip_name(stream_rel_name(relid), 26),
					stream_clip_name(consumer, 20), slots);
	plan->name = base;
	while (OidIsValid(get_relname_relid(plan->name, get_rel_namespace(relid))))
		plan->name = psprintf("%s%d", base, ++n);
}

/*
 * slot_index_statement_on
 *		The CREATE INDEX statement of a plan's index named "name" on table
 *		"table" (qualified): the stream table or one of its partitions,
 *		CONCURRENTLY or not, ON ONLY or not.
 */
static char *
slot_index_statement_on(const SlotIndexPlan *plan, const char *name,
						const char *table, bool concurrently, bool only)
{
	return psprintf("CREATE INDEX %s%s ON %s%s ((%s), %s) WHERE %s > 0",
					concurrently ? "CONCURRENTLY " : "",
					quote_identifier(name), only ? "ONLY " : "", table,
					plan->expr, quote_identifier(plan->column),
					quote_identifier(plan->column));
}

/*
 * slot_index_statement
 *		The CREATE INDEX statement of a plan, CONCURRENTLY or not.
 */
static char *
slot_index_statement(const SlotIndexPlan *plan, bool concurrently)
{
	return slot_index_statement_on(plan, plan->name, plan->table,
								   concurrently, false);
}

/* How find_slot_index_on() looks. */
#define SLOT_INDEX_VALID		0x01	/* valid, ready and live only */
#define SLOT_INDEX_UNATTACHED	0x02	/* not a partition of another index */

/*
 * find_slot_index_on
 *		An index of table "relid" (the stream table, or one of its
 *		partitions) that is exactly the one a plan describes (btree, not
 *		unique, the new expression and the seq column, number "attnum" in
 *		that table, in ascending order with the default operator classes,
 *		the same predicate), with OID above "after", and that no group of
 *		the stream uses, is pending for or has retired: those are dropped
 *		with their group, so one index is never two groups'.  With
 *		SLOT_INDEX_VALID only one that is valid, ready and live (an invalid
 *		index left by a failed CREATE INDEX CONCURRENTLY is never one);
 *		otherwise also an invalid one, but live: a partitioned index is
 *		invalid until an index of each partition is attached to it.  With
 *		SLOT_INDEX_UNATTACHED only one that is not a partition of another
 *		index.  Read in the latest snapshot (a resize that adopted an index
 *		and committed is seen).  InvalidOid if there is none.
 */
static Oid
find_slot_index_on(Oid relid, const SlotIndexPlan *plan, AttrNumber attnum,
				   Oid after, int flags)
{
	Oid			argtypes[6] = {OIDOID, TEXTOID, INT2OID, TEXTOID, OIDOID, OIDOID};
	Datum		values[6];
	int64		found_oid;
	bool		found;

	values[0] = ObjectIdGetDatum(relid);
	values[1] = CStringGetTextDatum(plan->expr);
	values[2] = Int16GetDatum(attnum);
	values[3] = CStringGetTextDatum(psprintf("(%s > 0)",
											 quote_identifier(plan->column)));
	values[4] = ObjectIdGetDatum(after);
	values[5] = ObjectIdGetDatum(plan->stream);
	stream_catalog_exec_latest(psprintf("SELECT i.indexrelid::pg_catalog.int8 "
										"FROM pg_catalog.pg_index i "
										"JOIN pg_catalog.pg_class c ON c.oid = i.indexrelid "
										"JOIN pg_catalog.pg_am a ON a.oid = c.relam "
										"WHERE i.indrelid = $1 AND i.indexrelid > $5 "
										"AND a.amname = 'btree' AND c.relkind IN ('i', 'I') "
										"AND i.indnatts = 2 AND i.indnkeyatts = 2 "
										"AND NOT i.indisunique AND NOT i.indisexclusion "
										"AND %s AND %s "
										"AND i.indkey[0] = 0 AND i.indkey[1] = $3 "
										"AND i.indoption[0] = 0 AND i.indoption[1] = 0 "
										"AND (SELECT pg_catalog.bool_and(o.opcdefault) "
										"       FROM pg_catalog.pg_opclass o "
										"      WHERE o.oid = ANY (i.indclass::pg_catalog.oid[])) "
										"AND pg_catalog.pg_get_indexdef(i.indexrelid, 1, false) = $2 "
										"AND pg_catalog.pg_get_expr(i.indpred, i.indrelid) = $4 "
										"AND NOT EXISTS (SELECT 1 FROM stream_seq.consumer k "
										"  WHERE k.stream::pg_catalog.oid = $6 "
										"    AND (pg_catalog.to_regclass(k.slot_index) = i.indexrelid "
										"      OR pg_catalog.to_regclass(k.resize_index) = i.indexrelid "
										"      OR i.indexrelid::pg_catalog.regclass = ANY ("
										"           SELECT pg_catalog.to_regclass(r) FROM pg_catalog.unnest("
										"             pg_catalog.string_to_array(k.retired_index, pg_catalog.chr(1))) r))) "
										"ORDER BY i.indexrelid LIMIT 1",
										(flags & SLOT_INDEX_VALID) ?
										"i.indisvalid AND i.indisready AND i.indislive" :
										"i.indisready AND i.indislive",
										(flags & SLOT_INDEX_UNATTACHED) ?
										"NOT c.relispartition" : "true"),
							   6, argtypes, values, &found_oid, 1, &found);
	return found ? (Oid) found_oid : InvalidOid;
}

/*
 * find_slot_index
 *		The valid index of the stream table that a plan describes (see
 *		find_slot_index_on): on a partitioned stream a partitioned index
 *		with an index of every partition attached.
 */
static Oid
find_slot_index(Oid relid, const SlotIndexPlan *plan, Oid after)
{
	return find_slot_index_on(relid, plan, plan->attnum, after,
							  SLOT_INDEX_VALID);
}

/*
 * adopt_slot_index
 *		Take for the resize an index built beforehand (resize_index()), so
 *		that no build, and no SHARE lock that would keep writers out while
 *		it runs, is needed.  The index is locked in SHARE UPDATE EXCLUSIVE
 *		mode, which writers and readers do not conflict with but another
 *		resize adopting it does, and is looked for again under that lock:
 *		so two groups never take one index.  Returns InvalidOid if there is
 *		none to adopt.
 */
static Oid
adopt_slot_index(Oid relid, const SlotIndexPlan *plan)
{
	Oid			after = InvalidOid;

	for (;;)
	{
		Oid			index = find_slot_index(relid, plan, after);

		if (!OidIsValid(index))
			return InvalidOid;
		if (ConditionalLockRelationOid(index, ShareUpdateExclusiveLock))
		{
			if (find_slot_index(relid, plan, index - 1) == index)
				return index;
			UnlockRelationOid(index, ShareUpdateExclusiveLock);
		}
		after = index;
	}
}

/*
 * build_slot_index
 *		Create the index of a plan, as the caller (who owns the table), and
 *		return its OID.
 */
static Oid
build_slot_index(Oid relid, const char *consumer, const SlotIndexPlan *plan)
{
	Oid			index;
	Oid			incomplete = InvalidOid;

	if (get_rel_relkind(relid) == RELKIND_PARTITIONED_TABLE)
		incomplete = find_slot_index_on(relid, plan, plan->attnum, InvalidOid,
										SLOT_INDEX_UNATTACHED);
	if (OidIsValid(incomplete) && get_rel_name(incomplete) != NULL)
		ereport(NOTICE,
				(errmsg("index \"%s\" built beforehand for group \"%s\" is not adopted: a partition has no index attached to it",
						get_rel_name(incomplete), consumer),
				 errdetail("resize_group() builds an index of its own, keeping writers out while it runs."),
				 errhint("To resize without writers waiting, run the statements stream_seq.resize_index() returns until it returns NULL, then call resize_group(): it adopts the index once it is valid.")));

	/*
	 * The build's SHARE lock is taken without queueing: a CREATE INDEX
	 * waiting behind one writer's open transaction would stop every other
	 * writer of the stream.  Writers still wait while the index builds;
	 * an index built beforehand with resize_index()'s statement avoids that.
	 */
	if (!lock_without_queueing(relid, ShareLock, RESIZE_BUILD_LOCK_WAIT_MS))
		ereport(ERROR,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("could not lock stream table \"%s\" to build the index of group \"%s\"",
						get_rel_name(relid), consumer),
				 errdetail("A transaction writing the table stayed open for %d ms; resize_group() does not make the table's writers wait behind it.",
						   LockTimeout > 0 ? LockTimeout : RESIZE_BUILD_LOCK_WAIT_MS),
				 errhint("Retry, set lock_timeout to try for longer, or build the index beforehand with the statement stream_seq.resize_index() returns.")));
	stream_caller_exec(slot_index_statement(plan, false), 0, NULL, NULL);
	CommandCounterIncrement();
	index = get_relname_relid(plan->name, get_rel_namespace(relid));
	if (!OidIsValid(index))
		elog(ERROR, "index \"%s\" of group \"%s\" is missing", plan->name, consumer);

	/*
	 * On a partitioned table CREATE INDEX attaches an index of a partition
	 * that has the same definition instead of building one, even an
	 * invalid one (which a failed CREATE INDEX CONCURRENTLY left): the
	 * partitioned index is then invalid, and no use to the group.
	 */
	if (!get_index_isvalid(index))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("could not build a valid index for group \"%s\" of stream table \"%s\"",
						consumer, stream_rel_name(relid)),
				 errdetail("A partition has an invalid index of that definition, which a failed CREATE INDEX CONCURRENTLY leaves, and PostgreSQL attached it."),
				 errhint("Drop the partition's invalid index (DROP INDEX CONCURRENTLY), then retry.")));
	return index;
}

/* Without lock_timeout: the lock_timeout of resize_index()'s catalog steps. */
#define RESIZE_CATALOG_LOCK_TIMEOUT_MS 100

/*
 * catalog_step
 *		Wrap a statement that changes only the catalog but takes a lock
 *		writers conflict with (CREATE INDEX ON ONLY: SHARE on the table,
 *		DefineIndex, whatever the ONLY; ALTER INDEX ATTACH PARTITION:
 *		ACCESS EXCLUSIVE on the partition's index, which a statement
 *		writing the partition holds RowExclusiveLock on until it ends and
 *		a transaction that planned a read of it AccessShareLock until it
 *		ends) in a DO block that sets lock_timeout for it alone: waiting in
 *		the lock queue behind an open transaction would stop every writer
 *		that comes after it, so it gives up instead (55P03) and
 *		resize_index() returns it again.  lock_timeout is the caller's
 *		if set, otherwise RESIZE_CATALOG_LOCK_TIMEOUT_MS; it must not apply
 *		to the CREATE INDEX CONCURRENTLY statements, whose waits for old
 *		transactions are lock waits too.
 */
static char *
catalog_step(const char *sql)
{
	char	   *quoted = quote_literal_cstr(sql);
	char	   *tag = pstrdup("$resize$");
	int			n = 0;

	while (strstr(quoted, tag) != NULL)
		tag = psprintf("$resize%d$", ++n);
	return psprintf("DO %sBEGIN SET LOCAL lock_timeout = %d; EXECUTE %s; END%s",
					tag, LockTimeout > 0 ? LockTimeout : RESIZE_CATALOG_LOCK_TIMEOUT_MS,
					quoted, tag);
}

/*
 * partition_index_name
 *		A name for the index of a plan on partition "part" (named
 *		"partname"): one that no
 *		relation of its schema has and that this call has not planned yet
 *		("taken", as "namespace oid/name").
 */
static char *
partition_index_name(Oid part, const char *partname, const SlotIndexPlan *plan,
					 List **taken)
{
	Oid			nsp = get_rel_namespace(part);
	char	   *base = psprintf("%s_%s_s%d_idx",
								stream_clip_name(partname, 26),
								stream_clip_name(plan->consumer, 20),
								plan->slots);
	char	   *name = base;
	int			n = 0;

	for (;;)
	{
		char	   *key = psprintf("%u/%s", nsp, name);
		ListCell   *lc;
		bool		used = OidIsValid(get_relname_relid(name, nsp));

		foreach(lc, *taken)
			if (strcmp((char *) lfirst(lc), key) == 0)
				used = true;
		if (!used)
		{
			*taken = lappend(*taken, key);
			return name;
		}
		name = psprintf("%s%d", base, ++n);
	}
}

/*
 * attached_index
 *		The index of table "part" attached to partitioned index "parent",
 *		or InvalidOid.
 */
static Oid
attached_index(Oid parent, Oid part)
{
	Oid			argtypes[2] = {OIDOID, OIDOID};
	Datum		values[2];
	int64		index;
	bool		found;

	values[0] = ObjectIdGetDatum(parent);
	values[1] = ObjectIdGetDatum(part);
	stream_catalog_exec_latest("SELECT h.inhrelid::pg_catalog.int8 "
							   "FROM pg_catalog.pg_inherits h "
							   "JOIN pg_catalog.pg_index i ON i.indexrelid = h.inhrelid "
							   "WHERE h.inhparent = $1 AND i.indrelid = $2",
							   2, argtypes, values, &index, 1, &found);
	return found ? (Oid) index : InvalidOid;
}

/*
 * partition_index_statements
 *		Append to "stmts" the statements that give every partition of
 *		"table" (and theirs, for a sub-partitioned one) an index of the plan
 *		attached to "table_index" (named "table_index_name", qualified;
 *		InvalidOid if it is still to be created by an earlier statement).
 *		A partition whose index is attached needs none; one with a valid
 *		index of the plan not attached to any index gets only the ATTACH
 *		(a step of an earlier run that failed); any other leaf partition
 *		gets CREATE INDEX CONCURRENTLY, which keeps no writer out, then the
 *		ATTACH; a sub-partitioned one CREATE INDEX ON ONLY, its partitions'
 *		statements, and only then the ATTACH, so that its index is valid
 *		when attached (attaching an invalid one that a later ATTACH makes
 *		valid would lock the table above it in ACCESS EXCLUSIVE mode).
 *		Partitions in order of their names, for a stable output.
 */
static List *
partition_index_statements(Oid table, Oid table_index,
						   const char *table_index_name,
						   const SlotIndexPlan *plan, List **taken,
						   List *stmts)
{
	Oid			argtypes[1] = {OIDOID};
	Datum		values[1];
	int64	   *rows;
	uint64		n;
	uint64		i;

	values[0] = ObjectIdGetDatum(table);
	n = stream_catalog_rows("SELECT c.oid::pg_catalog.int8, "
							"  (c.relkind = 'p')::pg_catalog.int4::pg_catalog.int8 "
							"FROM pg_catalog.pg_inherits h "
							"JOIN pg_catalog.pg_class c ON c.oid = h.inhrelid "
							"WHERE h.inhparent = $1 AND NOT h.inhdetachpending "
							"AND c.relkind IN ('r', 'p') "
							"ORDER BY c.oid::pg_catalog.regclass::pg_catalog.text",
							1, argtypes, values, 2, &rows);
	for (i = 0; i < n; i++)
	{
		Oid			part = (Oid) rows[i * 2];
		bool		partitioned = rows[i * 2 + 1] != 0;
		AttrNumber	attnum = get_attnum(part, plan->column);
		char	   *partname = get_rel_name(part);
		char	   *nspname = get_namespace_name(get_rel_namespace(part));
		Oid			index = InvalidOid;
		bool		attached = false;
		char	   *name;

		if (attnum == InvalidAttrNumber || partname == NULL || nspname == NULL)
			continue;			/* dropped meanwhile */
		if (OidIsValid(table_index))
		{
			index = attached_index(table_index, part);
			attached = OidIsValid(index);
		}
		if (!OidIsValid(index))
			index = find_slot_index_on(part, plan, attnum, InvalidOid,
									   SLOT_INDEX_UNATTACHED |
									   (partitioned ? 0 : SLOT_INDEX_VALID));
		if (OidIsValid(index))
			name = stream_qualified_name(index);
		else
		{
			char	   *relname = partition_index_name(part, partname, plan, taken);
			char	   *create;

			name = quote_qualified_identifier(nspname, relname);
			create = slot_index_statement_on(plan, relname,
											 quote_qualified_identifier(nspname, partname),
											 !partitioned, partitioned);
			stmts = lappend(stmts, partitioned ? catalog_step(create) : create);
		}
		if (partitioned)
			stmts = partition_index_statements(part, index, name, plan, taken,
											   stmts);
		if (!attached)
			stmts = lappend(stmts,
							catalog_step(psprintf("ALTER INDEX %s ATTACH PARTITION %s",
												  table_index_name, name)));
	}
	return stmts;
}

/*
 * partitioned_index_statements
 *		The statements that build the index of a plan on a partitioned
 *		stream without keeping writers out: CREATE INDEX ON ONLY the
 *		stream table (an invalid partitioned index, catalog only), then
 *		for each partition CREATE INDEX CONCURRENTLY and ALTER INDEX ...
 *		ATTACH PARTITION; the last ATTACH makes the partitioned index
 *		valid, and resize_group() adopts it.  The partitioned index comes
 *		first so that a partition created meanwhile gets its index with
 *		it, as CREATE TABLE ... PARTITION OF gives one.  If an incomplete
 *		index of the plan is there (an earlier run stopped, or a partition
 *		came after resize_index() and before its statements), only what it
 *		still lacks.  NIL if a valid one is there.
 */
static List *
partitioned_index_statements(Oid relid, const SlotIndexPlan *plan)
{
	Oid			index;
	char	   *name;
	List	   *taken = NIL;
	List	   *stmts = NIL;

	if (OidIsValid(find_slot_index(relid, plan, InvalidOid)))
		return NIL;
	index = find_slot_index_on(relid, plan, plan->attnum, InvalidOid,
							   SLOT_INDEX_UNATTACHED);
	if (OidIsValid(index))
		name = stream_qualified_name(index);
	else
	{
		name = quote_qualified_identifier(get_namespace_name(get_rel_namespace(relid)),
										  plan->name);
		taken = lappend(taken, psprintf("%u/%s", get_rel_namespace(relid),
										plan->name));
		stmts = lappend(stmts,
						catalog_step(slot_index_statement_on(plan, plan->name,
															 plan->table, false,
															 true)));
	}
	stmts = partition_index_statements(relid, index, name, plan, &taken, stmts);
	if (stmts == NIL)
	{
		Oid			any = InvalidOid;
		int64	   *rows;
		Oid			argtypes[1] = {OIDOID};
		Datum		values[1];

		/*
		 * Every partition's index is attached, but the partitioned index
		 * was never marked valid (attached while invalid): attaching one
		 * again makes PostgreSQL look again.
		 */
		values[0] = ObjectIdGetDatum(index);
		if (stream_catalog_rows("SELECT inhrelid::pg_catalog.int8 FROM pg_catalog.pg_inherits "
								"WHERE inhparent = $1 ORDER BY inhrelid LIMIT 1",
								1, argtypes, values, 1, &rows) > 0)
			any = (Oid) rows[0];
		if (OidIsValid(any))
			stmts = lappend(stmts,
							catalog_step(psprintf("ALTER INDEX %s ATTACH PARTITION %s",
												  name, stream_qualified_name(any))));
	}
	return stmts;
}

/*
 * check_resize_call
 *		The argument, privilege and state checks resize_group() and
 *		resize_index() share: returns the stream, the group's name, the new
 *		count and the current one.
 */
static void
check_resize_call(FunctionCallInfo fcinfo, Oid *relid, char **consumer,
				  int32 *slots, int *current)
{
	Oid			owner;

	stream_check_not_null(fcinfo, 3, "stream table, group name and slots");
	*relid = PG_GETARG_OID(0);
	*consumer = text_to_cstring(PG_GETARG_TEXT_PP(1));
	*slots = PG_GETARG_INT32(2);
	if (*slots < 1 || *slots > RESIZE_MAX_SLOTS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("a group must have between 1 and %d slots", RESIZE_MAX_SLOTS)));
	(void) stream_lookup(*relid, false);
	if (!pg_class_ownercheck(*relid, GetUserId()))
		aclcheck_error(ACLCHECK_NOT_OWNER, OBJECT_TABLE, stream_rel_name(*relid));
	stream_check_select(*relid);
	(void) stream_consumer_lookup(*relid, *consumer, false, &owner, current);
	stream_check_consumer_owner(*relid, *consumer, owner);
	if (*current == 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("consumer \"%s\" of stream table \"%s\" is not a group",
						*consumer, stream_rel_name(*relid)),
				 errhint("Only a group made by stream_seq.create_group() has slots to resize.")));
	if (!stream_resize_supported())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the extension's tables cannot record a resize"),
				 errhint("Update the extension: ALTER EXTENSION stream_seq UPDATE.")));
}

/*
 * report_pending_resize
 *		The error of a resize to "slots" while one to "pending" is pending.
 */
static void
report_pending_resize(const char *consumer, int pending, int current)
{
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("a resize of group \"%s\" to %d slots is pending",
					consumer, pending),
			 errdetail("The group has %d slots until its old slots have finished up to the fence.",
					   current),
			 errhint("Wait until the consumers view shows no resize_to, or cancel the pending resize with stream_seq.resize_group() to %d slots.",
					 current)));
}

/*
 * stream_seq_resize_index
 *		SQL: resize_index(stream, consumer, slots integer) → setof text: the
 *		statements that build the index resize_group() to "slots" would
 *		build, for the table's owner to run beforehand, one by one at top
 *		level (CONCURRENTLY cannot run in a function nor in a transaction
 *		block), so that resize_group() adopts it and writers never wait for
 *		a build.  For an ordinary stream one CREATE INDEX CONCURRENTLY; for
 *		a partitioned one those of partitioned_index_statements().  One
 *		NULL row when resize_group() would build none: the count is the
 *		current one or that of the pending resize, or such an index is
 *		there already.  Same checks as resize_group(), made once the table
 *		is locked in ACCESS SHARE mode (until the transaction ends): its
 *		queries read the table's indexes (pg_get_expr() opens the table),
 *		so a DROP TABLE or disable() that committed while the lock was
 *		waited for must be seen by the checks (42P01, 42809), and a
 *		drop_consumer() of the group (42704), not end in "could not open
 *		relation" (XX000) or a statement for a group that is gone.
 */
Datum
stream_seq_resize_index(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Oid			relid;
	char	   *consumer;
	int32		slots;
	int			current;
	int64		state[1];
	bool		found;
	char	   *old_expr;
	SlotIndexPlan plan;
	Oid			argtypes[2] = {REGCLASSOID, TEXTOID};
	Datum		values[2];
	List	   *stmts = NIL;
	ListCell   *lc;
	Datum		out[1];
	bool		nulls[1] = {false};

	stream_check_not_null(fcinfo, 3, "stream table, group name and slots");
	stream_check_locked(PG_GETARG_OID(0), AccessShareLock);
	check_resize_call(fcinfo, &relid, &consumer, &slots, &current);
	values[0] = ObjectIdGetDatum(relid);
	values[1] = CStringGetTextDatum(consumer);
	stream_catalog_exec("SELECT resize_to::pg_catalog.int8 FROM stream_seq.consumer "
						"WHERE stream = $1 AND consumer = $2 AND resize_to IS NOT NULL",
						2, argtypes, values, state, 1, &found);
	if (found && (int) state[0] != slots && slots != current)
		report_pending_resize(consumer, (int) state[0], current);
	if (!(found && (int) state[0] == slots) && slots != current)
	{
		old_expr = stream_catalog_text("SELECT slot_expr FROM stream_seq.consumer "
									   "WHERE stream = $1 AND consumer = $2",
									   2, argtypes, values);
		if (old_expr == NULL)
			elog(ERROR, "group \"%s\" has no slot expression", consumer);
		plan_slot_index(relid, consumer, old_expr, current, slots, &plan);
		if (get_rel_relkind(relid) == RELKIND_PARTITIONED_TABLE)
			stmts = partitioned_index_statements(relid, &plan);
		else if (!OidIsValid(find_slot_index(relid, &plan, InvalidOid)))
			stmts = list_make1(slot_index_statement(&plan, true));
	}

	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
	if (stmts == NIL)
	{
		nulls[0] = true;
		out[0] = (Datum) 0;
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, out, nulls);
	}
	foreach(lc, stmts)
	{
		out[0] = CStringGetTextDatum((char *) lfirst(lc));
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, out, nulls);
	}
	return (Datum) 0;
}

/*
 * stream_seq_resize_group
 *		SQL: resize_group(stream, consumer, slots integer): change the slot
 *		count of a group while its workers run (see the top of the file).
 *		Needs to own the table, as create_group() does.  Returns whether
 *		the group has "slots" slots when it returns (false: the resize is
 *		pending until the old slots finish up to the fence).
 */
Datum
stream_seq_resize_group(PG_FUNCTION_ARGS)
{
	Oid			relid;
	char	   *consumer;
	int32		slots;
	int			current;
	int64		state[1];
	bool		found;
	char	   *old_expr;
	char	   *retired;
	bool		done;
	Oid			index;
	SlotIndexPlan plan;
	int64	   *rows;
	uint64		n;
	uint64		i;
	int64		fence;
	Oid			argtypes[5] = {REGCLASSOID, TEXTOID, INT4OID, INT8OID, OIDOID};
	Datum		values[5];

	check_resize_call(fcinfo, &relid, &consumer, &slots, &current);

	values[0] = ObjectIdGetDatum(relid);
	values[1] = CStringGetTextDatum(consumer);

	/*
	 * The index a finished resize left is dropped last, once the locks a
	 * resize waits for are held, and only if the table can be locked at
	 * once (drop_retired_index()).  An index this call retires (its switch)
	 * is left for the next call: workers may still be reading through it.
	 */
	retired = stream_catalog_text("SELECT retired_index FROM stream_seq.consumer "
								  "WHERE stream = $1 AND consumer = $2",
								  2, argtypes, values);

	/* from here on, one resize_group() or switch of the group at a time */
	stream_catalog_exec("SELECT slots::pg_catalog.int8 FROM stream_seq.consumer "
						"WHERE stream = $1 AND consumer = $2 FOR NO KEY UPDATE",
						2, argtypes, values, state, 1, &found);
	if (!found)					/* dropped (or its stream) while waited for */
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("consumer \"%s\" of stream table \"%s\" does not exist",
						consumer, stream_rel_name(relid))));
	current = (int) state[0];
	stream_catalog_exec("SELECT resize_to::pg_catalog.int8 FROM stream_seq.consumer "
						"WHERE stream = $1 AND consumer = $2 AND resize_to IS NOT NULL",
						2, argtypes, values, state, 1, &found);
	if (found)
	{
		char	   *pending;

		if ((int) state[0] == slots)
		{
			done = try_switch(relid, consumer);
			drop_retired_index(relid, consumer, retired);
			PG_RETURN_BOOL(done);
		}
		if (slots != current)
			report_pending_resize(consumer, (int) state[0], current);
		/* back to the current count: cancel, the old slots read on */
		pending = stream_catalog_text("SELECT resize_index FROM stream_seq.consumer "
									  "WHERE stream = $1 AND consumer = $2",
									  2, argtypes, values);
		stream_catalog_exec("UPDATE stream_seq.consumer "
							"SET resize_to = NULL, resize_fence = NULL, "
							"resize_index = NULL, resize_expr = NULL, resize_at = NULL "
							"WHERE stream = $1 AND consumer = $2",
							2, argtypes, values, NULL, 0, NULL);
		if (pending != NULL)
		{
			Oid			retire_types[3] = {REGCLASSOID, TEXTOID, TEXTOID};

			/* the cancelled index is retired too: dropped now or later */
			values[2] = CStringGetTextDatum(pending);
			retired = stream_catalog_text("UPDATE stream_seq.consumer SET retired_index = "
										  "CASE WHEN retired_index IS NULL THEN $3 "
										  "  ELSE retired_index || pg_catalog.chr(1) || $3 END "
										  "WHERE stream = $1 AND consumer = $2 "
										  "RETURNING retired_index",
										  3, retire_types, values);
		}
		drop_retired_index(relid, consumer, retired);
		PG_RETURN_BOOL(true);
	}
	if (slots == current)
	{
		drop_retired_index(relid, consumer, retired);
		PG_RETURN_BOOL(true);
	}

	/* step 1: the new index, then the fence */
	old_expr = stream_catalog_text("SELECT slot_expr FROM stream_seq.consumer "
								   "WHERE stream = $1 AND consumer = $2",
								   2, argtypes, values);
	if (old_expr == NULL)
		elog(ERROR, "group \"%s\" has no slot expression", consumer);

	/*
	 * The slot rows first, waiting for workers' uncommitted advances while
	 * no lock on the table is held; then the index, whose build keeps
	 * writers out only while it runs.
	 */
	n = stream_catalog_rows("UPDATE stream_seq.consumer_slot SET token = token + 1 "
							"WHERE stream = $1 AND consumer = $2 AND slot IN ("
							"  SELECT slot FROM stream_seq.consumer_slot "
							"   WHERE stream = $1 AND consumer = $2 ORDER BY slot FOR UPDATE) "
							"RETURNING position",
							2, argtypes, values, 1, &rows);

	plan_slot_index(relid, consumer, old_expr, current, slots, &plan);
	index = adopt_slot_index(relid, &plan);
	if (!OidIsValid(index))
		index = build_slot_index(relid, consumer, &plan);
	fence = stream_statement_horizon(stream_lookup(relid, false)) - 1;
	for (i = 0; i < n; i++)
		fence = Max(fence, rows[i]);

	values[2] = Int32GetDatum(slots);
	values[3] = Int64GetDatum(fence);
	values[4] = ObjectIdGetDatum(index);
	stream_catalog_exec("UPDATE stream_seq.consumer "
						"SET resize_to = $3, resize_fence = $4, "
						"resize_index = $5::pg_catalog.regclass::pg_catalog.text, "
						"resize_expr = pg_catalog.pg_get_indexdef($5, 1, false), "
						"resize_at = pg_catalog.now() "
						"WHERE stream = $1 AND consumer = $2",
						5, argtypes, values, NULL, 0, NULL);
	done = try_switch(relid, consumer);
	drop_retired_index(relid, consumer, retired);
	PG_RETURN_BOOL(done);
}
