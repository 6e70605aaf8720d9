/* bind_recurrent.c - the custom checks of the bindings of recurrent.c (the
 * bindings are generated from kernel_table.py): the mode string, the gate
 * count, cell states only for lstm, lengths in [1, T]. */
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

/* w_hh.shape[0] == GH, the gate count of the mode times the hidden size. */
static int check_gates(PyArrayObject *w_hh, npy_intp GH, int mode, const char *fn)
{
    char what[96];
    snprintf(what, sizeof what, "%d * w_hh.shape[1] for %s", (int)ct_rnn_gate_count(mode),
             mode_names[mode]);
    return ct_check_dim(w_hh, fn, "w_hh", 0, GH, what);
}

/* A cell state (or its gradient) `obj` must be None unless the mode is lstm. */
static int lstm_only(PyObject *obj, int mode, const char *fn, const char *arg, const char *why)
{
    if (mode == CT_LSTM || obj == NULL || obj == Py_None) return 0;
    PyErr_Format(PyExc_ValueError, "%s: %s must be None for mode '%s'%s, got an array", fn, arg,
                 mode_names[mode], why);
    return -1;
}

/* Every length in [1, T]. */
static int check_lengths(PyArrayObject *lengths, npy_intp T, const char *fn)
{
    const int64_t *len = (const int64_t *)PyArray_DATA(lengths);
    for (npy_intp b = 0; b < PyArray_DIM(lengths, 0); b++) {
        if (len[b] < 1 || len[b] > T) {
            PyErr_Format(PyExc_ValueError,
                         "%s: lengths[%zd] must be in [1, %zd] (1 <= length <= x.shape[0]), got %lld",
                         fn, (Py_ssize_t)b, (Py_ssize_t)T, (long long)len[b]);
            return -1;
        }
    }
    return 0;
}
