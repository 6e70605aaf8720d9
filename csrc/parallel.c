/* parallel.c - see parallel.h. */
#define _GNU_SOURCE /* pthread, CLOCK_MONOTONIC_COARSE, O_CLOEXEC under -std=c11 */
#include "parallel.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CT_PARALLEL_MAX 64

/* ---------------------------------------------------------------------------
 * Thread policy (see parallel.h).
 *
 * The thresholds were measured when OpenBLAS still ran its own threads
 * (`python bench/bench_threads.py --gemm`, 2-core AMD EPYC, bundled OpenBLAS
 * 0.3.34, OPENBLAS_THREAD_TIMEOUT=20 as ctransformer sets it): time of one
 * sgemm at 2 threads / at 1 thread, calls back to back, with k other
 * processes busy on the machine (the loaded columns are noisy: repeated runs
 * moved single entries by 2x and more, never below the quiet column):
 *
 *     MFLOP (M x N x K)        k = 0    k = 1    k = 2
 *       1.0 (128x64x64)        1.05     1.40     1.57
 *       2.1 (256x64x64)        0.75     1.41    15.0
 *       6.3 (768x64x64)        0.68     1.13     1.17
 *      25.2 (768x256x64)       0.67     1.20     2.03
 *      33.6 (1024x128x128)     0.67     1.01     3.97
 *     134   (1024x512x128)     0.64     1.01     1.49
 *     537   (1024x512x512)     0.63     1.20     1.16
 *    2148   (1024x2048x512)    0.62     1.02     1.50
 *    8389   (1024x8000x512)    0.56     0.95     0.77
 *
 * So on a quiet machine a second thread pays from ~2 MFLOP on when the
 * worker is still awake; inside a training step the gaps between GEMMs let
 * it fall asleep, and waking it costs tens of microseconds, hence 5 MFLOP
 * (the demo-size step, whose GEMMs are 6-30 MFLOP: 0.90x the 1-thread time
 * at 2 threads with this threshold).  When the cores are taken the caller
 * waits for a descheduled helper (a time slice, milliseconds) and only
 * GEMMs of several GFLOP (>= 50 ms) gain reliably.  Hence two thresholds,
 * and between them the number of idle cores decides: the runnable threads of
 * the whole machine (/proc/loadavg) less our own (/proc/self/task), sampled
 * at most every CT_LOAD_SAMPLE_NS.
 * GEMMs are now split over our pool instead (ct_blas.h), with the same
 * thresholds: on a 2-core Intel Xeon (AVX-512), quiet, our split at 2 threads
 * / 1 thread measured 0.56 (768x64x256), 0.56 (1024x128x128), 0.69
 * (1024x512x128), 0.70 (1024x512x512), 0.54 (1024x2048x512), 0.53
 * (1024x8000x512), within 3 % of OpenBLAS's own threading in the same
 * process, interleaved (bench_threads.py --gemm prints both). */
#ifndef CT_THREADS_QUIET_MIN_FLOPS
#define CT_THREADS_QUIET_MIN_FLOPS 5.0e6 /* below: one thread */
#endif
#define CT_THREADS_BUSY_MIN_FLOPS 4.0e9  /* from here: the ceiling, however busy */
#define CT_LOAD_SAMPLE_NS 10000000L      /* 10 ms */

static int online_cores(void)
{
    static int cores; /* 0: not read yet (benign race: every reader gets the same value) */
    if (__atomic_load_n(&cores, __ATOMIC_RELAXED) == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        __atomic_store_n(&cores, n < 1 ? 1 : (int)n, __ATOMIC_RELAXED);
    }
    return __atomic_load_n(&cores, __ATOMIC_RELAXED);
}

/* The whole text of a small /proc file into buf; its length, or -1. */
static int read_small_file(const char *path, char *buf, int size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t got = read(fd, buf, (size_t)size - 1);
    close(fd);
    if (got <= 0) return -1;
    buf[got] = '\0';
    return (int)got;
}

/* Runnable threads on the machine now (the 4th field of /proc/loadavg,
 * "running/total"); -1 where it cannot be read. */
static int machine_runnable(void)
{
    char text[128];
    double avg1, avg5, avg15;
    int running, total;
    if (read_small_file("/proc/loadavg", text, sizeof text) < 0) return -1;
    if (sscanf(text, "%lf %lf %lf %d/%d", &avg1, &avg5, &avg15, &running, &total) != 5) return -1;
    return running;
}

/* Runnable threads of this process now (state R in /proc/self/task/<tid>/stat):
 * the caller, and OpenBLAS workers still finishing their part of the last
 * call, which must not be taken for another process's load. */
static int own_runnable(void)
{
    DIR *tasks = opendir("/proc/self/task");
    if (tasks == NULL) return 1;
    int running = 0;
    struct dirent *entry;
    while ((entry = readdir(tasks)) != NULL) {
        char path[64], text[512];
        if (entry->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "/proc/self/task/%.20s/stat", entry->d_name);
        if (read_small_file(path, text, sizeof text) < 0) continue;
        const char *after_name = strrchr(text, ')'); /* "tid (name) S ..." */
        if (after_name != NULL && after_name[1] == ' ' && after_name[2] == 'R') running++;
    }
    closedir(tasks);
    return running < 1 ? 1 : running;
}

/* Cores that no other process is running on, the caller's own core not
 * counted, in one sample: our own runnable threads are read before and after
 * the machine's, and the larger count is taken, so that an OpenBLAS worker
 * going to sleep in between is not taken for another process. */
static int idle_cores_now(void)
{
    int cores = online_cores();
    int own_before = own_runnable();
    int machine = machine_runnable();
    int own_after = own_runnable();
    if (machine < 0) return cores - 1;
    int others = machine - (own_before > own_after ? own_before : own_after);
    int free_cores = cores - 1 - (others < 0 ? 0 : others);
    return free_cores < 0 ? 0 : free_cores;
}

/* idle_cores_now() sampled at most every CT_LOAD_SAMPLE_NS (a sample reads
 * a few /proc files, ~40 us), and the larger of the last two samples: a
 * process that is runnable for a moment (measured: 4 % of samples on an
 * idle machine) does not make the next 10 ms single-threaded; one that
 * keeps a core busy does, from the second sample on. */
static int idle_cores(void)
{
    static long sampled_at = -1; /* ns on CLOCK_MONOTONIC_COARSE */
    static int previous, idle;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
    long now_ns = (long)now.tv_sec * 1000000000L + now.tv_nsec;
    long last = __atomic_load_n(&sampled_at, __ATOMIC_RELAXED);
    if (last < 0 || now_ns - last >= CT_LOAD_SAMPLE_NS) {
        __atomic_store_n(&sampled_at, now_ns, __ATOMIC_RELAXED);
        int sample = idle_cores_now();
        int before = __atomic_exchange_n(&previous, sample, __ATOMIC_RELAXED);
        __atomic_store_n(&idle, last < 0 || sample > before ? sample : before, __ATOMIC_RELAXED);
    }
    return __atomic_load_n(&idle, __ATOMIC_RELAXED);
}

static int thread_ceiling; /* 0: not set yet, the online cores */
static __thread int thread_cap;

void ct_set_num_threads(int n) { __atomic_store_n(&thread_ceiling, n < 1 ? 1 : n, __ATOMIC_RELAXED); }

int ct_get_num_threads(void)
{
    int n = __atomic_load_n(&thread_ceiling, __ATOMIC_RELAXED);
    return n > 0 ? n : online_cores();
}

int ct_threads_cap_set(int cap)
{
    int previous = thread_cap;
    thread_cap = cap < 0 ? 0 : cap;
    return previous;
}

int ct_threads_ceiling_here(void)
{
    int ceiling = ct_get_num_threads();
    return thread_cap > 0 && thread_cap < ceiling ? thread_cap : ceiling;
}

/* Nonzero: the thread count depends on the work size only (see parallel.h). */
static int load_blind;

void ct_threads_set_load_blind(int on) { __atomic_store_n(&load_blind, on != 0, __ATOMIC_RELAXED); }
int ct_threads_load_blind(void) { return __atomic_load_n(&load_blind, __ATOMIC_RELAXED); }

int ct_threads_for(double flops, int ceiling)
{
    if (ceiling <= 1 || flops < CT_THREADS_QUIET_MIN_FLOPS) return 1;
    if (flops >= CT_THREADS_BUSY_MIN_FLOPS || ct_threads_load_blind()) return ceiling;
    int usable = 1 + idle_cores();
    return usable < ceiling ? usable : ceiling;
}

/* Below CT_POOL_MIN_FLOPS (the kernels' own estimates: 12 per element for
 * a layer norm, 2 for a ReLU, ...: a pool job of ~25 us and up), the caller
 * alone.  Measured on the demo-size training step at 2 threads, 2-core Intel
 * Xeon, builds alternated 14 rounds (median of per-round ratios): 2.5e5
 * took 0.88x the time of 1e6 (its layer norms, bias + ReLU and dropout of
 * 768 x 64-256 went on the pool); 1e5 took 1.05x the time of 2.5e5. */
#ifndef CT_POOL_MIN_FLOPS
#define CT_POOL_MIN_FLOPS 2.5e5
#endif

int ct_pool_threads_for(double flops, int ceiling)
{
    if (ceiling <= 1 || flops < CT_POOL_MIN_FLOPS) return 1;
    if (ct_threads_load_blind()) return ceiling;
    int usable = 1 + idle_cores();
    return usable < ceiling ? usable : ceiling;
}

/* ---------------------------------------------------------------------------
 * The pool behind ct_parallel_run: workers started once (lazily) and kept,
 * where a thread per call cost ~50 us to start and join, more than a small
 * model's head loop gains.
 *
 * A job is (fn, ctx, size, threads).  Its state is one 64-bit word, `claim`:
 *     job number (32 bits) | helpers still wanted (8) | size (12) | next rank (12)
 * and every change to it is a compare-and-swap, so
 *   - a worker joins a job by taking one of its threads - 1 helper places,
 *     then claims ranks one at a time, as the caller does: a worker that is
 *     asleep or descheduled when the job comes leaves its ranks to the
 *     caller, which never waits for a rank nobody started (it waits only for
 *     ranks running on other threads);
 *   - a worker late for a job finds another job number, or no rank left, in
 *     the word it compares, and takes nothing.  fn and ctx are read only
 *     after a successful claim of an existing rank, and the caller cannot
 *     publish the next job while that rank is unfinished, so they are the
 *     claimed job's.
 * Idle workers poll for CT_POOL_SPIN_NS with sched_yield (a process that
 * needs the core gets it), then sleep on a condition variable; the job
 * number is bumped under the mutex the sleepers check it under, so no wake-up
 * is lost.  One job at a time: a caller that finds the pool busy (another
 * Python thread's kernel, or a kernel called from a rank) runs its ranks
 * itself.  After fork() the child has none of the workers: the pool is reset
 * there. */
#ifndef CT_POOL_SPIN_NS
#define CT_POOL_SPIN_NS 100000L /* 0.1 ms: the gap between two kernels of a training step */
#endif
#define CT_POOL_MAX_RANKS 4095  /* 12 bits of `claim` */
#define CLAIM_NEXT(c) ((int)((c) & 0xFFF))
#define CLAIM_SIZE(c) ((int)(((c) >> 12) & 0xFFF))
#define CLAIM_HELPERS(c) ((int)(((c) >> 24) & 0xFF))
#define CLAIM_JOB(c) ((unsigned)((c) >> 32))
#define CLAIM_ONE_HELPER ((uint64_t)1 << 24)

static struct {
    pthread_mutex_t run_lock;   /* held by the caller of the job in progress */
    pthread_mutex_t sleep_lock; /* guards `published` changes and `sleepers` */
    pthread_cond_t wake;
    unsigned published;         /* job number; workers wait for it to change */
    int sleepers;
    uint64_t claim;             /* see above */
    ct_parallel_fn fn;          /* the job: valid while one of its ranks is claimed */
    void *ctx;
    int done;                   /* ranks of the current job finished */
    int workers;                /* started (only the caller holding run_lock starts more) */
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER};

static long monotonic_ns(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (long)now.tv_sec * 1000000000L + now.tv_nsec;
}

/* Claim and run ranks of job `job` until none is left. */
static void run_claims(unsigned job)
{
    uint64_t claim = __atomic_load_n(&pool.claim, __ATOMIC_ACQUIRE);
    for (;;) {
        if (CLAIM_JOB(claim) != job || CLAIM_NEXT(claim) >= CLAIM_SIZE(claim)) return;
        if (!__atomic_compare_exchange_n(&pool.claim, &claim, claim + 1, 0, __ATOMIC_ACQ_REL,
                                         __ATOMIC_ACQUIRE))
            continue; /* claim now holds the current value: look again */
        pool.fn(pool.ctx, CLAIM_NEXT(claim), CLAIM_SIZE(claim));
        __atomic_fetch_add(&pool.done, 1, __ATOMIC_RELEASE);
        claim = __atomic_load_n(&pool.claim, __ATOMIC_ACQUIRE);
    }
}

/* A worker takes a helper place in job `job` (0: none left, or the job is over). */
static int join_job(unsigned job)
{
    uint64_t claim = __atomic_load_n(&pool.claim, __ATOMIC_ACQUIRE);
    for (;;) {
        if (CLAIM_JOB(claim) != job || CLAIM_HELPERS(claim) == 0 || CLAIM_NEXT(claim) >= CLAIM_SIZE(claim))
            return 0;
        if (__atomic_compare_exchange_n(&pool.claim, &claim, claim - CLAIM_ONE_HELPER, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE))
            return 1;
    }
}

/* A worker's wait for a job other than `seen`: poll, then sleep. */
static unsigned wait_for_job(unsigned seen)
{
    long start = monotonic_ns();
    for (;;) {
        unsigned job = __atomic_load_n(&pool.published, __ATOMIC_ACQUIRE);
        if (job != seen) return job;
        if (monotonic_ns() - start > CT_POOL_SPIN_NS) break;
        sched_yield();
    }
    pthread_mutex_lock(&pool.sleep_lock);
    pool.sleepers++;
    unsigned job;
    while ((job = __atomic_load_n(&pool.published, __ATOMIC_ACQUIRE)) == seen)
        pthread_cond_wait(&pool.wake, &pool.sleep_lock);
    pool.sleepers--;
    pthread_mutex_unlock(&pool.sleep_lock);
    return job;
}

/* 0 on a caller's thread; i on worker i (1, 2, ...): its slot in the speeds of ct_parallel_shares. */
static __thread int pool_thread_index;

static void *worker_main(void *arg)
{
    unsigned seen = (unsigned)(uintptr_t)arg & 0xFFFFFFFFu;
    pool_thread_index = (int)((uintptr_t)arg >> 32);
    for (;;) {
        seen = wait_for_job(seen);
        if (join_job(seen)) run_claims(seen);
    }
    return NULL;
}

/* Start workers until there are `want` (as many as can be started). */
static void start_workers(int want)
{
    while (pool.workers < want) {
        pthread_t thread;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        unsigned seen = __atomic_load_n(&pool.published, __ATOMIC_ACQUIRE);
        uintptr_t start = (uintptr_t)seen | (uintptr_t)(pool.workers + 1) << 32; /* job seen, worker index */
        int failed = pthread_create(&thread, &attr, worker_main, (void *)start);
        pthread_attr_destroy(&attr);
        if (failed) return;
        pool.workers++;
    }
}

/* In the child after fork(): the workers were not copied, and a lock may
 * have been copied held. */
static void pool_after_fork_child(void)
{
    pthread_mutex_init(&pool.run_lock, NULL);
    pthread_mutex_init(&pool.sleep_lock, NULL);
    pthread_cond_init(&pool.wake, NULL);
    pool.sleepers = 0;
    pool.workers = 0;
}

static void pool_register_fork_handler(void) { pthread_atfork(NULL, NULL, pool_after_fork_child); }

void ct_parallel_run(int size, int threads, ct_parallel_fn fn, void *ctx)
{
    static pthread_once_t fork_handler_once = PTHREAD_ONCE_INIT;
    threads = threads < 1 ? 1 : threads > CT_PARALLEL_MAX ? CT_PARALLEL_MAX : threads;
    if (size <= 1 || threads == 1 || size > CT_POOL_MAX_RANKS || pthread_mutex_trylock(&pool.run_lock) != 0) {
        for (int r = 0; r < size; r++) fn(ctx, r, size);
        return;
    }
    pthread_once(&fork_handler_once, pool_register_fork_handler);
    start_workers(threads - 1);
    pool.fn = fn, pool.ctx = ctx;
    __atomic_store_n(&pool.done, 0, __ATOMIC_RELEASE);
    pthread_mutex_lock(&pool.sleep_lock);
    unsigned job = __atomic_load_n(&pool.published, __ATOMIC_RELAXED) + 1;
    uint64_t claim = (uint64_t)job << 32 | (uint64_t)(threads - 1) << 24 | (uint64_t)size << 12;
    __atomic_store_n(&pool.claim, claim, __ATOMIC_RELEASE);
    __atomic_store_n(&pool.published, job, __ATOMIC_RELEASE);
    if (pool.sleepers > 0) pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.sleep_lock);
    run_claims(job);
    /* every rank is claimed now; wait for those still running on workers */
    while (__atomic_load_n(&pool.done, __ATOMIC_ACQUIRE) < size) sched_yield();
    pthread_mutex_unlock(&pool.run_lock);
}

typedef struct {
    ct_rows_fn fn;
    void *ctx;
    ptrdiff_t n;
} rows_job;

static void rows_rank(void *arg, int rank, int size)
{
    const rows_job *job = arg;
    ptrdiff_t begin = job->n * rank / size, end = job->n * (rank + 1) / size;
    if (begin < end) job->fn(job->ctx, begin, end);
}

void ct_parallel_rows(ptrdiff_t n, double flops, ct_rows_fn fn, void *ctx)
{
    int threads = n < 2 ? 1 : ct_pool_threads_for(flops, ct_threads_ceiling_here());
    if (threads <= 1) {
        if (n > 0) fn(ctx, 0, n);
        return;
    }
    rows_job job = {fn, ctx, n};
    int blocks = (int)(n < 4 * threads ? n : 4 * threads); /* a late worker's blocks go to the caller */
    ct_parallel_run(blocks, threads, rows_rank, &job);
}

/* ---- ct_parallel_zero, ct_parallel_copy (parallel.h) ------------------------ */
#define CT_BYTES_BLOCK 4096 /* a page: blocks never share a cache line */

typedef struct {
    char *dst;
    const char *src; /* NULL: zero-fill */
    size_t bytes;
} bytes_job;

/* Pages [p0, p1) of the job (the last one may be short). */
static void bytes_pages(void *ctx, ptrdiff_t p0, ptrdiff_t p1)
{
    const bytes_job *j = ctx;
    size_t begin = (size_t)p0 * CT_BYTES_BLOCK;
    size_t end = (size_t)p1 * CT_BYTES_BLOCK < j->bytes ? (size_t)p1 * CT_BYTES_BLOCK : j->bytes;
    if (j->src == NULL)
        memset(j->dst + begin, 0, end - begin);
    else
        memcpy(j->dst + begin, j->src + begin, end - begin);
}

/* Work of a byte move in the flops of ct_pool_threads_for: 2 per float, as
 * the row copies of fused.c count theirs. */
static void bytes_run(char *dst, const char *src, size_t bytes)
{
    bytes_job job = {dst, src, bytes};
    ptrdiff_t pages = (ptrdiff_t)((bytes + CT_BYTES_BLOCK - 1) / CT_BYTES_BLOCK);
    ct_parallel_rows(pages, 0.5 * (double)bytes, bytes_pages, &job);
}

void ct_parallel_zero(void *dst, size_t bytes) { bytes_run(dst, NULL, bytes); }

void ct_parallel_copy(void *dst, const void *src, size_t bytes) { bytes_run(dst, src, bytes); }

/* ---- ct_parallel_shares (parallel.h) ---------------------------------------
 * A share splits one job's extent: its ranks take contiguous parts in the
 * order they start (share_take), each as long as its thread's speed over the
 * sum of the job's threads' speeds, and time them (share_done); after the
 * job, share_learn folds the times into the speeds.
 * speed[i]: thread i's speed relative to the other threads of recent split
 * jobs (1: as fast as their mean), an exponential average over jobs.  Data
 * races between callers of different Python threads only blur the average
 * (one job at a time runs split: see ct_parallel_run). */
#define CT_SHARE_WORD_EDGE 0xFFFFFFFFFFFFull
#define CT_SHARE_LEARN 0.25   /* weight of the newest job in the average */
#define CT_SHARE_SPEED_MIN 0.33  /* a thread gets at least a third of an equal part */
#define CT_SHARE_SPEED_MAX 3.0
static double share_speed[CT_PARALLEL_MAX]; /* 0: not measured yet (1) */
static int share_pinned; /* ct_share_pin: speeds set, not learnt, used in load-blind mode too */

#define CT_SHARE_MAX CT_PARALLEL_MAX
typedef struct {
    unsigned long long word; /* parts taken (high 16 bits) and the next edge (low 48 bits) */
    ptrdiff_t extent, align;
    int size;
    double speed_sum;        /* the speeds of the job's threads (caller, workers 1 ..), times size / threads */
    struct {
        int thread;          /* 0: the caller; i: worker i */
        ptrdiff_t len;
        long ns;
    } part[CT_SHARE_MAX];
} ct_share;

static double speed_of(int thread)
{
    double v;
    __atomic_load(&share_speed[thread], &v, __ATOMIC_RELAXED);
    return v > 0 ? v : 1.0;
}

/* Equal parts: load-blind mode (a split that repeats run to run), unless pinned. */
static int share_equal(void) { return load_blind && !share_pinned; }

int ct_share_pin(const double *speeds, int n, double *previous, int n_previous)
{
    for (int t = 0; t < n_previous && t < CT_PARALLEL_MAX; t++) previous[t] = speed_of(t);
    if (speeds == NULL) {
        share_pinned = 0;
        for (int t = 0; t < CT_PARALLEL_MAX; t++) {
            double unmeasured = 0;
            __atomic_store(&share_speed[t], &unmeasured, __ATOMIC_RELAXED);
        }
        return 0;
    }
    for (int t = 0; t < n; t++)
        if (!(speeds[t] >= CT_SHARE_SPEED_MIN && speeds[t] <= CT_SHARE_SPEED_MAX)) return -1;
    for (int t = 0; t < CT_PARALLEL_MAX; t++) {
        double v = t < n ? speeds[t] : 1.0;
        __atomic_store(&share_speed[t], &v, __ATOMIC_RELAXED);
    }
    share_pinned = 1;
    return 0;
}

static void share_init(ct_share *share, ptrdiff_t extent, int size, int threads, ptrdiff_t align)
{
    size = size < 1 ? 1 : size > CT_SHARE_MAX ? CT_SHARE_MAX : size;
    threads = threads < 1 ? 1 : threads > CT_PARALLEL_MAX ? CT_PARALLEL_MAX : threads;
    share->word = 0;
    share->extent = extent, share->align = align < 1 ? 1 : align, share->size = size;
    share->speed_sum = 0; /* of the threads expected, scaled to `size` parts */
    for (int t = 0; t < threads; t++) share->speed_sum += share_equal() ? 1.0 : speed_of(t);
    share->speed_sum *= (double)size / threads;
    for (int r = 0; r < size; r++) share->part[r].thread = -1, share->part[r].len = 0, share->part[r].ns = 0;
}

/* The rank's part: its thread's share of the whole extent, from the next
 * free edge; the last part to be taken runs to the end. */
static void share_take(ct_share *share, int rank, ptrdiff_t *lo, ptrdiff_t *hi)
{
    int thread = pool_thread_index < CT_PARALLEL_MAX ? pool_thread_index : 0;
    double speed = share_equal() ? 1.0 : speed_of(thread);
    ptrdiff_t want = (ptrdiff_t)((double)share->extent * speed / share->speed_sum + 0.5);
    want = (want + share->align / 2) / share->align * share->align;
    if (want < share->align) want = share->align;
    unsigned long long word = __atomic_load_n(&share->word, __ATOMIC_RELAXED), next;
    ptrdiff_t begin, end;
    do {
        unsigned taken = (unsigned)(word >> 48);
        begin = (ptrdiff_t)(word & CT_SHARE_WORD_EDGE);
        end = taken + 1 >= (unsigned)share->size || begin + want > share->extent ? share->extent : begin + want;
        next = (unsigned long long)(taken + 1) << 48 | (unsigned long long)end;
    } while (!__atomic_compare_exchange_n(&share->word, &word, next, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    *lo = begin, *hi = end;
    if (rank >= 0 && rank < share->size) share->part[rank].thread = thread, share->part[rank].len = end - begin;
}

static void share_done(ct_share *share, int rank, long ns)
{
    if (rank >= 0 && rank < share->size) share->part[rank].ns = ns;
}

/* Whether rank r is the first part its thread ran in this job. */
static int first_part_of_thread(const ct_share *share, int r)
{
    for (int q = 0; q < r; q++)
        if (share->part[q].thread == share->part[r].thread) return 0;
    return 1;
}

/* Each thread that ran a part (its first, when it ran two): its rate
 * (extent per ns) over the job's mean rate, into its average.  Jobs run by
 * one thread alone teach nothing. */
static void share_learn(const ct_share *share)
{
    if (load_blind || share_pinned) return;
    double rate[CT_SHARE_MAX], sum = 0;
    int n = 0;
    for (int r = 0; r < share->size; r++) {
        int ran = share->part[r].thread >= 0 && share->part[r].len > 0 && share->part[r].ns > 0;
        rate[r] = ran && first_part_of_thread(share, r) ? (double)share->part[r].len / (double)share->part[r].ns : 0;
        if (rate[r] > 0) sum += rate[r], n++;
    }
    if (n < 2) return;
    for (int r = 0; r < share->size; r++) {
        if (rate[r] <= 0) continue;
        double relative = rate[r] * n / sum;
        int t = share->part[r].thread;
        double v = (1 - CT_SHARE_LEARN) * speed_of(t) + CT_SHARE_LEARN * relative;
        v = v < CT_SHARE_SPEED_MIN ? CT_SHARE_SPEED_MIN : v > CT_SHARE_SPEED_MAX ? CT_SHARE_SPEED_MAX : v;
        __atomic_store(&share_speed[t], &v, __ATOMIC_RELAXED);
    }
}

typedef struct {
    ct_share share;
    ct_rows_fn fn;
    void *ctx;
} shares_job;

static void shares_rank(void *arg, int rank, int size)
{
    shares_job *job = arg;
    ptrdiff_t begin, end;
    (void)size;
    share_take(&job->share, rank, &begin, &end);
    if (begin >= end) return;
    long started = monotonic_ns();
    job->fn(job->ctx, begin, end);
    share_done(&job->share, rank, monotonic_ns() - started);
}

void ct_parallel_shares(ptrdiff_t extent, int parts, int threads, ptrdiff_t align, ct_rows_fn fn, void *ctx)
{
    if (extent <= 0) return;
    if (threads <= 1 || parts <= 1) {
        fn(ctx, 0, extent);
        return;
    }
    shares_job job = {.fn = fn, .ctx = ctx};
    share_init(&job.share, extent, parts, threads, align);
    ct_parallel_run(job.share.size, threads, shares_rank, &job);
    share_learn(&job.share);
}

/* ---- ct_parallel_converge (parallel.h) --------------------------------------
 * Two threads walk [0, extent) from its two ends towards each other.  The
 * part nobody took yet is one 64-bit word (its bottom edge in the low 32
 * bits, its top edge in the high 32), each claim a compare-and-swap on it.
 * A thread's first claim is CONVERGE_FIRST of the extent, every later one
 * half of what is left (at least `align`): each thread makes a handful of
 * claims, and the two finish within one short claim of each other, however
 * late the worker started and however the memory bandwidth was shared out
 * in this call.  Measured on decode_linear's GEMVs at 2 threads (in one
 * process, against ct_parallel_shares' speed-sized halves; bench_transformer
 * (c)'s model): the thread that finished first idled 0.1-0.27 ms of a
 * 1.2-1.6 ms decoding step (19 GEMVs) with the halves, 0.03-0.1 ms here;
 * the step took 0.83-0.94 of the time, one GEMV over 58 MB 0.79-0.87.
 * First claims of 7/16 (the middle eighth shared out) left the step as
 * slow as the halves: a late worker's first claim alone outlasted the
 * caller's and the whole middle. */
#define CONVERGE_FIRST 0.3

typedef struct {
    uint64_t edges;
    ptrdiff_t extent, align;
    ct_rows_fn fn;
    void *ctx;
} converge_job;

#define EDGE_LO(w) ((ptrdiff_t)((w) & 0xFFFFFFFFu))
#define EDGE_HI(w) ((ptrdiff_t)((w) >> 32))
#define EDGES(lo, hi) ((uint64_t)(hi) << 32 | (uint64_t)(lo))

/* The next block [*begin, *end) from the bottom (from_top 0) or the top of
 * the part left; 0 when nothing is left. */
static int converge_take(converge_job *j, int from_top, int first, ptrdiff_t *begin, ptrdiff_t *end)
{
    uint64_t word = __atomic_load_n(&j->edges, __ATOMIC_ACQUIRE), next;
    do {
        ptrdiff_t lo = EDGE_LO(word), hi = EDGE_HI(word), left = hi - lo;
        if (left <= 0) return 0;
        ptrdiff_t want = first ? (ptrdiff_t)(CONVERGE_FIRST * (double)j->extent) : left / 2;
        want = (want + j->align - 1) / j->align * j->align;
        if (want < j->align) want = j->align;
        if (want > left) want = left;
        if (from_top)
            *begin = hi - want, *end = hi, next = EDGES(lo, hi - want);
        else
            *begin = lo, *end = lo + want, next = EDGES(lo + want, hi);
    } while (!__atomic_compare_exchange_n(&j->edges, &word, next, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE));
    return 1;
}

/* Rank 0 walks up from the bottom, rank 1 down from the top (a rank run by
 * the caller after its own finds nothing left). */
static void converge_rank(void *arg, int rank, int size)
{
    converge_job *j = arg;
    ptrdiff_t begin, end;
    (void)size;
    for (int first = 1; converge_take(j, rank == 1, first, &begin, &end); first = 0) j->fn(j->ctx, begin, end);
}

void ct_parallel_converge(ptrdiff_t extent, int threads, ptrdiff_t align, ct_rows_fn fn, void *ctx)
{
    if (extent <= 0) return;
    if (threads <= 1) {
        fn(ctx, 0, extent);
        return;
    }
    if (threads != 2 || extent > (ptrdiff_t)0xFFFFFFFF) {
        ct_parallel_shares(extent, threads, threads, align, fn, ctx);
        return;
    }
    converge_job job = {EDGES(0, extent), extent, align < 1 ? 1 : align, fn, ctx};
    ct_parallel_run(2, 2, converge_rank, &job);
}
