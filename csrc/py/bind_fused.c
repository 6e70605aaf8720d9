/* bind_fused.c - Python bindings of fused.c. */
#include "ct_py.h"
#include "../fused.h"

/* "relu" | "gelu" | "gelu_tanh" -> CT_ACT_*, or -1 with a ValueError. */
static int parse_act(const char *name, const char *fn)
{
    if (strcmp(name, "relu") == 0) return CT_ACT_RELU;
    if (strcmp(name, "gelu") == 0) return CT_ACT_GELU;
    if (strcmp(name, "gelu_tanh") == 0) return CT_ACT_GELU_TANH;
    PyErr_Format(PyExc_ValueError, "%s: act must be 'relu', 'gelu' or 'gelu_tanh', got '%s'", fn,
                 name);
    return -1;
}

/* A row vector (N) of dtype t, or None (NULL, no error) when optional. */
static int vector_arg(ct_held *held, PyObject *obj, const char *fn, const char *arg, int t,
                      npy_intp N, PyArrayObject **out)
{
    *out = ct_input(held, obj, fn, arg, t, 1, 1, 1);
    if (*out == NULL) return PyErr_Occurred() ? -1 : 0;
    return ct_check_dim(*out, fn, arg, 0, N, "inp.shape[-1]");
}

/* bias_act_forward(inp (..., N), bias (N) | None, act="relu") -> out (..., N) */
static PyObject *py_bias_act_forward(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"inp", "bias", "act", NULL};
    const char *fn = "bias_act_forward", *act_name = "relu";
    PyObject *o_inp, *o_b = Py_None;
    ct_held held = {0};
    if (!ct_parse_args(args, kw, "O|Os:bias_act_forward", names, &o_inp, &o_b, &act_name)) return NULL;
    int act = parse_act(act_name, fn);
    if (act < 0) return NULL;
    PyArrayObject *inp = ct_input(&held, o_inp, fn, "inp", CT_ANY_FLOAT, 1, -1, 0), *b;
    if (inp == NULL) goto fail;
    int t = PyArray_TYPE(inp), nd = PyArray_NDIM(inp);
    npy_intp N = PyArray_DIM(inp, nd - 1), M = ct_prod(inp, 0, nd - 1);
    if (vector_arg(&held, o_b, fn, "bias", t, N, &b)) goto fail;
    PyArrayObject *out = ct_empty(&held, t, nd, PyArray_DIMS(inp));
    if (out == NULL) goto fail;
    CT_DISPATCH(t, bias_act_forward, PyArray_DATA(out), PyArray_DATA(inp), CT_DATA(b), act, M, N);
    return ct_finish(&held, ct_ret(out));
fail:
    return ct_finish(&held, NULL);
}

/* bias_act_backward(dout, inp, bias | None, act="relu", dinp=None, dbias=None)
 *   -> (dinp, dbias | None); given arrays are accumulated into. */
static PyObject *py_bias_act_backward(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"dout", "inp", "bias", "act", "dinp", "dbias", NULL};
    const char *fn = "bias_act_backward", *act_name = "relu";
    PyObject *o_dout, *o_inp, *o_b = Py_None, *o_dinp = Py_None, *o_db = Py_None;
    ct_held held = {0};
    if (!ct_parse_args(args, kw, "OO|OsOO:bias_act_backward", names, &o_dout, &o_inp, &o_b, &act_name,
                                     &o_dinp, &o_db))
        return NULL;
    int act = parse_act(act_name, fn);
    if (act < 0) return NULL;
    PyArrayObject *inp = ct_input(&held, o_inp, fn, "inp", CT_ANY_FLOAT, 1, -1, 0), *b;
    if (inp == NULL) goto fail;
    int t = PyArray_TYPE(inp), nd = PyArray_NDIM(inp);
    npy_intp N = PyArray_DIM(inp, nd - 1), M = ct_prod(inp, 0, nd - 1);
    if (vector_arg(&held, o_b, fn, "bias", t, N, &b)) goto fail;
    PyArrayObject *dout = ct_input(&held, o_dout, fn, "dout", t, 1, -1, 0);
    if (dout == NULL || ct_check_dims(dout, fn, "dout", PyArray_NDIM(inp), PyArray_DIMS(inp), "inp.shape", 1)) goto fail;
    PyArrayObject *dinp = ct_grad(&held, o_dinp, fn, "dinp", t, nd, PyArray_DIMS(inp), 1);
    if (dinp == NULL) goto fail;
    PyArrayObject *db = NULL;
    if (b != NULL) {
        db = ct_grad(&held, o_db, fn, "dbias", t, 1, PyArray_DIMS(b), 1);
        if (db == NULL) goto fail;
    }
    CT_DISPATCH(t, bias_act_backward, PyArray_DATA(dinp), CT_DATA(db), PyArray_DATA(dout),
                PyArray_DATA(inp), CT_DATA(b), act, M, N);
    return ct_finish(&held, ct_results(2, dinp, db));
fail:
    return ct_finish(&held, NULL);
}

/* add_layernorm_forward(inp (..., N), residual (..., N), weight | None, bias | None, eps=1e-5)
 *   -> (out (..., N), mean (...), rstd (...)) */
static PyObject *py_add_layernorm_forward(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"inp", "residual", "weight", "bias", "eps", NULL};
    const char *fn = "add_layernorm_forward";
    PyObject *o_inp, *o_res, *o_w = Py_None, *o_b = Py_None;
    double eps = 1e-5;
    ct_held held = {0};
    if (!ct_parse_args(args, kw, "OO|OOd:add_layernorm_forward", names, &o_inp, &o_res, &o_w, &o_b, &eps))
        return NULL;
    if (!(eps >= 0) || isinf(eps)) { /* as layernorm_forward: inf would make every row 0 */
        PyObject *given = PyFloat_FromDouble(eps);
        if (given != NULL)
            PyErr_Format(PyExc_ValueError, "%s: eps must be >= 0 and finite, got %R", fn, given);
        Py_XDECREF(given);
        return NULL;
    }
    PyArrayObject *inp = ct_input(&held, o_inp, fn, "inp", CT_ANY_FLOAT, 1, -1, 0), *w, *b;
    if (inp == NULL) goto fail;
    int t = PyArray_TYPE(inp), nd = PyArray_NDIM(inp);
    npy_intp N = PyArray_DIM(inp, nd - 1), M = ct_prod(inp, 0, nd - 1);
    PyArrayObject *res = ct_input(&held, o_res, fn, "residual", t, 1, -1, 0);
    if (res == NULL || ct_check_dims(res, fn, "residual", PyArray_NDIM(inp), PyArray_DIMS(inp), "inp.shape", 1)) goto fail;
    if (vector_arg(&held, o_w, fn, "weight", t, N, &w) || vector_arg(&held, o_b, fn, "bias", t, N, &b))
        goto fail;
    PyArrayObject *out = ct_empty(&held, t, nd, PyArray_DIMS(inp));
    PyArrayObject *mean = ct_empty(&held, t, nd - 1, PyArray_DIMS(inp));
    PyArrayObject *rstd = ct_empty(&held, t, nd - 1, PyArray_DIMS(inp));
    if (!out || !mean || !rstd) goto fail;
    CT_DISPATCH(t, add_layernorm_forward, PyArray_DATA(out), PyArray_DATA(mean), PyArray_DATA(rstd),
                PyArray_DATA(inp), PyArray_DATA(res), CT_DATA(w), CT_DATA(b), eps, M, N);
    return ct_finish(&held, ct_results(3, out, mean, rstd));
fail:
    return ct_finish(&held, NULL);
}

/* add_layernorm_backward(dout, inp, residual, weight | None, mean, rstd, with_bias=True,
 *                        dinp=None, dweight=None, dbias=None)
 *   -> (dinp (the gradient of inp and of residual), dweight | None, dbias | None) */
static PyObject *py_add_layernorm_backward(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"dout", "inp", "residual", "weight", "mean", "rstd", "with_bias",
                            "dinp", "dweight", "dbias", NULL};
    const char *fn = "add_layernorm_backward";
    PyObject *o_dout, *o_inp, *o_res, *o_w, *o_mean, *o_rstd;
    PyObject *o_dinp = Py_None, *o_dw = Py_None, *o_db = Py_None;
    int with_bias = 1;
    ct_held held = {0};
    if (!ct_parse_args(args, kw, "OOOOOO|pOOO:add_layernorm_backward", names, &o_dout, &o_inp, &o_res, &o_w,
                                     &o_mean, &o_rstd, &with_bias, &o_dinp, &o_dw, &o_db))
        return NULL;
    PyArrayObject *inp = ct_input(&held, o_inp, fn, "inp", CT_ANY_FLOAT, 1, -1, 0), *w;
    if (inp == NULL) goto fail;
    int t = PyArray_TYPE(inp), nd = PyArray_NDIM(inp);
    npy_intp N = PyArray_DIM(inp, nd - 1), M = ct_prod(inp, 0, nd - 1);
    PyArrayObject *res = ct_input(&held, o_res, fn, "residual", t, 1, -1, 0);
    if (res == NULL || ct_check_dims(res, fn, "residual", PyArray_NDIM(inp), PyArray_DIMS(inp), "inp.shape", 1)) goto fail;
    PyArrayObject *dout = ct_input(&held, o_dout, fn, "dout", t, 1, -1, 0);
    if (dout == NULL || ct_check_dims(dout, fn, "dout", PyArray_NDIM(inp), PyArray_DIMS(inp), "inp.shape", 1)) goto fail;
    if (vector_arg(&held, o_w, fn, "weight", t, N, &w)) goto fail;
    PyArrayObject *mean = ct_input(&held, o_mean, fn, "mean", t, 0, -1, 0);
    PyArrayObject *rstd = mean ? ct_input(&held, o_rstd, fn, "rstd", t, 0, -1, 0) : NULL;
    if (rstd == NULL) goto fail;
    if (PyArray_SIZE(mean) != M || PyArray_SIZE(rstd) != M) {
        PyErr_Format(PyExc_ValueError, "%s: mean and rstd must have %zd elements (inp.shape[:-1]), "
                     "got %zd and %zd", fn, (Py_ssize_t)M, (Py_ssize_t)PyArray_SIZE(mean),
                     (Py_ssize_t)PyArray_SIZE(rstd));
        goto fail;
    }
    npy_intp nshape[1] = {N};
    PyArrayObject *dinp = ct_grad(&held, o_dinp, fn, "dinp", t, nd, PyArray_DIMS(inp), 1);
    if (dinp == NULL) goto fail;
    PyArrayObject *dw = NULL, *db = NULL;
    if (w != NULL) {
        dw = ct_grad(&held, o_dw, fn, "dweight", t, 1, nshape, 1);
        if (dw == NULL) goto fail;
    }
    if (with_bias) {
        db = ct_grad(&held, o_db, fn, "dbias", t, 1, nshape, 1);
        if (db == NULL) goto fail;
    }
    CT_DISPATCH(t, add_layernorm_backward, PyArray_DATA(dinp), CT_DATA(dw), CT_DATA(db),
                PyArray_DATA(dout), PyArray_DATA(inp), PyArray_DATA(res), CT_DATA(w),
                PyArray_DATA(mean), PyArray_DATA(rstd), M, N);
    return ct_finish(&held, ct_results(3, dinp, dw, db));
fail:
    return ct_finish(&held, NULL);
}

/* ff_backward(dout (..., D), x (..., D), h (..., F), keep (..., F) bool | None, p, w1 (F, D),
 *             b1 (F) | None, w2 (D, F), with_bias2=True, act="relu", need_dx=True)
 *   -> (dx | None, dw1, db1 | None, dw2, db2 | None), fresh arrays */
static PyObject *py_ff_backward(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"dout", "x", "h", "keep", "p", "w1", "b1", "w2", "with_bias2", "act",
                            "need_dx", NULL};
    const char *fn = "ff_backward", *act_name = "relu";
    PyObject *o_dout, *o_x, *o_h, *o_keep, *o_w1, *o_b1, *o_w2;
    double p;
    int with_b2 = 1, need_dx = 1;
    ct_held held = {0};
    if (!ct_parse_args(args, kw, "OOOOdOOO|psp:ff_backward", names, &o_dout, &o_x, &o_h,
                                     &o_keep, &p, &o_w1, &o_b1, &o_w2, &with_b2, &act_name,
                                     &need_dx))
        return NULL;
    int act = parse_act(act_name, fn);
    if (act < 0) return NULL;
    if (!(p >= 0 && p <= 1)) {
        PyObject *got = PyFloat_FromDouble(p);
        PyErr_Format(PyExc_ValueError, "%s: p must be in [0, 1], got %R", fn, got);
        Py_XDECREF(got);
        return NULL;
    }
    PyArrayObject *x = ct_input(&held, o_x, fn, "x", CT_ANY_FLOAT, 1, -1, 0);
    if (x == NULL) goto fail;
    int t = PyArray_TYPE(x), nd = PyArray_NDIM(x);
    npy_intp D = PyArray_DIM(x, nd - 1), M = ct_prod(x, 0, nd - 1);
    PyArrayObject *dout = ct_input(&held, o_dout, fn, "dout", t, 1, -1, 0);
    if (dout == NULL || ct_check_dims(dout, fn, "dout", PyArray_NDIM(x), PyArray_DIMS(x), "x.shape", 1)) goto fail;
    PyArrayObject *h = ct_input(&held, o_h, fn, "h", t, nd, nd, 0);
    if (h == NULL) goto fail;
    if (ct_check_dims(h, fn, "h", nd - 1, PyArray_DIMS(x), "x.shape", 0)) goto fail;
    npy_intp F = PyArray_DIM(h, nd - 1);
    PyArrayObject *keep = ct_input(&held, o_keep, fn, "keep", NPY_BOOL, 1, -1, 1);
    if (keep == NULL && PyErr_Occurred()) goto fail;
    if (keep != NULL && ct_check_dims(keep, fn, "keep", PyArray_NDIM(h), PyArray_DIMS(h), "h.shape", 1)) goto fail;
    PyArrayObject *w1 = ct_input(&held, o_w1, fn, "w1", t, 2, 2, 0);
    if (w1 == NULL || ct_check_dim(w1, fn, "w1", 0, F, "h.shape[-1]") ||
        ct_check_dim(w1, fn, "w1", 1, D, "x.shape[-1]"))
        goto fail;
    PyArrayObject *b1 = ct_input(&held, o_b1, fn, "b1", t, 1, 1, 1);
    if (b1 == NULL && PyErr_Occurred()) goto fail;
    if (b1 != NULL && ct_check_dim(b1, fn, "b1", 0, F, "h.shape[-1]")) goto fail;
    PyArrayObject *w2 = ct_input(&held, o_w2, fn, "w2", t, 2, 2, 0);
    if (w2 == NULL || ct_check_dim(w2, fn, "w2", 0, D, "x.shape[-1]") ||
        ct_check_dim(w2, fn, "w2", 1, F, "h.shape[-1]"))
        goto fail;
    PyArrayObject *dx = need_dx ? ct_zeros(&held, t, nd, PyArray_DIMS(x)) : NULL;
    PyArrayObject *dw1 = ct_zeros(&held, t, 2, PyArray_DIMS(w1));
    PyArrayObject *db1 = b1 ? ct_zeros(&held, t, 1, PyArray_DIMS(b1)) : NULL;
    PyArrayObject *dw2 = ct_zeros(&held, t, 2, PyArray_DIMS(w2));
    npy_intp dshape[1] = {D};
    PyArrayObject *db2 = with_b2 ? ct_zeros(&held, t, 1, dshape) : NULL;
    if ((need_dx && !dx) || !dw1 || (b1 && !db1) || !dw2 || (with_b2 && !db2)) goto fail;
    CT_DISPATCH_ALLOC(t, ff_backward, CT_DATA(dx), PyArray_DATA(dw1), CT_DATA(db1),
                       PyArray_DATA(dw2), CT_DATA(db2), PyArray_DATA(dout), PyArray_DATA(x),
                       PyArray_DATA(h), (const uint8_t *)CT_DATA(keep), p, PyArray_DATA(w1),
                       CT_DATA(b1), PyArray_DATA(w2), act, M, D, F);
    PyArrayObject *res[5] = {dx, dw1, db1, dw2, db2};
    return ct_finish(&held, ct_results(5, res[0], res[1], res[2], res[3], res[4]));
fail:
    return ct_finish(&held, NULL);
}

PyMethodDef ct_methods_fused[] = {
    CT_METHOD(ff_backward, "ff_backward(dout, x, h, keep, p, w1, b1, w2, with_bias2=True, "
                           "act='relu', need_dx=True) -> (dx, dw1, db1, dw2, db2)"),
    CT_METHOD(bias_act_forward, "bias_act_forward(inp, bias=None, act='relu') -> out"),
    CT_METHOD(bias_act_backward, "bias_act_backward(dout, inp, bias=None, act='relu', dinp=None, "
                                 "dbias=None) -> (dinp, dbias)"),
    CT_METHOD(add_layernorm_forward, "add_layernorm_forward(inp, residual, weight=None, "
                                     "bias=None, eps=1e-5) -> (out, mean, rstd)"),
    CT_METHOD(add_layernorm_backward, "add_layernorm_backward(dout, inp, residual, weight, mean, "
                                      "rstd, with_bias=True, dinp=None, dweight=None, dbias=None) "
                                      "-> (dinp, dweight, dbias)"),
    {NULL, NULL, 0, NULL},
};
