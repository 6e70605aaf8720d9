/* bind_layernorm.c - Python bindings of layernorm.c. */
#include "ct_py.h"
#include "../layernorm.h"

/* An optional (D) parameter vector of dtype t. */
static PyArrayObject *vector_arg(ct_held *held, PyObject *obj, const char *fn, const char *arg,
                                 int t, npy_intp D)
{
    PyArrayObject *v = ct_input(held, obj, fn, arg, t, 1, 1, 1);
    if (v != NULL && ct_check_dim(v, fn, arg, 0, D, "x.shape[-1]")) return NULL;
    return v;
}

/* layernorm_forward(x (..., D), weight (D) | None, bias (D) | None, eps=1e-5)
 *   -> (out (..., D), mean (...), rstd (...)) */
static PyObject *py_layernorm_forward(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"x", "weight", "bias", "eps", NULL};
    const char *fn = "layernorm_forward";
    PyObject *o_x, *o_w = Py_None, *o_b = Py_None;
    double eps = 1e-5;
    ct_held held = {0};
    if (!ct_parse_args(args, kw, "O|OOd:layernorm_forward", names, &o_x, &o_w, &o_b, &eps))
        return NULL;
    if (!(eps >= 0) || isinf(eps)) {
        PyObject *given = PyFloat_FromDouble(eps);
        if (given != NULL)
            PyErr_Format(PyExc_ValueError, "%s: eps must be finite and >= 0, got %R", fn, given);
        Py_XDECREF(given);
        return NULL;
    }
    PyArrayObject *x = ct_input(&held, o_x, fn, "x", CT_ANY_FLOAT, 1, -1, 0);
    if (x == NULL) goto fail;
    int t = PyArray_TYPE(x), nd = PyArray_NDIM(x);
    npy_intp N = ct_prod(x, 0, nd - 1), D = PyArray_DIM(x, nd - 1);
    PyArrayObject *w = vector_arg(&held, o_w, fn, "weight", t, D);
    if (PyErr_Occurred()) goto fail;
    PyArrayObject *b = vector_arg(&held, o_b, fn, "bias", t, D);
    if (PyErr_Occurred()) goto fail;
    PyArrayObject *out = ct_empty(&held, t, nd, PyArray_DIMS(x));
    PyArrayObject *mean = ct_empty(&held, t, nd - 1, PyArray_DIMS(x));
    PyArrayObject *rstd = ct_empty(&held, t, nd - 1, PyArray_DIMS(x));
    if (out == NULL || mean == NULL || rstd == NULL) goto fail;
    CT_DISPATCH(t, layernorm_forward, PyArray_DATA(out), PyArray_DATA(mean), PyArray_DATA(rstd),
                PyArray_DATA(x), CT_DATA(w), CT_DATA(b), N, D, eps);
    return ct_finish(&held, ct_results(3, out, mean, rstd));
fail:
    return ct_finish(&held, NULL);
}

/* layernorm_backward(dout (..., D), x (..., D), weight (D) | None, mean (...), rstd (...),
 *                    dinp=None, dweight=None, dbias=None, need_dinp=True, with_bias=True)
 *   -> (dinp | None, dweight | None (None when weight is None), dbias | None);
 * given arrays are accumulated into. */
static PyObject *py_layernorm_backward(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"dout", "x", "weight", "mean", "rstd", "dinp", "dweight",
                            "dbias", "need_dinp", "with_bias", NULL};
    const char *fn = "layernorm_backward";
    PyObject *o_dout, *o_x, *o_w, *o_mean, *o_rstd;
    PyObject *o_dinp = Py_None, *o_dw = Py_None, *o_db = Py_None;
    int need_dinp = 1, with_bias = 1;
    ct_held held = {0};
    if (!ct_parse_args(args, kw, "OOOOO|OOOpp:layernorm_backward", names, &o_dout, &o_x, &o_w,
                                     &o_mean, &o_rstd, &o_dinp, &o_dw, &o_db, &need_dinp,
                                     &with_bias))
        return NULL;
    PyArrayObject *x = ct_input(&held, o_x, fn, "x", CT_ANY_FLOAT, 1, -1, 0);
    if (x == NULL) goto fail;
    int t = PyArray_TYPE(x), nd = PyArray_NDIM(x);
    npy_intp N = ct_prod(x, 0, nd - 1), D = PyArray_DIM(x, nd - 1);
    PyArrayObject *dout = ct_input(&held, o_dout, fn, "dout", t, nd, nd, 0);
    if (dout == NULL || ct_check_dims(dout, fn, "dout", nd, PyArray_DIMS(x), "x's shape", 0)) goto fail;
    PyArrayObject *w = vector_arg(&held, o_w, fn, "weight", t, D);
    if (PyErr_Occurred()) goto fail;
    PyArrayObject *mean = ct_input(&held, o_mean, fn, "mean", t, nd - 1, nd - 1, 0);
    if (mean == NULL || ct_check_dims(mean, fn, "mean", nd - 1, PyArray_DIMS(x), "x.shape[:-1]", 0)) goto fail;
    PyArrayObject *rstd = ct_input(&held, o_rstd, fn, "rstd", t, nd - 1, nd - 1, 0);
    if (rstd == NULL || ct_check_dims(rstd, fn, "rstd", nd - 1, PyArray_DIMS(x), "x.shape[:-1]", 0)) goto fail;

    npy_intp dshape[1] = {D};
    PyArrayObject *dinp = NULL, *dw = NULL, *db = NULL;
    if (need_dinp) {
        dinp = ct_grad(&held, o_dinp, fn, "dinp", t, nd, PyArray_DIMS(x), 1);
        if (dinp == NULL) goto fail;
    }
    if (w != NULL) {
        dw = ct_grad(&held, o_dw, fn, "dweight", t, 1, dshape, 1);
        if (dw == NULL) goto fail;
    } else if (o_dw != Py_None) {
        PyErr_Format(PyExc_ValueError, "%s: dweight must be None when weight is None, got an array", fn);
        goto fail;
    }
    if (with_bias) {
        db = ct_grad(&held, o_db, fn, "dbias", t, 1, dshape, 1);
        if (db == NULL) goto fail;
    }
    CT_DISPATCH(t, layernorm_backward, CT_DATA(dinp), CT_DATA(dw), CT_DATA(db), PyArray_DATA(dout),
                PyArray_DATA(x), CT_DATA(w), PyArray_DATA(mean), PyArray_DATA(rstd), N, D);
    return ct_finish(&held, ct_results(3, dinp, dw, db));
fail:
    return ct_finish(&held, NULL);
}

PyMethodDef ct_methods_layernorm[] = {
    CT_METHOD(layernorm_forward,
              "layernorm_forward(x, weight=None, bias=None, eps=1e-5) -> (out, mean, rstd)"),
    CT_METHOD(layernorm_backward,
              "layernorm_backward(dout, x, weight, mean, rstd, dinp=None, dweight=None, dbias=None, "
              "need_dinp=True, with_bias=True) -> (dinp, dweight, dbias)"),
    {NULL, NULL, 0, NULL},
};
