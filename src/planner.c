/*-------------------------------------------------------------------------
 *
 * planner.c
 *	  How the planner sees the indexes of a stream table whose predicate is
 *	  "seq > 0" (the stream's unique index, a group's slot index, an index
 *	  of the user's that leaves unnumbered rows out): as indexes of every
 *	  row whose number is not null, which is what they hold for every
 *	  snapshot but the inserting transaction's own.
 *
 * A stream row is stored with the placeholder 0 in its stream column and
 * gets its number when its transaction commits (commit.c); the indexes on
 * the column leave the placeholder out with the predicate "seq > 0".  To
 * the planner that predicate follows only from a clause that compares the
 * column with a constant: a generic plan of "seq > $1" (PREPARE, drivers'
 * named statements, PL/pgSQL), a join on the column, or "seq = ANY(...)"
 * over a subquery could not use the index.  "seq IS NOT NULL" follows
 * from any strict clause on the column.  And the two predicates select
 * the same rows for every snapshot that cannot see a placeholder: every
 * committed row has a number (at least 1) or NULL (a row stored with NULL
 * explicitly is numbered too), so only the inserting transaction, before
 * its commit, sees rows with 0.  So the predicate is shown to the planner
 * as "seq IS NOT NULL".
 *
 * The inserting transaction is the exception: its own unnumbered rows are
 * in no index on the column, and "seq IS NOT NULL" would let a query of
 * it that selects them ("seq = 0", "seq < 10") reach them through such an
 * index and miss them.  So a table into which the planning transaction
 * has stored rows not yet numbered (capture.c knows) keeps the predicate
 * "seq > 0", which the planner uses only where it is implied, and the
 * plan is marked transient (made again in a later transaction, as
 * PostgreSQL does for a plan that depends on the transaction's xmin), so
 * that its choice is not kept for transactions without such rows.  What
 * is left: a generic plan made before the transaction's first row into the
 * table and run after it, with a bound that admits 0 ("seq = $1" with
 * $1 = 0), reaches the index and does not return those rows; the
 * documentation says so (doc/applications.md).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "nodes/makefuncs.h"
#include "optimizer/plancat.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"

#include "stream_seq.h"
#include "planner.h"
#include "capture.h"
#include "catalog.h"
#include "partition.h"

static get_relation_info_hook_type prev_get_relation_info_hook = NULL;

/* The stream column of a table (InvalidAttrNumber: not a stream's). */
typedef struct StreamColumn
{
	Oid			relid;			/* hash key */
	AttrNumber	seq_attnum;
} StreamColumn;

static HTAB *stream_columns = NULL;

/*
 * forget_stream_column
 *		Relcache callback: what was found for the table (or all) is stale.
 */
static void
forget_stream_column(Datum arg, Oid relid)
{
	if (stream_columns == NULL)
		return;
	if (OidIsValid(relid))
		(void) hash_search(stream_columns, &relid, HASH_REMOVE, NULL);
	else
	{
		HASH_SEQ_STATUS status;
		StreamColumn *entry;

		hash_seq_init(&status, stream_columns);
		while ((entry = hash_seq_search(&status)) != NULL)
			(void) hash_search(stream_columns, &entry->relid, HASH_REMOVE, NULL);
	}
}

/*
 * stream_column_of
 *		The stream column of "relid" if it is a stream table or a partition
 *		of one, else InvalidAttrNumber.  Looked up only for a table with an
 *		index whose predicate is "column > 0"; kept until its relcache
 *		entry is invalidated.
 */
static AttrNumber
stream_column_of(Oid relid)
{
	StreamColumn *entry;
	bool		found;
	Oid			stream;
	AttrNumber	attnum = InvalidAttrNumber;

	if (stream_columns == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(Oid);
		ctl.entrysize = sizeof(StreamColumn);
		ctl.hcxt = TopMemoryContext;
		stream_columns = hash_create("stream_seq stream columns", 16, &ctl,
									 HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
		CacheRegisterRelcacheCallback(forget_stream_column, (Datum) 0);
	}
	entry = hash_search(stream_columns, &relid, HASH_FIND, NULL);
	if (entry != NULL)
		return entry->seq_attnum;

	stream = OidIsValid(stream_catalog_relid(true)) ?
		(stream_catalog_has(relid) ? relid : stream_root_of(relid)) :
		InvalidOid;
	if (OidIsValid(stream))
	{
		char	   *column = stream_catalog_seq_column(stream);

		if (column != NULL)
			attnum = get_attnum(relid, column);
	}
	entry = hash_search(stream_columns, &relid, HASH_ENTER, &found);
	entry->seq_attnum = attnum;
	return attnum;
}

/*
 * placeholder_predicate_column
 *		If "pred" is "column > 0" over relation "varno" (see
 *		stream_predicate_excludes_placeholder), the column; else
 *		InvalidAttrNumber.
 */
static AttrNumber
placeholder_predicate_column(List *pred, Index varno)
{
	OpExpr	   *op;
	Var		   *var;

	if (list_length(pred) != 1 || !IsA(linitial(pred), OpExpr))
		return InvalidAttrNumber;
	op = linitial(pred);
	if (list_length(op->args) != 2 || !IsA(linitial(op->args), Var))
		return InvalidAttrNumber;
	var = linitial(op->args);
	if (var->varno != varno || var->varlevelsup != 0 ||
		var->vartype != INT8OID ||
		!stream_predicate_excludes_placeholder(pred, var->varattno))
		return InvalidAttrNumber;
	return var->varattno;
}

/*
 * stream_relation_info
 *		get_relation_info_hook: show an index of a stream table whose
 *		predicate is "seq > 0" as one whose predicate is "seq IS NOT NULL"
 *		(see the top of the file).  For a table without such an index, a
 *		look at the predicates of its indexes.
 */
static void
stream_relation_info(PlannerInfo *root, Oid relationObjectId, bool inhparent,
					 RelOptInfo *rel)
{
	ListCell   *lc;

	if (prev_get_relation_info_hook)
		prev_get_relation_info_hook(root, relationObjectId, inhparent, rel);

	foreach(lc, rel->indexlist)
	{
		IndexOptInfo *index = (IndexOptInfo *) lfirst(lc);
		AttrNumber	attnum = placeholder_predicate_column(index->indpred,
														  rel->relid);
		NullTest   *test;

		if (attnum == InvalidAttrNumber ||
			attnum != stream_column_of(relationObjectId))
			continue;
		if (stream_capture_has_rows_in(relationObjectId))
		{
			root->glob->transientPlan = true;
			continue;
		}
		test = makeNode(NullTest);
		test->arg = (Expr *) makeVar(rel->relid, attnum, INT8OID, -1,
									 InvalidOid, 0);
		test->nulltesttype = IS_NOT_NULL;
		test->argisrow = false;
		test->location = -1;
		index->indpred = list_make1(test);
	}
}

/*
 * stream_planner_init
 *		Install the hook (from _PG_init).
 */
void
stream_planner_init(void)
{
	prev_get_relation_info_hook = get_relation_info_hook;
	get_relation_info_hook = stream_relation_info;
}
