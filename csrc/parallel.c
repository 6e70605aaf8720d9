/* parallel.c - see parallel.h. */
#define _POSIX_C_SOURCE 200809L /* pthread under -std=c11 */
#include "parallel.h"

#include <pthread.h>

#define CT_PARALLEL_MAX 64

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
