/* softmax.c - softmax and log-softmax over the last axis.
 *
 * Rows are made stable by subtracting the row maximum m before exp:
 *     softmax(x)_i     = exp(x_i - m) / sum_j exp(x_j - m)
 *     log_softmax(x)_i = x_i - m - log sum_j exp(x_j - m)
 * so no exp overflows (every x_i - m <= 0) and the sum is >= 1.  Sums are
 * accumulated in acc_t (double).  Special rows:
 *     a NaN anywhere    -> the whole row NaN;
 *     every x_i = -inf  -> softmax 0 (not 0/0), log_softmax -inf, and zero
 *                          gradient in both backward kernels. */
#ifndef CT_TEMPLATE_PASS
#define CT_TEMPLATE_FILE "softmax.c"
#include "ct_template.h"
#else
#include "ct_math.h"

/* Row helpers are CT_INLINE without clones: they are inlined into the
 * CT_VECTOR_CLONES kernels below and vectorised in each clone.  VMAX, VSUM,
 * VDOT and VEXP come from ct_math.h (lane-split reductions, branch-free exp). */

/* out_i = exp(x_i - m); returns sum_i out_i (in acc_t). */
CT_INLINE acc_t FN(row_exp_shifted)(real *restrict out, const real *restrict x, real m, ct_int D)
{
    for (ct_int i = 0; i < D; i++) out[i] = VEXP(x[i] - m);
    return VSUM(out, D);
}

static inline void FN(row_fill)(real *out, real value, ct_int D)
{
    for (ct_int i = 0; i < D; i++) out[i] = value;
}

/* softmax_forward
 *   inp (N, D)  rows are any flattened leading dims
 *   out (N, D)  = softmax of each row
 */
CT_VECTOR_CLONES
void FN(softmax_forward)(real *out, const real *inp, ct_int N, ct_int D)
{
    if (D == 0) return;
    for (ct_int n = 0; n < N; n++) {
        const real *x = inp + n * D;
        real *restrict y = out + n * D;
        real m = VMAX(x, D);
        if (m != m) { FN(row_fill)(y, m, D); continue; }               /* NaN row */
        if (m == -INFINITY) { FN(row_fill)(y, 0, D); continue; }       /* all -inf */
        real inv_sum = (real)(1.0 / FN(row_exp_shifted)(y, x, m, D));
        for (ct_int i = 0; i < D; i++) y[i] *= inv_sum;
    }
}

/* softmax_backward (accumulates)
 *   dout (N, D), out (N, D) the softmax y
 *   dinp (N, D) += y * (dout - sum_j dout_j y_j)      (dy_i/dx_k = y_i (delta_ik - y_k))
 * An all -inf row has y = 0, so its gradient is 0 by this formula.
 */
CT_VECTOR_CLONES
void FN(softmax_backward)(real *dinp, const real *dout, const real *out, ct_int N, ct_int D)
{
    for (ct_int n = 0; n < N; n++) {
        const real *restrict g = dout + n * D, *restrict y = out + n * D;
        real *restrict dx = dinp + n * D;
        real dot = (real)VDOT(g, y, D);
        for (ct_int i = 0; i < D; i++) dx[i] += y[i] * (g[i] - dot);
    }
}

/* log_softmax_forward
 *   inp (N, D), out (N, D) = x - m - log sum exp(x - m) for each row
 *   (out is used as scratch for exp(x - m) before it is overwritten)
 */
CT_VECTOR_CLONES
void FN(log_softmax_forward)(real *out, const real *inp, ct_int N, ct_int D)
{
    if (D == 0) return;
    for (ct_int n = 0; n < N; n++) {
        const real *restrict x = inp + n * D;
        real *restrict y = out + n * D;
        real m = VMAX(x, D);
        if (m != m || m == -INFINITY) { FN(row_fill)(y, m, D); continue; } /* NaN / all -inf */
        acc_t log_sum = log(FN(row_exp_shifted)(y, x, m, D));
        for (ct_int i = 0; i < D; i++) y[i] = (real)((acc_t)x[i] - m - log_sum);
    }
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
