/* bind_crossentropy.c - Python bindings of crossentropy.c. */
#include "ct_py.h"
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

/* cross_entropy_forward(logits (N, C), targets (N), ignore_index=-100,
 *                       label_smoothing=0.0, reduction="mean", weight=None)
 *   -> (loss () or (N), lse (N) float64) */
static PyObject *py_cross_entropy_forward(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"logits", "targets", "ignore_index", "label_smoothing", "reduction",
                            "weight", NULL};
    const char *fn = "cross_entropy_forward", *reduction = "mean";
    PyObject *o_logits, *o_targets, *o_weight = Py_None;
    long long ignore_index = -100;
    double eps = 0.0;
    ct_held held = {0};
    ce_args a;
    if (!ct_parse_args(args, kw, "OO|LdsO:cross_entropy_forward", names, &o_logits, &o_targets,
                                     &ignore_index, &eps, &reduction, &o_weight))
        return NULL;
    if (ce_common(&held, &a, fn, o_logits, o_targets, o_weight, ignore_index, eps, reduction))
        goto fail;
    npy_intp nshape[1] = {a.N};
    int loss_ndim = a.reduction == CT_REDUCE_NONE ? 1 : 0;
    PyArrayObject *loss = ct_empty(&held, a.t, loss_ndim, nshape);
    PyArrayObject *lse = ct_empty(&held, NPY_FLOAT64, 1, nshape);
    if (loss == NULL || lse == NULL) goto fail;
    CT_DISPATCH(a.t, cross_entropy_forward, PyArray_DATA(loss), (double *)PyArray_DATA(lse),
                PyArray_DATA(a.logits), (const int64_t *)PyArray_DATA(a.targets),
                CT_DATA(a.weight), a.N, a.C, (int64_t)ignore_index, eps, a.reduction);
    return ct_finish(&held, ct_results(2, loss, lse));
fail:
    return ct_finish(&held, NULL);
}

/* cross_entropy_backward(dloss () or (N), logits (N, C), targets (N), lse (N) float64,
 *                        ignore_index=-100, label_smoothing=0.0, reduction="mean",
 *                        weight=None, dlogits=None) -> dlogits (N, C), accumulated into
 *                        when given */
static PyObject *py_cross_entropy_backward(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"dloss", "logits", "targets", "lse", "ignore_index",
                            "label_smoothing", "reduction", "weight", "dlogits", NULL};
    const char *fn = "cross_entropy_backward", *reduction = "mean";
    PyObject *o_dloss, *o_logits, *o_targets, *o_lse, *o_weight = Py_None, *o_dlogits = Py_None;
    long long ignore_index = -100;
    double eps = 0.0;
    ct_held held = {0};
    ce_args a;
    if (!ct_parse_args(args, kw, "OOOO|LdsOO:cross_entropy_backward", names, &o_dloss, &o_logits,
                                     &o_targets, &o_lse, &ignore_index, &eps, &reduction,
                                     &o_weight, &o_dlogits))
        return NULL;
    if (ce_common(&held, &a, fn, o_logits, o_targets, o_weight, ignore_index, eps, reduction))
        goto fail;
    int dloss_ndim = a.reduction == CT_REDUCE_NONE ? 1 : 0;
    PyArrayObject *dloss = ct_input(&held, o_dloss, fn, "dloss", a.t, dloss_ndim, dloss_ndim, 0);
    if (dloss == NULL || (dloss_ndim && ct_check_dim(dloss, fn, "dloss", 0, a.N, "logits.shape[0]")))
        goto fail;
    PyArrayObject *lse = ct_input(&held, o_lse, fn, "lse", NPY_FLOAT64, 1, 1, 0);
    if (lse == NULL || ct_check_dim(lse, fn, "lse", 0, a.N, "logits.shape[0]")) goto fail;
    PyArrayObject *dlogits = ct_grad(&held, o_dlogits, fn, "dlogits", a.t, 2, PyArray_DIMS(a.logits), 1);
    if (dlogits == NULL) goto fail;
    CT_DISPATCH(a.t, cross_entropy_backward, PyArray_DATA(dlogits), PyArray_DATA(dloss),
                PyArray_DATA(a.logits), (const int64_t *)PyArray_DATA(a.targets),
                (const double *)PyArray_DATA(lse), CT_DATA(a.weight), a.N, a.C,
                (int64_t)ignore_index, eps, a.reduction);
    return ct_finish(&held, ct_ret(dlogits));
fail:
    return ct_finish(&held, NULL);
}

PyMethodDef ct_methods_crossentropy[] = {
    CT_METHOD(cross_entropy_forward,
              "cross_entropy_forward(logits, targets, ignore_index=-100, label_smoothing=0.0, "
              "reduction='mean', weight=None) -> (loss, lse)"),
    CT_METHOD(cross_entropy_backward,
              "cross_entropy_backward(dloss, logits, targets, lse, ignore_index=-100, "
              "label_smoothing=0.0, reduction='mean', weight=None, dlogits=None) -> dlogits"),
    {NULL, NULL, 0, NULL},
};
