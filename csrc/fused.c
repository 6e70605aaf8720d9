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

/* bias_act_backward (accumulates)
 *   dout (M, N);  dinp (M, N) += dout act'(inp + bias);  dbias (N) += column sums of that
 *   (dbias skipped when NULL) */
void FN(bias_act_backward)(real *dinp, real *dbias, const real *dout, const real *inp,
                           const real *bias, int act, ct_int M, ct_int N)
{
    for (ct_int m = 0; m < M; m++)
        for (ct_int n = 0; n < N; n++) {
            real z = inp[m * N + n] + (bias ? bias[n] : 0);
            real dz = dout[m * N + n] * FN(act_slope)(z, act);
            dinp[m * N + n] += dz;
            if (dbias) dbias[n] += dz;
        }
}

/* Mean and 1/sqrt(biased variance + eps) of row h = inp + residual (two passes, in double). */
static void FN(row_stats)(const real *inp, const real *residual, double eps, ct_int N,
                          real *mean, real *rstd)
{
    acc_t sum = 0, sq = 0;
    for (ct_int n = 0; n < N; n++) sum += (acc_t)inp[n] + residual[n];
    acc_t mu = N > 0 ? sum / (acc_t)N : 0;
    for (ct_int n = 0; n < N; n++) {
        acc_t d = (acc_t)inp[n] + residual[n] - mu;
        sq += d * d;
    }
    acc_t var = N > 0 ? sq / (acc_t)N : 0;
    *mean = (real)mu;
    *rstd = (real)(1.0 / sqrt(var + eps));
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
        for (ct_int n = 0; n < N; n++) {
            real xhat = (x[n] + r[n] - mean[m]) * rstd[m];
            out[m * N + n] = xhat * (weight ? weight[n] : 1) + (bias ? bias[n] : 0);
        }
    }
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
        acc_t sum_g = 0, sum_gx = 0;
        for (ct_int n = 0; n < N; n++) {
            real xhat = (x[n] + r[n] - mean[m]) * rstd[m];
            real g = dy[n] * (weight ? weight[n] : 1);
            sum_g += g;
            sum_gx += (acc_t)g * xhat;
            if (dweight) dweight[n] += dy[n] * xhat;
            if (dbias) dbias[n] += dy[n];
        }
        real mean_g = (real)(sum_g / (acc_t)N), mean_gx = (real)(sum_gx / (acc_t)N);
        for (ct_int n = 0; n < N; n++) {
            real xhat = (x[n] + r[n] - mean[m]) * rstd[m];
            real g = dy[n] * (weight ? weight[n] : 1);
            dinp[m * N + n] += rstd[m] * (g - mean_g - xhat * mean_gx);
        }
    }
}

#endif
