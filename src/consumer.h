/*-------------------------------------------------------------------------
 *
 * consumer.h
 *	  What consumer.c offers to the files of its own layer and of the layers
 *	  above it (src/README.md).
 *
 * Consumers: their lookups and ownership checks, dropping a group's
 * indexes, and the slowest consumer of a stream, which retention must
 * not pass.
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAM_SEQ_CONSUMER_H
#define STREAM_SEQ_CONSUMER_H

#include "stream_seq.h"

/* SQLSTATE of a worker whose lease on a slot of a group was lost */
#define ERRCODE_STREAM_LEASE_LOST MAKE_SQLSTATE('S','S','0','0','1')

extern bool stream_have_groups(void);
extern void stream_check_consumer_name(const char *consumer);
extern void stream_drop_group_index(Oid relid, const char *name);
extern bool stream_slot_index_is_name(void);
extern int64 stream_consumer_lookup(Oid relid, const char *consumer,
									bool for_update, Oid *owner, int *slots);
extern void stream_check_consumer_owner(Oid relid, const char *consumer,
										Oid owner);
extern void stream_check_advance(StreamRef *ref, const char *what,
								 int64 position, int64 to_position);
extern bool stream_resize_supported(void);
extern void stream_slots_raise(Oid relid, int64 upto);
extern bool stream_slowest_consumer(Oid relid, char **consumer,
									int64 *position);
extern bool stream_slots_floor(Oid relid, int64 horizon, char **consumer,
							   int64 *position);
extern bool stream_have_key_order(void);
extern char *stream_group_key_expr(const char *slot_expr);
extern void stream_pin_key_output(void);
extern int64 stream_slot_finished_upto(Oid relid, const char *slot_expr,
									   int slot, int64 position, int64 horizon);

/*
 * Per-key order: parked row "q" of a consumer holds its key (the key's
 * later rows wait behind it) while it is not resolved, not released by
 * release_key(), and not a dead letter of a group that lets dead letters
 * go on; "$until_released" is a boolean parameter that says whether the
 * group holds a key behind a dead letter.  For stream_seq.parked.
 */
#define STREAM_KEY_BLOCKS(q, until_released) \
	"(NOT " q ".resolved AND " q ".released_at IS NULL " \
	" AND (NOT " q ".dead OR " until_released "))"

#endif							/* STREAM_SEQ_CONSUMER_H */
