/* bind_recurrent.c - the custom bodies of the bindings of recurrent.c (their
 * signatures are in kernel_table.py): whole-sequence kernels
 * (rnn_forward / rnn_backward) and one-step cells (rnn_cell_forward /
 * rnn_cell_backward, the same C kernel with T = 1). */
#include "../recurrent.h"

static const char *mode_names[] = {"rnn_tanh", "rnn_relu", "lstm", "gru"};

/* mode string -> CT_RNN_TANH / CT_RNN_RELU / CT_LSTM / CT_GRU, or -1 with an error set. */
static int parse_mode(PyObject *obj, const char *fn)
{
    if (!PyUnicode_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s: mode must be a str, got %s", fn, Py_TYPE(obj)->tp_name);
        return -1;
    }
    const char *name = PyUnicode_AsUTF8(obj);
    if (name == NULL) return -1;
    for (int m = 0; m < 4; m++)
        if (strcmp(name, mode_names[m]) == 0) return m;
    PyErr_Format(PyExc_ValueError,
                 "%s: mode must be 'rnn_tanh', 'rnn_relu', 'lstm' or 'gru', got %R", fn, obj);
    return -1;
}

/* The arrays and sizes shared by every recurrent binding. */
typedef struct {
    PyArrayObject *x, *h0, *c0, *w_ih, *w_hh, *b_ih, *b_hh, *lengths;
    int typenum;
    ct_rnn_shape shape;
} rnn_args;

/* Python objects of the shared arguments; `cell` selects x (B, I) and the
 * names h / c instead of x (T, B, I), h0 / c0 and lengths. */
typedef struct {
    PyObject *x, *h0, *c0, *w_ih, *w_hh, *b_ih, *b_hh, *lengths, *mode;
    int reverse, cell;
} rnn_objs;

/* x, then w_ih / w_hh / biases, which fix I, H and the gate count. */
static int parse_weights(ct_held *held, rnn_args *a, const rnn_objs *o, const char *fn)
{
    a->x = ct_input(held, o->x, fn, "x", CT_ANY_FLOAT, o->cell ? 2 : 3, o->cell ? 2 : 3, 0);
    if (a->x == NULL) return -1;
    int t = a->typenum = PyArray_TYPE(a->x);
    a->w_ih = ct_input(held, o->w_ih, fn, "w_ih", t, 2, 2, 0);
    if (a->w_ih == NULL) return -1;
    a->w_hh = ct_input(held, o->w_hh, fn, "w_hh", t, 2, 2, 0);
    if (a->w_hh == NULL) return -1;
    int mode = a->shape.mode;
    npy_intp H = PyArray_DIM(a->w_hh, 1), GH = ct_rnn_gate_count(mode) * H;
    char what[96];
    snprintf(what, sizeof what, "%d * w_hh.shape[1] for %s", (int)ct_rnn_gate_count(mode),
             mode_names[mode]);
    if (ct_check_dim(a->w_hh, fn, "w_hh", 0, GH, what) ||
        ct_check_dim(a->w_ih, fn, "w_ih", 0, GH, "w_hh.shape[0]") ||
        ct_check_dim(a->x, fn, "x", -1, PyArray_DIM(a->w_ih, 1), "w_ih.shape[1], the input size"))
        return -1;
    a->b_ih = ct_input(held, o->b_ih, fn, "b_ih", t, 1, 1, 1);
    if (PyErr_Occurred() || (a->b_ih && ct_check_dim(a->b_ih, fn, "b_ih", 0, GH, "w_ih.shape[0]")))
        return -1;
    a->b_hh = ct_input(held, o->b_hh, fn, "b_hh", t, 1, 1, 1);
    if (PyErr_Occurred() || (a->b_hh && ct_check_dim(a->b_hh, fn, "b_hh", 0, GH, "w_hh.shape[0]")))
        return -1;
    a->shape.In = PyArray_DIM(a->w_ih, 1);
    a->shape.H = H;
    a->shape.B = PyArray_DIM(a->x, o->cell ? 0 : 1);
    a->shape.T = o->cell ? 1 : PyArray_DIM(a->x, 0);
    return 0;
}

/* Initial state h0 (B, H) and, for lstm only, c0 (B, H); None = zeros. */
static int parse_state(ct_held *held, rnn_args *a, const rnn_objs *o, const char *fn)
{
    const char *h_name = o->cell ? "h" : "h0", *c_name = o->cell ? "c" : "c0";
    npy_intp B = a->shape.B, H = a->shape.H;
    a->h0 = ct_input(held, o->h0, fn, h_name, a->typenum, 0, -1, 1);
    if (PyErr_Occurred() || (a->h0 && ct_check_shape(a->h0, fn, h_name, 2, (npy_intp[2]){B, H}, "(batch, hidden)")))
        return -1;
    if (a->shape.mode != CT_LSTM && o->c0 != NULL && o->c0 != Py_None) {
        PyErr_Format(PyExc_ValueError, "%s: %s must be None for mode '%s' (only lstm has a cell "
                     "state), got an array", fn, c_name, mode_names[a->shape.mode]);
        return -1;
    }
    a->c0 = ct_input(held, o->c0, fn, c_name, a->typenum, 0, -1, 1);
    if (PyErr_Occurred() || (a->c0 && ct_check_shape(a->c0, fn, c_name, 2, (npy_intp[2]){B, H}, "(batch, hidden)")))
        return -1;
    return 0;
}

/* lengths (B) of integers in [1, T], or None. */
static int parse_lengths(ct_held *held, rnn_args *a, const rnn_objs *o, const char *fn)
{
    a->lengths = ct_input(held, o->lengths, fn, "lengths", CT_IDS, 1, 1, 1);
    if (PyErr_Occurred()) return -1;
    if (a->lengths == NULL) return 0;
    if (ct_check_dim(a->lengths, fn, "lengths", 0, a->shape.B, "x.shape[1], the batch size"))
        return -1;
    const int64_t *len = (const int64_t *)PyArray_DATA(a->lengths);
    for (npy_intp b = 0; b < a->shape.B; b++) {
        if (len[b] < 1 || len[b] > a->shape.T) {
            PyErr_Format(PyExc_ValueError,
                         "%s: lengths[%zd] must be in [1, %zd] (1 <= length <= x.shape[0]), got %lld",
                         fn, (Py_ssize_t)b, (Py_ssize_t)a->shape.T, (long long)len[b]);
            return -1;
        }
    }
    a->shape.lengths = len;
    return 0;
}

static int parse_common(ct_held *held, rnn_args *a, const rnn_objs *o, const char *fn)
{
    memset(a, 0, sizeof *a);
    a->shape.mode = parse_mode(o->mode, fn);
    if (a->shape.mode < 0) return -1;
    a->shape.reverse = o->reverse;
    if (parse_weights(held, a, o, fn) || parse_state(held, a, o, fn)) return -1;
    return o->cell ? 0 : parse_lengths(held, a, o, fn);
}

/* An optional gradient of shape (B, H) (dh_n, dc_n). */
static PyArrayObject *grad_state(ct_held *held, PyObject *obj, const char *fn, const char *arg,
                                 const rnn_args *a)
{
    PyArrayObject *g = ct_input(held, obj, fn, arg, a->typenum, 0, -1, 1);
    if (g && ct_check_shape(g, fn, arg, 2, (npy_intp[2]){a->shape.B, a->shape.H}, "(batch, hidden)")) return NULL;
    return g;
}

/* Run the forward kernel; out has x's leading dims with H last. */
static PyObject *run_forward(ct_held *held, rnn_args *a, const char *fn, int cell)
{
    ct_rnn_shape *s = &a->shape;
    int t = a->typenum, lstm = s->mode == CT_LSTM;
    npy_intp out_shape[3] = {s->T, s->B, s->H}, state_shape[2] = {s->B, s->H};
    npy_intp saved_size[1] = {ct_rnn_saved_size(s->mode, s->T, s->B, s->H)};
    PyArrayObject *out = cell ? ct_empty(held, t, 2, state_shape) : ct_empty(held, t, 3, out_shape);
    PyArrayObject *h_n = cell ? NULL : ct_empty(held, t, 2, state_shape);
    PyArrayObject *c_n = lstm ? ct_empty(held, t, 2, state_shape) : NULL;
    PyArrayObject *saved = ct_empty(held, t, 1, saved_size);
    if (out == NULL || (!cell && h_n == NULL) || (lstm && c_n == NULL) || saved == NULL)
        return NULL;
    CT_DISPATCH_ALLOC(t, rnn_forward, PyArray_DATA(out), CT_DATA(h_n), CT_DATA(c_n),
                       PyArray_DATA(saved), PyArray_DATA(a->x), CT_DATA(a->h0), CT_DATA(a->c0),
                       PyArray_DATA(a->w_ih), PyArray_DATA(a->w_hh), CT_DATA(a->b_ih),
                       CT_DATA(a->b_hh), s);
    if (cell) return ct_results(3, out, c_n, saved);
    return ct_results(4, out, h_n, c_n, saved);
fail:
    return NULL;
}

/* rnn_forward(x (T, B, I), h0 (B, H) | None, w_ih (G*H, I), w_hh (G*H, H),
 *             b_ih (G*H) | None, b_hh (G*H) | None, mode, c0=None, lengths=None,
 *             reverse=False) -> (out (T, B, H), h_n (B, H), c_n (B, H) | None, saved) */
static PyObject *rnn_forward_impl(const rnn_forward_args *call, const char *fn)
{
    rnn_objs o = {.x = call->o_x, .h0 = call->o_h0, .w_ih = call->o_w_ih, .w_hh = call->o_w_hh,
                  .b_ih = call->o_b_ih, .b_hh = call->o_b_hh, .mode = call->o_mode, .c0 = call->o_c0,
                  .lengths = call->o_lengths, .reverse = call->reverse, .cell = 0};
    rnn_args a;
    ct_held held = {0};
    return ct_finish(&held, parse_common(&held, &a, &o, fn) ? NULL : run_forward(&held, &a, fn, 0));
}

/* rnn_cell_forward(x (B, I), h (B, H) | None, w_ih, w_hh, b_ih | None, b_hh | None,
 *                  mode, c=None) -> (h' (B, H), c' (B, H) | None, saved) */
static PyObject *rnn_cell_forward_impl(const rnn_cell_forward_args *call, const char *fn)
{
    rnn_objs o = {.x = call->o_x, .h0 = call->o_h, .w_ih = call->o_w_ih, .w_hh = call->o_w_hh,
                  .b_ih = call->o_b_ih, .b_hh = call->o_b_hh, .mode = call->o_mode, .c0 = call->o_c,
                  .lengths = Py_None, .cell = 1};
    rnn_args a;
    ct_held held = {0};
    return ct_finish(&held, parse_common(&held, &a, &o, fn) ? NULL : run_forward(&held, &a, fn, 1));
}

/* The gradients of a backward call, all zero-initialised (the kernel accumulates). */
typedef struct {
    PyArrayObject *dx, *dh0, *dc0, *dw_ih, *dw_hh, *db_ih, *db_hh;
} rnn_grads;

/* Bias gradients for the biases given (cell) or, with_bias, for both. */
static int alloc_grads(ct_held *held, rnn_grads *g, const rnn_args *a, int need_dx, int with_bias)
{
    int t = a->typenum;
    npy_intp state_shape[2] = {a->shape.B, a->shape.H}, gates[1] = {PyArray_DIM(a->w_ih, 0)};
    memset(g, 0, sizeof *g);
    if (need_dx && !(g->dx = ct_grad_like(held, NULL, "", "dx", a->x))) return -1;
    if (!(g->dh0 = ct_zeros(held, t, 2, state_shape))) return -1;
    if (a->shape.mode == CT_LSTM && !(g->dc0 = ct_zeros(held, t, 2, state_shape))) return -1;
    if (!(g->dw_ih = ct_grad_like(held, NULL, "", "dw_ih", a->w_ih))) return -1;
    if (!(g->dw_hh = ct_grad_like(held, NULL, "", "dw_hh", a->w_hh))) return -1;
    if ((with_bias || a->b_ih) && !(g->db_ih = ct_zeros(held, t, 1, gates))) return -1;
    if ((with_bias || a->b_hh) && !(g->db_hh = ct_zeros(held, t, 1, gates))) return -1;
    return 0;
}

/* Check dout / dh_n / dc_n / saved, run the backward kernel, build the result tuple. */
static PyObject *run_backward(ct_held *held, rnn_args *a, const char *fn, int cell,
                              PyObject *o_dout, PyObject *o_dh_n, PyObject *o_dc_n,
                              PyObject *o_saved, int need_dx, int with_bias)
{
    ct_rnn_shape *s = &a->shape;
    int t = a->typenum;
    PyArrayObject *dout = NULL;
    if (!cell) {
        dout = ct_input(held, o_dout, fn, "dout", t, 3, 3, 1);
        if (PyErr_Occurred() ||
            (dout && (ct_check_dim(dout, fn, "dout", 0, s->T, "x.shape[0]") ||
                      ct_check_dim(dout, fn, "dout", 1, s->B, "x.shape[1]") ||
                      ct_check_dim(dout, fn, "dout", 2, s->H, "w_hh.shape[1]"))))
            return NULL;
    }
    const char *dh_name = cell ? "dh_new" : "dh_n", *dc_name = cell ? "dc_new" : "dc_n";
    PyArrayObject *dh_n = grad_state(held, o_dh_n, fn, dh_name, a);
    if (PyErr_Occurred()) return NULL;
    if (s->mode != CT_LSTM && o_dc_n != Py_None) {
        PyErr_Format(PyExc_ValueError, "%s: %s must be None for mode '%s', got an array", fn,
                     dc_name, mode_names[s->mode]);
        return NULL;
    }
    PyArrayObject *dc_n = grad_state(held, o_dc_n, fn, dc_name, a);
    if (PyErr_Occurred()) return NULL;
    PyArrayObject *saved = ct_input(held, o_saved, fn, "saved", t, 1, 1, 0);
    if (saved == NULL || ct_check_dim(saved, fn, "saved", 0,
                                      ct_rnn_saved_size(s->mode, s->T, s->B, s->H),
                                      "the size rnn_forward returns for these shapes"))
        return NULL;
    rnn_grads g;
    if (alloc_grads(held, &g, a, need_dx, with_bias)) return NULL;
    CT_DISPATCH_ALLOC(t, rnn_backward, CT_DATA(g.dx), PyArray_DATA(g.dh0),
                       CT_DATA(g.dc0), PyArray_DATA(g.dw_ih), PyArray_DATA(g.dw_hh),
                       CT_DATA(g.db_ih), CT_DATA(g.db_hh), CT_DATA(dout), CT_DATA(dh_n),
                       CT_DATA(dc_n), PyArray_DATA(a->x), PyArray_DATA(a->w_ih),
                       PyArray_DATA(a->w_hh), PyArray_DATA(saved), s);
    return ct_results(7, g.dx, g.dh0, g.dc0, g.dw_ih, g.dw_hh, g.db_ih, g.db_hh);
fail:
    return NULL;
}

/* rnn_backward(dout (T, B, H) | None, dh_n | None, dc_n | None, x, w_ih, w_hh, saved, mode,
 *              lengths=None, reverse=False, need_dx=True, with_bias=True)
 *   -> (dx | None, dh0, dc0 | None, dw_ih, dw_hh, db_ih | None, db_hh | None) */
static PyObject *rnn_backward_impl(const rnn_backward_args *call, const char *fn)
{
    /* the kernel reads neither the initial state nor the biases */
    rnn_objs o = {.x = call->o_x, .h0 = Py_None, .c0 = Py_None, .w_ih = call->o_w_ih,
                  .w_hh = call->o_w_hh, .b_ih = Py_None, .b_hh = Py_None, .mode = call->o_mode,
                  .lengths = call->o_lengths, .reverse = call->reverse, .cell = 0};
    PyObject *o_dout = call->o_dout, *o_dh_n = call->o_dh_n, *o_dc_n = call->o_dc_n;
    PyObject *o_saved = call->o_saved;
    int need_dx = call->need_dx, with_bias = call->with_bias;
    rnn_args a;
    ct_held held = {0};
    return ct_finish(&held, parse_common(&held, &a, &o, fn)
                                ? NULL
                                : run_backward(&held, &a, fn, 0, o_dout, o_dh_n, o_dc_n, o_saved,
                                               need_dx, with_bias));
}

/* rnn_cell_backward(dh_new (B, H) | None, dc_new | None, x (B, I), h, c, w_ih, w_hh, b_ih,
 *                   b_hh, saved, mode, need_dx=True)
 *   -> (dx | None, dh, dc | None, dw_ih, dw_hh, db_ih | None, db_hh | None) */
static PyObject *rnn_cell_backward_impl(const rnn_cell_backward_args *call, const char *fn)
{
    rnn_objs o = {.x = call->o_x, .h0 = call->o_h, .c0 = call->o_c, .w_ih = call->o_w_ih,
                  .w_hh = call->o_w_hh, .b_ih = call->o_b_ih, .b_hh = call->o_b_hh,
                  .mode = call->o_mode, .lengths = Py_None, .cell = 1};
    PyObject *o_dh = call->o_dh_new, *o_dc = call->o_dc_new, *o_saved = call->o_saved;
    int need_dx = call->need_dx;
    rnn_args a;
    ct_held held = {0};
    return ct_finish(&held, parse_common(&held, &a, &o, fn)
                                ? NULL
                                : run_backward(&held, &a, fn, 1, Py_None, o_dh, o_dc, o_saved,
                                               need_dx, 0));
}
