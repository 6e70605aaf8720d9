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
 * Every product is a GEMM per (b, h) (attn_gemm, in attention_gemm.c); the
 * (Tq, Tk) intermediates of backward live in a per-call scratch of one or two
 * (Tq, Tk) matrices. */
#ifndef CT_TEMPLATE_PASS
#include "attention.h"
#include "fused.h"
#include "linear.h"
#include "softmax.h"
#define CT_TEMPLATE_FILE "attention.c"
#include "ct_template.h"
#else
#include "ct_math.h"

/* Row i of the mask of slice (b, h): element j at [j * stride[3]]. */
static const void *FN(mask_row)(const ct_attn_mask *m, ct_int b, ct_int h, ct_int i)
{
    ct_int offset = b * m->stride[0] + h * m->stride[1] + i * m->stride[2];
    if (m->kind == CT_MASK_BOOL) return (const unsigned char *)m->data + offset;
    return (const real *)m->data + offset;
}

/* Add the mask to one score row: hidden keys (causal j > i, bool False) -> -inf. */
CT_INLINE void FN(mask_scores_row)(real *row, const ct_attn_opts *o, ct_int b, ct_int h, ct_int i,
                                ct_int Tk)
{
    const ct_attn_mask *m = &o->mask;
    ct_int sj = m->stride[3];
    if (m->kind == CT_MASK_BOOL) {
        const unsigned char *keep = FN(mask_row)(m, b, h, i);
        if (sj == 1) /* a select, which vectorises (the branch below took 4 % of a forward) */
            for (ct_int j = 0; j < Tk; j++) row[j] = keep[j] ? row[j] : -INFINITY;
        else
            for (ct_int j = 0; j < Tk; j++)
                if (!keep[j * sj]) row[j] = -INFINITY;
    } else if (m->kind == CT_MASK_ADD) {
        const real *add = FN(mask_row)(m, b, h, i);
        for (ct_int j = 0; j < Tk; j++) row[j] += add[j * sj];
    }
    if (o->is_causal)
        for (ct_int j = i + 1; j < Tk; j++) row[j] = -INFINITY;
}

/* Multiply the weights of slice (b, h) by their dropout factors: weight
 * `flat` (see ct_attn_opts) is dropped (factor 0) unless
 * ct_random_kept(seed, flat, ct_random_threshold(p)), else scaled by
 * 1 / (1 - p):  out = in * factors (in == out: in place; out and in (Tq, Tk)).
 * The keep flags come in chunks from ct_random_keep_range.  also (Tq, Tk) or
 * NULL: multiplied by the same factors in place (the backward's P and dP
 * from one pass of the hash, where a pass each had cost twice the hashing).
 * Only the first `rows` (<= Tq) rows are made (the backward's live queries). */
CT_RANDOM_CLONES
static void FN(dropout_slice)(real *out, const real *in, real *also, const ct_attn_opts *o, ct_int bh, ct_int Tq,
                              ct_int Tk, ct_int rows)
{
    double p = o->dropout_p;
    ct_int count = rows * Tk; /* the first `rows` rows of the slice */
    if (p <= 0) {
        if (out != in) memcpy(out, in, (size_t)count * sizeof(real));
        return;
    }
    real keep = p >= 1 ? (real)0 : (real)(1.0 / (1.0 - p));
    uint64_t base = (uint64_t)bh * (uint64_t)(Tq * Tk);
    uint64_t threshold = ct_random_threshold(p);
    enum { CHUNK = 256 };
    uint8_t kept[CHUNK];
    for (ct_int n0 = 0; n0 < count; n0 += CHUNK) {
        ct_int len = CT_MIN((ct_int)CHUNK, count - n0);
        ct_random_keep_range(kept, len, o->seed, base + (uint64_t)n0, threshold);
        for (ct_int n = 0; n < len; n++) out[n0 + n] = in[n0 + n] * (kept[n] ? keep : (real)0);
        if (also != NULL)
            for (ct_int n = 0; n < len; n++) also[n0 + n] *= kept[n] ? keep : (real)0;
    }
}

/* Where the slices of one (b, h) live: row i of Q at q + i * ldq (Dh elements),
 * row j of K at k + j * ldk, row j of V at v + j * ldv (Dv elements). */
typedef struct {
    const real *q, *k, *v;
    ct_int ldq, ldk, ldv;
} FN(head_in);

/* Gradient slices of one (b, h), laid out as FN(head_in): accumulated into
 * (beta 1), or written (beta 0: a fresh buffer whose every element some
 * slice writes once, as mha_packed_backward's packed dq). */
typedef struct {
    real *dq, *dk, *dv;
    ct_int ldq, ldk, ldv;
    real beta;
} FN(head_grad);

/* head_probs: weights of slice (b, h) before dropout
 *   q (Tq, Dh), k (Tk, Dh) as in x -> P (Tq, Tk) = softmax(scale q k^T + mask)
 *   (softmax_rows of softmax.c, softmax_row's bits except that weights below FLT_MIN are 0
 *   (run_slices flushes subnormals); a row with every key masked is all 0) */
static CT_VECTOR_CLONES void FN(head_probs)(real *P, const FN(head_in) *x, const ct_attn_opts *o, ct_int b,
                           ct_int h, ct_int Tq, ct_int Tk, ct_int Dh)
{
    FN(attn_gemm)(CT_NOTRANS, CT_TRANS, Tq, Tk, Dh, (real)o->scale, x->q, x->ldq, x->k, x->ldk, 0, P, Tk);
    for (ct_int i = 0; i < Tq; i++) FN(mask_scores_row)(P + i * Tk, o, b, h, i, Tk);
    FN(softmax_rows)(P, Tq, Tk);
}

/* head_forward: one (b, h) slice
 *   q (Tq, Dh), k (Tk, Dh), v (Tk, Dv) as in x;  out (Tq, Dv), row stride ld_out, <- Pd v
 *   dropped NULL:  probs (Tq, Tk) <- Pd = dropout(softmax(...))
 *   dropped given: probs <- P = softmax(...) (before dropout), Pd built in dropped (Tq, Tk)
 *                  (so backward needs no recomputation of P) */
static void FN(head_forward)(real *out, ct_int ld_out, real *probs, real *dropped,
                             const FN(head_in) *x, const ct_attn_opts *o, ct_int b, ct_int h,
                             ct_int H, ct_int Tq, ct_int Tk, ct_int Dh, ct_int Dv)
{
    FN(head_probs)(probs, x, o, b, h, Tq, Tk, Dh);
    real *Pd = o->dropout_p > 0 && dropped != NULL ? dropped : probs;
    FN(dropout_slice)(Pd, probs, NULL, o, b * H + h, Tq, Tk, Tq);
    FN(attn_gemm)(CT_NOTRANS, CT_NOTRANS, Tq, Dv, Tk, 1, Pd, Tk, x->v, x->ldv, 0, out, ld_out);
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
        s->dP = s->P = NULL;
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
static CT_VECTOR_CLONES void FN(softmax_backward_rows)(real *dP, const real *P, ct_int Tq, ct_int Tk)
{
    for (ct_int i = 0; i < Tq; i++) {
        real *d = dP + i * Tk;
        const real *p = P + i * Tk;
        real dot = (real)VDOT(p, d, Tk);
        for (ct_int j = 0; j < Tk; j++) d[j] = p[j] * (d[j] - dot);
    }
}

/* live_queries: how many leading query rows of a slice take part in its backward.
 * Query rows whose dout is exactly zero (a padded position: a Transformer's
 * dead rows) add nothing to dV and dK and get dQ = 0, PROVIDED the operands
 * they would meet are finite (0 * inf = NaN must still come out): Q's and
 * probs' rows from n on, and all of K and V.  Returns n (< Tq) when the rows
 * n .. Tq-1 are all such rows, else Tq.  Only for slices whose products have
 * CT_LIVE_QUERIES_MIN_WORK multiply-adds or more: the scans cost about what a
 * quarter of the rows saves at the demo's T 12, Dh 16 (MHA forward + backward
 * 1.03 of the time without them, in one process), and pay at T 32, Dh 32
 * (0.991; the d128 training step 0.982). */
#ifndef CT_LIVE_QUERIES_MIN_WORK
#define CT_LIVE_QUERIES_MIN_WORK 16384
#endif
static CT_VECTOR_CLONES ct_int FN(live_queries)(const real *dout, ct_int ld_dout, const FN(head_in) *x,
                                               const real *probs, ct_int Tq, ct_int Tk, ct_int Dh,
                                               ct_int Dv)
{
    if (Tq * Tk * CT_MAX(Dh, Dv) < CT_LIVE_QUERIES_MIN_WORK) return Tq; /* see above */
    ct_int n = Tq;
    while (n > 0 && VALL_ZERO(dout + (n - 1) * ld_dout, Dv)) n--;
    int finite = n == Tq || (VALL_FINITE(probs + n * Tk, (Tq - n) * Tk) &&
                             VALL_FINITE_ROWS(x->q + n * x->ldq, x->ldq, Tq - n, Dh) &&
                             VALL_FINITE_ROWS(x->k, x->ldk, Tk, Dh) && VALL_FINITE_ROWS(x->v, x->ldv, Tk, Dv));
    return finite ? n : Tq;
}

/* head_backward: one (b, h) slice (accumulates into g, or writes it: beta 0)
 *   dout (Tq, Dv) row stride ld_dout; x as in head_forward; probs as head_forward saved
 *   them: after dropout (probs_raw = 0) or before (probs_raw = 1).
 *   Only the live_queries rows n of dout take part; dQ's rows from n on are 0. */
static void FN(head_backward)(const FN(head_grad) *g, const real *dout, ct_int ld_dout,
                              const FN(head_in) *x, const real *probs, int probs_raw,
                              FN(head_scratch) *s, const ct_attn_opts *o, ct_int b, ct_int h,
                              ct_int H, ct_int Tq, ct_int Tk, ct_int Dh, ct_int Dv)
{
    real scale = (real)o->scale;
    int drop = o->dropout_p > 0;
    const real *P = probs, *Pd = probs;
    ct_int n = FN(live_queries)(dout, ld_dout, x, probs, Tq, Tk, Dh, Dv);
    /* dPd = dO V^T */
    FN(attn_gemm)(CT_NOTRANS, CT_TRANS, n, Tk, Dv, 1, dout, ld_dout, x->v, x->ldv, 0, s->dP, Tk);
    if (drop && probs_raw) {
        /* Pd = P times the dropout factors (regenerated from the seed), and dP = dPd
         * through the same factors */
        FN(dropout_slice)(s->P, probs, s->dP, o, b * H + h, Tq, Tk, n);
        Pd = s->P;
    } else if (drop) {
        /* The dropped weights are gone from probs: recompute P; dP = dPd through the factors */
        FN(head_probs)(s->P, x, o, b, h, Tq, Tk, Dh);
        P = s->P;
        FN(dropout_slice)(s->dP, s->dP, NULL, o, b * H + h, Tq, Tk, n);
    }
    /* dV += Pd^T dO */
    FN(attn_gemm)(CT_TRANS, CT_NOTRANS, Tk, Dv, n, 1, Pd, Tk, dout, ld_dout, g->beta, g->dv, g->ldv);
    FN(softmax_backward_rows)(s->dP, P, n, Tk);
    /* dQ += scale dS K;  dK += scale dS^T Q */
    FN(attn_gemm)(CT_NOTRANS, CT_NOTRANS, n, Dh, Tk, scale, s->dP, Tk, x->k, x->ldk, g->beta, g->dq, g->ldq);
    if (g->beta == 0)
        for (ct_int i = n; i < Tq; i++) memset(g->dq + i * g->ldq, 0, (size_t)Dh * sizeof(real));
    FN(attn_gemm)(CT_TRANS, CT_NOTRANS, Tk, Dh, n, scale, s->dP, Tk, x->q, x->ldq, g->beta, g->dk, g->ldk);
}

/* The contiguous slices of (b, h) in (B, H, T, D) arrays. */
static FN(head_in) FN(contiguous_in)(const real *q, const real *k, const real *v, ct_int bh,
                                     ct_int Tq, ct_int Tk, ct_int Dh, ct_int Dv)
{
    FN(head_in) x = {q + bh * Tq * Dh, k + bh * Tk * Dh, v + bh * Tk * Dv, Dh, Dh, Dv};
    return x;
}

/* ---- the head loops, split over threads -----------------------------------
 * A (b, h) slice reads and writes only its own rows and columns, so the
 * B*H slices are rows of a ct_parallel_rows job, each block with its own
 * (Tq, Tk) scratch.  A slice is computed the same way whichever thread runs
 * it: the results do not depend on the thread count. */
typedef void (*FN(slice_fn))(const void *args, FN(head_scratch) *s, ct_int b, ct_int h);

typedef struct {
    FN(slice_fn) fn;
    const void *args;
    const ct_attn_opts *o;
    ct_int H, Tq, Tk;
    int with_scratch; /* 0: the slices use none (nothing to allocate, nothing can fail) */
    int failed;       /* a block's scratch could not be allocated */
} FN(slice_loop);

/* Slices bh0 .. bh1 - 1 (bh = b * H + h). */
static void FN(slice_block)(void *arg, ptrdiff_t bh0, ptrdiff_t bh1)
{
    FN(slice_loop) *L = arg;
    FN(head_scratch) s = {NULL, NULL};
    if (L->with_scratch && FN(scratch_alloc)(&s, L->o, L->Tq, L->Tk)) {
        __atomic_store_n(&L->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    ct_fp_mode mode = ct_flush_subnormals_begin(); /* see ct.h: weights below FLT_MIN are 0 */
    for (ct_int bh = bh0; bh < bh1; bh++) L->fn(L->args, &s, bh / L->H, bh % L->H);
    ct_flush_subnormals_end(mode);
    FN(scratch_free)(&s);
}

/* Runs fn on every (b, h) slice, on as many threads as the work is worth
 * (the slices' products and softmax); their GEMMs then run on their own
 * thread each (a pool job's ranks never start another).  The slices run
 * with subnormals flushed to zero (ct.h: ct_flush_subnormals_begin), on
 * every thread alike: a weight, score or gradient term below FLT_MIN
 * (DBL_MIN) counts as 0, so softmax's subnormal weights come out 0.
 * Returns 0, or -1 when a scratch could not be allocated. */
static int FN(run_slices)(FN(slice_fn) fn, const void *args, const ct_attn_opts *o, int with_scratch,
                          ct_int B, ct_int H, ct_int Tq, ct_int Tk, ct_int Dh, ct_int Dv)
{
    FN(slice_loop) L = {fn, args, o, H, Tq, Tk, with_scratch, 0};
    double flops = (double)B * H * Tq * Tk * (4.0 * (Dh + Dv) + 20.0);
    ct_parallel_rows(B * H, flops, FN(slice_block), &L);
    return L.failed ? -1 : 0;
}

/* What the slices of sdpa and mha read and write: contiguous (B, H, T, D)
 * heads in q, k, v (and their gradients), the context / its gradient with
 * row stride ld at column h * Dv of row block b (ld = Dv: (B, H, Tq, Dv)). */
typedef struct {
    const ct_attn_opts *o;
    ct_int H, Tq, Tk, Dh, Dv, ld;
    const real *q, *k, *v, *probs;
    real *out, *probs_out;            /* forward */
    real *dq, *dk, *dv;               /* backward, laid out as grad_merged says */
    const real *dout;
    int grad_merged;                  /* 1: dq/dk/dv in (B, T, H*Dh) rows; 0: (B, H, T, D) */
} FN(contiguous_args);

/* Row block of slice (b, h) in a context array of row stride ld: (B, H, Tq, Dv)
 * when ld = Dv, else merged (B, Tq, ld) rows (mha, ld = E; with one head,
 * E = Dv and both formulas agree). */
static ct_int FN(ctx_offset)(const FN(contiguous_args) *a, ct_int b, ct_int h)
{
    return a->ld == a->Dv ? (b * a->H + h) * a->Tq * a->Dv : b * a->Tq * a->ld + h * a->Dv;
}

static void FN(contiguous_forward_slice)(const void *args, FN(head_scratch) *s, ct_int b, ct_int h)
{
    const FN(contiguous_args) *a = args;
    ct_int bh = b * a->H + h;
    (void)s;
    FN(head_in) x = FN(contiguous_in)(a->q, a->k, a->v, bh, a->Tq, a->Tk, a->Dh, a->Dv);
    FN(head_forward)(a->out + FN(ctx_offset)(a, b, h), a->ld, a->probs_out + bh * a->Tq * a->Tk, NULL, &x,
                     a->o, b, h, a->H, a->Tq, a->Tk, a->Dh, a->Dv);
}

static void FN(contiguous_backward_slice)(const void *args, FN(head_scratch) *s, ct_int b, ct_int h)
{
    const FN(contiguous_args) *a = args;
    ct_int bh = b * a->H + h, Tq = a->Tq, Tk = a->Tk, Dh = a->Dh, Dv = a->Dv;
    FN(head_in) x = FN(contiguous_in)(a->q, a->k, a->v, bh, Tq, Tk, Dh, Dv);
    FN(head_grad) g;
    if (a->grad_merged) { /* mha: (B, T, E) rows, E = H * Dh */
        ct_int E = a->H * Dh;
        g = (FN(head_grad)){a->dq + b * Tq * E + h * Dh, a->dk + b * Tk * E + h * Dh,
                            a->dv + b * Tk * E + h * Dh, E, E, E, 1};
    } else {
        g = (FN(head_grad)){a->dq + bh * Tq * Dh, a->dk + bh * Tk * Dh, a->dv + bh * Tk * Dv, Dh, Dh, Dv, 1};
    }
    FN(head_backward)(&g, a->dout + FN(ctx_offset)(a, b, h), a->ld, &x, a->probs + bh * Tq * Tk, 0, s,
                      a->o, b, h, a->H, Tq, Tk, Dh, Dv);
}

/* sdpa_forward
 *   q (B, H, Tq, Dh), k (B, H, Tk, Dh), v (B, H, Tk, Dv)
 *   out (B, H, Tq, Dv), probs (B, H, Tq, Tk) = the weights after dropout */
void FN(sdpa_forward)(real *out, real *probs, const real *q, const real *k, const real *v,
                      const ct_attn_opts *opts, ct_int B, ct_int H, ct_int Tq, ct_int Tk,
                      ct_int Dh, ct_int Dv)
{
    FN(contiguous_args) a = {.o = opts, .H = H, .Tq = Tq, .Tk = Tk, .Dh = Dh, .Dv = Dv, .ld = Dv,
                             .q = q, .k = k, .v = v, .out = out, .probs_out = probs};
    FN(run_slices)(FN(contiguous_forward_slice), &a, opts, 0, B, H, Tq, Tk, Dh, Dv);
}

/* sdpa_backward (accumulates into dq, dk, dv; shapes as q, k, v)
 *   dout (B, H, Tq, Dv), probs from sdpa_forward with the same opts.
 *   Returns 0, or -1 when the (Tq, Tk) scratch cannot be allocated. */
int FN(sdpa_backward)(real *dq, real *dk, real *dv, const real *dout, const real *q,
                      const real *k, const real *v, const real *probs, const ct_attn_opts *opts,
                      ct_int B, ct_int H, ct_int Tq, ct_int Tk, ct_int Dh, ct_int Dv)
{
    if (B * H * Tq * Tk == 0) return 0; /* no weights: every gradient is 0 */
    FN(contiguous_args) a = {.o = opts, .H = H, .Tq = Tq, .Tk = Tk, .Dh = Dh, .Dv = Dv, .ld = Dv,
                             .q = q, .k = k, .v = v, .probs = probs, .dq = dq, .dk = dk, .dv = dv,
                             .dout = dout};
    return FN(run_slices)(FN(contiguous_backward_slice), &a, opts, 1, B, H, Tq, Tk, Dh, Dv);
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
    FN(contiguous_args) a = {.o = opts, .H = H, .Tq = Tq, .Tk = Tk, .Dh = Dh, .Dv = Dh, .ld = E,
                             .q = qh, .k = kh, .v = vh, .out = ctx, .probs_out = probs};
    FN(run_slices)(FN(contiguous_forward_slice), &a, opts, 0, B, H, Tq, Tk, Dh, Dh);
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
    if (FN(mha_scratch_alloc)(&s, B, Tq, Tk, E)) return -1;
    /* out = ctx wo^T + bo:  dctx = dout wo, dwo += dout^T ctx, dbo += colsum(dout) */
    FN(linear_backward)(s.dctx, NULL, NULL, dout, ctx, w->wo, B * Tq, E, E, 0);
    FN(linear_backward)(NULL, g->dwo, g->dbo, dout, ctx, w->wo, B * Tq, E, E, 1);
    /* Heads: read dctx and write dq, dk, dv straight in the merged layout (row stride E). */
    FN(contiguous_args) a = {.o = opts, .H = H, .Tq = Tq, .Tk = Tk, .Dh = Dh, .Dv = Dh, .ld = E,
                             .q = qh, .k = kh, .v = vh, .probs = probs, .dq = s.dqm, .dk = s.dkm,
                             .dv = s.dvm, .dout = s.dctx, .grad_merged = 1};
    if (B * H * Tq * Tk > 0 && FN(run_slices)(FN(contiguous_backward_slice), &a, opts, 1, B, H, Tq, Tk, Dh, Dh)) {
        FN(mha_scratch_free)(&s);
        return -1;
    }
    /* The three input projections. */
    FN(linear_backward)(g->dquery, g->dwq, g->dbq, s.dqm, query, w->wq, B * Tq, E, E, 1);
    FN(linear_backward)(g->dkey, g->dwk, g->dbk, s.dkm, key, w->wk, B * Tk, Ek, E, 1);
    FN(linear_backward)(g->dvalue, g->dwv, g->dbv, s.dvm, value, w->wv, B * Tk, Ev, E, 1);
    FN(mha_scratch_free)(&s);
    return 0;
}

/* ---- packed multi-head attention (the nn layers' path) -------------------
 * torch's packed in_proj_weight [wq; wk; wv] (3E, E): self-attention projects
 * its input once into qkv (rows, 3E) (one GEMM); cross-attention projects the
 * query into q (rows, E) and the memory into kv (rows, 2E).  The heads are
 * read and written in place through leading dimensions (no split/merge
 * copies), in either token layout: token (b, t) is row b*T + t of a batch-first
 * (B, T, E) array, row t*B + b of a sequence-first (T, B, E) one. */

/* First row of batch b and the row step between its consecutive tokens. */
static ct_int FN(row0)(const ct_mha_shape *s, ct_int b, ct_int T)
{
    return s->seq_first ? b : b * T;
}

static ct_int FN(row_step)(const ct_mha_shape *s)
{
    return s->seq_first ? s->B : 1;
}

/* Views of the projections: q, k, v base pointers and row strides. */
typedef struct {
    const real *q, *k, *v;
    ct_int ldq, ldkv;
} FN(packed_views);

static FN(packed_views) FN(packed_views_of)(const real *proj_q, const real *proj_kv,
                                            const ct_mha_shape *s)
{
    ct_int E = s->E;
    FN(packed_views) p;
    if (s->self_attn) {
        p.q = proj_q, p.k = proj_q + E, p.v = proj_q + 2 * E, p.ldq = p.ldkv = 3 * E;
    } else {
        p.q = proj_q, p.k = proj_kv, p.v = proj_kv + E, p.ldq = E, p.ldkv = 2 * E;
    }
    return p;
}

/* The (b, h) slices inside the packed projections. */
static FN(head_in) FN(packed_in)(const FN(packed_views) *p, const ct_mha_shape *s, ct_int b,
                                 ct_int h)
{
    ct_int Dh = s->E / s->H, step = FN(row_step)(s);
    ct_int rq = FN(row0)(s, b, s->Tq), rk = FN(row0)(s, b, s->Tk);
    FN(head_in) x = {p->q + rq * p->ldq + h * Dh, p->k + rk * p->ldkv + h * Dh,
                     p->v + rk * p->ldkv + h * Dh, step * p->ldq, step * p->ldkv, step * p->ldkv};
    return x;
}

/* What the slices of the packed path read and write. */
typedef struct {
    const ct_attn_opts *o;
    const ct_mha_shape *shape;
    FN(packed_views) p, dp; /* the projections and (backward) their gradients */
    real *ctx;              /* forward: the merged heads */
    const real *dctx;       /* backward: their gradient */
    real *probs_out;        /* forward */
    const real *probs;      /* backward */
} FN(packed_args);

static void FN(packed_forward_slice)(const void *args, FN(head_scratch) *s, ct_int b, ct_int h)
{
    const FN(packed_args) *a = args;
    const ct_mha_shape *sh = a->shape;
    ct_int E = sh->E, H = sh->H, Dh = E / H, Tq = sh->Tq, Tk = sh->Tk;
    FN(head_in) x = FN(packed_in)(&a->p, sh, b, h);
    real *c = a->ctx + FN(row0)(sh, b, Tq) * E + h * Dh;
    /* s->P (allocated with dropout only) holds the dropped weights; probs keeps P */
    FN(head_forward)(c, FN(row_step)(sh) * E, a->probs_out + (b * H + h) * Tq * Tk, s->P, &x, a->o, b, h,
                     H, Tq, Tk, Dh, Dh);
}

static void FN(packed_backward_slice)(const void *args, FN(head_scratch) *s, ct_int b, ct_int h)
{
    const FN(packed_args) *a = args;
    const ct_mha_shape *sh = a->shape;
    ct_int E = sh->E, H = sh->H, Dh = E / H, Tq = sh->Tq, Tk = sh->Tk;
    FN(head_in) x = FN(packed_in)(&a->p, sh, b, h), dx = FN(packed_in)(&a->dp, sh, b, h);
    FN(head_grad) g = {(real *)dx.q, (real *)dx.k, (real *)dx.v, dx.ldq, dx.ldk, dx.ldv, 0};
    const real *dc = a->dctx + FN(row0)(sh, b, Tq) * E + h * Dh;
    FN(head_backward)(&g, dc, FN(row_step)(sh) * E, &x, a->probs + (b * H + h) * Tq * Tk, 1, s, a->o, b,
                      h, H, Tq, Tk, Dh, Dh);
}

/* mha_packed_forward
 *   xq (B*Tq token rows, E); xkv (B*Tk rows, E), unused for self-attention
 *   w_in (3E, E), b_in (3E) or NULL; wo (E, E), bo (E) or NULL
 *   out (B*Tq rows, E) = ctx wo^T + bo, rows in the layout of xq
 *   saved: proj_q (rows, 3E) for self-attention [q | k | v], else (rows, E);
 *   proj_kv (B*Tk rows, 2E) [k | v] for cross-attention (unused for self);
 *   probs (B, H, Tq, Tk) the weights BEFORE dropout (backward regenerates the dropout
 *   factors from the seed instead of recomputing P); ctx (B*Tq rows, E) the merged heads.
 *   Returns 0, or -1 when the (Tq, Tk) dropout scratch cannot be allocated. */
int FN(mha_packed_forward)(real *out, real *proj_q, real *proj_kv, real *probs, real *ctx,
                            const real *xq, const real *xkv, const real *w_in, const real *b_in,
                            const real *wo, const real *bo, const ct_attn_opts *o,
                            const ct_mha_shape *s)
{
    ct_int B = s->B, Tq = s->Tq, Tk = s->Tk, E = s->E, H = s->H, Dh = E / H;
    if (s->self_attn) {
        FN(linear_forward)(proj_q, xq, w_in, b_in, B * Tq, E, 3 * E);
    } else {
        FN(linear_forward)(proj_q, xq, w_in, b_in, B * Tq, E, E);
        FN(linear_forward)(proj_kv, xkv, w_in + E * E, b_in ? b_in + E : NULL, B * Tk, E, 2 * E);
    }
    FN(packed_args) a = {.o = o, .shape = s, .p = FN(packed_views_of)(proj_q, proj_kv, s), .ctx = ctx,
                         .probs_out = probs};
    if (FN(run_slices)(FN(packed_forward_slice), &a, o, 1, B, H, Tq, Tk, Dh, Dh)) return -1;
    FN(linear_forward)(out, ctx, wo, bo, B * Tq, E, E);
    return 0;
}

/* mha_packed_backward (NULL gradients are skipped)
 *   dout (B*Tq rows, E); everything else as saved by mha_packed_forward with the same opts
 *   dxq (rows, E), dxkv (B*Tk rows, E) (cross-attention only), dw_in (3E, E),
 *   db_in (3E), dwo (E, E), dbo (E): accumulate 1 adds into them, 0 writes them (fresh,
 *   uninitialised buffers: the binding's, which then need no zeroing pass).
 *   The projections' backward skips token rows whose gradient is all zero (padding:
 *   see rows_linear_backward in fused.c).
 *   Returns 0, or -1 when the scratch cannot be allocated. */
int FN(mha_packed_backward)(real *dxq, real *dxkv, real *dw_in, real *db_in, real *dwo, real *dbo,
                            const real *dout, const real *xq, const real *xkv, const real *w_in,
                            const real *wo, const real *proj_q, const real *proj_kv,
                            const real *probs, const real *ctx, const ct_attn_opts *o,
                            const ct_mha_shape *s, int accumulate)
{
    ct_int B = s->B, Tq = s->Tq, Tk = s->Tk, E = s->E, H = s->H, Dh = E / H;
    ct_int Nq = B * Tq, Nk = B * Tk, wq_cols = s->self_attn ? 3 * E : E;
    /* dq and dkv: every element is written once by the slices (beta 0; calloc only when there
     * are none), so a fresh buffer is not zeroed first (a serial memset over (B*T, 3E)) */
    int no_slices = Tq * Tk == 0;
    /* dctx: written by the out-projection's backward, or added to (zeroed first) when
     * its weight gradients are accumulated into (one flag for both) */
    real *dctx = accumulate ? calloc((size_t)CT_MAX(Nq * E, 1), sizeof(real))
                            : malloc((size_t)CT_MAX(Nq * E, 1) * sizeof(real));
    real *dq = no_slices ? calloc((size_t)CT_MAX(Nq * wq_cols, 1), sizeof(real))
                         : malloc((size_t)CT_MAX(Nq * wq_cols, 1) * sizeof(real));
    real *dkv = s->self_attn ? NULL
                : no_slices ? calloc((size_t)CT_MAX(Nk * 2 * E, 1), sizeof(real))
                            : malloc((size_t)CT_MAX(Nk * 2 * E, 1) * sizeof(real));
    int status = -1;
    if (!dctx || !dq || (!s->self_attn && !dkv)) goto done;
    /* out = ctx wo^T + bo:  dctx = dout wo, dwo += dout^T ctx, dbo += colsum(dout) */
    if (FN(rows_linear_backward)(dctx, dwo, dbo, dout, ctx, wo, Nq, E, E, accumulate)) goto done;
    /* Heads: gradients of q, k, v land in the packed layout of the projections. */
    FN(packed_args) a = {.o = o, .shape = s, .p = FN(packed_views_of)(proj_q, proj_kv, s),
                         .dp = FN(packed_views_of)(dq, dkv, s), .dctx = dctx, .probs = probs};
    if (Tq * Tk > 0 && FN(run_slices)(FN(packed_backward_slice), &a, o, 1, B, H, Tq, Tk, Dh, Dh)) goto done;
    /* The input projections: one GEMM per operand for all of q, k, v (cross-attention:
     * the q rows of dw_in, db_in, then the k, v rows, each written or added to once). */
    if (FN(rows_linear_backward)(dxq, dw_in, db_in, dq, xq, w_in, Nq, E, wq_cols, accumulate)) goto done;
    if (!s->self_attn &&
        FN(rows_linear_backward)(dxkv, dw_in ? dw_in + E * E : NULL, db_in ? db_in + E : NULL,
                                 dkv, xkv, w_in + E * E, Nk, E, 2 * E, accumulate))
        goto done;
    status = 0;
done:
    free(dctx), free(dq), free(dkv);
    return status;
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
