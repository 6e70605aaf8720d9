/* bind_embedding.c - Python bindings of embedding.c. */
#include "ct_py.h"
#include "../embedding.h"

/* Every id in [0, V), else IndexError naming the first bad one by its
 * position in the ids array, e.g. "ids[1, 2] = 7 is out of range".
 * ids is the int64 copy made by ct_input (wider dtypes wrap). */
static int check_ids_in_range(PyArrayObject *ids, const char *fn, npy_intp V, const char *what)
{
    const int64_t *v = (const int64_t *)PyArray_DATA(ids);
    npy_intp n = PyArray_SIZE(ids);
    npy_intp bad = 0;
    while (bad < n && v[bad] >= 0 && v[bad] < V) bad++;
    if (bad == n) return 0;
    /* Unravel the flat position into "[i, j, k]" ("" for 0-d ids). */
    int nd = PyArray_NDIM(ids);
    char position[NPY_MAXDIMS * 24 + 3] = "";
    npy_intp rest = bad, index[NPY_MAXDIMS];
    for (int i = nd - 1; i >= 0; i--) {
        index[i] = rest % PyArray_DIM(ids, i);
        rest /= PyArray_DIM(ids, i);
    }
    size_t used = 0;
    for (int i = 0; i < nd; i++)
        used += (size_t)snprintf(position + used, sizeof(position) - used, "%s%zd",
                                 i ? ", " : "[", (Py_ssize_t)index[i]);
    if (nd > 0) snprintf(position + used, sizeof(position) - used, "]");
    PyErr_Format(PyExc_IndexError,
                 "%s: ids%s = %lld is out of range; expected 0 <= id < %zd (%s)", fn, position,
                 (long long)v[bad], (Py_ssize_t)V, what);
    return -1;
}

/* embedding_forward(ids (...) any integer dtype, weight (V, D)) -> out (..., D) */
static PyObject *py_embedding_forward(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"ids", "weight", NULL};
    const char *fn = "embedding_forward";
    PyObject *o_ids, *o_w;
    ct_held held = {0};
    if (!ct_parse_args(args, kw, "OO:embedding_forward", names, &o_ids, &o_w)) return NULL;
    PyArrayObject *w = ct_input(&held, o_w, fn, "weight", CT_ANY_FLOAT, 2, 2, 0);
    if (w == NULL) goto fail;
    int t = PyArray_TYPE(w);
    npy_intp V = PyArray_DIM(w, 0), D = PyArray_DIM(w, 1);
    PyArrayObject *ids = ct_input(&held, o_ids, fn, "ids", CT_IDS, 0, NPY_MAXDIMS - 1, 0);
    if (ids == NULL || check_ids_in_range(ids, fn, V, "weight.shape[0]")) goto fail;
    int nd = PyArray_NDIM(ids);
    npy_intp shape[NPY_MAXDIMS];
    if (nd > 0) memcpy(shape, PyArray_DIMS(ids), sizeof(npy_intp) * nd); /* 0-d: DIMS may be NULL */
    shape[nd] = D;
    PyArrayObject *out = ct_empty(&held, t, nd + 1, shape);
    if (out == NULL) goto fail;
    CT_DISPATCH(t, embedding_forward, PyArray_DATA(out), PyArray_DATA(ids), PyArray_DATA(w),
                PyArray_SIZE(ids), D);
    return ct_finish(&held, ct_ret(out));
fail:
    return ct_finish(&held, NULL);
}

/* padding_idx: None -> -1 (no padding row); an int in [-V, V), negative
 * counting from V as in torch -> its row in [0, V).  -2 on error. */
static int64_t padding_row(PyObject *o_pad, const char *fn, npy_intp V)
{
    if (o_pad == Py_None) return -1;
    if (!PyLong_Check(o_pad) || PyBool_Check(o_pad)) {
        PyErr_Format(PyExc_TypeError, "%s: padding_idx must be an int or None, got %s", fn,
                     Py_TYPE(o_pad)->tp_name);
        return -2;
    }
    int overflow = 0;
    long long pad = PyLong_AsLongLongAndOverflow(o_pad, &overflow);
    if (pad == -1 && PyErr_Occurred()) return -2;
    if (overflow || pad < -(long long)V || pad >= (long long)V) {
        PyErr_Format(PyExc_ValueError, "%s: padding_idx must be in [-%zd, %zd) (num_embeddings), got %R",
                     fn, (Py_ssize_t)V, (Py_ssize_t)V, o_pad);
        return -2;
    }
    return pad < 0 ? pad + V : pad;
}

/* embedding_backward(dout (..., D), ids (...), num_embeddings, padding_idx=None, dweight=None)
 *   -> dweight (V, D); a given dweight is accumulated into. */
static PyObject *py_embedding_backward(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"dout", "ids", "num_embeddings", "padding_idx", "dweight", NULL};
    const char *fn = "embedding_backward";
    PyObject *o_dout, *o_ids, *o_pad = Py_None, *o_dw = Py_None;
    Py_ssize_t V;
    ct_held held = {0};
    if (!ct_parse_args(args, kw, "OOn|OO:embedding_backward", names, &o_dout, &o_ids, &V, &o_pad,
                                     &o_dw))
        return NULL;
    if (ct_check_positive(V, fn, "num_embeddings", 1)) return NULL;
    int64_t pad = padding_row(o_pad, fn, V);
    if (pad == -2) return NULL;
    PyArrayObject *ids = ct_input(&held, o_ids, fn, "ids", CT_IDS, 0, NPY_MAXDIMS - 1, 0);
    if (ids == NULL) goto fail;
    int nd = PyArray_NDIM(ids);
    PyArrayObject *dout = ct_input(&held, o_dout, fn, "dout", CT_ANY_FLOAT, nd + 1, nd + 1, 0);
    if (dout == NULL) goto fail;
    if (ct_check_dims(dout, fn, "dout", nd, PyArray_DIMS(ids), "ids' shape", 0)) goto fail;
    if (check_ids_in_range(ids, fn, V, "num_embeddings")) goto fail;
    int t = PyArray_TYPE(dout);
    npy_intp D = PyArray_DIM(dout, nd), wshape[2] = {V, D};
    PyArrayObject *dw = ct_grad(&held, o_dw, fn, "dweight", t, 2, wshape, 1);
    if (dw == NULL) goto fail;
    CT_DISPATCH(t, embedding_backward, PyArray_DATA(dw), PyArray_DATA(dout), PyArray_DATA(ids),
                PyArray_SIZE(ids), D, pad);
    return ct_finish(&held, ct_ret(dw));
fail:
    return ct_finish(&held, NULL);
}

PyMethodDef ct_methods_embedding[] = {
    CT_METHOD(embedding_forward, "embedding_forward(ids, weight) -> out"),
    CT_METHOD(embedding_backward,
              "embedding_backward(dout, ids, num_embeddings, padding_idx=None, dweight=None) -> dweight"),
    {NULL, NULL, 0, NULL},
};
