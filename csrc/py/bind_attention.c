/* bind_attention.c - the custom parts of the bindings of attention.c (the
 * bindings are generated from kernel_table.py): the mask (broadcast to
 * (B, H, Tq, Tk)), the options, the multi-head arguments and the calls with
 * the kernels' weight and gradient structs. */
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

/* num_heads > 0 divides embed_dim E (query.shape[2]). */
static int check_heads(long long num_heads, npy_intp E, const char *fn)
{
    if (ct_check_positive(num_heads, fn, "num_heads", 0)) return -1;
    if (E % num_heads == 0) return 0;
    PyErr_Format(PyExc_ValueError,
                 "%s: embed_dim (query.shape[2] = %zd) must be divisible by num_heads (%lld)", fn,
                 (Py_ssize_t)E, num_heads);
    return -1;
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
    if (check_heads(num_heads, a->E, fn)) return -1;
    a->H = (npy_intp)num_heads;
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

/* mha_forward_call_f32/_f64 and mha_backward_call_f32/_f64: the kernels, with
 * the weights of `a` and the gradients g[] (dquery, dkey, dvalue, dwq, dwk, dwv,
 * dbq, dbk, dbv, dwo, dbo; NULL for a bias not given) as the kernel's structs. */
#define MHA_CALLS(sfx, T)                                                                       \
    static int mha_forward_call##sfx(const mha_args *a, T *out, T *qh, T *kh, T *vh, T *probs,   \
                                     T *ctx)                                                    \
    {                                                                                           \
        CT_CAT(mha_weights, sfx) w = MHA_WEIGHTS(sfx, T, *a);                                   \
        return CT_CAT(mha_forward, sfx)(out, qh, kh, vh, probs, ctx, PyArray_DATA(a->query),     \
                                        PyArray_DATA(a->key), PyArray_DATA(a->value), &w,       \
                                        &a->opts, a->B, a->Tq, a->Tk, a->E, a->Ek, a->Ev, a->H); \
    }                                                                                           \
    static int mha_backward_call##sfx(const mha_args *a, PyArrayObject *const g[11],            \
                                      const T *dout, const T *qh, const T *kh, const T *vh,     \
                                      const T *probs, const T *ctx)                             \
    {                                                                                           \
        CT_CAT(mha_weights, sfx) w = MHA_WEIGHTS(sfx, T, *a);                                   \
        CT_CAT(mha_grads, sfx) gr = {CT_DATA(g[0]), CT_DATA(g[1]), CT_DATA(g[2]), CT_DATA(g[3]), \
                                     CT_DATA(g[4]), CT_DATA(g[5]), CT_DATA(g[6]), CT_DATA(g[7]), \
                                     CT_DATA(g[8]), CT_DATA(g[9]), CT_DATA(g[10])};             \
        return CT_CAT(mha_backward, sfx)(&gr, dout, PyArray_DATA(a->query), PyArray_DATA(a->key), \
                                         PyArray_DATA(a->value), &w, qh, kh, vh, probs, ctx,     \
                                         &a->opts, a->B, a->Tq, a->Tk, a->E, a->Ek, a->Ev, a->H); \
    }
MHA_CALLS(_f32, float)
MHA_CALLS(_f64, double)

/* One saved array of mha_forward: dtype t and exactly `shape`. */
static PyArrayObject *saved_arg(ct_held *held, PyObject *obj, const char *fn, const char *arg,
                                int t, int nd, const npy_intp *shape)
{
    PyArrayObject *s = ct_input(held, obj, fn, arg, t, nd, nd, 0);
    if (s == NULL || ct_check_dims(s, fn, arg, nd, shape, "its shape in mha_forward", 0)) return NULL;
    return s;
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
    if (check_heads(num_heads, s->E, fn)) return -1;
    s->H = (ct_int)num_heads;
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
