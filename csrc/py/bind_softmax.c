/* bind_softmax.c - Python bindings of softmax.c. */
#include "ct_py.h"
#include "../softmax.h"

/* (log_)softmax_forward(x (..., D)) -> y (..., D), over the last axis. */
static PyObject *softmax_like_forward(PyObject *args, PyObject *kw, const char *fn, int is_log)
{
    static char *names[] = {"x", NULL};
    PyObject *o_x;
    ct_held held = {0};
    if (!ct_parse_args(args, kw, is_log ? "O:log_softmax_forward" : "O:softmax_forward",
                                     names, &o_x)) return NULL;
    PyArrayObject *x = ct_input(&held, o_x, fn, "x", CT_ANY_FLOAT, 1, -1, 0);
    if (x == NULL) goto fail;
    int t = PyArray_TYPE(x), nd = PyArray_NDIM(x);
    npy_intp N = ct_prod(x, 0, nd - 1), D = PyArray_DIM(x, nd - 1);
    PyArrayObject *y = ct_empty(&held, t, nd, PyArray_DIMS(x));
    if (y == NULL) goto fail;
    if (is_log) CT_DISPATCH(t, log_softmax_forward, PyArray_DATA(y), PyArray_DATA(x), N, D);
    else CT_DISPATCH(t, softmax_forward, PyArray_DATA(y), PyArray_DATA(x), N, D);
    return ct_finish(&held, ct_ret(y));
fail:
    return ct_finish(&held, NULL);
}

/* (log_)softmax_backward(dout (..., D), y (..., D), dinp=None) -> dinp;
 * y is the forward output; a given dinp is accumulated into. */
static PyObject *softmax_like_backward(PyObject *args, PyObject *kw, const char *fn, int is_log)
{
    static char *names[] = {"dout", "y", "dinp", NULL};
    PyObject *o_dout, *o_y, *o_dinp = Py_None;
    ct_held held = {0};
    if (!ct_parse_args(args, kw,
                                     is_log ? "OO|O:log_softmax_backward" : "OO|O:softmax_backward",
                                     names, &o_dout, &o_y, &o_dinp)) return NULL;
    PyArrayObject *y = ct_input(&held, o_y, fn, "y", CT_ANY_FLOAT, 1, -1, 0);
    if (y == NULL) goto fail;
    int t = PyArray_TYPE(y), nd = PyArray_NDIM(y);
    npy_intp N = ct_prod(y, 0, nd - 1), D = PyArray_DIM(y, nd - 1);
    PyArrayObject *dout = ct_input(&held, o_dout, fn, "dout", t, nd, nd, 0);
    if (dout == NULL) goto fail;
    if (ct_check_dims(dout, fn, "dout", nd, PyArray_DIMS(y), "y's shape", 0)) goto fail;
    PyArrayObject *dinp = ct_grad(&held, o_dinp, fn, "dinp", t, nd, PyArray_DIMS(y), 1);
    if (dinp == NULL) goto fail;
    if (is_log)
        CT_DISPATCH(t, log_softmax_backward, PyArray_DATA(dinp), PyArray_DATA(dout),
                    PyArray_DATA(y), N, D);
    else
        CT_DISPATCH(t, softmax_backward, PyArray_DATA(dinp), PyArray_DATA(dout), PyArray_DATA(y),
                    N, D);
    return ct_finish(&held, ct_ret(dinp));
fail:
    return ct_finish(&held, NULL);
}

static PyObject *py_softmax_forward(PyObject *self, PyObject *args, PyObject *kw)
{
    return softmax_like_forward(args, kw, "softmax_forward", 0);
}

static PyObject *py_softmax_backward(PyObject *self, PyObject *args, PyObject *kw)
{
    return softmax_like_backward(args, kw, "softmax_backward", 0);
}

static PyObject *py_log_softmax_forward(PyObject *self, PyObject *args, PyObject *kw)
{
    return softmax_like_forward(args, kw, "log_softmax_forward", 1);
}

static PyObject *py_log_softmax_backward(PyObject *self, PyObject *args, PyObject *kw)
{
    return softmax_like_backward(args, kw, "log_softmax_backward", 1);
}

PyMethodDef ct_methods_softmax[] = {
    CT_METHOD(softmax_forward, "softmax_forward(x) -> y   (over the last axis)"),
    CT_METHOD(softmax_backward, "softmax_backward(dout, y, dinp=None) -> dinp"),
    CT_METHOD(log_softmax_forward, "log_softmax_forward(x) -> y   (over the last axis)"),
    CT_METHOD(log_softmax_backward, "log_softmax_backward(dout, y, dinp=None) -> dinp"),
    {NULL, NULL, 0, NULL},
};
