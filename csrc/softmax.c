/* softmax.c - softmax and log-softmax over the last axis.
 *
 * Rows are made stable by subtracting the row maximum m before exp:
 *     softmax(x)_i     = exp(x_i - m) / sum_j exp(x_j - m)
 *     log_softmax(x)_i = x_i - m - log sum_j exp(x_j - m)
 * so no exp overflows (every x_i - m <= 0) and the sum is >= 1.  Sums are
 * accumulated in acc_t (double).  Special rows:
 *     a NaN anywhere    -> the whole row NaN;
 *     every x_i = -inf  -> softmax 0 (not 0/0), log_softmax -inf, and zero
 *                          gradient in both backward kernels.
 * Softmax weights below the smallest normal number (FLT_MIN 1.2e-38, DBL_MIN
 * in float64) are 0, and so are softmax_backward's terms y_i (g_i - dot)
 * below it: on x86 every subnormal operand of a later product costs a
 * microcode assist of ~100+ cycles.  A trained model's attention has many
 * (x_j 87+ under the row's maximum): ct.matmul of (64, 4, 11, 11) weights,
 * 30 % of them subnormal, by (64, 4, 11, 16) values took 800 us, 66-114 us
 * with those weights 0.  torch keeps them; the difference is below 1.2e-38
 * per weight. */
#ifndef CT_TEMPLATE_PASS
#include "softmax.h"
#define CT_TEMPLATE_FILE "softmax.c"
#include "ct_template.h"
#else
#include "ct_math.h"

/* Row helpers are CT_INLINE without clones: they are inlined into the
 * CT_VECTOR_CLONES functions below and vectorised in each clone.  VMAX, VSUM,
 * VDOT and VEXP come from ct_math.h (lane-split reductions, branch-free exp). */

/* v, or 0 when |v| is below the smallest normal number (see the top). */
CT_INLINE real FN(normal_or_zero)(real v) { return VSELECT(FABS(v) < (real)REAL_MIN_NORMAL, (real)0, v); }

/* row_i <- exp(row_i - m), in place; returns sum_i row_i (in acc_t). */
CT_INLINE acc_t FN(exp_shifted_inplace)(real *restrict row, real m, ct_int D)
{
    for (ct_int i = 0; i < D; i++) row[i] = VEXP_NONPOSITIVE(row[i] - m);
    return VSUM(row, D);
}

static inline void FN(row_fill)(real *out, real value, ct_int D)
{
    for (ct_int i = 0; i < D; i++) out[i] = value;
}

/* softmax_row: the one softmax row of csrc/ (softmax_forward, the attention
 * weights and the decoding step all call it)
 *   row (D) <- softmax(row) in place:  row_i = exp(row_i - m) / sum_j exp(row_j - m),
 *   m = max_j row_j, sum in acc_t; 0 where that is below the smallest normal
 *   number (see the top).  Returns m.
 *   A NaN anywhere -> the whole row NaN (returns NaN); every row_i = -inf, or
 *   D = 0 -> all 0, not 0/0 (returns -inf). */
CT_VECTOR_CLONES
real FN(softmax_row)(real *restrict row, ct_int D)
{
    if (D == 0) return -INFINITY;
    real m = VMAX(row, D);
    if (m != m || m == -INFINITY) {
        FN(row_fill)(row, m != m ? m : 0, D);
        return m;
    }
    real inv_sum = (real)(1.0 / FN(exp_shifted_inplace)(row, m, D));
    for (ct_int i = 0; i < D; i++) row[i] = FN(normal_or_zero)(row[i] * inv_sum);
    return m;
}

/* softmax_rows: N rows of D elements (row stride D), each exactly as
 * softmax_row (the same bits): the row maxima and shifts first, then one exp
 * loop over all N D elements, then each row's sum and scale.  For short rows
 * (attention over a dozen keys) one loop keeps the vector lanes full where a
 * loop per row spends most of its time in its tail; rows of
 * CT_SOFTMAX_ROWS_FLAT_D or more go row by row (nothing to gain). */
#ifndef CT_SOFTMAX_ROWS_FLAT_D
#define CT_SOFTMAX_ROWS_FLAT_D 64
#define CT_SOFTMAX_ROWS_BLOCK 64 /* rows per pass (their maxima on the stack) */
#endif
CT_VECTOR_CLONES
void FN(softmax_rows)(real *restrict P, ct_int N, ct_int D)
{
    if (D >= CT_SOFTMAX_ROWS_FLAT_D || D == 0) {
        for (ct_int r = 0; r < N; r++) FN(softmax_row)(P + r * D, D);
        return;
    }
    real m[CT_SOFTMAX_ROWS_BLOCK];
    for (ct_int r0 = 0; r0 < N; r0 += CT_SOFTMAX_ROWS_BLOCK) {
        ct_int rows = CT_MIN((ct_int)CT_SOFTMAX_ROWS_BLOCK, N - r0);
        real *block = P + r0 * D;
        for (ct_int r = 0; r < rows; r++) {
            m[r] = VMAX(block + r * D, D);
            if (m[r] == m[r] && m[r] != -INFINITY)
                for (ct_int i = 0; i < D; i++) block[r * D + i] -= m[r];
        }
        /* every element at once (each <= 0 now); a special row (NaN or all -inf), not shifted, is
         * refilled below */
        for (ct_int k = 0; k < rows * D; k++) block[k] = VEXP_NONPOSITIVE(block[k]);
        for (ct_int r = 0; r < rows; r++) {
            real *row = block + r * D;
            if (m[r] != m[r] || m[r] == -INFINITY) {
                FN(row_fill)(row, m[r] != m[r] ? m[r] : 0, D);
                continue;
            }
            real inv_sum = (real)(1.0 / VSUM(row, D));
            for (ct_int i = 0; i < D; i++) row[i] = FN(normal_or_zero)(row[i] * inv_sum);
        }
    }
}

#ifndef CT_SOFTMAX_CHUNK
#define CT_SOFTMAX_CHUNK 256 /* exps computed per vector pass in sum_exp_shifted */
#endif

/* sum_exp_shifted: sum_i exp(x_i - m) over a row x (D), in acc_t, without an
 * output row (log-sum-exp of log_softmax and cross-entropy: m + log of it).
 * m is the row's maximum, or 0 for a row of -inf (so x_i - m <= 0: VEXP_NONPOSITIVE).
 * The exps go through a small stack buffer so that both the exp loop and the
 * lane-split sum vectorise.  NaN in x or m propagates. */
CT_VECTOR_CLONES
acc_t FN(sum_exp_shifted)(const real *restrict x, real m, ct_int D)
{
    real e[CT_SOFTMAX_CHUNK];
    acc_t sum = 0;
    for (ct_int c0 = 0; c0 < D; c0 += CT_SOFTMAX_CHUNK) {
        ct_int len = CT_MIN(CT_SOFTMAX_CHUNK, D - c0);
        for (ct_int c = 0; c < len; c++) e[c] = VEXP_NONPOSITIVE(x[c0 + c] - m);
        sum += VSUM(e, len);
    }
    return sum;
}

/* softmax_forward
 *   inp (N, D)  rows are any flattened leading dims
 *   out (N, D)  = softmax of each row (see softmax_row)
 */
typedef struct {
    real *out;
    const real *inp;
    ct_int D;
} FN(rows_args);

static void FN(softmax_forward_rows)(void *ctx, ptrdiff_t n0, ptrdiff_t n1)
{
    const FN(rows_args) *a = ctx;
    ct_int D = a->D;
    for (ct_int n = n0; n < n1; n++) {
        memcpy(a->out + n * D, a->inp + n * D, (size_t)D * sizeof(real));
        FN(softmax_row)(a->out + n * D, D);
    }
}

/* (blocks of rows may run on the pool's threads: each row is one thread's) */
void FN(softmax_forward)(real *out, const real *inp, ct_int N, ct_int D)
{
    FN(rows_args) a = {out, inp, D};
    ct_parallel_rows(N, 20.0 * N * D, FN(softmax_forward_rows), &a);
}

/* softmax_backward (accumulates)
 *   dout (N, D), out (N, D) the softmax y
 *   dinp (N, D) += y * (dout - sum_j dout_j y_j)      (dy_i/dx_k = y_i (delta_ik - y_k))
 * An all -inf row has y = 0, so its gradient is 0 by this formula; a term
 * below the smallest normal number is 0 (see the top).
 */
CT_VECTOR_CLONES
void FN(softmax_backward)(real *dinp, const real *dout, const real *out, ct_int N, ct_int D)
{
    for (ct_int n = 0; n < N; n++) {
        const real *restrict g = dout + n * D, *restrict y = out + n * D;
        real *restrict dx = dinp + n * D;
        real dot = (real)VDOT(g, y, D);
        for (ct_int i = 0; i < D; i++) dx[i] += FN(normal_or_zero)(y[i] * (g[i] - dot));
    }
}

/* log_softmax_row: y (D) = (x - m) - log sum exp(x - m) for one row x (D >= 1),
 * y and x not overlapping; a row with a NaN or of -inf only: y = m everywhere
 * (NaN / -inf).  log_softmax_forward's rows and beam_step's (decode.c). */
CT_VECTOR_CLONES
void FN(log_softmax_row)(real *restrict y, const real *restrict x, ct_int D)
{
    real m = VMAX(x, D);
    if (m != m || m == -INFINITY) { FN(row_fill)(y, m, D); return; } /* NaN / all -inf */
    acc_t log_sum = log(FN(sum_exp_shifted)(x, m, D));
    for (ct_int i = 0; i < D; i++) y[i] = (real)((acc_t)x[i] - m - log_sum);
}

/* log_softmax_forward
 *   inp (N, D), out (N, D) = log_softmax_row of each row
 */
static void FN(log_softmax_forward_rows)(void *ctx, ptrdiff_t n0, ptrdiff_t n1)
{
    const FN(rows_args) *a = ctx;
    ct_int D = a->D;
    for (ct_int n = n0; n < n1; n++) FN(log_softmax_row)(a->out + n * D, a->inp + n * D, D);
}

/* (blocks of rows may run on the pool's threads: each row is one thread's) */
void FN(log_softmax_forward)(real *out, const real *inp, ct_int N, ct_int D)
{
    if (D == 0) return;
    FN(rows_args) a = {out, inp, D};
    ct_parallel_rows(N, 20.0 * N * D, FN(log_softmax_forward_rows), &a);
}

/* log_softmax_backward (accumulates)
 *   dout (N, D), out (N, D) the log-softmax y
 *   dinp (N, D) += dout - exp(y) * sum_j dout_j     (exp(y) is the softmax)
 * A row whose y are all -inf (an all -inf input) gets no gradient.
 */
CT_VECTOR_CLONES
void FN(log_softmax_backward)(real *dinp, const real *dout, const real *out, ct_int N, ct_int D)
{
    for (ct_int n = 0; n < N; n++) {
        const real *restrict g = dout + n * D, *restrict y = out + n * D;
        real *restrict dx = dinp + n * D;
        ct_int first = 0; /* first y that is not -inf */
        while (first < D && y[first] == -INFINITY) first++;
        if (first == D) continue; /* the input row was all -inf */
        real sum = (real)VSUM(g, D);
        for (ct_int i = 0; i < D; i++) dx[i] += g[i] - VEXP(y[i]) * sum;
    }
}

#endif
