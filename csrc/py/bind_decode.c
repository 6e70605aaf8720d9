/* bind_decode.c - the custom checks of the bindings of decode.c (incremental
 * decoding over a KV cache; the bindings are generated from kernel_table.py). */
#include "../decode.h"

/* Per-row integers (B) in [low, high]: a Python int (the same for every row)
 * or a 1-D integer array of length B.  Returns a held int64 array or NULL. */
static PyArrayObject *row_ints(ct_held *held, PyObject *obj, const char *fn, const char *arg,
                               npy_intp B, long long low, long long high, const char *range)
{
    PyArrayObject *a;
    if (obj != NULL && !PyArray_Check(obj) && PyIndex_Check(obj)) {
        int overflow = 0;
        long long v = PyBool_Check(obj) ? -1 : 0;
        PyObject *index = PyBool_Check(obj) ? NULL : PyNumber_Index(obj);
        if (index != NULL) v = PyLong_AsLongLongAndOverflow(index, &overflow);
        if (index == NULL || overflow) { /* (the same message as for an in-range int below) */
            if (index != NULL || !PyErr_Occurred())
                PyErr_Format(index ? PyExc_IndexError : PyExc_TypeError,
                             index ? "%s: %s[0] must be in [%lld, %lld] (%s), got %S"
                                   : "%s: %s must be an int or a 1-D integer array, got bool",
                             fn, arg, low, high, range, index);
            Py_XDECREF(index);
            return NULL;
        }
        Py_DECREF(index);
        npy_intp shape[1] = {B};
        a = ct_empty(held, NPY_INT64, 1, shape);
        if (a == NULL) return NULL;
        for (npy_intp i = 0; i < B; i++) ((int64_t *)PyArray_DATA(a))[i] = v;
    } else if (obj != NULL && PyArray_Check(obj) && PyArray_NDIM((PyArrayObject *)obj) == 0) {
        PyErr_Format(PyExc_TypeError, "%s: %s must be an int or a 1-D integer array, got a 0-d array",
                     fn, arg);
        return NULL;
    } else {
        a = ct_input(held, obj, fn, arg, CT_IDS, 1, 1, 0);
        if (a == NULL || ct_check_dim(a, fn, arg, 0, B, "the rows, cache.shape[0]")) return NULL;
    }
    const int64_t *v = (const int64_t *)PyArray_DATA(a);
    for (npy_intp i = 0; i < B; i++)
        if (v[i] < low || v[i] > high) {
            PyErr_Format(PyExc_IndexError, "%s: %s[%zd] must be in [%lld, %lld] (%s), got %lld", fn,
                         arg, (Py_ssize_t)i, low, high, range, (long long)v[i]);
            return NULL;
        }
    return a;
}

/* A cache (B, H, Tmax, D) has 4 dimensions (its message names them). */
static int check_cache(PyArrayObject *cache, const char *fn, const char *arg)
{
    if (PyArray_NDIM(cache) == 4) return 0;
    PyErr_Format(PyExc_ValueError, "%s: %s must have 4 dimensions (rows, heads, Tmax, head_dim), got %d",
                 fn, arg, PyArray_NDIM(cache));
    return -1;
}

/* cache_v is not cache_k itself (a clearer message than the overlap one). */
static int distinct_caches(PyArrayObject *cache_k, PyObject *cache_v, const char *fn)
{
    if (!PyArray_Check(cache_v) || PyArray_DATA((PyArrayObject *)cache_v) != PyArray_DATA(cache_k)) return 0;
    PyErr_Format(PyExc_ValueError, "%s: cache_k and cache_v must be different arrays", fn);
    return -1;
}

/* ---- decode_layer_plan / decode_model_step --------------------------------
 * A plan is a PyCapsule holding one layer's ct_decode_layer, its cache and a
 * reference to every array the plan's binding held (the arguments, or the
 * copies ct_input made of them), so the pointers in L stay valid for the
 * plan's life. */
#define CT_PLAN_NAME "ctransformer.decode_layer_plan"
#define CT_DECODE_MAX_LAYERS 256

typedef struct {
    ct_decode_layer L;
    void *cache_k, *cache_v;
    int typenum;
    int n_refs;
    PyObject *refs[]; /* n_refs new references */
} ct_decode_plan;

static void decode_plan_free(PyObject *capsule)
{
    ct_decode_plan *plan = PyCapsule_GetPointer(capsule, CT_PLAN_NAME);
    if (plan == NULL) return;
    for (int i = 0; i < plan->n_refs; i++) Py_DECREF(plan->refs[i]);
    PyMem_Free(plan);
}

/* A new plan of the layer L (dtype t) over cache_k, cache_v, keeping every array in `held`. */
static PyObject *ct_decode_plan_new(ct_held *held, const ct_decode_layer *L, int t, PyArrayObject *cache_k,
                                    PyArrayObject *cache_v)
{
    ct_decode_plan *plan = PyMem_Malloc(sizeof(ct_decode_plan) + (size_t)held->count * sizeof(PyObject *));
    if (plan == NULL) return PyErr_NoMemory();
    plan->L = *L;
    plan->cache_k = PyArray_DATA(cache_k), plan->cache_v = PyArray_DATA(cache_v);
    plan->typenum = t;
    plan->n_refs = held->count;
    for (int i = 0; i < held->count; i++) {
        plan->refs[i] = held->items[i].obj;
        Py_INCREF(plan->refs[i]);
    }
    PyObject *capsule = PyCapsule_New(plan, CT_PLAN_NAME, decode_plan_free);
    if (capsule == NULL) {
        for (int i = 0; i < plan->n_refs; i++) Py_DECREF(plan->refs[i]);
        PyMem_Free(plan);
    }
    return capsule;
}

/* The plans of decode_model_step: a tuple of decode_layer_plan objects of
 * dtype t for B rows of E features, each with pos < its Tmax (pos_what
 * names pos in the message), no two sharing
 * a cache; their layers and caches into layers / caches.  Returns their
 * number, or -1 with an exception set. */
static int ct_decode_plans(PyObject *plans, const char *fn, int t, npy_intp B, npy_intp E, long long pos,
                           const char *pos_what, const ct_decode_layer **layers, void **caches)
{
    if (plans == NULL || !PyTuple_Check(plans)) {
        PyErr_Format(PyExc_TypeError, "%s: plans must be a tuple of decode_layer_plan objects, got %s", fn,
                     plans ? Py_TYPE(plans)->tp_name : "nothing");
        return -1;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(plans);
    if (n > CT_DECODE_MAX_LAYERS) {
        PyErr_Format(PyExc_ValueError, "%s: plans must hold at most %d layers, got %zd", fn,
                     CT_DECODE_MAX_LAYERS, n);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *obj = PyTuple_GET_ITEM(plans, i);
        const ct_decode_plan *p = PyCapsule_IsValid(obj, CT_PLAN_NAME) ? PyCapsule_GetPointer(obj, CT_PLAN_NAME) : NULL;
        if (p == NULL) {
            PyErr_Format(PyExc_TypeError, "%s: plans[%zd] must be a decode_layer_plan object, got %s", fn, i,
                         Py_TYPE(obj)->tp_name);
            return -1;
        }
        if (p->typenum != t) {
            PyErr_Format(PyExc_TypeError, "%s: plans[%zd] must have emb's dtype %s, got %s", fn, i,
                         t == NPY_FLOAT32 ? "float32" : "float64", p->typenum == NPY_FLOAT32 ? "float32" : "float64");
            return -1;
        }
        if (p->L.B != B || p->L.E != E) {
            PyErr_Format(PyExc_ValueError, "%s: plans[%zd] must be for %zd rows (ids.shape[0]) of %zd features "
                         "(emb.shape[1]), got %zd rows of %zd", fn, i, (Py_ssize_t)B, (Py_ssize_t)E,
                         (Py_ssize_t)p->L.B, (Py_ssize_t)p->L.E);
            return -1;
        }
        if (pos >= p->L.Tmax) {
            PyErr_Format(PyExc_IndexError, "%s: %s must be in [0, %zd) (a slot of plans[%zd]'s cache), got %lld",
                         fn, pos_what, (Py_ssize_t)p->L.Tmax, i, pos);
            return -1;
        }
        for (Py_ssize_t j = 0; j < i; j++)
            if (caches[2 * j] == p->cache_k || caches[2 * j + 1] == p->cache_v) {
                PyErr_Format(PyExc_ValueError, "%s: plans[%zd] and plans[%zd] must have different caches", fn, j, i);
                return -1;
            }
        layers[i] = &p->L;
        caches[2 * i] = p->cache_k, caches[2 * i + 1] = p->cache_v;
    }
    return (int)n;
}

/* ---- decode_model_greedy ---------------------------------------------------- */

/* Column col of ys (B, L) int64 holds ids in [0, V) (the first ones fed),
 * else IndexError (0 / -1). */
static int check_greedy_ids(PyArrayObject *ys, const char *fn, npy_intp col, npy_intp V)
{
    const int64_t *v = (const int64_t *)PyArray_DATA(ys);
    npy_intp B = PyArray_DIM(ys, 0), L = PyArray_DIM(ys, 1);
    for (npy_intp b = 0; b < B; b++) {
        int64_t id = v[b * L + col];
        if (id < 0 || id >= V) {
            PyErr_Format(PyExc_IndexError, "%s: ys[%zd, %zd] = %lld is out of range; expected 0 <= id < %zd "
                         "(a row of emb)", fn, (Py_ssize_t)b, (Py_ssize_t)col, (long long)id, (Py_ssize_t)V);
            return -1;
        }
    }
    return 0;
}
