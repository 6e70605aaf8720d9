/* crossentropy.c - cross-entropy loss fused with log-softmax, torch's semantics
 * (F.cross_entropy with ignore_index, label_smoothing, class weights and the
 * three reductions).
 *
 * For a row z (C logits) with target t, class weights w (all 1 when absent),
 * lse = log sum_c exp(z_c) and log p_c = z_c - lse:
 *
 *     nll    = w_t * (lse - z_t)
 *     smooth = sum_c w_c * (lse - z_c)
 *     loss   = (1 - eps) * nll + eps / C * smooth
 *
 * Ignored rows (t == ignore_index) contribute 0 and have zero gradient.
 * reduction "mean" divides the summed loss by W = sum of w_t over the
 * non-ignored rows (0/0 = NaN when every row is ignored, as torch).
 * Gradient of a row's loss with respect to z_j, with p = softmax(z) and
 * Wc = sum_c w_c:
 *
 *     (1 - eps) * w_t * (p_j - [j == t])  +  eps / C * (p_j * Wc - w_j)
 *
 * Only lse (one double per row) is kept for the backward pass, never an
 * (N, C) buffer: the backward recomputes p_j = exp(z_j - lse).  lse is kept
 * in double even for float32 logits, so that p stays exact to float32
 * precision for huge logits (a float32 lse of 1e4 would be off by 5e-4). */
#include "crossentropy.h"
#include "softmax.h"

#ifndef CT_TEMPLATE_PASS
#define CT_TEMPLATE_FILE "crossentropy.c"
#include "ct_template.h"
#else
#include "ct_math.h"

/* log sum_c exp(z_c) of one row z (C), shifted by the row max for
 * stability (sum_exp_shifted of softmax.c).  An all -inf row gives -inf (the
 * shift is then 0); NaN in the row propagates through the sum. */
CT_INLINE acc_t FN(row_logsumexp)(const real *restrict z, ct_int C)
{
    real max = C > 0 ? VMAX(z, C) : -INFINITY; /* NaN if the row has one */
    if (max == -INFINITY) max = 0;
    return (acc_t)max + log(FN(sum_exp_shifted)(z, max, C));
}

/* sum_c w_c * (lse - z_c): the label-smoothing term of one row, as
 * lse * sum_c w_c - sum_c w_c z_c (weight NULL: C lse - sum_c z_c), the
 * sums lane-split in double (VSUM, VDOT): one chain of C dependent double
 * additions took as long as the rest of the row.  weight_sum is sum_c w_c. */
CT_INLINE acc_t FN(row_smoothing)(const real *z, const real *weight, acc_t weight_sum, acc_t lse, ct_int C)
{
    if (weight == NULL) return (acc_t)C * lse - VSUM(z, C);
    return weight_sum * lse - VDOT(weight, z, C);
}

typedef struct {
    acc_t *row_loss, *lse;
    const real *logits, *weight;
    const int64_t *targets;
    acc_t eps, weight_sum;
    int64_t ignore_index;
    ct_int C;
} FN(ce_forward_args);

/* Rows [n0, n1): lse and each row's loss (0 for an ignored row). */
static CT_VECTOR_CLONES void FN(ce_forward_rows)(void *ctx, ptrdiff_t n0, ptrdiff_t n1)
{
    const FN(ce_forward_args) *a = ctx;
    ct_int C = a->C;
    for (ct_int i = n0; i < n1; i++) {
        const real *z = a->logits + i * C;
        int64_t t = a->targets[i];
        acc_t row = 0;
        a->lse[i] = FN(row_logsumexp)(z, C);
        if (t != a->ignore_index) {
            acc_t w_t = a->weight ? (acc_t)a->weight[t] : 1;
            row = (1 - a->eps) * w_t * (a->lse[i] - (acc_t)z[t]);
            /* skipped at eps = 0: 0 * inf would turn a row with a -inf
             * logit into NaN */
            if (a->eps != 0)
                row += a->eps / (acc_t)C * FN(row_smoothing)(z, a->weight, a->weight_sum, a->lse[i], C);
        }
        a->row_loss[i] = row;
    }
}

#define CT_CE_BLOCK 1024 /* rows whose losses wait on the stack for the ordered sum */

/* cross_entropy_forward
 *   logits  (N, C)
 *   targets (N)    each in [0, C) or == ignore_index (checked by the caller)
 *   weight  (C) class weights, or NULL
 *   lse     (N)    out, double: log-sum-exp of each row (for the backward)
 *   loss    (N) per-row losses when reduction is CT_REDUCE_NONE, else (1)
 *           the mean or sum; ignored rows count 0.
 *   label_smoothing eps in [0, 1].
 * Blocks of CT_CE_BLOCK rows: their rows may run on the pool's threads
 * (each row is one thread's), then the block's losses are added in row
 * order on the caller, so the sum has the same bits on any thread count.
 */
void FN(cross_entropy_forward)(real *loss, acc_t *lse, const real *logits, const int64_t *targets,
                               const real *weight, ct_int N, ct_int C, int64_t ignore_index,
                               acc_t label_smoothing, int reduction)
{
    acc_t row_loss[CT_CE_BLOCK], total = 0, total_weight = 0, weight_sum = 0;
    if (weight != NULL && label_smoothing != 0) weight_sum = VSUM(weight, C);
    FN(ce_forward_args) a = {row_loss, NULL, NULL, weight, NULL, label_smoothing, weight_sum, ignore_index, C};
    for (ct_int i0 = 0; i0 < N; i0 += CT_CE_BLOCK) {
        ct_int rows = CT_MIN((ct_int)CT_CE_BLOCK, N - i0);
        a.lse = lse + i0, a.logits = logits + i0 * C, a.targets = targets + i0;
        ct_parallel_rows(rows, 12.0 * rows * C, FN(ce_forward_rows), &a);
        for (ct_int i = 0; i < rows; i++) {
            int64_t t = targets[i0 + i];
            if (t != ignore_index) total_weight += weight ? (acc_t)weight[t] : 1;
            if (reduction == CT_REDUCE_NONE) loss[i0 + i] = (real)row_loss[i];
            else total += row_loss[i];
        }
    }
    if (reduction == CT_REDUCE_MEAN) loss[0] = (real)(total / total_weight);
    if (reduction == CT_REDUCE_SUM) loss[0] = (real)total;
}

/* d[c] (+)= p_coef * p_c - smooth_coef * w_c for c in [lo, hi), with
 * p_c = exp(z_c - lse) (z_c - lse as (z_c - hi) - lo: ct_split_of in ct_math.h):
 * the softmax and uniform parts of a row's gradient, in `real` (the coefficients rounded to it; the gradient is stored in
 * `real` anyway).  accumulate 0 writes d (no zeroed row first). */
CT_INLINE void FN(add_softmax_grad)(real *restrict d, const real *restrict z,
                                   const real *restrict weight, FN(ct_split) lse, acc_t p_coef,
                                   acc_t smooth_coef, ct_int lo, ct_int hi, int accumulate)
{
    real pc = (real)p_coef, sc = (real)smooth_coef;
#define CT_CE_P(c) VEXP((z[c] - lse.hi) - lse.lo)
    if (weight == NULL && accumulate)
        for (ct_int c = lo; c < hi; c++) d[c] += pc * CT_CE_P(c) - sc;
    else if (weight == NULL)
        for (ct_int c = lo; c < hi; c++) d[c] = pc * CT_CE_P(c) - sc;
    else if (accumulate)
        for (ct_int c = lo; c < hi; c++) d[c] += pc * CT_CE_P(c) - sc * weight[c];
    else
        for (ct_int c = lo; c < hi; c++) d[c] = pc * CT_CE_P(c) - sc * weight[c];
#undef CT_CE_P
}

/* Gradient of one non-ignored row (C), scaled by s = d(total)/d(row loss);
 * accumulate 0 writes the row.  The target's own element is taken in acc_t
 * (p_t - 1 cancels where the model is sure). */
CT_INLINE void FN(row_backward)(real *d, const real *z, int64_t t, acc_t lse, const real *weight,
                             acc_t weight_sum, acc_t s, acc_t eps, ct_int C, int accumulate)
{
    acc_t w_t = weight ? (acc_t)weight[t] : 1;
    acc_t target_coef = s * (1 - eps) * w_t;  /* the one-hot term */
    acc_t smooth_coef = s * eps / (acc_t)C;   /* the uniform term */
    acc_t p_coef = target_coef + smooth_coef * weight_sum;
    FN(ct_split) parts = FN(ct_split_of)(lse);
    FN(add_softmax_grad)(d, z, weight, parts, p_coef, smooth_coef, 0, t, accumulate);
    FN(add_softmax_grad)(d, z, weight, parts, p_coef, smooth_coef, t + 1, C, accumulate);
    acc_t p_t = VEXP((real)((acc_t)z[t] - lse));
    real d_t = (real)(p_coef * p_t - smooth_coef * w_t - target_coef);
    d[t] = accumulate ? d[t] + d_t : d_t;
}

typedef struct {
    real *dlogits;
    const real *dloss, *logits, *weight;
    const int64_t *targets;
    const acc_t *lse;
    acc_t weight_sum, scale, eps;
    int64_t ignore_index;
    ct_int C;
    int per_row_dloss, accumulate;
} FN(ce_backward_args);

static CT_VECTOR_CLONES void FN(ce_backward_rows)(void *ctx, ptrdiff_t n0, ptrdiff_t n1)
{
    const FN(ce_backward_args) *a = ctx;
    ct_int C = a->C;
    for (ct_int i = n0; i < n1; i++) {
        int64_t t = a->targets[i];
        if (t == a->ignore_index) { /* no gradient: written 0, or left as it is */
            if (!a->accumulate) memset(a->dlogits + i * C, 0, (size_t)C * sizeof(real));
            continue;
        }
        acc_t s = (acc_t)a->dloss[a->per_row_dloss ? i : 0] * a->scale;
        FN(row_backward)(a->dlogits + i * C, a->logits + i * C, t, a->lse[i], a->weight, a->weight_sum, s,
                         a->eps, C, a->accumulate);
    }
}

/* cross_entropy_backward
 *   dloss   (N) for CT_REDUCE_NONE, else (1)
 *   logits  (N, C), targets (N), lse (N) double, weight (C) or NULL: as forward
 *   dlogits (N, C) += d loss / d logits; ignored rows get nothing.  accumulate 0:
 *   dlogits is written (ignored rows 0), a fresh buffer needs no zeros first.
 * Blocks of rows may run on the pool's threads (each row is one thread's).
 */
void FN(cross_entropy_backward)(real *dlogits, const real *dloss, const real *logits,
                                const int64_t *targets, const acc_t *lse, const real *weight,
                                ct_int N, ct_int C, int64_t ignore_index, acc_t label_smoothing,
                                int reduction, int accumulate)
{
    acc_t weight_sum = weight != NULL ? VSUM(weight, C) : (acc_t)C, scale = 1;
    if (reduction == CT_REDUCE_MEAN) {
        acc_t total_weight = 0;
        for (ct_int i = 0; i < N; i++)
            if (targets[i] != ignore_index) total_weight += weight ? (acc_t)weight[targets[i]] : 1;
        scale = 1 / total_weight;
    }
    FN(ce_backward_args) a = {dlogits, dloss, logits, weight, targets, lse, weight_sum, scale,
                              label_smoothing, ignore_index, C, reduction == CT_REDUCE_NONE, accumulate};
    ct_parallel_rows(N, 14.0 * N * C, FN(ce_backward_rows), &a);
}

#endif
