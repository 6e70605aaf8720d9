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
#define CT_TEMPLATE_FILE "decode.c"
#include "ct_template.h"
#else

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
 * Returns the largest score (-inf when every key is hidden); *has_nan is set
 * when a score is NaN. */
static real FN(step_scores)(real *s, const real *q, const real *k, const unsigned char *pad,
                            real scale, ct_int len, ct_int Dh, int *has_nan)
{
    real max = -INFINITY;
    for (ct_int j = 0; j < len; j++) {
        acc_t dot = 0;
        const real *kj = k + j * Dh;
        for (ct_int d = 0; d < Dh; d++) dot += (acc_t)q[d] * kj[d];
        s[j] = (pad != NULL && pad[j]) ? -INFINITY : scale * (real)dot;
        if (s[j] > max) max = s[j];
        *has_nan |= s[j] != s[j];
    }
    return max;
}

/* out (Dv) = softmax(s) @ v over j < len; zeros when every key is hidden. */
static void FN(step_mix)(real *out, real *s, const real *v, const unsigned char *pad, real max,
                         int has_nan, ct_int len, ct_int Dv)
{
    memset(out, 0, (size_t)Dv * sizeof(real));
    if (max == -INFINITY && !has_nan) return;
    acc_t sum = 0;
    for (ct_int j = 0; j < len; j++) {
        s[j] = EXP(s[j] - max); /* NaN stays NaN and reaches out */
        sum += s[j];
    }
    real inv = (real)(1.0 / sum);
    for (ct_int j = 0; j < len; j++) {
        if (pad != NULL && pad[j]) continue; /* hidden: its value (even inf/NaN) must not leak */
        real p = s[j] * inv;
        const real *vj = v + j * Dv;
        for (ct_int d = 0; d < Dv; d++) out[d] += p * vj[d];
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
            int has_nan = 0;
            real max = FN(step_scores)(s, q_t + bh * Dh, cache_k + bh * Tmax * Dh, pad,
                                       (real)scale, len, Dh, &has_nan);
            FN(step_mix)(out + bh * Dv, s, cache_v + bh * Tmax * Dv, pad, max, has_nan, len, Dv);
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

#endif
