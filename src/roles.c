/*-------------------------------------------------------------------------
 *
 * roles.c
 *	  Roles and what they own: what DROP ROLE, REASSIGN OWNED and DROP
 *	  OWNED do to consumers, how the stream table's owner gives a consumer
 *	  to another role, and what the database's owner may read so that it
 *	  can dump its own database.
 *
 * A consumer is a row of stream_seq.consumer, not an object PostgreSQL
 * records dependencies for, so its owner is looked after here, through
 * the utility hook, as PostgreSQL looks after the owners of its objects
 * in the database the command runs in:
 *	- DROP ROLE is refused while the role owns a consumer in this database
 *	  (2BP01, naming them), so a dropped role cannot leave a consumer that
 *	  holds retention back with no one to answer for it;
 *	- REASSIGN OWNED BY old TO new gives old's consumers to new;
 *	- DROP OWNED BY old drops old's consumers (as drop_consumer() would).
 * Consumers in other databases are not visible from here, as with
 * PostgreSQL's own objects DROP OWNED and REASSIGN OWNED act on the
 * current database only; a consumer whose owner was dropped from another
 * database keeps its role's OID, and the stream table's owner can still
 * drop it or give it to a role (alter_consumer_owner()).
 *
 * pg_dump reads the rows of the extension's tables and the value of every
 * head sequence; they belong to the extension's owner.  The database's
 * owner is given USAGE on the schema and SELECT on them (and on each new
 * head sequence, and after ALTER DATABASE ... OWNER TO the new owner), so
 * that "pg_dump -U owner" of its own database works.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_database.h"
#include "catalog/pg_type.h"
#include "commands/dbcommands.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "storage/lmgr.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"

#include "stream_seq.h"
#include "roles.h"
#include "catalog.h"
#include "consumer.h"
#include "group.h"

PG_FUNCTION_INFO_V1(stream_seq_alter_consumer_owner);
PG_FUNCTION_INFO_V1(stream_seq_grant_dump_access);

static ProcessUtility_hook_type prev_process_utility = NULL;

/*
 * consumers_installed
 *		Whether this database has the extension's consumer table.  Syscache
 *		lookups only: nothing to do, and no privilege needed, elsewhere.
 */
static bool
consumers_installed(void)
{
	Oid			nsp = stream_namespace(true);

	return OidIsValid(nsp) && OidIsValid(get_relname_relid("consumer", nsp));
}

/*
 * role_oids
 *		OIDs of the roles a statement names that exist.
 */
static List *
role_oids(List *rolespecs)
{
	List	   *oids = NIL;
	ListCell   *lc;

	foreach(lc, rolespecs)
	{
		Oid			roleid = get_rolespec_oid(lfirst(lc), true);

		if (OidIsValid(roleid))
			oids = lappend_oid(oids, roleid);
	}
	return oids;
}

/*
 * may_drop_role
 *		Whether the current user may drop role "roleid", by PostgreSQL's
 *		rules: a superuser may; otherwise CREATEROLE is needed, the role
 *		must not be a superuser, and from PostgreSQL 16 on the user must
 *		hold the role with ADMIN OPTION.
 */
static bool
may_drop_role(Oid roleid)
{
	if (superuser())
		return true;
	if (!has_createrole_privilege(GetUserId()) || superuser_arg(roleid))
		return false;
#if PG_VERSION_NUM >= 160000
	return is_admin_of_role(GetUserId(), roleid);
#else
	return true;
#endif
}

/*
 * refuse_drop_role
 *		DROP ROLE of a role that owns consumers in this database: refused,
 *		with the consumers named, as PostgreSQL refuses it for a role that
 *		owns objects.
 */
static void
refuse_drop_role(List *rolespecs)
{
	ListCell   *lc;

	foreach(lc, role_oids(rolespecs))
	{
		Oid			roleid = lfirst_oid(lc);
		Oid			argtypes[1] = {OIDOID};
		Datum		values[1];
		char	   *owned;

		/* a caller who may not drop the role learns nothing from us */
		if (!may_drop_role(roleid))
			continue;

		/*
		 * The lock DROP ROLE takes anyway, taken first: a consumer created
		 * for the role (stream_lock_role) is committed before we look, or
		 * waits for the drop and then finds the role gone.
		 */
		LockSharedObject(AuthIdRelationId, roleid, 0, AccessExclusiveLock);
		values[0] = ObjectIdGetDatum(roleid);
		owned = stream_catalog_text("SELECT pg_catalog.string_agg(pg_catalog.format("
									"'owner of consumer \"%s\" of stream table %s', "
									"consumer, stream), "
									"E'\\n' ORDER BY stream::pg_catalog.text, consumer) "
									"FROM stream_seq.consumer WHERE owner::pg_catalog.oid = $1",
									1, argtypes, values);
		if (owned != NULL)
			ereport(ERROR,
					(errcode(ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST),
					 errmsg("role \"%s\" cannot be dropped because some objects depend on it",
							GetUserNameFromId(roleid, false)),
					 errdetail("%s", owned),
					 errhint("Drop the consumers or give them to another role: REASSIGN OWNED, DROP OWNED, stream_seq.drop_consumer() or stream_seq.alter_consumer_owner().")));
	}
}

/*
 * reassign_consumers
 *		After REASSIGN OWNED BY ... TO new: the roles' consumers in this
 *		database belong to "new".  PostgreSQL has checked that the caller
 *		has the privileges of every role involved.
 */
static void
reassign_consumers(List *rolespecs, RoleSpec *newrole)
{
	Oid			newid = get_rolespec_oid(newrole, false);
	ListCell   *lc;

	foreach(lc, role_oids(rolespecs))
	{
		Oid			argtypes[2] = {OIDOID, OIDOID};
		Datum		values[2];

		values[0] = ObjectIdGetDatum(lfirst_oid(lc));
		values[1] = ObjectIdGetDatum(newid);
		stream_catalog_exec("UPDATE stream_seq.consumer SET owner = $2::pg_catalog.regrole "
							"WHERE owner::pg_catalog.oid = $1",
							2, argtypes, values, NULL, 0, NULL);
	}
}

/*
 * drop_owned_consumers
 *		Before DROP OWNED BY: drop the roles' consumers in this database
 *		one by one with drop_consumer() as the caller (who has the
 *		privileges of each role, which PostgreSQL checks first), so that a
 *		group's slots and parked rows go with it.  The list is read as the
 *		extension's owner: the caller need not read the catalog.
 */
static void
drop_owned_consumers(List *rolespecs)
{
	ListCell   *lc;

	foreach(lc, role_oids(rolespecs))
	{
		Oid			roleid = lfirst_oid(lc);
		Oid			argtypes[1] = {OIDOID};
		Datum		values[1];
		char	   *next;

		if (!has_privs_of_role(GetUserId(), roleid))
			continue;			/* PostgreSQL refuses the statement */
		values[0] = ObjectIdGetDatum(roleid);
		while ((next = stream_catalog_text("SELECT stream::pg_catalog.oid::pg_catalog.text "
										   "OPERATOR(pg_catalog.||) ' ' OPERATOR(pg_catalog.||) consumer "
										   "FROM stream_seq.consumer "
										   "WHERE owner::pg_catalog.oid = $1 LIMIT 1",
										   1, argtypes, values)) != NULL)
		{
			char	   *name = strchr(next, ' ');
			Oid			relid;

			Assert(name != NULL);
			*name++ = '\0';
			relid = (Oid) strtoul(next, NULL, 10);
			DirectFunctionCall2(stream_seq_drop_consumer,
								ObjectIdGetDatum(relid),
								CStringGetTextDatum(name));
			CommandCounterIncrement();
		}
	}
}

/*
 * grant_dump_access_to
 *		GRANT USAGE on the extension's schema and SELECT on its tables that
 *		pg_dump copies and on every head sequence to "role"; nothing for a
 *		superuser, who needs no grant.  Run as the extension's owner, who
 *		owns them.  What an earlier owner of the database was given stays:
 *		revoking it could take away what a DBA granted on purpose.
 */
static void
grant_dump_access_to(Oid role)
{
	char	   *rolename = GetUserNameFromId(role, true);
	char	   *statements;

	if (rolename == NULL || superuser_arg(role))
		return;
	statements = stream_catalog_text(psprintf("SELECT pg_catalog.string_agg(pg_catalog.format("
											  "'GRANT SELECT ON %%s %%s TO %%I', "
											  "CASE WHEN c.relkind = 'S' THEN 'SEQUENCE' ELSE 'TABLE' END, "
											  "c.oid::pg_catalog.regclass, %s), ';') "
											  "FROM pg_catalog.pg_class c "
											  "WHERE c.oid IN (SELECT pg_catalog.unnest(e.extconfig) "
											  "FROM pg_catalog.pg_extension e WHERE e.extname = 'stream_seq') "
											  "OR c.oid IN (SELECT s.head_seq FROM stream_seq.stream s)",
											  quote_literal_cstr(rolename)),
									 0, NULL, NULL);
	stream_catalog_exec(psprintf("GRANT USAGE ON SCHEMA stream_seq TO %s",
								 quote_identifier(rolename)),
						0, NULL, NULL, NULL, 0, NULL);
	if (statements != NULL)
		stream_catalog_exec(statements, 0, NULL, NULL, NULL, 0, NULL);
}

/*
 * stream_seq_grant_dump_access
 *		SQL (internal, for the update script): give the database's owner
 *		what pg_dump reads.
 */
Datum
stream_seq_grant_dump_access(PG_FUNCTION_ARGS)
{
	grant_dump_access_to(stream_database_owner());
	PG_RETURN_VOID();
}

/*
 * is_current_database_owner_change
 *		Whether a statement is ALTER DATABASE <this database> OWNER TO.
 */
static bool
is_current_database_owner_change(Node *parsetree)
{
	AlterOwnerStmt *stmt;

	if (!IsA(parsetree, AlterOwnerStmt))
		return false;
	stmt = (AlterOwnerStmt *) parsetree;
	return stmt->objectType == OBJECT_DATABASE &&
		get_database_oid(strVal(stmt->object), true) == MyDatabaseId;
}

/*
 * stream_process_utility
 *		The utility hook: DROP ROLE, REASSIGN OWNED and DROP OWNED reach the
 *		consumers of this database (above); everything else passes through.
 */
static void
stream_process_utility(PlannedStmt *pstmt, const char *queryString,
					   bool readOnlyTree, ProcessUtilityContext context,
					   ParamListInfo params, QueryEnvironment *queryEnv,
					   DestReceiver *dest, QueryCompletion *qc)
{
	Node	   *parsetree = pstmt->utilityStmt;
	bool		ours = (IsA(parsetree, DropRoleStmt) ||
						IsA(parsetree, ReassignOwnedStmt) ||
						IsA(parsetree, DropOwnedStmt) ||
						is_current_database_owner_change(parsetree)) &&
		consumers_installed();
	bool		owner_may_change = IsA(parsetree, ReassignOwnedStmt) ||
		IsA(parsetree, AlterOwnerStmt);
	Oid			old_db_owner = ours ? stream_database_owner() : InvalidOid;

	if (ours && IsA(parsetree, DropRoleStmt))
		refuse_drop_role(((DropRoleStmt *) parsetree)->roles);
	if (ours && IsA(parsetree, DropOwnedStmt))
		drop_owned_consumers(((DropOwnedStmt *) parsetree)->roles);

	if (prev_process_utility)
		prev_process_utility(pstmt, queryString, readOnlyTree, context,
							 params, queryEnv, dest, qc);
	else
		standard_ProcessUtility(pstmt, queryString, readOnlyTree, context,
								params, queryEnv, dest, qc);

	if (ours && IsA(parsetree, ReassignOwnedStmt))
		reassign_consumers(((ReassignOwnedStmt *) parsetree)->roles,
						   ((ReassignOwnedStmt *) parsetree)->newrole);
	if (ours && owner_may_change)
	{
		Oid			new_db_owner;

		CommandCounterIncrement();
		new_db_owner = stream_database_owner();
		if (new_db_owner != old_db_owner)
			grant_dump_access_to(new_db_owner);
	}
}

/*
 * stream_roles_init
 *		Install the utility hook (from _PG_init).
 */
void
stream_roles_init(void)
{
	prev_process_utility = ProcessUtility_hook;
	ProcessUtility_hook = stream_process_utility;
}

/*
 * stream_seq_alter_consumer_owner
 *		SQL: alter_consumer_owner(stream, consumer, new_owner).  The stream
 *		table's owner, or the consumer's, gives the consumer to another
 *		role, which the caller must be able to act as (as for ALTER ...
 *		OWNER TO).  Works for a consumer whose owner was dropped.
 */
Datum
stream_seq_alter_consumer_owner(PG_FUNCTION_ARGS)
{
	Oid			relid;
	char	   *consumer;
	Oid			newowner;
	Oid			owner;
	Oid			argtypes[3] = {OIDOID, TEXTOID, OIDOID};
	Datum		values[3];

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1) || PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("stream, consumer and new owner must not be null")));
	relid = PG_GETARG_OID(0);
	consumer = text_to_cstring(PG_GETARG_TEXT_PP(1));
	newowner = PG_GETARG_OID(2);

	(void) stream_lookup(relid, false);
	stream_catalog_hold(relid, consumer);
	(void) stream_consumer_lookup(relid, consumer, true, &owner, NULL);
	stream_check_consumer_owner(relid, consumer, owner);
	stream_lock_role(newowner);
	check_is_member_of_role(GetUserId(), newowner);

	values[0] = ObjectIdGetDatum(relid);
	values[1] = CStringGetTextDatum(consumer);
	values[2] = ObjectIdGetDatum(newowner);
	stream_catalog_exec("UPDATE stream_seq.consumer SET owner = $3::pg_catalog.regrole "
						"WHERE stream::pg_catalog.oid = $1 AND consumer = $2",
						3, argtypes, values, NULL, 0, NULL);
	PG_RETURN_VOID();
}
