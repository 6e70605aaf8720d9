/* parallel.h - how many threads a kernel call uses, and running one
 * function on several threads.
 *
 * Thread policy (issue 15: "never slower than one thread").  The ceiling is
 * OpenBLAS's thread count, which set_num_threads(n) sets; a kernel call asks
 * ct_threads_for(flops, ceiling) how many of those threads its work is worth.
 * Waking a helper thread costs a few microseconds on a quiet machine, but
 * when other processes keep every core busy the helper waits for a time
 * slice (milliseconds) and the caller waits for it: a call that is not long
 * enough to amortise that wait runs on the calling thread.  The thresholds
 * (in parallel.c) are measured with `python bench/bench_threads.py --gemm`.
 *
 * ct_parallel_run is used where the work splits into parts that never talk
 * to each other, e.g. the batch rows of a recurrent layer: every sequence of
 * the batch runs its whole time loop independently, so each thread takes a
 * block of rows for all T steps and the threads meet only once, at the end
 * (no per-step barrier). */
#ifndef CT_PARALLEL_H
#define CT_PARALLEL_H

/* Threads (1 .. ceiling) worth using for one call doing `flops`
 * floating-point operations (a GEMM: 2 M N K). */
int ct_threads_for(double flops, int ceiling);

/* Load-blind mode (torch.use_deterministic_algorithms): the count depends on
 * the work size and the ceiling only, never on other processes' load, so a
 * GEMM splits its rows the same way every run and the results repeat to the
 * bit at a fixed set_num_threads(n) (OpenBLAS sums in a thread-count
 * dependent order).  Off by default: speed under load wins. */
void ct_threads_set_load_blind(int on);
int ct_threads_load_blind(void);

typedef void (*ct_parallel_fn)(void *ctx, int rank, int size);

/* Calls fn(ctx, rank, size) for every rank in [0, size): rank 0 on the
 * caller, the others on threads started for this call and joined before it
 * returns.  A rank whose thread cannot start runs on the caller after rank 0,
 * so every rank always runs exactly once. */
void ct_parallel_run(int size, ct_parallel_fn fn, void *ctx);

#endif
