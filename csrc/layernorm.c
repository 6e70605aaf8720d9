/* layernorm.c - layer normalisation over the last axis.
 *
 *     mean = sum_i x_i / D
 *     var  = sum_i (x_i - mean)^2 / D            (biased, as torch)
 *     rstd = 1 / sqrt(var + eps)                 (eps INSIDE the root)
 *     xhat = (x - mean) * rstd
 *     out  = xhat * weight + bias
 *
 * Mean and variance are two passes in acc_t (double): subtracting the mean
 * before squaring keeps the variance exact for rows far from zero (x ~ 1e4
 * + noise) and exactly 0 for constant rows, where the one-pass formula
 * E[x^2] - E[x]^2 cancels catastrophically. */
#ifndef CT_TEMPLATE_PASS
#define CT_TEMPLATE_FILE "layernorm.c"
#include "ct_template.h"
#else

/* Mean and biased variance of x (D >= 0; an empty row has mean 0, var 0). */
static void FN(row_moments)(const real *x, ct_int D, acc_t *mean, acc_t *var)
{
    acc_t sum = 0, sq = 0;
    for (ct_int i = 0; i < D; i++) sum += x[i];
    acc_t mu = D > 0 ? sum / (acc_t)D : 0;
    for (ct_int i = 0; i < D; i++) {
        acc_t centred = (acc_t)x[i] - mu;
        sq += centred * centred;
    }
    *mean = mu;
    *var = D > 0 ? sq / (acc_t)D : 0;
}

/* layernorm_forward
 *   inp    (N, D)   rows are any flattened leading dims
 *   weight (D) or NULL (scale 1), bias (D) or NULL (shift 0)
 *   out    (N, D) = (x - mean) * rstd * weight + bias
 *   mean   (N), rstd (N) = 1 / sqrt(var + eps), kept for backward
 */
CT_VECTOR_CLONES
void FN(layernorm_forward)(real *out, real *mean, real *rstd, const real *inp, const real *weight,
                           const real *bias, ct_int N, ct_int D, double eps)
{
    for (ct_int n = 0; n < N; n++) {
        const real *x = inp + n * D;
        real *y = out + n * D;
        acc_t mu, var;
        FN(row_moments)(x, D, &mu, &var);
        acc_t rs = 1 / sqrt(var + eps);
        for (ct_int i = 0; i < D; i++) {
            acc_t xhat = ((acc_t)x[i] - mu) * rs;
            if (weight != NULL) xhat *= weight[i];
            if (bias != NULL) xhat += bias[i];
            y[i] = (real)xhat;
        }
        mean[n] = (real)mu;
        rstd[n] = (real)rs;
    }
}

/* layernorm_backward (accumulates)
 *   dout (N, D), inp (N, D), weight (D) or NULL, mean (N), rstd (N) from forward
 *   dbias   (D) += sum over rows of dout                  (skipped when NULL)
 *   dweight (D) += sum over rows of dout * xhat           (skipped when NULL)
 *   dinp (N, D) += rstd * (g - mean(g) - xhat * mean(g * xhat)),  g = dout * weight
 *                                                          (skipped when NULL)
 * The dinp formula is the chain rule through xhat = (x - mean) * rstd, where
 * mean and rstd both depend on every x_i of the row.
 */
CT_VECTOR_CLONES
void FN(layernorm_backward)(real *dinp, real *dweight, real *dbias, const real *dout,
                            const real *inp, const real *weight, const real *mean,
                            const real *rstd, ct_int N, ct_int D)
{
    for (ct_int n = 0; n < N; n++) {
        const real *x = inp + n * D, *dy = dout + n * D;
        acc_t mu = mean[n], rs = rstd[n];
        acc_t g_mean = 0, g_xhat_mean = 0;
        for (ct_int i = 0; i < D; i++) {
            acc_t xhat = ((acc_t)x[i] - mu) * rs;
            acc_t g = weight != NULL ? (acc_t)dy[i] * weight[i] : (acc_t)dy[i];
            g_mean += g;
            g_xhat_mean += g * xhat;
            if (dbias != NULL) dbias[i] += dy[i];
            if (dweight != NULL) dweight[i] += (real)(dy[i] * xhat);
        }
        if (dinp == NULL || D == 0) continue;
        g_mean /= (acc_t)D;
        g_xhat_mean /= (acc_t)D;
        real *dx = dinp + n * D;
        for (ct_int i = 0; i < D; i++) {
            acc_t xhat = ((acc_t)x[i] - mu) * rs;
            acc_t g = weight != NULL ? (acc_t)dy[i] * weight[i] : (acc_t)dy[i];
            dx[i] += (real)(rs * (g - g_mean - xhat * g_xhat_mean));
        }
    }
}

#endif
