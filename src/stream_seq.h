/*-------------------------------------------------------------------------
 *
 * stream_seq.h
 *	  What every file of the stream_seq extension needs: the guards over
 *	  the server API of each major version, the settings, and a backend's
 *	  handle on a stream.
 *
 * A stream is an ordinary table with one bigint column whose values are
 * assigned by the extension when the inserting transaction commits.  Shared
 * memory holds, per stream, the next number and the list of transactions
 * that hold numbers; the horizon of a snapshot is computed from that list.
 * The layout of that shared state is private to shmem.c, its only writer;
 * the other files go through the functions of shmem.h.  Each module
 * declares what it offers in a header of its own (catalog.h, horizon.h,
 * ...), and a file includes only the headers of its own layer and of the
 * layers below it: the layers are in src/README.md.  See
 * doc/how-it-works.md and the comments at the top of shmem.c for the
 * argument why the horizon never lets a reader skip a row, and for the
 * lock order.
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAM_SEQ_H
#define STREAM_SEQ_H

#include "access/attnum.h"
#include "fmgr.h"
#include "utils/lsyscache.h"

/*
 * Server API that changed after PostgreSQL 15, under the names this source
 * uses (the 15 names): one tree builds against each major version.
 */
#if PG_VERSION_NUM >= 160000
#include "catalog/pg_class.h"
#include "utils/acl.h"
#include "catalog/pg_namespace.h"
#define pg_class_ownercheck(relid, roleid) \
	object_ownercheck(RelationRelationId, (relid), (roleid))
#define pg_namespace_aclcheck(nspid, roleid, mode) \
	object_aclcheck(NamespaceRelationId, (nspid), (roleid), (mode))
#include "catalog/pg_proc.h"
#define pg_proc_aclcheck(procid, roleid, mode) \
	object_aclcheck(ProcedureRelationId, (procid), (roleid), (mode))
#define check_is_member_of_role(member, role) \
	check_can_set_role((member), (role))
#endif
#if PG_VERSION_NUM >= 170000
#define STREAM_MY_LXID (MyProc->vxid.lxid)
#else
#define STREAM_MY_LXID (MyProc->lxid)
#endif
/* The storage of a relation: RelFileNode, from 16 on RelFileLocator. */
#if PG_VERSION_NUM >= 160000
#include "storage/relfilelocator.h"
typedef RelFileLocator StreamStorage;
#define stream_rel_storage(rel) ((rel)->rd_locator)
#define stream_storage_db(storage) ((storage).dbOid)
/* the subtransaction that first gave the relation new storage, if any */
#define stream_rel_first_storage_subid(rel) ((rel)->rd_firstRelfilelocatorSubid)
#else
#include "storage/relfilenode.h"
typedef RelFileNode StreamStorage;
#define stream_rel_storage(rel) ((rel)->rd_node)
#define stream_storage_db(storage) ((storage).dbNode)
#define stream_rel_first_storage_subid(rel) ((rel)->rd_firstRelfilenodeSubid)
#endif
#if PG_VERSION_NUM >= 180000
/* 18 dropped StoreAttrDefault's add_column_mode */
#define stream_store_attr_default(rel, attnum, expr) \
	StoreAttrDefault((rel), (attnum), (expr), true)
#else
#define stream_store_attr_default(rel, attnum, expr) \
	StoreAttrDefault((rel), (attnum), (expr), true, false)
#endif
#if PG_VERSION_NUM >= 180000
#define stream_index_beginscan(heap, index, snapshot, nkeys) \
	index_beginscan((heap), (index), (snapshot), NULL, (nkeys), 0)
#else
#define stream_index_beginscan(heap, index, snapshot, nkeys) \
	index_beginscan((heap), (index), (snapshot), (nkeys), 0)
#endif

/* settings.c: the settings, defined by _PG_init (startup.c) */
extern int	stream_seq_max_streams;
extern int	stream_seq_max_tracked_xacts;
extern int	stream_seq_head_interval;
extern int	stream_seq_seal_grace;
extern bool stream_seq_notify;
extern bool stream_seq_in_place;
extern int	stream_seq_round_interval;
extern int	stream_seq_rmgr_id;
extern int	stream_seq_retention_interval;
extern int	stream_seq_hold_after_numbering;
extern void stream_define_settings(void);

/*
 * stream_rel_name
 *		The name of relation "relid" for a message: get_rel_name(), or the
 *		OID as text for a relation that no longer exists (dropped by a
 *		concurrent transaction), never NULL.  NULL passed on to a "%s" or to
 *		quote_identifier() would print "(null)" or crash.  Here, not in
 *		catalog.c, because the files of every layer name relations in their
 *		messages, shmem.c (below catalog.c) too.
 */
static inline char *
stream_rel_name(Oid relid)
{
	char	   *relname = get_rel_name(relid);

	return relname != NULL ? relname : psprintf("%u", relid);
}

/*
 * A backend's handle on a stream: what the catalog says about it and which
 * shared slot holds its state.  Kept in a backend-local cache (catalog.c),
 * dropped on relcache invalidation of the table.
 */
typedef struct StreamRef
{
	Oid			relid;			/* hash key */
	bool		valid;
	AttrNumber	seq_attnum;
	AttrNumber	time_attnum;	/* the time column (0.5.0), or
								 * InvalidAttrNumber */
	Oid			head_seq;		/* sequence that records the head */
	int64		head_interval;	/* its increment: numbers per recorded block */
	Oid			owner;			/* table owner */
	int			slotno;
	uint32		generation;
} StreamRef;

#endif							/* STREAM_SEQ_H */
