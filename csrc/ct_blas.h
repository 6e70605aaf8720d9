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

/* Thread control of the BLAS library (one knob with our own threads). */
static inline void ct_blas_set_num_threads(int n) { CT_BLAS(openblas_set_num_threads)(n); }
static inline int ct_blas_get_num_threads(void) { return CT_BLAS(openblas_get_num_threads)(); }

/* Lower the BLAS thread count around small GEMMs; returns the previous
 * count, to restore.  The setting is process-wide (the bundled OpenBLAS
 * exports no per-thread variant), so a GEMM running concurrently in another
 * Python thread may run with fewer threads meanwhile; results are the same. */
static inline int ct_blas_set_threads_here(int n)
{
    int previous = ct_blas_get_num_threads();
    ct_blas_set_num_threads(n);
    return previous;
}

/* OpenBLAS runs a GEMM with M N K <= 65536 * 4 (its SMP_THRESHOLD_MIN times
 * GEMM_MULTITHREAD_THRESHOLD) on the calling thread anyway.  Below that the
 * policy is skipped: setting the thread count twice costs ~0.4 us, and the
 * per-head attention GEMMs of a small model are thousands per step. */
#define CT_BLAS_SERIAL_FLOPS (2.0 * 65536 * 4)

/* Around one BLAS call doing `flops`: lower OpenBLAS's thread count to what
 * the work is worth (parallel.h); returns the count to restore (0: none).
 * Never raises the count, so a caller that already lowered it (recurrent.c
 * around its per-step GEMMs) keeps its choice. */
static inline int ct_blas_call_enter(double flops)
{
    if (flops <= CT_BLAS_SERIAL_FLOPS) return 0;
    int ceiling = ct_blas_get_num_threads();
    if (ceiling <= 1) return 0;
    int want = ct_threads_for(flops, ceiling);
    if (want >= ceiling) return 0;
    ct_blas_set_num_threads(want);
    return ceiling;
}

static inline void ct_blas_call_leave(int saved)
{
    if (saved > 0) ct_blas_set_num_threads(saved);
}

/* The GEMM of ct_template.h: cblas_?gemm with the thread policy. */
#define CT_GEMM_WITH_POLICY(name, real, blas_gemm)                                                    \
    static inline void name(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb,  \
                            int M, int N, int K, real alpha, const real *A, int lda, const real *B,   \
                            int ldb, real beta, real *C, int ldc)                                      \
    {                                                                                                  \
        int saved = ct_blas_call_enter(2.0 * M * N * K);                                               \
        blas_gemm(order, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);                        \
        ct_blas_call_leave(saved);                                                                     \
    }
CT_GEMM_WITH_POLICY(ct_sgemm, float, CT_BLAS(cblas_sgemm))
CT_GEMM_WITH_POLICY(ct_dgemm, double, CT_BLAS(cblas_dgemm))
#undef CT_GEMM_WITH_POLICY

#endif /* CT_BLAS_H */
