/* bind_crossentropy.c - the custom parts of the bindings of crossentropy.c (the rest is
 * generated from kernel_table.py). */
#include "../crossentropy.h"
/* "none" / "mean" / "sum" -> CT_REDUCE_*, else ValueError (-1). */
static int parse_reduction(const char *reduction, const char *fn)
{
    if (strcmp(reduction, "none") == 0) return CT_REDUCE_NONE;
    if (strcmp(reduction, "mean") == 0) return CT_REDUCE_MEAN;
    if (strcmp(reduction, "sum") == 0) return CT_REDUCE_SUM;
    PyErr_Format(PyExc_ValueError, "%s: reduction must be 'none', 'mean' or 'sum', got '%s'", fn,
                 reduction);
    return -1;
}

static int check_label_smoothing(double eps, const char *fn)
{
    if (eps >= 0 && eps <= 1) return 0;
    PyObject *value = PyFloat_FromDouble(eps);
    PyErr_Format(PyExc_ValueError, "%s: label_smoothing must be in [0, 1], got %R", fn, value);
    Py_XDECREF(value);
    return -1;
}

/* The arguments forward and backward share, checked.  On success logits,
 * targets and weight (or NULL) are held in `held`. */
typedef struct {
    PyArrayObject *logits, *targets, *weight;
    npy_intp N, C;
    int t, reduction;
} ce_args;

static int ce_common(ct_held *held, ce_args *a, const char *fn, PyObject *o_logits,
                     PyObject *o_targets, PyObject *o_weight, long long ignore_index,
                     double label_smoothing, const char *reduction)
{
    if ((a->reduction = parse_reduction(reduction, fn)) < 0) return -1;
    if (check_label_smoothing(label_smoothing, fn)) return -1;
    a->logits = ct_input(held, o_logits, fn, "logits", CT_ANY_FLOAT, 2, 2, 0);
    if (a->logits == NULL) return -1;
    a->t = PyArray_TYPE(a->logits);
    a->N = PyArray_DIM(a->logits, 0);
    a->C = PyArray_DIM(a->logits, 1);
    a->targets = ct_input(held, o_targets, fn, "targets", CT_IDS, 1, 1, 0);
    if (a->targets == NULL ||
        ct_check_dim(a->targets, fn, "targets", 0, a->N, "logits.shape[0]"))
        return -1;
    a->weight = ct_input(held, o_weight, fn, "weight", a->t, 1, 1, 1);
    if (PyErr_Occurred() ||
        (a->weight && ct_check_dim(a->weight, fn, "weight", 0, a->C, "logits.shape[1]")))
        return -1;
    return ct_check_ids(a->targets, fn, "targets", 0, a->C, 1, ignore_index);
}
