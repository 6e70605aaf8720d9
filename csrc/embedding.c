/* embedding.c - table lookup (nn.Embedding) and its scatter-add gradient.
 * Ids are validated by the caller (bindings) before any row is read. */
#ifndef CT_TEMPLATE_PASS
#define CT_TEMPLATE_FILE "embedding.c"
#include "ct_template.h"
#else

/* embedding_forward
 *   ids    (M)     int64, every id in [0, V)   (any leading shape, flattened)
 *   weight (V, D)
 *   out    (M, D)  out[m] = weight[ids[m]]
 */
void FN(embedding_forward)(real *out, const int64_t *ids, const real *weight, ct_int M, ct_int D)
{
    if (D == 0) return;
    for (ct_int m = 0; m < M; m++)
        memcpy(out + m * D, weight + ids[m] * D, (size_t)D * sizeof(real));
}

/* embedding_backward (accumulates)
 *   dout    (M, D), ids (M) in [0, V)
 *   dweight (V, D)  dweight[ids[m]] += dout[m] for every m, so a repeated id
 *                   receives the sum of its rows; the row padding_idx gets
 *                   nothing (padding_idx < 0: no padding row)
 */
CT_VECTOR_CLONES
void FN(embedding_backward)(real *dweight, const real *dout, const int64_t *ids, ct_int M,
                            ct_int D, int64_t padding_idx)
{
    for (ct_int m = 0; m < M; m++) {
        if (ids[m] == padding_idx) continue;
        real *restrict row = dweight + ids[m] * D;
        const real *restrict g = dout + m * D;
        for (ct_int d = 0; d < D; d++) row[d] += g[d];
    }
}

#endif
