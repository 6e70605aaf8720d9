/* attention.c - scaled dot-product attention, fused multi-head attention and
 * the sinusoidal positional encoding table.
 *
 * Attention of one (batch, head) slice, with S the scores and P the weights:
 *     S = scale * Q K^T + mask          (Tq, Tk); masked keys get -inf
 *     P = softmax(S) over keys          a row with every key masked is all 0
 *     Pd = dropout(P)                   what forward returns as `probs`
 *     O = Pd V                          (Tq, Dv)
 * Backward, from dO:
 *     dV = Pd^T dO,   dPd = dO V^T,   dP = dPd * keep / (1 - p)
 *     dS = P * (dP - rowsum(P * dP))   (softmax Jacobian)
 *     dQ = scale dS K,   dK = scale dS^T Q
 * Every product is a GEMM per (b, h); the (Tq, Tk) intermediates of backward
 * live in a per-call scratch of one or two (Tq, Tk) matrices. */
#ifndef CT_TEMPLATE_PASS
#include "attention.h"
#include "linear.h"
#define CT_TEMPLATE_FILE "attention.c"
#include "ct_template.h"
#else

/* C (M, N) = alpha op(A) op(B) + beta C, row-major with leading dimensions;
 * empty products are handled here (BLAS rejects zero leading dimensions). */
static void FN(gemm)(enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, ct_int M, ct_int N,
                     ct_int K, real alpha, const real *A, ct_int lda, const real *Bm, ct_int ldb,
                     real beta, real *C, ct_int ldc)
{
    if (M == 0 || N == 0) return;
    if (K == 0) {
        if (beta == 0)
            for (ct_int m = 0; m < M; m++) memset(C + m * ldc, 0, (size_t)N * sizeof(real));
        return;
    }
    GEMM(CT_ROWMAJOR, ta, tb, (int)M, (int)N, (int)K, alpha, A, (int)lda, Bm, (int)ldb, beta, C,
         (int)ldc);
}

/* Row i of the mask of slice (b, h): element j at [j * stride[3]]. */
static const void *FN(mask_row)(const ct_attn_mask *m, ct_int b, ct_int h, ct_int i)
{
    ct_int offset = b * m->stride[0] + h * m->stride[1] + i * m->stride[2];
    if (m->kind == CT_MASK_BOOL) return (const unsigned char *)m->data + offset;
    return (const real *)m->data + offset;
}

/* Add the mask to one score row: hidden keys (causal j > i, bool False) -> -inf. */
static void FN(mask_scores_row)(real *row, const ct_attn_opts *o, ct_int b, ct_int h, ct_int i,
                                ct_int Tk)
{
    const ct_attn_mask *m = &o->mask;
    ct_int sj = m->stride[3];
    if (m->kind == CT_MASK_BOOL) {
        const unsigned char *keep = FN(mask_row)(m, b, h, i);
        for (ct_int j = 0; j < Tk; j++)
            if (!keep[j * sj]) row[j] = -INFINITY;
    } else if (m->kind == CT_MASK_ADD) {
        const real *add = FN(mask_row)(m, b, h, i);
        for (ct_int j = 0; j < Tk; j++) row[j] += add[j * sj];
    }
    if (o->is_causal)
        for (ct_int j = i + 1; j < Tk; j++) row[j] = -INFINITY;
}

/* In-place softmax of one row.  A row whose every score is -inf (every key
 * masked) becomes all zeros rather than 0/0 = NaN; NaN scores still give NaN. */
static void FN(softmax_row)(real *row, ct_int Tk)
{
    real max = -INFINITY;
    int has_nan = 0;
    for (ct_int j = 0; j < Tk; j++) {
        if (row[j] > max) max = row[j];
        has_nan |= row[j] != row[j];
    }
    if (max == -INFINITY && !has_nan) {
        memset(row, 0, (size_t)Tk * sizeof(real));
        return;
    }
    acc_t sum = 0;
    for (ct_int j = 0; j < Tk; j++) {
        row[j] = EXP(row[j] - max);
        sum += row[j];
    }
    real inv = (real)(1.0 / sum);
    for (ct_int j = 0; j < Tk; j++) row[j] *= inv;
}

/* Dropout factor of weight `flat` (see ct_attn_opts): 0 or 1 / (1 - p). */
static real FN(dropout_factor)(const ct_attn_opts *o, uint64_t flat)
{
    if (o->dropout_p >= 1) return 0;
    if (ct_random_uniform(o->seed, flat) < o->dropout_p) return 0;
    return (real)(1.0 / (1.0 - o->dropout_p));
}

/* Multiply the weights of slice (b, h) by their dropout factors. */
static void FN(dropout_slice)(real *P, const ct_attn_opts *o, ct_int bh, ct_int Tq, ct_int Tk)
{
    if (o->dropout_p <= 0) return;
    uint64_t base = (uint64_t)bh * (uint64_t)(Tq * Tk);
    for (ct_int n = 0; n < Tq * Tk; n++) P[n] *= FN(dropout_factor)(o, base + (uint64_t)n);
}

/* head_probs: weights of slice (b, h) before dropout
 *   q (Tq, Dh), k (Tk, Dh) contiguous -> P (Tq, Tk) = softmax(scale q k^T + mask) */
static void FN(head_probs)(real *P, const real *q, const real *k, const ct_attn_opts *o,
                           ct_int b, ct_int h, ct_int Tq, ct_int Tk, ct_int Dh)
{
    FN(gemm)(CT_NOTRANS, CT_TRANS, Tq, Tk, Dh, (real)o->scale, q, Dh, k, Dh, 0, P, Tk);
    for (ct_int i = 0; i < Tq; i++) {
        FN(mask_scores_row)(P + i * Tk, o, b, h, i, Tk);
        FN(softmax_row)(P + i * Tk, Tk);
    }
}

/* head_forward: one (b, h) slice
 *   q (Tq, Dh), k (Tk, Dh), v (Tk, Dv) contiguous
 *   probs (Tq, Tk) <- dropout(softmax(...));  out (Tq, Dv), row stride ld_out, <- probs v */
static void FN(head_forward)(real *out, ct_int ld_out, real *probs, const real *q, const real *k,
                             const real *v, const ct_attn_opts *o, ct_int b, ct_int h, ct_int H,
                             ct_int Tq, ct_int Tk, ct_int Dh, ct_int Dv)
{
    FN(head_probs)(probs, q, k, o, b, h, Tq, Tk, Dh);
    FN(dropout_slice)(probs, o, b * H + h, Tq, Tk);
    FN(gemm)(CT_NOTRANS, CT_NOTRANS, Tq, Dv, Tk, 1, probs, Tk, v, Dv, 0, out, ld_out);
}

/* Scratch of one backward call: dP and, with dropout, the recomputed P. */
typedef struct {
    real *dP, *P;
} FN(head_scratch);

static int FN(scratch_alloc)(FN(head_scratch) *s, const ct_attn_opts *o, ct_int Tq, ct_int Tk)
{
    size_t n = (size_t)CT_MAX(Tq * Tk, 1);
    s->dP = malloc(n * sizeof(real));
    s->P = o->dropout_p > 0 ? malloc(n * sizeof(real)) : NULL;
    if (s->dP == NULL || (o->dropout_p > 0 && s->P == NULL)) {
        free(s->dP);
        free(s->P);
        return -1;
    }
    return 0;
}

static void FN(scratch_free)(FN(head_scratch) *s)
{
    free(s->dP);
    free(s->P);
}

/* dS = P * (dP - rowsum(P * dP)), in place in dP (the softmax Jacobian). */
static void FN(softmax_backward_rows)(real *dP, const real *P, ct_int Tq, ct_int Tk)
{
    for (ct_int i = 0; i < Tq; i++) {
        real *d = dP + i * Tk;
        const real *p = P + i * Tk;
        acc_t dot = 0;
        for (ct_int j = 0; j < Tk; j++) dot += (acc_t)p[j] * d[j];
        for (ct_int j = 0; j < Tk; j++) d[j] = p[j] * (d[j] - (real)dot);
    }
}

/* head_backward: one (b, h) slice (accumulates)
 *   dout (Tq, Dv) row stride ld_dout; q, k, v, probs contiguous as in head_forward
 *   dq (Tq, Dh), dk (Tk, Dh) row stride ld_dqk;  dv (Tk, Dv) row stride ld_dv */
static void FN(head_backward)(real *dq, real *dk, ct_int ld_dqk, real *dv, ct_int ld_dv,
                              const real *dout, ct_int ld_dout, const real *q, const real *k,
                              const real *v, const real *probs, FN(head_scratch) *s,
                              const ct_attn_opts *o, ct_int b, ct_int h, ct_int H, ct_int Tq,
                              ct_int Tk, ct_int Dh, ct_int Dv)
{
    real scale = (real)o->scale;
    /* dV += Pd^T dO;  dPd = dO V^T */
    FN(gemm)(CT_TRANS, CT_NOTRANS, Tk, Dv, Tq, 1, probs, Tk, dout, ld_dout, 1, dv, ld_dv);
    FN(gemm)(CT_NOTRANS, CT_TRANS, Tq, Tk, Dv, 1, dout, ld_dout, v, Dv, 0, s->dP, Tk);
    const real *P = probs;
    if (o->dropout_p > 0) {
        /* The dropped weights are gone from probs: recompute P, and carry dPd
         * back through the same dropout factors (regenerated from the seed). */
        FN(head_probs)(s->P, q, k, o, b, h, Tq, Tk, Dh);
        FN(dropout_slice)(s->dP, o, b * H + h, Tq, Tk);
        P = s->P;
    }
    FN(softmax_backward_rows)(s->dP, P, Tq, Tk);
    /* dQ += scale dS K;  dK += scale dS^T Q */
    FN(gemm)(CT_NOTRANS, CT_NOTRANS, Tq, Dh, Tk, scale, s->dP, Tk, k, Dh, 1, dq, ld_dqk);
    FN(gemm)(CT_TRANS, CT_NOTRANS, Tk, Dh, Tq, scale, s->dP, Tk, q, Dh, 1, dk, ld_dqk);
}

/* sdpa_forward
 *   q (B, H, Tq, Dh), k (B, H, Tk, Dh), v (B, H, Tk, Dv)
 *   out (B, H, Tq, Dv), probs (B, H, Tq, Tk) = the weights after dropout */
void FN(sdpa_forward)(real *out, real *probs, const real *q, const real *k, const real *v,
                      const ct_attn_opts *opts, ct_int B, ct_int H, ct_int Tq, ct_int Tk,
                      ct_int Dh, ct_int Dv)
{
    for (ct_int b = 0; b < B; b++)
        for (ct_int h = 0; h < H; h++) {
            ct_int bh = b * H + h;
            FN(head_forward)(out + bh * Tq * Dv, Dv, probs + bh * Tq * Tk, q + bh * Tq * Dh,
                             k + bh * Tk * Dh, v + bh * Tk * Dv, opts, b, h, H, Tq, Tk, Dh, Dv);
        }
}

/* sdpa_backward (accumulates into dq, dk, dv; shapes as q, k, v)
 *   dout (B, H, Tq, Dv), probs from sdpa_forward with the same opts.
 *   Returns 0, or -1 when the (Tq, Tk) scratch cannot be allocated. */
int FN(sdpa_backward)(real *dq, real *dk, real *dv, const real *dout, const real *q,
                      const real *k, const real *v, const real *probs, const ct_attn_opts *opts,
                      ct_int B, ct_int H, ct_int Tq, ct_int Tk, ct_int Dh, ct_int Dv)
{
    if (B * H * Tq * Tk == 0) return 0; /* no weights: every gradient is 0 */
    FN(head_scratch) s;
    if (FN(scratch_alloc)(&s, opts, Tq, Tk)) return -1;
    for (ct_int b = 0; b < B; b++)
        for (ct_int h = 0; h < H; h++) {
            ct_int bh = b * H + h;
            FN(head_backward)(dq + bh * Tq * Dh, dk + bh * Tk * Dh, Dh, dv + bh * Tk * Dv, Dv,
                              dout + bh * Tq * Dv, Dv, q + bh * Tq * Dh, k + bh * Tk * Dh,
                              v + bh * Tk * Dv, probs + bh * Tq * Tk, &s, opts, b, h, H, Tq, Tk,
                              Dh, Dv);
        }
    FN(scratch_free)(&s);
    return 0;
}

/* split_heads: x (B, T, H * Dh) -> xh (B, H, T, Dh) */
static void FN(split_heads)(real *xh, const real *x, ct_int B, ct_int T, ct_int H, ct_int Dh)
{
    for (ct_int b = 0; b < B; b++)
        for (ct_int h = 0; h < H; h++)
            for (ct_int t = 0; t < T; t++)
                memcpy(xh + ((b * H + h) * T + t) * Dh, x + (b * T + t) * H * Dh + h * Dh,
                       (size_t)Dh * sizeof(real));
}

/* project_heads: xh (B, H, T, Dh) = split_heads(x (B, T, In) @ w^T + bias), via scratch (B*T, E) */
static void FN(project_heads)(real *xh, real *scratch, const real *x, const real *w,
                              const real *bias, ct_int B, ct_int T, ct_int In, ct_int H, ct_int Dh)
{
    FN(linear_forward)(scratch, x, w, bias, B * T, In, H * Dh);
    FN(split_heads)(xh, scratch, B, T, H, Dh);
}

/* mha_forward (torch.nn.MultiheadAttention, batch first)
 *   query (B, Tq, E), key (B, Tk, Ek), value (B, Tk, Ev), weights as FN(mha_weights)
 *   out (B, Tq, E) = ctx wo^T + bo
 *   saved for backward: qh (B, H, Tq, Dh), kh, vh (B, H, Tk, Dh) the projected heads,
 *   probs (B, H, Tq, Tk) the weights after dropout, ctx (B, Tq, E) the merged heads.
 *   Returns 0, or -1 when the projection scratch cannot be allocated. */
int FN(mha_forward)(real *out, real *qh, real *kh, real *vh, real *probs, real *ctx,
                    const real *query, const real *key, const real *value,
                    const FN(mha_weights) *w, const ct_attn_opts *opts, ct_int B, ct_int Tq,
                    ct_int Tk, ct_int E, ct_int Ek, ct_int Ev, ct_int H)
{
    ct_int Dh = E / H;
    real *scratch = malloc((size_t)CT_MAX(B * CT_MAX(Tq, Tk) * E, 1) * sizeof(real));
    if (scratch == NULL) return -1;
    FN(project_heads)(qh, scratch, query, w->wq, w->bq, B, Tq, E, H, Dh);
    FN(project_heads)(kh, scratch, key, w->wk, w->bk, B, Tk, Ek, H, Dh);
    FN(project_heads)(vh, scratch, value, w->wv, w->bv, B, Tk, Ev, H, Dh);
    free(scratch);
    /* Each head writes its context into columns h*Dh.. of ctx (merging the heads). */
    for (ct_int b = 0; b < B; b++)
        for (ct_int h = 0; h < H; h++) {
            ct_int bh = b * H + h;
            FN(head_forward)(ctx + b * Tq * E + h * Dh, E, probs + bh * Tq * Tk,
                             qh + bh * Tq * Dh, kh + bh * Tk * Dh, vh + bh * Tk * Dh, opts, b, h,
                             H, Tq, Tk, Dh, Dh);
        }
    FN(linear_forward)(out, ctx, w->wo, w->bo, B * Tq, E, E);
    return 0;
}

/* Scratch of mha_backward: gradients in the merged (B, T, E) layout. */
typedef struct {
    real *dctx, *dqm, *dkm, *dvm;
} FN(mha_scratch);

static void FN(mha_scratch_free)(FN(mha_scratch) *s)
{
    free(s->dctx);
    free(s->dqm);
    free(s->dkm);
    free(s->dvm);
}

static int FN(mha_scratch_alloc)(FN(mha_scratch) *s, ct_int B, ct_int Tq, ct_int Tk, ct_int E)
{
    size_t nq = (size_t)CT_MAX(B * Tq * E, 1), nk = (size_t)CT_MAX(B * Tk * E, 1);
    s->dctx = malloc(nq * sizeof(real));
    s->dqm = calloc(nq, sizeof(real));
    s->dkm = calloc(nk, sizeof(real));
    s->dvm = calloc(nk, sizeof(real));
    if (s->dctx && s->dqm && s->dkm && s->dvm) return 0;
    FN(mha_scratch_free)(s);
    return -1;
}

/* mha_backward (accumulates into every array of g; shapes as in mha_forward)
 *   dout (B, Tq, E); qh, kh, vh, probs, ctx as saved by mha_forward with the same opts.
 *   Returns 0, or -1 when the scratch cannot be allocated. */
int FN(mha_backward)(const FN(mha_grads) *g, const real *dout, const real *query,
                     const real *key, const real *value, const FN(mha_weights) *w,
                     const real *qh, const real *kh, const real *vh, const real *probs,
                     const real *ctx, const ct_attn_opts *opts, ct_int B, ct_int Tq, ct_int Tk,
                     ct_int E, ct_int Ek, ct_int Ev, ct_int H)
{
    ct_int Dh = E / H;
    FN(mha_scratch) s;
    FN(head_scratch) hs;
    if (FN(mha_scratch_alloc)(&s, B, Tq, Tk, E)) return -1;
    if (FN(scratch_alloc)(&hs, opts, Tq, Tk)) {
        FN(mha_scratch_free)(&s);
        return -1;
    }
    /* out = ctx wo^T + bo:  dctx = dout wo, dwo += dout^T ctx, dbo += colsum(dout) */
    memset(s.dctx, 0, (size_t)(B * Tq * E) * sizeof(real));
    FN(linear_backward)(s.dctx, g->dwo, g->dbo, dout, ctx, w->wo, B * Tq, E, E, 1);
    /* Heads: read dctx and write dq, dk, dv straight in the merged layout (row stride E). */
    for (ct_int b = 0; b < B; b++)
        for (ct_int h = 0; h < H; h++) {
            ct_int bh = b * H + h;
            FN(head_backward)(s.dqm + b * Tq * E + h * Dh, s.dkm + b * Tk * E + h * Dh, E,
                              s.dvm + b * Tk * E + h * Dh, E, s.dctx + b * Tq * E + h * Dh, E,
                              qh + bh * Tq * Dh, kh + bh * Tk * Dh, vh + bh * Tk * Dh,
                              probs + bh * Tq * Tk, &hs, opts, b, h, H, Tq, Tk, Dh, Dh);
        }
    /* The three input projections. */
    FN(linear_backward)(g->dquery, g->dwq, g->dbq, s.dqm, query, w->wq, B * Tq, E, E, 1);
    FN(linear_backward)(g->dkey, g->dwk, g->dbk, s.dkm, key, w->wk, B * Tk, Ek, E, 1);
    FN(linear_backward)(g->dvalue, g->dwv, g->dbv, s.dvm, value, w->wv, B * Tk, Ev, E, 1);
    FN(scratch_free)(&hs);
    FN(mha_scratch_free)(&s);
    return 0;
}

/* positional_encoding
 *   pe (max_len, d_model):  pe[pos, 2i] = sin(pos / 10000^(2i / d_model)),
 *                           pe[pos, 2i+1] = cos(same angle)
 *   computed in double, then rounded to `real`; an odd d_model ends with a sin column. */
void FN(positional_encoding)(real *pe, ct_int max_len, ct_int d_model)
{
    for (ct_int c = 0; c < d_model; c += 2) {
        double denom = pow(10000.0, (double)c / (double)d_model);
        for (ct_int pos = 0; pos < max_len; pos++) {
            double angle = (double)pos / denom;
            pe[pos * d_model + c] = (real)sin(angle);
            if (c + 1 < d_model) pe[pos * d_model + c + 1] = (real)cos(angle);
        }
    }
}

#endif
