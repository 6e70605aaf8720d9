/* args.c - argument checks shared by every binding (see ct_py.h). */
#include "ct_py.h"
#include "../parallel.h"

#include <math.h>
#include <stdarg.h>

int ct_parse_args(PyObject *args, PyObject *kw, const char *format, char **names, ...)
{
    va_list va;
    va_start(va, names);
    int ok = PyArg_VaParseTupleAndKeywords(args, kw, format, names, va);
    va_end(va);
    if (ok) return 1;
    const char *colon = strchr(format, ':');
    if (colon == NULL || !PyErr_ExceptionMatches(PyExc_TypeError)) return 0;
    /* CPython names the function for arity and most type errors, not for
     * a failed number conversion ("must be real number, not str") */
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    PyObject *text = value ? PyObject_Str(value) : NULL;
    const char *msg = text ? PyUnicode_AsUTF8(text) : NULL;
    size_t len = strlen(colon + 1);
    if (msg != NULL && strncmp(msg, colon + 1, len) != 0) {
        PyErr_Format(PyExc_TypeError, "%s(): %s", colon + 1, msg);
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
    } else {
        PyErr_Restore(type, value, tb);
    }
    Py_XDECREF(text);
    return 0;
}

/* Room for one more item: the inline list, then a heap block doubling. */
static int held_reserve(ct_held *held)
{
    if (held->items == NULL) {
        held->items = held->first;
        held->capacity = CT_HELD_INLINE;
    }
    if (held->count < held->capacity) return 0;
    int capacity = 2 * held->capacity;
    ct_held_item *items = PyMem_Malloc((size_t)capacity * sizeof(ct_held_item));
    if (items == NULL) return -1;
    memcpy(items, held->items, (size_t)held->count * sizeof(ct_held_item));
    if (held->items != held->first) PyMem_Free(held->items);
    held->items = items;
    held->capacity = capacity;
    return 0;
}

PyObject *ct_hold(ct_held *held, PyObject *obj)
{
    if (obj == NULL) return NULL;
    if (held_reserve(held) < 0) {
        Py_DECREF(obj);
        PyErr_NoMemory();
        return NULL;
    }
    held->items[held->count++] = (ct_held_item){obj, NULL, CT_HELD_OWNED};
    return obj;
}

/* Whether two C-contiguous arrays share bytes (their extents are exactly
 * their memory; an empty array shares nothing). */
static int arrays_overlap(PyArrayObject *a, PyArrayObject *b)
{
    npy_intp na = PyArray_NBYTES(a), nb = PyArray_NBYTES(b);
    if (na == 0 || nb == 0) return 0;
    const char *pa = PyArray_BYTES(a), *pb = PyArray_BYTES(b);
    return pa < pb + nb && pb < pa + na;
}

/* Hold `a` (a new reference) as an argument of kind CT_HELD_INPUT or
 * CT_HELD_INPLACE named `arg`, after checking that no array written in place
 * overlaps an array read or written by the same call.  Returns a, or NULL
 * with ValueError (a released). */
static PyArrayObject *hold_argument(ct_held *held, PyArrayObject *a, const char *fn,
                                    const char *arg, int kind)
{
    for (int i = 0; i < held->count; i++) {
        int other = held->items[i].kind;
        const char *other_name = held->items[i].name;
        if (other == CT_HELD_OWNED || (kind == CT_HELD_INPUT && other == CT_HELD_INPUT)) continue;
        if (!arrays_overlap(a, (PyArrayObject *)held->items[i].obj)) continue;
        if (kind == CT_HELD_INPLACE && other == CT_HELD_INPLACE)
            PyErr_Format(PyExc_ValueError,
                         "%s: %s and %s must be separate arrays, got overlapping memory (both are "
                         "written in place)",
                         fn, other_name, arg);
        else
            PyErr_Format(PyExc_ValueError,
                         "%s: %s and %s must be separate arrays, got overlapping memory (%s is "
                         "written in place while %s is read; pass a copy)",
                         fn, kind == CT_HELD_INPLACE ? arg : other_name,
                         kind == CT_HELD_INPLACE ? other_name : arg,
                         kind == CT_HELD_INPLACE ? arg : other_name,
                         kind == CT_HELD_INPLACE ? other_name : arg);
        Py_DECREF(a);
        return NULL;
    }
    if (ct_hold(held, (PyObject *)a) == NULL) return NULL;
    held->items[held->count - 1].name = arg;
    held->items[held->count - 1].kind = (unsigned char)kind;
    return a;
}

/* The dimension limit of the 32-bit BLAS (CT_BLAS_DIM_MAX), else ValueError. */
static int check_blas_limits(PyArrayObject *a, const char *fn, const char *arg)
{
    int nd = PyArray_NDIM(a);
    if (nd == 0) return 0;
    npy_intp last = PyArray_DIM(a, nd - 1), rows = 1;
    int big_rows = 0;
    for (int i = 0; i < nd - 1; i++) {
        npy_intp d = PyArray_DIM(a, i);
        if (d == 0) return 0; /* empty: nothing reaches the BLAS */
        if (rows > CT_BLAS_DIM_MAX / d) big_rows = 1;
        else rows *= d;
    }
    if (last == 0) return 0;
    if (last > CT_BLAS_DIM_MAX) {
        PyErr_Format(PyExc_ValueError,
                     "%s: %s.shape[-1] must be at most 2147483647 (2**31 - 1, the limit of the "
                     "32-bit BLAS), got %zd",
                     fn, arg, (Py_ssize_t)last);
        return -1;
    }
    if (big_rows) {
        PyErr_Format(PyExc_ValueError,
                     "%s: %s must have at most 2147483647 (2**31 - 1, the limit of the 32-bit "
                     "BLAS) rows, prod(shape[:-1]), got more",
                     fn, arg);
        return -1;
    }
    return 0;
}

void ct_release(ct_held *held)
{
    for (int i = 0; i < held->count; i++) Py_DECREF(held->items[i].obj);
    if (held->items != held->first) PyMem_Free(held->items);
    held->items = NULL;
    held->count = held->capacity = 0;
}

PyObject *ct_ret(PyArrayObject *a)
{
    Py_INCREF(a);
    return (PyObject *)a;
}

static const char *dtype_name(int typenum)
{
    switch (typenum) {
    case NPY_FLOAT32: return "float32";
    case NPY_FLOAT64: return "float64";
    case NPY_INT64: return "int64";
    case NPY_BOOL: return "bool";
    case CT_ANY_FLOAT: return "float32 or float64";
    case CT_IDS: return "an integer dtype";
    default: return "?";
    }
}

static int dtype_ok(PyArrayObject *a, int typenum)
{
    int t = PyArray_TYPE(a);
    if (typenum == CT_ANY_FLOAT) return t == NPY_FLOAT32 || t == NPY_FLOAT64;
    if (typenum == CT_IDS) return PyArray_ISINTEGER(a);
    return t == typenum;
}

static void set_dtype_error(PyArrayObject *a, const char *fn, const char *arg, int typenum)
{
    PyObject *descr = PyObject_Str((PyObject *)PyArray_DESCR(a));
    PyErr_Format(PyExc_TypeError, "%s: %s must have dtype %s, got %s", fn, arg,
                 dtype_name(typenum), descr ? PyUnicode_AsUTF8(descr) : "?");
    Py_XDECREF(descr);
}

/* obj as an array of dtype typenum (borrowed), else TypeError. */
static PyArrayObject *typed_array(PyObject *obj, const char *fn, const char *arg, int typenum)
{
    if (!PyArray_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s: %s must be a numpy.ndarray, got %s", fn, arg,
                     Py_TYPE(obj)->tp_name);
        return NULL;
    }
    PyArrayObject *a = (PyArrayObject *)obj;
    if (!dtype_ok(a, typenum)) {
        set_dtype_error(a, fn, arg, typenum);
        return NULL;
    }
    return a;
}

int ct_float_type(PyObject *obj, const char *fn, const char *arg, int *t)
{
    PyArrayObject *a = typed_array(obj, fn, arg, CT_ANY_FLOAT);
    if (a == NULL) return -1;
    *t = PyArray_TYPE(a);
    return 0;
}

int ct_parse_scale(PyObject *obj, npy_intp Dh, const char *fn, double *scale)
{
    if (obj == NULL || obj == Py_None) {
        *scale = Dh > 0 ? 1.0 / sqrt((double)Dh) : 1.0;
        return 0;
    }
    *scale = PyFloat_AsDouble(obj);
    if (*scale == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s: scale must be a float or None, got %s", fn,
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    return 0;
}

int ct_check_ndim(PyArrayObject *a, const char *fn, const char *arg, int min_ndim, int max_ndim)
{
    int nd = PyArray_NDIM(a);
    if (nd < min_ndim || (max_ndim >= 0 && nd > max_ndim)) {
        if (max_ndim == min_ndim)
            PyErr_Format(PyExc_ValueError, "%s: %s must have %d dimensions, got %d", fn, arg,
                         min_ndim, nd);
        else if (max_ndim < 0)
            PyErr_Format(PyExc_ValueError, "%s: %s must have at least %d dimensions, got %d", fn,
                         arg, min_ndim, nd);
        else
            PyErr_Format(PyExc_ValueError, "%s: %s must have %d to %d dimensions, got %d", fn, arg,
                         min_ndim, max_ndim, nd);
        return -1;
    }
    return 0;
}

PyArrayObject *ct_input(ct_held *held, PyObject *obj, const char *fn, const char *arg,
                        int typenum, int min_ndim, int max_ndim, int optional)
{
    if (obj == NULL || obj == Py_None) {
        if (!optional) PyErr_Format(PyExc_TypeError, "%s: %s is required, got None", fn, arg);
        return NULL;
    }
    PyArrayObject *a = typed_array(obj, fn, arg, typenum);
    if (a == NULL) return NULL;
    if (ct_check_ndim(a, fn, arg, min_ndim, max_ndim) < 0) return NULL;
    if (check_blas_limits(a, fn, arg) < 0) return NULL;
    int target = typenum == CT_IDS ? NPY_INT64 : PyArray_TYPE(a);
    /* New reference; a copy only when the layout, the byte order (the
     * descr is native) or, for ids, the integer width is not what the
     * kernel reads. */
    PyObject *c = PyArray_FromAny(obj, PyArray_DescrFromType(target), 0, 0,
                                  NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED | NPY_ARRAY_FORCECAST,
                                  NULL);
    if (c == NULL) return NULL;
    return hold_argument(held, (PyArrayObject *)c, fn, arg, CT_HELD_INPUT);
}

PyArrayObject *ct_inplace(ct_held *held, PyObject *obj, const char *fn, const char *arg, int typenum, int ndim,
                          const npy_intp *shape, npy_intp size, int optional)
{
    if (obj == NULL || obj == Py_None) {
        if (!optional) PyErr_Format(PyExc_TypeError, "%s: %s is required, got None", fn, arg);
        return NULL;
    }
    PyArrayObject *a = typed_array(obj, fn, arg, typenum);
    if (a == NULL) return NULL;
    if (!PyArray_IS_C_CONTIGUOUS(a) || !PyArray_ISALIGNED(a) || !PyArray_ISWRITEABLE(a)) {
        PyErr_Format(PyExc_ValueError,
                     "%s: %s is updated in place, so it must be a C-contiguous, aligned, "
                     "writeable array (got a view or a read-only array)",
                     fn, arg);
        return NULL;
    }
    if (!PyArray_ISNOTSWAPPED(a)) {
        PyObject *descr = PyObject_Str((PyObject *)PyArray_DESCR(a));
        PyErr_Format(PyExc_ValueError,
                     "%s: %s is updated in place, so it must be in the machine's byte order, got "
                     "dtype %s (convert it with arr.astype(arr.dtype.newbyteorder('=')))",
                     fn, arg, descr ? PyUnicode_AsUTF8(descr) : "?");
        Py_XDECREF(descr);
        return NULL;
    }
    if (shape != NULL) {
        if (ct_check_shape(a, fn, arg, ndim, shape, NULL)) return NULL;
    } else if (size >= 0 && PyArray_SIZE(a) != size) {
        PyErr_Format(PyExc_ValueError, "%s: %s must have %zd elements, got %zd", fn, arg,
                     (Py_ssize_t)size, (Py_ssize_t)PyArray_SIZE(a));
        return NULL;
    }
    if (check_blas_limits(a, fn, arg) < 0) return NULL;
    if (held == NULL) return a;
    Py_INCREF(a);
    return hold_argument(held, a, fn, arg, CT_HELD_INPLACE);
}

int ct_check_dim(PyArrayObject *a, const char *fn, const char *arg, int axis, npy_intp expected,
                 const char *what)
{
    int nd = PyArray_NDIM(a);
    int ax = axis < 0 ? nd + axis : axis;
    if (ax < 0 || ax >= nd) {
        PyErr_Format(PyExc_ValueError, "%s: %s has no axis %d (ndim %d)", fn, arg, axis, nd);
        return -1;
    }
    if (PyArray_DIM(a, ax) != expected) {
        PyErr_Format(PyExc_ValueError, "%s: %s.shape[%d] must be %zd (%s), got %zd", fn, arg, axis,
                     (Py_ssize_t)expected, what, (Py_ssize_t)PyArray_DIM(a, ax));
        return -1;
    }
    return 0;
}

int ct_check_dims(PyArrayObject *a, const char *fn, const char *arg, int ndim,
                  const npy_intp *shape, const char *what, int same_ndim)
{
    if (same_ndim && PyArray_NDIM(a) != ndim) {
        PyErr_Format(PyExc_ValueError, "%s: %s must have %d dimensions (like %s), got %d", fn, arg,
                     ndim, what, PyArray_NDIM(a));
        return -1;
    }
    for (int ax = 0; ax < ndim; ax++)
        if (ct_check_dim(a, fn, arg, ax, shape[ax], what)) return -1;
    return 0;
}

int ct_check_shape(PyArrayObject *a, const char *fn, const char *arg, int ndim,
                   const npy_intp *shape, const char *what)
{
    int same = PyArray_NDIM(a) == ndim;
    for (int i = 0; same && i < ndim; i++) same = PyArray_DIM(a, i) == shape[i];
    if (same) return 0;
    PyObject *want = PyTuple_New(ndim);
    for (int i = 0; want != NULL && i < ndim; i++)
        PyTuple_SET_ITEM(want, i, PyLong_FromSsize_t(shape[i]));
    PyObject *got = PyObject_GetAttrString((PyObject *)a, "shape");
    if (want != NULL && got != NULL)
        PyErr_Format(PyExc_ValueError, "%s: %s must have shape %R%s%s, got %R", fn, arg, want,
                     what ? " " : "", what ? what : "", got);
    Py_XDECREF(want);
    Py_XDECREF(got);
    return -1;
}

PyArrayObject *ct_grad(ct_held *held, PyObject *obj, const char *fn, const char *arg, int typenum,
                       int ndim, const npy_intp *shape, int zero_fill)
{
    if (obj != NULL && obj != Py_None)
        return ct_inplace(held, obj, fn, arg, typenum, ndim, shape, -1, 0);
    return zero_fill ? ct_zeros(held, typenum, ndim, shape) : ct_empty(held, typenum, ndim, shape);
}

PyObject *ct_results(int n, ...)
{
    PyObject *tuple = PyTuple_New(n);
    va_list va;
    va_start(va, n);
    for (int i = 0; i < n; i++) {
        PyObject *item = va_arg(va, PyObject *);
        if (item == NULL) item = Py_None;
        Py_INCREF(item);
        if (tuple != NULL) PyTuple_SET_ITEM(tuple, i, item);
        else Py_DECREF(item);
    }
    va_end(va);
    return tuple;
}

int ct_check_ids(PyArrayObject *ids, const char *fn, const char *arg, int64_t low, int64_t high,
                 int has_ignore, int64_t ignore)
{
    const int64_t *v = (const int64_t *)PyArray_DATA(ids);
    npy_intp n = PyArray_SIZE(ids);
    for (npy_intp i = 0; i < n; i++) {
        if ((v[i] < low || v[i] >= high) && !(has_ignore && v[i] == ignore)) {
            PyErr_Format(PyExc_IndexError,
                         "%s: %s[%zd] = %lld is out of range; expected %lld <= id < %lld%s", fn, arg,
                         (Py_ssize_t)i, (long long)v[i], (long long)low, (long long)high,
                         has_ignore ? " or the ignore index" : "");
            return -1;
        }
    }
    return 0;
}

int ct_int_arg(PyObject *obj, const char *fn, const char *arg, long long low, long long high,
               const char *range, PyObject *range_error, long long *out)
{
    if (PyBool_Check(obj) || !PyIndex_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s: %s must be an int, got %s", fn, arg, Py_TYPE(obj)->tp_name);
        return -1;
    }
    PyObject *index = PyNumber_Index(obj);
    if (index == NULL) return -1;
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(index, &overflow);
    if (v == -1 && PyErr_Occurred()) {
        Py_DECREF(index);
        return -1;
    }
    if (overflow || v < low || v > high) {
        PyErr_Format(range_error, "%s: %s must be in [%lld, %lld]%s%s%s, got %S", fn, arg, low, high,
                     range ? " (" : "", range ? range : "", range ? ")" : "", index);
        Py_DECREF(index);
        return -1;
    }
    Py_DECREF(index);
    *out = v;
    return 0;
}

int ct_check_eps(double eps, const char *fn, const char *rule)
{
    if (eps >= 0 && !isinf(eps)) return 0;
    PyObject *given = PyFloat_FromDouble(eps);
    if (given != NULL) PyErr_Format(PyExc_ValueError, "%s: eps must be %s, got %R", fn, rule, given);
    Py_XDECREF(given);
    return -1;
}

int ct_check_probability(double p, const char *fn, const char *arg)
{
    if (p >= 0 && p <= 1) return 0;
    PyObject *given = PyFloat_FromDouble(p);
    if (given != NULL) PyErr_Format(PyExc_ValueError, "%s: %s must be in [0, 1], got %R", fn, arg, given);
    Py_XDECREF(given);
    return -1;
}

int ct_check_positive(long long value, const char *fn, const char *arg, int allow_zero)
{
    if (value > 0 || (allow_zero && value == 0)) return 0;
    PyErr_Format(PyExc_ValueError, "%s: %s must be %s, got %lld", fn, arg,
                 allow_zero ? ">= 0" : "> 0", value);
    return -1;
}

PyArrayObject *ct_empty(ct_held *held, int typenum, int ndim, const npy_intp *shape)
{
    return (PyArrayObject *)ct_hold(held, PyArray_EMPTY(ndim, (npy_intp *)shape, typenum, 0));
}

/* Zero-filled on the pool (ct_parallel_zero), the GIL released: calloc's
 * memset ran on the caller alone. */
PyArrayObject *ct_zeros(ct_held *held, int typenum, int ndim, const npy_intp *shape)
{
    PyArrayObject *a = (PyArrayObject *)ct_hold(held, PyArray_EMPTY(ndim, (npy_intp *)shape, typenum, 0));
    if (a == NULL) return NULL;
    void *data = PyArray_DATA(a);
    size_t bytes = (size_t)PyArray_NBYTES(a);
    Py_BEGIN_ALLOW_THREADS
    ct_parallel_zero(data, bytes);
    Py_END_ALLOW_THREADS
    return a;
}

npy_intp ct_prod(PyArrayObject *a, int start, int stop)
{
    npy_intp p = 1;
    for (int i = start; i < stop; i++) p *= PyArray_DIM(a, i);
    return p;
}
