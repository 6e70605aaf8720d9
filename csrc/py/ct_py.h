/* ct_py.h - what every binding file shares: argument checks, array
 * allocation and dtype dispatch.  The maths never sees Python; the
 * bindings never do maths.
 *
 * Error messages always name the function, the argument, what was expected
 * and what was given, e.g.
 *     linear_forward: weight.shape[1] must be 512 (inp.shape[-1]), got 256
 */
#ifndef CT_PY_H
#define CT_PY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL ct_ARRAY_API
#ifndef CT_PY_MODULE_C
#define NO_IMPORT_ARRAY
#endif
#include <numpy/arrayobject.h>

#include "../ct.h"

/* typenum argument of ct_input: either float dtype (float32 or float64). */
#define CT_ANY_FLOAT (-1)
/* typenum argument of ct_input: integer ids, converted to int64. */
#define CT_IDS (-2)

/* Arrays acquired by a binding, released in one place on every exit path.
 * Each item also records what it is to the kernel (CT_HELD_*) and, for
 * arguments, its name: the arrays a kernel reads (ct_input) and the arrays
 * it writes in place (ct_inplace) are checked against each other for
 * overlapping memory as they enter (see ct_inplace).  The list starts in
 * `first` and moves to the heap when a call holds more (no fixed ceiling);
 * `ct_held held = {0};` is an empty list. */
enum { CT_HELD_OWNED = 0, CT_HELD_INPUT = 1, CT_HELD_INPLACE = 2 };
typedef struct {
    PyObject *obj;
    const char *name;
    unsigned char kind;
} ct_held_item;
#define CT_HELD_INLINE 16
typedef struct {
    ct_held_item *items; /* first, or a PyMem block */
    int count, capacity;
    ct_held_item first[CT_HELD_INLINE];
} ct_held;

/* The limit of the 32-bit-integer BLAS we link (and of the int loop
 * counters handed to it): an array entering C must have
 * shape[-1] <= CT_BLAS_DIM_MAX and prod(shape[:-1]) <= CT_BLAS_DIM_MAX, so
 * that every GEMM dimension and leading dimension fits in an int. */
#define CT_BLAS_DIM_MAX ((npy_intp)2147483647)

/* Remember `obj` (a new reference) for release; returns obj (NULL passes). */
PyObject *ct_hold(ct_held *held, PyObject *obj);
/* Decref everything held (on error exits). */
void ct_release(ct_held *held);

/* An input array: obj must be a NumPy array (or None if optional, giving
 * NULL without error) with min_ndim <= ndim <= max_ndim (max_ndim < 0: no
 * limit) and dtype `typenum` (NPY_FLOAT32 / NPY_FLOAT64 / NPY_INT64 /
 * NPY_BOOL / CT_ANY_FLOAT / CT_IDS).  Non-contiguous, negative-stride and
 * misaligned arrays are copied; wrong dtypes are a TypeError, never cast
 * silently (CT_IDS accepts any integer dtype).  Either byte order is
 * accepted: a non-native array is copied to the machine's order.  Arrays
 * beyond CT_BLAS_DIM_MAX are a ValueError.  The result is held (as an input
 * named `arg`); it must not overlap an array already taken by ct_inplace
 * (ValueError). */
PyArrayObject *ct_input(ct_held *held, PyObject *obj, const char *fn, const char *arg,
                        int typenum, int min_ndim, int max_ndim, int optional);

/* The dtype (float32 / float64) of an array argument that decides the
 * kernel, read before the array itself is checked; else TypeError. */
int ct_float_type(PyObject *obj, const char *fn, const char *arg, int *t);
/* The attention scale: obj as a float, or 1/sqrt(Dh) for None / NULL. */
int ct_parse_scale(PyObject *obj, npy_intp Dh, const char *fn, double *scale);

/* An array the kernel writes into in place (optimizer state, gradient
 * accumulators, caches): must be C-contiguous, aligned, writeable, in the
 * machine's byte order, of dtype `typenum` and of exactly `ndim`/`shape`
 * (shape NULL: any shape with `size` elements, size < 0: any).  It is never
 * copied, since a copy would lose the update.  None gives NULL when
 * optional.  When `held` is not NULL the array is held (as an in-place
 * argument named `arg`) and must not share memory with any input or
 * in-place array held there, before or after: reading an array while
 * writing an overlapping one gives silently wrong results, so it is a
 * ValueError (NumPy's out= would copy; a copy here would lose the update). */
PyArrayObject *ct_inplace(ct_held *held, PyObject *obj, const char *fn, const char *arg, int typenum,
                          int ndim, const npy_intp *shape, npy_intp size, int optional);

/* a.shape[axis] == expected, else ValueError naming `what` the expected
 * size is (e.g. "inp.shape[-1]").  Negative axis counts from the end. */
int ct_check_dim(PyArrayObject *a, const char *fn, const char *arg, int axis,
                 npy_intp expected, const char *what);
/* The shape checks.  ct_check_dims: a.shape[i] == shape[i] for i < ndim,
 * else ct_check_dim's message for the first bad axis; with same_ndim, a
 * must first have exactly ndim dimensions, else
 *     "fn: arg must have 2 dimensions (like what), got 3".
 * ct_check_shape: a.shape == shape as a whole, else one message quoting
 * both, "fn: arg must have shape (3, 4)[ what], got (3, 5)". */
/* ct_check_ndim: min_ndim <= a.ndim <= max_ndim (max_ndim < 0: no limit), else ValueError. */
int ct_check_ndim(PyArrayObject *a, const char *fn, const char *arg, int min_ndim, int max_ndim);
int ct_check_dims(PyArrayObject *a, const char *fn, const char *arg, int ndim,
                  const npy_intp *shape, const char *what, int same_ndim);
int ct_check_shape(PyArrayObject *a, const char *fn, const char *arg, int ndim,
                   const npy_intp *shape, const char *what);
/* A gradient the kernel accumulates into (+=): the caller's array `obj`
 * (checked by ct_inplace: exact shape, C-contiguous, writeable, no overlap
 * with the call's other arrays), or when obj is None / NULL a new array,
 * of zeros (zero_fill) or uninitialised (for a kernel told to write rather
 * than add).  NULL only with an error set. */
PyArrayObject *ct_grad(ct_held *held, PyObject *obj, const char *fn, const char *arg, int typenum,
                       int ndim, const npy_intp *shape, int zero_fill);
/* A new tuple of `n` arrays (PyArrayObject *, new references), None for
 * each NULL: the result of a kernel with optional outputs. */
PyObject *ct_results(int n, ...);
/* Every id in [low, high) (ids == ignore are allowed when has_ignore),
 * else IndexError naming the first bad position and value. */
int ct_check_ids(PyArrayObject *ids, const char *fn, const char *arg, int64_t low,
                 int64_t high, int has_ignore, int64_t ignore);
/* A Python integer argument (anything with __index__, not bool) in
 * [low, high], else TypeError (not an int) or `range_error` (out of range,
 * also beyond long long), naming fn and arg; `range` (or NULL) says where
 * the bounds come from. */
int ct_int_arg(PyObject *obj, const char *fn, const char *arg, long long low, long long high,
               const char *range, PyObject *range_error, long long *out);
/* An activation name of bias_act ("relu", "gelu", "gelu_tanh") -> its
 * CT_ACT_* (fused.h), or -1 with a ValueError naming fn (bind_fused.c). */
int ct_parse_act(const char *name, const char *fn);
/* eps >= 0 and finite (inf would make every row 0), else ValueError
 * "fn: eps must be <rule>, got <eps>". */
int ct_check_eps(double eps, const char *fn, const char *rule);
/* 0 <= p <= 1 (NaN fails), else ValueError "fn: arg must be in [0, 1], got p". */
int ct_check_probability(double p, const char *fn, const char *arg);
/* A positive (>= 0 when allow_zero) integer argument. */
int ct_check_positive(long long value, const char *fn, const char *arg, int allow_zero);

/* New uninitialised / zeroed held arrays. */
PyArrayObject *ct_empty(ct_held *held, int typenum, int ndim, const npy_intp *shape);
PyArrayObject *ct_zeros(ct_held *held, int typenum, int ndim, const npy_intp *shape);

/* PyArg_ParseTupleAndKeywords with `format` ending in ":function_name";
 * every TypeError it raises names the function (CPython leaves it out of
 * failed number conversions). */
int ct_parse_args(PyObject *args, PyObject *kw, const char *format, char **names, ...);

/* Product of a.shape[start:stop]. */
npy_intp ct_prod(PyArrayObject *a, int start, int stop);

/* The one exit idiom of a binding: everything held is released and `ret`
 * returned (NULL on an error path):
 *     return ct_finish(&held, ct_ret(out));
 * fail:
 *     return ct_finish(&held, NULL);                                       */
static inline PyObject *ct_finish(ct_held *held, PyObject *ret)
{
    ct_release(held);
    return ret;
}

/* A new reference to None (the result of kernels that only write in place). */
static inline PyObject *ct_none(void)
{
    Py_INCREF(Py_None);
    return Py_None;
}

/* Return a new reference to an element held (so it survives ct_release). */
PyObject *ct_ret(PyArrayObject *a);

/* fork() safety (fork_guard.c).  Every kernel runs between
 * CT_BEGIN_KERNEL and CT_END_KERNEL: the GIL is released and a shared lock
 * is held that fork() takes exclusively (a pthread_atfork prepare handler,
 * registered after OpenBLAS's own), so no kernel - and no OpenBLAS GEMM with
 * its worker threads - is running while the process forks.  OpenBLAS's
 * pre-fork handler waits for its workers, and deadlocked when another thread
 * had a GEMM in flight. */
void ct_fork_guard_enter(void);
void ct_fork_guard_leave(void);
int ct_fork_guard_install(void);
#define CT_BEGIN_KERNEL Py_BEGIN_ALLOW_THREADS ct_fork_guard_enter();
#define CT_END_KERNEL ct_fork_guard_leave(); Py_END_ALLOW_THREADS

/* Call name##_f32 or name##_f64 by the dtype `typenum`, with the GIL
 * released (CT_BEGIN_KERNEL).  Pointer arguments are passed as void *
 * (PyArray_DATA). */
#define CT_DISPATCH(typenum, name, ...)                                   \
    do {                                                                  \
        CT_BEGIN_KERNEL                                                   \
        if ((typenum) == NPY_FLOAT32) CT_CAT(name, _f32)(__VA_ARGS__);    \
        else CT_CAT(name, _f64)(__VA_ARGS__);                             \
        CT_END_KERNEL                                                     \
    } while (0)

/* Same, for kernels that return an int status (0 ok, -1 out of memory). */
#define CT_DISPATCH_STATUS(status, typenum, name, ...)                    \
    do {                                                                  \
        CT_BEGIN_KERNEL                                                   \
        if ((typenum) == NPY_FLOAT32) status = CT_CAT(name, _f32)(__VA_ARGS__); \
        else status = CT_CAT(name, _f64)(__VA_ARGS__);                    \
        CT_END_KERNEL                                                     \
    } while (0)

/* Same, for kernels that can run out of memory: MemoryError and `goto fail`. */
#define CT_DISPATCH_ALLOC(typenum, name, ...)                              \
    do {                                                                  \
        int ct_status_ = 0;                                               \
        CT_DISPATCH_STATUS(ct_status_, typenum, name, __VA_ARGS__);       \
        if (ct_status_) {                                                 \
            PyErr_NoMemory();                                             \
            goto fail;                                                    \
        }                                                                 \
    } while (0)

#define CT_DATA(a) ((a) ? PyArray_DATA(a) : NULL)

/* The generated csrc/py/generated/<family>.c defines `PyMethodDef
 * ct_methods_<family>[]` (see generate_bindings.py). */
#define CT_METHOD(name, doc) {#name, (PyCFunction)(void (*)(void))py_##name, METH_VARARGS | METH_KEYWORDS, doc}

#endif /* CT_PY_H */
