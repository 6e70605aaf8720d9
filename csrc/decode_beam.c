/* decode_beam.c - the decode family's beam search kernels (prototypes in
 * decode.h): re-ranking each source's beams from their next-token logits
 * (beam_step), then moving the self-attention caches' rows to follow them
 * (cache_reorder into a new array, cache_permute in place).  Forward only,
 * as all of decoding.  ctransformer/decoding.py's beam_search drives them. */
#ifndef CT_TEMPLATE_PASS
#include "decode.h"
#include "parallel.h"
#include "softmax.h"
#define CT_TEMPLATE_FILE "decode_beam.c"
#include "ct_template.h"
#else

/* cache_reorder (gather rows, for beam search)
 *   cache (B_in, H, Tmax, D), rows (B_out) with 0 <= rows[i] < B_in
 *   out (B_out, H, Tmax, D): out[i, :, :length] = cache[rows[i], :, :length];
 *   slots >= length are left as they are in out (the caller passes zeros or
 *   does not read them). */
void FN(cache_reorder)(real *out, const real *cache, const int64_t *rows, ct_int B_out,
                       ct_int H, ct_int Tmax, ct_int D, ct_int length)
{
    size_t slab = (size_t)(length * D) * sizeof(real);
    for (ct_int i = 0; i < B_out; i++)
        for (ct_int h = 0; h < H; h++)
            memcpy(out + (i * H + h) * Tmax * D, cache + (rows[i] * H + h) * Tmax * D, slab);
}

/* cache_permute (in place, for beam search's re-ranking)
 *   cache (B, H, Tmax, D), rows (B) with 0 <= rows[i] < B
 *   cache[i, :, :length] <- cache[rows[i], :, :length] as it was before the call,
 *   for every row with rows[i] != i (the others are not touched, nor slots >= length).
 * Each moved row is copied once, straight from its source: a row is written
 * as soon as no move still to be made reads it (a beam's copies form chains:
 * rows 0 0 1 2 are three copies, last row first).  When every move left
 * reads a row that is still to be written, they form cycles: one row of a
 * cycle is first saved to a scratch, its reader copies from there.  NumPy's
 * fancy-index copy of the same rows, three layers of keys and values per
 * step, was ~0.26 ms a token of bench_transformer (c)'s beam search (k = 4);
 * a copy of the moved rows to a scratch and back, ~0.17 ms.
 * Returns 0, or -1 when the scratch cannot be allocated. */
int FN(cache_permute)(real *cache, const int64_t *rows, ct_int B, ct_int H, ct_int Tmax, ct_int D, ct_int length)
{
    if (length == 0 || H == 0 || D == 0) return 0;
    ct_int *readers = calloc((size_t)B + 1, sizeof(ct_int)); /* moves still to make that read row j */
    unsigned char *pending = malloc((size_t)B + 1);           /* row i is still to be written */
    real *saved = NULL;                                      /* a cycle's row saved_row, before it is written */
    ct_int left = 0, saved_row = -1, row_stride = H * Tmax * D;
    size_t slab = (size_t)(length * D) * sizeof(real);       /* one (row, head)'s first `length` slots */
    int status = readers != NULL && pending != NULL ? 0 : -1;
    for (ct_int i = 0; i < B && status == 0; i++) {
        pending[i] = rows[i] != i;
        if (pending[i]) readers[rows[i]]++, left++;
    }
    while (left > 0 && status == 0) {
        ct_int made = 0;
        for (ct_int i = 0; i < B; i++) {
            if (!pending[i] || readers[i] > 0) continue;
            ct_int from = (ct_int)rows[i];
            for (ct_int h = 0; h < H; h++)
                memcpy(cache + i * row_stride + h * Tmax * D,
                       from == saved_row ? saved + h * length * D : cache + from * row_stride + h * Tmax * D, slab);
            pending[i] = 0, left--, made++;
            if (from != saved_row) readers[from]--; /* (the scratch's reader: see below) */
        }
        if (made > 0 || left == 0) continue;
        /* every move left reads a row still to be written: cycles; open one at its first row */
        if (saved == NULL && (saved = malloc((size_t)H * slab)) == NULL) { status = -1; break; }
        ct_int i = 0;
        while (!pending[i]) i++;
        for (ct_int h = 0; h < H; h++) memcpy(saved + h * length * D, cache + i * row_stride + h * Tmax * D, slab);
        saved_row = i;
        readers[i] = 0; /* its one reader (a cycle reads each row once) copies from the scratch */
    }
    free(saved);
    free(pending);
    free(readers);
    return status;
}

/* ------------------------------------------------------------------ beam_step */

#ifndef CT_DECODE_BEAM_COMMON
#define CT_DECODE_BEAM_COMMON
/* A source's k best candidates so far, best first: their values val[0 .. n)
 * and indices idx[0 .. n), the candidates being offered in increasing index
 * order.  The order is that of a stable argsort of -value (NumPy's): larger
 * values first, NaN after every number, equal values (NaN with NaN) by index. */
typedef struct {
    double *val;
    int64_t *idx;
    ct_int n, k;
} ct_beam_best;

/* Does a value offered now go before the kept value b (which has a lower index)? */
static inline int ct_beam_before(double value, double b)
{
    return value > b || (b != b && value == value);
}

static inline void ct_beam_offer(ct_beam_best *best, double value, int64_t index)
{
    ct_int i = best->n;
    if (i == best->k) {
        if (!ct_beam_before(value, best->val[i - 1])) return; /* most candidates: one comparison */
        i--;                                                 /* the last kept one drops out */
    } else {
        best->n++;
    }
    for (; i > 0 && ct_beam_before(value, best->val[i - 1]); i--) {
        best->val[i] = best->val[i - 1];
        best->idx[i] = best->idx[i - 1];
    }
    best->val[i] = value;
    best->idx[i] = index;
}
#endif

typedef struct {
    double *new_scores;
    int64_t *origin, *tok;
    const real *logits;
    const double *scores;
    const unsigned char *done;
    ct_int k, V, pad_id;
    int failed; /* a block's scratch could not be allocated */
} FN(beam_args);

/* Sources b0 .. b1 - 1 of beam_step, each whole on this thread. */
static void FN(beam_sources)(void *ctx, ptrdiff_t b0, ptrdiff_t b1)
{
    FN(beam_args) *a = ctx;
    ct_int k = a->k, V = a->V;
    /* a row's log-probabilities; float32 logits also need the row in float64 (float64 ones are read in place) */
    double *logp = malloc((size_t)((CT_DTYPE_IS_F32 ? 2 : 1) * V) * sizeof(double));
    if (logp == NULL) {
        __atomic_store_n(&a->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    for (ptrdiff_t b = b0; b < b1; b++) {
        /* the kept indices live in origin's slots until they are split into beam and token */
        ct_beam_best best = {a->new_scores + b * k, a->origin + b * k, 0, k};
        for (ct_int i = 0; i < k; i++) {
            ct_int r = b * k + i;
            if (a->done[r]) { /* a finished beam's one continuation: pad, at no cost */
                for (ct_int v = 0; v < V; v++) logp[v] = -INFINITY;
                logp[a->pad_id] = 0.0;
            } else {
                const real *x = a->logits + r * V;
#if CT_DTYPE_IS_F32
                double *row64 = logp + V;
                for (ct_int v = 0; v < V; v++) row64[v] = (double)x[v];
                log_softmax_row_f64(logp, row64, V);
#else
                log_softmax_row_f64(logp, x, V);
#endif
            }
            double s = a->scores[r];
            for (ct_int v = 0; v < V; v++) ct_beam_offer(&best, s + logp[v], (int64_t)i * V + v);
        }
        for (ct_int j = 0; j < k; j++) { /* k * V >= k candidates: all k slots were filled */
            int64_t c = a->origin[b * k + j];
            a->origin[b * k + j] = b * k + c / V;
            a->tok[b * k + j] = c % V;
        }
    }
    free(logp);
}

/* beam_step: one re-ranking of batched beam search (beam_search, ctransformer/decoding.py)
 *   logits (B * k, V): the next-token logits of B sources' k beams each (V >= 1, k >= 1)
 *   scores (B, k) float64: each beam's summed log-probability (-inf: no such beam yet)
 *   done (B * k): nonzero for a finished beam; pad_id in [0, V)
 *   candidate c = i * V + v (i < k, v < V) of source b, beam r = b * k + i:
 *     value(c) = scores[b, i] + logp_r[v]
 *     logp_r   = log_softmax_row of logits[r] in float64, or, for a finished
 *                beam, 0 at pad_id and -inf elsewhere (its one continuation)
 *   -> the k best candidates c_0, .., c_{k-1} of each source in the order of
 *      ct_beam_before (a stable argsort of -value, NaN last):
 *      new_scores[b, j] = value(c_j), origin[b * k + j] = b * k + c_j / V,
 *      tok[b * k + j] = c_j % V.
 * The same values as NumPy's log_softmax_forward(logits.astype(float64))
 * plus scores and a stable argsort; one pass over the candidates instead of
 * a float64 copy, the log-softmax, the (B, k V) candidates and a top-k per
 * source (~0.3 ms a token of bench_transformer (c)'s beam, k = 4, V 8000).
 * Sources may run on the pool's threads, each whole on one.
 * Returns 0, or -1 when out of memory. */
int FN(beam_step)(double *new_scores, int64_t *origin, int64_t *tok, const real *logits, const double *scores,
                  const unsigned char *done, ct_int B, ct_int k, ct_int V, ct_int pad_id)
{
    FN(beam_args) a = {new_scores, origin, tok, logits, scores, done, k, V, pad_id, 0};
    ct_parallel_rows(B, 20.0 * B * k * V, FN(beam_sources), &a);
    return a.failed ? -1 : 0;
}

#endif
