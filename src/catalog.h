/*-------------------------------------------------------------------------
 *
 * catalog.h
 *	  What catalog.c offers to the files of its own layer and of the layers
 *	  above it (src/README.md).
 *
 * The stream catalog and its cache, statements run as the extension's
 * owner or as the caller, and the checks the SQL functions start with.
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAM_SEQ_CATALOG_H
#define STREAM_SEQ_CATALOG_H

#include "fmgr.h"
#include "storage/lockdefs.h"
#include "utils/relcache.h"
#include "utils/reltrigger.h"
#include "utils/snapshot.h"

#include "stream_seq.h"

extern void stream_catalog_init(void);
extern Oid	stream_namespace(bool missing_ok);
extern bool stream_is_own_trigger_function(Oid funcid, const char **name);
extern bool stream_is_own_trigger_name(const char *name);
extern Oid	stream_capture_index(Oid relid);
extern void stream_drop_write_path(Oid relid, AttrNumber seq_attnum,
								   AttrNumber time_attnum);
extern bool stream_predicate_excludes_placeholder(List *pred, AttrNumber attnum);
extern bool stream_predicate_is_numbered(List *pred, AttrNumber attnum);
extern bool stream_default_is_placeholder(Relation rel, AttrNumber attnum,
										  bool time);
extern bool stream_trigger_obsolete(Oid relid, const char *name);
extern bool stream_trigger_disabled(Oid relid, Trigger *trigger);
extern Oid	stream_database_owner(void);
extern void stream_grant_head_access(Oid head_seq);
extern void stream_lock_role(Oid role);
extern bool stream_pglogical_installed(void);
extern bool stream_trigger_function_installed(const char *name);
extern bool stream_table_has_triggers(Oid relid);
extern StreamRef *stream_lookup(Oid relid, bool missing_ok);
extern StreamRef *stream_lookup_if_slot(Oid relid, bool *no_slot);
extern void stream_report_not_stream(Oid relid);
extern void stream_check_select(Oid relid);
extern void stream_check_not_null(FunctionCallInfo fcinfo, int nargs,
								  const char *what);
extern void stream_check_locked(Oid relid, LOCKMODE lockmode);
extern StreamRef *stream_lookup_locked(Oid relid, LOCKMODE lockmode);
extern Relation stream_relation_open(Oid relid, LOCKMODE lockmode);
extern char *stream_qualified_name(Oid relid);
extern Oid	stream_catalog_relid(bool missing_ok);
extern char *stream_source(Oid relid);
extern char *stream_clip_name(const char *name, int max_bytes);
extern Oid	stream_catalog_owner(void);
extern bool stream_catalog_has(Oid relid);
extern char *stream_catalog_seq_column(Oid relid);
extern void stream_catalog_insert(Oid relid, const char *column, Oid head_seq);
extern void stream_catalog_delete(Oid relid);
extern void stream_catalog_hold(Oid relid, const char *consumer);
extern void stream_catalog_record_start(Oid relid, int64 first);
extern int64 stream_catalog_first(Oid relid);
extern uint64 stream_catalog_exec(const char *sql, int nargs, Oid *argtypes,
								  Datum *values, int64 *row, int ncols,
								  bool *found);
extern uint64 stream_catalog_exec_nulls(const char *sql, int nargs,
										Oid *argtypes, Datum *values,
										const char *nulls);
extern uint64 stream_catalog_exec_latest(const char *sql, int nargs,
										 Oid *argtypes, Datum *values,
										 int64 *row, int ncols, bool *found);
extern uint64 stream_catalog_exec_in(const char *sql, Snapshot snapshot,
									 int64 *row, int ncols, bool *found);
extern char *stream_catalog_text(const char *sql, int nargs, Oid *argtypes,
								 Datum *values);
extern char *stream_catalog_text_row(const char *sql, int nargs,
									 Oid *argtypes, Datum *values,
									 int64 *row, int ncols);
extern uint64 stream_catalog_rows(const char *sql, int nargs, Oid *argtypes,
								  Datum *values, int ncols, int64 **rows);
extern uint64 stream_caller_exec(const char *sql, int nargs, Oid *argtypes,
								 Datum *values);
extern void stream_run_as(Oid role, int *save_nestlevel, Oid *save_userid,
						  int *save_sec_context);
extern void stream_run_as_end(int save_nestlevel, Oid save_userid,
							  int save_sec_context);

#endif							/* STREAM_SEQ_CATALOG_H */
