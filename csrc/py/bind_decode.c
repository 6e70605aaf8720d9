/* bind_decode.c - the custom parts of the bindings of decode.c (incremental
 * decoding over a KV cache; the rest is generated from kernel_table.py). */
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

/* A cache (B, H, Tmax, D) updated in place; B, H, Tmax must match ref when given. */
static PyArrayObject *cache_arg(ct_held *held, PyObject *obj, const char *fn, const char *arg, int t,
                                PyArrayObject *ref, const char *ref_name)
{
    PyArrayObject *c = ct_inplace(held, obj, fn, arg, t, 0, NULL, -1, 0);
    if (c == NULL) return NULL;
    if (PyArray_NDIM(c) != 4) {
        PyErr_Format(PyExc_ValueError, "%s: %s must have 4 dimensions (rows, heads, Tmax, head_dim), got %d",
                     fn, arg, PyArray_NDIM(c));
        return NULL;
    }
    if (ref != NULL) {
        static const char *what[3] = {"the rows", "the heads", "Tmax"};
        char buf[96];
        for (int ax = 0; ax < 3; ax++) {
            snprintf(buf, sizeof(buf), "%s.shape[%d], %s", ref_name, ax, what[ax]);
            if (ct_check_dim(c, fn, arg, ax, PyArray_DIM(ref, ax), buf)) return NULL;
        }
    }
    return c;
}

/* A float array whose dtype decides the kernel: float32 or float64. */
static int float_type(PyObject *obj, const char *fn, const char *arg, int *t)
{
    if (!PyArray_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s: %s must be a numpy.ndarray, got %s", fn, arg,
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    *t = PyArray_TYPE((PyArrayObject *)obj);
    if (*t != NPY_FLOAT32 && *t != NPY_FLOAT64) {
        PyObject *d = PyObject_Str((PyObject *)PyArray_DESCR((PyArrayObject *)obj));
        PyErr_Format(PyExc_TypeError, "%s: %s must have dtype float32 or float64, got %s", fn, arg,
                     d ? PyUnicode_AsUTF8(d) : "?");
        Py_XDECREF(d);
        return -1;
    }
    return 0;
}

/* A step input x (B, H, D) matching the cache's rows, heads and last dim. */
static PyArrayObject *step_arg(ct_held *held, PyObject *obj, const char *fn, const char *arg,
                               int t, PyArrayObject *cache, const char *cache_name)
{
    PyArrayObject *x = ct_input(held, obj, fn, arg, t, 3, 3, 0);
    char buf[3][64];
    snprintf(buf[0], 64, "%s.shape[0], the rows", cache_name);
    snprintf(buf[1], 64, "%s.shape[1], the heads", cache_name);
    snprintf(buf[2], 64, "%s.shape[3], the head dim", cache_name);
    if (x == NULL || ct_check_dim(x, fn, arg, 0, PyArray_DIM(cache, 0), buf[0]) ||
        ct_check_dim(x, fn, arg, 1, PyArray_DIM(cache, 1), buf[1]) ||
        ct_check_dim(x, fn, arg, 2, PyArray_DIM(cache, 3), buf[2]))
        return NULL;
    return x;
}

/* kv_cache_append(cache_k (B, H, Tmax, Dh), cache_v (B, H, Tmax, Dv), k_t (B, H, Dh),
 *                 v_t (B, H, Dv), pos int | (B) ints) -> None; the caches are written in place. */
static PyObject *kv_cache_append_impl(const kv_cache_append_args *a, const char *fn)
{
    PyObject *o_ck = a->o_cache_k, *o_cv = a->o_cache_v;
    ct_held held = {0};
    int t;
    if (float_type(o_ck, fn, "cache_k", &t)) return NULL;
    PyArrayObject *ck = cache_arg(&held, o_ck, fn, "cache_k", t, NULL, NULL);
    if (ck != NULL && PyArray_Check(o_cv) && PyArray_DATA((PyArrayObject *)o_cv) == PyArray_DATA(ck)) {
        PyErr_Format(PyExc_ValueError, "%s: cache_k and cache_v must be different arrays", fn);
        goto fail;
    }
    /* any other overlap is refused by ct_inplace */
    PyArrayObject *cv = ck ? cache_arg(&held, o_cv, fn, "cache_v", t, ck, "cache_k") : NULL;
    if (cv == NULL) goto fail;
    PyArrayObject *k = step_arg(&held, a->o_k_t, fn, "k_t", t, ck, "cache_k");
    PyArrayObject *v = k ? step_arg(&held, a->o_v_t, fn, "v_t", t, cv, "cache_v") : NULL;
    if (v == NULL) goto fail;
    npy_intp B = PyArray_DIM(ck, 0), H = PyArray_DIM(ck, 1), Tmax = PyArray_DIM(ck, 2);
    PyArrayObject *pos = row_ints(&held, a->o_pos, fn, "pos", B, 0, (long long)Tmax - 1,
                                  "a slot of the cache, < Tmax");
    if (pos == NULL) goto fail;
    CT_DISPATCH(t, kv_cache_append, PyArray_DATA(ck), PyArray_DATA(cv), PyArray_DATA(k),
                PyArray_DATA(v), (const int64_t *)PyArray_DATA(pos), B, H, Tmax,
                PyArray_DIM(ck, 3), PyArray_DIM(cv, 3));
    return ct_finish(&held, ct_none());
fail:
    return ct_finish(&held, NULL);
}

/* The scale (default 1/sqrt(Dh)). */
static int parse_scale(PyObject *o_scale, npy_intp Dh, const char *fn, double *scale)
{
    if (o_scale == NULL || o_scale == Py_None) {
        *scale = Dh > 0 ? 1.0 / sqrt((double)Dh) : 1.0;
        return 0;
    }
    *scale = PyFloat_AsDouble(o_scale);
    if (*scale == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s: scale must be a float or None, got %s", fn,
                     Py_TYPE(o_scale)->tp_name);
        return -1;
    }
    return 0;
}

/* attend_step(q_t (B, H, Dh), cache_k (B, H, Tmax, Dh), cache_v (B, H, Tmax, Dv),
 *             lengths int | (B) ints, key_padding_mask (B, Tmax) bool | None, scale=None)
 *   -> out (B, H, Dv) */
static PyObject *attend_step_impl(const attend_step_args *a, const char *fn)
{
    PyObject *o_q = a->o_q_t, *o_ck = a->o_cache_k, *o_cv = a->o_cache_v, *o_len = a->o_lengths;
    PyObject *o_pad = a->o_key_padding_mask, *o_scale = a->o_scale;
    ct_held held = {0};
    int t;
    double scale;
    if (float_type(o_q, fn, "q_t", &t)) return NULL;
    PyArrayObject *ck = ct_input(&held, o_ck, fn, "cache_k", t, 4, 4, 0);
    if (ck == NULL) goto fail;
    PyArrayObject *q = step_arg(&held, o_q, fn, "q_t", t, ck, "cache_k");
    PyArrayObject *cv = q ? ct_input(&held, o_cv, fn, "cache_v", t, 4, 4, 0) : NULL;
    if (cv == NULL || ct_check_dim(cv, fn, "cache_v", 0, PyArray_DIM(ck, 0), "cache_k.shape[0], the rows") ||
        ct_check_dim(cv, fn, "cache_v", 1, PyArray_DIM(ck, 1), "cache_k.shape[1], the heads") ||
        ct_check_dim(cv, fn, "cache_v", 2, PyArray_DIM(ck, 2), "cache_k.shape[2], Tmax"))
        goto fail;
    npy_intp B = PyArray_DIM(ck, 0), H = PyArray_DIM(ck, 1), Tmax = PyArray_DIM(ck, 2);
    npy_intp Dh = PyArray_DIM(ck, 3), Dv = PyArray_DIM(cv, 3);
    PyArrayObject *len = row_ints(&held, o_len, fn, "lengths", B, 0, (long long)Tmax,
                                  "0 to Tmax keys");
    if (len == NULL) goto fail;
    PyArrayObject *pad = ct_input(&held, o_pad, fn, "key_padding_mask", NPY_BOOL, 2, 2, 1);
    if (PyErr_Occurred() ||
        (pad && (ct_check_dim(pad, fn, "key_padding_mask", 0, B, "cache_k.shape[0], the rows") ||
                 ct_check_dim(pad, fn, "key_padding_mask", 1, Tmax, "cache_k.shape[2], Tmax"))))
        goto fail;
    if (parse_scale(o_scale, Dh, fn, &scale)) goto fail;
    npy_intp oshape[3] = {B, H, Dv};
    PyArrayObject *out = ct_empty(&held, t, 3, oshape);
    if (out == NULL) goto fail;
    CT_DISPATCH_ALLOC(t, attend_step, PyArray_DATA(out), PyArray_DATA(q),
                       PyArray_DATA(ck), PyArray_DATA(cv), (const int64_t *)PyArray_DATA(len),
                       (const unsigned char *)CT_DATA(pad), scale, B, H, Tmax, Dh, Dv);
    return ct_finish(&held, ct_ret(out));
fail:
    return ct_finish(&held, NULL);
}
