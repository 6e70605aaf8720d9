/* parallel.c - see parallel.h. */
#define _GNU_SOURCE /* pthread, CLOCK_MONOTONIC_COARSE, O_CLOEXEC under -std=c11 */
#include "parallel.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CT_PARALLEL_MAX 64

/* ---------------------------------------------------------------------------
 * Thread policy (see parallel.h).
 *
 * Measured (`python bench/bench_threads.py --gemm`, 2-core AMD EPYC, bundled
 * OpenBLAS 0.3.34, OPENBLAS_THREAD_TIMEOUT=20 as ctransformer sets it): time
 * of one sgemm at 2 threads / at 1 thread, calls back to back, with k other
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
 * at most every CT_LOAD_SAMPLE_NS.  OpenBLAS's idle workers spin only ~0.3 ms
 * (ctransformer/__init__.py), and only after a call that found idle cores. */
#define CT_THREADS_QUIET_MIN_FLOPS 5.0e6 /* below: one thread */
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

typedef struct {
    ct_parallel_fn fn;
    void *ctx;
    int rank, size;
} rank_call;

static void *run_rank(void *arg)
{
    rank_call *call = arg;
    call->fn(call->ctx, call->rank, call->size);
    return NULL;
}

void ct_parallel_run(int size, ct_parallel_fn fn, void *ctx)
{
    size = size < 1 ? 1 : size > CT_PARALLEL_MAX ? CT_PARALLEL_MAX : size;
    rank_call calls[CT_PARALLEL_MAX];
    pthread_t threads[CT_PARALLEL_MAX];
    int started[CT_PARALLEL_MAX] = {0};
    for (int r = 1; r < size; r++) {
        calls[r] = (rank_call){fn, ctx, r, size};
        started[r] = pthread_create(&threads[r], NULL, run_rank, &calls[r]) == 0;
    }
    fn(ctx, 0, size);
    for (int r = 1; r < size; r++) {
        if (started[r]) pthread_join(threads[r], NULL);
        else fn(ctx, r, size);
    }
}
