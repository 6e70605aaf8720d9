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

#include <stddef.h>

/* The thread ceiling, set_num_threads(n): every kernel call uses at most
 * this many threads, ours (the pool below) and OpenBLAS's (which is kept at
 * one thread: our GEMM wrapper in ct_blas.h splits products over the pool,
 * so that only our workers ever wait for work, under our spin-then-sleep
 * rule; OpenBLAS's own idle workers busy-wait on the core ours need). */
void ct_set_num_threads(int n);
int ct_get_num_threads(void);

/* A cap on the threads of the calls made from this thread (0: none), for
 * code that knows its calls are too small to split (the recurrent steps);
 * returns the previous cap, to give back to ct_threads_cap_set. */
int ct_threads_cap_set(int cap);
/* min(ceiling, this thread's cap) */
int ct_threads_ceiling_here(void);

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

/* Calls fn(ctx, rank, size) exactly once for every rank in [0, size), on
 * the caller and up to threads - 1 workers of a persistent pool
 * (parallel.c), and returns when all have run.  Ranks are claimed as
 * threads come free, so a worker that is asleep or descheduled leaves its
 * ranks to the caller; ranks must not wait for each other.  With threads or
 * size 1, or while another caller's job is running (another Python thread,
 * or fn itself calling a kernel), every rank runs on the caller, in order. */
void ct_parallel_run(int size, int threads, ct_parallel_fn fn, void *ctx);

/* fn(ctx, begin, end) over the rows [0, n) in contiguous blocks, on as many
 * threads of the pool as `flops` of work is worth (ct_pool_threads_for,
 * from this thread's ceiling); each row is computed by one thread, whole, so
 * a row kernel gives the same bits on any thread count. */
typedef void (*ct_rows_fn)(void *ctx, ptrdiff_t begin, ptrdiff_t end);
void ct_parallel_rows(ptrdiff_t n, double flops, ct_rows_fn fn, void *ctx);

/* dst[0 .. bytes) = 0 (ct_parallel_zero) or = src[0 .. bytes)
 * (ct_parallel_copy, no overlap), in blocks of pages on the pool: a fresh
 * gradient buffer's zeros and a leaf's first gradient were the caller's
 * serial memset and memcpy while the worker idled (3-4 % of a training step
 * at 2 threads, perf).  Below 0.5 MB, one memset / memcpy on the caller. */
void ct_parallel_zero(void *dst, size_t bytes);
void ct_parallel_copy(void *dst, const void *src, size_t bytes);

/* ---- parts sized by each thread's measured speed ----------------------------
 * On a machine shared with other guests the two cores do not run at the same
 * speed: measured here, in the d512 training step, the worker's halves of
 * the split GEMMs took 1.3x the caller's for seconds on end, and the caller
 * waited for them (0.2 s of a 1 s step).  ct_parallel_shares calls
 * fn(ctx, begin, end) over [0, extent) in `parts` contiguous blocks on
 * `threads` threads of the pool, the blocks taken in the order the ranks
 * start, each as long as its thread's speed relative to the others' (learnt
 * from the earlier calls, each thread timed on its block); the last block
 * taken ends at the extent, so the blocks cover it exactly once.  Lengths
 * are multiples of `align` (the last excepted).  Load-blind mode
 * (ct_threads_set_load_blind) uses equal blocks: the split then repeats run
 * to run.  With threads or parts 1, fn(ctx, 0, extent) on the caller. */
void ct_parallel_shares(ptrdiff_t extent, int parts, int threads, ptrdiff_t align, ct_rows_fn fn, void *ctx);
/* Tests and benchmarks: speeds (n of them, thread 0 the caller; each within
 * [1/3, 3]) used from now on instead of the learnt ones, in load-blind mode
 * too; NULL forgets every speed and learns again.  The speeds before go to
 * previous[0 .. n_previous).  Returns -1 (nothing changed) for a speed out
 * of range. */
int ct_share_pin(const double *speeds, int n, double *previous, int n_previous);

/* fn(ctx, begin, end) over [0, extent) for memory-bound row loops (the
 * GEMVs of decode.c): with 2 threads, the caller and a worker take blocks
 * from the two ends towards the middle, a large first block each, then
 * halves of what is left, so they finish together however the call's
 * bandwidth was shared (parallel.c); blocks are multiples of `align` but the
 * last.  Other thread counts: ct_parallel_shares with one part per thread
 * (threads 1: fn(ctx, 0, extent) on the caller). */
void ct_parallel_converge(ptrdiff_t extent, int threads, ptrdiff_t align, ct_rows_fn fn, void *ctx);

/* Threads (1 .. ceiling) worth using for one ct_parallel_run job of `flops`
 * work: the pool's workers stay awake between the kernels of a step, so a
 * job pays from CT_POOL_MIN_FLOPS on, a twentieth of a GEMM's threshold; as
 * ct_threads_for, only the idle cores are counted (load-blind: the ceiling). */
int ct_pool_threads_for(double flops, int ceiling);

#endif
