/* bind_optim.c - the custom parts of the bindings of optim.c: range checks
 * (used by the table's sgd_step / adam_step) and the bodies of grad_norm /
 * clip_grad_norm / adam_multi_step, which take sequences of arrays. */
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

/* The sequence argument `arg` as a tuple (a copy: it cannot change while
 * the GIL is released) of `count` items (count < 0: any), else a TypeError /
 * ValueError naming it. */
static PyObject *list_arg(PyObject *obj, const char *fn, const char *arg, Py_ssize_t count)
{
    PyObject *tuple = PyArray_Check(obj) ? NULL : PySequence_Tuple(obj);
    if (tuple == NULL) {
        if (PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_TypeError)) return NULL;
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s: %s must be a list of arrays, got %s", fn, arg, Py_TYPE(obj)->tp_name);
        return NULL;
    }
    if (count >= 0 && PyTuple_GET_SIZE(tuple) != count) {
        PyErr_Format(PyExc_ValueError, "%s: %s must have one entry per parameter (%zd), got %zd", fn, arg,
                     count, PyTuple_GET_SIZE(tuple));
        Py_DECREF(tuple);
        return NULL;
    }
    return tuple;
}

/* adam_multi_step's list arguments, in the order of adam_entry_check's `lists`. */
static const char *const adam_lists[6] = {"params", "grads",          "exp_avgs",
                                          "exp_avg_sqs", "steps", "max_exp_avg_sqs"};

/* One parameter of adam_multi_step, checked as adam_step checks its
 * arguments (names like "exp_avgs[3]"); the arrays are held in `held`. */
typedef struct {
    ct_held held;
    PyArrayObject *param, *grad, *exp_avg, *exp_avg_sq, *max_exp_avg_sq;
    long long step;
} adam_entry;

static int adam_entry_check(adam_entry *e, PyObject *const lists[6], Py_ssize_t i, const char *fn)
{
    char name[6][48];
    for (int k = 0; k < 6; k++) snprintf(name[k], sizeof name[k], "%s[%zd]", adam_lists[k], i);
    e->step = PyLong_AsLongLong(PyTuple_GET_ITEM(lists[4], i));
    if (e->step == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s: %s must be an int, got %s", fn, name[4],
                     Py_TYPE(PyTuple_GET_ITEM(lists[4], i))->tp_name);
        return -1;
    }
    if (ct_check_positive(e->step, fn, name[4], 0)) return -1;
    e->param = ct_inplace(&e->held, PyTuple_GET_ITEM(lists[0], i), fn, name[0], CT_ANY_FLOAT, 0, NULL, -1, 0);
    if (e->param == NULL) return -1;
    int t = PyArray_TYPE(e->param), nd = PyArray_NDIM(e->param);
    npy_intp *shape = PyArray_DIMS(e->param);
    e->grad = ct_input(&e->held, PyTuple_GET_ITEM(lists[1], i), fn, name[1], t, nd, nd, 0);
    if (e->grad == NULL || ct_check_dims(e->grad, fn, name[1], nd, shape, "its param's shape", 0)) return -1;
    e->exp_avg = ct_inplace(&e->held, PyTuple_GET_ITEM(lists[2], i), fn, name[2], t, nd, shape, PyArray_SIZE(e->param), 0);
    if (e->exp_avg == NULL) return -1;
    e->exp_avg_sq = ct_inplace(&e->held, PyTuple_GET_ITEM(lists[3], i), fn, name[3], t, nd, shape, PyArray_SIZE(e->param), 0);
    if (e->exp_avg_sq == NULL) return -1;
    e->max_exp_avg_sq = NULL;
    if (lists[5] != NULL) {
        e->max_exp_avg_sq = ct_inplace(&e->held, PyTuple_GET_ITEM(lists[5], i), fn, name[5], t, nd, shape, PyArray_SIZE(e->param), 0);
        if (e->max_exp_avg_sq == NULL) return -1;
    }
    return 0;
}

/* The checked entries as adam_multi_step_f32 / _f64 take them (a list may
 * mix the dtypes): one call per dtype, under one GIL release.  Returns 0, or
 * -1 when out of memory (before any parameter moved, unless the list mixes
 * dtypes and only the float64 call failed). */
static int adam_run(const adam_entry *entries, Py_ssize_t count, const adam_multi_step_args *a)
{
    adam_param_f32 *p32 = PyMem_Calloc((size_t)(count > 0 ? count : 1), sizeof *p32);
    adam_param_f64 *p64 = PyMem_Calloc((size_t)(count > 0 ? count : 1), sizeof *p64);
    Py_ssize_t n32 = 0, n64 = 0;
    int status = -1;
    if (p32 == NULL || p64 == NULL) goto done;
    for (Py_ssize_t i = 0; i < count; i++) {
        const adam_entry *e = &entries[i];
        void *vmax = e->max_exp_avg_sq ? PyArray_DATA(e->max_exp_avg_sq) : NULL;
        if (PyArray_TYPE(e->param) == NPY_FLOAT32)
            p32[n32++] = (adam_param_f32){PyArray_DATA(e->param), PyArray_DATA(e->exp_avg), PyArray_DATA(e->exp_avg_sq),
                                          vmax, PyArray_DATA(e->grad), PyArray_SIZE(e->param), (int64_t)e->step};
        else
            p64[n64++] = (adam_param_f64){PyArray_DATA(e->param), PyArray_DATA(e->exp_avg), PyArray_DATA(e->exp_avg_sq),
                                          vmax, PyArray_DATA(e->grad), PyArray_SIZE(e->param), (int64_t)e->step};
    }
    CT_BEGIN_KERNEL
    status = adam_multi_step_f32(p32, n32, a->lr, a->beta1, a->beta2, a->eps, a->weight_decay,
                                 a->decoupled_weight_decay, a->maximize);
    if (status == 0)
        status = adam_multi_step_f64(p64, n64, a->lr, a->beta1, a->beta2, a->eps, a->weight_decay,
                                     a->decoupled_weight_decay, a->maximize);
    CT_END_KERNEL
done:
    PyMem_Free(p32);
    PyMem_Free(p64);
    return status;
}

/* adam_multi_step: every list entry is checked before any parameter moves;
 * then one GIL release runs adam_multi_step (optim.c: all the parameters'
 * elements in one pool job), once per dtype present. */
static PyObject *adam_multi_step_impl(const adam_multi_step_args *a, const char *fn)
{
    if (check_range(a->lr, fn, "lr", 0, 0, 0, 0) || check_range(a->beta1, fn, "beta1", 0, 0, 1, 1) ||
        check_range(a->beta2, fn, "beta2", 0, 0, 1, 1) || check_range(a->eps, fn, "eps", 0, 0, 0, 0) ||
        check_range(a->weight_decay, fn, "weight_decay", 0, 0, 0, 0))
        return NULL;
    PyObject *maxs = a->o_max_exp_avg_sqs;
    if (a->amsgrad && (maxs == NULL || maxs == Py_None)) {
        PyErr_Format(PyExc_TypeError, "%s: max_exp_avg_sqs is required when amsgrad=True, got None", fn);
        return NULL;
    }
    PyObject *lists[6] = {NULL};
    adam_entry *entries = NULL;
    Py_ssize_t count = 0, checked = 0;
    PyObject *result = NULL;
    lists[0] = list_arg(a->o_params, fn, "params", -1);
    if (lists[0] == NULL) goto done;
    count = PyTuple_GET_SIZE(lists[0]);
    PyObject *given[6] = {a->o_params, a->o_grads, a->o_exp_avgs, a->o_exp_avg_sqs, a->o_steps, maxs};
    for (int k = 1; k < 6; k++) {
        if (k == 5 && !a->amsgrad) break;
        lists[k] = list_arg(given[k], fn, adam_lists[k], count);
        if (lists[k] == NULL) goto done;
    }
    entries = PyMem_Calloc((size_t)(count > 0 ? count : 1), sizeof *entries);
    if (entries == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (; checked < count; checked++)
        if (adam_entry_check(&entries[checked], lists, checked, fn)) {
            checked++; /* release what this entry acquired too */
            goto done;
        }
    if (adam_run(entries, count, a)) {
        PyErr_NoMemory();
        goto done;
    }
    result = ct_none();
done:
    for (Py_ssize_t i = 0; i < checked; i++) ct_release(&entries[i].held);
    PyMem_Free(entries);
    for (int k = 0; k < 6; k++) Py_XDECREF(lists[k]);
    return result;
}
