/* parallel.h - run one function on several threads, each with its own rank.
 *
 * Used where the work splits into parts that never talk to each other, e.g.
 * the batch rows of a recurrent layer: every sequence of the batch runs its
 * whole time loop independently, so each thread takes a block of rows for
 * all T steps and the threads meet only once, at the end (no per-step
 * barrier). */
#ifndef CT_PARALLEL_H
#define CT_PARALLEL_H

typedef void (*ct_parallel_fn)(void *ctx, int rank, int size);

/* Calls fn(ctx, rank, size) for every rank in [0, size): rank 0 on the
 * caller, the others on threads started for this call and joined before it
 * returns.  A rank whose thread cannot start runs on the caller after rank 0,
 * so every rank always runs exactly once. */
void ct_parallel_run(int size, ct_parallel_fn fn, void *ctx);

#endif
