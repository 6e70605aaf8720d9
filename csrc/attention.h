/* attention.h - prototypes of attention.c (a template: see ct_template.h).
 *
 * Shapes used throughout:
 *   B batch, H heads, Tq queries, Tk keys, Dh query/key head dim, Dv value head dim,
 *   E embed dim (E = H * Dh in multi-head attention), Ek / Ev key / value input dims. */
#ifndef CT_ATTENTION_COMMON
#define CT_ATTENTION_COMMON
#include "ct.h"

/* How a mask takes part in the scores. */
enum { CT_MASK_NONE = 0, CT_MASK_BOOL = 1, CT_MASK_ADD = 2 };

/* A mask broadcast over (B, H, Tq, Tk): element (b, h, i, j) lives at
 * data[b * stride[0] + h * stride[1] + i * stride[2] + j * stride[3]]
 * (a stride of 0 broadcasts that axis).
 *   CT_MASK_BOOL: data is uint8 (NumPy bool), nonzero = the key takes part;
 *   CT_MASK_ADD:  data is `real` (the dtype of q), added to the scores. */
typedef struct {
    int kind;
    const void *data;
    ct_int stride[4];
} ct_attn_mask;

/* Everything about one attention call except the arrays.
 *   scale      multiplies q k^T (1/sqrt(Dh) by default, chosen by the caller)
 *   is_causal  key j is hidden from query i when j > i (torch's top-left tril)
 *   dropout_p  probability of dropping a weight; kept weights are scaled by 1/(1-p);
 *              element (b, h, i, j) is dropped unless ct_random_kept(seed, flat, ...) (ct.h),
 *              flat = ((b * H + h) * Tq + i) * Tk + j */
typedef struct {
    ct_attn_mask mask;
    int is_causal;
    double scale;
    double dropout_p;
    uint64_t seed;
} ct_attn_opts;

/* Shape and token layout of packed multi-head attention (mha_packed_*).
 *   seq_first  activations are (T, B, E) (torch's batch_first=False), else (B, T, E)
 *   self_attn  keys and values are projected from the query input (one (3E) projection);
 *              otherwise from a second input, the memory (cross-attention, key = value) */
typedef struct {
    ct_int B, Tq, Tk, E, H;
    int seq_first, self_attn;
} ct_mha_shape;
#endif

#ifndef CT_TEMPLATE_PASS
#define CT_TEMPLATE_FILE "attention.h"
#include "ct_template.h"
#else
/* Weights of multi-head attention (torch.nn.MultiheadAttention layout: out x in).
 * Biases may be NULL. */
typedef struct {
    const real *wq, *wk, *wv;  /* (E, E), (E, Ek), (E, Ev) */
    const real *bq, *bk, *bv;  /* (E) or NULL */
    const real *wo, *bo;       /* (E, E), (E) or NULL */
} FN(mha_weights);

/* Gradient accumulators of multi-head attention (every one is += into; a NULL
 * bias gradient is skipped). */
typedef struct {
    real *dquery, *dkey, *dvalue;  /* (B, Tq, E), (B, Tk, Ek), (B, Tk, Ev) */
    real *dwq, *dwk, *dwv;
    real *dbq, *dbk, *dbv;
    real *dwo, *dbo;
} FN(mha_grads);

void FN(sdpa_forward)(real *out, real *probs, const real *q, const real *k, const real *v,
                      const ct_attn_opts *opts, ct_int B, ct_int H, ct_int Tq, ct_int Tk,
                      ct_int Dh, ct_int Dv);
int FN(sdpa_backward)(real *dq, real *dk, real *dv, const real *dout, const real *q,
                      const real *k, const real *v, const real *probs, const ct_attn_opts *opts,
                      ct_int B, ct_int H, ct_int Tq, ct_int Tk, ct_int Dh, ct_int Dv);
int FN(mha_forward)(real *out, real *qh, real *kh, real *vh, real *probs, real *ctx,
                    const real *query, const real *key, const real *value,
                    const FN(mha_weights) *w, const ct_attn_opts *opts, ct_int B, ct_int Tq,
                    ct_int Tk, ct_int E, ct_int Ek, ct_int Ev, ct_int H);
int FN(mha_backward)(const FN(mha_grads) *g, const real *dout, const real *query,
                     const real *key, const real *value, const FN(mha_weights) *w,
                     const real *qh, const real *kh, const real *vh, const real *probs,
                     const real *ctx, const ct_attn_opts *opts, ct_int B, ct_int Tq, ct_int Tk,
                     ct_int E, ct_int Ek, ct_int Ev, ct_int H);
int FN(mha_packed_forward)(real *out, real *proj_q, real *proj_kv, real *probs, real *ctx,
                           const real *xq, const real *xkv, const real *w_in, const real *b_in,
                            const real *wo, const real *bo, const ct_attn_opts *o,
                            const ct_mha_shape *s);
int FN(mha_packed_backward)(real *dxq, real *dxkv, real *dw_in, real *db_in, real *dwo, real *dbo,
                            const real *dout, const real *xq, const real *xkv, const real *w_in,
                            const real *wo, const real *proj_q, const real *proj_kv,
                            const real *probs, const real *ctx, const ct_attn_opts *o,
                            const ct_mha_shape *s, int accumulate);
void FN(positional_encoding)(real *pe, ct_int max_len, ct_int d_model);

/* attention_gemm.c: the slices' products (C = alpha op(A) op(B) + beta C, row-major) */
void FN(attn_gemm)(enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, ct_int M, ct_int N, ct_int K, real alpha,
                   const real *A, ct_int lda, const real *Bm, ct_int ldb, real beta, real *C, ct_int ldc);
#endif
