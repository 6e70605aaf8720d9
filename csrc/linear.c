/* linear.c - fully connected layer and batched matrix product.
 * GEMMs go to OpenBLAS; everything here is a thin contract around them. */
#ifndef CT_TEMPLATE_PASS
#define CT_TEMPLATE_FILE "linear.c"
#include "ct_template.h"
#else

/* linear_forward
 *   inp    (M, K)   rows are any flattened leading dims
 *   weight (N, K)   torch's layout: out_features x in_features
 *   bias   (N) or NULL
 *   out    (M, N) = inp @ weight^T + bias
 */
void FN(linear_forward)(real *out, const real *inp, const real *weight, const real *bias,
                        ct_int M, ct_int K, ct_int N)
{
    if (M == 0 || N == 0) return;
    if (K == 0) { /* no product: out = the bias rows, or 0 */
        if (bias == NULL)
            memset(out, 0, (size_t)(M * N) * sizeof(real));
        else
            for (ct_int m = 0; m < M; m++) memcpy(out + m * N, bias, (size_t)N * sizeof(real));
        return;
    }
    /* out = bias rows, then += the product, block by block (GEMM_BIAS, ct_blas.h) */
    GEMM_BIAS(CT_NOTRANS, CT_TRANS, (int)M, (int)N, (int)K, 1, inp, (int)K, weight, (int)K, 0, out, (int)N, bias);
}

/* Sum of the M rows of dout (M, N) into dbias (N): += when accumulate,
 * = otherwise.  Row-major sweep so the inner loop is contiguous. */
static CT_VECTOR_CLONES void FN(sum_rows)(real *restrict dbias, const real *restrict dout, ct_int M,
                                          ct_int N, int accumulate)
{
    if (!accumulate) memset(dbias, 0, (size_t)N * sizeof(real));
    for (ct_int m = 0; m < M; m++) {
        const real *restrict row = dout + m * N;
        for (ct_int n = 0; n < N; n++) dbias[n] += row[n];
    }
}

/* linear_backward
 *   dout    (M, N)
 *   dinp    (M, K)  (+)= dout @ weight        (skipped when NULL)
 *   dweight (N, K)  (+)= dout^T @ inp         (skipped when NULL)
 *   dbias   (N)     (+)= sum over rows of dout (skipped when NULL)
 * accumulate = 1 adds into the gradient buffers (the convention); 0 lets a
 * caller with fresh, uninitialised buffers skip zeroing them (GEMM beta 0).
 */
void FN(linear_backward)(real *dinp, real *dweight, real *dbias, const real *dout,
                         const real *inp, const real *weight, ct_int M, ct_int K, ct_int N,
                         int accumulate)
{
    real beta = accumulate ? 1 : 0;
    if (M == 0 || N == 0 || K == 0) {
        /* empty products: fresh buffers must still read as zeros */
        if (!accumulate && dinp) memset(dinp, 0, (size_t)(M * K) * sizeof(real));
        if (!accumulate && dweight) memset(dweight, 0, (size_t)(N * K) * sizeof(real));
        if (dbias) {
            if (M == 0 || N == 0) {
                if (!accumulate) memset(dbias, 0, (size_t)N * sizeof(real));
            } else {
                FN(sum_rows)(dbias, dout, M, N, accumulate);
            }
        }
        return;
    }
    if (dbias != NULL) FN(sum_rows)(dbias, dout, M, N, accumulate);
    if (dinp != NULL)
        GEMM(CT_ROWMAJOR, CT_NOTRANS, CT_NOTRANS, (int)M, (int)K, (int)N, 1, dout, (int)N, weight,
             (int)K, beta, dinp, (int)K);
    if (dweight != NULL)
        GEMM(CT_ROWMAJOR, CT_TRANS, CT_NOTRANS, (int)N, (int)K, (int)M, 1, dout, (int)N, inp,
             (int)K, beta, dweight, (int)K);
}

/* bmm_forward
 *   a   (batch, M, K), consecutive matrices stride_a elements apart
 *   b   (batch, K, N), stride_b apart; a stride of 0 broadcasts one matrix
 *   out (batch, M, N) = a @ b    (contiguous)
 */
void FN(bmm_forward)(real *out, const real *a, const real *b, ct_int batch, ct_int stride_a,
                     ct_int stride_b, ct_int M, ct_int K, ct_int N)
{
    if (batch == 0 || M == 0 || N == 0) return;
    if (K == 0) {
        memset(out, 0, (size_t)(batch * M * N) * sizeof(real));
        return;
    }
    for (ct_int i = 0; i < batch; i++)
        GEMM(CT_ROWMAJOR, CT_NOTRANS, CT_NOTRANS, (int)M, (int)N, (int)K, 1, a + i * stride_a,
             (int)K, b + i * stride_b, (int)N, 0, out + i * M * N, (int)N);
}

/* bmm_backward (accumulates; a broadcast operand, stride 0, sums over batch)
 *   da (same layout as a) += dout @ b^T
 *   db (same layout as b) += a^T @ dout
 */
void FN(bmm_backward)(real *da, real *db, const real *dout, const real *a, const real *b,
                      ct_int batch, ct_int stride_a, ct_int stride_b, ct_int M, ct_int K,
                      ct_int N)
{
    if (batch == 0 || M == 0 || N == 0 || K == 0) return;
    for (ct_int i = 0; i < batch; i++) {
        const real *dout_i = dout + i * M * N;
        if (da != NULL)
            GEMM(CT_ROWMAJOR, CT_NOTRANS, CT_TRANS, (int)M, (int)K, (int)N, 1, dout_i, (int)N,
                 b + i * stride_b, (int)N, 1, da + i * stride_a, (int)K);
        if (db != NULL)
            GEMM(CT_ROWMAJOR, CT_TRANS, CT_NOTRANS, (int)K, (int)N, (int)M, 1, a + i * stride_a,
                 (int)K, dout_i, (int)N, 1, db + i * stride_b, (int)N);
    }
}

#endif
