/* bind_attention.c - the custom bodies of the bindings of attention.c (their
 * signatures are in kernel_table.py). */
#include "../attention.h"

/* ---- shared argument handling ------------------------------------------ */

/* The mask argument: None, a bool array (True = the key takes part) or an
 * array of the dtype of the scores (added to them), broadcastable (right
 * aligned) to full = (B, H, Tq, Tk).  Fills m; the array is held. */
static int parse_mask(ct_held *held, PyObject *obj, const char *fn, int t, const npy_intp full[4],
                      const char *ref, ct_attn_mask *m)
{
    static const char *axis_names[4] = {"batch", "heads", "Tq", "Tk"};
    memset(m, 0, sizeof(*m));
    if (obj == NULL || obj == Py_None) return 0;
    if (!PyArray_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s: mask must be a numpy.ndarray or None, got %s", fn,
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    int mt = PyArray_TYPE((PyArrayObject *)obj);
    if (mt != NPY_BOOL && mt != t) {
        PyObject *descr = PyObject_Str((PyObject *)PyArray_DESCR((PyArrayObject *)obj));
        PyErr_Format(PyExc_TypeError, "%s: mask must have dtype bool or %s (the dtype of %s), got %s",
                     fn, t == NPY_FLOAT32 ? "float32" : "float64", ref,
                     descr ? PyUnicode_AsUTF8(descr) : "?");
        Py_XDECREF(descr);
        return -1;
    }
    PyArrayObject *a = ct_input(held, obj, fn, "mask", mt, 1, 4, 0);
    if (a == NULL) return -1;
    int nd = PyArray_NDIM(a);
    npy_intp stride = 1;
    for (int ax = nd - 1; ax >= 0; ax--) {
        int full_ax = 4 - nd + ax;
        npy_intp size = PyArray_DIM(a, ax);
        if (size != full[full_ax] && size != 1) {
            PyErr_Format(PyExc_ValueError,
                         "%s: mask.shape[%d] must be %zd (%s) or 1 to broadcast to "
                         "(batch, heads, Tq, Tk) = (%zd, %zd, %zd, %zd), got %zd",
                         fn, ax, (Py_ssize_t)full[full_ax], axis_names[full_ax],
                         (Py_ssize_t)full[0], (Py_ssize_t)full[1], (Py_ssize_t)full[2],
                         (Py_ssize_t)full[3], (Py_ssize_t)size);
            return -1;
        }
        m->stride[full_ax] = size == 1 ? 0 : stride;
        stride *= size;
    }
    m->kind = mt == NPY_BOOL ? CT_MASK_BOOL : CT_MASK_ADD;
    m->data = PyArray_DATA(a);
    return 0;
}

/* is_causal, dropout_p, seed and the scale (default 1/sqrt(Dh)) into o (the mask is parse_mask's). */
static int parse_opts(PyObject *o_scale, int is_causal, double dropout_p,
                      unsigned long long seed, npy_intp Dh, const char *fn, ct_attn_opts *o)
{
    o->is_causal = is_causal;
    o->seed = (uint64_t)seed;
    if (ct_check_probability(dropout_p, fn, "dropout_p")) return -1;
    o->dropout_p = dropout_p;
    return ct_parse_scale(o_scale, Dh, fn, &o->scale);
}

/* ---- multi-head attention ---------------------------------------------- */

typedef struct {
    PyArrayObject *query, *key, *value, *wq, *wk, *wv, *bq, *bk, *bv, *wo, *bo;
    npy_intp B, Tq, Tk, E, Ek, Ev, H;
    int t;
    ct_attn_opts opts;
} mha_args;

/* A weight (rows, cols) of dtype t; what_cols names where cols comes from. */
static PyArrayObject *weight_arg(ct_held *held, PyObject *obj, const char *fn, const char *arg,
                                 int t, npy_intp rows, npy_intp cols, const char *what_cols)
{
    PyArrayObject *w = ct_input(held, obj, fn, arg, t, 2, 2, 0);
    if (w == NULL || ct_check_dim(w, fn, arg, 0, rows, "embed_dim") ||
        ct_check_dim(w, fn, arg, 1, cols, what_cols))
        return NULL;
    return w;
}

/* A bias (E) of dtype t or None (NULL without error). */
static int bias_arg(ct_held *held, PyObject *obj, const char *fn, const char *arg, int t,
                    npy_intp E, PyArrayObject **out)
{
    *out = ct_input(held, obj, fn, arg, t, 1, 1, 1);
    if (*out == NULL) return PyErr_Occurred() ? -1 : 0;
    return ct_check_dim(*out, fn, arg, 0, E, "embed_dim");
}

/* query (B, Tq, E), key (B, Tk, Ek), value (B, Tk, Ev), the eight weights,
 * num_heads, mask and options. */
static int parse_mha(ct_held *held, const char *fn, PyObject *const o[11], long long num_heads,
                     PyObject *o_mask, int is_causal, double dropout_p, unsigned long long seed,
                     mha_args *a)
{
    a->query = ct_input(held, o[0], fn, "query", CT_ANY_FLOAT, 3, 3, 0);
    if (a->query == NULL) return -1;
    a->t = PyArray_TYPE(a->query);
    a->B = PyArray_DIM(a->query, 0), a->Tq = PyArray_DIM(a->query, 1);
    a->E = PyArray_DIM(a->query, 2);
    if (ct_check_positive(num_heads, fn, "num_heads", 0)) return -1;
    a->H = (npy_intp)num_heads;
    if (a->E % a->H != 0) {
        PyErr_Format(PyExc_ValueError,
                     "%s: embed_dim (query.shape[2] = %zd) must be divisible by num_heads (%lld)",
                     fn, (Py_ssize_t)a->E, num_heads);
        return -1;
    }
    a->key = ct_input(held, o[1], fn, "key", a->t, 3, 3, 0);
    if (a->key == NULL || ct_check_dim(a->key, fn, "key", 0, a->B, "query.shape[0], the batch"))
        return -1;
    a->Tk = PyArray_DIM(a->key, 1), a->Ek = PyArray_DIM(a->key, 2);
    a->value = ct_input(held, o[2], fn, "value", a->t, 3, 3, 0);
    if (a->value == NULL ||
        ct_check_dim(a->value, fn, "value", 0, a->B, "query.shape[0], the batch") ||
        ct_check_dim(a->value, fn, "value", 1, a->Tk, "key.shape[1], the keys"))
        return -1;
    a->Ev = PyArray_DIM(a->value, 2);
    if (!(a->wq = weight_arg(held, o[3], fn, "q_weight", a->t, a->E, a->E, "query.shape[2]")) ||
        !(a->wk = weight_arg(held, o[4], fn, "k_weight", a->t, a->E, a->Ek, "key.shape[2]")) ||
        !(a->wv = weight_arg(held, o[5], fn, "v_weight", a->t, a->E, a->Ev, "value.shape[2]")) ||
        bias_arg(held, o[6], fn, "q_bias", a->t, a->E, &a->bq) ||
        bias_arg(held, o[7], fn, "k_bias", a->t, a->E, &a->bk) ||
        bias_arg(held, o[8], fn, "v_bias", a->t, a->E, &a->bv) ||
        !(a->wo = weight_arg(held, o[9], fn, "out_weight", a->t, a->E, a->E, "embed_dim")) ||
        bias_arg(held, o[10], fn, "out_bias", a->t, a->E, &a->bo))
        return -1;
    npy_intp full[4] = {a->B, a->H, a->Tq, a->Tk};
    if (parse_mask(held, o_mask, fn, a->t, full, "query", &a->opts.mask)) return -1;
    return parse_opts(NULL, is_causal, dropout_p, seed, a->E / a->H, fn, &a->opts);
}

/* The weights of `a` as the kernel's struct of dtype suffix sfx / element type T. */
#define MHA_WEIGHTS(sfx, T, a)                                                             \
    (CT_CAT(mha_weights, sfx))                                                             \
    {                                                                                      \
        (const T *)PyArray_DATA((a).wq), (const T *)PyArray_DATA((a).wk),                  \
            (const T *)PyArray_DATA((a).wv), (const T *)CT_DATA((a).bq),                   \
            (const T *)CT_DATA((a).bk), (const T *)CT_DATA((a).bv),                        \
            (const T *)PyArray_DATA((a).wo), (const T *)CT_DATA((a).bo)                    \
    }

/* mha_forward(query, key, value, q_weight, k_weight, v_weight, q_bias, k_bias, v_bias,
 *             out_weight, out_bias, num_heads, mask=None, is_causal=False, dropout_p=0.0,
 *             seed=0) -> (out (B, Tq, E), q (B, H, Tq, Dh), k (B, H, Tk, Dh),
 *                         v (B, H, Tk, Dh), probs (B, H, Tq, Tk), context (B, Tq, E)) */
static PyObject *mha_forward_impl(const mha_forward_args *call, const char *fn)
{
    PyObject *const o[11] = {call->o_query, call->o_key, call->o_value, call->o_q_weight,
                             call->o_k_weight, call->o_v_weight, call->o_q_bias, call->o_k_bias,
                             call->o_v_bias, call->o_out_weight, call->o_out_bias};
    PyObject *o_mask = call->o_mask;
    long long num_heads = call->num_heads;
    int is_causal = call->is_causal;
    double dropout_p = call->dropout_p;
    unsigned long long seed = call->seed;
    ct_held held = {0};
    mha_args a;
    if (parse_mha(&held, fn, o, num_heads, o_mask, is_causal, dropout_p, seed, &a)) goto fail;
    npy_intp Dh = a.E / a.H;
    npy_intp out_shape[3] = {a.B, a.Tq, a.E}, qh_shape[4] = {a.B, a.H, a.Tq, Dh};
    npy_intp kh_shape[4] = {a.B, a.H, a.Tk, Dh}, p_shape[4] = {a.B, a.H, a.Tq, a.Tk};
    PyArrayObject *out = ct_empty(&held, a.t, 3, out_shape), *ctx = ct_empty(&held, a.t, 3, out_shape);
    PyArrayObject *qh = ct_empty(&held, a.t, 4, qh_shape), *kh = ct_empty(&held, a.t, 4, kh_shape);
    PyArrayObject *vh = ct_empty(&held, a.t, 4, kh_shape), *probs = ct_empty(&held, a.t, 4, p_shape);
    if (!out || !ctx || !qh || !kh || !vh || !probs) goto fail;
    int status;
    CT_BEGIN_KERNEL
    if (a.t == NPY_FLOAT32) {
        mha_weights_f32 w = MHA_WEIGHTS(_f32, float, a);
        status = mha_forward_f32(PyArray_DATA(out), PyArray_DATA(qh), PyArray_DATA(kh),
                                 PyArray_DATA(vh), PyArray_DATA(probs), PyArray_DATA(ctx),
                                 PyArray_DATA(a.query), PyArray_DATA(a.key), PyArray_DATA(a.value),
                                 &w, &a.opts, a.B, a.Tq, a.Tk, a.E, a.Ek, a.Ev, a.H);
    } else {
        mha_weights_f64 w = MHA_WEIGHTS(_f64, double, a);
        status = mha_forward_f64(PyArray_DATA(out), PyArray_DATA(qh), PyArray_DATA(kh),
                                 PyArray_DATA(vh), PyArray_DATA(probs), PyArray_DATA(ctx),
                                 PyArray_DATA(a.query), PyArray_DATA(a.key), PyArray_DATA(a.value),
                                 &w, &a.opts, a.B, a.Tq, a.Tk, a.E, a.Ek, a.Ev, a.H);
    }
    CT_END_KERNEL
    if (status) {
        PyErr_NoMemory();
        goto fail;
    }
    return ct_finish(&held, ct_results(6, out, qh, kh, vh, probs, ctx));
fail:
    return ct_finish(&held, NULL);
}

/* One saved array of mha_forward: dtype t and exactly `shape`. */
static PyArrayObject *saved_arg(ct_held *held, PyObject *obj, const char *fn, const char *arg,
                                int t, int nd, const npy_intp *shape)
{
    PyArrayObject *s = ct_input(held, obj, fn, arg, t, nd, nd, 0);
    if (s == NULL || ct_check_dims(s, fn, arg, nd, shape, "its shape in mha_forward", 0)) return NULL;
    return s;
}

/* The kernel's gradient struct of dtype suffix sfx / element type T; g[] in the
 * order dquery, dkey, dvalue, dwq, dwk, dwv, dbq, dbk, dbv, dwo, dbo. */
#define MHA_GRADS(sfx, T, g)                                                               \
    (CT_CAT(mha_grads, sfx))                                                               \
    {                                                                                      \
        (T *)CT_DATA(g[0]), (T *)CT_DATA(g[1]), (T *)CT_DATA(g[2]), (T *)CT_DATA(g[3]),     \
            (T *)CT_DATA(g[4]), (T *)CT_DATA(g[5]), (T *)CT_DATA(g[6]), (T *)CT_DATA(g[7]), \
            (T *)CT_DATA(g[8]), (T *)CT_DATA(g[9]), (T *)CT_DATA(g[10])                    \
    }

/* mha_backward(dout, query, key, value, q_weight, k_weight, v_weight, q_bias, k_bias,
 *              v_bias, out_weight, out_bias, num_heads, q, k, v, probs, context,
 *              mask=None, is_causal=False, dropout_p=0.0, seed=0,
 *              dquery=None, dkey=None, dvalue=None, dq_weight=None, dk_weight=None,
 *              dv_weight=None, dq_bias=None, dk_bias=None, dv_bias=None,
 *              dout_weight=None, dout_bias=None)
 *   -> (dquery, dkey, dvalue, dq_weight, dk_weight, dv_weight, dq_bias | None,
 *       dk_bias | None, dv_bias | None, dout_weight, dout_bias | None)
 *   Given gradient arrays are accumulated into; bias gradients are None when the bias is. */
static PyObject *mha_backward_impl(const mha_backward_args *call, const char *fn)
{
    static const char *gnames[11] = {"dquery", "dkey", "dvalue", "dq_weight", "dk_weight",
                                     "dv_weight", "dq_bias", "dk_bias", "dv_bias", "dout_weight",
                                     "dout_bias"};
    PyObject *const o[11] = {call->o_query, call->o_key, call->o_value, call->o_q_weight,
                             call->o_k_weight, call->o_v_weight, call->o_q_bias, call->o_k_bias,
                             call->o_v_bias, call->o_out_weight, call->o_out_bias};
    PyObject *o_mask = call->o_mask;
    long long num_heads = call->num_heads;
    PyObject *o_dout = call->o_dout;
    PyObject *const os[5] = {call->o_q, call->o_k, call->o_v, call->o_probs, call->o_context};
    PyObject *const og[11] = {call->o_dquery, call->o_dkey, call->o_dvalue, call->o_dq_weight,
                              call->o_dk_weight, call->o_dv_weight, call->o_dq_bias, call->o_dk_bias,
                              call->o_dv_bias, call->o_dout_weight, call->o_dout_bias};
    int is_causal = call->is_causal;
    double dropout_p = call->dropout_p;
    unsigned long long seed = call->seed;
    ct_held held = {0};
    mha_args a;
    if (parse_mha(&held, fn, o, num_heads, o_mask, is_causal, dropout_p, seed, &a)) goto fail;
    npy_intp Dh = a.E / a.H;
    npy_intp out_shape[3] = {a.B, a.Tq, a.E}, qh_shape[4] = {a.B, a.H, a.Tq, Dh};
    npy_intp kh_shape[4] = {a.B, a.H, a.Tk, Dh}, p_shape[4] = {a.B, a.H, a.Tq, a.Tk};
    PyArrayObject *dout = saved_arg(&held, o_dout, fn, "dout", a.t, 3, out_shape);
    PyArrayObject *qh = dout ? saved_arg(&held, os[0], fn, "q", a.t, 4, qh_shape) : NULL;
    PyArrayObject *kh = qh ? saved_arg(&held, os[1], fn, "k", a.t, 4, kh_shape) : NULL;
    PyArrayObject *vh = kh ? saved_arg(&held, os[2], fn, "v", a.t, 4, kh_shape) : NULL;
    PyArrayObject *probs = vh ? saved_arg(&held, os[3], fn, "probs", a.t, 4, p_shape) : NULL;
    PyArrayObject *ctx = probs ? saved_arg(&held, os[4], fn, "context", a.t, 3, out_shape) : NULL;
    if (ctx == NULL) goto fail;
    /* Gradients shaped like the inputs; bias gradients only for biases given. */
    PyArrayObject *like[11] = {a.query, a.key, a.value, a.wq, a.wk, a.wv, a.bq, a.bk, a.bv, a.wo, a.bo};
    PyArrayObject *g[11];
    for (int i = 0; i < 11; i++) {
        g[i] = NULL;
        if (like[i] == NULL) continue;
        if (!(g[i] = ct_grad_like(&held, og[i], fn, gnames[i], like[i]))) goto fail;
    }
    int status;
    CT_BEGIN_KERNEL
    if (a.t == NPY_FLOAT32) {
        mha_weights_f32 w = MHA_WEIGHTS(_f32, float, a);
        mha_grads_f32 gr = MHA_GRADS(_f32, float, g);
        status = mha_backward_f32(&gr, PyArray_DATA(dout), PyArray_DATA(a.query),
                                  PyArray_DATA(a.key), PyArray_DATA(a.value), &w, PyArray_DATA(qh),
                                  PyArray_DATA(kh), PyArray_DATA(vh), PyArray_DATA(probs),
                                  PyArray_DATA(ctx), &a.opts, a.B, a.Tq, a.Tk, a.E, a.Ek, a.Ev, a.H);
    } else {
        mha_weights_f64 w = MHA_WEIGHTS(_f64, double, a);
        mha_grads_f64 gr = MHA_GRADS(_f64, double, g);
        status = mha_backward_f64(&gr, PyArray_DATA(dout), PyArray_DATA(a.query),
                                  PyArray_DATA(a.key), PyArray_DATA(a.value), &w, PyArray_DATA(qh),
                                  PyArray_DATA(kh), PyArray_DATA(vh), PyArray_DATA(probs),
                                  PyArray_DATA(ctx), &a.opts, a.B, a.Tq, a.Tk, a.E, a.Ek, a.Ev, a.H);
    }
    CT_END_KERNEL
    if (status) {
        PyErr_NoMemory();
        goto fail;
    }
    return ct_finish(&held, ct_results(11, g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7], g[8], g[9], g[10]));
fail:
    return ct_finish(&held, NULL);
}

/* ---- packed multi-head attention ------------------------------------- */

typedef struct {
    PyArrayObject *query, *kv, *w_in, *b_in, *wo, *bo;
    ct_mha_shape shape;
    int t;
    ct_attn_opts opts;
} packed_args;

/* query (Tq, B, E) when seq_first else (B, Tq, E); kv likewise (Tk, B, E) / (B, Tk, E), None
 * for self-attention; in_proj_weight (3E, E), in_proj_bias (3E) or None, out_weight (E, E),
 * out_bias (E) or None; num_heads divides E; mask broadcastable to (B, H, Tq, Tk). */
static int parse_packed(ct_held *held, const char *fn, PyObject *const o[6], long long num_heads,
                        int self_attn, int seq_first, PyObject *o_mask, int is_causal,
                        double dropout_p, unsigned long long seed, packed_args *a)
{
    int bax = seq_first ? 1 : 0, tax = seq_first ? 0 : 1;
    const char *batch_what = seq_first ? "query.shape[1], the batch" : "query.shape[0], the batch";
    ct_mha_shape *s = &a->shape;
    a->query = ct_input(held, o[0], fn, "query", CT_ANY_FLOAT, 3, 3, 0);
    if (a->query == NULL) return -1;
    a->t = PyArray_TYPE(a->query);
    s->B = PyArray_DIM(a->query, bax), s->Tq = PyArray_DIM(a->query, tax);
    s->E = PyArray_DIM(a->query, 2);
    s->self_attn = self_attn, s->seq_first = seq_first;
    if (ct_check_positive(num_heads, fn, "num_heads", 0)) return -1;
    s->H = (ct_int)num_heads;
    if (s->E % s->H != 0) {
        PyErr_Format(PyExc_ValueError,
                     "%s: embed_dim (query.shape[2] = %zd) must be divisible by num_heads (%lld)",
                     fn, (Py_ssize_t)s->E, num_heads);
        return -1;
    }
    a->kv = NULL;
    s->Tk = s->Tq;
    if (self_attn && o[1] != Py_None) {
        PyErr_Format(PyExc_TypeError, "%s: kv must be None for self-attention, got %s", fn,
                     Py_TYPE(o[1])->tp_name);
        return -1;
    }
    if (!self_attn) {
        a->kv = ct_input(held, o[1], fn, "kv", a->t, 3, 3, 0);
        if (a->kv == NULL || ct_check_dim(a->kv, fn, "kv", bax, s->B, batch_what) ||
            ct_check_dim(a->kv, fn, "kv", 2, s->E, "query.shape[2], embed_dim"))
            return -1;
        s->Tk = PyArray_DIM(a->kv, tax);
    }
    a->w_in = ct_input(held, o[2], fn, "in_proj_weight", a->t, 2, 2, 0);
    if (a->w_in == NULL ||
        ct_check_dim(a->w_in, fn, "in_proj_weight", 0, 3 * s->E, "3 * embed_dim") ||
        ct_check_dim(a->w_in, fn, "in_proj_weight", 1, s->E, "embed_dim") ||
        bias_arg(held, o[3], fn, "in_proj_bias", a->t, 3 * s->E, &a->b_in) ||
        !(a->wo = weight_arg(held, o[4], fn, "out_weight", a->t, s->E, s->E, "embed_dim")) ||
        bias_arg(held, o[5], fn, "out_bias", a->t, s->E, &a->bo))
        return -1;
    npy_intp full[4] = {s->B, s->H, s->Tq, s->Tk};
    if (parse_mask(held, o_mask, fn, a->t, full, "query", &a->opts.mask)) return -1;
    return parse_opts(NULL, is_causal, dropout_p, seed, s->E / s->H, fn, &a->opts);
}

/* Shape (T, B, cols) / (B, T, cols) of a token-row array in the layout of a. */
static void packed_rows_shape(const packed_args *a, npy_intp T, npy_intp cols, npy_intp out[3])
{
    out[0] = a->shape.seq_first ? T : a->shape.B;
    out[1] = a->shape.seq_first ? a->shape.B : T;
    out[2] = cols;
}

/* mha_packed_forward(query, kv, in_proj_weight, in_proj_bias, out_weight, out_bias, num_heads,
 *                    self_attn, seq_first, mask=None, is_causal=False, dropout_p=0.0, seed=0)
 *   -> (out like query, proj_q (.., 3E | E), proj_kv (.., 2E) | None, probs (B, H, Tq, Tk)
 *       before dropout, context like query) */
static PyObject *mha_packed_forward_impl(const mha_packed_forward_args *call, const char *fn)
{
    PyObject *const o[6] = {call->o_query, call->o_kv, call->o_in_proj_weight, call->o_in_proj_bias,
                            call->o_out_weight, call->o_out_bias};
    PyObject *o_mask = call->o_mask;
    long long num_heads = call->num_heads;
    int self_attn = call->self_attn, seq_first = call->seq_first;
    int is_causal = call->is_causal;
    double dropout_p = call->dropout_p;
    unsigned long long seed = call->seed;
    ct_held held = {0};
    packed_args a;
    if (parse_packed(&held, fn, o, num_heads, self_attn, seq_first, o_mask, is_causal, dropout_p,
                     seed, &a))
        goto fail;
    ct_mha_shape *s = &a.shape;
    npy_intp out_shape[3], pq_shape[3], pkv_shape[3];
    npy_intp p_shape[4] = {s->B, s->H, s->Tq, s->Tk};
    packed_rows_shape(&a, s->Tq, s->E, out_shape);
    packed_rows_shape(&a, s->Tq, self_attn ? 3 * s->E : s->E, pq_shape);
    packed_rows_shape(&a, s->Tk, 2 * s->E, pkv_shape);
    PyArrayObject *out = ct_empty(&held, a.t, 3, out_shape), *ctx = ct_empty(&held, a.t, 3, out_shape);
    PyArrayObject *pq = ct_empty(&held, a.t, 3, pq_shape), *probs = ct_empty(&held, a.t, 4, p_shape);
    PyArrayObject *pkv = self_attn ? NULL : ct_empty(&held, a.t, 3, pkv_shape);
    if (!out || !ctx || !pq || !probs || (!self_attn && !pkv)) goto fail;
        CT_DISPATCH_ALLOC(a.t, mha_packed_forward, PyArray_DATA(out), PyArray_DATA(pq),
                       CT_DATA(pkv), PyArray_DATA(probs), PyArray_DATA(ctx), PyArray_DATA(a.query),
                       CT_DATA(a.kv), PyArray_DATA(a.w_in), CT_DATA(a.b_in), PyArray_DATA(a.wo),
                       CT_DATA(a.bo), &a.opts, s);
    return ct_finish(&held, ct_results(5, out, pq, pkv, probs, ctx));
fail:
    return ct_finish(&held, NULL);
}

/* mha_packed_backward(dout, query, kv, in_proj_weight, in_proj_bias, out_weight, out_bias,
 *                     num_heads, self_attn, seq_first, proj_q, proj_kv, probs, context,
 *                     mask=None, is_causal=False, dropout_p=0.0, seed=0, need_dquery=True,
 *                     need_dkv=True)
 *   -> (dquery | None, dkv | None, din_proj_weight, din_proj_bias | None, dout_weight,
 *       dout_bias | None), fresh arrays */
static PyObject *mha_packed_backward_impl(const mha_packed_backward_args *call, const char *fn)
{
    PyObject *const o[6] = {call->o_query, call->o_kv, call->o_in_proj_weight, call->o_in_proj_bias,
                            call->o_out_weight, call->o_out_bias};
    PyObject *o_mask = call->o_mask;
    long long num_heads = call->num_heads;
    int self_attn = call->self_attn, seq_first = call->seq_first;
    PyObject *o_dout = call->o_dout;
    PyObject *const os[4] = {call->o_proj_q, call->o_proj_kv, call->o_probs, call->o_context};
    int need_dq = call->need_dquery, need_dkv = call->need_dkv;
    int is_causal = call->is_causal;
    double dropout_p = call->dropout_p;
    unsigned long long seed = call->seed;
    ct_held held = {0};
    packed_args a;
    if (parse_packed(&held, fn, o, num_heads, self_attn, seq_first, o_mask, is_causal, dropout_p,
                     seed, &a))
        goto fail;
    ct_mha_shape *s = &a.shape;
    npy_intp out_shape[3], pq_shape[3], pkv_shape[3];
    npy_intp p_shape[4] = {s->B, s->H, s->Tq, s->Tk};
    packed_rows_shape(&a, s->Tq, s->E, out_shape);
    packed_rows_shape(&a, s->Tq, self_attn ? 3 * s->E : s->E, pq_shape);
    packed_rows_shape(&a, s->Tk, 2 * s->E, pkv_shape);
    PyArrayObject *dout = saved_arg(&held, o_dout, fn, "dout", a.t, 3, out_shape);
    PyArrayObject *pq = dout ? saved_arg(&held, os[0], fn, "proj_q", a.t, 3, pq_shape) : NULL;
    PyArrayObject *pkv = NULL;
    if (pq && !self_attn) pkv = saved_arg(&held, os[1], fn, "proj_kv", a.t, 3, pkv_shape);
    PyArrayObject *probs = pq && (self_attn || pkv) ? saved_arg(&held, os[2], fn, "probs", a.t, 4, p_shape) : NULL;
    PyArrayObject *ctx = probs ? saved_arg(&held, os[3], fn, "context", a.t, 3, out_shape) : NULL;
    if (ctx == NULL) goto fail;
    PyArrayObject *dq = need_dq ? ct_grad_like(&held, NULL, fn, "dquery", a.query) : NULL;
    PyArrayObject *dkv = need_dkv && !self_attn ? ct_grad_like(&held, NULL, fn, "dkv", a.kv) : NULL;
    PyArrayObject *dw_in = ct_grad_like(&held, NULL, fn, "din_proj_weight", a.w_in);
    PyArrayObject *db_in = a.b_in ? ct_grad_like(&held, NULL, fn, "din_proj_bias", a.b_in) : NULL;
    PyArrayObject *dwo = ct_grad_like(&held, NULL, fn, "dout_weight", a.wo);
    PyArrayObject *dbo = a.bo ? ct_grad_like(&held, NULL, fn, "dout_bias", a.bo) : NULL;
    if ((need_dq && !dq) || (need_dkv && !self_attn && !dkv) || !dw_in || (a.b_in && !db_in) ||
        !dwo || (a.bo && !dbo))
        goto fail;
    CT_DISPATCH_ALLOC(a.t, mha_packed_backward, CT_DATA(dq), CT_DATA(dkv),
                       PyArray_DATA(dw_in), CT_DATA(db_in), PyArray_DATA(dwo), CT_DATA(dbo),
                       PyArray_DATA(dout), PyArray_DATA(a.query), CT_DATA(a.kv),
                       PyArray_DATA(a.w_in), PyArray_DATA(a.wo), PyArray_DATA(pq), CT_DATA(pkv),
                       PyArray_DATA(probs), PyArray_DATA(ctx), &a.opts, s);
    PyArrayObject *res[6] = {dq, dkv, dw_in, db_in, dwo, dbo};
    return ct_finish(&held, ct_results(6, res[0], res[1], res[2], res[3], res[4], res[5]));
fail:
    return ct_finish(&held, NULL);
}
