/*-------------------------------------------------------------------------
 *
 * consumer.c
 *	  Named consumers of a stream and their positions, kept in the table
 *	  stream_seq.consumer and changed in the caller's transaction, so that
 *	  processing a page and advancing past it commit or roll back together.
 *
 * Fencing.  A worker reads a page (read() calls position()) and advances
 * past it in the same transaction.  Whoever moves the consumer in between
 * (reset() by its owner, or a second worker that read the same page and
 * committed its advance first) makes the first worker's page stale: the
 * rows it processed are not the rows after the consumer's position any
 * more.  So each backend remembers, for its current transaction, the
 * position it last saw of each consumer, and advance() locks the
 * consumer's row and fails with SQLSTATE SS001, changing nothing, if the
 * position there is not the one remembered and was not set by this
 * transaction itself.  An advance in a transaction
 * that never looked at the position has nothing to compare and is not
 * fenced; groups are fenced by their tokens (group.c).
 *
 * Privileges: creating a consumer needs SELECT on the stream table; the
 * creating role owns the consumer.  Advancing or dropping it needs to be
 * (a member of) that role or the table's owner; advancing and reading also
 * need SELECT.  The SQL entry points run as the caller, check this, and
 * then write the table as its owner (stream_catalog_exec).
 *
 * Also what the layers above share of consumers (src/README.md): the
 * lookups and ownership checks that group.c, resize.c, parking.c and
 * roles.c start with, dropping the indexes a group made, and the slowest
 * consumer of a stream (a slot of a group counting as finished up to its
 * next row), which trim(), drop_partitions() and the retention policies
 * must not pass.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <ctype.h>

#include "access/table.h"
#include "catalog/index.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"

#include "access/xact.h"
#include "storage/proc.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "stream_seq.h"
#include "consumer.h"
#include "catalog.h"
#include "horizon.h"

/* The position this transaction last saw of one consumer. */
typedef struct SeenPosition
{
	Oid			relid;
	char	   *consumer;
	int64		position;
} SeenPosition;

/*
 * Positions seen, in TopTransactionContext; valid only while
 * seen_positions_lxid is the backend's local transaction id, so nothing
 * needs clearing at the end of a transaction.
 */
static List *seen_positions = NIL;
static LocalTransactionId seen_positions_lxid = InvalidLocalTransactionId;

PG_FUNCTION_INFO_V1(stream_seq_create_consumer);
PG_FUNCTION_INFO_V1(stream_seq_position);
PG_FUNCTION_INFO_V1(stream_seq_advance);

/*
 * report_unknown_consumer
 *		The error for a consumer name that does not exist on the stream.
 */
static void
report_unknown_consumer(Oid relid, const char *consumer)
{
	ereport(ERROR,
			(errcode(ERRCODE_UNDEFINED_OBJECT),
			 errmsg("consumer \"%s\" of stream table \"%s\" does not exist",
					consumer, stream_rel_name(relid))));
}

/*
 * stream_slot_index_is_name
 *		Whether stream_seq.consumer keeps a group's index by name (text,
 *		since 0.4.1) rather than as a regclass: a regclass in an
 *		extension's configuration table is resolved when pg_restore loads
 *		its rows, before the index exists, and the whole COPY failed.
 *		Readers write slot_index::text, which reads both.
 */
bool
stream_slot_index_is_name(void)
{
	Oid			consumer = get_relname_relid("consumer", stream_namespace(false));
	AttrNumber	attnum;

	if (!OidIsValid(consumer))
		return false;
	attnum = get_attnum(consumer, "slot_index");
	return attnum != InvalidAttrNumber && get_atttype(consumer, attnum) == TEXTOID;
}

/*
 * stream_have_groups
 *		Whether the extension's tables have what consumer groups need: a
 *		database not yet updated to 0.3.0 has plain consumers only.
 */
bool
stream_have_groups(void)
{
	Oid			nsp = stream_namespace(false);

	return OidIsValid(get_relname_relid("consumer_slot", nsp)) &&
		OidIsValid(get_relname_relid("parked", nsp));
}

/*
 * stream_have_key_order
 *		Whether the extension's tables have what per-key order needs: a
 *		database not yet updated to 0.8.0 parks rows without their key.
 */
bool
stream_have_key_order(void)
{
	Oid			parked = get_relname_relid("parked", stream_namespace(false));

	return OidIsValid(parked) && get_attnum(parked, "held") != InvalidAttrNumber;
}

/*
 * stream_group_key_expr
 *		The key of a group as an expression of type text over the table's
 *		columns, from its slot expression as create_group() and
 *		resize_group() make it: slot_of((key)::text, n).  NULL if the slot
 *		expression is not of that form.
 */
char *
stream_group_key_expr(const char *slot_expr)
{
	size_t		len = strlen(slot_expr);
	size_t		end;

	if (strncmp(slot_expr, "stream_seq.slot_of(", 19) != 0 ||
		len < 23 || slot_expr[len - 1] != ')')
		return NULL;
	/* back over the count: ", <digits>)" */
	end = len - 1;
	while (end > 19 && isdigit((unsigned char) slot_expr[end - 1]))
		end--;
	if (end == len - 1 || end < 21 || slot_expr[end - 1] != ' ' ||
		slot_expr[end - 2] != ',')
		return NULL;
	return pnstrdup(slot_expr + 19, end - 2 - 19);
}

/*
 * stream_pin_key_output
 *		Per-key order compares a key by its text, which the read and park()
 *		take in the worker's session: fix, until the caller's GUC nesting
 *		level (NewGUCNestLevel) is closed with AtEOXact_GUC, the settings
 *		that change the text of a value an index expression may print
 *		(bytea_output for bytea, extra_float_digits for float4 and float8),
 *		at their defaults, so that two workers, or one worker whose
 *		settings change, name a key alike.
 */
void
stream_pin_key_output(void)
{
	(void) set_config_option("bytea_output", "hex",
							 PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	(void) set_config_option("extra_float_digits", "1",
							 PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
}

/*
 * stream_resize_supported
 *		Whether the extension's tables can record a resize: before the
 *		update to 0.5.0 the consumer table has no columns for it.
 */
bool
stream_resize_supported(void)
{
	Oid			consumer = get_relname_relid("consumer", stream_namespace(false));

	return OidIsValid(consumer) &&
		get_attnum(consumer, "resize_to") != InvalidAttrNumber;
}

/*
 * stream_consumer_lookup
 *		Position, owner and slot count (0 for a plain consumer) of a
 *		consumer; with "for_update" the row is locked until the end of the
 *		caller's transaction, so that concurrent advances of one consumer
 *		take turns (or, under REPEATABLE READ, the later one fails with a
 *		serialization error).
 */
int64
stream_consumer_lookup(Oid relid, const char *consumer, bool for_update,
					   Oid *owner, int *slots)
{
	Oid			argtypes[2] = {REGCLASSOID, TEXTOID};
	Datum		values[2];
	int64		row[3];
	bool		found;

	values[0] = ObjectIdGetDatum(relid);
	values[1] = CStringGetTextDatum(consumer);
	stream_catalog_exec(psprintf("SELECT position, owner::oid::int8, %s FROM stream_seq.consumer "
								 "WHERE stream = $1 AND consumer = $2%s",
								 stream_have_groups() ? "coalesce(slots, 0)" : "0",
								 for_update ? " FOR UPDATE" : ""),
						2, argtypes, values, row, 3, &found);
	if (!found)
		report_unknown_consumer(relid, consumer);
	if (owner != NULL)
		*owner = (Oid) row[1];
	if (slots != NULL)
		*slots = (int) row[2];
	return row[0];
}

/*
 * plain_consumer_lookup
 *		stream_consumer_lookup for the functions of plain consumers: a group
 *		is read and advanced slot by slot (group.c).
 */
static int64
plain_consumer_lookup(Oid relid, const char *consumer, bool for_update,
					  Oid *owner)
{
	int			slots;
	int64		position = stream_consumer_lookup(relid, consumer, for_update,
												  owner, &slots);

	if (slots > 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("consumer \"%s\" of stream table \"%s\" is a group",
						consumer, stream_rel_name(relid)),
				 errhint("Read and advance a group slot by slot: stream_seq.claim(), read_slot() and advance_slot().")));
	return position;
}

/*
 * find_seen_position
 *		The entry of consumer "consumer" of stream "relid" among the
 *		positions this transaction saw, or NULL.
 */
static SeenPosition *
find_seen_position(Oid relid, const char *consumer)
{
	ListCell   *lc;

	if (seen_positions_lxid != STREAM_MY_LXID)
	{
		seen_positions = NIL;
		seen_positions_lxid = STREAM_MY_LXID;
	}
	foreach(lc, seen_positions)
	{
		SeenPosition *seen = lfirst(lc);

		if (seen->relid == relid && strcmp(seen->consumer, consumer) == 0)
			return seen;
	}
	return NULL;
}

/*
 * moved_here
 *		Whether the consumer's row was last written by this transaction (an
 *		advance() or reset() of its own, in a savepoint not rolled back):
 *		read from the row's xmin, which a rolled-back savepoint undoes with
 *		the row.
 */
static bool
moved_here(Oid relid, const char *consumer)
{
	Oid			argtypes[2] = {REGCLASSOID, TEXTOID};
	Datum		values[2];
	int64		xmin;
	bool		found;

	values[0] = ObjectIdGetDatum(relid);
	values[1] = CStringGetTextDatum(consumer);
	stream_catalog_exec("SELECT xmin::pg_catalog.text::pg_catalog.int8 "
						"FROM stream_seq.consumer WHERE stream = $1 AND consumer = $2",
						2, argtypes, values, &xmin, 1, &found);
	return found && TransactionIdIsCurrentTransactionId((TransactionId) xmin);
}

/*
 * remember_position
 *		Record that this transaction saw "position" as the position of a
 *		plain consumer, for the fence of advance().  The first position
 *		seen stays unless this transaction moved the consumer itself: a
 *		second read() after someone else moved it must not make the first
 *		page look current.  A rolled-back savepoint leaves the entry: the
 *		page read under it was still read.
 */
static void
remember_position(Oid relid, const char *consumer, int64 position)
{
	SeenPosition *seen = find_seen_position(relid, consumer);

	if (seen == NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(TopTransactionContext);

		seen = palloc(sizeof(SeenPosition));
		seen->relid = relid;
		seen->consumer = pstrdup(consumer);
		seen->position = position;
		seen_positions = lappend(seen_positions, seen);
		MemoryContextSwitchTo(old);
	}
	else if (seen->position != position && moved_here(relid, consumer))
		seen->position = position;
}

/*
 * check_position_unchanged
 *		advance()'s fence: the consumer's locked row holds "position"; if
 *		this transaction saw another one and did not move the consumer
 *		itself, someone else moved it since (a reset, or another worker's
 *		advance), and the page the caller processed is stale.  Whether this
 *		transaction moved it is read from the row's xmin, not remembered:
 *		an advance rolled back to a savepoint leaves the row as it was.
 */
static void
check_position_unchanged(Oid relid, const char *consumer, int64 position)
{
	SeenPosition *seen = find_seen_position(relid, consumer);

	if (seen == NULL || seen->position == position)
		return;
	if (!moved_here(relid, consumer))
		ereport(ERROR,
				(errcode(ERRCODE_STREAM_LEASE_LOST),
				 errmsg("consumer \"%s\" of stream table \"%s\" was moved by another transaction",
						consumer, stream_rel_name(relid)),
				 errdetail("This transaction read from position " INT64_FORMAT "; the position is now " INT64_FORMAT ".",
						   seen->position, position),
				 errhint("Roll back, and read again from the new position.")));
}

/*
 * stream_check_consumer_owner
 *		Only the role that created a consumer (or a member of it) and the
 *		stream table's owner may move or drop it.
 */
void
stream_check_consumer_owner(Oid relid, const char *consumer, Oid owner)
{
	if (!has_privs_of_role(GetUserId(), owner) &&
		!pg_class_ownercheck(relid, GetUserId()))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("must be owner of consumer \"%s\" of stream table \"%s\"",
						consumer, stream_rel_name(relid))));
}

/*
 * stream_check_consumer_name
 *		Consumer names are non-empty.
 */
void
stream_check_consumer_name(const char *consumer)
{
	if (consumer[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("consumer name must not be empty")));
}

/*
 * stream_drop_group_index
 *		Drop the index named "name" (schema-qualified, as the consumer
 *		table keeps a group's indexes) if it still exists and is an index
 *		of stream table "relid" (or of its partitions' index tree).  The
 *		name is text, not an OID, so that pg_restore can load it before the
 *		index exists; so it may now name something else (the table moved
 *		to another schema, another index took the name): that is left
 *		alone, as the drop runs as the extension's owner.
 */
void
stream_drop_group_index(Oid relid, const char *name)
{
	Oid			argtypes[1] = {TEXTOID};
	Datum		values[1];
	char	   *oid;
	Oid			index;
	char		relkind;

	if (name == NULL)
		return;
	values[0] = CStringGetTextDatum(name);
	oid = stream_catalog_text("SELECT pg_catalog.to_regclass($1)::pg_catalog.oid",
							  1, argtypes, values);
	if (oid == NULL)
		return;
	index = atooid(oid);
	relkind = get_rel_relkind(index);
	if ((relkind != RELKIND_INDEX && relkind != RELKIND_PARTITIONED_INDEX) ||
		IndexGetRelation(index, true) != relid)
		return;
	stream_catalog_exec(psprintf("DROP INDEX IF EXISTS %s", stream_qualified_name(index)),
						0, NULL, NULL, NULL, 0, NULL);
}

/*
 * stream_seq_create_consumer
 *		SQL: create_consumer(stream, consumer, start_after bigint DEFAULT 0).
 *		The consumer starts after "start_after", which must be below the
 *		horizon.
 */
Datum
stream_seq_create_consumer(PG_FUNCTION_ARGS)
{
	Oid			relid;
	char	   *consumer;
	int64		start_after;
	StreamRef  *ref;
	int64		horizon;
	Oid			argtypes[4] = {REGCLASSOID, TEXTOID, INT8OID, OIDOID};
	Datum		values[4];
	int64		first_kept;

	stream_check_not_null(fcinfo, 2, "stream table and consumer name");
	if (PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("start_after must not be null"),
				 errhint("stream_seq.head() is null for a stream that has handed out no number yet; "
						 "use coalesce(stream_seq.head(...), 0) to start at its current head.")));
	relid = PG_GETARG_OID(0);
	consumer = text_to_cstring(PG_GETARG_TEXT_PP(1));
	start_after = PG_GETARG_INT64(2);
	ref = stream_lookup(relid, false);

	stream_check_select(relid);
	stream_check_consumer_name(consumer);

	/* a consumer placed before the retained stream starts at its beginning */
	first_kept = stream_catalog_first(relid) - 1;
	if (start_after < first_kept)
		start_after = first_kept;

	horizon = stream_statement_horizon(ref);
	if (start_after >= horizon)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("cannot start consumer \"%s\" after " INT64_FORMAT,
						consumer, start_after),
				 errdetail("The horizon of stream table \"%s\" is " INT64_FORMAT "; a position must be below it.",
						   stream_rel_name(relid), horizon)));

	values[0] = ObjectIdGetDatum(relid);
	values[1] = CStringGetTextDatum(consumer);
	values[2] = Int64GetDatum(start_after);
	stream_lock_role(GetUserId());	/* against a concurrent DROP ROLE */
	values[3] = ObjectIdGetDatum(GetUserId());
	stream_catalog_hold(relid, NULL);
	if (stream_catalog_exec("INSERT INTO stream_seq.consumer "
							"(stream, consumer, position, owner) "
							"VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
							4, argtypes, values, NULL, 0, NULL) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("consumer \"%s\" of stream table \"%s\" already exists",
						consumer, stream_rel_name(relid))));
	PG_RETURN_VOID();
}

/*
 * stream_seq_position
 *		SQL: position(stream, consumer): the last number the consumer has
 *		finished.  Requires SELECT on the stream table.
 */
Datum
stream_seq_position(PG_FUNCTION_ARGS)
{
	Oid			relid = PG_GETARG_OID(0);
	char	   *consumer = text_to_cstring(PG_GETARG_TEXT_PP(1));

	int64		position;

	(void) stream_lookup(relid, false);
	stream_check_select(relid);
	position = plain_consumer_lookup(relid, consumer, false, NULL);
	remember_position(relid, consumer, position);
	PG_RETURN_INT64(position);
}

/*
 * stream_check_advance
 *		What advance() and advance_slot() refuse: moving "what" (a consumer,
 *		a slot of a group) backwards, or to or past the horizon, where
 *		nobody can have read yet.
 */
void
stream_check_advance(StreamRef *ref, const char *what, int64 position,
					 int64 to_position)
{
	int64		horizon;

	if (to_position < position)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("cannot move %s of stream table \"%s\" backwards",
						what, stream_rel_name(ref->relid)),
				 errdetail("Its position is " INT64_FORMAT "; the requested position is " INT64_FORMAT ".",
						   position, to_position),
				 errhint("The owner of the consumer can move it with stream_seq.reset().")));
	horizon = stream_statement_horizon(ref);
	if (to_position >= horizon)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("cannot advance %s of stream table \"%s\" to " INT64_FORMAT,
						what, stream_rel_name(ref->relid), to_position),
				 errdetail("The horizon is " INT64_FORMAT "; rows at or above it cannot have been read yet.",
						   horizon)));
}

/*
 * stream_seq_advance
 *		SQL: advance(stream, consumer, to_position): move the consumer's
 *		position forward, in the caller's transaction.  Moving backwards, or
 *		to or past the horizon (nobody can have read there yet), is an error;
 *		so is a position that changed since this transaction read it (see
 *		the top of the file).
 */
Datum
stream_seq_advance(PG_FUNCTION_ARGS)
{
	Oid			relid;
	char	   *consumer;
	int64		to_position;
	StreamRef  *ref;
	int64		position;
	Oid			owner;
	Oid			argtypes[3] = {REGCLASSOID, TEXTOID, INT8OID};
	Datum		values[3];

	stream_check_not_null(fcinfo, 3, "stream table, consumer name and position");
	relid = PG_GETARG_OID(0);
	consumer = text_to_cstring(PG_GETARG_TEXT_PP(1));
	to_position = PG_GETARG_INT64(2);
	ref = stream_lookup(relid, false);

	stream_check_select(relid);
	position = plain_consumer_lookup(relid, consumer, true, &owner);
	stream_check_consumer_owner(relid, consumer, owner);
	check_position_unchanged(relid, consumer, position);

	stream_check_advance(ref, psprintf("consumer \"%s\"", consumer), position,
						 to_position);
	if (to_position == position)
		PG_RETURN_VOID();

	values[0] = ObjectIdGetDatum(relid);
	values[1] = CStringGetTextDatum(consumer);
	values[2] = Int64GetDatum(to_position);
	stream_catalog_exec("UPDATE stream_seq.consumer "
						"SET position = $3, advanced_at = pg_catalog.now() "
						"WHERE stream = $1 AND consumer = $2",
						3, argtypes, values, NULL, 0, NULL);
	PG_RETURN_VOID();
}

/*
 * slot_finished_upto
 *		How far slot "slot" (slot expression "slot_expr") has finished as
 *		far as retention is concerned: just below its first row numbered
 *		after "position" and below "horizon", or horizon - 1 if it has no
 *		such row.  Read as the table's owner: the key expression is the
 *		owner's code, not to be run as the extension's owner, and the owner
 *		sees every row unless the table forces row-level security on it.
 */
static int64
slot_finished_upto(Oid relid, const char *slot_expr, int slot,
				   int64 position, int64 horizon)
{
	StreamRef  *ref = stream_lookup(relid, false);
	const char *column = quote_identifier(get_attname(relid, ref->seq_attnum, false));
	Oid			argtypes[3] = {INT4OID, INT8OID, INT8OID};
	Datum		values[3];
	int			save_nestlevel;
	Oid			save_userid;
	int			save_sec_context;
	int64		next_row = horizon;
	bool		isnull;
	Relation	rel;
	bool		forced_rls;

	/*
	 * A table that forces row-level security on its owner may hide rows
	 * from it: then the slot's position is all that is known.
	 */
	rel = table_open(relid, AccessShareLock);
	forced_rls = rel->rd_rel->relforcerowsecurity;
	table_close(rel, AccessShareLock);
	if (forced_rls)
		return position;

	values[0] = Int32GetDatum(slot);
	values[1] = Int64GetDatum(position);
	values[2] = Int64GetDatum(horizon);
	stream_run_as(ref->owner, &save_nestlevel, &save_userid, &save_sec_context);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SPI_execute_with_args(psprintf("SELECT t.%s FROM %s t WHERE %s = $1 "
									   "AND t.%s > $2 AND t.%s < $3 "
									   "ORDER BY t.%s LIMIT 1",
									   column, stream_source(relid), slot_expr,
									   column, column, column),
							  3, argtypes, values, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read slot %d of stream table \"%s\"",
			 slot, stream_rel_name(relid));
	if (SPI_processed > 0)
	{
		Datum		value = SPI_getbinval(SPI_tuptable->vals[0],
										  SPI_tuptable->tupdesc, 1, &isnull);

		if (!isnull)
			next_row = DatumGetInt64(value);
	}
	SPI_finish();
	stream_run_as_end(save_nestlevel, save_userid, save_sec_context);
	return next_row - 1;
}

/*
 * stream_slot_finished_upto
 *		slot_finished_upto for resize.c, which switches a resize only once
 *		every old slot has finished up to its fence.
 */
int64
stream_slot_finished_upto(Oid relid, const char *slot_expr, int slot,
						  int64 position, int64 horizon)
{
	return slot_finished_upto(relid, slot_expr, slot, position, horizon);
}

/*
 * stream_slots_floor
 *		For retention: the lowest position over the slots of the stream's
 *		groups, counting each slot as finished up to just below its next
 *		row (horizon - 1 if it has none below "horizon"; see
 *		slot_finished_upto).  A slot whose keys get no new rows is never
 *		advanced by a worker that advances only past rows it read; counted
 *		by its position it would block trim() and drop_partitions() for
 *		good, though retention would take nothing it still has to read.
 *		Slots are taken in position order, and one whose position is at or
 *		above the lowest found so far cannot lower it.  False if the stream
 *		has no group; "consumer" gets the slot's name.
 */
bool
stream_slots_floor(Oid relid, int64 horizon, char **consumer, int64 *position)
{
	int			save_nestlevel;
	Oid			save_userid;
	int			save_sec_context;
	Oid			argtypes[1] = {OIDOID};
	Datum		values[1];
	uint64		n;
	uint64		i;
	char	  **names;
	char	  **exprs;
	int		   *slots;
	int64	   *positions;
	bool		any = false;

	/* every slot, slowest first, with its group's slot expression */
	values[0] = ObjectIdGetDatum(relid);
	stream_run_as(stream_catalog_owner(), &save_nestlevel, &save_userid,
				  &save_sec_context);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SPI_execute_with_args("SELECT s.consumer, c.slot_expr, s.slot, s.position "
							  "FROM stream_seq.consumer_slot s "
							  "JOIN stream_seq.consumer c USING (stream, consumer) "
							  "WHERE s.stream::pg_catalog.oid = $1 "
							  "ORDER BY s.position, s.consumer, s.slot",
							  1, argtypes, values, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not list the slots of stream \"%s\"", stream_rel_name(relid));
	n = SPI_processed;
	names = SPI_palloc(sizeof(char *) * Max(n, 1));
	exprs = SPI_palloc(sizeof(char *) * Max(n, 1));
	slots = SPI_palloc(sizeof(int) * Max(n, 1));
	positions = SPI_palloc(sizeof(int64) * Max(n, 1));
	for (i = 0; i < n; i++)
	{
		HeapTuple	tuple = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;
		char	   *name = SPI_getvalue(tuple, desc, 1);
		char	   *expr = SPI_getvalue(tuple, desc, 2);

		names[i] = SPI_palloc(strlen(name) + 1);
		strcpy(names[i], name);
		exprs[i] = expr == NULL ? NULL : SPI_palloc(strlen(expr) + 1);
		if (expr != NULL)
			strcpy(exprs[i], expr);
		slots[i] = DatumGetInt32(SPI_getbinval(tuple, desc, 3, &isnull));
		positions[i] = DatumGetInt64(SPI_getbinval(tuple, desc, 4, &isnull));
	}
	SPI_finish();
	stream_run_as_end(save_nestlevel, save_userid, save_sec_context);

	for (i = 0; i < n; i++)
	{
		int64		finished = positions[i];

		if (any && positions[i] >= *position)
			break;
		if (positions[i] < horizon - 1 && exprs[i] != NULL)
			finished = slot_finished_upto(relid, exprs[i], slots[i],
										  positions[i], horizon);
		if (!any || finished < *position)
		{
			*consumer = psprintf("%s (slot %d)", names[i], slots[i]);
			*position = finished;
			any = true;
		}
	}
	return any;
}

/*
 * stream_slots_raise
 *		After retention that did not force its way (trim(), drop_partitions())
 *		removed every number up to "upto": move the slots still below it up
 *		to it.  stream_slots_floor allowed that only because none of them had
 *		a row left there; without the move, read_slot() of such a slot would
 *		report its rows as trimmed.  A worker holding the slot has read
 *		nothing below "upto", so its next advance_slot() is not backwards.
 *		The rows are locked in slot order, as claim() locks them.
 */
void
stream_slots_raise(Oid relid, int64 upto)
{
	Oid			argtypes[2] = {OIDOID, INT8OID};
	Datum		values[2];

	if (!OidIsValid(get_relname_relid("consumer_slot", stream_namespace(false))))
		return;					/* before 0.3.0: no groups */
	values[0] = ObjectIdGetDatum(relid);
	values[1] = Int64GetDatum(upto);
	stream_catalog_exec("UPDATE stream_seq.consumer_slot SET position = $2 "
						"WHERE (stream, consumer, slot) IN ("
						"  SELECT stream, consumer, slot FROM stream_seq.consumer_slot "
						"   WHERE stream::pg_catalog.oid = $1 AND position < $2 "
						"   ORDER BY consumer, slot FOR UPDATE)",
						2, argtypes, values, NULL, 0, NULL);
}

/*
 * Where each consumer of stream $1 has got to: a plain consumer's
 * position, each slot of a group, and each parked row (which replay()
 * reads again, so it counts as a position just below it).  Before the
 * update to 0.3.0, plain consumers only.
 */
#define SLOWEST_POSITIONS \
	"(SELECT consumer, position FROM stream_seq.consumer " \
	"  WHERE stream::pg_catalog.oid = $1 AND slots IS NULL " \
	" UNION ALL SELECT consumer || ' (parked ' || seq || ')', seq - 1 " \
	"  FROM stream_seq.parked WHERE stream::pg_catalog.oid = $1 AND NOT resolved) p"
#define RESIZE_FENCES \
	"SELECT consumer || ' (resize pending)', resize_fence " \
	"  FROM stream_seq.consumer WHERE stream::pg_catalog.oid = $1 AND resize_fence IS NOT NULL"
#define PLAIN_POSITIONS \
	"(SELECT consumer, position FROM stream_seq.consumer " \
	"  WHERE stream::pg_catalog.oid = $1) p"

/*
 * stream_slowest_consumer
 *		The consumer of the stream with the lowest position (a slot of a
 *		group, a parked row, or the fence of a pending resize, where the new
 *		slots will start, count as positions), whoever owns it and
 *		whoever may read it; false if the stream has none.  For trim() and
 *		drop_partitions(), which must not pass it.  A slot with nothing to
 *		read below the horizon counts as having finished up to it
 *		(stream_slots_floor).
 */
bool
stream_slowest_consumer(Oid relid, char **consumer, int64 *position)
{
	Oid			argtypes[1] = {OIDOID};
	Datum		values[1];
	int64		row[1];
	bool		found;
	char	   *name;
	const char *positions;

	char	   *slot_name;
	int64		slot_position;
	bool		groups = stream_have_groups();

	values[0] = ObjectIdGetDatum(relid);
	positions = groups ? SLOWEST_POSITIONS : PLAIN_POSITIONS;
	/* the new slots of a pending resize start at its fence */
	if (groups && stream_resize_supported())
		positions = psprintf("(SELECT consumer, position FROM %s UNION ALL %s) q",
							 SLOWEST_POSITIONS, RESIZE_FENCES);
	stream_catalog_exec(psprintf("SELECT position FROM %s ORDER BY position LIMIT 1",
								 positions),
						1, argtypes, values, row, 1, &found);
	if (found)
	{
		*position = row[0];

		/*
		 * its name, as text: fetched on its own, stream_catalog_exec reads
		 * int8
		 */
		name = stream_catalog_text(psprintf("SELECT consumer FROM %s "
											"ORDER BY position, consumer LIMIT 1",
											positions),
								   1, argtypes, values);
		*consumer = name != NULL ? name : pstrdup("?");
	}
	if (groups &&
		stream_slots_floor(relid,
						   stream_statement_horizon(stream_lookup(relid, false)),
						   &slot_name, &slot_position) &&
		(!found || slot_position < *position))
	{
		*consumer = slot_name;
		*position = slot_position;
		found = true;
	}
	return found;
}
