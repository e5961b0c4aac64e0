/*-------------------------------------------------------------------------
 *
 * planner.h
 *	  What planner.c offers to the files of its own layer and of the layers
 *	  above it (src/README.md).
 *
 * How the planner sees the indexes of a stream table that leave the
 * placeholder out.
 *
 *-------------------------------------------------------------------------
 */
#ifndef STREAM_SEQ_PLANNER_H
#define STREAM_SEQ_PLANNER_H

extern void stream_planner_init(void);

#endif							/* STREAM_SEQ_PLANNER_H */
