/*-------------------------------------------------------------------------
 *
 * consumer.c
 *	  Named consumers of a stream and their positions, kept in the table
 *	  stream_seq.consumer and changed in the caller's transaction, so that
 *	  processing a page and advancing past it commit or roll back together.
 *
 * Privileges: creating a consumer needs SELECT on the stream table; the
 * creating role owns the consumer.  Advancing or dropping it needs to be
 * (a member of) that role or the table's owner; advancing and reading also
 * need SELECT.  The SQL entry points run as the caller, check this, and
 * then write the table as its owner (stream_catalog_exec).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"

#include "stream_seq.h"

PG_FUNCTION_INFO_V1(stream_seq_create_consumer);
PG_FUNCTION_INFO_V1(stream_seq_drop_consumer);
PG_FUNCTION_INFO_V1(stream_seq_position);
PG_FUNCTION_INFO_V1(stream_seq_advance);
PG_FUNCTION_INFO_V1(stream_seq_record_trim);

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
					consumer, get_rel_name(relid))));
}

/*
 * consumer_lookup
 *		Position and owner of a consumer; with "for_update" the row is locked
 *		until the end of the caller's transaction, so that concurrent
 *		advances of one consumer take turns (or, under REPEATABLE READ, the
 *		later one fails with a serialization error).
 */
static int64
consumer_lookup(Oid relid, const char *consumer, bool for_update, Oid *owner)
{
	Oid			argtypes[2] = {REGCLASSOID, TEXTOID};
	Datum		values[2];
	int64		row[2];
	bool		found;

	values[0] = ObjectIdGetDatum(relid);
	values[1] = CStringGetTextDatum(consumer);
	stream_catalog_exec(for_update ?
						"SELECT position, owner::oid::int8 FROM stream_seq.consumer "
						"WHERE stream = $1 AND consumer = $2 FOR UPDATE" :
						"SELECT position, owner::oid::int8 FROM stream_seq.consumer "
						"WHERE stream = $1 AND consumer = $2",
						2, argtypes, values, row, 2, &found);
	if (!found)
		report_unknown_consumer(relid, consumer);
	if (owner != NULL)
		*owner = (Oid) row[1];
	return row[0];
}

/*
 * check_consumer_owner
 *		Only the role that created a consumer (or a member of it) and the
 *		stream table's owner may move or drop it.
 */
static void
check_consumer_owner(Oid relid, const char *consumer, Oid owner)
{
	if (!has_privs_of_role(GetUserId(), owner) &&
		!pg_class_ownercheck(relid, GetUserId()))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("must be owner of consumer \"%s\" of stream table \"%s\"",
						consumer, get_rel_name(relid))));
}

/*
 * check_consumer_name
 *		Consumer names are non-empty.
 */
static void
check_consumer_name(const char *consumer)
{
	if (consumer[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("consumer name must not be empty")));
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
	Oid			relid = PG_GETARG_OID(0);
	char	   *consumer = text_to_cstring(PG_GETARG_TEXT_PP(1));
	int64		start_after = PG_GETARG_INT64(2);
	StreamRef  *ref = stream_lookup(relid, false);
	int64		horizon;
	Oid			argtypes[4] = {REGCLASSOID, TEXTOID, INT8OID, OIDOID};
	Datum		values[4];
	int64		first_kept;
	bool		exists;

	stream_check_select(relid);
	check_consumer_name(consumer);

	/* a consumer placed before the retained stream starts at its beginning */
	values[0] = ObjectIdGetDatum(relid);
	stream_catalog_exec("SELECT trimmed_before - 1 FROM stream_seq.stream "
						"WHERE relid = $1", 1, argtypes, values,
						&first_kept, 1, &exists);
	if (exists && start_after < first_kept)
		start_after = first_kept;

	horizon = stream_statement_horizon(ref);
	if (start_after >= horizon)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("cannot start consumer \"%s\" after " INT64_FORMAT,
						consumer, start_after),
				 errdetail("The horizon of stream table \"%s\" is " INT64_FORMAT "; a position must be below it.",
						   get_rel_name(relid), horizon)));

	values[0] = ObjectIdGetDatum(relid);
	values[1] = CStringGetTextDatum(consumer);
	values[2] = Int64GetDatum(start_after);
	values[3] = ObjectIdGetDatum(GetUserId());
	if (stream_catalog_exec("INSERT INTO stream_seq.consumer "
							"(stream, consumer, position, owner) "
							"VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
							4, argtypes, values, NULL, 0, NULL) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("consumer \"%s\" of stream table \"%s\" already exists",
						consumer, get_rel_name(relid))));
	PG_RETURN_VOID();
}

/*
 * stream_seq_drop_consumer
 *		SQL: drop_consumer(stream, consumer).
 */
Datum
stream_seq_drop_consumer(PG_FUNCTION_ARGS)
{
	Oid			relid = PG_GETARG_OID(0);
	char	   *consumer = text_to_cstring(PG_GETARG_TEXT_PP(1));
	Oid			argtypes[2] = {REGCLASSOID, TEXTOID};
	Datum		values[2];
	Oid			owner;

	(void) stream_lookup(relid, false);
	(void) consumer_lookup(relid, consumer, true, &owner);
	check_consumer_owner(relid, consumer, owner);

	values[0] = ObjectIdGetDatum(relid);
	values[1] = CStringGetTextDatum(consumer);
	stream_catalog_exec("DELETE FROM stream_seq.consumer "
						"WHERE stream = $1 AND consumer = $2",
						2, argtypes, values, NULL, 0, NULL);
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

	(void) stream_lookup(relid, false);
	stream_check_select(relid);
	PG_RETURN_INT64(consumer_lookup(relid, consumer, false, NULL));
}

/*
 * stream_seq_advance
 *		SQL: advance(stream, consumer, to_position): move the consumer's
 *		position forward, in the caller's transaction.  Moving backwards, or
 *		to or past the horizon (nobody can have read there yet), is an error.
 */
Datum
stream_seq_advance(PG_FUNCTION_ARGS)
{
	Oid			relid = PG_GETARG_OID(0);
	char	   *consumer = text_to_cstring(PG_GETARG_TEXT_PP(1));
	int64		to_position = PG_GETARG_INT64(2);
	StreamRef  *ref = stream_lookup(relid, false);
	int64		position;
	int64		horizon;
	Oid			owner;
	Oid			argtypes[3] = {REGCLASSOID, TEXTOID, INT8OID};
	Datum		values[3];

	stream_check_select(relid);
	position = consumer_lookup(relid, consumer, true, &owner);
	check_consumer_owner(relid, consumer, owner);

	if (to_position < position)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("cannot move consumer \"%s\" of stream table \"%s\" backwards",
						consumer, get_rel_name(relid)),
				 errdetail("Its position is " INT64_FORMAT "; the requested position is " INT64_FORMAT ".",
						   position, to_position)));
	horizon = stream_statement_horizon(ref);
	if (to_position >= horizon)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("cannot advance consumer \"%s\" of stream table \"%s\" to " INT64_FORMAT,
						consumer, get_rel_name(relid), to_position),
				 errdetail("The horizon is " INT64_FORMAT "; rows at or above it cannot have been read yet.",
						   horizon)));
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
 * stream_seq_record_trim
 *		SQL: _record_trim(stream, before), called by trim() before it deletes:
 *		records in the catalog where the retained stream now starts.  Needs
 *		DELETE on the table, like the deletion itself.
 */
Datum
stream_seq_record_trim(PG_FUNCTION_ARGS)
{
	Oid			relid = PG_GETARG_OID(0);
	int64		before = PG_GETARG_INT64(1);
	AclResult	aclresult;

	(void) stream_lookup(relid, false);
	aclresult = pg_class_aclcheck(relid, GetUserId(), ACL_DELETE);
	if (aclresult != ACLCHECK_OK)
		aclcheck_error(aclresult, OBJECT_TABLE, get_rel_name(relid));

	stream_catalog_record_start(relid, before);
	PG_RETURN_VOID();
}
