/* bind_dropout.c - Python bindings of dropout.c. */
#include "ct_py.h"
#include "../dropout.h"

/* 0 <= p <= 1 (NaN fails), else ValueError. */
static int check_probability(double p, const char *fn)
{
    if (p >= 0 && p <= 1) return 0;
    PyObject *given = PyFloat_FromDouble(p);
    if (given != NULL) PyErr_Format(PyExc_ValueError, "%s: p must be in [0, 1], got %R", fn, given);
    Py_XDECREF(given);
    return -1;
}

/* An integer in [0, 2**64) (Python int or NumPy integer), else
 * TypeError / ValueError; returns 0 on success. */
static int uint64_arg(PyObject *obj, const char *fn, const char *arg, uint64_t *value)
{
    if (PyBool_Check(obj) || !PyIndex_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s: %s must be an int, got %s", fn, arg, Py_TYPE(obj)->tp_name);
        return -1;
    }
    PyObject *as_int = PyNumber_Index(obj);
    if (as_int == NULL) return -1;
    unsigned long long v = PyLong_AsUnsignedLongLong(as_int);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%s: %s must be in [0, 2**64), got %R", fn, arg, as_int);
        Py_DECREF(as_int);
        return -1;
    }
    Py_DECREF(as_int);
    *value = (uint64_t)v;
    return 0;
}

/* dropout_forward(x (...), p, seed, offset=0) -> (out (...), mask (...) bool) */
static PyObject *py_dropout_forward(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"x", "p", "seed", "offset", NULL};
    const char *fn = "dropout_forward";
    PyObject *o_x, *o_seed, *o_offset = NULL;
    double p;
    uint64_t seed, offset = 0;
    ct_held held = {0};
    if (!ct_parse_args(args, kw, "OdO|O:dropout_forward", names, &o_x, &p, &o_seed, &o_offset))
        return NULL;
    if (check_probability(p, fn) || uint64_arg(o_seed, fn, "seed", &seed) ||
        (o_offset != NULL && uint64_arg(o_offset, fn, "offset", &offset)))
        return NULL;
    PyArrayObject *x = ct_input(&held, o_x, fn, "x", CT_ANY_FLOAT, 0, -1, 0);
    if (x == NULL) goto fail;
    int t = PyArray_TYPE(x), nd = PyArray_NDIM(x);
    PyArrayObject *out = ct_empty(&held, t, nd, PyArray_DIMS(x));
    PyArrayObject *mask = ct_empty(&held, NPY_BOOL, nd, PyArray_DIMS(x));
    if (out == NULL || mask == NULL) goto fail;
    CT_DISPATCH(t, dropout_forward, PyArray_DATA(out), PyArray_DATA(mask), PyArray_DATA(x),
                PyArray_SIZE(x), p, seed, offset);
    return ct_finish(&held, ct_results(2, out, mask));
fail:
    return ct_finish(&held, NULL);
}

/* dropout_backward(dout (...), mask (...) bool, p, dinp=None) -> dinp;
 * a given dinp is accumulated into. */
static PyObject *py_dropout_backward(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"dout", "mask", "p", "dinp", NULL};
    const char *fn = "dropout_backward";
    PyObject *o_dout, *o_mask, *o_dinp = Py_None;
    double p;
    ct_held held = {0};
    if (!ct_parse_args(args, kw, "OOd|O:dropout_backward", names, &o_dout, &o_mask, &p, &o_dinp))
        return NULL;
    if (check_probability(p, fn)) return NULL;
    PyArrayObject *dout = ct_input(&held, o_dout, fn, "dout", CT_ANY_FLOAT, 0, -1, 0);
    if (dout == NULL) goto fail;
    int t = PyArray_TYPE(dout), nd = PyArray_NDIM(dout);
    PyArrayObject *mask = ct_input(&held, o_mask, fn, "mask", NPY_BOOL, nd, nd, 0);
    if (mask == NULL) goto fail;
    if (ct_check_dims(mask, fn, "mask", nd, PyArray_DIMS(dout), "dout's shape", 0)) goto fail;
    PyArrayObject *dinp = ct_grad(&held, o_dinp, fn, "dinp", t, nd, PyArray_DIMS(dout), 1);
    if (dinp == NULL) goto fail;
    CT_DISPATCH(t, dropout_backward, PyArray_DATA(dinp), PyArray_DATA(dout), PyArray_DATA(mask),
                PyArray_SIZE(dout), p);
    return ct_finish(&held, ct_ret(dinp));
fail:
    return ct_finish(&held, NULL);
}

PyMethodDef ct_methods_dropout[] = {
    CT_METHOD(dropout_forward, "dropout_forward(x, p, seed, offset=0) -> (out, mask)"),
    CT_METHOD(dropout_backward, "dropout_backward(dout, mask, p, dinp=None) -> dinp"),
    {NULL, NULL, 0, NULL},
};
