/* decode.c - incremental decoding: attention of one new query per row over a
 * key/value cache, forward only (decoding runs without gradients).
 *
 * Self-attention while generating: at step t the new token's key and value
 * are written into slot t of the cache (kv_cache_append), then its query
 * attends to slots 0..t (attend_step with length t + 1).  Cross-attention:
 * the encoder memory's keys/values fill the cache once per source and every
 * step attends to the first src_len[b] slots.  Beam search's kernels (the
 * re-ranking of beams, and the reordering of cache rows that follows it)
 * are in decode_beam.c.
 *
 * For one (b, h), with q (Dh), keys k_j (Dh), values v_j (Dv), j < len:
 *     s_j = scale * q . k_j   (-inf where key_padding[b, j])
 *     p   = softmax(s)        all keys hidden (or len = 0): p = 0, out = 0
 *     out = sum_j p_j v_j
 *
 * decode_layer_step runs a whole layer for one token in one call (the
 * projections, the cache append, both attentions, the feed-forward, the
 * residuals and layer norms), with the same functions, in the same order,
 * as the step of ctransformer/models/cache.py calling the kernels one by
 * one; so both give the same bits.  One call per layer keeps the
 * projections back to back (the pool's worker stays awake between them) and
 * leaves no Python between the kernels. */
#ifndef CT_TEMPLATE_PASS
#include "decode.h"
#include "ct_blas.h"
#include "embedding.h"
#include "ct_math.h"
#include "fused.h"
#include "layernorm.h"
#include "linear.h"
#include "parallel.h"
#include "softmax.h"
#define CT_TEMPLATE_FILE "decode.c"
#include "ct_template.h"
#else

/* ---- the Linear layers of a decoding step: a few rows ----------------------
 * out (M, N) = x (M, K) w^T + bias for M <= CT_FEW_ROWS_MAX rows (one token
 * per sentence or per beam): each row of w is read once for all the rows of
 * x (VROW_DOTS, ct_math.h), so a step's time is that read.  OpenBLAS's GEMM
 * packs (copies) the whole of w for so few rows: on a 2-core Xeon, 1
 * thread, 2048 x 512, 2-8 rows took 3.1-3.5x the time of one row's GEMV;
 * these loops take 1.1-2x, and one row the GEMV's time.  9 to 16 rows with
 * K > 256 go through grid_range (4 rows of w against 6 rows of x at a
 * time): 0.45-0.96 of OpenBLAS's time (K x N = 512 x 512 .. 2048, 2048 x
 * 512, interleaved); at 24-64 rows it was 0.9-1.5x, so from 17 rows
 * linear_forward takes them.  So does K <= 256, where linear_forward's
 * packed kernel (float32, AVX-512) was faster: K 128, N 384: the grid took
 * 1.12-1.41x its time, K 64, N 256 0.93-1.03x.  Each output of these loops
 * has VROW_DOTS's bits whatever M or the thread count: a sentence decodes to
 * the same bits alone or among up to 8 rows (16 for K > 256), greedily or as
 * one of several beams. */

/* Columns n0 .. n1-1 of out for M <= CT_ROW_DOTS_MAX: each row of w read once, every row of x against it. */
static CT_FMA_CLONES void FN(rows_range)(real *out, const real *x, const real *w, const real *bias, ct_int M,
                                         ct_int K, ct_int N, ct_int n0, ct_int n1)
{
    for (ct_int n = n0; n < n1; n++) {
        const real *wn = w + n * K, *bn = bias != NULL ? bias + n : NULL;
        switch (M) { /* R must be a constant where VROW_DOTS is inlined */
        case 1: VROW_DOTS(out + n, N, x, wn, bn, K, 1); break;
        case 2: VROW_DOTS(out + n, N, x, wn, bn, K, 2); break;
        case 3: VROW_DOTS(out + n, N, x, wn, bn, K, 3); break;
        case 4: VROW_DOTS(out + n, N, x, wn, bn, K, 4); break;
        case 5: VROW_DOTS(out + n, N, x, wn, bn, K, 5); break;
        case 6: VROW_DOTS(out + n, N, x, wn, bn, K, 6); break;
        case 7: VROW_DOTS(out + n, N, x, wn, bn, K, 7); break;
        default: VROW_DOTS(out + n, N, x, wn, bn, K, 8); break;
        }
    }
}

#define CT_GRID_MIN_K 257 /* below, 9+ rows go to linear_forward (see above) */

/* R (<= GRID_ROWS) rows of x from x against C (1 or GRID_COLS) rows of w from w
 * (VROW_DOTS_GRID with constant R and C). */
#define GRID_ROWS 6
#define GRID_COLS CT_ROW_DOTS_COLS
CT_INLINE void FN(grid_block)(real *out, ct_int ldo, const real *x, const real *w, const real *bias, ct_int K,
                              int R, int C)
{
#define GRID_CASE(r)                                                         \
    case r:                                                                  \
        if (C == GRID_COLS)                                                  \
            VROW_DOTS_GRID(out, ldo, x, w, bias, K, r, GRID_COLS);           \
        else                                                                 \
            VROW_DOTS_GRID(out, ldo, x, w, bias, K, r, 1);                   \
        break;
    switch (R) {
        GRID_CASE(1)
        GRID_CASE(2)
        GRID_CASE(3)
        GRID_CASE(4)
        GRID_CASE(5)
        default: GRID_CASE(6)
    }
#undef GRID_CASE
}

/* Columns n0 .. n1-1 of out for M > CT_ROW_DOTS_MAX: GRID_COLS rows of w at a
 * time (read once from memory, then from L1) against every block of
 * GRID_ROWS rows of x (from L2), GRID_ROWS x GRID_COLS sums in registers;
 * leftover rows of w one at a time.  The same bits per output as rows_range. */
static CT_FMA_CLONES void FN(grid_range)(real *out, const real *x, const real *w, const real *bias, ct_int M,
                                         ct_int K, ct_int N, ct_int n0, ct_int n1)
{
    for (ct_int n = n0; n < n1;) {
        int cols = n1 - n >= GRID_COLS ? GRID_COLS : 1;
        for (ct_int i = 0; i < M; i += GRID_ROWS)
            FN(grid_block)(out + i * N + n, N, x + i * K, w + n * K, bias != NULL ? bias + n : NULL, K,
                           (int)CT_MIN(GRID_ROWS, M - i), cols);
        n += cols;
    }
}

/* Columns n0 .. n1-1 of out, M <= CT_FEW_ROWS_MAX. */
static void FN(few_rows_range)(real *out, const real *x, const real *w, const real *bias, ct_int M, ct_int K,
                               ct_int N, ct_int n0, ct_int n1)
{
    if (M <= CT_ROW_DOTS_MAX)
        FN(rows_range)(out, x, w, bias, M, K, N, n0, n1);
    else
        FN(grid_range)(out, x, w, bias, M, K, N, n0, n1);
}

typedef struct {
    real *out;
    const real *x, *w, *bias;
    ct_int M, K, N;
} FN(rows_job);

/* Rows [n0, n1) of w (a block of ct_parallel_converge). */
static void FN(rows_block)(void *arg, ptrdiff_t n0, ptrdiff_t n1)
{
    const FN(rows_job) *j = arg;
    FN(few_rows_range)(j->out, j->x, j->w, j->bias, j->M, j->K, j->N, (ct_int)n0, (ct_int)n1);
}

/* decode_linear: the Linear layers of one decoding step
 *   x (M, K), w (N, K), bias (N) or NULL  ->  out (M, N) = x w^T + bias
 * Up to CT_ROW_DOTS_MAX rows: the loops above, split over the pool into
 * blocks of w's rows taken from the two ends of w towards the middle
 * (ct_parallel_converge): a few long blocks per thread, each a new stream for
 * the prefetchers (a d512 step at 2 threads took 0.92x the time in one block
 * per thread than in 8 equal ones), the last ones short, so that neither
 * thread waits long for the other.  Its work counts the read of w as 8 flops per
 * weight.  More rows (a batch of sentences): the GEMM of linear_forward,
 * whose packing then pays. */
void FN(decode_linear)(real *out, const real *x, const real *w, const real *bias, ct_int M,
                       ct_int K, ct_int N)
{
    int few = M <= CT_ROW_DOTS_MAX || (M <= CT_FEW_ROWS_MAX && K >= CT_GRID_MIN_K);
    if (M == 0 || !few || K == 0 || N == 0) {
        FN(linear_forward)(out, x, w, bias, M, K, N);
        return;
    }
    double work = 8.0 * (double)N * (double)K + 2.0 * (double)M * (double)N * (double)K;
    int threads = ct_split_threads(ct_pool_threads_for(work, ct_threads_ceiling_here()), (int)N);
    if (threads <= 1) {
        FN(few_rows_range)(out, x, w, bias, M, K, N, 0, N);
        return;
    }
    FN(rows_job) job = {out, x, w, bias, M, K, N};
    ct_parallel_converge(N, threads, CT_SPLIT_ALIGN, FN(rows_block), &job);
}

/* kv_cache_append (in place)
 *   cache_k (B, H, Tmax, Dh), cache_v (B, H, Tmax, Dv)
 *   k_t (B, H, Dh), v_t (B, H, Dv), pos (B) slot of each row (0 <= pos[b] < Tmax)
 *   cache_k[b, h, pos[b]] = k_t[b, h];  cache_v[b, h, pos[b]] = v_t[b, h] */
void FN(kv_cache_append)(real *cache_k, real *cache_v, const real *k_t, const real *v_t,
                         const int64_t *pos, ct_int B, ct_int H, ct_int Tmax, ct_int Dh,
                            ct_int Dv)
{
    for (ct_int b = 0; b < B; b++)
        for (ct_int h = 0; h < H; h++) {
            ct_int bh = b * H + h, slot = bh * Tmax + (ct_int)pos[b];
            memcpy(cache_k + slot * Dh, k_t + bh * Dh, (size_t)Dh * sizeof(real));
            memcpy(cache_v + slot * Dv, v_t + bh * Dv, (size_t)Dv * sizeof(real));
        }
}

/* Scores of one (b, h): s_j = scale * q . k_j for j < len, -inf where padded.
 * The dot is VDOT's (double lanes, ct_math.h): a running double sum, one
 * term at a time, was a 4-cycle dependency per term and 2.8 % of a d512
 * greedy step at 2 threads (perf), all of it on the caller. */
CT_INLINE void FN(step_scores)(real *s, const real *q, const real *k, const unsigned char *pad,
                               real scale, ct_int len, ct_int Dh)
{
    for (ct_int j = 0; j < len; j++) {
        double dot = VDOT(q, k + j * Dh, Dh);
        s[j] = (pad != NULL && pad[j]) ? -INFINITY : scale * (real)dot;
    }
}

#define STEP_MIX_BLOCK 64 /* columns of out summed in registers over every j */

/* out[d0 .. d0 + n) = sum_j p_j v_j[d0 ..], j in order; n a constant where
 * inlined: with out in memory the sum of each j waited for the store of the
 * previous one (30 % of attend_step, perf). */
CT_INLINE void FN(mix_block)(real *out, const real *p, const real *v, const unsigned char *pad, ct_int len,
                             ct_int Dv, ct_int d0, ct_int n)
{
    real acc[STEP_MIX_BLOCK] = {0};
    for (ct_int j = 0; j < len; j++) {
        if (pad != NULL && pad[j]) continue; /* hidden: its value (even inf/NaN) must not leak */
        const real *vj = v + j * Dv + d0;
        for (ct_int d = 0; d < n; d++) acc[d] += p[j] * vj[d];
    }
    memcpy(out + d0, acc, (size_t)n * sizeof(real));
}

/* out (Dv) = softmax(s) @ v over j < len (softmax_row of softmax.c, in place
 * in s); zeros when every key is hidden.  A NaN score makes every p NaN, which
 * reaches out.  Columns in blocks of STEP_MIX_BLOCK (mix_block). */
CT_INLINE void FN(step_mix)(real *out, real *s, const real *v, const unsigned char *pad, ct_int len,
                            ct_int Dv)
{
    memset(out, 0, (size_t)Dv * sizeof(real));
    if (FN(softmax_row)(s, len) == -INFINITY) return;
    ct_int d0 = 0;
    for (; d0 + STEP_MIX_BLOCK <= Dv; d0 += STEP_MIX_BLOCK)
        FN(mix_block)(out, s, v, pad, len, Dv, d0, STEP_MIX_BLOCK);
    if (d0 < Dv) FN(mix_block)(out, s, v, pad, len, Dv, d0, Dv - d0);
}

/* attend_step
 *   q_t (B, H, Dh), cache_k (B, H, Tmax, Dh), cache_v (B, H, Tmax, Dv)
 *   lengths (B): row b attends to slots 0 .. lengths[b]-1 (0 <= lengths[b] <= Tmax)
 *   key_padding (B, Tmax) uint8 or NULL: nonzero = slot hidden (torch's key_padding_mask)
 *   out (B, H, Dv)
 *   Subnormals are flushed to zero, as in attention.c's slices (ct.h), so the
 *   cached step gives the weights of the full forward.
 *   Returns 0, or -1 when the (Tmax) score scratch cannot be allocated. */
CT_VECTOR_CLONES int FN(attend_step)(real *out, const real *q_t, const real *cache_k, const real *cache_v,
                    const int64_t *lengths, const unsigned char *key_padding, double scale,
                    ct_int B, ct_int H, ct_int Tmax, ct_int Dh, ct_int Dv)
{
    real *s = malloc((size_t)CT_MAX(Tmax, 1) * sizeof(real));
    if (s == NULL) return -1;
    ct_fp_mode mode = ct_flush_subnormals_begin(); /* as attention.c's slices: weights < FLT_MIN are 0 */
    for (ct_int b = 0; b < B; b++) {
        ct_int len = (ct_int)lengths[b];
        const unsigned char *pad = key_padding ? key_padding + b * Tmax : NULL;
        for (ct_int h = 0; h < H; h++) {
            ct_int bh = b * H + h;
            FN(step_scores)(s, q_t + bh * Dh, cache_k + bh * Tmax * Dh, pad, (real)scale, len, Dh);
            FN(step_mix)(out + bh * Dv, s, cache_v + bh * Tmax * Dv, pad, len, Dv);
        }
    }
    ct_flush_subnormals_end(mode);
    free(s);
    return 0;
}

/* ------------------------------------------------------------ decode_layer_step */

/* Working rows of one decode_layer_step call (B rows each). */
typedef struct {
    real *qkv;                   /* (B, 3E) packed projections */
    real *q, *k, *v, *ctx;       /* (B, E): q, k, v as (B, H, Dh); the attention output */
    real *sub, *alt, *normed;    /* (B, E): a block's output; the other x buffer; norm(x) */
    real *hidden, *activated;    /* (B, F): linear1's output; act(hidden + b1) */
    real *mean, *rstd;           /* (B): the layer norms' statistics (not kept) */
    int64_t *lengths;            /* (B): a slot or a key count per row */
} FN(step_rows);

/* One block for every working row; returns it (to free) or NULL. */
static real *FN(step_rows_alloc)(FN(step_rows) *w, ct_int B, ct_int E, ct_int F)
{
    size_t be = (size_t)(B * E), bf = (size_t)(B * F), b = (size_t)B;
    size_t reals = 10 * be + 2 * bf + 2 * b;
    reals += reals % 2; /* lengths after an even number of reals: 8-byte aligned */
    real *all = malloc(reals * sizeof(real) + (b + 1) * sizeof(int64_t));
    if (all == NULL) return NULL;
    real *p = all;
    w->qkv = p, p += 3 * be;
    w->q = p, p += be;
    w->k = p, p += be;
    w->v = p, p += be;
    w->ctx = p, p += be;
    w->sub = p, p += be;
    w->alt = p, p += be;
    w->normed = p, p += be;
    w->hidden = p, p += bf;
    w->activated = p, p += bf;
    w->mean = p, p += b;
    w->rstd = p;
    w->lengths = (int64_t *)(void *)(all + reals);
    return all;
}

#ifndef CT_PREFETCH_HEADS_ONCE /* (once: the template is compiled per dtype) */
#define CT_PREFETCH_HEADS_ONCE
/* Ask for the first `len` rows (of `row_bytes`) of each of the `n` blocks of
 * `stride_bytes` from p, line by line (GCC's prefetch, locality 2: into L2,
 * from where the weight stream pushes them to L3): the keys and values the
 * step's next attention reads, issued before the projection GEMV that
 * precedes it.  Each step's ~58 MB of weights evict them, and attend_step
 * then waited on memory: 28-34 us a call cold against 4-6 us hot (d512, 8
 * heads; six calls a step), on the caller while the worker idled.  Greedy
 * decoding of bench_transformer (c)'s model, in one process with and
 * without: 0.955-0.977 of the time at 2 threads, 0.99-1.01 at 1. */
static void prefetch_blocks(const void *p, ct_int n, size_t stride_bytes, ct_int len, size_t row_bytes)
{
#if defined(__GNUC__)
    const char *base = p;
    size_t bytes = (size_t)len * row_bytes;
    for (ct_int i = 0; i < n; i++)
        for (size_t off = 0; off < bytes; off += 64) __builtin_prefetch(base + (size_t)i * stride_bytes + off, 0, 2);
#else
    (void)p, (void)n, (void)stride_bytes, (void)len, (void)row_bytes;
#endif
}
#endif

static void FN(set_rows)(int64_t *lengths, ct_int B, int64_t value)
{
    for (ct_int b = 0; b < B; b++) lengths[b] = value;
}

/* sub (B, E) = self-attention of the rows x (B, E) at position pos: their
 * keys/values are written into slot pos of the cache, their queries attend to
 * slots 0..pos (self_attn_step of models/cache.py). */
static int FN(self_attention_rows)(real *sub, const real *x, real *cache_k, real *cache_v, ct_int pos,
                                   const ct_decode_layer *L, FN(step_rows) *w)
{
    ct_int B = L->B, E = L->E, H = L->H, Dh = E / H;
    /* the cached keys and values (cold: see prefetch_blocks) on their way during the GEMV */
    prefetch_blocks(cache_k, B * H, (size_t)(L->Tmax * Dh) * sizeof(real), pos, (size_t)Dh * sizeof(real));
    prefetch_blocks(cache_v, B * H, (size_t)(L->Tmax * Dh) * sizeof(real), pos, (size_t)Dh * sizeof(real));
    FN(decode_linear)(w->qkv, x, L->w_qkv, L->b_qkv, B, E, 3 * E);
    for (ct_int b = 0; b < B; b++) { /* (B, 3E) -> q, k, v (B, E) each */
        memcpy(w->q + b * E, w->qkv + b * 3 * E, (size_t)E * sizeof(real));
        memcpy(w->k + b * E, w->qkv + b * 3 * E + E, (size_t)E * sizeof(real));
        memcpy(w->v + b * E, w->qkv + b * 3 * E + 2 * E, (size_t)E * sizeof(real));
    }
    FN(set_rows)(w->lengths, B, pos);
    FN(kv_cache_append)(cache_k, cache_v, w->k, w->v, w->lengths, B, H, L->Tmax, Dh, Dh);
    FN(set_rows)(w->lengths, B, pos + 1);
    if (FN(attend_step)(w->ctx, w->q, cache_k, cache_v, w->lengths, NULL, 1.0 / sqrt((double)Dh), B, H,
                        L->Tmax, Dh, Dh))
        return -1;
    FN(decode_linear)(sub, w->ctx, L->w_o, L->b_o, B, E, E);
    return 0;
}

/* sub (B, E) = cross-attention of the rows x (B, E) over the memory's keys
 * and values (cross_attn_step of models/cache.py). */
static int FN(cross_attention_rows)(real *sub, const real *x, const ct_decode_layer *L, FN(step_rows) *w)
{
    ct_int B = L->B, E = L->E, H = L->H, Dh = E / H;
    /* the memory's keys and values (cold: see prefetch_blocks) on their way during the GEMV */
    prefetch_blocks(L->mem_k, B * H, (size_t)(L->S * Dh) * sizeof(real), L->S, (size_t)Dh * sizeof(real));
    prefetch_blocks(L->mem_v, B * H, (size_t)(L->S * Dh) * sizeof(real), L->S, (size_t)Dh * sizeof(real));
    FN(decode_linear)(w->q, x, L->w_cq, L->b_cq, B, E, E);
    FN(set_rows)(w->lengths, B, L->S);
    if (FN(attend_step)(w->ctx, w->q, L->mem_k, L->mem_v, w->lengths, L->mem_pad, 1.0 / sqrt((double)Dh), B,
                        H, L->S, Dh, Dh))
        return -1;
    FN(decode_linear)(sub, w->ctx, L->w_co, L->b_co, B, E, E);
    return 0;
}

/* sub (B, E) = linear2(act(linear1(x))) (feed_forward_step of models/cache.py). */
static void FN(feed_forward_rows)(real *sub, const real *x, const ct_decode_layer *L, FN(step_rows) *w)
{
    FN(decode_linear)(w->hidden, x, L->w1, NULL, L->B, L->E, L->F);
    FN(bias_act_forward)(w->activated, w->hidden, L->b1, L->act, L->B, L->F);
    FN(decode_linear)(sub, w->activated, L->w2, L->b2, L->B, L->F, L->E);
}

#ifndef CT_STEP_BLOCKS /* (once: the template is compiled per dtype) */
#define CT_STEP_BLOCKS
enum { CT_STEP_SELF, CT_STEP_CROSS, CT_STEP_FF }; /* the blocks of a layer */
#endif

static int FN(run_block)(int block, real *sub, const real *x, real *cache_k, real *cache_v, ct_int pos,
                         const ct_decode_layer *L, FN(step_rows) *w)
{
    if (block == CT_STEP_SELF) return FN(self_attention_rows)(sub, x, cache_k, cache_v, pos, L, w);
    if (block == CT_STEP_CROSS) return FN(cross_attention_rows)(sub, x, L, w);
    FN(feed_forward_rows)(sub, x, L, w);
    return 0;
}

/* decode_layer_step
 *   x (B, E) one token per row at position pos (0 <= pos < Tmax)
 *   cache_k, cache_v (B, H, Tmax, Dh) the layer's self-attention cache: slot
 *   pos is written; L the layer (decode.h)
 *   out (B, E), per block i (self-attention, cross-attention if any,
 *   feed-forward) with norm i:
 *     post-norm: x = norm_i(x + block(x))     pre-norm: x = x + block(norm_i(x))
 *   (eval semantics: no dropout).  Returns 0, or -1 when out of memory. */
int FN(decode_layer_step)(real *out, const real *x, real *cache_k, real *cache_v, ct_int pos,
                          const ct_decode_layer *L)
{
    FN(step_rows) w;
    real *all = FN(step_rows_alloc)(&w, L->B, L->E, L->F);
    if (all == NULL) return -1;
    int blocks[3] = {CT_STEP_SELF, CT_STEP_CROSS, CT_STEP_FF}, n = 3, status = 0;
    if (L->w_cq == NULL) blocks[1] = CT_STEP_FF, n = 2;
    ct_int B = L->B, E = L->E;
    real *cur = out, *other = w.alt;
    memcpy(cur, x, (size_t)(B * E) * sizeof(real));
    for (int i = 0; i < n && status == 0; i++) {
        const real *nw = L->norm_w[i], *nb = L->norm_b[i];
        if (L->norm_first) { /* x = x + block(norm(x)), added in real as NumPy would */
            FN(layernorm_forward)(w.normed, w.mean, w.rstd, cur, nw, nb, B, E, L->eps);
            status = FN(run_block)(blocks[i], w.sub, w.normed, cache_k, cache_v, pos, L, &w);
            for (ct_int j = 0; j < B * E; j++) cur[j] = cur[j] + w.sub[j];
        } else { /* x = norm(block(x) + x), into the other buffer */
            status = FN(run_block)(blocks[i], w.sub, cur, cache_k, cache_v, pos, L, &w);
            FN(add_layernorm_forward)(other, w.mean, w.rstd, w.sub, cur, nw, nb, L->eps, B, E);
            real *swap = cur;
            cur = other, other = swap;
        }
    }
    if (cur != out) memcpy(out, cur, (size_t)(B * E) * sizeof(real));
    free(all);
    return status;
}

/* decode_model_step
 *   ids (B) token ids in [0, V) (checked by the caller), pos the position
 *   (0 <= pos < P and < every layer's Tmax); m the model (decode.h)
 *   logits (B, V_out):
 *     x = emb[ids] * scale + pe[pos]          (in real, as NumPy after embedding_forward)
 *     x = decode_layer_step(x) for each layer  (slot pos of each cache is written)
 *     x = layernorm(x) when with_norm
 *     logits = x out_w^T + out_b               (decode_linear)
 * One call for a whole decoding step: the kernels StepProgram.run
 * (models/cache.py) would call, in its order, so the same bits; with no
 * Python between them (a d512 step's interpreter work and argument checks
 * ran with their objects evicted by each weight stream).
 * Returns 0, or -1 when out of memory. */
int FN(decode_model_step)(real *logits, const int64_t *ids, ct_int pos, const ct_decode_model *m)
{
    ct_int B = m->B, E = m->E;
    real *rows = malloc((size_t)(2 * B * E + 2 * B + 1) * sizeof(real)); /* (+1: never malloc(0)) */
    if (rows == NULL) return -1;
    real *x = rows, *y = rows + B * E, *mean = rows + 2 * B * E, *rstd = mean + B;
    const real *pe_row = (const real *)m->pe + pos * E, scale = (real)m->scale;
    FN(embedding_forward)(x, ids, m->emb, B, E);
    for (ct_int b = 0; b < B; b++)
        for (ct_int j = 0; j < E; j++) { /* two roundings, as x * scale then + pe in NumPy */
            real scaled = x[b * E + j] * scale;
            x[b * E + j] = scaled + pe_row[j];
        }
    int status = 0;
    for (int i = 0; i < m->n_layers && status == 0; i++) {
        status = FN(decode_layer_step)(y, x, m->caches[2 * i], m->caches[2 * i + 1], pos, m->layers[i]);
        real *swap = x;
        x = y, y = swap;
    }
    if (status == 0) {
        if (m->with_norm) {
            FN(layernorm_forward)(y, mean, rstd, x, m->norm_w, m->norm_b, B, E, m->norm_eps);
            x = y;
        }
        FN(decode_linear)(logits, x, m->out_w, m->out_b, B, E, m->V_out);
    }
    free(rows);
    return status;
}

/* Index of the largest element of row (n >= 1), as NumPy's argmax: the
 * first maximum, or the first NaN when there is one. */
static ct_int FN(row_argmax)(const real *row, ct_int n)
{
    ct_int best = 0;
    real top = row[0];
    if (top != top) return 0;
    for (ct_int j = 1; j < n; j++) {
        real v = row[j];
        if (v != v) return j;
        if (v > top) top = v, best = j;
    }
    return best;
}

/* decode_model_greedy: greedy_decode's loop (ctransformer/decoding.py) in one call
 *   ys (B, L) int64: the ids of column n - 1 are fed at step n; columns
 *     start .. stop - 1 are written (1 <= start < stop <= L; column start - 1
 *     holds ids in [0, V), checked by the caller)
 *   done (B): nonzero for rows that already emitted eos_id (read, updated)
 *   pos0 the cache position of the first step (pos0 + stop - start - 1 < P
 *   and < every layer's Tmax); m the model, as decode_model_step
 *   for n = start, start + 1, ...:
 *     logits   = decode_model_step(ys[:, n - 1], pos0 + n - start)   (B, V_out)
 *     ys[b, n] = done[b] ? pad_id : argmax(logits[b])   (row_argmax: NumPy's)
 *     done[b] |= ys[b, n] == eos_id
 *   through column stop - 1, or the first column after which every row (of B > 0) is done.
 * Every id fed must be a row of emb: the caller ensures V_out <= V and
 * 0 <= pad_id < V.  The same kernels, ids and bits as the loop calling
 * decode_model_step per token; without the interpreter, NumPy's argmax and
 * the loop's bookkeeping, which ran cold after each step's weight stream
 * (~0.05 ms a token of a d512 model at 2 threads).
 * *last <- the last column written.  Returns 0, or -1 when out of memory. */
int FN(decode_model_greedy)(ct_int *last, int64_t *ys, unsigned char *done, ct_int L, ct_int start, ct_int stop,
                            ct_int pos0, int64_t eos_id, int64_t pad_id, const ct_decode_model *m)
{
    ct_int B = m->B, V_out = m->V_out;
    real *logits = malloc((size_t)(B * V_out + 1) * sizeof(real));
    int64_t *ids = malloc((size_t)(B + 1) * sizeof(int64_t));
    int status = logits != NULL && ids != NULL ? 0 : -1;
    *last = start - 1;
    for (ct_int n = start; n < stop && status == 0; n++) {
        for (ct_int b = 0; b < B; b++) ids[b] = ys[b * L + n - 1];
        if ((status = FN(decode_model_step)(logits, ids, pos0 + n - start, m)) != 0) break;
        ct_int finished = 0;
        for (ct_int b = 0; b < B; b++) {
            int64_t next = done[b] ? pad_id : (int64_t)FN(row_argmax)(logits + b * V_out, V_out);
            ys[b * L + n] = next;
            done[b] = done[b] || next == eos_id;
            finished += done[b] != 0;
        }
        *last = n;
        if (finished == B && B > 0) break; /* (no rows: every column, as the loop) */
    }
    free(logits);
    free(ids);
    return status;
}

#endif
