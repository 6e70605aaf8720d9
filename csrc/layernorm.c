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
#include "ct_math.h"

/* Mean and biased variance of x (D >= 0; an empty row has mean 0, var 0).
 * Both sums are lane-split (CT_LANES partial sums, see ct_math.h) so they
 * vectorise. */
CT_INLINE void FN(row_moments)(const real *restrict x, ct_int D, acc_t *mean, acc_t *var)
{
    /* The mean is taken of x - x[0] (shifted data): a constant row then
     * has mean exactly x[0] and variance exactly 0 at any magnitude (a
     * plain sum / D rounds at 1e30 and the normalised row is not 0, where
     * torch, Welford's update, gives the bias). */
    acc_t shift = D > 0 ? (acc_t)x[0] : 0, lane0[CT_LANES] = {0}, s = 0;
    ct_int j = 0;
    for (; j + CT_LANES <= D; j += CT_LANES)
        for (int k = 0; k < CT_LANES; k++) lane0[k] += (acc_t)x[j + k] - shift;
    for (int k = 0; k < CT_LANES; k++) s += lane0[k];
    for (; j < D; j++) s += (acc_t)x[j] - shift;
    acc_t mu = D > 0 ? shift + s / (acc_t)D : 0;
    acc_t lane[CT_LANES] = {0}, sq = 0;
    ct_int i = 0;
    for (; i + CT_LANES <= D; i += CT_LANES)
        for (int k = 0; k < CT_LANES; k++) {
            acc_t centred = (acc_t)x[i + k] - mu;
            lane[k] += centred * centred;
        }
    for (int k = 0; k < CT_LANES; k++) sq += lane[k];
    for (; i < D; i++) sq += ((acc_t)x[i] - mu) * ((acc_t)x[i] - mu);
    *mean = mu;
    *var = D > 0 ? sq / (acc_t)D : 0;
}

/* y = (x - mu) * rs * weight + bias (weight / bias NULL: 1 / 0), in acc_t. */
CT_INLINE void FN(row_normalise)(real *restrict y, const real *restrict x, const real *restrict weight,
                                 const real *restrict bias, acc_t mu, acc_t rs, ct_int D)
{
    if (weight != NULL && bias != NULL)
        for (ct_int i = 0; i < D; i++) y[i] = (real)(((acc_t)x[i] - mu) * rs * weight[i] + bias[i]);
    else if (weight != NULL)
        for (ct_int i = 0; i < D; i++) y[i] = (real)(((acc_t)x[i] - mu) * rs * weight[i]);
    else if (bias != NULL)
        for (ct_int i = 0; i < D; i++) y[i] = (real)(((acc_t)x[i] - mu) * rs + bias[i]);
    else
        for (ct_int i = 0; i < D; i++) y[i] = (real)(((acc_t)x[i] - mu) * rs);
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
        FN(row_normalise)(y, x, weight, bias, mu, rs, D);
        mean[n] = (real)mu;
        rstd[n] = (real)rs;
    }
}

/* acc (D) += dy (D) */
CT_INLINE void FN(row_add)(real *restrict acc, const real *restrict dy, ct_int D)
{
    for (ct_int i = 0; i < D; i++) acc[i] += dy[i];
}

/* acc (D) += dy * xhat, xhat = (x - mu) * rs */
CT_INLINE void FN(row_add_dy_xhat)(real *restrict acc, const real *restrict dy, const real *restrict x,
                                   acc_t mu, acc_t rs, ct_int D)
{
    for (ct_int i = 0; i < D; i++) acc[i] += (real)(dy[i] * (((acc_t)x[i] - mu) * rs));
}

/* Lane-split sums of g and g * xhat over a row, xhat = (x - mu) * rs:
 * G(i) is g at element i (dy[i] * weight[i], or dy[i]). */
#define CT_LN_G_SUMS(G)                                                                     \
    do {                                                                                    \
        acc_t lane_g[CT_LANES] = {0}, lane_gx[CT_LANES] = {0};                              \
        ct_int i = 0;                                                                       \
        for (; i + CT_LANES <= D; i += CT_LANES)                                            \
            for (int k = 0; k < CT_LANES; k++) {                                            \
                acc_t g = G(i + k);                                                         \
                lane_g[k] += g;                                                             \
                lane_gx[k] += g * (((acc_t)x[i + k] - mu) * rs);                            \
            }                                                                               \
        for (int k = 0; k < CT_LANES; k++) {                                                \
            sum_g += lane_g[k];                                                             \
            sum_gx += lane_gx[k];                                                           \
        }                                                                                   \
        for (; i < D; i++) {                                                                \
            sum_g += G(i);                                                                  \
            sum_gx += G(i) * (((acc_t)x[i] - mu) * rs);                                     \
        }                                                                                   \
    } while (0)
#define CT_LN_G_WEIGHTED(i) ((acc_t)dy[i] * weight[i])
#define CT_LN_G_PLAIN(i) ((acc_t)dy[i])

/* mean(g) and mean(g * xhat) of a row (D > 0), g = dy * weight (weight
 * NULL: g = dy); one loop per case so that each vectorises. */
CT_INLINE void FN(row_g_means)(const real *restrict dy, const real *restrict x, const real *restrict weight,
                               acc_t mu, acc_t rs, ct_int D, acc_t *g_mean, acc_t *g_xhat_mean)
{
    acc_t sum_g = 0, sum_gx = 0;
    if (weight != NULL) CT_LN_G_SUMS(CT_LN_G_WEIGHTED);
    else CT_LN_G_SUMS(CT_LN_G_PLAIN);
    *g_mean = sum_g / (acc_t)D;
    *g_xhat_mean = sum_gx / (acc_t)D;
}
#undef CT_LN_G_SUMS
#undef CT_LN_G_WEIGHTED
#undef CT_LN_G_PLAIN

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
        const real *restrict x = inp + n * D, *restrict dy = dout + n * D;
        acc_t mu = mean[n], rs = rstd[n];
        if (dbias != NULL) FN(row_add)(dbias, dy, D);
        if (dweight != NULL) FN(row_add_dy_xhat)(dweight, dy, x, mu, rs, D);
        if (dinp == NULL || D == 0) continue;
        acc_t g_mean, g_xhat_mean;
        FN(row_g_means)(dy, x, weight, mu, rs, D, &g_mean, &g_xhat_mean);
        real *restrict dx = dinp + n * D;
        if (weight != NULL)
            for (ct_int i = 0; i < D; i++) {
                acc_t xhat = ((acc_t)x[i] - mu) * rs;
                dx[i] += (real)(rs * ((acc_t)dy[i] * weight[i] - g_mean - xhat * g_xhat_mean));
            }
        else
            for (ct_int i = 0; i < D; i++) {
                acc_t xhat = ((acc_t)x[i] - mu) * rs;
                dx[i] += (real)(rs * ((acc_t)dy[i] - g_mean - xhat * g_xhat_mean));
            }
    }
}

#endif
