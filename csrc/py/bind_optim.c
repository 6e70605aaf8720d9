/* bind_optim.c - the custom bodies of the bindings of optim.c (their
 * signatures are in kernel_table.py).  Parameters and optimizer
 * state are updated in place, so they must be C-contiguous (ct_inplace);
 * gradients are only read (ct_input copies views). */
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

/* A state array updated in place, of the dtype and shape of param. */
static PyArrayObject *state_like(ct_held *held, PyObject *obj, PyArrayObject *param, const char *fn,
                                 const char *arg, int optional)
{
    return ct_inplace(held, obj, fn, arg, PyArray_TYPE(param), PyArray_NDIM(param), PyArray_DIMS(param),
                      -1, optional);
}

/* The gradient: read-only, of param's dtype and exact shape. */
static PyArrayObject *grad_like(ct_held *held, PyObject *obj, PyArrayObject *param, const char *fn)
{
    int nd = PyArray_NDIM(param);
    PyArrayObject *grad = ct_input(held, obj, fn, "grad", PyArray_TYPE(param), nd, nd, 0);
    if (grad == NULL || ct_check_dims(grad, fn, "grad", nd, PyArray_DIMS(param), "param's shape", 0))
        return NULL;
    return grad;
}

/* sgd_step(param, grad, momentum_buffer | None, lr, momentum=0, dampening=0,
 *          nesterov=False, weight_decay=0, maximize=False, first_step=False) -> None */
static PyObject *sgd_step_impl(const sgd_step_args *call, const char *fn)
{
    PyObject *o_param = call->o_param, *o_grad = call->o_grad, *o_buf = call->o_momentum_buffer;
    double lr = call->lr, momentum = call->momentum, dampening = call->dampening;
    double weight_decay = call->weight_decay;
    int nesterov = call->nesterov, maximize = call->maximize, first_step = call->first_step;
    ct_held held = {0};
    if (check_range(lr, fn, "lr", 0, 0, 0, 0) || check_range(momentum, fn, "momentum", 0, 0, 0, 0) ||
        check_range(weight_decay, fn, "weight_decay", 0, 0, 0, 0))
        return NULL;
    if (nesterov && (momentum <= 0 || dampening != 0)) {
        PyObject *m = PyFloat_FromDouble(momentum), *d = PyFloat_FromDouble(dampening);
        PyErr_Format(PyExc_ValueError,
                     "%s: nesterov must be used with momentum > 0 and dampening == 0, "
                     "got momentum=%R, dampening=%R", fn, m, d);
        Py_XDECREF(m);
        Py_XDECREF(d);
        return NULL;
    }
    PyArrayObject *param = ct_inplace(&held, o_param, fn, "param", CT_ANY_FLOAT, 0, NULL, -1, 0);
    if (param == NULL) goto fail;
    PyArrayObject *grad = grad_like(&held, o_grad, param, fn);
    if (grad == NULL) goto fail;
    PyArrayObject *buf = state_like(&held, o_buf, param, fn, "momentum_buffer", momentum == 0);
    if (PyErr_Occurred()) goto fail;
    CT_DISPATCH(PyArray_TYPE(param), sgd_step, PyArray_DATA(param), PyArray_DATA(grad),
                CT_DATA(buf), PyArray_SIZE(param), lr, momentum, dampening, nesterov,
                weight_decay, maximize, first_step);
    return ct_finish(&held, ct_none());
fail:
    return ct_finish(&held, NULL);
}

/* adam_step(param, grad, exp_avg, exp_avg_sq, step, lr=1e-3, beta1=0.9, beta2=0.999,
 *           eps=1e-8, weight_decay=0, decoupled_weight_decay=False, amsgrad=False,
 *           max_exp_avg_sq=None, maximize=False) -> None */
static PyObject *adam_step_impl(const adam_step_args *call, const char *fn)
{
    PyObject *o_param = call->o_param, *o_grad = call->o_grad, *o_m = call->o_exp_avg;
    PyObject *o_v = call->o_exp_avg_sq, *o_vmax = call->o_max_exp_avg_sq;
    long long step = call->step;
    double lr = call->lr, beta1 = call->beta1, beta2 = call->beta2, eps = call->eps;
    double weight_decay = call->weight_decay;
    int decoupled = call->decoupled_weight_decay, amsgrad = call->amsgrad, maximize = call->maximize;
    ct_held held = {0};
    if (ct_check_positive(step, fn, "step", 0) || check_range(lr, fn, "lr", 0, 0, 0, 0) ||
        check_range(beta1, fn, "beta1", 0, 0, 1, 1) || check_range(beta2, fn, "beta2", 0, 0, 1, 1) ||
        check_range(eps, fn, "eps", 0, 0, 0, 0) ||
        check_range(weight_decay, fn, "weight_decay", 0, 0, 0, 0))
        return NULL;
    PyArrayObject *param = ct_inplace(&held, o_param, fn, "param", CT_ANY_FLOAT, 0, NULL, -1, 0);
    if (param == NULL) goto fail;
    PyArrayObject *grad = grad_like(&held, o_grad, param, fn);
    if (grad == NULL) goto fail;
    PyArrayObject *m = state_like(&held, o_m, param, fn, "exp_avg", 0);
    PyArrayObject *v = m ? state_like(&held, o_v, param, fn, "exp_avg_sq", 0) : NULL;
    if (v == NULL) goto fail;
    PyArrayObject *vmax = NULL;
    if (amsgrad && !(vmax = state_like(&held, o_vmax, param, fn, "max_exp_avg_sq", 0))) goto fail;
    CT_DISPATCH(PyArray_TYPE(param), adam_step, PyArray_DATA(param), PyArray_DATA(grad),
                PyArray_DATA(m), PyArray_DATA(v), CT_DATA(vmax), PyArray_SIZE(param),
                (int64_t)step, lr, beta1, beta2, eps, weight_decay, decoupled, maximize);
    return ct_finish(&held, ct_none());
fail:
    return ct_finish(&held, NULL);
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
static PyObject *grad_norm_impl(const grad_norm_args *call, const char *fn)
{
    PyObject *o_grads = call->o_grads;
    double norm_type = call->norm_type, norm;
    if (check_norm_type(norm_type, fn)) return NULL;
    PyObject *grads = grads_tuple(o_grads, fn);
    if (grads == NULL) return NULL;
    int status = total_norm(grads, fn, norm_type, &norm);
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
