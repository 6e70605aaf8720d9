/* dropout.c - inverted dropout with a counter-based mask.
 *
 * Element i is kept iff u >= p with u the uniform of counter offset + i
 * (ct_random_kept in csrc/ct.h), a pure function of (seed, offset + i): the mask of a big
 * array is the concatenation of the masks of its parts computed with the
 * matching offsets, whatever order or thread visits the elements.  Kept
 * values are scaled by 1 / (1 - p) so the expectation is unchanged.
 * Values are MULTIPLIED by 0 or the scale (as torch does), so a NaN input
 * stays NaN even where it is dropped. */
#ifndef CT_TEMPLATE_PASS
#define CT_TEMPLATE_FILE "dropout.c"
#include "ct_template.h"
#else
#include "ct_math.h"

/* 1 / (1 - p), or 0 when p = 1 (nothing is kept, and 1/0 would be inf). */
static real FN(dropout_scale)(double p) { return p < 1 ? (real)(1.0 / (1.0 - p)) : (real)0; }

/* out[i] = inp[i] * (mask[i] ? scale : 0)   (a product: NaN stays NaN) */
CT_INLINE void FN(dropout_scale_loop)(real *restrict out, const real *restrict inp,
                                      const uint8_t *restrict mask, ct_int n, real scale)
{
    for (ct_int i = 0; i < n; i++) out[i] = inp[i] * (mask[i] ? scale : (real)0);
}

typedef struct {
    real *out;
    uint8_t *mask;
    const real *inp;
    double p;
    uint64_t seed, offset;
} FN(dropout_args);

/* dropout_range: elements offset .. offset + n - 1 of a dropout, serially
 *   inp (n), out (n) apart from inp, mask (n):
 *   mask[i] = ct_random_kept(seed, offset + i), out[i] = inp[i] * mask[i] / (1 - p)
 * Two passes, each vectorised: the mask (ct_random_keep_range), then the
 * scaling.  The mask is counter-based, so a part's mask is
 * the slice of the whole one whichever thread makes it: dropout_forward's
 * blocks, and the fused feed-forward's (fused.c) chunks of rows. */
CT_RANDOM_CLONES void FN(dropout_range)(real *out, uint8_t *mask, const real *inp, ct_int n, double p,
                                        uint64_t seed, uint64_t offset)
{
    ct_random_keep_range(mask, n, seed, offset, ct_random_threshold(p));
    FN(dropout_scale_loop)(out, inp, mask, n, FN(dropout_scale)(p));
}

/* Elements [i0, i1) of dropout_forward (a block of ct_parallel_rows). */
static void FN(dropout_forward_range)(void *ctx, ptrdiff_t i0, ptrdiff_t i1)
{
    const FN(dropout_args) *a = ctx;
    FN(dropout_range)(a->out + i0, a->mask + i0, a->inp + i0, (ct_int)(i1 - i0), a->p, a->seed,
                      a->offset + (uint64_t)i0);
}

/* dropout_forward
 *   inp (n), any shape flattened; 0 <= p <= 1
 *   mask (n) uint8 (a bool array in Python): 1 where kept
 *   out (n) = inp * mask / (1 - p)
 */
void FN(dropout_forward)(real *out, uint8_t *mask, const real *inp, ct_int n, double p, uint64_t seed,
                         uint64_t offset)
{
    FN(dropout_args) a = {out, mask, inp, p, seed, offset};
    ct_parallel_rows(n, 8.0 * n, FN(dropout_forward_range), &a);
}

typedef struct {
    real *dinp;
    const real *dout;
    const uint8_t *mask;
    double p;
    int accumulate;
} FN(dropout_grad_args);

/* Elements [i0, i1) of dropout_backward (a block of ct_parallel_rows). */
static CT_VECTOR_CLONES void FN(dropout_backward_range)(void *ctx, ptrdiff_t i0, ptrdiff_t i1)
{
    const FN(dropout_grad_args) *a = ctx;
    real *restrict dinp = a->dinp;
    const real *restrict dout = a->dout;
    const uint8_t *restrict mask = a->mask;
    real scale = FN(dropout_scale)(a->p);
    if (a->accumulate)
        for (ptrdiff_t i = i0; i < i1; i++) dinp[i] += dout[i] * (mask[i] ? scale : (real)0);
    else
        for (ptrdiff_t i = i0; i < i1; i++) dinp[i] = dout[i] * (mask[i] ? scale : (real)0);
}

/* dropout_backward
 *   dout (n), mask (n) from forward
 *   dinp (n) += dout * mask / (1 - p)   (accumulate 1; 0 writes it: a fresh
 *   buffer needs no zeros first, a pass over memory that cost as much as this one)
 * In blocks on the pool (it ran on the caller alone while the worker waited).
 */
void FN(dropout_backward)(real *dinp, const real *dout, const uint8_t *mask, ct_int n, double p,
                          int accumulate)
{
    FN(dropout_grad_args) a = {dinp, dout, mask, p, accumulate};
    ct_parallel_rows(n, 3.0 * n, FN(dropout_backward_range), &a);
}

#endif
