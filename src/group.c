/*-------------------------------------------------------------------------
 *
 * group.c
 *	  Consumer groups: one consumer whose rows are split into slots by a
 *	  stable hash of a key, so that several workers share the work while
 *	  the rows of one key stay in order; leases with fencing; explicit
 *	  resets; and drop_consumer(), which drops a plain consumer or a group
 *	  with its slots, workers, parked rows and the indexes its resizes
 *	  made (resize.c).  The slowest consumer of a stream, plain or group,
 *	  which retention must not pass, is found in consumer.c, below the
 *	  files that need it.
 *
 * A group is a row of stream_seq.consumer with "slots" set, and one row per
 * slot in stream_seq.consumer_slot: its position (the last number of the
 * slot's rows finished), the worker holding its lease, until when, and a
 * fencing token.  Row r belongs to slot slot_of(key(r), slots); an index on
 * (that expression, the stream column), made by create_group(), finds a
 * slot's rows.
 *
 * Leases and fencing.  claim() records that the worker is alive for the
 * length of its lease (stream_seq.consumer_worker) and gives it its share
 * of the slots (the slots divided by the workers alive; the first workers
 * by name get one more when it does not divide, so that the shares add up
 * to the slots): it renews the leases it holds, gives back those above its
 * share, and takes free or expired ones, adding 1 to a slot's token
 * whenever the slot changes hands.  So when a worker joins, the others give
 * slots back at their next claim, and it takes them at its own.  Every
 * statement that locks several slot rows locks them in slot order, as
 * claim() does, so that none deadlocks with another.
 * A worker reads and advances a slot with the token it got; advance_slot()
 * locks the slot's row and fails with SQLSTATE SS001, changing nothing, if
 * the token changed.  Since the advance is in the worker's transaction, a
 * worker that lost its slot cannot commit work for it; and since claim()
 * locks the same rows, a slot changes hands only between a worker's
 * transactions: the next holder starts from the position the last one
 * committed.  No row is applied twice by committed work, none is skipped.
 * Time (the lease) only decides when a slot may be taken over; the token
 * alone decides whether an advance is allowed.
 *
 * Parked rows, retries and dead letters are in parking.c.  Per-key order
 * through retries (set_key_order(), parking.c) changes the read: a page
 * holds one row of each key, and while a key of the slot is held the read
 * parks the key's rows as held rows and moves the slot past them
 * (stream_seq_key_order_page(), which walks the slot's keys with plans
 * kept for the session).
 *
 * Privileges, as for consumers: the creating role owns a group; claim,
 * read and advance need SELECT on the stream table and to be (a member of)
 * the group's owner or the table's owner.  create_group() needs to own the
 * table, as it creates an index on it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/table.h"
#include "common/hashfn.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "nodes/nodeFuncs.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

#include "stream_seq.h"
#include "group.h"
#include "catalog.h"
#include "horizon.h"
#include "consumer.h"
#include "resize.h"
#include "stats.h"

PG_FUNCTION_INFO_V1(stream_seq_create_group);
PG_FUNCTION_INFO_V1(stream_seq_drop_consumer);
PG_FUNCTION_INFO_V1(stream_seq_claim);
PG_FUNCTION_INFO_V1(stream_seq_release);
PG_FUNCTION_INFO_V1(stream_seq_slot_state);
PG_FUNCTION_INFO_V1(stream_seq_advance_slot);
PG_FUNCTION_INFO_V1(stream_seq_slot_position);
PG_FUNCTION_INFO_V1(stream_seq_reset);
PG_FUNCTION_INFO_V1(stream_seq_slot_backlog);
PG_FUNCTION_INFO_V1(stream_seq_key_order_page);

/* Slots per group: enough for many workers, few enough to list. */
#define MAX_SLOTS 1024

/*
 * group_lookup
 *		The slot count and owner of group "consumer"; an error if it does
 *		not exist or is a plain consumer.  Checks that the caller may read
 *		the stream and owns the group (or the table).
 */
static int
group_lookup(Oid relid, const char *consumer)
{
	Oid			owner;
	int			slots;

	stream_check_select(relid);
	(void) stream_consumer_lookup(relid, consumer, false, &owner, &slots);
	stream_check_consumer_owner(relid, consumer, owner);
	if (slots == 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("consumer \"%s\" of stream table \"%s\" is not a group",
						consumer, stream_rel_name(relid)),
				 errhint("Use stream_seq.read() and advance() for a consumer without slots.")));
	return slots;
}

/*
 * check_slot
 *		A slot number of a group of "slots" slots.
 */
static void
check_slot(int slot, int slots)
{
	if (slot < 0 || slot >= slots)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("slot %d does not exist", slot),
				 errdetail("The group has slots 0 to %d.", slots - 1)));
}

/*
 * report_lease_lost
 *		The error of a worker whose slot changed hands: its work on the slot
 *		must roll back.
 */
static void
report_lease_lost(const char *consumer, int slot, int64 token, int64 current)
{
	ereport(ERROR,
			(errcode(ERRCODE_STREAM_LEASE_LOST),
			 errmsg("lease on slot %d of group \"%s\" was lost", slot, consumer),
			 errdetail("The slot was claimed with token " INT64_FORMAT "; its token is now " INT64_FORMAT ".",
					   token, current),
			 errhint("Roll back, and call stream_seq.claim() again.")));
}

/*
 * check_group_slot
 *		check_slot() for a worker's slot: one that a resize removed was
 *		lost (SS001, claim again), not a slot that never existed.
 */
static void
check_group_slot(Oid relid, const char *consumer, int slot, int slots)
{
	if (slot >= slots && stream_resize_removed_slot(relid, consumer, slot))
		ereport(ERROR,
				(errcode(ERRCODE_STREAM_LEASE_LOST),
				 errmsg("lease on slot %d of group \"%s\" was lost", slot, consumer),
				 errdetail("A resize of the group to %d slots removed the slot.", slots),
				 errhint("Roll back, and call stream_seq.claim() again.")));
	check_slot(slot, slots);
}

/*
 * printed_by_setting
 *		The setting that changes how a value of type "type" (or of the
 *		type a domain "type" is over) prints as text although its output
 *		function is immutable, so that PostgreSQL lets an index take it;
 *		NULL if none does.
 */
static const char *
printed_by_setting(Oid type)
{
	switch (getBaseType(type))
	{
		case BYTEAOID:
			return "bytea_output";
		case FLOAT4OID:
		case FLOAT8OID:
		case POINTOID:
		case LSEGOID:
		case PATHOID:
		case BOXOID:
		case POLYGONOID:
		case LINEOID:
		case CIRCLEOID:
			return "extra_float_digits";
		default:
			return NULL;
	}
}

/*
 * find_setting_dependent_text
 *		expression_tree_walker callback: stops at a value printed as text
 *		(a cast through its output function) whose text depends on a
 *		setting, leaving its type in *context.
 */
static bool
find_setting_dependent_text(Node *node, void *context)
{
	if (node == NULL)
		return false;
	if (IsA(node, CoerceViaIO))
	{
		Oid			from = exprType((Node *) ((CoerceViaIO *) node)->arg);

		if (printed_by_setting(from) != NULL)
		{
			*(Oid *) context = from;
			return true;
		}
	}
	return expression_tree_walker(node, find_setting_dependent_text, context);
}

/*
 * refuse_setting_dependent_key
 *		A group's slot of a row is the hash of its key printed as text,
 *		computed by whichever session makes the row's index entry (or
 *		reads without the index).  A key whose text depends on a setting
 *		of the session (bytea_output, extra_float_digits) would put one
 *		key's rows into different slots, read by different workers out of
 *		order: refused, with the spelling that does not depend on one.
 */
static void
refuse_setting_dependent_key(Oid index, const char *key, const char *consumer)
{
	Relation	irel = index_open(index, AccessShareLock);
	List	   *exprs = RelationGetIndexExpressions(irel);
	Oid			type = InvalidOid;

	index_close(irel, AccessShareLock);
	if (!find_setting_dependent_text((Node *) exprs, &type))
		return;
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_OBJECT_DEFINITION),
			 errmsg("key \"%s\" of group \"%s\" prints a value of type %s, whose text depends on setting \"%s\"",
					key, consumer, format_type_be(type), printed_by_setting(type)),
			 errdetail("The slot of a row is computed from its key as text; sessions with other settings would put the rows of one key into different slots."),
			 getBaseType(type) == BYTEAOID ?
			 errhint("Use encode(%s, 'hex') as the key.", key) :
			 errhint("Cast the key to numeric, or use a key of another type.")));
}

/*
 * stream_seq_create_group
 *		SQL: create_group(stream, consumer, key text, slots integer,
 *		start_after bigint DEFAULT 0).  Creates the group, its slots, all
 *		positioned after start_after, and the index on (slot of key,
 *		stream column).  The key is an expression over the table's columns
 *		(a column name, usually); the index makes it valid: immutable,
 *		using only the table's columns.  Needs to own the table.
 */
Datum
stream_seq_create_group(PG_FUNCTION_ARGS)
{
	Oid			relid;
	char	   *consumer;
	char	   *key;
	int32		slots;
	int64		start_after;
	StreamRef  *ref;
	int64		horizon;
	char	   *table;
	char	   *column;
	char	   *index_name;
	Oid			index;
	Oid			argtypes[6] = {REGCLASSOID, TEXTOID, INT8OID, OIDOID, INT4OID, OIDOID};
	Datum		values[6];

	stream_check_not_null(fcinfo, 5, "stream table, group name, key, slots and start_after");
	relid = PG_GETARG_OID(0);
	consumer = text_to_cstring(PG_GETARG_TEXT_PP(1));
	key = text_to_cstring(PG_GETARG_TEXT_PP(2));
	slots = PG_GETARG_INT32(3);
	start_after = PG_GETARG_INT64(4);
	ref = stream_lookup(relid, false);

	if (!pg_class_ownercheck(relid, GetUserId()))
		aclcheck_error(ACLCHECK_NOT_OWNER, OBJECT_TABLE, stream_rel_name(relid));
	stream_check_consumer_name(consumer);
	if (slots < 1 || slots > MAX_SLOTS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("a group must have between 1 and %d slots", MAX_SLOTS)));
	if (key[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the key of a group must not be empty")));

	start_after = Max(start_after, stream_catalog_first(relid) - 1);
	horizon = stream_statement_horizon(ref);
	if (start_after >= horizon)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("cannot start group \"%s\" after " INT64_FORMAT,
						consumer, start_after),
				 errdetail("The horizon of stream table \"%s\" is " INT64_FORMAT "; a position must be below it.",
						   stream_rel_name(relid), horizon)));

	values[0] = ObjectIdGetDatum(relid);
	values[1] = CStringGetTextDatum(consumer);
	if (stream_catalog_exec("SELECT 1 FROM stream_seq.consumer WHERE stream = $1 AND consumer = $2",
							2, argtypes, values, NULL, 0, NULL) > 0)
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("consumer \"%s\" of stream table \"%s\" already exists",
						consumer, stream_rel_name(relid))));

	/* the index on the slot expression, which also validates the key */
	table = stream_qualified_name(relid);
	column = get_attname(relid, ref->seq_attnum, false);
	index_name = psprintf("%s_%s_slot_idx", stream_clip_name(stream_rel_name(relid), 30),
						  stream_clip_name(consumer, 20));
	{
		char	   *base = index_name;
		int			suffix = 0;

		while (OidIsValid(get_relname_relid(index_name, get_rel_namespace(relid))))
			index_name = psprintf("%s%d", base, ++suffix);
	}
	stream_caller_exec(psprintf("CREATE INDEX %s ON %s "
								"((stream_seq.slot_of((%s)::pg_catalog.text, %d)), %s) "
								"WHERE %s > 0",
								quote_identifier(index_name), table, key, slots,
								quote_identifier(column), quote_identifier(column)),
					   0, NULL, NULL);
	CommandCounterIncrement();
	index = get_relname_relid(index_name, get_rel_namespace(relid));
	if (!OidIsValid(index))
		elog(ERROR, "index \"%s\" of group \"%s\" is missing", index_name, consumer);
	refuse_setting_dependent_key(index, key, consumer);

	/*
	 * The slot expression is kept as PostgreSQL prints the index's first
	 * column: what read_slot() filters by, so that the index serves it.
	 */
	values[0] = ObjectIdGetDatum(relid);
	values[1] = CStringGetTextDatum(consumer);
	values[2] = Int64GetDatum(start_after);
	stream_lock_role(GetUserId());	/* against a concurrent DROP ROLE */
	values[3] = ObjectIdGetDatum(GetUserId());
	values[4] = Int32GetDatum(slots);
	values[5] = ObjectIdGetDatum(index);
	stream_catalog_hold(relid, NULL);
	if (stream_catalog_exec(psprintf("INSERT INTO stream_seq.consumer "
									 "(stream, consumer, position, owner, slots, slot_index, slot_expr) "
									 "VALUES ($1, $2, $3, $4, $5, %s, "
									 "pg_catalog.pg_get_indexdef($6, 1, false)) "
									 "ON CONFLICT DO NOTHING",
									 stream_slot_index_is_name() ?
									 "$6::pg_catalog.regclass::pg_catalog.text" : "$6"),
							6, argtypes, values, NULL, 0, NULL) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("consumer \"%s\" of stream table \"%s\" already exists",
						consumer, stream_rel_name(relid))));
	stream_catalog_exec("INSERT INTO stream_seq.consumer_slot (stream, consumer, slot, position) "
						"SELECT $1, $2, s, $3 FROM pg_catalog.generate_series(0, $5 - 1) s",
						5, argtypes, values, NULL, 0, NULL);
	PG_RETURN_VOID();
}

/*
 * stream_group_refresh_slot_exprs
 *		After ALTER TABLE on stream "relid": the slot expression each group
 *		keeps is the first column of its index as PostgreSQL prints it,
 *		which a RENAME of the key's column (or a change of its type)
 *		changes in the index but not in the kept copy; every read of the
 *		group then failed with 42703 on the old name.  So the copy is
 *		printed again from the index, in the command's transaction.
 */
void
stream_group_refresh_slot_exprs(Oid relid)
{
	Oid			argtypes[1] = {REGCLASSOID};
	Datum		values[1];

	if (!stream_have_groups())
		return;
	values[0] = ObjectIdGetDatum(relid);
	stream_catalog_exec("UPDATE stream_seq.consumer c SET slot_expr = d.printed "
						"  FROM (SELECT consumer, pg_catalog.pg_get_indexdef("
						"          pg_catalog.to_regclass(slot_index::pg_catalog.text), 1, false) AS printed "
						"          FROM stream_seq.consumer WHERE stream = $1 AND slots IS NOT NULL) d "
						" WHERE c.stream = $1 AND c.consumer = d.consumer "
						"   AND d.printed IS NOT NULL AND d.printed <> c.slot_expr",
						1, argtypes, values, NULL, 0, NULL);
}

/*
 * stream_seq_drop_consumer
 *		SQL: drop_consumer(stream, consumer).
 */
Datum
stream_seq_drop_consumer(PG_FUNCTION_ARGS)
{
	Oid			relid;
	char	   *consumer;
	Oid			argtypes[2] = {REGCLASSOID, TEXTOID};
	Datum		values[2];
	Oid			owner;
	char	   *index;

	stream_check_not_null(fcinfo, 2, "stream table and consumer name");
	relid = PG_GETARG_OID(0);
	consumer = text_to_cstring(PG_GETARG_TEXT_PP(1));
	(void) stream_lookup(relid, false);
	(void) stream_consumer_lookup(relid, consumer, true, &owner, NULL);
	stream_check_consumer_owner(relid, consumer, owner);

	values[0] = ObjectIdGetDatum(relid);
	values[1] = CStringGetTextDatum(consumer);
	/* its slots, workers and parked rows first (no foreign key: catalog.c) */
	if (stream_have_groups())
	{
		/* and the indexes its resizes made (resize.c) */
		stream_resize_drop_indexes(relid, consumer);
		stream_catalog_exec("DELETE FROM stream_seq.parked WHERE stream = $1 AND consumer = $2",
							2, argtypes, values, NULL, 0, NULL);
		stream_catalog_exec("DELETE FROM stream_seq.consumer_worker WHERE stream = $1 AND consumer = $2",
							2, argtypes, values, NULL, 0, NULL);
		stream_catalog_exec("DELETE FROM stream_seq.consumer_slot WHERE stream = $1 AND consumer = $2",
							2, argtypes, values, NULL, 0, NULL);
	}
	index = stream_catalog_text("DELETE FROM stream_seq.consumer "
								"WHERE stream = $1 AND consumer = $2 "
								"RETURNING slot_index::pg_catalog.text",
								2, argtypes, values);
	/* a group's index on its slot expression goes with it, if still there */
	stream_drop_group_index(relid, index);
	PG_RETURN_VOID();
}

/*
 * check_lease
 *		A lease: longer than zero, at most a day.
 */
static void
check_lease(Interval *lease)
{
	int64		usecs;

	if (lease->month != 0 || lease->day < 0 || lease->day > 1 ||
		lease->time < 0)
		usecs = -1;
	else
		usecs = lease->day * USECS_PER_DAY + lease->time;
	if (usecs <= 0 || usecs > USECS_PER_DAY)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("a lease must be longer than zero and at most one day")));
}

/*
 * stream_seq_claim
 *		SQL: claim(stream, consumer, worker text, lease interval DEFAULT
 *		'30 seconds') RETURNS TABLE (slot integer, token bigint): the
 *		worker's share of the group's slots, leased for "lease".  Call it
 *		again within the lease to renew; it also rebalances (see the top of
 *		the file).  Changes take effect when the caller's transaction
 *		commits.
 */
Datum
stream_seq_claim(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Oid			relid;
	char	   *consumer;
	char	   *worker;
	int			slots;
	Oid			argtypes[4] = {REGCLASSOID, TEXTOID, TEXTOID, INTERVALOID};
	Datum		values[4];
	int64	   *rows;
	uint64		n;
	uint64		i;
	int64		alive[2];		/* workers alive, and how many sort before it */
	int			share;
	int			kept = 0;

	stream_check_not_null(fcinfo, 4, "stream table, group name, worker and lease");
	relid = PG_GETARG_OID(0);
	consumer = text_to_cstring(PG_GETARG_TEXT_PP(1));
	worker = text_to_cstring(PG_GETARG_TEXT_PP(2));
	check_lease(PG_GETARG_INTERVAL_P(3));
	if (worker[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("worker name must not be empty")));
	(void) stream_lookup(relid, false);
	slots = group_lookup(relid, consumer);
	/* a pending resize whose old slots are done switches here (resize.c) */
	if (stream_resize_try_switch(relid, consumer))
		slots = group_lookup(relid, consumer);

	InitMaterializedSRF(fcinfo, 0);
	values[0] = ObjectIdGetDatum(relid);
	values[1] = CStringGetTextDatum(consumer);
	values[2] = CStringGetTextDatum(worker);
	values[3] = PG_GETARG_DATUM(3);

	/*
	 * The worker says it is alive for the length of its lease; then every
	 * slot of the group is locked, and the workers alive now share them.
	 * Workers gone for an hour are forgotten.
	 */
	stream_catalog_hold(relid, consumer);
	stream_catalog_exec("INSERT INTO stream_seq.consumer_worker (stream, consumer, worker, alive_until) "
						"VALUES ($1, $2, $3, pg_catalog.clock_timestamp() + $4) "
						"ON CONFLICT (stream, consumer, worker) "
						"DO UPDATE SET alive_until = excluded.alive_until",
						4, argtypes, values, NULL, 0, NULL);
	n = stream_catalog_rows("SELECT slot, "
							"(worker = $3 AND lease_until > pg_catalog.clock_timestamp())::int, "
							"(worker IS NOT NULL AND worker <> $3 "
							" AND lease_until > pg_catalog.clock_timestamp())::int "
							"FROM stream_seq.consumer_slot "
							"WHERE stream = $1 AND consumer = $2 ORDER BY slot FOR UPDATE",
							3, argtypes, values, 3, &rows);
	stream_catalog_exec("DELETE FROM stream_seq.consumer_worker "
						"WHERE stream = $1 AND consumer = $2 "
						"AND alive_until < pg_catalog.clock_timestamp() - interval '1 hour'",
						2, argtypes, values, NULL, 0, NULL);
	stream_catalog_exec("SELECT pg_catalog.count(*), "
						"pg_catalog.count(*) FILTER (WHERE worker < $3) "
						"FROM stream_seq.consumer_worker "
						"WHERE stream = $1 AND consumer = $2 "
						"AND alive_until > pg_catalog.clock_timestamp()",
						3, argtypes, values, alive, 2, NULL);
	alive[0] = Max(alive[0], 1);
	share = slots / (int) alive[0] + (alive[1] < slots % alive[0] ? 1 : 0);

	/* renew what it holds, up to its share; give back the rest */
	for (i = 0; i < n; i++)
	{
		if (rows[i * 3 + 1] != 1)
			continue;
		if (kept < share)
		{
			kept++;
			continue;
		}
		rows[i * 3 + 1] = 0;
		{
			Oid			types[3] = {REGCLASSOID, TEXTOID, INT4OID};
			Datum		vals[3];

			vals[0] = values[0];
			vals[1] = values[1];
			vals[2] = Int32GetDatum((int32) rows[i * 3]);
			stream_catalog_exec("UPDATE stream_seq.consumer_slot "
								"SET worker = NULL, lease_until = NULL "
								"WHERE stream = $1 AND consumer = $2 AND slot = $3",
								3, types, vals, NULL, 0, NULL);
		}
	}
	/* take free or expired slots up to its share */
	for (i = 0; i < n && kept < share; i++)
	{
		Oid			types[5] = {REGCLASSOID, TEXTOID, TEXTOID, INTERVALOID, INT4OID};
		Datum		vals[5];

		if (rows[i * 3 + 1] == 1 || rows[i * 3 + 2] == 1)
			continue;
		vals[0] = values[0];
		vals[1] = values[1];
		vals[2] = values[2];
		vals[3] = values[3];
		vals[4] = Int32GetDatum((int32) rows[i * 3]);
		stream_catalog_exec("UPDATE stream_seq.consumer_slot "
							"SET worker = $3, token = token + 1 "
							"WHERE stream = $1 AND consumer = $2 AND slot = $5",
							5, types, vals, NULL, 0, NULL);
		rows[i * 3 + 1] = 1;
		kept++;
	}

	/* lease what it holds now, and return it */
	n = stream_catalog_rows("UPDATE stream_seq.consumer_slot "
							"SET lease_until = pg_catalog.clock_timestamp() + $4 "
							"WHERE stream = $1 AND consumer = $2 AND worker = $3 "
							"RETURNING slot, token",
							4, argtypes, values, 2, &rows);
	for (i = 0; i < n; i++)
	{
		Datum		out[2];
		bool		nulls[2] = {false, false};

		out[0] = Int32GetDatum((int32) rows[i * 2]);
		out[1] = Int64GetDatum(rows[i * 2 + 1]);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, out, nulls);
	}
	return (Datum) 0;
}

/*
 * stream_seq_release
 *		SQL: release(stream, consumer, worker): give back every slot the
 *		worker holds (a worker that stops cleanly), so that others can take
 *		them without waiting for the leases to end.
 */
Datum
stream_seq_release(PG_FUNCTION_ARGS)
{
	Oid			relid;
	char	   *consumer;
	Oid			argtypes[3] = {REGCLASSOID, TEXTOID, TEXTOID};
	Datum		values[3];

	stream_check_not_null(fcinfo, 3, "stream table, group name and worker");
	relid = PG_GETARG_OID(0);
	consumer = text_to_cstring(PG_GETARG_TEXT_PP(1));
	(void) stream_lookup(relid, false);
	(void) group_lookup(relid, consumer);

	values[0] = ObjectIdGetDatum(relid);
	values[1] = CStringGetTextDatum(consumer);
	values[2] = PointerGetDatum(PG_GETARG_TEXT_PP(2));
	stream_catalog_exec("UPDATE stream_seq.consumer_slot "
						"SET worker = NULL, lease_until = NULL "
						"WHERE stream = $1 AND consumer = $2 AND slot IN ("
						"  SELECT slot FROM stream_seq.consumer_slot "
						"   WHERE stream = $1 AND consumer = $2 AND worker = $3 "
						"   ORDER BY slot FOR UPDATE)",
						3, argtypes, values, NULL, 0, NULL);
	stream_catalog_exec("DELETE FROM stream_seq.consumer_worker "
						"WHERE stream = $1 AND consumer = $2 AND worker = $3",
						3, argtypes, values, NULL, 0, NULL);
	PG_RETURN_VOID();
}

/*
 * slot_row
 *		Position and token of a slot; with "for_update" its row is locked
 *		until the end of the caller's transaction.
 */
static int64
slot_row(Oid relid, const char *consumer, int slot, bool for_update,
		 int64 *token)
{
	Oid			argtypes[3] = {REGCLASSOID, TEXTOID, INT4OID};
	Datum		values[3];
	int64		row[2];
	bool		found;

	values[0] = ObjectIdGetDatum(relid);
	values[1] = CStringGetTextDatum(consumer);
	values[2] = Int32GetDatum(slot);
	stream_catalog_exec(for_update ?
						"SELECT position, token FROM stream_seq.consumer_slot "
						"WHERE stream = $1 AND consumer = $2 AND slot = $3 FOR UPDATE" :
						"SELECT position, token FROM stream_seq.consumer_slot "
						"WHERE stream = $1 AND consumer = $2 AND slot = $3",
						3, argtypes, values, row, 2, &found);
	if (!found)
		ereport(ERROR,
				(errcode(ERRCODE_STREAM_LEASE_LOST),
				 errmsg("lease on slot %d of group \"%s\" was lost", slot, consumer),
				 errdetail("A resize of the group removed the slot."),
				 errhint("Roll back, and call stream_seq.claim() again.")));
	*token = row[1];
	return row[0];
}

/*
 * stream_seq_slot_state
 *		SQL: _slot_state(stream, consumer, slot, token) RETURNS (position,
 *		slot_expr, seq_column), for read_slot(): fails with SS001 if the
 *		token is not the slot's (the worker lost it), so that a fenced
 *		worker stops at its next read.
 */
Datum
stream_seq_slot_state(PG_FUNCTION_ARGS)
{
	Oid			relid;
	char	   *consumer;
	int32		slot;
	int64		token;
	int64		current;
	int64		position;
	int			slots;
	StreamRef  *ref;
	TupleDesc	tupdesc;
	Datum		values[5];
	bool		nulls[5] = {false, false, false, false, false};
	Oid			argtypes[2] = {REGCLASSOID, TEXTOID};
	Datum		args[2];
	char	   *slot_expr;

	stream_check_not_null(fcinfo, 4, "stream table, group name, slot and token");
	relid = PG_GETARG_OID(0);
	consumer = text_to_cstring(PG_GETARG_TEXT_PP(1));
	slot = PG_GETARG_INT32(2);
	token = PG_GETARG_INT64(3);
	/* the page's query locks the table too; a stream dropped is 42P01 */
	ref = stream_lookup_locked(relid, AccessShareLock);
	slots = group_lookup(relid, consumer);
	check_group_slot(relid, consumer, slot, slots);

	position = slot_row(relid, consumer, slot, false, &current);
	if (current != token)
		report_lease_lost(consumer, slot, token, current);

	args[0] = ObjectIdGetDatum(relid);
	args[1] = CStringGetTextDatum(consumer);
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	/*
	 * and whether the group keeps per-key order (parking.c), where the SQL
	 * objects (0.8.0 and later) ask
	 */
	if (tupdesc->natts > 4)
	{
		int64		key_order = 0;

		slot_expr = stream_catalog_text_row("SELECT slot_expr, (key_order IS NOT NULL)::pg_catalog.int4::pg_catalog.int8 "
											"FROM stream_seq.consumer "
											"WHERE stream = $1 AND consumer = $2",
											2, argtypes, args, &key_order, 1);
		values[4] = BoolGetDatum(key_order == 1);
	}
	else
		slot_expr = stream_catalog_text("SELECT slot_expr FROM stream_seq.consumer "
										"WHERE stream = $1 AND consumer = $2",
										2, argtypes, args);
	values[0] = Int64GetDatum(position);
	values[1] = CStringGetTextDatum(slot_expr);
	values[2] = CStringGetDatum(get_attname(relid, ref->seq_attnum, false));
	values[2] = DirectFunctionCall1(namein, values[2]);
	/* since 0.5.0: no row above the fence of a pending resize (resize.c) */
	if (tupdesc->natts > 3)
	{
		int64		fence = stream_resize_fence(relid, consumer);

		values[3] = Int64GetDatum(fence);
		nulls[3] = fence < 0;
	}
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

/*
 * A set of key values (text), for the page of a group under per-key
 * order: the keys held, and the keys the page already has.  Entries are
 * found by a 64-bit hash of the value and compared in full.
 */
typedef struct KeySetEntry
{
	uint64		hash;			/* hash key: must be first */
	List	   *values;			/* the values (char *) with this hash */
} KeySetEntry;

static HTAB *
keyset_create(const char *name, MemoryContext cxt)
{
	HASHCTL		ctl;

	ctl.keysize = sizeof(uint64);
	ctl.entrysize = sizeof(KeySetEntry);
	ctl.hcxt = cxt;
	return hash_create(name, 64, &ctl, HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
}

/*
 * keyset_add
 *		Add "value" to the set (a copy in the set's context); returns
 *		whether it was there already.  With "only_look", does not add it.
 */
static bool
keyset_add(HTAB *set, MemoryContext cxt, const char *value, bool only_look)
{
	uint64		hash = hash_bytes_extended((const unsigned char *) value,
										   strlen(value), 0);
	KeySetEntry *entry;
	bool		found;
	ListCell   *lc;
	MemoryContext old;

	entry = hash_search(set, &hash, only_look ? HASH_FIND : HASH_ENTER, &found);
	if (!found)
	{
		if (entry != NULL)
			entry->values = NIL;
		else
			return false;
	}
	foreach(lc, entry->values)
	{
		if (strcmp((const char *) lfirst(lc), value) == 0)
			return true;
	}
	if (only_look)
		return false;
	old = MemoryContextSwitchTo(cxt);
	entry->values = lappend(entry->values, pstrdup(value));
	MemoryContextSwitchTo(old);
	return false;
}

/*
 * The plans of the page's queries under per-key order, kept for the
 * session: read_slot() runs them for every page.  Found by their text (a
 * walk's names the table and the group's key, so a renamed table or a
 * resized group gets a plan of its own); at most KEY_ORDER_PLANS, the
 * oldest dropped first.  PostgreSQL's plan cache revalidates them after
 * DDL.  Called within SPI_connect().
 */
#define KEY_ORDER_PLANS 32
typedef struct KeyOrderPlan
{
	char	   *sql;
	SPIPlanPtr	plan;
} KeyOrderPlan;
static KeyOrderPlan key_order_plans[KEY_ORDER_PLANS];
static int	key_order_nplans = 0;

static SPIPlanPtr
key_order_plan(const char *sql, int nargs, Oid *argtypes)
{
	SPIPlanPtr	plan;
	int			i;

	for (i = 0; i < key_order_nplans; i++)
	{
		if (strcmp(key_order_plans[i].sql, sql) == 0)
			return key_order_plans[i].plan;
	}
	plan = SPI_prepare(sql, nargs, argtypes);
	if (plan == NULL)
		elog(ERROR, "SPI_prepare failed for \"%s\"", sql);
	if (SPI_keepplan(plan) != 0)
		elog(ERROR, "SPI_keepplan failed");
	if (key_order_nplans == KEY_ORDER_PLANS)
	{
		SPI_freeplan(key_order_plans[0].plan);
		pfree(key_order_plans[0].sql);
		memmove(&key_order_plans[0], &key_order_plans[1],
				sizeof(KeyOrderPlan) * (KEY_ORDER_PLANS - 1));
		key_order_nplans--;
	}
	key_order_plans[key_order_nplans].sql = MemoryContextStrdup(TopMemoryContext, sql);
	key_order_plans[key_order_nplans].plan = plan;
	key_order_nplans++;
	return plan;
}

/* Rows of a slot the page's walk reads at a time. */
#define KEY_ORDER_BATCH 1000

/*
 * stream_seq_key_order_page
 *		SQL: _key_order_page(stream, consumer, slot, token, position,
 *		read_upto, max_rows) RETURNS (position, read_upto), for read_slot()
 *		of a group under per-key order (parking.c says why).  Walks the
 *		slot's rows after "position" in number order (below the horizon,
 *		and up to "read_upto" if not NULL):
 *
 *		- rows of a held key (one with a parked row that holds it) before
 *		  the first row the page can hand out are parked as held rows, and
 *		  the slot is moved past them, in the caller's transaction: a held
 *		  row is parked only together with the move of the slot past it, so
 *		  that it is handed out once, by due(), and the slot's other keys
 *		  are not held behind it;
 *		- the page then holds at most one row of each key, and ends before
 *		  the next row of a held key or of a key it already holds: a worker
 *		  that applies a page row by row and parks a row that fails must
 *		  not then apply a later row of the same key.
 *
 *		Returns the slot's position (moved, or as it was) and the last
 *		number the page may hold (the position itself: no row).  Rows whose
 *		key is NULL are not held and may repeat.
 */
Datum
stream_seq_key_order_page(PG_FUNCTION_ARGS)
{
	Oid			relid;
	char	   *consumer;
	int32		slot;
	int64		token;
	int64		position;
	int64		new_position;
	int64		page_end = -1;
	bool		have_upto;
	int64		read_upto = 0;
	int32		max_rows;
	int32		returned = 0;
	int			slots;
	StreamRef  *ref;
	char	   *slot_expr;
	char	   *key_expr;
	bool		until_released;
	const char *column;
	MemoryContext cxt;
	MemoryContext old;
	HTAB	   *held;
	HTAB	   *seen;
	List	   *held_seqs = NIL;
	List	   *held_keys = NIL;
	bool		done = false;
	SPIPlanPtr	walk = NULL;
	int32		batch;
	int64		after;
	Oid			argtypes[5] = {REGCLASSOID, TEXTOID, BOOLOID, INT8OID, INT8OID};
	Datum		args[5];
	int			save_nestlevel;
	Oid			save_userid;
	int			save_sec_context;
	uint64		i;
	TupleDesc	tupdesc;
	Datum		result[2];
	bool		result_nulls[2] = {false, false};

	stream_check_not_null(fcinfo, 5, "stream table, group name, slot, token and position");
	if (PG_ARGISNULL(6))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("max_rows must not be null")));
	relid = PG_GETARG_OID(0);
	consumer = text_to_cstring(PG_GETARG_TEXT_PP(1));
	slot = PG_GETARG_INT32(2);
	token = PG_GETARG_INT64(3);
	position = PG_GETARG_INT64(4);
	have_upto = !PG_ARGISNULL(5);
	if (have_upto)
		read_upto = PG_GETARG_INT64(5);
	max_rows = PG_GETARG_INT32(6);
	if (max_rows < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_rows must be at least 1")));
	ref = stream_lookup_locked(relid, AccessShareLock);
	slots = group_lookup(relid, consumer);
	check_group_slot(relid, consumer, slot, slots);
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");

	cxt = AllocSetContextCreate(CurrentMemoryContext, "stream_seq key order",
								ALLOCSET_DEFAULT_SIZES);
	held = keyset_create("stream_seq held keys", cxt);
	seen = keyset_create("stream_seq page keys", cxt);

	/*
	 * As the extension's owner: the group's policy and slot expression,
	 * then the keys it holds.
	 */
	args[0] = ObjectIdGetDatum(relid);
	args[1] = CStringGetTextDatum(consumer);
	stream_run_as(stream_catalog_owner(), &save_nestlevel, &save_userid,
				  &save_sec_context);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SPI_execute_plan(key_order_plan("SELECT key_order = 'until_released', slot_expr "
										"FROM stream_seq.consumer "
										"WHERE stream = $1 AND consumer = $2 "
										"AND key_order IS NOT NULL",
										2, argtypes),
						 args, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read group \"%s\"", consumer);
	if (SPI_processed == 0)
	{
		/* per-key order was turned off since read_slot() looked */
		SPI_finish();
		stream_run_as_end(save_nestlevel, save_userid, save_sec_context);
		MemoryContextDelete(cxt);
		result[0] = Int64GetDatum(position);
		result[1] = Int64GetDatum(read_upto);
		result_nulls[1] = !have_upto;
		PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, result, result_nulls)));
	}
	{
		bool		isnull;

		until_released = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0],
													SPI_tuptable->tupdesc, 1, &isnull));
		slot_expr = MemoryContextStrdup(cxt, SPI_getvalue(SPI_tuptable->vals[0],
														  SPI_tuptable->tupdesc, 2));
	}
	args[2] = BoolGetDatum(until_released);
	if (SPI_execute_plan(key_order_plan("SELECT DISTINCT q.key FROM stream_seq.parked q "
										"WHERE q.stream = $1 AND q.consumer = $2 "
										"AND q.key IS NOT NULL AND "
										STREAM_KEY_BLOCKS("q", "$3"),
										3, argtypes),
						 args, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read the held keys of group \"%s\"", consumer);
	for (i = 0; i < SPI_processed; i++)
	{
		char	   *value = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1);

		if (value != NULL)
			(void) keyset_add(held, cxt, value, false);
	}
	SPI_finish();
	stream_run_as_end(save_nestlevel, save_userid, save_sec_context);

	key_expr = stream_group_key_expr(slot_expr);
	if (key_expr == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("could not read the key of group \"%s\"", consumer),
				 errdetail("Its slot expression \"%s\" is not the one create_group() makes.",
						   slot_expr)));
	column = quote_identifier(get_attname(relid, ref->seq_attnum, false));

	/*
	 * The slot's rows, as the caller (as read_slot() reads them), in
	 * batches, until the page is complete.
	 */
	new_position = position;
	after = position;
	batch = Min(max_rows, KEY_ORDER_BATCH);
	save_nestlevel = NewGUCNestLevel();
	(void) set_config_option("search_path", "pg_catalog, pg_temp",
							 PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	stream_pin_key_output();
	stream_untracked_statements(false);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	while (!done)
	{
		Oid			walk_types[5] = {INT4OID, INT8OID, REGCLASSOID, INT8OID, INT4OID};
		Datum		walk_args[5];
		char		walk_nulls[5] = {' ', ' ', ' ', ' ', ' '};
		uint64		n;

		walk_args[0] = Int32GetDatum(slot);
		walk_args[1] = Int64GetDatum(after);
		walk_args[2] = ObjectIdGetDatum(relid);
		walk_args[3] = Int64GetDatum(read_upto);
		if (!have_upto)
			walk_nulls[3] = 'n';
		/*
		 * With no key held, the page needs max_rows rows: read no more at
		 * first; then (a run of held rows) bigger batches.
		 */
		walk_args[4] = Int32GetDatum(batch);
		if (walk == NULL)
			walk = key_order_plan(psprintf("SELECT t.%s, (%s)::pg_catalog.text FROM %s t "
										   "WHERE %s = $1 AND t.%s > $2 "
										   "AND t.%s < stream_seq.horizon($3) "
										   "AND ($4::pg_catalog.int8 IS NULL OR t.%s <= $4) "
										   "ORDER BY t.%s LIMIT $5",
										   column, key_expr, stream_source(relid),
										   slot_expr, column, column, column, column),
								  5, walk_types);
		if (SPI_execute_plan(walk, walk_args, walk_nulls, true, 0) != SPI_OK_SELECT)
			elog(ERROR, "could not read slot %d of group \"%s\"", slot, consumer);
		n = SPI_processed;
		for (i = 0; i < n && !done; i++)
		{
			bool		isnull;
			int64		seq = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i],
														  SPI_tuptable->tupdesc, 1, &isnull));
			char	   *key = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2);

			after = seq;
			if (key != NULL && keyset_add(held, cxt, key, true))
			{
				if (returned > 0)
				{
					done = true;
					break;
				}
				old = MemoryContextSwitchTo(cxt);
				held_seqs = lappend(held_seqs, palloc(sizeof(int64)));
				*(int64 *) llast(held_seqs) = seq;
				held_keys = lappend(held_keys, pstrdup(key));
				MemoryContextSwitchTo(old);
				new_position = seq;
				continue;
			}
			if (key != NULL && keyset_add(seen, cxt, key, false))
			{
				done = true;
				break;
			}
			page_end = seq;
			if (++returned >= max_rows)
				done = true;
		}
		if (n < (uint64) batch)
			done = true;
		batch = KEY_ORDER_BATCH;
	}
	SPI_finish();
	AtEOXact_GUC(false, save_nestlevel);

	/*
	 * The held rows and the slot's move past them, in the caller's
	 * transaction, if the worker still holds the slot.
	 */
	if (held_seqs != NIL)
	{
		int			nheld = list_length(held_seqs);
		Datum	   *seqs = palloc(sizeof(Datum) * nheld);
		Datum	   *keys = palloc(sizeof(Datum) * nheld);
		Oid			park_types[5] = {REGCLASSOID, TEXTOID, INT8ARRAYOID, TEXTARRAYOID,
		TIMESTAMPTZOID};
		Datum		park_args[5];
		Oid			move_types[4] = {REGCLASSOID, TEXTOID, INT4OID, INT8OID};
		Datum		move_args[4];
		int64		current;
		int			k = 0;
		ListCell   *lc1;
		ListCell   *lc2;

		if (slot_row(relid, consumer, slot, true, &current) != position ||
			current != token)
		{
			if (current != token)
				report_lease_lost(consumer, slot, token, current);
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("could not read slot %d of group \"%s\": it was advanced concurrently",
							slot, consumer),
					 errhint("The transaction might succeed if retried.")));
		}
		forboth(lc1, held_seqs, lc2, held_keys)
		{
			seqs[k] = Int64GetDatum(*(int64 *) lfirst(lc1));
			keys[k] = CStringGetTextDatum((char *) lfirst(lc2));
			k++;
		}
		park_args[0] = ObjectIdGetDatum(relid);
		park_args[1] = CStringGetTextDatum(consumer);
		park_args[2] = PointerGetDatum(construct_array(seqs, nheld, INT8OID, sizeof(int64),
													   FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
		park_args[3] = PointerGetDatum(construct_array(keys, nheld, TEXTOID, -1, false,
													   TYPALIGN_INT));
		park_args[4] = TimestampTzGetDatum(GetCurrentTimestamp());
		stream_catalog_hold(relid, consumer);
		stream_catalog_exec("INSERT INTO stream_seq.parked "
							"(stream, consumer, seq, attempts, key, held, first_failed, last_failed) "
							"SELECT $1, $2, h.seq, 0, h.key, true, $5, $5 "
							"  FROM ROWS FROM (pg_catalog.unnest($3), pg_catalog.unnest($4)) AS h (seq, key) "
							"ON CONFLICT (stream, consumer, seq) DO NOTHING",
							5, park_types, park_args, NULL, 0, NULL);
		move_args[0] = ObjectIdGetDatum(relid);
		move_args[1] = CStringGetTextDatum(consumer);
		move_args[2] = Int32GetDatum(slot);
		move_args[3] = Int64GetDatum(new_position);
		stream_catalog_exec("UPDATE stream_seq.consumer_slot "
							"SET position = $4, advanced_at = pg_catalog.now() "
							"WHERE stream = $1 AND consumer = $2 AND slot = $3",
							4, move_types, move_args, NULL, 0, NULL);
	}
	MemoryContextDelete(cxt);

	result[0] = Int64GetDatum(new_position);
	result[1] = Int64GetDatum(returned > 0 ? page_end : new_position);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, result, result_nulls)));
}

/*
 * stream_seq_advance_slot
 *		SQL: advance_slot(stream, consumer, slot, token, to_position): move
 *		the slot's position forward in the caller's transaction, if the
 *		worker still holds the slot: its row is locked and its token
 *		compared, and a changed token fails with SQLSTATE SS001, changing
 *		nothing.  As advance(): never backwards, never to or past the
 *		horizon; and while a resize is pending, never past its fence
 *		(SQLSTATE 55000).
 */
Datum
stream_seq_advance_slot(PG_FUNCTION_ARGS)
{
	Oid			relid;
	char	   *consumer;
	int32		slot;
	int64		token;
	int64		to_position;
	int64		current;
	int64		position;
	int			slots;
	StreamRef  *ref;
	Oid			argtypes[4] = {REGCLASSOID, TEXTOID, INT4OID, INT8OID};
	Datum		values[4];

	stream_check_not_null(fcinfo, 5, "stream table, group name, slot, token and position");
	relid = PG_GETARG_OID(0);
	consumer = text_to_cstring(PG_GETARG_TEXT_PP(1));
	slot = PG_GETARG_INT32(2);
	token = PG_GETARG_INT64(3);
	to_position = PG_GETARG_INT64(4);
	ref = stream_lookup(relid, false);
	slots = group_lookup(relid, consumer);
	check_group_slot(relid, consumer, slot, slots);

	position = slot_row(relid, consumer, slot, true, &current);
	if (current != token)
		report_lease_lost(consumer, slot, token, current);
	stream_check_advance(ref, psprintf("slot %d of group \"%s\"", slot, consumer),
						 position, to_position);
	if (to_position == position)
		PG_RETURN_VOID();

	/*
	 * While a resize is pending, read_slot() hands out no row above its
	 * fence, so no worker can have finished one: an advance past the fence
	 * would skip the slot's rows above it if the resize is then cancelled
	 * (the old slots read on from their positions).  Read under the slot
	 * row's lock, which resize_group() takes before it records a fence.
	 */
	{
		int64		fence = stream_resize_fence(relid, consumer);

		if (fence >= 0 && to_position > fence)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("cannot advance slot %d of group \"%s\" past the fence of a pending resize",
							slot, consumer),
					 errdetail("The fence is " INT64_FORMAT "; read_slot() returns no row above it until the resize switches or is cancelled.",
							   fence),
					 errhint("Advance only past rows read_slot() returned.")));
	}

	values[0] = ObjectIdGetDatum(relid);
	values[1] = CStringGetTextDatum(consumer);
	values[2] = Int32GetDatum(slot);
	values[3] = Int64GetDatum(to_position);
	stream_catalog_exec("UPDATE stream_seq.consumer_slot "
						"SET position = $4, advanced_at = pg_catalog.now() "
						"WHERE stream = $1 AND consumer = $2 AND slot = $3",
						4, argtypes, values, NULL, 0, NULL);
	PG_RETURN_VOID();
}

/*
 * stream_seq_slot_position
 *		SQL: slot_position(stream, consumer, slot): the last number the slot
 *		has finished; for wait().
 */
Datum
stream_seq_slot_position(PG_FUNCTION_ARGS)
{
	Oid			relid = PG_GETARG_OID(0);
	char	   *consumer = text_to_cstring(PG_GETARG_TEXT_PP(1));
	int32		slot = PG_GETARG_INT32(2);
	int64		token;

	(void) stream_lookup(relid, false);
	check_slot(slot, group_lookup(relid, consumer));
	PG_RETURN_INT64(slot_row(relid, consumer, slot, false, &token));
}

/*
 * stream_seq_reset
 *		SQL: reset(stream, consumer, to_position, slot integer DEFAULT
 *		NULL): move a consumer, one slot of a group, or every slot of a
 *		group (slot NULL) to "to_position", backwards or forwards, recording
 *		when, by whom and from where; the consumers and consumer_slots views
 *		show it.  For the consumer's owner or the table's owner.  Below the
 *		horizon; positions before the retained stream make read() say so.
 *
 *		A reset fences every worker in flight: a slot's token goes up by
 *		one, so the holder's advance_slot() fails with SS001 and it claims
 *		again; a plain consumer's worker that read before the reset fails
 *		its advance() with SS001 (consumer.c).  Otherwise a worker that
 *		read rows 6..10 before a reset to 0 would advance to 10 after it,
 *		and rows 1..5 would never be delivered again.
 */
Datum
stream_seq_reset(PG_FUNCTION_ARGS)
{
	Oid			relid;
	char	   *consumer;
	int64		to_position;
	Oid			owner;
	int			slots;
	int64		horizon;
	Oid			argtypes[5] = {REGCLASSOID, TEXTOID, INT8OID, OIDOID, INT4OID};
	Datum		values[5];
	char		nulls[5] = {' ', ' ', ' ', ' ', ' '};
	uint64		changed;

	stream_check_not_null(fcinfo, 3, "stream table, consumer name and position");
	relid = PG_GETARG_OID(0);
	consumer = text_to_cstring(PG_GETARG_TEXT_PP(1));
	to_position = PG_GETARG_INT64(2);
	stream_check_select(relid);
	horizon = stream_statement_horizon(stream_lookup(relid, false));
	(void) stream_consumer_lookup(relid, consumer, true, &owner, &slots);
	stream_check_consumer_owner(relid, consumer, owner);
	if (to_position < 0 || to_position >= horizon)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("cannot reset consumer \"%s\" of stream table \"%s\" to " INT64_FORMAT,
						consumer, stream_rel_name(relid), to_position),
				 errdetail("A position must be at least 0 and below the horizon, " INT64_FORMAT ".",
						   horizon)));
	if (!PG_ARGISNULL(3) && slots == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("consumer \"%s\" of stream table \"%s\" has no slots",
						consumer, stream_rel_name(relid))));
	if (!PG_ARGISNULL(3))
		check_slot(PG_GETARG_INT32(3), slots);

	values[0] = ObjectIdGetDatum(relid);
	values[1] = CStringGetTextDatum(consumer);
	values[2] = Int64GetDatum(to_position);
	values[3] = ObjectIdGetDatum(GetUserId());
	if (PG_ARGISNULL(3))
	{
		values[4] = (Datum) 0;
		nulls[4] = 'n';
	}
	else
		values[4] = Int32GetDatum(PG_GETARG_INT32(3));
	changed = stream_catalog_exec_nulls(slots == 0 ?
										"UPDATE stream_seq.consumer SET reset_from = position, position = $3, "
										"reset_at = pg_catalog.now(), reset_by = $4::pg_catalog.regrole, "
										"advanced_at = pg_catalog.now() "
										"WHERE stream = $1 AND consumer = $2 AND $5::int IS NULL" :
										"UPDATE stream_seq.consumer_slot SET reset_from = position, position = $3, "
										"reset_at = pg_catalog.now(), reset_by = $4::pg_catalog.regrole, "
										"advanced_at = pg_catalog.now(), token = token + 1 "
										"WHERE stream = $1 AND consumer = $2 AND slot IN ("
										"  SELECT slot FROM stream_seq.consumer_slot "
										"   WHERE stream = $1 AND consumer = $2 AND ($5::int IS NULL OR slot = $5) "
										"   ORDER BY slot FOR UPDATE)",
										5, argtypes, values, nulls);
	if (changed == 0)
		elog(ERROR, "consumer \"%s\" was not reset", consumer);
	PG_RETURN_VOID();
}

/* Rows counted by _slot_backlog at most: a monitoring figure, not a scan. */
#define BACKLOG_CAP 100000

/*
 * stream_seq_slot_backlog
 *		SQL: _slot_backlog(stream, consumer, slot, after) RETURNS bigint, for
 *		the consumer_slots view: how many rows of the slot lie after "after"
 *		and below the horizon (at most BACKLOG_CAP), counted through the
 *		group's index as the caller; NULL for a table the caller may not
 *		read.
 */
Datum
stream_seq_slot_backlog(PG_FUNCTION_ARGS)
{
	Oid			relid = PG_GETARG_OID(0);
	char	   *consumer = text_to_cstring(PG_GETARG_TEXT_PP(1));
	int32		slot = PG_GETARG_INT32(2);
	int64		after = PG_GETARG_INT64(3);
	StreamRef  *ref;
	Oid			catalog_types[2] = {REGCLASSOID, TEXTOID};
	Datum		catalog_values[2];
	char	   *slot_expr;
	const char *column;
	Oid			argtypes[3] = {INT4OID, INT8OID, REGCLASSOID};
	Datum		values[3];

	if (pg_class_aclcheck(relid, GetUserId(), ACL_SELECT) != ACLCHECK_OK)
		PG_RETURN_NULL();
	ref = stream_lookup_locked(relid, AccessShareLock);
	catalog_values[0] = ObjectIdGetDatum(relid);
	catalog_values[1] = CStringGetTextDatum(consumer);
	slot_expr = stream_catalog_text("SELECT slot_expr FROM stream_seq.consumer "
									"WHERE stream = $1 AND consumer = $2",
									2, catalog_types, catalog_values);
	if (slot_expr == NULL)
		PG_RETURN_NULL();
	column = quote_identifier(get_attname(relid, ref->seq_attnum, false));
	values[0] = Int32GetDatum(slot);
	values[1] = Int64GetDatum(after);
	values[2] = ObjectIdGetDatum(relid);
	PG_RETURN_INT64((int64) stream_caller_exec(psprintf("SELECT FROM %s t WHERE %s = $1 "
														"AND t.%s > $2 AND t.%s < stream_seq.horizon($3) "
														"LIMIT %d",
														stream_source(relid),
														slot_expr, column, column,
														BACKLOG_CAP),
											   3, argtypes, values));
}
