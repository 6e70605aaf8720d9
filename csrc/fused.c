/* fused.c - the element-wise pieces of a Transformer block fused into one pass:
 *   bias_act:       out = act(inp + bias)            (feed-forward: Linear without bias, then this)
 *   bias_act_dropout: out = dropout(act(inp + bias))  (the same while training; dropout.c's mask)
 *   (add_layernorm, LayerNorm(inp + residual), is declared in fused.h and lives
 *   in layernorm.c beside layernorm: one home for the layer-norm maths)
 * Backward recomputes inp + bias instead of storing it.
 *
 * And the backward passes that skip token rows whose gradient is exactly zero
 * (padding positions: the loss ignores them and masked attention never reads
 * them, so whole rows of the gradient are 0 through every layer):
 *   rows_linear_backward:  linear_backward over the live rows only
 *   ff_backward:           the whole feed-forward block over the live rows only
 * A row is skipped only when its gradient is all zeros and its saved inputs
 * are finite, so the result equals the dense computation (0 * NaN is NaN). */
#ifndef CT_TEMPLATE_PASS
#include "dropout.h"
#include "fused.h"
#include "linear.h"
#define CT_TEMPLATE_FILE "fused.c"
#include "ct_template.h"
#else
#include "ct_math.h"

/* act(z): relu(z) = max(z, 0) (NaN stays NaN); gelu and gelu_tanh are
 * ct_math.h's VGELU / VGELU_TANH, the functions nn.GELU's kernel
 * (activation.c) runs, so the two agree bit for bit. */
CT_INLINE real FN(relu_value)(real z) { return VSELECT(z < 0, (real)0, z); }

/* out (N) = f(inp + bias) over one row, one loop per case so that each vectorises. */
#define CT_BIAS_ACT_LOOP(f)                                                                 \
    do {                                                                                    \
        if (bias != NULL)                                                                   \
            for (ct_int n = 0; n < N; n++) out[n] = f(inp[n] + bias[n]);                    \
        else                                                                                \
            for (ct_int n = 0; n < N; n++) out[n] = f(inp[n]);                              \
    } while (0)

/* out (N) = act(inp + bias) over one row. */
static CT_VECTOR_CLONES void FN(bias_act_row)(real *restrict out, const real *restrict inp,
                                              const real *restrict bias, int act, ct_int N)
{
    if (act == CT_ACT_RELU) CT_BIAS_ACT_LOOP(FN(relu_value));
    else if (act == CT_ACT_GELU) CT_BIAS_ACT_LOOP(VGELU);
    else CT_BIAS_ACT_LOOP(VGELU_TANH);
}
#undef CT_BIAS_ACT_LOOP

typedef struct {
    real *out;
    const real *inp, *bias;
    int act;
    ct_int N;
} FN(bias_act_args);

static void FN(bias_act_rows)(void *ctx, ptrdiff_t m0, ptrdiff_t m1)
{
    const FN(bias_act_args) *a = ctx;
    for (ct_int m = m0; m < m1; m++)
        FN(bias_act_row)(a->out + m * a->N, a->inp + m * a->N, a->bias, a->act, a->N);
}

/* bias_act_forward
 *   inp (M, N), bias (N) or NULL  ->  out (M, N) = act(inp + bias)
 *   (blocks of rows may run on the pool's threads: each row is one thread's) */
void FN(bias_act_forward)(real *out, const real *inp, const real *bias, int act, ct_int M,
                          ct_int N)
{
    FN(bias_act_args) a = {out, inp, bias, act, N};
    ct_parallel_rows(M, (act == CT_ACT_RELU ? 2.0 : 20.0) * M * N, FN(bias_act_rows), &a);
}

typedef struct {
    real *out;
    uint8_t *keep;
    const real *inp, *bias;
    int act;
    ct_int N;
    double p;
    uint64_t seed;
} FN(bias_act_dropout_args);

#define CT_FUSED_CHUNK 256 /* elements of a row made at a time, in a stack buffer */

/* Rows [m0, m1) of bias_act_dropout_forward: each chunk of a row through
 * bias_act_row into a buffer that stays in L1, then dropout_range from it. */
static void FN(bias_act_dropout_rows)(void *ctx, ptrdiff_t m0, ptrdiff_t m1)
{
    const FN(bias_act_dropout_args) *a = ctx;
    real act_values[CT_FUSED_CHUNK];
    for (ct_int m = m0; m < m1; m++)
        for (ct_int c = 0; c < a->N; c += CT_FUSED_CHUNK) {
            ct_int len = CT_MIN((ct_int)CT_FUSED_CHUNK, a->N - c), at = m * a->N + c;
            FN(bias_act_row)(act_values, a->inp + at, a->bias != NULL ? a->bias + c : NULL, a->act, len);
            FN(dropout_range)(a->out + at, a->keep + at, act_values, len, a->p, a->seed, (uint64_t)at);
        }
}

/* bias_act_dropout_forward
 *   inp (M, N), bias (N) or NULL, 0 <= p <= 1
 *   out (M, N) = dropout(act(inp + bias)), keep (M, N) its mask: dropout_forward's
 *   of the flat index from offset 0, for seed (dropout.c)
 * bias_act_forward then dropout_forward, with the same bits, in one pass over
 * memory: the (M, N) activation is never written whole and read back. */
void FN(bias_act_dropout_forward)(real *out, uint8_t *keep, const real *inp, const real *bias, int act,
                                  ct_int M, ct_int N, double p, uint64_t seed)
{
    FN(bias_act_dropout_args) a = {out, keep, inp, bias, act, N, p, seed};
    ct_parallel_rows(M, ((act == CT_ACT_RELU ? 2.0 : 20.0) + 8.0) * M * N, FN(bias_act_dropout_rows), &a);
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
    } else if (dbias != NULL) {
        for (ct_int n = 0; n < N; n++) {
            real dz = inp[n] <= 0 ? (real)0 : dout[n];
            dinp[n] += dz;
            dbias[n] += dz;
        }
    } else {
        for (ct_int n = 0; n < N; n++) dinp[n] += inp[n] <= 0 ? (real)0 : dout[n];
    }
}

/* d (N) = dout * slope(inp + bias) over one row (dout NULL: d *= slope(...),
 * in place), one loop per case so that each vectorises (a test of act or
 * bias inside the loop kept GCC from it; so would a d that may be dout). */
#define CT_SLOPE_LOOP(slope)                                                                \
    do {                                                                                    \
        if (dout == NULL && bias != NULL)                                                   \
            for (ct_int n = 0; n < N; n++) d[n] *= slope(inp[n] + bias[n]);                 \
        else if (dout == NULL)                                                              \
            for (ct_int n = 0; n < N; n++) d[n] *= slope(inp[n]);                           \
        else if (bias != NULL)                                                              \
            for (ct_int n = 0; n < N; n++) d[n] = dout[n] * slope(inp[n] + bias[n]);        \
        else                                                                                \
            for (ct_int n = 0; n < N; n++) d[n] = dout[n] * slope(inp[n]);                  \
    } while (0)
CT_INLINE void FN(gelu_slopes_row)(real *restrict d, const real *restrict dout, const real *restrict inp,
                                   const real *restrict bias, int act, ct_int N)
{
    if (act == CT_ACT_GELU) CT_SLOPE_LOOP(VGELU_SLOPE);
    else CT_SLOPE_LOOP(VGELU_TANH_SLOPE);
}
#undef CT_SLOPE_LOOP

#define CT_GELU_CHUNK 256 /* elements of dz on the stack at a time */

/* One row of the gelu backward: dz = dout act'(inp + bias); dinp += dz; dbias += dz. */
static CT_VECTOR_CLONES void FN(act_backward_row)(real *restrict dinp, real *restrict dbias,
                                                  const real *restrict dout,
                                                  const real *restrict inp,
                                                  const real *restrict bias, int act, ct_int N)
{
    real dz[CT_GELU_CHUNK];
    for (ct_int n0 = 0; n0 < N; n0 += CT_GELU_CHUNK) {
        ct_int len = CT_MIN((ct_int)CT_GELU_CHUNK, N - n0);
        FN(gelu_slopes_row)(dz, dout + n0, inp + n0, bias ? bias + n0 : NULL, act, len);
        VADD_INTO(dinp + n0, dz, len);
        if (dbias != NULL) VADD_INTO(dbias + n0, dz, len);
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

/* ---- row-sparse backward ------------------------------------------------- */

/* Is row (N) all zeros?  (NaN != 0, so a NaN row is live.)  ct_all_zero's
 * blocks exit at the first one that is not zero: a live row is usually decided
 * by its first block (the whole row was read, which made the scans ~2 % of a
 * d128 training step). */
static CT_VECTOR_CLONES int FN(row_is_zero)(const real *restrict row, ct_int N)
{
    return VALL_ZERO(row, N);
}

/* Is row (N) free of inf and NaN? */
static CT_VECTOR_CLONES int FN(row_is_finite)(const real *restrict row, ct_int N)
{
    return VALL_FINITE(row, N);
}

typedef struct {
    ct_int *idx; /* idx[m] <- 1 when row m is live (then compacted in place) */
    const real *dout, *a, *b;
    ct_int N, Na, Nb;
} FN(live_args);

/* Rows [m0, m1): idx[m] = whether row m is live (a block of ct_parallel_rows). */
static void FN(live_flags)(void *ctx, ptrdiff_t m0, ptrdiff_t m1)
{
    const FN(live_args) *x = ctx;
    for (ct_int m = m0; m < m1; m++) {
        int dead = FN(row_is_zero)(x->dout + m * x->N, x->N) &&
                   (x->a == NULL || FN(row_is_finite)(x->a + m * x->Na, x->Na)) &&
                   (x->b == NULL || FN(row_is_finite)(x->b + m * x->Nb, x->Nb));
        x->idx[m] = !dead;
    }
}

/* live_rows: idx <- the rows m of dout (M, N) to compute, in order; returns their count.
 * Row m is dead (skipped) when dout[m] is all zeros and the rows m of the saved
 * operands a (M, Na) and b (M, Nb) (either may be NULL) are finite.  The rows are
 * tested on the pool (a pass over dout that ran alone on the caller), then compacted. */
static ct_int FN(live_rows)(ct_int *idx, const real *dout, ct_int M, ct_int N, const real *a,
                            ct_int Na, const real *b, ct_int Nb)
{
    FN(live_args) x = {idx, dout, a, b, N, Na, Nb};
    /* a row of dout is read whole; a and b only where it is zero (estimated as always) */
    double reads = (double)N + (a != NULL ? (double)Na : 0) + (b != NULL ? (double)Nb : 0);
    ct_parallel_rows(M, 2.0 * (double)M * reads, FN(live_flags), &x);
    ct_int count = 0;
    for (ct_int m = 0; m < M; m++)
        if (idx[m]) idx[count++] = m; /* count <= m: overwrites only flags already read */
    return count;
}

/* Worth compacting: at least 1/16 of the rows are dead. */
static int FN(sparse_enough)(ct_int live, ct_int M)
{
    return M - live >= CT_MAX(M / 16, 1);
}

typedef struct {
    const real *a;
    ct_int n;
    int bad; /* set (atomically) by a block that meets inf or NaN */
} FN(finite_args);

#define CT_FINITE_BLOCK 4096 /* elements per block of all_finite */

static void FN(finite_blocks)(void *ctx, ptrdiff_t b0, ptrdiff_t b1)
{
    FN(finite_args) *x = ctx;
    ct_int begin = (ct_int)b0 * CT_FINITE_BLOCK, end = CT_MIN((ct_int)b1 * CT_FINITE_BLOCK, x->n);
    if (!FN(row_is_finite)(x->a + begin, end - begin)) __atomic_store_n(&x->bad, 1, __ATOMIC_RELAXED);
}

/* Is the array a (n) (NULL: empty) free of inf and NaN?  A dead row meets the
 * weights in the dense products (0 * NaN = NaN), so rows are only skipped when
 * the weights are finite.  In blocks on the pool: the feed-forward weights'
 * scan ran on the caller alone (1 % of a d512 training step at 2 threads). */
static int FN(all_finite)(const real *a, ct_int n)
{
    if (a == NULL) return 1;
    FN(finite_args) x = {a, n, 0};
    ct_parallel_rows((n + CT_FINITE_BLOCK - 1) / CT_FINITE_BLOCK, 2.0 * (double)n, FN(finite_blocks), &x);
    return !x.bad;
}

/* What the row copies below read and write (rows r of the compacted block
 * are rows idx[r] of the whole). */
typedef struct {
    real *dst;
    const real *src;
    const ct_int *idx;
    ct_int N;
} FN(row_copy_args);

static void FN(gather_block)(void *ctx, ptrdiff_t r0, ptrdiff_t r1)
{
    const FN(row_copy_args) *a = ctx;
    for (ptrdiff_t r = r0; r < r1; r++)
        memcpy(a->dst + r * a->N, a->src + a->idx[r] * a->N, (size_t)a->N * sizeof(real));
}

/* dst (n, N) <- rows idx of src (M, N); blocks of rows on the pool (the
 * caller's serial copies were 4 % of a d512 training step at 2 threads,
 * while the worker idled). */
static void FN(gather_rows)(real *dst, const real *src, const ct_int *idx, ct_int n, ct_int N)
{
    FN(row_copy_args) a = {dst, src, idx, N};
    ct_parallel_rows(n, 2.0 * (double)n * (double)N, FN(gather_block), &a);
}

static CT_VECTOR_CLONES void FN(scatter_add_block)(void *ctx, ptrdiff_t r0, ptrdiff_t r1)
{
    const FN(row_copy_args) *a = ctx;
    ct_int N = a->N;
    for (ptrdiff_t r = r0; r < r1; r++) {
        real *restrict d = a->dst + a->idx[r] * N;
        const real *restrict s = a->src + r * N;
        for (ct_int k = 0; k < N; k++) d[k] += s[k];
    }
}

/* rows idx of dst (M, N) += src (n, N); idx has no repeats, so blocks of
 * rows may run on the pool's threads. */
static void FN(scatter_add_rows)(real *dst, const real *src, const ct_int *idx, ct_int n, ct_int N)
{
    FN(row_copy_args) a = {dst, src, idx, N};
    ct_parallel_rows(n, 2.0 * (double)n * (double)N, FN(scatter_add_block), &a);
}

/* a (M, N) holds rows 0 .. n-1 of a compacted block whose row r belongs at
 * row idx[r] (idx increasing, so idx[r] >= r): each moves there, from the
 * last down (a row never lands on one still to move), and every other row
 * is zeroed: the dead rows' gradient.  In place, instead of zeroing the whole
 * of a and adding a compacted copy into it (a pass less over a, no copy). */
static void FN(spread_rows)(real *a, const ct_int *idx, ct_int n, ct_int M, ct_int N)
{
    ct_int end = M; /* rows [dest + 1, end) are dead */
    for (ct_int r = n - 1; r >= 0; r--) {
        ct_int dest = idx[r];
        memset(a + (dest + 1) * N, 0, (size_t)((end - dest - 1) * N) * sizeof(real));
        if (dest != r) memcpy(a + dest * N, a + r * N, (size_t)N * sizeof(real));
        end = dest;
    }
    memset(a, 0, (size_t)(end * N) * sizeof(real));
}

/* The input gradient of n live rows: dinp (M, K) (+)= rows idx of dc (n, N) weight (N, K).
 * Accumulating: computed in dxc (n, K), then added to rows idx; written: computed in
 * dinp's first n rows, then spread (dxc unused, may be NULL).  rows_linear_backward and
 * ff_backward's dx. */
static void FN(live_rows_dinp)(real *dinp, real *dxc, const real *dc, const real *weight, const ct_int *idx,
                               ct_int n, ct_int M, ct_int K, ct_int N, int accumulate)
{
    if (accumulate) {
        FN(linear_backward)(dxc, NULL, NULL, dc, NULL, weight, n, K, N, 0);
        FN(scatter_add_rows)(dinp, dxc, idx, n, K);
    } else {
        FN(linear_backward)(dinp, NULL, NULL, dc, NULL, weight, n, K, N, 0);
        FN(spread_rows)(dinp, idx, n, M, K);
    }
}

/* The live rows before the first dead one: idx[r] == r for r < the count.
 * With sequence-first batches padded at the end (torch's batch_first=False:
 * row t B + b), every row of a position below the shortest length is live,
 * so they open the matrix: d128's step (lengths 16-32 of 32) has half its
 * rows there. */
static ct_int FN(live_prefix)(const ct_int *idx, ct_int n)
{
    ct_int r = 0;
    while (r < n && idx[r] == r) r++;
    return r;
}

/* Live rows in place before the gathered ones: at least this many (fewer
 * are gathered with the rest, in one product). */
#define CT_LIVE_PREFIX_MIN 64

/* rows_linear_backward (linear_backward's contract, accumulate included)
 *   dout (M, N), inp (M, K), weight (N, K)
 *   dinp (M, K) (+)= dout weight;  dweight (N, K) (+)= dout^T inp;  dbias (N) (+)= colsum(dout)
 *   (each skipped when NULL; += when accumulate, else written), computed over the
 *   live rows of dout only: nn.Linear's backward (a generator's rows at padded
 *   targets) and the attention projections' (attention.c).
 *   The live rows that open the matrix (live_prefix) are used in place; the
 *   others are gathered into a compact block (the copies were 2-3 % of the
 *   d128 training step at 1 thread, perf), and the products run on each part.
 *   Returns 0, or -1 when the scratch cannot be allocated. */
int FN(rows_linear_backward)(real *dinp, real *dweight, real *dbias, const real *dout,
                             const real *inp, const real *weight, ct_int M, ct_int K, ct_int N,
                             int accumulate)
{
    ct_int *idx = malloc((size_t)CT_MAX(M, 1) * sizeof(ct_int));
    if (idx == NULL) return -1;
    ct_int n = FN(live_rows)(idx, dout, M, N, inp, K, NULL, 0);
    if (!FN(sparse_enough)(n, M) || !FN(all_finite)(weight, N * K)) {
        free(idx);
        FN(linear_backward)(dinp, dweight, dbias, dout, inp, weight, M, K, N, accumulate);
        return 0;
    }
    ct_int head = FN(live_prefix)(idx, n);
    if (head < CT_LIVE_PREFIX_MIN) head = 0;
    ct_int tail = n - head; /* live rows after the head, gathered */
    real *dc = malloc((size_t)CT_MAX(tail * N, 1) * sizeof(real));
    real *xc = malloc((size_t)CT_MAX(tail * K, 1) * sizeof(real));
    /* accumulating: the live rows' gradient in its own buffer, then added in place */
    real *dxc = dinp && accumulate ? malloc((size_t)CT_MAX(tail * K, 1) * sizeof(real)) : NULL;
    if (!dc || !xc || (dinp && accumulate && !dxc)) {
        free(idx), free(dc), free(xc), free(dxc);
        return -1;
    }
    FN(gather_rows)(dc, dout, idx + head, tail, N);
    FN(gather_rows)(xc, inp, idx + head, tail, K);
    if (head > 0) { /* the head in place; the tail is added to it (no tail: nothing to add) */
        FN(linear_backward)(NULL, dweight, dbias, dout, inp, weight, head, K, N, accumulate);
        if (tail > 0) FN(linear_backward)(NULL, dweight, dbias, dc, xc, weight, tail, K, N, 1);
    } else {
        FN(linear_backward)(NULL, dweight, dbias, dc, xc, weight, tail, K, N, accumulate);
    }
    if (dinp) {
        if (head > 0) FN(linear_backward)(dinp, NULL, NULL, dout, NULL, weight, head, K, N, accumulate);
        for (ct_int r = head; r < n; r++) idx[r] -= head; /* rows of the block below the head */
        FN(live_rows_dinp)(dinp + head * K, dxc, dc, weight, idx + head, tail, M - head, K, N, accumulate);
    }
    free(idx), free(dc), free(xc), free(dxc);
    return 0;
}

/* Factor of a kept element of dropout with probability p: 1 / (1 - p) (0 when p >= 1). */
static real FN(keep_scale)(double p)
{
    return p >= 1 ? (real)0 : (real)(1.0 / (1.0 - p));
}

/* What ff_backward's row loops read and write (rows r of the compacted
 * block are rows idx[r] of h and keep). */
typedef struct {
    real *ac, *da;
    const real *h, *b1;
    const uint8_t *keep; /* NULL: no dropout */
    real scale;
    int act;
    const ct_int *idx;
    ct_int F, n;
    real *db1;     /* += the column sums of da, in row order (NULL: skipped) */
    int db1_done;  /* set when one block had every row and summed db1 itself */
} FN(ff_rows_args);

/* ac rows [r0, r1) (n, F) <- the input of linear2 on rows idx: act(h + b1) * keep / (1 - p)
 * (keep NULL: no dropout).  A block of ct_parallel_rows. */
static CT_VECTOR_CLONES void FN(ff_recompute_rows)(void *ctx, ptrdiff_t r0, ptrdiff_t r1)
{
    const FN(ff_rows_args) *x = ctx;
    const ct_int F = x->F, *idx = x->idx;
    const uint8_t *keep = x->keep;
    const real scale = x->scale;
    for (ct_int r = r0; r < r1; r++) {
        real *restrict a = x->ac + r * F;
        FN(bias_act_row)(a, x->h + idx[r] * F, x->b1, x->act, F);
        if (keep != NULL) {
            const uint8_t *restrict k = keep + idx[r] * F;
            for (ct_int f = 0; f < F; f++) a[f] *= k[f] ? scale : (real)0;
        }
    }
}

/* da rows [r0, r1) <- dh: through the dropout (keep, scale) and the activation at h + b1 of
 * rows idx, in place.  One loop per case, so that each vectorises.  A block of
 * ct_parallel_rows: every row is one thread's. */
static CT_VECTOR_CLONES void FN(ff_act_backward_rows)(void *ctx, ptrdiff_t r0, ptrdiff_t r1)
{
    FN(ff_rows_args) *x = ctx;
    /* one block with every row (one thread): db1 summed here, row by row, in the same order */
    const int whole = x->db1 != NULL && r0 == 0 && r1 == x->n;
    const ct_int F = x->F, *idx = x->idx;
    const real *restrict b1 = x->b1, *h = x->h;
    const uint8_t *keep = x->keep;
    const real scale = x->scale;
    const int act = x->act;
    for (ct_int r = r0; r < r1; r++) {
        real *restrict d = x->da + r * F;
        const real *restrict hr = h + idx[r] * F;
        if (keep != NULL) {
            const uint8_t *restrict k = keep + idx[r] * F;
            for (ct_int f = 0; f < F; f++) d[f] *= k[f] ? scale : (real)0;
        }
        /* dh = d act'(h + b1) */
        if (act != CT_ACT_RELU)
            FN(gelu_slopes_row)(d, NULL, hr, b1, act, F);
        else if (b1 != NULL)
            for (ct_int f = 0; f < F; f++) d[f] = hr[f] + b1[f] <= 0 ? (real)0 : d[f];
        else
            for (ct_int f = 0; f < F; f++) d[f] = hr[f] <= 0 ? (real)0 : d[f];
        if (whole) VADD_INTO(x->db1, d, F); /* while the row is in cache */
    }
    if (whole) x->db1_done = 1;
}

/* Work of one of ff_backward's row loops over n rows of F (as bias_act_forward counts it). */
static double FN(ff_rows_flops)(int act, ct_int n, ct_int F)
{
    return (act == CT_ACT_RELU ? 2.0 : 20.0) * (double)n * (double)F;
}

/* ff_backward - the feed-forward block y = drop(act(x w1^T + b1)) w2^T + b2
 *   dout (M, D); x (M, D); h (M, F) = x w1^T (before b1); keep (M, F) dropout mask
 *   (nonzero = kept) or NULL without dropout, p its probability; w1 (F, D), b1 (F) or
 *   NULL, w2 (D, F); act as bias_act
 *   dx (M, D), dw1 (F, D), db1 (F), dw2 (D, F), db2 (D) (NULL ones skipped): accumulate 1
 *   adds into them, 0 writes them (fresh, uninitialised buffers: no zeroing pass first)
 *   Works on the live rows of dout only (dead rows add nothing).  linear2's input is
 *   recomputed from h, b1 and keep rather than stored.
 *   Returns 0, or -1 when the scratch cannot be allocated. */
int FN(ff_backward)(real *dx, real *dw1, real *db1, real *dw2, real *db2, const real *dout,
                    const real *x, const real *h, const uint8_t *keep, double p, const real *w1,
                    const real *b1, const real *w2, int act, ct_int M, ct_int D, ct_int F,
                    int accumulate)
{
    ct_int *idx = malloc((size_t)CT_MAX(M, 1) * sizeof(ct_int));
    if (idx == NULL) return -1;
    ct_int n = FN(live_rows)(idx, dout, M, D, x, D, h, F);
    int compact = FN(sparse_enough)(n, M) && FN(all_finite)(w1, F * D) &&
                  FN(all_finite)(w2, D * F) && FN(all_finite)(b1, F);
    if (!compact) { /* every row: use them in place */
        n = M;
        for (ct_int m = 0; m < M; m++) idx[m] = m;
    }
    size_t nD = (size_t)CT_MAX(n * D, 1), nF = (size_t)CT_MAX(n * F, 1);
    real *ac = malloc(nF * sizeof(real)), *da = malloc(nF * sizeof(real));
    real *gc = compact ? malloc(nD * sizeof(real)) : NULL;
    real *xc = compact ? malloc(nD * sizeof(real)) : NULL;
    real *dxc = compact && dx && accumulate ? malloc(nD * sizeof(real)) : NULL;
    if (!ac || !da || (compact && (!gc || !xc || (dx && accumulate && !dxc)))) {
        free(idx), free(ac), free(da), free(gc), free(xc), free(dxc);
        return -1;
    }
    if (compact) {
        FN(gather_rows)(gc, dout, idx, n, D);
        FN(gather_rows)(xc, x, idx, n, D);
    }
    const real *g = compact ? gc : dout, *xr = compact ? xc : x;
    if (!accumulate && db1 != NULL) memset(db1, 0, (size_t)F * sizeof(real)); /* summed into below */
    FN(ff_rows_args) rows = {ac, da, h, b1, keep, FN(keep_scale)(p), act, idx, F, n, db1, 0};
    /* linear2: y = a w2^T + b2 */
    ct_parallel_rows(n, FN(ff_rows_flops)(act, n, F), FN(ff_recompute_rows), &rows);
    FN(linear_backward)(NULL, dw2, db2, g, ac, w2, n, F, D, accumulate);
    FN(linear_backward)(da, NULL, NULL, g, ac, w2, n, F, D, 0);
    /* dropout and activation (rows on the pool), db1 += the column sums of dh (rows in order,
     * by the block when it has every row, else on this thread afterwards: the same bits on any
     * thread count), then linear1: h = x w1^T */
    ct_parallel_rows(n, FN(ff_rows_flops)(act, n, F), FN(ff_act_backward_rows), &rows);
    for (ct_int r = 0; db1 != NULL && !rows.db1_done && r < n; r++) VADD_INTO(db1, da + r * F, F);
    FN(linear_backward)(NULL, dw1, NULL, da, xr, w1, n, D, F, accumulate);
    if (dx != NULL) {
        if (compact) {
            FN(live_rows_dinp)(dx, dxc, da, w1, idx, n, M, D, F, accumulate);
        } else {
            FN(linear_backward)(dx, NULL, NULL, da, xr, w1, n, D, F, accumulate);
        }
    }
    free(idx), free(ac), free(da), free(gc), free(xc), free(dxc);
    return 0;
}

#endif
