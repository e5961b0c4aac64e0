/*-------------------------------------------------------------------------
 *
 * roles.h
 *	  What roles.c offers to the files of its own layer and of the layers
 *	  above it (src/README.md).
 *
 * Roles that own consumers.
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAM_SEQ_ROLES_H
#define STREAM_SEQ_ROLES_H

#include "stream_seq.h"

extern void stream_roles_init(void);

#endif							/* STREAM_SEQ_ROLES_H */
