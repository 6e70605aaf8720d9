/* decode.h - prototypes of decode.c (a template: see ct_template.h).
 *
 * Incremental (one token at a time) attention over a key/value cache:
 *   B rows (batch x beams), H heads, Tmax cache slots, Dh key head dim, Dv value head dim. */
#ifndef CT_DECODE_COMMON
#define CT_DECODE_COMMON
#include "ct.h"
/* One Transformer layer for decode_layer_step: its weights (arrays of the
 * dtype of x, as void *: the struct is the same for float32 and float64),
 * its shapes and options.  E = H * Dh features, F feed-forward features.
 *   self-attention:  w_qkv (3E, E) packed q, k, v; b_qkv (3E) or NULL;
 *                    w_o (E, E), b_o (E) or NULL (out_proj)
 *   cross-attention: w_cq NULL for a layer without one (an encoder layer used
 *                    causally); else w_cq (E, E), b_cq (E) or NULL (the query
 *                    projection), w_co (E, E), b_co (E) or NULL (out_proj),
 *                    mem_k, mem_v (B, H, S, Dh) the memory projected once,
 *                    mem_pad (B, S) nonzero = padded source position, or NULL
 *   feed-forward:    w1 (F, E), b1 (F) or NULL, act (CT_ACT_*, fused.h),
 *                    w2 (E, F), b2 (E) or NULL
 *   norms:           norm_w[i], norm_b[i] (E) or NULL, i = 0, 1 (, 2): after
 *                    (post-norm) or before (pre-norm, norm_first) the
 *                    self-attention, cross-attention (if any), feed-forward */
/* decode_linear's own loops take up to CT_FEW_ROWS_MAX rows (decode.c: 9 or more only for K > 256);
 * more go to the GEMM. */
#ifndef CT_FEW_ROWS_MAX
#define CT_FEW_ROWS_MAX 16
#endif
typedef struct {
    const void *w_qkv, *b_qkv, *w_o, *b_o;
    const void *w_cq, *b_cq, *w_co, *b_co, *mem_k, *mem_v;
    const unsigned char *mem_pad;
    const void *w1, *b1, *w2, *b2;
    const void *norm_w[3], *norm_b[3];
    double eps;
    int act, norm_first;
    ct_int B, E, H, Tmax, S, F;
} ct_decode_layer;

/* A whole decoder for decode_model_step: n_layers layers, layer i with its
 * self-attention cache caches[2i] (keys), caches[2i + 1] (values), each
 * (B, H_i, Tmax_i, Dh_i); every layer has the model's B and E.
 *   emb (V, E) the token embedding, scale its factor; pe (P, E) the
 *   positional table (row pos is added)
 *   norm_w, norm_b (E) or NULL: the final LayerNorm when with_norm (eps norm_eps)
 *   out_w (V_out, E), out_b (V_out) or NULL: the output Linear
 * Arrays of the layers' dtype, as void *. */
typedef struct {
    const ct_decode_layer *const *layers;
    void *const *caches;
    int n_layers;
    const void *emb, *pe, *norm_w, *norm_b, *out_w, *out_b;
    double scale, norm_eps;
    int with_norm;
    ct_int B, E, V_out;
} ct_decode_model;
#endif

#ifndef CT_TEMPLATE_PASS
#define CT_TEMPLATE_FILE "decode.h"
#include "ct_template.h"
#else
void FN(decode_linear)(real *out, const real *x, const real *w, const real *bias, ct_int M,
                       ct_int K, ct_int N);
void FN(kv_cache_append)(real *cache_k, real *cache_v, const real *k_t, const real *v_t,
                         const int64_t *pos, ct_int B, ct_int H, ct_int Tmax, ct_int Dh,
                         ct_int Dv);
int FN(attend_step)(real *out, const real *q_t, const real *cache_k, const real *cache_v,
                    const int64_t *lengths, const unsigned char *key_padding, double scale,
                    ct_int B, ct_int H, ct_int Tmax, ct_int Dh, ct_int Dv);
int FN(decode_layer_step)(real *out, const real *x, real *cache_k, real *cache_v, ct_int pos,
                          const ct_decode_layer *L);
int FN(decode_model_step)(real *logits, const int64_t *ids, ct_int pos, const ct_decode_model *m);
int FN(decode_model_greedy)(ct_int *last, int64_t *ys, unsigned char *done, ct_int L, ct_int start, ct_int stop,
                            ct_int pos0, int64_t eos_id, int64_t pad_id, const ct_decode_model *m);
/* decode_beam.c */
void FN(cache_reorder)(real *out, const real *cache, const int64_t *rows, ct_int B_out,
                       ct_int H, ct_int Tmax, ct_int D, ct_int length);
int FN(cache_permute)(real *cache, const int64_t *rows, ct_int B, ct_int H, ct_int Tmax, ct_int D, ct_int length);
int FN(beam_step)(double *new_scores, int64_t *origin, int64_t *tok, const real *logits, const double *scores,
                  const unsigned char *done, ct_int B, ct_int k, ct_int V, ct_int pad_id);
#endif
