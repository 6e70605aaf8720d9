/* fused.c - the element-wise pieces of a Transformer block fused into one pass:
 *   bias_act:       out = act(inp + bias)            (feed-forward: Linear without bias, then this)
 *   add_layernorm:  out = LayerNorm(inp + residual)  (post-norm residual connection)
 * Backward recomputes inp + bias / inp + residual instead of storing it. */
#ifndef CT_TEMPLATE_PASS
#include "fused.h"
#define CT_TEMPLATE_FILE "fused.c"
#include "ct_template.h"
#else

/* relu(z) = max(z, 0) (NaN stays NaN);
 * gelu(z) = z Phi(z) = z/2 (1 + erf(z / sqrt 2));
 * gelu_tanh(z) = z/2 (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3)))   (torch's approximate="tanh") */
static real FN(act_value)(real z, int act)
{
    if (act == CT_ACT_RELU) return z < 0 ? (real)0 : z;
    if (act == CT_ACT_GELU) return (real)0.5 * z * (1 + ERF(z * (real)0.70710678118654752));
    real u = (real)0.79788456080286536 * (z + (real)0.044715 * z * z * z);
    return (real)0.5 * z * (1 + TANH(u));
}

/* d act / dz.  relu: 0 where z <= 0 (torch's threshold_backward);
 * gelu: Phi(z) + z phi(z);  gelu_tanh: 1/2 (1 + t) + z/2 (1 - t^2) u'(z). */
static real FN(act_slope)(real z, int act)
{
    if (act == CT_ACT_RELU) return z <= 0 ? (real)0 : (real)1;
    if (act == CT_ACT_GELU) {
        real cdf = (real)0.5 * (1 + ERF(z * (real)0.70710678118654752));
        real pdf = (real)0.39894228040143268 * EXP((real)-0.5 * z * z);
        return cdf + z * pdf;
    }
    real c = (real)0.79788456080286536;
    real t = TANH(c * (z + (real)0.044715 * z * z * z));
    return (real)0.5 * (1 + t) + (real)0.5 * z * (1 - t * t) * c * (1 + (real)0.134145 * z * z);
}

/* bias_act_forward
 *   inp (M, N), bias (N) or NULL  ->  out (M, N) = act(inp + bias) */
CT_VECTOR_CLONES
void FN(bias_act_forward)(real *out, const real *inp, const real *bias, int act, ct_int M,
                          ct_int N)
{
    for (ct_int m = 0; m < M; m++)
        for (ct_int n = 0; n < N; n++) {
            real z = inp[m * N + n] + (bias ? bias[n] : 0);
            out[m * N + n] = FN(act_value)(z, act);
        }
}

/* One row of relu backward: dz = dout where z = inp + bias > 0 (0 where z <= 0, NaN z
 * passes dout through, as torch's threshold_backward); dinp += dz; dbias += dz. */
static CT_VECTOR_CLONES void FN(relu_backward_row)(real *restrict dinp, real *restrict dbias,
                                                   const real *restrict dout,
                                                   const real *restrict inp,
                                                   const real *restrict bias, ct_int N)
{
    if (bias != NULL && dbias != NULL) {
        for (ct_int n = 0; n < N; n++) {
            real dz = inp[n] + bias[n] <= 0 ? (real)0 : dout[n];
            dinp[n] += dz;
            dbias[n] += dz;
        }
    } else if (bias != NULL) {
        for (ct_int n = 0; n < N; n++) dinp[n] += inp[n] + bias[n] <= 0 ? (real)0 : dout[n];
    } else {
        for (ct_int n = 0; n < N; n++) {
            real dz = inp[n] <= 0 ? (real)0 : dout[n];
            dinp[n] += dz;
            if (dbias) dbias[n] += dz;
        }
    }
}

/* One row of the gelu backward: dz = dout act'(inp + bias); dinp += dz; dbias += dz. */
static void FN(act_backward_row)(real *dinp, real *dbias, const real *dout, const real *inp,
                                 const real *bias, int act, ct_int N)
{
    for (ct_int n = 0; n < N; n++) {
        real dz = dout[n] * FN(act_slope)(inp[n] + (bias ? bias[n] : 0), act);
        dinp[n] += dz;
        if (dbias) dbias[n] += dz;
    }
}

/* bias_act_backward (accumulates)
 *   dout (M, N);  dinp (M, N) += dout act'(inp + bias);  dbias (N) += column sums of that
 *   (dbias skipped when NULL) */
void FN(bias_act_backward)(real *dinp, real *dbias, const real *dout, const real *inp,
                           const real *bias, int act, ct_int M, ct_int N)
{
    for (ct_int m = 0; m < M; m++) {
        if (act == CT_ACT_RELU)
            FN(relu_backward_row)(dinp + m * N, dbias, dout + m * N, inp + m * N, bias, N);
        else
            FN(act_backward_row)(dinp + m * N, dbias, dout + m * N, inp + m * N, bias, act, N);
    }
}

/* Sums in double over n < N of f(n), with eight independent partial sums so
 * the additions pipeline (and vectorise); the order differs from a plain
 * loop only in double rounding. */
#define CT_SUM8(result, N, term)                                               \
    do {                                                                       \
        acc_t part_[8] = {0, 0, 0, 0, 0, 0, 0, 0};                             \
        ct_int n = 0;                                                          \
        for (; n + 8 <= (N); n += 8)                                           \
            for (int l_ = 0; l_ < 8; l_++) {                                   \
                ct_int k = n + l_;                                             \
                part_[l_] += (term);                                           \
            }                                                                  \
        acc_t tail_ = 0;                                                       \
        for (ct_int k = n; k < (N); k++) tail_ += (term);                      \
        result = ((part_[0] + part_[4]) + (part_[1] + part_[5])) +             \
                 ((part_[2] + part_[6]) + (part_[3] + part_[7])) + tail_;      \
    } while (0)

/* Mean and 1/sqrt(biased variance + eps) of row h = inp + residual (two passes, in double). */
static CT_VECTOR_CLONES void FN(row_stats)(const real *restrict inp, const real *restrict residual,
                                           double eps, ct_int N, real *mean, real *rstd)
{
    acc_t sum, sq;
    CT_SUM8(sum, N, (acc_t)inp[k] + (acc_t)residual[k]);
    acc_t mu = N > 0 ? sum / (acc_t)N : 0;
    CT_SUM8(sq, N, ((acc_t)inp[k] + (acc_t)residual[k] - mu) * ((acc_t)inp[k] + (acc_t)residual[k] - mu));
    acc_t var = N > 0 ? sq / (acc_t)N : 0;
    *mean = (real)mu;
    *rstd = (real)(1.0 / sqrt(var + eps));
}

/* out = (inp + residual - mean) rstd weight + bias over one row (weight/bias NULL: 1 / 0). */
static CT_VECTOR_CLONES void FN(normalize_row)(real *restrict out, const real *restrict x,
                                               const real *restrict r, const real *restrict weight,
                                               const real *restrict bias, real mean, real rstd,
                                               ct_int N)
{
    if (weight != NULL && bias != NULL) {
        for (ct_int n = 0; n < N; n++) out[n] = (x[n] + r[n] - mean) * rstd * weight[n] + bias[n];
        return;
    }
    for (ct_int n = 0; n < N; n++) {
        real xhat = (x[n] + r[n] - mean) * rstd;
        out[n] = xhat * (weight ? weight[n] : 1) + (bias ? bias[n] : 0);
    }
}

/* add_layernorm_forward
 *   inp, residual (M, N); weight, bias (N) or NULL
 *   h = inp + residual;  mean, rstd (M) per row;  out (M, N) = (h - mean) rstd weight + bias */
void FN(add_layernorm_forward)(real *out, real *mean, real *rstd, const real *inp,
                               const real *residual, const real *weight, const real *bias,
                               double eps, ct_int M, ct_int N)
{
    for (ct_int m = 0; m < M; m++) {
        const real *x = inp + m * N, *r = residual + m * N;
        FN(row_stats)(x, r, eps, N, mean + m, rstd + m);
        FN(normalize_row)(out + m * N, x, r, weight, bias, mean[m], rstd[m], N);
    }
}

/* One row of add_layernorm_backward, with g = dout weight and xhat = (h - mean) rstd:
 *   dweight += dout xhat;  dbias += dout;  returns sum(g) and sum(g xhat) in sums[2]. */
static CT_VECTOR_CLONES void FN(ln_row_sums)(acc_t sums[2], real *restrict dweight,
                                             real *restrict dbias, const real *restrict dy,
                                             const real *restrict x, const real *restrict r,
                                             const real *restrict weight, real mean, real rstd,
                                             ct_int N)
{
    if (dweight != NULL)
        for (ct_int n = 0; n < N; n++) dweight[n] += dy[n] * ((x[n] + r[n] - mean) * rstd);
    if (dbias != NULL)
        for (ct_int n = 0; n < N; n++) dbias[n] += dy[n];
    acc_t sum_g, sum_gx;
    if (weight != NULL) {
        CT_SUM8(sum_g, N, (acc_t)(dy[k] * weight[k]));
        CT_SUM8(sum_gx, N, (acc_t)(dy[k] * weight[k]) * ((x[k] + r[k] - mean) * rstd));
    } else {
        CT_SUM8(sum_g, N, (acc_t)dy[k]);
        CT_SUM8(sum_gx, N, (acc_t)dy[k] * ((x[k] + r[k] - mean) * rstd));
    }
    sums[0] = sum_g, sums[1] = sum_gx;
}

/* dinp += rstd (g - mean_g - xhat mean_gx) over one row. */
static CT_VECTOR_CLONES void FN(ln_row_dinp)(real *restrict dinp, const real *restrict dy,
                                             const real *restrict x, const real *restrict r,
                                             const real *restrict weight, real mean, real rstd,
                                             real mean_g, real mean_gx, ct_int N)
{
    if (weight != NULL) {
        for (ct_int n = 0; n < N; n++)
            dinp[n] += rstd * (dy[n] * weight[n] - mean_g - (x[n] + r[n] - mean) * rstd * mean_gx);
        return;
    }
    for (ct_int n = 0; n < N; n++)
        dinp[n] += rstd * (dy[n] - mean_g - (x[n] + r[n] - mean) * rstd * mean_gx);
}

/* add_layernorm_backward (accumulates; the gradient of inp and of residual is the same)
 *   dout (M, N); mean, rstd from forward
 *   g = dout weight,  xhat = (h - mean) rstd
 *   dinp    (M, N) += rstd (g - mean(g) - xhat mean(g xhat))
 *   dweight (N)    += column sums of dout xhat   (skipped when NULL)
 *   dbias   (N)    += column sums of dout        (skipped when NULL) */
void FN(add_layernorm_backward)(real *dinp, real *dweight, real *dbias, const real *dout,
                                const real *inp, const real *residual, const real *weight,
                                const real *mean, const real *rstd, ct_int M, ct_int N)
{
    for (ct_int m = 0; m < M; m++) {
        const real *x = inp + m * N, *r = residual + m * N, *dy = dout + m * N;
        acc_t sums[2];
        FN(ln_row_sums)(sums, dweight, dbias, dy, x, r, weight, mean[m], rstd[m], N);
        real mean_g = (real)(sums[0] / (acc_t)N), mean_gx = (real)(sums[1] / (acc_t)N);
        FN(ln_row_dinp)(dinp + m * N, dy, x, r, weight, mean[m], rstd[m], mean_g, mean_gx, N);
    }
}

#undef CT_SUM8
#endif
