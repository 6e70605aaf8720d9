/* bind_activation.c - Python bindings of activation.c. */
#include "ct_py.h"
#include "../activation.h"

/* Python names and "backward needs the output" flags, in enum order. */
#define CT_ACT_NAME(id, name, saves_output) name,
#define CT_ACT_SAVES(id, name, saves_output) saves_output,
static const char *const activation_names[CT_ACT_COUNT] = {CT_ACTIVATIONS(CT_ACT_NAME)};
static const int activation_saves[CT_ACT_COUNT] = {CT_ACTIVATIONS(CT_ACT_SAVES)};
#undef CT_ACT_NAME
#undef CT_ACT_SAVES

/* The kind named `name`, or -1 with ValueError listing the valid names. */
static int activation_kind(const char *name, const char *fn)
{
    for (int k = 0; k < CT_ACT_COUNT; k++)
        if (strcmp(name, activation_names[k]) == 0) return k;
    PyErr_Format(PyExc_ValueError,
                 "%s: kind must be one of 'relu', 'gelu', 'gelu_tanh', 'tanh', 'sigmoid', got '%s'",
                 fn, name);
    return -1;
}

/* activation_forward(x (...), kind) -> out (same shape) */
static PyObject *py_activation_forward(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"x", "kind", NULL};
    const char *fn = "activation_forward";
    PyObject *o_x;
    const char *kind_name;
    ct_held held = {0};
    if (!ct_parse_args(args, kw, "Os:activation_forward", names, &o_x, &kind_name)) return NULL;
    int kind = activation_kind(kind_name, fn);
    if (kind < 0) return NULL;
    PyArrayObject *x = ct_input(&held, o_x, fn, "x", CT_ANY_FLOAT, 0, -1, 0);
    if (x == NULL) goto fail;
    int t = PyArray_TYPE(x);
    PyArrayObject *out = ct_empty(&held, t, PyArray_NDIM(x), PyArray_DIMS(x));
    if (out == NULL) goto fail;
    CT_DISPATCH(t, activation_forward, PyArray_DATA(out), PyArray_DATA(x), PyArray_SIZE(x),
                (ct_activation)kind);
    return ct_finish(&held, ct_ret(out));
fail:
    return ct_finish(&held, NULL);
}

/* activation_backward(dout (...), saved (same shape), kind, dinp=None) -> dinp;
 * saved is x, or the output for kinds that save it; a given dinp is
 * accumulated into. */
static PyObject *py_activation_backward(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"dout", "saved", "kind", "dinp", NULL};
    const char *fn = "activation_backward";
    PyObject *o_dout, *o_saved, *o_dinp = Py_None;
    const char *kind_name;
    ct_held held = {0};
    if (!ct_parse_args(args, kw, "OOs|O:activation_backward", names, &o_dout, &o_saved, &kind_name,
                                     &o_dinp))
        return NULL;
    int kind = activation_kind(kind_name, fn);
    if (kind < 0) return NULL;
    PyArrayObject *saved = ct_input(&held, o_saved, fn, "saved", CT_ANY_FLOAT, 0, -1, 0);
    if (saved == NULL) goto fail;
    int t = PyArray_TYPE(saved), nd = PyArray_NDIM(saved);
    PyArrayObject *dout = ct_input(&held, o_dout, fn, "dout", t, nd, nd, 0);
    if (dout == NULL) goto fail;
    if (ct_check_dims(dout, fn, "dout", nd, PyArray_DIMS(saved), "saved's shape", 0)) goto fail;
    PyArrayObject *dinp = ct_grad(&held, o_dinp, fn, "dinp", t, nd, PyArray_DIMS(saved), 1);
    if (dinp == NULL) goto fail;
    CT_DISPATCH(t, activation_backward, PyArray_DATA(dinp), PyArray_DATA(dout),
                PyArray_DATA(saved), PyArray_SIZE(saved), (ct_activation)kind);
    return ct_finish(&held, ct_ret(dinp));
fail:
    return ct_finish(&held, NULL);
}

/* activation_saves_output(kind) -> bool: does backward take the output (else the input)? */
static PyObject *py_activation_saves_output(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"kind", NULL};
    const char *kind_name;
    if (!ct_parse_args(args, kw, "s:activation_saves_output", names, &kind_name)) return NULL;
    int kind = activation_kind(kind_name, "activation_saves_output");
    if (kind < 0) return NULL;
    return PyBool_FromLong(activation_saves[kind]);
}

PyMethodDef ct_methods_activation[] = {
    CT_METHOD(activation_forward, "activation_forward(x, kind) -> out"),
    CT_METHOD(activation_backward, "activation_backward(dout, saved, kind, dinp=None) -> dinp"),
    CT_METHOD(activation_saves_output, "activation_saves_output(kind) -> bool"),
    {NULL, NULL, 0, NULL},
};
