/* bind_decode.c - the custom checks of the bindings of decode.c (incremental
 * decoding over a KV cache; the bindings are generated from kernel_table.py). */
#include "../decode.h"

/* Per-row integers (B) in [low, high]: a Python int (the same for every row)
 * or a 1-D integer array of length B.  Returns a held int64 array or NULL. */
static PyArrayObject *row_ints(ct_held *held, PyObject *obj, const char *fn, const char *arg,
                               npy_intp B, long long low, long long high, const char *range)
{
    PyArrayObject *a;
    if (obj != NULL && !PyArray_Check(obj) && PyIndex_Check(obj)) {
        int overflow = 0;
        long long v = PyBool_Check(obj) ? -1 : 0;
        PyObject *index = PyBool_Check(obj) ? NULL : PyNumber_Index(obj);
        if (index != NULL) v = PyLong_AsLongLongAndOverflow(index, &overflow);
        if (index == NULL || overflow) { /* (the same message as for an in-range int below) */
            if (index != NULL || !PyErr_Occurred())
                PyErr_Format(index ? PyExc_IndexError : PyExc_TypeError,
                             index ? "%s: %s[0] must be in [%lld, %lld] (%s), got %S"
                                   : "%s: %s must be an int or a 1-D integer array, got bool",
                             fn, arg, low, high, range, index);
            Py_XDECREF(index);
            return NULL;
        }
        Py_DECREF(index);
        npy_intp shape[1] = {B};
        a = ct_empty(held, NPY_INT64, 1, shape);
        if (a == NULL) return NULL;
        for (npy_intp i = 0; i < B; i++) ((int64_t *)PyArray_DATA(a))[i] = v;
    } else if (obj != NULL && PyArray_Check(obj) && PyArray_NDIM((PyArrayObject *)obj) == 0) {
        PyErr_Format(PyExc_TypeError, "%s: %s must be an int or a 1-D integer array, got a 0-d array",
                     fn, arg);
        return NULL;
    } else {
        a = ct_input(held, obj, fn, arg, CT_IDS, 1, 1, 0);
        if (a == NULL || ct_check_dim(a, fn, arg, 0, B, "the rows, cache.shape[0]")) return NULL;
    }
    const int64_t *v = (const int64_t *)PyArray_DATA(a);
    for (npy_intp i = 0; i < B; i++)
        if (v[i] < low || v[i] > high) {
            PyErr_Format(PyExc_IndexError, "%s: %s[%zd] must be in [%lld, %lld] (%s), got %lld", fn,
                         arg, (Py_ssize_t)i, low, high, range, (long long)v[i]);
            return NULL;
        }
    return a;
}

/* A cache (B, H, Tmax, D) has 4 dimensions (its message names them). */
static int check_cache(PyArrayObject *cache, const char *fn, const char *arg)
{
    if (PyArray_NDIM(cache) == 4) return 0;
    PyErr_Format(PyExc_ValueError, "%s: %s must have 4 dimensions (rows, heads, Tmax, head_dim), got %d",
                 fn, arg, PyArray_NDIM(cache));
    return -1;
}

/* cache_v is not cache_k itself (a clearer message than the overlap one). */
static int distinct_caches(PyArrayObject *cache_k, PyObject *cache_v, const char *fn)
{
    if (!PyArray_Check(cache_v) || PyArray_DATA((PyArrayObject *)cache_v) != PyArray_DATA(cache_k)) return 0;
    PyErr_Format(PyExc_ValueError, "%s: cache_k and cache_v must be different arrays", fn);
    return -1;
}
