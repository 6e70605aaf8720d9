/* ct_blas.h - the one place that knows which OpenBLAS we link.
 *
 * Default build: OpenBLAS from PyPI's scipy-openblas32, whose symbols carry
 * a `scipy_` prefix (CT_BLAS_SCIPY is defined by setup.py).  Fallback build
 * (CT_BLAS=system): the system OpenBLAS found by pkg-config, unprefixed.
 * Everything else calls CT_BLAS(cblas_sgemm) etc. */
#ifndef CT_BLAS_H
#define CT_BLAS_H

#include <cblas.h>

#include "ct.h"
#include "parallel.h"

#ifdef CT_BLAS_SCIPY
#define CT_BLAS(name) CT_CAT(scipy_, name)
#else
#define CT_BLAS(name) name
#endif

#define CT_NOTRANS CblasNoTrans
#define CT_TRANS CblasTrans
#define CT_ROWMAJOR CblasRowMajor

/* Threads.  OpenBLAS itself runs on one thread, always (set when the module
 * loads, ct_blas_init_threads): its idle workers busy-wait, and on a small
 * machine they held the very core our pool's workers needed (a worker of
 * ours then ran 4 % of the ranks meant for it).  Products big enough for
 * several threads are split here instead, into blocks of rows or columns of
 * C, each a one-thread OpenBLAS call on a thread of our pool (parallel.h);
 * set_num_threads(n) is our ceiling (ct_set_num_threads, parallel.h). */

/* At module load: the thread count OpenBLAS chose (OPENBLAS_NUM_THREADS or
 * the cores) becomes our ceiling, and OpenBLAS goes to one thread. */
static inline void ct_blas_init_threads(void)
{
    ct_set_num_threads(CT_BLAS(openblas_get_num_threads)());
    CT_BLAS(openblas_set_num_threads)(1);
}

/* Whether a program set OpenBLAS's own thread count above one (through
 * OpenBLAS's API, as bench/ does for raw sgemm timings): its GEMMs then go
 * to OpenBLAS whole, which threads them itself, not split a second time. */
static inline int ct_blas_threads_set_by_user(void) { return CT_BLAS(openblas_get_num_threads)() > 1; }

/* Block lengths of a split product are multiples of CT_SPLIT_ALIGN rows or
 * columns (whole micro-kernel tiles), the last block excepted, and a block
 * has at least that many.  Each thread's block is as long as its measured
 * speed makes it (ct_parallel_shares, parallel.h): equal halves, on a machine whose
 * two cores ran at different speeds, left the faster waiting. */
#define CT_SPLIT_ALIGN 16

/* Blocks per thread of a split product.  One: measured in one process,
 * interleaved, against OpenBLAS's own threading at 2 threads (shapes of the
 * training steps, 768x64x256 .. 1024x8000x512), one block per thread was
 * within 3 % of it everywhere; two per thread (a late worker's second block
 * going to the caller) lost up to 10 % on the large shapes, whose blocks
 * then fill OpenBLAS's cache blocking less. */
#ifndef CT_SPLIT_BLOCKS
#define CT_SPLIT_BLOCKS 1
#endif

/* Threads (or blocks) for a product whose split dimension is `extent` long. */
static inline int ct_split_threads(int threads, int extent)
{
    int most = extent / CT_SPLIT_ALIGN;
    return threads < most ? threads : (most < 1 ? 1 : most);
}

/* The GEMM of ct_template.h: cblas_?gemm (row-major), split over the pool
 * along the longer of C's two dimensions when the policy gives it more than
 * one thread (ct_threads_for: one below 5 MFLOP), into blocks sized by the
 * threads' speeds (ct_parallel_shares).  A block of rows reads
 * the same rows of op(A), a block of columns the same columns of op(B). */
#define CT_GEMM_WITH_POLICY(name, real, blas_gemm)                                                    \
    typedef struct {                                                                                   \
        enum CBLAS_TRANSPOSE ta, tb;                                                                   \
        int M, N, K, lda, ldb, ldc, by_rows;                                                           \
        real alpha, beta;                                                                              \
        const real *A, *B;                                                                             \
        real *C;                                                                                       \
        const real *bias; /* NULL, or (N): C's block is set to it first (then beta is 1) */            \
    } name##_split;                                                                                    \
    /* C[m, lo:hi] = bias[lo:hi] for rows m0 .. m1 - 1 */                                              \
    static inline void name##_fill_bias(const name##_split *j, int m0, int m1, int lo, int hi)         \
    {                                                                                                  \
        for (int m = m0; m < m1; m++)                                                                  \
            memcpy(j->C + (size_t)m * j->ldc + lo, j->bias + lo, (size_t)(hi - lo) * sizeof(real));    \
    }                                                                                                  \
    /* rows (or columns) [begin, end) of C */                                                          \
    static inline void name##_block(void *arg, ptrdiff_t begin, ptrdiff_t end)                         \
    {                                                                                                  \
        const name##_split *j = arg;                                                                   \
        int lo = (int)begin, hi = (int)end;                                                            \
        if (j->bias != NULL) {                                                                         \
            if (j->by_rows)                                                                            \
                name##_fill_bias(j, lo, hi, 0, j->N);                                                  \
            else                                                                                       \
                name##_fill_bias(j, 0, j->M, lo, hi);                                                  \
        }                                                                                              \
        if (j->by_rows) {                                                                              \
            const real *A = j->ta == CblasNoTrans ? j->A + (size_t)lo * j->lda : j->A + lo;            \
            blas_gemm(CblasRowMajor, j->ta, j->tb, hi - lo, j->N, j->K, j->alpha, A, j->lda, j->B,     \
                      j->ldb, j->beta, j->C + (size_t)lo * j->ldc, j->ldc);                            \
        } else {                                                                                       \
            const real *B = j->tb == CblasNoTrans ? j->B + lo : j->B + (size_t)lo * j->ldb;            \
            blas_gemm(CblasRowMajor, j->ta, j->tb, j->M, hi - lo, j->K, j->alpha, j->A, j->lda, B,     \
                      j->ldb, j->beta, j->C + lo, j->ldc);                                             \
        }                                                                                              \
    }                                                                                                  \
    /* C (M, N) = alpha op(A) op(B) + bias, row-major, bias (N) broadcast over the rows (NULL: +   \
     * beta C): each block writes its part of C with the bias first, on its own thread (a serial   \
     * fill of a large C cost the split product a pass over memory, and its page faults). */         \
    static inline void name##_bias(enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int M, int N,    \
                                   int K, real alpha, const real *A, int lda, const real *B, int ldb, \
                                   real beta, real *C, int ldc, const real *bias)                      \
    {                                                                                                  \
        int threads = ct_threads_for(2.0 * M * N * K, ct_threads_ceiling_here());                      \
        int by_rows = M >= N;                                                                          \
        if (bias != NULL) beta = 1;                                                                    \
        name##_split job = {ta, tb, M, N, K, lda, ldb, ldc, by_rows, alpha, beta, A, B, C, bias};      \
        threads = ct_split_threads(threads, by_rows ? M : N);                                          \
        if (threads <= 1 || ct_blas_threads_set_by_user()) {                                           \
            if (bias != NULL) name##_fill_bias(&job, 0, M, 0, N);                                      \
            blas_gemm(CblasRowMajor, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);            \
            return;                                                                                    \
        }                                                                                              \
        int blocks = ct_split_threads(CT_SPLIT_BLOCKS * threads, by_rows ? M : N);                     \
        ct_parallel_shares(by_rows ? M : N, blocks, threads, CT_SPLIT_ALIGN, name##_block, &job);       \
    }                                                                                                  \
    static inline void name(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb,  \
                            int M, int N, int K, real alpha, const real *A, int lda, const real *B,   \
                            int ldb, real beta, real *C, int ldc)                                      \
    {                                                                                                  \
        if (order != CblasRowMajor) {                                                                  \
            blas_gemm(order, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);                    \
            return;                                                                                    \
        }                                                                                              \
        name##_bias(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, NULL);                       \
    }
CT_GEMM_WITH_POLICY(ct_sgemm, float, CT_BLAS(cblas_sgemm))
CT_GEMM_WITH_POLICY(ct_dgemm, double, CT_BLAS(cblas_dgemm))
#undef CT_GEMM_WITH_POLICY

#endif /* CT_BLAS_H */
