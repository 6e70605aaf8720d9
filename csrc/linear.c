/* linear.c - fully connected layer and batched matrix product.
 * GEMMs go to OpenBLAS, except the float32 forward of a layer whose inner
 * dimension is short (the packed kernel below) or of 9 to 32 rows (the
 * weight streamed, the rows packed), the forward of a few rows (decode.c's
 * decode_linear) and the float32 input gradient (the packed kernel), each
 * where measured faster on the CPU's kernel (AVX-512 or AVX2); everything
 * here is a thin contract around them. */
#ifndef CT_TEMPLATE_PASS
#include "decode.h"
#include "packed_gemm.h"
#include "parallel.h"
#define CT_TEMPLATE_FILE "linear.c"
#include "ct_template.h"
#else
#include "ct_math.h" /* CT_ROW_DOTS_MAX: decode_linear's dot-product rows */

#if CT_DTYPE_IS_F32
/* ---- float32 forward with a short inner dimension: the packed kernel --------
 * OpenBLAS's sgemm packs both operands on every call; with K <= 256 (a small
 * model's d_model and feed-forward widths) its packing took about a quarter
 * of the demo's GEMM time (perf).  packed_gemm.h packs only the weight, once
 * per call (N x K floats), and reads the rows of inp in place.  Measured on
 * this 2-core Xeon, one thread, out = inp weight^T + bias, bias included:
 *   M 768, K 64, N 64 / 192 / 256 / 300: 0.75 / 0.83 / 0.85 / 0.91 of sgemm's time;
 *   M 768, K 256, N 64: 0.90;  M 1024, K 128, N 384 / 1000: 0.95 / 0.99;
 *   M 1024, K 512, N 128: 1.05 in one go (the rows of inp no longer stay in
 *   L2); in chunks of rows (below), against the sgemm build in one process:
 *   M 1024, K 512, N 128 / 512 / 1536 / 2048: 0.89 / 0.93 / 0.94 / 0.95;
 *   M 64, K 512, N 512: 0.91;  M 3200, K 256, N 2048: 0.95;
 *   but M 1024, K 512, N 8000: 1.02 (a 16 MB weight re-read by every chunk);
 *   and with 1 or 2 rows packing the weight costs more than sgemm's product
 *   (K 64-512: 1.7-3.6x its time; 4 and 8 rows 0.62-0.78).
 * Hence at least CT_LINEAR_PACKED_MIN_M rows, K <= CT_LINEAR_PACKED_MAX_K
 * and a weight of at most CT_LINEAR_PACKED_MAX_WEIGHT_BYTES on AVX-512 (AVX2:
 * below); 9 to 32 rows with K > 256 take the streamed weight instead (below).
 * dinp's product (dinp += dout weight) takes the packed kernel too, its rows
 * in chunks that stay in L2 (linear_dinp_packed, below).
 * Each row is the kernel's k-order sum, one FMA per term, plus the bias,
 * whatever the row blocks: the same bits on any thread count.  Rows are
 * split over the pool as a GEMM's (ct_threads_for); at 2 threads taken from
 * both ends towards the middle (ct_parallel_converge: the weight is packed
 * once, so more, shorter blocks cost no repacking), else in blocks sized by
 * the threads' speeds (ct_parallel_shares).  Against speed-sized halves, in
 * one process (bench/ab_step.py, 2 threads): the demo's training step 0.972,
 * bench_transformer (b)'s d128 step 0.982. */
#define CT_LINEAR_PACKED_MIN_M 4
#define CT_LINEAR_PACKED_MAX_K 512
/* On AVX2 alone (a 2-core Zen 3 EPYC, one thread, in one process against
 * sgemm, bias included; the kernel's 6 x 16 blocks, its whole panels stored
 * unmasked), this / sgemm's time:
 *   K 64: M 768, N 64 / 192 / 256 / 300 0.88 / 0.92 / 0.93 / 0.93; M 256 / 128,
 *   N 192: 0.92 / 0.97; but M 64 / 32: 1.02 / 1.14;
 *   K 128: M 1024, N 128-1000 0.96-1.00, M 128-512 1.00-1.04, M 32 1.22;
 *   K 256-512, M 1024: 0.95-1.05 (N 128-2048); M 48 / 64, K 512: 1.13 / 1.09.
 * Sgemm's Haswell kernel is as fast as ours here; only its packing of both
 * operands is left to save, which pays at K 64.  Hence K <= 64 and at least
 * 128 rows on AVX2. */
#define CT_LINEAR_PACKED_AVX2_MIN_M 128
#define CT_LINEAR_PACKED_AVX2_MAX_K 64
#define CT_LINEAR_PACKED_MAX_WEIGHT_BYTES (4 * 1024 * 1024)

typedef struct {
    float *out;
    const float *inp, *bias;
    const ct_packed *pk;
    ct_int K, N;
    int accumulate;
} packed_job;

/* Rows [r0, r1) in chunks of at most CT_LINEAR_PACKED_CHUNK_BYTES of inp:
 * the kernel walks every panel of the weight for its rows, re-reading them
 * once per panel, so a chunk of rows must stay in L2.  Measured, one
 * thread: an LSTM's input projection (M 3200, K 256, N 2048, 3.2 MB of
 * inp) took 1.27x sgemm's time in one go, 1.03x in chunks.  (The rule is
 * on the shape alone: which kernel runs never depends on the thread count.) */
#define CT_LINEAR_PACKED_CHUNK_BYTES (256 * 1024)

static void linear_packed_chunks(float *out, const float *inp, const ct_packed *pk, const float *bias, ct_int r0,
                                 ct_int r1, ct_int K, ct_int N, int accumulate)
{
    ct_int chunk = CT_MAX(12, CT_LINEAR_PACKED_CHUNK_BYTES / (K * (ct_int)sizeof(float)) / 12 * 12);
    for (ct_int r = r0; r < r1; r += chunk)
        ct_packed_gemm(out + r * N, N, inp + r * K, K, CT_MIN(chunk, r1 - r), pk, bias, accumulate);
}

/* Rows [r0, r1) (a block of ct_parallel_converge or ct_parallel_shares). */
static void packed_rows(void *arg, ptrdiff_t r0, ptrdiff_t r1)
{
    const packed_job *j = arg;
    linear_packed_chunks(j->out, j->inp, j->pk, j->bias, (ct_int)r0, (ct_int)r1, j->K, j->N, j->accumulate);
}

/* out (M, N) (+)= a (M, K) op(w) + bias through the packed kernel, rows split over the
 * pool; op(w) = w^T for w (N, K) (w_is_nk), w for w (K, N).  Returns 0, or 1 when the
 * weight cannot be packed here (out untouched: take the GEMM). */
static int packed_product(float *out, const float *a, const float *w, int w_is_nk, const float *bias, ct_int M,
                          ct_int K, ct_int N, int accumulate)
{
    ct_packed pk;
    if (ct_packed_init(&pk, w, N, K, w_is_nk) != 0) return 1; /* out of memory: the GEMM needs none */
    int threads = ct_split_threads(ct_threads_for(2.0 * M * N * K, ct_threads_ceiling_here()), (int)M);
    packed_job job = {out, a, bias, &pk, K, N, accumulate};
    ct_parallel_converge(M, threads, CT_SPLIT_ALIGN, packed_rows, &job);
    ct_packed_free(&pk);
    return 0;
}

/* ---- few rows against a large weight: the weight streamed, the rows packed --
 * With few rows (an encoder's 32-token source while decoding), packing the
 * weight is most of the work: OpenBLAS's weight copy (sgemm_incopy) was 45 %
 * of a d512 encoder's time at 1 thread for M = 32 (perf).  Here the roles
 * swap: the M rows of inp are packed as the kernel's panel (M x K floats),
 * and the weight's rows are read in place, as the kernel's broadcast rows:
 *   outT (N, M) = weight (N, K) inp^T   (ct_packed_gemm, w's rows in blocks)
 *   out[i][n] = outT[n][i] + bias[n]     (transposed back per block)
 * Each output is the same k-order sum of single FMAs as the packed kernel's,
 * then the bias, whatever the split.  Threads take contiguous blocks of
 * weight rows from both ends of the weight towards the middle
 * (ct_parallel_converge; against speed-sized halves, ct_parallel_shares, a
 * d512 encoder's 32-token source took 0.95-0.97 of the time at 2 threads,
 * its weights cold, interleaved in one process).  Measured against sgemm on this 2-core
 * Xeon, interleaved in one process (this / sgemm's time):
 *   M 32, K x N 512 x 512 / 1536 / 2048 / 8000, 2048 x 512:
 *     0.58 / 0.66-0.69 / 0.69 / 0.71, 0.54-0.60 at 1 thread; 0.63-0.69 at 2;
 *   M 16 / 12 / 9, K 512, N 1536: 0.85 / 0.97 / 0.83; M 16, K 2048, N 512: 0.71;
 *   but M 8 / 4 / 1: 1.08-1.16, M 48: 1.08, M 64: 0.82-0.95 (the weight is
 *   then streamed once per 32 rows);
 *   K <= 256 against the packed kernel above (which packs the weight): K 256,
 *   N 1024 0.84, N 512 0.99; K 128, N 384 / 1000 0.96 / 1.11; K 64 1.10.
 * On AVX2 alone (a 2-core Zen 3 EPYC, this / sgemm's time, 1 / 2 threads):
 *   M 32, K 512, N 512 / 1536 / 2048: 0.83 / 0.81 / 0.82, 0.78 / 0.91 / 0.83;
 *   M 16 / 12, K 512, N 1536 / 512: 0.65 / 0.80, 0.65 / 0.75.
 * Hence 9 to 32 rows with K > 256 (shorter depths keep the packed kernel). */
#define CT_LINEAR_STREAMED_MIN_M 9
#define CT_LINEAR_STREAMED_MAX_M 32
#define CT_LINEAR_STREAMED_MIN_K 257

typedef struct {
    float *out, *out_t;
    const float *weight, *bias;
    const ct_packed *rows;
    ct_int M, K, N;
} streamed_job;

/* Weight rows [n0, n1): their outputs into out_t, then transposed into out.
 * The weight is read once, so its rows go through ct_packed_gemm_streamed
 * (the next block asked for while one is multiplied: bench_transformer (c)'s
 * encode and memory projection took 0.90 / 0.93 of the time at 1 / 2 threads). */
static void streamed_rows(void *arg, ptrdiff_t n0, ptrdiff_t n1)
{
    const streamed_job *j = arg;
    ct_int M = j->M, N = j->N;
    ct_packed_gemm_streamed(j->out_t + n0 * M, M, j->weight + n0 * j->K, j->K, (ct_int)(n1 - n0), j->rows, NULL, 0);
    /* out[i][n] = out_t[n][i] (16 x 16 blocks in registers: the scalar loop
     * was 12 % of the K = 512 products), then + bias[n]: one rounding, as before */
    ct_transpose_f32(j->out + n0, N, j->out_t + n0 * M, M, (ct_int)(n1 - n0), M);
    if (j->bias != NULL)
        for (ct_int i = 0; i < M; i++) {
            float *row = j->out + i * N;
            for (ct_int n = (ct_int)n0; n < (ct_int)n1; n++) row[n] = row[n] + j->bias[n];
        }
}

/* out (M, N) = inp (M, K) weight^T + bias with the weight streamed; returns
 * 0, or 1 when it does not apply here (out untouched). */
static int linear_forward_streamed(float *out, const float *inp, const float *weight, const float *bias, ct_int M,
                                   ct_int K, ct_int N)
{
    if (M < CT_LINEAR_STREAMED_MIN_M || M > CT_LINEAR_STREAMED_MAX_M || K < CT_LINEAR_STREAMED_MIN_K ||
        ct_packed_active_isa() == CT_PACKED_OFF)
        return 1;
    ct_packed rows;
    if (ct_packed_init(&rows, inp, M, K, 1) != 0) return 1;
    float *out_t = malloc((size_t)(M * N) * sizeof(float));
    if (out_t == NULL) {
        ct_packed_free(&rows);
        return 1;
    }
    int threads = ct_split_threads(ct_threads_for(2.0 * M * N * K, ct_threads_ceiling_here()), (int)N);
    streamed_job job = {out, out_t, weight, bias, &rows, M, K, N};
    ct_parallel_converge(N, threads, CT_SPLIT_ALIGN, streamed_rows, &job);
    free(out_t);
    ct_packed_free(&rows);
    return 0;
}

/* out (M, N) = inp (M, K) weight^T + bias through the packed kernel; returns
 * 0, or 1 when it does not apply here (out untouched: take the GEMM). */
static int linear_forward_packed(float *out, const float *inp, const float *weight, const float *bias, ct_int M,
                                 ct_int K, ct_int N)
{
    int isa = ct_packed_active_isa();
    if (isa == CT_PACKED_OFF || (double)N * K * sizeof(float) > CT_LINEAR_PACKED_MAX_WEIGHT_BYTES)
        return 1;
    if (isa == CT_PACKED_AVX512 ? M < CT_LINEAR_PACKED_MIN_M || K > CT_LINEAR_PACKED_MAX_K
                                : M < CT_LINEAR_PACKED_AVX2_MIN_M || K > CT_LINEAR_PACKED_AVX2_MAX_K)
        return 1;
    return packed_product(out, inp, weight, 1, bias, M, K, N, 0);
}

/* ---- float32 dinp (M, K) (+)= dout (M, N) weight (N, K): the packed kernel --
 * The weight is packed as it is (panels of its columns), dout's rows are read
 * in place in chunks that stay in L2.  Measured against sgemm on this 2-core
 * Xeon, one thread, hot operands, M 768 (a batch's live rows), GFLOP/s:
 *   K x N (out x inner) 128 x 384 / 128 / 512 / 1000: 109-113 vs 90-100;
 *   512 x 128: 103 vs 97;  64 x 192 / 300, 256 x 64: 109-115 vs 98-100;
 *   512 x 512 / 1536 / 8000, 2048 x 512: 104-110 vs 98-101;  512 x 2048: 100 vs 102.
 * In one process against sgemm (this / sgemm's time of linear_backward):
 *   M 768: inner 128-1000 0.93-0.98, but 512 x 2048 1.02; M 3200, inner 2048: 0.98 / 1.01;
 *   K 128, N 384: M 32 / 24 0.94 / 0.97, but M 16 / 8 / 1 1.18 / 1.32 / 1.75 (the packing
 *   is not repaid).
 * Hence at least CT_LINEAR_DINP_MIN_M rows, an inner dimension N of at most
 * CT_LINEAR_DINP_MAX_N and a weight of at most CT_LINEAR_DINP_MAX_WEIGHT_BYTES
 * (the packed copy is allocated per call).  (dweight's dout^T inp stays with
 * sgemm: through the kernel, a transposed copy of dout plus the product, it
 * took 0.85-1.0 of sgemm's rate.)
 * Each row of dinp is the kernel's n-order sum of single FMAs, added to dinp's
 * row when accumulating: the same bits on any thread count and row split. */
#define CT_LINEAR_DINP_MIN_M 32
/* On AVX2 alone (the Zen 3 EPYC, one thread, dinp's product alone, this /
 * sgemm's time, out x inner): M 1024, 128 x 128-512 0.95-0.97, 128 x 1000
 * 0.79, 512 x 128 / 1536 1.00 / 0.92; M 768, 64 x 192 0.92, 256 x 64 0.75;
 * but 128 x 384 at M 256 / 64: 1.00 / 1.06.  Hence at least 512 rows there. */
#define CT_LINEAR_DINP_AVX2_MIN_M 512
#define CT_LINEAR_DINP_MAX_N 1536
#define CT_LINEAR_DINP_MAX_WEIGHT_BYTES (16 * 1024 * 1024)

static int linear_dinp_packed(float *dinp, const float *dout, const float *weight, ct_int M, ct_int K, ct_int N,
                              int accumulate)
{
    int isa = ct_packed_active_isa();
    if (isa == CT_PACKED_OFF || M < (isa == CT_PACKED_AVX512 ? CT_LINEAR_DINP_MIN_M : CT_LINEAR_DINP_AVX2_MIN_M) ||
        N > CT_LINEAR_DINP_MAX_N || (double)N * K * sizeof(float) > CT_LINEAR_DINP_MAX_WEIGHT_BYTES)
        return 1;
    return packed_product(dinp, dout, weight, 0, NULL, M, N, K, accumulate);
}
#endif

/* linear_forward's few rows: fewer than CT_LINEAR_FEW_ROWS, or up to
 * CT_ROW_DOTS_MAX (8) against a weight of CT_LINEAR_FEW_ROWS_MIN_WEIGHT
 * elements or more, go to decode_linear.  Measured, us at 1 / 2 threads,
 * linear_forward before -> decode_linear (K x N):
 *   1 row, 512 x 8000 / 2048: 1225 -> 295 / 268 -> 57 (sgemv 278 / 57) at 1 thread;
 *   4 rows, 512 x 8000: 1435 -> 744 / 610 -> 327;  2048 x 512: 707 -> 233 / 359 -> 121;
 *   8 rows, 512 x 512: 71 -> 66 / 94 -> 37;
 *   but 128 x 384, 6 rows: 11 -> 17 / 11 -> 12 (a small weight: the packing is cheap).
 * The rule is on the shape alone, so the rows' bits never depend on the thread count. */
#ifndef CT_LINEAR_FEW_ROWS
#define CT_LINEAR_FEW_ROWS 4
#define CT_LINEAR_FEW_ROWS_MIN_WEIGHT (256.0 * 1024)
#endif

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
    /* A few rows (a batch of one, a decoding loop's first positions or its last one):
     * decode_linear's dot products, which read the weight once, where the GEMM and the
     * packed kernel pack the whole weight (see CT_LINEAR_FEW_ROWS). */
    if (M < CT_LINEAR_FEW_ROWS || (M <= CT_ROW_DOTS_MAX && (double)N * K >= CT_LINEAR_FEW_ROWS_MIN_WEIGHT)) {
        FN(decode_linear)(out, inp, weight, bias, M, K, N);
        return;
    }
#if CT_DTYPE_IS_F32
    if (linear_forward_streamed(out, inp, weight, bias, M, K, N) == 0) return;
    if (linear_forward_packed(out, inp, weight, bias, M, K, N) == 0) return;
#endif
    /* out = bias rows, then += the product, block by block (GEMM_BIAS, ct_blas.h) */
    GEMM_BIAS(CT_NOTRANS, CT_TRANS, (int)M, (int)N, (int)K, 1, inp, (int)K, weight, (int)K, 0, out, (int)N, bias);
}

/* Columns [n0, n1) of the sum of the M rows of dout (M, N) into dbias (N):
 * += when accumulate, = otherwise.  Row-major sweep so the inner loop is
 * contiguous; each column summed in row order. */
static CT_VECTOR_CLONES void FN(sum_cols)(real *restrict dbias, const real *restrict dout, ct_int M, ct_int N,
                                          ct_int n0, ct_int n1, int accumulate)
{
    if (!accumulate) memset(dbias + n0, 0, (size_t)(n1 - n0) * sizeof(real));
    for (ct_int m = 0; m < M; m++) {
        const real *restrict row = dout + m * N;
        for (ct_int n = n0; n < n1; n++) dbias[n] += row[n];
    }
}

#define CT_SUM_COLS_BLOCK 16 /* columns per block: 64 bytes of floats, no line shared between threads */

typedef struct {
    real *dbias;
    const real *dout;
    ct_int M, N;
    int accumulate;
} FN(sum_args);

static void FN(sum_blocks)(void *ctx, ptrdiff_t b0, ptrdiff_t b1)
{
    const FN(sum_args) *a = ctx;
    FN(sum_cols)(a->dbias, a->dout, a->M, a->N, (ct_int)b0 * CT_SUM_COLS_BLOCK,
                 CT_MIN((ct_int)b1 * CT_SUM_COLS_BLOCK, a->N), a->accumulate);
}

/* dbias (N) (+)= the sum of the M rows of dout (M, N), in blocks of columns
 * on the pool (it ran on the caller alone: 1.2 % of the d128 training step at
 * 2 threads); every column's sum has the same bits on any thread count. */
static void FN(sum_rows)(real *dbias, const real *dout, ct_int M, ct_int N, int accumulate)
{
    FN(sum_args) a = {dbias, dout, M, N, accumulate};
    ct_parallel_rows((N + CT_SUM_COLS_BLOCK - 1) / CT_SUM_COLS_BLOCK, (double)M * (double)N, FN(sum_blocks), &a);
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
    if (dinp != NULL) {
#if CT_DTYPE_IS_F32
        if (linear_dinp_packed(dinp, dout, weight, M, K, N, accumulate) == 0) dinp = NULL;
#endif
        if (dinp != NULL)
            GEMM(CT_ROWMAJOR, CT_NOTRANS, CT_NOTRANS, (int)M, (int)K, (int)N, 1, dout, (int)N, weight,
                 (int)K, beta, dinp, (int)K);
    }
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
