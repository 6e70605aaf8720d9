/* layernorm.c - layer normalisation over the last axis, with or without a
 * residual added first (the post-norm residual connection of a Transformer,
 * declared in fused.h).
 *
 *     h    = x (+ residual)                      (added in `real`, as NumPy would)
 *     mean = sum_i h_i / D
 *     var  = sum_i (h_i - mean)^2 / D            (biased, as torch)
 *     rstd = 1 / sqrt(var + eps)                 (eps INSIDE the root)
 *     hhat = (h - mean) * rstd
 *     out  = hhat * weight + bias
 *
 * Mean and variance are two passes in acc_t (double): subtracting the mean
 * before squaring keeps the variance exact for rows far from zero (x ~ 1e4
 * + noise) and exactly 0 for constant rows, where the one-pass formula
 * E[x^2] - E[x]^2 cancels catastrophically.  add_layernorm and layernorm run
 * the same row functions below, so add_layernorm(x, r) is bit-identical to
 * layernorm(x + r). */
#ifndef CT_TEMPLATE_PASS
#include "dropout.h"
#include "fused.h"
#include "layernorm.h"
#define CT_TEMPLATE_FILE "layernorm.c"
#include "ct_template.h"
#else
#include "ct_math.h"

/* Element i of the row h = x + r (r NULL: h = x), in `real`: the sum rounded
 * as an add of two arrays would round it.  Loops that read it are unswitched
 * on r by GCC (one vectorised loop per case). */
#define CT_LN_H(x, r, i) ((r) != NULL ? (x)[i] + (r)[i] : (x)[i])

/* The same element in acc_t (the row sums'). */
CT_INLINE acc_t FN(row_at)(const real *restrict x, const real *restrict r, ct_int i)
{
    return (acc_t)CT_LN_H(x, r, i);
}

/* The lane sums below are explicit vectors of CT_LANES acc_t, with
 * CT_LANE_SUM's order exactly (lane k takes i = k mod CT_LANES, the lanes
 * added in order, then the tail in order): the same bits as that macro.
 * Written out so that several rows can share one loop: one row's sums are
 * a chain of dependent adds per lane vector, several rows' are independent
 * chains that overlap (GCC's own vectoriser paired the rows' scalars
 * instead).  Measured in one process against the one-row loops, same bits:
 * two rows, forward 704 x 64 0.75-0.83 of the time, 1024 x 128 0.88; the
 * backward's two sums of a row in one loop 0.78 and 0.86.  Four rows and
 * the acc_t copies below: see add_layernorm_forward_rows. */
#ifndef CT_LN_ROWS
#define CT_LN_ROWS 4     /* rows whose sums share one loop in the forward */
#define CT_LN_BUF_D 1024 /* rows up to this long: h, weight, bias kept in acc_t on the stack */
#endif
/* CT_LANES acc_t lanes as two vectors of CT_LANE_HALF (lanes [0, 4) and [4, 8)):
 * 32 bytes each for double, one AVX2 register.  As one 64-byte vector, GCC
 * built the AVX2 clone's lanes through the stack (element inserts, spills
 * read back whole: store-forwarding stalls), and the backward's row sums took
 * ~7 cycles per element of D 64 (perf annotate, Zen 3).  Each lane's
 * arithmetic is the same either way: the same bits. */
#define CT_LANE_HALF (CT_LANES / 2)
typedef acc_t FN(half_lanes) __attribute__((vector_size(CT_LANE_HALF * sizeof(acc_t))));
typedef real FN(half_row_lanes) __attribute__((vector_size(CT_LANE_HALF * sizeof(real))));
typedef struct {
    FN(half_lanes) half[2];
} FN(lanes);

/* Elements [i, i + CT_LANES) of x + r (r NULL: of x) as acc_t lanes: row_at's
 * values (the rows h, and dy and weight in the backward).  (A macro, as the
 * loads and conversions stay in registers at every use.) */
#define CT_LOAD_LANES(out, x, r, i)                                                            \
    do {                                                                                       \
        for (int j_ = 0; j_ < 2; j_++) {                                                       \
            FN(half_row_lanes) v_, w_;                                                         \
            memcpy(&v_, (x) + (i) + j_ * CT_LANE_HALF, sizeof v_);                             \
            if ((r) != NULL) {                                                                 \
                memcpy(&w_, (r) + (i) + j_ * CT_LANE_HALF, sizeof w_);                         \
                v_ = v_ + w_;                                                                  \
            }                                                                                  \
            (out).half[j_] = __builtin_convertvector(v_, FN(half_lanes));                     \
        }                                                                                      \
    } while (0)

/* Lanes [i, i + CT_LANES) of the acc_t array p, and stored back. */
CT_INLINE FN(lanes) FN(lanes_at)(const acc_t *p)
{
    FN(lanes) v;
    memcpy(&v.half[0], p, sizeof v.half[0]);
    memcpy(&v.half[1], p + CT_LANE_HALF, sizeof v.half[1]);
    return v;
}

CT_INLINE void FN(lanes_store)(acc_t *p, FN(lanes) v)
{
    memcpy(p, &v.half[0], sizeof v.half[0]);
    memcpy(p + CT_LANE_HALF, &v.half[1], sizeof v.half[1]);
}

/* Lanewise a + b, a - s, a * b, and all lanes 0 (helpers for the loops below). */
CT_INLINE FN(lanes) FN(lanes_add)(FN(lanes) a, FN(lanes) b)
{
    return (FN(lanes)){{a.half[0] + b.half[0], a.half[1] + b.half[1]}};
}

CT_INLINE FN(lanes) FN(lanes_sub_scalar)(FN(lanes) a, acc_t s)
{
    return (FN(lanes)){{a.half[0] - s, a.half[1] - s}};
}

CT_INLINE FN(lanes) FN(lanes_mul)(FN(lanes) a, FN(lanes) b)
{
    return (FN(lanes)){{a.half[0] * b.half[0], a.half[1] * b.half[1]}};
}

CT_INLINE FN(lanes) FN(lanes_zero)(void)
{
    return (FN(lanes)){{{0}, {0}}};
}

/* The lanes added in order, from 0 (CT_LANE_SUM's combination). */
CT_INLINE acc_t FN(lanes_total)(const FN(lanes) *v)
{
    acc_t s = 0;
    for (int k = 0; k < CT_LANES; k++) s += v->half[k / CT_LANE_HALF][k % CT_LANE_HALF];
    return s;
}

/* Mean and biased variance of `rows` (1 to CT_LN_ROWS: a constant at each call)
 * consecutive rows of D (D >= 0; an empty row has mean 0, var 0):
 * mean[k], var[k] of row k, h = x[k D ..] + r[k D ..] (r NULL: h = x, see
 * row_at).  Both sums are lane-split, as above.  hbuf (rows, D) or NULL:
 * the first pass also stores h there in acc_t, and the second reads it back
 * (the same values: converted once instead of in every pass). */
CT_INLINE void FN(row_moments)(const real *restrict x, const real *restrict r, ct_int D, const int rows,
                               acc_t *mean, acc_t *var, acc_t *restrict hbuf)
{
    /* The mean is taken of h - h[0] (shifted data): a constant row then
     * has mean exactly h[0] and variance exactly 0 at any magnitude (a
     * plain sum / D rounds at 1e30 and the normalised row is not 0, where
     * torch, Welford's update, gives the bias). */
    ct_int full = D / CT_LANES * CT_LANES;
    acc_t shift[CT_LN_ROWS], sum[CT_LN_ROWS];
    FN(lanes) lane[CT_LN_ROWS], h;
    for (int k = 0; k < rows; k++) {
        shift[k] = D > 0 ? FN(row_at)(x, r, k * D) : 0;
        lane[k] = FN(lanes_zero)();
    }
    for (ct_int i = 0; i < full; i += CT_LANES)
        for (int k = 0; k < rows; k++) {
            CT_LOAD_LANES(h, x, r, k * D + i);
            if (hbuf != NULL) FN(lanes_store)(hbuf + k * D + i, h);
            lane[k] = FN(lanes_add)(lane[k], FN(lanes_sub_scalar)(h, shift[k]));
        }
    for (int k = 0; k < rows; k++) {
        sum[k] = FN(lanes_total)(&lane[k]);
        for (ct_int i = full; i < D; i++) {
            acc_t v = FN(row_at)(x, r, k * D + i);
            if (hbuf != NULL) hbuf[k * D + i] = v;
            sum[k] += v - shift[k];
        }
        mean[k] = D > 0 ? shift[k] + sum[k] / (acc_t)D : 0;
        lane[k] = FN(lanes_zero)();
    }
    for (ct_int i = 0; i < full; i += CT_LANES)
        for (int k = 0; k < rows; k++) {
            if (hbuf != NULL)
                h = FN(lanes_at)(hbuf + k * D + i);
            else
                CT_LOAD_LANES(h, x, r, k * D + i);
            h = FN(lanes_sub_scalar)(h, mean[k]);
            lane[k] = FN(lanes_add)(lane[k], FN(lanes_mul)(h, h));
        }
    for (int k = 0; k < rows; k++) {
        sum[k] = FN(lanes_total)(&lane[k]);
        for (ct_int i = full; i < D; i++) {
            acc_t d = (hbuf != NULL ? hbuf[k * D + i] : FN(row_at)(x, r, k * D + i)) - mean[k];
            sum[k] += d * d;
        }
        var[k] = D > 0 ? sum[k] / (acc_t)D : 0;
    }
}

/* h_i - mu in `real` (mu split into hi + lo: ct_split_of in ct_math.h), h = x + r (r NULL: h = x) */
#define CT_LN_CENTRED(x, r, i, m) ((CT_LN_H(x, r, i) - (m).hi) - (m).lo)

/* y = (h - mu) * rs * weight + bias (weight / bias NULL: 1 / 0), elementwise
 * in `real`: the sums that decide mu and rs are in acc_t (row_moments); each
 * output then rounds a few times (h - mu, the three products and sums,
 * within ~3 ulp of the terms) where acc_t would round once, and the loop
 * runs one `real` lane per element instead of two conversions each way (a
 * d128 training step's layer norms).  In float64 the same operations in
 * the same order as an acc_t loop. */
CT_INLINE void FN(row_normalise)(real *restrict y, const real *restrict x, const real *restrict r,
                                 const real *restrict weight, const real *restrict bias, acc_t mu, acc_t rs,
                                 ct_int D)
{
    FN(ct_split) m = FN(ct_split_of)(mu);
    real rs_r = (real)rs;
    if (weight != NULL && bias != NULL)
        for (ct_int i = 0; i < D; i++) y[i] = CT_LN_CENTRED(x, r, i, m) * rs_r * weight[i] + bias[i];
    else if (weight != NULL)
        for (ct_int i = 0; i < D; i++) y[i] = CT_LN_CENTRED(x, r, i, m) * rs_r * weight[i];
    else if (bias != NULL)
        for (ct_int i = 0; i < D; i++) y[i] = CT_LN_CENTRED(x, r, i, m) * rs_r + bias[i];
    else
        for (ct_int i = 0; i < D; i++) y[i] = CT_LN_CENTRED(x, r, i, m) * rs_r;
}

/* `rows` (1 to CT_LN_ROWS: a constant at each call) consecutive rows of the
 * forward: their moments together (row_moments), then for each row k,
 * h = x + r (r NULL: h = x), out (D) = (h - mean) * rstd * weight + bias;
 * mean[k] and rstd[k] returned.  hbuf (rows, D) or NULL: see row_moments.
 * A row's bits depend neither on `rows` nor on the copy. */
CT_INLINE void FN(layernorm_rows)(real *restrict y, real *mean, real *rstd, const real *restrict x,
                                  const real *restrict r, const real *restrict weight, const real *restrict bias,
                                  double eps, ct_int D, const int rows, acc_t *hbuf)
{
    acc_t mu[CT_LN_ROWS], var[CT_LN_ROWS];
    FN(row_moments)(x, r, D, rows, mu, var, hbuf);
    for (int k = 0; k < rows; k++) {
        acc_t rs = 1 / sqrt(var[k] + eps);
        FN(row_normalise)(y + k * D, x + k * D, r != NULL ? r + k * D : NULL, weight, bias, mu[k], rs, D);
        mean[k] = (real)mu[k];
        rstd[k] = (real)rs;
    }
}

typedef struct {
    real *out, *mean, *rstd;
    const real *inp, *residual, *weight, *bias;
    double eps;
    ct_int D;
} FN(layernorm_rows_args);

/* `rows` rows of add_layernorm_forward from row n, layernorm_rows inlined
 * once with a literal NULL residual (each copy's loops compiled without the
 * test of r), and for rows of up to CT_LN_BUF_D once more with the acc_t
 * copy of h (hbuf given). */
CT_INLINE void FN(forward_rows_at)(const FN(layernorm_rows_args) *a, ct_int n, const int rows, acc_t *hbuf)
{
    ct_int D = a->D;
    const real *r = a->residual != NULL ? a->residual + n * D : NULL;
    if (hbuf != NULL && r != NULL)
        FN(layernorm_rows)(a->out + n * D, a->mean + n, a->rstd + n, a->inp + n * D, r, a->weight, a->bias,
                           a->eps, D, rows, hbuf);
    else if (hbuf != NULL)
        FN(layernorm_rows)(a->out + n * D, a->mean + n, a->rstd + n, a->inp + n * D, NULL, a->weight, a->bias,
                           a->eps, D, rows, hbuf);
    else if (r != NULL)
        FN(layernorm_rows)(a->out + n * D, a->mean + n, a->rstd + n, a->inp + n * D, r, a->weight, a->bias,
                           a->eps, D, rows, NULL);
    else
        FN(layernorm_rows)(a->out + n * D, a->mean + n, a->rstd + n, a->inp + n * D, NULL, a->weight, a->bias,
                           a->eps, D, rows, NULL);
}

/* Rows [n0, n1) of add_layernorm_forward (a block of ct_parallel_rows): in
 * groups of CT_LN_ROWS, then one at a time.  Rows of up to CT_LN_BUF_D keep
 * h in acc_t on the stack for the moments' second pass (converted once). */
static CT_VECTOR_CLONES void FN(add_layernorm_forward_rows)(void *ctx, ptrdiff_t n0, ptrdiff_t n1)
{
    const FN(layernorm_rows_args) *a = ctx;
    ct_int n = n0, D = a->D;
    if (D <= CT_LN_BUF_D) {
        acc_t hbuf[CT_LN_ROWS * CT_LN_BUF_D];
        for (; n + CT_LN_ROWS <= n1; n += CT_LN_ROWS) FN(forward_rows_at)(a, n, CT_LN_ROWS, hbuf);
        for (; n < n1; n++) FN(forward_rows_at)(a, n, 1, hbuf);
        return;
    }
    for (; n + CT_LN_ROWS <= n1; n += CT_LN_ROWS) FN(forward_rows_at)(a, n, CT_LN_ROWS, NULL);
    for (; n < n1; n++) FN(forward_rows_at)(a, n, 1, NULL);
}

/* add_layernorm_forward (also layernorm_forward, with residual NULL)
 *   inp, residual (N, D)  rows are any flattened leading dims; residual may be NULL
 *   weight (D) or NULL (scale 1), bias (D) or NULL (shift 0)
 *   h = inp + residual;  out (N, D) = (h - mean) * rstd * weight + bias
 *   mean (N), rstd (N) = 1 / sqrt(var + eps), kept for backward
 * layernorm_rows is inlined with and without a literal NULL residual
 * (forward_rows_at), so each copy's loops are vectorised without the test of r.  Blocks
 * of rows may run on the pool's threads (ct_parallel_rows): every row is one
 * thread's, so the bits do not depend on the thread count.
 */
void FN(add_layernorm_forward)(real *out, real *mean, real *rstd, const real *inp,
                               const real *residual, const real *weight, const real *bias,
                               double eps, ct_int N, ct_int D)
{
    FN(layernorm_rows_args) a = {out, mean, rstd, inp, residual, weight, bias, eps, D};
    ct_parallel_rows(N, 12.0 * N * D, FN(add_layernorm_forward_rows), &a);
}

/* layernorm_forward
 *   inp (N, D), weight (D) or NULL, bias (D) or NULL
 *   out (N, D) = (x - mean) * rstd * weight + bias;  mean (N), rstd (N) for backward
 *   (add_layernorm_forward without a residual)
 */
void FN(layernorm_forward)(real *out, real *mean, real *rstd, const real *inp, const real *weight,
                           const real *bias, ct_int N, ct_int D, double eps)
{
    FN(add_layernorm_forward)(out, mean, rstd, inp, NULL, weight, bias, eps, N, D);
}

/* ---- dropout, residual and layer norm in one op ------------------------- */

typedef struct {
    FN(layernorm_rows_args) ln;
    uint8_t *keep;
    double p;
    uint64_t seed;
} FN(dropout_ln_args);

/* Rows [n0, n1) of dropout_add_layernorm_forward (D <= CT_LN_BUF_D): groups of
 * up to CT_LN_ROWS rows through dropout_range into a stack block (the
 * dropout kernel's own loop, mask and products), then layernorm_rows of
 * that block plus the residual, as add_layernorm_forward's rows. */
static CT_VECTOR_CLONES void FN(dropout_add_layernorm_rows)(void *ctx, ptrdiff_t n0, ptrdiff_t n1)
{
    const FN(dropout_ln_args) *a = ctx;
    const FN(layernorm_rows_args) *l = &a->ln;
    ct_int D = l->D;
    real dropped[CT_LN_ROWS * CT_LN_BUF_D];
    acc_t hbuf[CT_LN_ROWS * CT_LN_BUF_D];
    for (ct_int n = n0; n < n1;) {
        int rows = n + CT_LN_ROWS <= n1 ? CT_LN_ROWS : 1;
        FN(dropout_range)(dropped, a->keep + n * D, l->inp + n * D, rows * D, a->p, a->seed, (uint64_t)(n * D));
        if (rows == CT_LN_ROWS)
            FN(layernorm_rows)(l->out + n * D, l->mean + n, l->rstd + n, dropped, l->residual + n * D, l->weight,
                               l->bias, l->eps, D, CT_LN_ROWS, hbuf);
        else
            FN(layernorm_rows)(l->out + n * D, l->mean + n, l->rstd + n, dropped, l->residual + n * D, l->weight,
                               l->bias, l->eps, D, 1, hbuf);
        n += rows;
    }
}

/* dropout_add_layernorm_forward
 *   inp, residual (N, D); weight, bias (D) or NULL; 0 <= p <= 1, seed
 *   keep (N, D) <- dropout_forward's mask of inp (element n D + i kept iff
 *   ct_random_kept(seed, n D + i));  h = inp * keep / (1 - p) + residual;
 *   out, mean, rstd as add_layernorm_forward of h.  The same bits as
 *   dropout_forward then add_layernorm_forward(dropped, residual), without
 *   the dropped array: the post-norm residual connection of a Transformer
 *   layer in training, norm(x + dropout(sublayer(x))).
 * Rows wider than CT_LN_BUF_D take the two kernels (a scratch (N, D)).
 * Returns 0, or -1 when that scratch cannot be allocated. */
int FN(dropout_add_layernorm_forward)(real *out, real *mean, real *rstd, uint8_t *keep, const real *inp,
                                      const real *residual, const real *weight, const real *bias, double eps,
                                      double p, uint64_t seed, ct_int N, ct_int D)
{
    if (D > CT_LN_BUF_D) {
        real *dropped = malloc((size_t)CT_MAX(N * D, 1) * sizeof(real));
        if (dropped == NULL) return -1;
        FN(dropout_forward)(dropped, keep, inp, N * D, p, seed, 0);
        FN(add_layernorm_forward)(out, mean, rstd, dropped, residual, weight, bias, eps, N, D);
        free(dropped);
        return 0;
    }
    FN(dropout_ln_args) a = {{out, mean, rstd, inp, residual, weight, bias, eps, D}, keep, p, seed};
    ct_parallel_rows(N, 20.0 * N * D, FN(dropout_add_layernorm_rows), &a);
    return 0;
}

/* acc (D) += dy * hhat, hhat = (h - mu) * rs, in `real` (mu and rs are the
 * forward's saved `real` values) */
CT_INLINE void FN(row_add_dy_xhat)(real *restrict acc, const real *restrict dy, const real *restrict x,
                                   const real *restrict r, real mu, real rs, ct_int D)
{
    for (ct_int i = 0; i < D; i++) acc[i] += dy[i] * ((CT_LN_H(x, r, i) - mu) * rs);
}

/* mean(g) and mean(g * hhat) of a row (D > 0), g = dy * weight (weight
 * NULL: g = dy), hhat = (h - mu) * rs; one lane sum per case so that each
 * vectorises.  wd (D) or NULL: weight in acc_t. */
CT_INLINE void FN(row_g_means)(const real *restrict dy, const real *restrict x, const real *restrict r,
                               const real *restrict weight, acc_t mu, acc_t rs, ct_int D,
                               acc_t *g_mean, acc_t *g_xhat_mean, const acc_t *restrict wd)
{
    /* both sums in one loop (two independent chains), each in CT_LANE_SUM's order */
    ct_int full = D / CT_LANES * CT_LANES;
    FN(lanes) lane_g = FN(lanes_zero)(), lane_gx = FN(lanes_zero)(), g, h, wl;
    for (ct_int i = 0; i < full; i += CT_LANES) {
        CT_LOAD_LANES(g, dy, (const real *)NULL, i);
        if (weight != NULL) {
            if (wd != NULL)
                wl = FN(lanes_at)(wd + i);
            else
                CT_LOAD_LANES(wl, weight, (const real *)NULL, i);
            g = FN(lanes_mul)(g, wl);
        }
        CT_LOAD_LANES(h, x, r, i);
        lane_g = FN(lanes_add)(lane_g, g);
        for (int j = 0; j < 2; j++) lane_gx.half[j] += g.half[j] * ((h.half[j] - mu) * rs);
    }
    acc_t sum_g = FN(lanes_total)(&lane_g), sum_gx = FN(lanes_total)(&lane_gx);
    for (ct_int i = full; i < D; i++) {
        acc_t gi = weight != NULL ? (acc_t)dy[i] * weight[i] : (acc_t)dy[i];
        acc_t hi = FN(row_at)(x, r, i);
        sum_g += gi;
        sum_gx += gi * ((hi - mu) * rs);
    }
    *g_mean = sum_g / (acc_t)D;
    *g_xhat_mean = sum_gx / (acc_t)D;
}

/* d loss / d h_i of a row: rs * (g_i - mean(g) - hhat_i * mean(g * hhat)),
 * g_i = dy_i * weight_i (weight NULL: dy_i); see add_layernorm_backward. */
CT_INLINE real FN(dx_term)(real dy, real weight_i, real hhat, real rs, real g_mean, real g_xhat_mean)
{
    return rs * (dy * weight_i - g_mean - hhat * g_xhat_mean);
}

/* One row of the backward (see add_layernorm_backward); h = x + r (r NULL:
 * h = x).  The two row sums (row_g_means) are in acc_t; the elementwise
 * loops after them in `real`, from the forward's saved `real` mean and rstd
 * (each term rounds a few times where acc_t rounded once, and the loops run
 * one `real` lane per element, not two conversions each way).  In float64
 * the same operations in the same order as acc_t loops.  wd (D) or NULL:
 * weight in acc_t for row_g_means (the same values: the copy only saves
 * conversions). */
CT_INLINE void FN(layernorm_backward_row)(real *restrict dx, real *restrict dweight,
                                          real *restrict dbias, const real *restrict dy,
                                          const real *restrict x, const real *restrict r,
                                          const real *restrict weight, real mu, real rs, ct_int D,
                                          const acc_t *restrict wd)
{
    if (dx == NULL || D == 0) {
        if (dbias != NULL) VADD_INTO(dbias, dy, D);
        if (dweight != NULL) FN(row_add_dy_xhat)(dweight, dy, x, r, mu, rs, D);
        return;
    }
    acc_t g_mean_acc, g_xhat_mean_acc;
    FN(row_g_means)(dy, x, r, weight, mu, rs, D, &g_mean_acc, &g_xhat_mean_acc, wd);
    real g_mean = (real)g_mean_acc, g_xhat_mean = (real)g_xhat_mean_acc;
#define LN_HHAT(i) ((CT_LN_H(x, r, i) - mu) * rs)
    if (weight != NULL && dweight != NULL && dbias != NULL) {
        /* nn.LayerNorm's usual case: dbias, dweight and dinp in one loop (the
         * same terms as VADD_INTO, row_add_dy_xhat and the loop below) */
        for (ct_int i = 0; i < D; i++) {
            real hhat = LN_HHAT(i);
            dbias[i] += dy[i];
            dweight[i] += dy[i] * hhat;
            dx[i] += FN(dx_term)(dy[i], weight[i], hhat, rs, g_mean, g_xhat_mean);
        }
    } else {
        if (dbias != NULL) VADD_INTO(dbias, dy, D);
        if (dweight != NULL) FN(row_add_dy_xhat)(dweight, dy, x, r, mu, rs, D);
        if (weight != NULL)
            for (ct_int i = 0; i < D; i++) dx[i] += FN(dx_term)(dy[i], weight[i], LN_HHAT(i), rs, g_mean, g_xhat_mean);
        else
            for (ct_int i = 0; i < D; i++) dx[i] += FN(dx_term)(dy[i], 1, LN_HHAT(i), rs, g_mean, g_xhat_mean);
    }
#undef LN_HHAT
}

typedef struct {
    real *dinp, *dweight, *dbias;
    const real *dout, *inp, *residual, *weight, *mean, *rstd;
    ct_int N, D;
    /* dropout_add_layernorm_backward only (keep NULL otherwise): h = inp * keep * scale +
     * residual; dinp gets d h * keep * scale, dres d h; accumulate 0 writes both */
    const uint8_t *keep;
    real scale;
    real *dres;
    int accumulate;
} FN(layernorm_backward_args);

/* Row n of the backward, layernorm_backward_row inlined once with a literal
 * NULL residual, and for rows of up to CT_LN_BUF_D once more with the acc_t
 * copy of the weight (as the forward's forward_rows_at). */
CT_INLINE void FN(backward_row_at)(const FN(layernorm_backward_args) *a, ct_int n, const acc_t *wd)
{
    ct_int D = a->D;
    real *dx = a->dinp ? a->dinp + n * D : NULL;
    const real *x = a->inp + n * D, *dy = a->dout + n * D;
    const real *r = a->residual != NULL ? a->residual + n * D : NULL;
    if (wd != NULL && r != NULL)
        FN(layernorm_backward_row)(dx, a->dweight, a->dbias, dy, x, r, a->weight, a->mean[n], a->rstd[n], D, wd);
    else if (wd != NULL)
        FN(layernorm_backward_row)(dx, a->dweight, a->dbias, dy, x, NULL, a->weight, a->mean[n], a->rstd[n], D, wd);
    else if (r != NULL)
        FN(layernorm_backward_row)(dx, a->dweight, a->dbias, dy, x, r, a->weight, a->mean[n], a->rstd[n], D, NULL);
    else
        FN(layernorm_backward_row)(dx, a->dweight, a->dbias, dy, x, NULL, a->weight, a->mean[n], a->rstd[n], D,
                                   NULL);
}

/* Rows [n0, n1) of dropout_add_layernorm_backward (D <= CT_LN_BUF_D): each
 * row's h = inp * keep * scale + residual rebuilt on the stack (the same
 * `real` sum the forward normalised), the row's gradient d h computed there
 * from zero by layernorm_backward_row (so the same bits as add_layernorm_
 * backward of the dropped input), then dres (+)= d h and dinp (+)= d h *
 * keep * scale (dropout_backward's product). */
CT_INLINE void FN(dropout_backward_rows)(const FN(layernorm_backward_args) *a, ct_int n0, ct_int n1)
{
    ct_int D = a->D;
    real hrow[CT_LN_BUF_D], grow[CT_LN_BUF_D];
    acc_t wd[CT_LN_BUF_D];
    if (a->weight != NULL)
        for (ct_int i = 0; i < D; i++) wd[i] = a->weight[i];
    const real scale = a->scale;
    for (ct_int n = n0; n < n1; n++) {
        const real *restrict x = a->inp + n * D, *restrict r = a->residual + n * D;
        const uint8_t *restrict k = a->keep + n * D;
        real *restrict dres = a->dres + n * D, *restrict dinp = a->dinp + n * D;
        for (ct_int i = 0; i < D; i++) hrow[i] = x[i] * (k[i] ? scale : (real)0) + r[i];
        memset(grow, 0, (size_t)D * sizeof(real));
        FN(layernorm_backward_row)(grow, a->dweight, a->dbias, a->dout + n * D, hrow, NULL, a->weight, a->mean[n],
                                   a->rstd[n], D, a->weight != NULL ? wd : NULL);
        if (a->accumulate) {
            for (ct_int i = 0; i < D; i++) dres[i] += grow[i];
            for (ct_int i = 0; i < D; i++) dinp[i] += grow[i] * (k[i] ? scale : (real)0);
        } else {
            memcpy(dres, grow, (size_t)D * sizeof(real));
            for (ct_int i = 0; i < D; i++) dinp[i] = grow[i] * (k[i] ? scale : (real)0);
        }
    }
}

/* Rows [n0, n1) of the whole backward (dbias, dweight and dinp), one row at
 * a time: the one-thread path, one sweep over the rows.  Rows of up to
 * CT_LN_BUF_D keep the weight in acc_t on the stack for row_g_means. */
static CT_VECTOR_CLONES void FN(layernorm_backward_rows)(void *ctx, ptrdiff_t n0, ptrdiff_t n1)
{
    const FN(layernorm_backward_args) *a = ctx;
    ct_int D = a->D;
    if (a->keep != NULL) {
        FN(dropout_backward_rows)(a, n0, n1);
        return;
    }
    if (D <= CT_LN_BUF_D && a->weight != NULL) {
        acc_t wd[CT_LN_BUF_D];
        for (ct_int i = 0; i < D; i++) wd[i] = a->weight[i];
        for (ct_int n = n0; n < n1; n++) FN(backward_row_at)(a, n, wd);
        return;
    }
    for (ct_int n = n0; n < n1; n++) FN(backward_row_at)(a, n, NULL);
}

/* dweight and dbias are summed in fixed blocks of CT_LN_ROW_BLOCK rows: each
 * block's partial sums come from the one sweep that also makes its rows'
 * dinp, and the partials are added to dweight / dbias in block order on the
 * caller.  The blocks do not depend on the thread count, so neither do the
 * bits, and the pool's threads share the whole backward (a second job over
 * groups of columns re-read every row: at 2 threads the backward took 0.75
 * of its 1-thread time, the forward 0.55). */
#define CT_LN_ROW_BLOCK 64

typedef struct {
    FN(layernorm_backward_args) a;
    real *partial; /* (blocks, 2, D): the dweight then the dbias partial sums of each block */
} FN(layernorm_backward_job);

/* Blocks [b0, b1) of rows: their dinp, and their partial dweight / dbias. */
static void FN(layernorm_backward_blocks)(void *ctx, ptrdiff_t b0, ptrdiff_t b1)
{
    const FN(layernorm_backward_job) *j = ctx;
    ct_int D = j->a.D;
    for (ptrdiff_t b = b0; b < b1; b++) {
        FN(layernorm_backward_args) block = j->a;
        real *pw = j->partial + b * 2 * D, *pb = pw + D;
        memset(pw, 0, (size_t)(2 * D) * sizeof(real));
        block.dweight = j->a.dweight ? pw : NULL;
        block.dbias = j->a.dbias ? pb : NULL;
        FN(layernorm_backward_rows)(&block, b * CT_LN_ROW_BLOCK, CT_MIN(j->a.N, (b + 1) * CT_LN_ROW_BLOCK));
    }
}

/* The rows of job j on the pool: without dweight and dbias in one sweep;
 * else in blocks of CT_LN_ROW_BLOCK rows whose partial sums are then added
 * to dweight / dbias in block order (see above).  0, or -1 (no memory). */
static int FN(run_backward_job)(FN(layernorm_backward_job) *j, real *dweight, real *dbias, ct_int N, ct_int D)
{
    if (dweight == NULL && dbias == NULL) { /* rows only: nothing to sum across them */
        ct_parallel_rows(N, 10.0 * N * D, FN(layernorm_backward_rows), &j->a);
        return 0;
    }
    ct_int blocks = (N + CT_LN_ROW_BLOCK - 1) / CT_LN_ROW_BLOCK;
    j->partial = malloc((size_t)CT_MAX(blocks * 2 * D, 1) * sizeof(real));
    if (j->partial == NULL) return -1;
    ct_parallel_rows(blocks, 16.0 * N * D, FN(layernorm_backward_blocks), j);
    for (ct_int b = 0; b < blocks; b++) {
        if (dweight != NULL) VADD_INTO(dweight, j->partial + b * 2 * D, D);
        if (dbias != NULL) VADD_INTO(dbias, j->partial + b * 2 * D + D, D);
    }
    free(j->partial);
    return 0;
}

/* add_layernorm_backward (accumulates; also layernorm_backward, with residual NULL)
 *   dout (N, D), inp, residual (N, D) (residual may be NULL), weight (D) or NULL,
 *   mean (N), rstd (N) from forward;  g = dout * weight,  hhat = (h - mean) * rstd
 *   dbias   (D) += sum over rows of dout                  (skipped when NULL)
 *   dweight (D) += sum over rows of dout * hhat           (skipped when NULL)
 *   dinp (N, D) += rstd * (g - mean(g) - hhat * mean(g * hhat))   (skipped when NULL;
 *                  it is also the gradient of the residual)
 * The dinp formula is the chain rule through hhat = (h - mean) * rstd, where
 * mean and rstd both depend on every h_i of the row.  As in the forward, the
 * row function is inlined once with a literal NULL residual.  One sweep over
 * the rows does all three, in blocks of CT_LN_ROW_BLOCK rows on the pool
 * (dweight / dbias: sum over the blocks, in order, of each block's sum over
 * its rows, in order), so the bits do not depend on the thread count.
 * Returns 0, or -1 when the (blocks, 2, D) partial sums cannot be allocated.
 */
int FN(add_layernorm_backward)(real *dinp, real *dweight, real *dbias, const real *dout,
                               const real *inp, const real *residual, const real *weight,
                               const real *mean, const real *rstd, ct_int N, ct_int D)
{
    FN(layernorm_backward_job) j = {{dinp, dweight, dbias, dout, inp, residual, weight, mean, rstd, N, D,
                                     NULL, 0, NULL, 1}, NULL};
    return FN(run_backward_job)(&j, dweight, dbias, N, D);
}

/* dropout_add_layernorm_backward
 *   dout (N, D); inp, residual (N, D), keep (N, D) and p from the forward; weight (D) or
 *   NULL; mean (N), rstd (N) from the forward
 *   d h = add_layernorm_backward's dinp for h = inp * keep / (1 - p) + residual
 *   dres (N, D) (+)= d h;  dinp (N, D) (+)= d h * keep / (1 - p)
 *   dweight (D) (+)= sum over rows of dout * hhat;  dbias (D) (+)= sum of dout (NULL: skipped)
 *   accumulate 1 adds into every given output; 0 writes them (fresh buffers).
 *   The same bits as add_layernorm_backward then dropout_backward.  Rows wider than
 *   CT_LN_BUF_D take those two kernels over a rebuilt dropped input (scratch (N, D)).
 * Returns 0, or -1 when scratch cannot be allocated. */
int FN(dropout_add_layernorm_backward)(real *dinp, real *dres, real *dweight, real *dbias, const real *dout,
                                       const real *inp, const uint8_t *keep, double p, const real *residual,
                                       const real *weight, const real *mean, const real *rstd, ct_int N,
                                       ct_int D, int accumulate)
{
    real scale = p < 1 ? (real)(1.0 / (1.0 - p)) : (real)0; /* dropout.c's factor */
    if (!accumulate) {
        if (dweight != NULL) memset(dweight, 0, (size_t)D * sizeof(real));
        if (dbias != NULL) memset(dbias, 0, (size_t)D * sizeof(real));
    }
    if (D > CT_LN_BUF_D) { /* the dropped input and d h in scratch arrays */
        size_t n = (size_t)CT_MAX(N * D, 1);
        real *dropped = malloc(n * sizeof(real)), *dh = calloc(n, sizeof(real));
        int status = -1;
        if (dropped != NULL && dh != NULL) {
            FN(dropout_backward)(dropped, inp, keep, N * D, p, 0); /* inp * keep / (1 - p): the forward's product */
            status = FN(add_layernorm_backward)(dh, dweight, dbias, dout, dropped, residual, weight, mean, rstd, N, D);
        }
        if (status == 0) {
            if (accumulate) VADD_INTO(dres, dh, N * D);
            else memcpy(dres, dh, (size_t)(N * D) * sizeof(real));
            FN(dropout_backward)(dinp, dh, keep, N * D, p, accumulate);
        }
        free(dropped), free(dh);
        return status;
    }
    FN(layernorm_backward_job) j = {{dinp, dweight, dbias, dout, inp, residual, weight, mean, rstd, N, D,
                                     keep, scale, dres, accumulate}, NULL};
    return FN(run_backward_job)(&j, dweight, dbias, N, D);
}

/* layernorm_backward (accumulates)
 *   dout (N, D), inp (N, D), weight (D) or NULL, mean (N), rstd (N) from forward
 *   dbias (D), dweight (D), dinp (N, D) += as add_layernorm_backward without a residual
 */
int FN(layernorm_backward)(real *dinp, real *dweight, real *dbias, const real *dout,
                           const real *inp, const real *weight, const real *mean,
                           const real *rstd, ct_int N, ct_int D)
{
    return FN(add_layernorm_backward)(dinp, dweight, dbias, dout, inp, NULL, weight, mean, rstd, N, D);
}

#undef CT_LOAD_LANES

#endif
