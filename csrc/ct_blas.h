/* ct_blas.h - the one place that knows which OpenBLAS we link.
 *
 * Default build: OpenBLAS from PyPI's scipy-openblas32, whose symbols carry
 * a `scipy_` prefix (CT_BLAS_SCIPY is defined by setup.py).  Fallback build
 * (CT_BLAS=system): the system OpenBLAS found by pkg-config, unprefixed.
 * Everything else calls CT_BLAS(cblas_sgemm) etc. */
#ifndef CT_BLAS_H
#define CT_BLAS_H

#include <cblas.h>

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

#endif /* CT_BLAS_H */
