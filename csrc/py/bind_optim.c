/* bind_optim.c - the custom parts of the bindings of optim.c: range checks
 * (used by the table's sgd_step / adam_step) and the bodies of grad_norm /
 * clip_grad_norm, which take a sequence of arrays. */
#include "../optim.h"

/* value >= low (or > low when strict) and, when has_high, value < high;
 * NaN fails.  ValueError "<fn>: <arg> must be ..., got <value>". */
static int check_range(double value, const char *fn, const char *arg, double low, int strict,
                       int has_high, double high)
{
    int ok = (strict ? value > low : value >= low) && (!has_high || value < high);
    if (ok) return 0;
    PyObject *v = PyFloat_FromDouble(value), *lo = PyFloat_FromDouble(low);
    PyObject *hi = PyFloat_FromDouble(high);
    if (has_high)
        PyErr_Format(PyExc_ValueError, "%s: %s must be in [%R, %R), got %R", fn, arg, lo, hi, v);
    else
        PyErr_Format(PyExc_ValueError, "%s: %s must be %s %R, got %R", fn, arg, strict ? ">" : ">=",
                     lo, v);
    Py_XDECREF(v);
    Py_XDECREF(lo);
    Py_XDECREF(hi);
    return -1;
}

/* nesterov needs momentum > 0 and dampening == 0 (as torch). */
static int check_nesterov(int nesterov, double momentum, double dampening, const char *fn)
{
    if (!nesterov || (momentum > 0 && dampening == 0)) return 0;
    PyObject *m = PyFloat_FromDouble(momentum), *d = PyFloat_FromDouble(dampening);
    PyErr_Format(PyExc_ValueError,
                 "%s: nesterov must be used with momentum > 0 and dampening == 0, "
                 "got momentum=%R, dampening=%R", fn, m, d);
    Py_XDECREF(m);
    Py_XDECREF(d);
    return -1;
}

static int check_norm_type(double norm_type, const char *fn)
{
    return check_range(norm_type, fn, "norm_type", 0, 1, 0, 0);
}

/* sum |x|^p (or max |x|) over every array of the tuple `grads`, combined,
 * then turned into the norm; views are read through copies. */
static int total_norm(PyObject *grads, const char *fn, double norm_type, double *norm)
{
    double total = 0;
    char arg[32];
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(grads); i++) {
        ct_held held = {0};
        double partial = 0;
        snprintf(arg, sizeof arg, "grads[%zd]", i);
        PyArrayObject *g = ct_input(&held, PyTuple_GET_ITEM(grads, i), fn, arg, CT_ANY_FLOAT, 0,
                                    -1, 0);
        if (g == NULL) return -1;
        CT_BEGIN_KERNEL
        if (PyArray_TYPE(g) == NPY_FLOAT32)
            partial = norm_partial_f32(PyArray_DATA(g), PyArray_SIZE(g), norm_type);
        else
            partial = norm_partial_f64(PyArray_DATA(g), PyArray_SIZE(g), norm_type);
        CT_END_KERNEL
        ct_release(&held);
        total = ct_norm_combine(total, partial, norm_type);
    }
    *norm = ct_norm_finish(total, norm_type);
    return 0;
}

/* The argument `grads` as a tuple (a copy, so that it cannot change while
 * the GIL is released); a single array counts as a list of one. */
static PyObject *grads_tuple(PyObject *obj, const char *fn)
{
    if (PyArray_Check(obj)) return PyTuple_Pack(1, obj);
    PyObject *tuple = PySequence_Tuple(obj);
    if (tuple == NULL && PyErr_ExceptionMatches(PyExc_TypeError)) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s: grads must be a sequence of numpy.ndarray, got %s", fn,
                     Py_TYPE(obj)->tp_name);
    }
    return tuple;
}

/* grad_norm(grads, norm_type=2.0) -> float */
static PyObject *grad_norm_impl(const grad_norm_args *a, const char *fn)
{
    double norm;
    if (check_norm_type(a->norm_type, fn)) return NULL;
    PyObject *grads = grads_tuple(a->o_grads, fn);
    if (grads == NULL) return NULL;
    int status = total_norm(grads, fn, a->norm_type, &norm);
    Py_DECREF(grads);
    return status ? NULL : PyFloat_FromDouble(norm);
}

/* clip_grad_norm(grads, max_norm, norm_type=2.0) -> total_norm (float); every
 * grad *= min(max_norm / (total_norm + 1e-6), 1), in place. */
static PyObject *clip_grad_norm_impl(const clip_grad_norm_args *call, const char *fn)
{
    PyObject *o_grads = call->o_grads;
    double max_norm = call->max_norm, norm_type = call->norm_type, norm;
    char arg[32];
    if (check_norm_type(norm_type, fn) || check_range(max_norm, fn, "max_norm", 0, 0, 0, 0))
        return NULL;
    PyObject *grads = grads_tuple(o_grads, fn);
    if (grads == NULL) return NULL;
    Py_ssize_t count = PyTuple_GET_SIZE(grads);
    /* every grad is checked before any is scaled */
    for (Py_ssize_t i = 0; i < count; i++) {
        snprintf(arg, sizeof arg, "grads[%zd]", i);
        if (!ct_inplace(NULL, PyTuple_GET_ITEM(grads, i), fn, arg, CT_ANY_FLOAT, 0, NULL, -1, 0))
            goto fail;
    }
    if (total_norm(grads, fn, norm_type, &norm)) goto fail;
    /* clamp(max=1) keeps a NaN coefficient, as torch.clamp */
    double clip_coef = max_norm / (norm + 1e-6);
    if (clip_coef > 1) clip_coef = 1;
    for (Py_ssize_t i = 0; i < count && clip_coef != 1; i++) {
        PyArrayObject *g = (PyArrayObject *)PyTuple_GET_ITEM(grads, i);
        CT_DISPATCH(PyArray_TYPE(g), scale_inplace, PyArray_DATA(g), PyArray_SIZE(g), clip_coef);
    }
    Py_DECREF(grads);
    return PyFloat_FromDouble(norm);
fail:
    Py_DECREF(grads);
    return NULL;
}
