/* bind_dropout.c - the custom parts of the bindings of dropout.c (the rest is
 * generated from kernel_table.py). */
#include "../dropout.h"
/* An integer in [0, 2**64) (Python int or NumPy integer), else
 * TypeError / ValueError; returns 0 on success. */
static int uint64_arg(PyObject *obj, const char *fn, const char *arg, uint64_t *value)
{
    if (PyBool_Check(obj) || !PyIndex_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s: %s must be an int, got %s", fn, arg, Py_TYPE(obj)->tp_name);
        return -1;
    }
    PyObject *as_int = PyNumber_Index(obj);
    if (as_int == NULL) return -1;
    unsigned long long v = PyLong_AsUnsignedLongLong(as_int);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%s: %s must be in [0, 2**64), got %R", fn, arg, as_int);
        Py_DECREF(as_int);
        return -1;
    }
    Py_DECREF(as_int);
    *value = (uint64_t)v;
    return 0;
}
