/* bind_embedding.c - the custom parts of the bindings of embedding.c (the rest is
 * generated from kernel_table.py). */
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
