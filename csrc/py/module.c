/* module.c - the private extension module ctransformer._C.
 * It joins the method tables of every family (generated/families.h) and adds the
 * thread and floating-point knobs.  The public API is ctransformer.kernels. */
#define CT_PY_MODULE_C
#include "ct_py.h"
#include "generated/families.h"
#include "../ct_blas.h"
#include "../packed_gemm.h"
#include "../parallel.h"

#define CT_DECLARE_TABLE(family) extern PyMethodDef ct_methods_##family[];
CT_FAMILIES(CT_DECLARE_TABLE)

static PyObject *py_set_num_threads(PyObject *self, PyObject *arg)
{
    long n = PyLong_AsLong(arg);
    if (n == -1 && PyErr_Occurred()) return NULL;
    if (n < 1) {
        PyErr_Format(PyExc_ValueError, "set_num_threads: n must be >= 1, got %ld", n);
        return NULL;
    }
    ct_set_num_threads((int)n);
    Py_RETURN_NONE;
}

static PyObject *py_get_num_threads(PyObject *self, PyObject *unused)
{
    return PyLong_FromLong(ct_get_num_threads());
}

/* threads_for(flops, ceiling) -> threads one kernel call of `flops` uses (parallel.h) */
static PyObject *py_threads_for(PyObject *self, PyObject *args)
{
    double flops;
    int ceiling;
    if (!PyArg_ParseTuple(args, "di:threads_for", &flops, &ceiling)) return NULL;
    return PyLong_FromLong(ct_threads_for(flops, ceiling));
}

/* pool_threads_for(flops, ceiling) -> threads one pooled job (the attention
 * heads) of `flops` uses (parallel.h) */
static PyObject *py_pool_threads_for(PyObject *self, PyObject *args)
{
    double flops;
    int ceiling;
    if (!PyArg_ParseTuple(args, "di:pool_threads_for", &flops, &ceiling)) return NULL;
    return PyLong_FromLong(ct_pool_threads_for(flops, ceiling));
}

/* thread_policy_load_blind(on or None) -> the previous setting (parallel.h) */
static PyObject *py_thread_policy_load_blind(PyObject *self, PyObject *arg)
{
    int previous = ct_threads_load_blind();
    if (arg != Py_None) {
        int on = PyObject_IsTrue(arg);
        if (on < 0) return NULL;
        ct_threads_set_load_blind(on);
    }
    return PyBool_FromLong(previous);
}

/* share_speeds(speeds or None) -> the previous speeds of threads 0-7 (parallel.h: ct_share_pin) */
static PyObject *py_share_speeds(PyObject *self, PyObject *arg)
{
    enum { SHOWN = 8, MOST = 64 };
    double speeds[MOST], previous[SHOWN];
    Py_ssize_t n = 0;
    if (arg != Py_None) {
        PyObject *seq = PySequence_Fast(arg, "share_speeds: speeds must be a sequence of floats or None");
        if (seq == NULL) return NULL;
        n = PySequence_Fast_GET_SIZE(seq);
        if (n < 1 || n > MOST) {
            Py_DECREF(seq);
            return PyErr_Format(PyExc_ValueError, "share_speeds: 1 to %d speeds expected, got %zd", MOST, n);
        }
        for (Py_ssize_t t = 0; t < n; t++) speeds[t] = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(seq, t));
        Py_DECREF(seq);
        if (PyErr_Occurred()) return NULL;
    }
    if (ct_share_pin(arg == Py_None ? NULL : speeds, (int)n, previous, SHOWN) != 0)
        return PyErr_Format(PyExc_ValueError, "share_speeds: every speed must be within [0.33, 3], got %R", arg);
    PyObject *out = PyTuple_New(SHOWN);
    if (out == NULL) return NULL;
    for (int t = 0; t < SHOWN; t++) {
        PyObject *v = PyFloat_FromDouble(previous[t]);
        if (v == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, t, v);
    }
    return out;
}

/* copy_array(a) -> a C-ordered copy of a: float32 / float64 in the machine's
 * order and C-contiguous copied on the pool (parallel.h: ct_parallel_copy),
 * the GIL released; anything else by NumPy. */
static PyObject *py_copy_array(PyObject *self, PyObject *arg)
{
    if (!PyArray_Check(arg))
        return PyErr_Format(PyExc_TypeError, "copy_array: a must be a numpy.ndarray, got %s", Py_TYPE(arg)->tp_name);
    PyArrayObject *a = (PyArrayObject *)arg;
    int type = PyArray_TYPE(a);
    if ((type != NPY_FLOAT32 && type != NPY_FLOAT64) || !PyArray_IS_C_CONTIGUOUS(a) || !PyArray_ISNOTSWAPPED(a))
        return PyArray_NewCopy(a, NPY_CORDER);
    PyArrayObject *out = (PyArrayObject *)PyArray_EMPTY(PyArray_NDIM(a), PyArray_DIMS(a), type, 0);
    if (out == NULL) return NULL;
    void *dst = PyArray_DATA(out);
    const void *src = PyArray_DATA(a);
    size_t bytes = (size_t)PyArray_NBYTES(a);
    Py_BEGIN_ALLOW_THREADS
    ct_parallel_copy(dst, src, bytes);
    Py_END_ALLOW_THREADS
    return (PyObject *)out;
}

static PyObject *py_blas_config(PyObject *self, PyObject *unused)
{
#ifdef CT_BLAS_SCIPY
    return PyUnicode_FromString("scipy-openblas32 (bundled)");
#else
    return PyUnicode_FromString("system OpenBLAS");
#endif
}

static const char *const packed_names[] = {"off", "avx2", "avx512", "auto"};

/* packed_gemm(mode or None) -> (previous mode, isa now in use); see packed_gemm.h */
static PyObject *py_packed_gemm(PyObject *self, PyObject *arg)
{
    int previous = ct_packed_mode();
    if (arg != Py_None) {
        const char *name = PyUnicode_Check(arg) ? PyUnicode_AsUTF8(arg) : NULL;
        int mode = -1;
        for (int i = 0; name && i < 4; i++)
            if (strcmp(name, packed_names[i]) == 0) mode = i;
        if (mode < 0) {
            PyErr_Format(PyExc_ValueError,
                         "packed_gemm: mode must be 'auto', 'avx512', 'avx2' or 'off', got %R", arg);
            return NULL;
        }
        ct_packed_set_mode(mode);
    }
    return Py_BuildValue("ss", packed_names[previous], packed_names[ct_packed_active_isa()]);
}

static PyMethodDef base_methods[] = {
    {"packed_gemm", py_packed_gemm, METH_O, "Select the packed recurrent GEMM kernel."},
    {"set_num_threads", py_set_num_threads, METH_O, "Set the thread ceiling of every kernel (our pool; OpenBLAS stays on one thread)."},
    {"get_num_threads", py_get_num_threads, METH_NOARGS, "The thread ceiling of every kernel."},
    {"threads_for", py_threads_for, METH_VARARGS, "Threads the policy gives one call of this many flops."},
    {"pool_threads_for", py_pool_threads_for, METH_VARARGS,
     "Threads the policy gives one pooled job (the attention heads) of this much work."},
    {"thread_policy_load_blind", py_thread_policy_load_blind, METH_O,
     "Make the thread count of a call depend on its size only (True), or also on the load (False)."},
    {"share_speeds", py_share_speeds, METH_O,
     "Pin the threads' relative speeds that size a split product's blocks (None: learn them again); "
     "returns the previous speeds of threads 0-7."},
    {"copy_array", py_copy_array, METH_O, "A C-ordered copy of an array (float32/float64 copied on the pool)."},
    {"blas_config", py_blas_config, METH_NOARGS, "Which OpenBLAS this build links."},
    {NULL, NULL, 0, NULL},
};

static PyMethodDef *all_methods;

static int count_methods(PyMethodDef *table)
{
    int n = 0;
    while (table[n].ml_name != NULL) n++;
    return n;
}

static PyMethodDef *join_tables(void)
{
    PyMethodDef *tables[] = {
        base_methods,
#define CT_LIST_TABLE(family) ct_methods_##family,
        CT_FAMILIES(CT_LIST_TABLE)
    };
    int ntables = (int)(sizeof(tables) / sizeof(tables[0]));
    int total = 0;
    for (int i = 0; i < ntables; i++) total += count_methods(tables[i]);
    PyMethodDef *joined = PyMem_Calloc((size_t)total + 1, sizeof(PyMethodDef));
    if (joined == NULL) return NULL;
    int k = 0;
    for (int i = 0; i < ntables; i++)
        for (int j = 0; tables[i][j].ml_name != NULL; j++) joined[k++] = tables[i][j];
    return joined;
}

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_C", "ctransformer's compiled kernels (private; use ctransformer.kernels).",
    -1, NULL,
};

PyMODINIT_FUNC PyInit__C(void)
{
    import_array();
    if (ct_fork_guard_install() < 0) return NULL;
    ct_blas_init_threads();
    if (all_methods == NULL) all_methods = join_tables();
    if (all_methods == NULL) return PyErr_NoMemory();
    module_def.m_methods = all_methods;
    return PyModule_Create(&module_def);
}
