/* decode.c - incremental decoding: attention of one new query per row over a
 * key/value cache, forward only (decoding runs without gradients).
 *
 * Self-attention while generating: at step t the new token's key and value
 * are written into slot t of the cache (kv_cache_append), then its query
 * attends to slots 0..t (attend_step with length t + 1).  Cross-attention:
 * the encoder memory's keys/values fill the cache once per source and every
 * step attends to the first src_len[b] slots.  Beam search reorders rows of
 * the caches when beams are re-ranked (cache_reorder).
 *
 * For one (b, h), with q (Dh), keys k_j (Dh), values v_j (Dv), j < len:
 *     s_j = scale * q . k_j   (-inf where key_padding[b, j])
 *     p   = softmax(s)        all keys hidden (or len = 0): p = 0, out = 0
 *     out = sum_j p_j v_j */
#ifndef CT_TEMPLATE_PASS
#include "decode.h"
#include "linear.h"
#include "softmax.h"
#define CT_TEMPLATE_FILE "decode.c"
#include "ct_template.h"
#else

#if CT_DTYPE_IS_F32
#define CT_GEMV CT_BLAS(cblas_sgemv)
#else
#define CT_GEMV CT_BLAS(cblas_dgemv)
#endif

/* decode_linear: the Linear layers of one decoding step (a few rows)
 *   x (M, K), w (N, K), bias (N) or NULL  ->  out (M, N) = x w^T + bias
 * A single row is a matrix-vector product that streams every weight once:
 * GEMV reads them at about twice the bandwidth of a one-row GEMM, and the
 * step's time is that read.  Several rows use the GEMM (one pass for all). */
void FN(decode_linear)(real *out, const real *x, const real *w, const real *bias, ct_int M,
                       ct_int K, ct_int N)
{
    if (M != 1 || K == 0 || N == 0) {
        FN(linear_forward)(out, x, w, bias, M, K, N);
        return;
    }
    real beta = 0;
    if (bias != NULL) {
        memcpy(out, bias, (size_t)N * sizeof(real));
        beta = 1;
    }
    CT_GEMV(CT_ROWMAJOR, CT_NOTRANS, (int)N, (int)K, 1, w, (int)K, x, 1, beta, out, 1);
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

/* Scores of one (b, h): s_j = scale * q . k_j for j < len, -inf where padded. */
static void FN(step_scores)(real *s, const real *q, const real *k, const unsigned char *pad,
                            real scale, ct_int len, ct_int Dh)
{
    for (ct_int j = 0; j < len; j++) {
        acc_t dot = 0;
        const real *kj = k + j * Dh;
        for (ct_int d = 0; d < Dh; d++) dot += (acc_t)q[d] * kj[d];
        s[j] = (pad != NULL && pad[j]) ? -INFINITY : scale * (real)dot;
    }
}

/* out (Dv) = softmax(s) @ v over j < len (softmax_row of softmax.c, in place
 * in s); zeros when every key is hidden.  A NaN score makes every p NaN, which
 * reaches out. */
static void FN(step_mix)(real *out, real *s, const real *v, const unsigned char *pad, ct_int len,
                         ct_int Dv)
{
    memset(out, 0, (size_t)Dv * sizeof(real));
    if (FN(softmax_row)(s, len) == -INFINITY) return;
    for (ct_int j = 0; j < len; j++) {
        if (pad != NULL && pad[j]) continue; /* hidden: its value (even inf/NaN) must not leak */
        const real *vj = v + j * Dv;
        for (ct_int d = 0; d < Dv; d++) out[d] += s[j] * vj[d];
    }
}

/* attend_step
 *   q_t (B, H, Dh), cache_k (B, H, Tmax, Dh), cache_v (B, H, Tmax, Dv)
 *   lengths (B): row b attends to slots 0 .. lengths[b]-1 (0 <= lengths[b] <= Tmax)
 *   key_padding (B, Tmax) uint8 or NULL: nonzero = slot hidden (torch's key_padding_mask)
 *   out (B, H, Dv)
 *   Returns 0, or -1 when the (Tmax) score scratch cannot be allocated. */
int FN(attend_step)(real *out, const real *q_t, const real *cache_k, const real *cache_v,
                    const int64_t *lengths, const unsigned char *key_padding, double scale,
                    ct_int B, ct_int H, ct_int Tmax, ct_int Dh, ct_int Dv)
{
    real *s = malloc((size_t)CT_MAX(Tmax, 1) * sizeof(real));
    if (s == NULL) return -1;
    for (ct_int b = 0; b < B; b++) {
        ct_int len = (ct_int)lengths[b];
        const unsigned char *pad = key_padding ? key_padding + b * Tmax : NULL;
        for (ct_int h = 0; h < H; h++) {
            ct_int bh = b * H + h;
            FN(step_scores)(s, q_t + bh * Dh, cache_k + bh * Tmax * Dh, pad, (real)scale, len, Dh);
            FN(step_mix)(out + bh * Dv, s, cache_v + bh * Tmax * Dv, pad, len, Dv);
        }
    }
    free(s);
    return 0;
}

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

#undef CT_GEMV
#endif
