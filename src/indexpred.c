/*-------------------------------------------------------------------------
 *
 * indexpred.c
 *	  The executor's test of the predicate of a stream table's partial
 *	  indexes ("seq > 0": the stream's unique index, a group's slot index),
 *	  prepared once per session instead of once per statement.
 *
 * Before it inserts a row's entry into a partial index, PostgreSQL tests
 * the row against the index's predicate, with an expression state it
 * prepares for each statement (ExecInsertIndexTuples and, for ON
 * CONFLICT, ExecCheckIndexConstraints: ExecPrepareQual, which runs the
 * planner's constant folding and checks the right to execute the
 * operator's function).  For a 1-row INSERT that is about 3,300
 * instructions of a statement of 60,000: the largest cost a stream table's
 * write pays at INSERT that a table numbered by a sequence does not (see
 * doc/performance.md).
 *
 * So, once the executor has set up a plain INSERT into a stream table, an
 * executor hook opens the table's indexes (the INSERT would open them at
 * its first row: ExecInsert) and gives each index whose predicate is
 * "column > 0" the state this session prepared for that predicate and
 * that user.  It is the state ExecPrepareQual makes (no plan node, no JIT:
 * evaluating it needs nothing of the statement but the row), kept in a
 * memory context of the session.  What the state was made from is checked
 * at every use, not cached: the predicate the executor has just read from
 * the index's relation cache entry must be the one the state was made
 * from (compared field by field), so an index whose predicate or column
 * changed gets a new state; the state is kept for one user; and every
 * state is dropped when any function changes (pg_proc's invalidations: a
 * GRANT or REVOKE of EXECUTE on the operator's function, a function
 * replaced) or anything else the right to execute depends on (the
 * catalogs whose invalidations acl.c follows for role membership:
 * pg_auth_members, pg_authid for superuser status and INHERIT,
 * pg_database for the owner pg_database_owner stands for), so that the
 * right to execute is checked as PostgreSQL checks it; the hook of a
 * function's execution (object_access_hook, which security label
 * providers use) is run at every use, as ExecInitFunc runs it.  Other
 * indexes, other statements, COPY (which opens its indexes itself) and
 * the partitions an INSERT routes rows to (opened as rows come) prepare
 * their predicates as usual.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/objectaccess.h"
#include "commands/trigger.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "nodes/execnodes.h"
#include "optimizer/optimizer.h"
#include "utils/acl.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/syscache.h"

#include "stream_seq.h"
#include "indexpred.h"
#include "capture.h"
#include "catalog.h"

/* One prepared predicate: what it was made from, and for whom. */
typedef struct PreparedPredicate
{
	Oid			index;			/* the index it was made for */
	Oid			userid;			/* whose right to execute was checked */
	List	   *predicate;		/* the implicit-AND list it was made from */
	Oid			funcid;			/* its operator's function (with a state) */
	ExprState  *state;
} PreparedPredicate;

/* A handful: a stream has its unique index and one per group. */
#define MAX_PREPARED_PREDICATES 32

static PreparedPredicate prepared[MAX_PREPARED_PREDICATES];
static int	nprepared = 0;

/*
 * Memory.  The states kept are in a context of their own ("kept"), under
 * the session's "stream_seq index predicates".  States no longer kept (a
 * function or a role changed, a predicate changed) may still be in use by
 * a statement running (one whose trigger ran the statement that found
 * them stale): their context is moved under "retired", which is emptied
 * when no statement that was given a state runs any more ("holders", told
 * by a callback of each such statement's memory, which PostgreSQL deletes
 * at the statement's end, error or not), and at the end of the
 * transaction, which no statement outlives.  A statement whose memory is
 * deleted only after the end of its transaction (an error) belongs to an
 * older "epoch" and is not counted down.
 *
 * The array full, a new predicate is not kept (the executor prepares it,
 * as for any other index) rather than the kept ones retired, which would
 * make every statement of a transaction that cycles through more indexes
 * than the array holds prepare its states again; all are dropped at the
 * end of such a transaction ("drop_at_end"), so that the next one keeps
 * the states it uses.  An error while a state is made also leaves them to
 * be dropped then (its memory half allocated in "kept").
 */
static MemoryContext prepared_cxt = NULL;
static MemoryContext kept_cxt = NULL;
static MemoryContext retired_cxt = NULL;
static bool retired_any = false;
static bool drop_at_end = false;
static int	holders = 0;
static bool callbacks_registered = false;
static uint64 holders_epoch = 0;

typedef struct PredicateHolder
{
	MemoryContextCallback callback;
	uint64		epoch;
} PredicateHolder;

/* invalidations seen, to tell one that came while a state was made */
static uint64 proc_invalidations = 0;

/* the hash of this database's pg_database row, as acl.c keeps it */
static uint32 database_hash = 0;

static ExecutorStart_hook_type prev_executor_start = NULL;

/*
 * retire_kept
 *		Keep no state; move their memory under "retired".
 */
static void
retire_kept(void)
{
	nprepared = 0;
	if (kept_cxt != NULL)
	{
		MemoryContextSetParent(kept_cxt, retired_cxt);
		kept_cxt = NULL;
		retired_any = true;
	}
}

/*
 * forget_prepared
 *		Invalidation callback of pg_proc, pg_auth_members, pg_authid and
 *		pg_database: keep no state, as the operator functions may have
 *		changed or a user may have lost the right to execute them.
 */
static void
forget_prepared(Datum arg, int cacheid, uint32 hashvalue)
{
	/* as acl.c: another database's owner is no member of anything here */
	if (cacheid == DATABASEOID && hashvalue != 0 && hashvalue != database_hash)
		return;
	retire_kept();
	proc_invalidations++;
}

/*
 * release_holder
 *		Memory context callback of a statement given states: when no such
 *		statement runs any more, free the states no longer kept.
 */
static void
release_holder(void *arg)
{
	PredicateHolder *holder = (PredicateHolder *) arg;

	if (holder->epoch != holders_epoch)
		return;
	if (--holders == 0 && retired_any)
	{
		MemoryContextReset(retired_cxt);
		retired_any = false;
	}
}

/*
 * free_retired
 *		Transaction callback: at its end, no statement of the transaction
 *		runs; free the states no longer kept (and all of them after an
 *		array found full or an error).
 */
static void
free_retired(XactEvent event, void *arg)
{
	if (event != XACT_EVENT_COMMIT && event != XACT_EVENT_ABORT &&
		event != XACT_EVENT_PREPARE && event != XACT_EVENT_PARALLEL_COMMIT &&
		event != XACT_EVENT_PARALLEL_ABORT)
		return;
	holders = 0;
	holders_epoch++;
	if (drop_at_end)
	{
		retire_kept();
		drop_at_end = false;
	}
	if (retired_any)
	{
		MemoryContextReset(retired_cxt);
		retired_any = false;
	}
}

/*
 * excludes_placeholder
 *		Whether "predicate" is "column > 0" (catalog.c): the predicate of
 *		the stream's unique index and of a group's slot index, whose
 *		operator's function is built in.
 */
static bool
excludes_placeholder(List *predicate)
{
	OpExpr	   *op;

	if (list_length(predicate) != 1 || !IsA(linitial(predicate), OpExpr))
		return false;
	op = linitial(predicate);
	return list_length(op->args) == 2 && IsA(linitial(op->args), Var) &&
		stream_predicate_excludes_placeholder(predicate,
											  ((Var *) linitial(op->args))->varattno);
}

/*
 * same_comparison
 *		Whether "now", an index's predicate, is "kept", a predicate of the
 *		form "column > 0" (excludes_placeholder): equal() for that form,
 *		in a tenth of its instructions (it is asked for every statement).
 */
static bool
same_comparison(List *kept, List *now)
{
	OpExpr	   *a = linitial(kept);
	OpExpr	   *b;
	Var		   *va = linitial(a->args);
	Var		   *vb;
	Const	   *ca = lsecond(a->args);
	Const	   *cb;

	if (list_length(now) != 1 || !IsA(linitial(now), OpExpr))
		return false;
	b = linitial(now);
	if (b->opno != a->opno || b->opresulttype != a->opresulttype ||
		b->opretset != a->opretset || b->opcollid != a->opcollid ||
		b->inputcollid != a->inputcollid || list_length(b->args) != 2 ||
		!IsA(linitial(b->args), Var) || !IsA(lsecond(b->args), Const))
		return false;
	vb = linitial(b->args);
	cb = lsecond(b->args);
	return vb->varno == va->varno && vb->varattno == va->varattno &&
		vb->vartype == va->vartype && vb->vartypmod == va->vartypmod &&
		vb->varcollid == va->varcollid && vb->varlevelsup == va->varlevelsup &&
		cb->consttype == ca->consttype && cb->consttypmod == ca->consttypmod &&
		cb->constcollid == ca->constcollid && cb->constisnull == ca->constisnull &&
		cb->constbyval && ca->constbyval && cb->constlen == ca->constlen &&
		cb->constvalue == ca->constvalue;
}

/*
 * prepared_predicate
 *		The session's state for predicate "predicate" of index "index", run
 *		as the current user: the one kept, when it was made from an equal
 *		predicate for the same user, else a new one; NULL for a predicate
 *		other than "column > 0".
 */
static ExprState *
prepared_predicate(Oid index, List *predicate)
{
	Oid			userid = GetUserId();
	PreparedPredicate *slot;
	MemoryContext old;
	List	   *copy;
	ExprState  *state;
	bool		was_drop_at_end;
	uint64		seen;
	int			i;

	for (i = 0; i < nprepared; i++)
	{
		if (prepared[i].index == index && prepared[i].userid == userid)
		{
			if (prepared[i].state == NULL)
			{
				if (equal(prepared[i].predicate, predicate))
					return NULL;
			}
			else if (same_comparison(prepared[i].predicate, predicate))
			{
				/* what ExecInitFunc runs for every statement */
				InvokeFunctionExecuteHook(prepared[i].funcid);
				return prepared[i].state;
			}
			/* the index's predicate changed (not seen in practice) */
			retire_kept();
			break;
		}
	}

	/*
	 * The array full: the executor prepares this one, in the statement's
	 * memory; all are dropped at the end of the transaction.
	 */
	if (nprepared == MAX_PREPARED_PREDICATES)
	{
		drop_at_end = true;
		return NULL;
	}

	/*
	 * A user who may not execute the operator's function: not kept, so
	 * that the executor prepares the predicate, and refuses, at the first
	 * row as without this file (an INSERT of no row is not refused).
	 * Invalidations taken in from here on (catalog lookups) are seen below.
	 */
	seen = proc_invalidations;
	if (excludes_placeholder(predicate) &&
		pg_proc_aclcheck(get_opcode(((OpExpr *) linitial(predicate))->opno),
						 userid, ACL_EXECUTE) != ACLCHECK_OK)
		return NULL;

	/*
	 * What ExecPrepareQual does, in the session's memory, for a predicate
	 * that leaves out the placeholder; another (an index of the user's) is
	 * kept with no state, and prepared by the executor as usual.  An error
	 * leaves memory to free at the end of the transaction.
	 */
	if (kept_cxt == NULL)
		kept_cxt = AllocSetContextCreate(prepared_cxt,
										 "stream_seq index predicates kept",
										 ALLOCSET_SMALL_SIZES);
	was_drop_at_end = drop_at_end;
	drop_at_end = true;
	old = MemoryContextSwitchTo(kept_cxt);
	copy = copyObject(predicate);
	state = NULL;
	if (excludes_placeholder(copy))
		state = ExecInitQual((List *) expression_planner((Expr *) copy), NULL);
	MemoryContextSwitchTo(old);
	drop_at_end = was_drop_at_end;

	/*
	 * A function changed while the state was made (its catalog lookups
	 * take in invalidations): the statement uses it, as it would have used
	 * its own, but it is not kept (its memory was retired with the rest).
	 */
	if (seen != proc_invalidations)
		return state;
	slot = &prepared[nprepared++];
	slot->index = index;
	slot->userid = userid;
	slot->predicate = copy;
	slot->funcid = state != NULL ?
		get_opcode(((OpExpr *) linitial(copy))->opno) : InvalidOid;
	slot->state = state;
	return state;
}

/*
 * inserts_into_stream
 *		Whether the table of "rri" looks like a stream table: a plain table
 *		with indexes and a trigger named as enable() names them.  Only
 *		decides whether its indexes are opened before the first row (which
 *		is all that is saved or lost by a wrong answer): the indexes
 *		themselves tell whether the table has a capture index.  Not a
 *		table with a BEFORE INSERT statement trigger, which runs before
 *		the first row: with the indexes open, a REINDEX or ALTER INDEX it
 *		runs on one of them would be refused (they are in use).
 */
static bool
inserts_into_stream(ResultRelInfo *rri)
{
	Relation	rel = rri->ri_RelationDesc;
	TriggerDesc *trigdesc = rri->ri_TrigDesc;
	int			i;

	if (rel->rd_rel->relkind != RELKIND_RELATION ||
		!rel->rd_rel->relhasindex || trigdesc == NULL ||
		trigdesc->trig_insert_before_statement)
		return false;
	for (i = 0; i < trigdesc->numtriggers; i++)
	{
		if (stream_is_own_trigger_name(trigdesc->triggers[i].tgname))
			return true;
	}
	return false;
}

/*
 * give_prepared_predicates
 *		Give the partial indexes of "rri", when it is a stream table's (it
 *		has a capture index), the session's prepared predicate.
 */
static void
give_prepared_predicates(EState *estate, ResultRelInfo *rri)
{
	bool		stream = false;
	PredicateHolder *holder;
	int			i;

	for (i = 0; i < rri->ri_NumIndices; i++)
	{
		if (stream_is_capture_index(rri->ri_IndexRelationDescs[i]))
		{
			stream = true;
			break;
		}
	}
	if (!stream)
		return;

	/* once per session; the contexts are set last, so an error retries */
	if (prepared_cxt == NULL)
	{
		MemoryContext cxt;

		database_hash = GetSysCacheHashValue1(DATABASEOID,
											  ObjectIdGetDatum(MyDatabaseId));
		cxt = AllocSetContextCreate(TopMemoryContext,
									"stream_seq index predicates",
									ALLOCSET_SMALL_SIZES);
		retired_cxt = AllocSetContextCreate(cxt,
											"stream_seq index predicates retired",
											ALLOCSET_SMALL_SIZES);
		if (!callbacks_registered)
		{
			CacheRegisterSyscacheCallback(PROCOID, forget_prepared, (Datum) 0);
			CacheRegisterSyscacheCallback(AUTHMEMROLEMEM, forget_prepared, (Datum) 0);
			CacheRegisterSyscacheCallback(AUTHOID, forget_prepared, (Datum) 0);
			CacheRegisterSyscacheCallback(DATABASEOID, forget_prepared, (Datum) 0);
			RegisterXactCallback(free_retired, NULL);
			callbacks_registered = true;
		}
		prepared_cxt = cxt;
	}

	/*
	 * The statement holds the states it is given until its memory is
	 * deleted: counted before any is given (making one may retire those
	 * given before it).
	 */
	holder = palloc(sizeof(PredicateHolder));
	holder->callback.func = release_holder;
	holder->callback.arg = holder;
	holder->epoch = holders_epoch;
	MemoryContextRegisterResetCallback(estate->es_query_cxt, &holder->callback);
	holders++;

	for (i = 0; i < rri->ri_NumIndices; i++)
	{
		IndexInfo  *info = rri->ri_IndexRelationInfo[i];

		if (info->ii_Predicate != NIL && info->ii_PredicateState == NULL)
			info->ii_PredicateState =
				prepared_predicate(RelationGetRelid(rri->ri_IndexRelationDescs[i]),
								   info->ii_Predicate);
		/* NULL leaves it to the executor */
	}
}

/*
 * stream_executor_start
 *		ExecutorStart_hook: once the executor has set up an INSERT into a
 *		stream table, open the table's indexes as the INSERT would at its
 *		first row (ExecInsert: with the arbiters' unique checks when it has
 *		ON CONFLICT), and give the partial ones the session's prepared
 *		predicate.  The INSERT finds them open.  Other statements, and the
 *		partitions an INSERT into a partitioned stream routes rows to
 *		(opened as rows come), are left as they are.
 */
static void
stream_executor_start(QueryDesc *queryDesc, int eflags)
{
	ModifyTableState *mtstate;
	ResultRelInfo *rri;
	MemoryContext old;

	if (prev_executor_start)
		prev_executor_start(queryDesc, eflags);
	else
		standard_ExecutorStart(queryDesc, eflags);

	if (queryDesc->operation != CMD_INSERT ||
		(eflags & EXEC_FLAG_EXPLAIN_ONLY) ||
		queryDesc->planstate == NULL ||
		!IsA(queryDesc->planstate, ModifyTableState))
		return;
	mtstate = (ModifyTableState *) queryDesc->planstate;
	if (mtstate->operation != CMD_INSERT || mtstate->mt_nrels != 1)
		return;
	rri = mtstate->resultRelInfo;
	if (rri->ri_IndexRelationDescs != NULL || !inserts_into_stream(rri))
		return;
	/* in the statement's memory, where ExecInsert would open them */
	old = MemoryContextSwitchTo(queryDesc->estate->es_query_cxt);
	ExecOpenIndices(rri,
					((ModifyTable *) mtstate->ps.plan)->onConflictAction != ONCONFLICT_NONE);
	give_prepared_predicates(queryDesc->estate, rri);
	MemoryContextSwitchTo(old);
}

/*
 * stream_indexpred_init
 *		Install the executor hook (_PG_init).
 */
void
stream_indexpred_init(void)
{
	prev_executor_start = ExecutorStart_hook;
	ExecutorStart_hook = stream_executor_start;
}
