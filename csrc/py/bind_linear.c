/* bind_linear.c - Python bindings of linear.c. */
#include "ct_py.h"
#include "../linear.h"

/* linear_forward(inp (..., K), weight (N, K), bias (N) | None) -> out (..., N) */
static PyObject *py_linear_forward(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"inp", "weight", "bias", NULL};
    const char *fn = "linear_forward";
    PyObject *o_inp, *o_w, *o_b = Py_None;
    ct_held held = {0};
    if (!ct_parse_args(args, kw, "OO|O:linear_forward", names, &o_inp, &o_w, &o_b)) return NULL;
    PyArrayObject *inp = ct_input(&held, o_inp, fn, "inp", CT_ANY_FLOAT, 1, -1, 0);
    if (inp == NULL) goto fail;
    int t = PyArray_TYPE(inp), nd = PyArray_NDIM(inp);
    PyArrayObject *w = ct_input(&held, o_w, fn, "weight", t, 2, 2, 0);
    if (w == NULL || ct_check_dim(w, fn, "weight", 1, PyArray_DIM(inp, nd - 1), "inp.shape[-1]"))
        goto fail;
    npy_intp K = PyArray_DIM(w, 1), N = PyArray_DIM(w, 0), M = ct_prod(inp, 0, nd - 1);
    PyArrayObject *b = ct_input(&held, o_b, fn, "bias", t, 1, 1, 1);
    if (PyErr_Occurred() || (b && ct_check_dim(b, fn, "bias", 0, N, "weight.shape[0]"))) goto fail;
    npy_intp shape[NPY_MAXDIMS];
    memcpy(shape, PyArray_DIMS(inp), sizeof(npy_intp) * nd);
    shape[nd - 1] = N;
    PyArrayObject *out = ct_empty(&held, t, nd, shape);
    if (out == NULL) goto fail;
    CT_DISPATCH(t, linear_forward, PyArray_DATA(out), PyArray_DATA(inp), PyArray_DATA(w),
                CT_DATA(b), M, K, N);
    return ct_finish(&held, ct_ret(out));
fail:
    return ct_finish(&held, NULL);
}

/* linear_backward(dout (..., N), inp (..., K), weight (N, K), with_bias=True,
 *                 need_dinp=True, dinp=None, dweight=None, dbias=None)
 *   -> (dinp | None, dweight, dbias | None); given arrays are accumulated into. */
static PyObject *py_linear_backward(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"dout", "inp", "weight", "with_bias", "need_dinp",
                            "dinp", "dweight", "dbias", NULL};
    const char *fn = "linear_backward";
    PyObject *o_dout, *o_inp, *o_w, *o_dinp = Py_None, *o_dw = Py_None, *o_db = Py_None;
    int with_bias = 1, need_dinp = 1;
    ct_held held = {0};
    if (!ct_parse_args(args, kw, "OOO|ppOOO:linear_backward", names, &o_dout, &o_inp, &o_w,
                                     &with_bias, &need_dinp, &o_dinp, &o_dw, &o_db))
        return NULL;
    PyArrayObject *inp = ct_input(&held, o_inp, fn, "inp", CT_ANY_FLOAT, 1, -1, 0);
    if (inp == NULL) goto fail;
    int t = PyArray_TYPE(inp), nd = PyArray_NDIM(inp);
    PyArrayObject *w = ct_input(&held, o_w, fn, "weight", t, 2, 2, 0);
    if (w == NULL || ct_check_dim(w, fn, "weight", 1, PyArray_DIM(inp, nd - 1), "inp.shape[-1]"))
        goto fail;
    npy_intp K = PyArray_DIM(w, 1), N = PyArray_DIM(w, 0), M = ct_prod(inp, 0, nd - 1);
    PyArrayObject *dout = ct_input(&held, o_dout, fn, "dout", t, nd, nd, 0);
    if (dout == NULL) goto fail;
    if (ct_check_dims(dout, fn, "dout", nd - 1, PyArray_DIMS(inp), "inp's leading dims", 0) ||
        ct_check_dim(dout, fn, "dout", -1, N, "weight.shape[0]"))
        goto fail;

    /* Given buffers are accumulated into.  When none is given the fresh
     * buffers are written, not accumulated (no zero-fill needed); when only
     * some are, the missing ones start from zeros. */
    int given = (need_dinp && o_dinp != Py_None) || o_dw != Py_None || (with_bias && o_db != Py_None);
    npy_intp nshape[1] = {N};
    PyArrayObject *dinp = NULL, *dw, *db = NULL;
    if (need_dinp && !(dinp = ct_grad(&held, o_dinp, fn, "dinp", t, nd, PyArray_DIMS(inp), given)))
        goto fail;
    if (!(dw = ct_grad(&held, o_dw, fn, "dweight", t, 2, PyArray_DIMS(w), given))) goto fail;
    if (with_bias && !(db = ct_grad(&held, o_db, fn, "dbias", t, 1, nshape, given))) goto fail;
    CT_DISPATCH(t, linear_backward, CT_DATA(dinp), PyArray_DATA(dw), CT_DATA(db),
                PyArray_DATA(dout), PyArray_DATA(inp), PyArray_DATA(w), M, K, N, given);
    return ct_finish(&held, ct_results(3, dinp, dw, db));
fail:
    return ct_finish(&held, NULL);
}

/* Batch operands of bmm: a (Ba, M, K), b (Bb, K, N) with Ba, Bb in {B, 1}. */
static int bmm_batch(PyArrayObject *a, PyArrayObject *b, const char *fn, npy_intp *batch,
                     npy_intp *stride_a, npy_intp *stride_b)
{
    npy_intp ba = PyArray_DIM(a, 0), bb = PyArray_DIM(b, 0);
    if (ba != bb && ba != 1 && bb != 1) {
        PyErr_Format(PyExc_ValueError, "%s: batch sizes of a (%zd) and b (%zd) must match or be 1",
                     fn, (Py_ssize_t)ba, (Py_ssize_t)bb);
        return -1;
    }
    /* a batch of 1 broadcasts to the other's, also to 0 (an empty result) */
    *batch = ba == 1 ? bb : ba;
    *stride_a = ba == 1 ? 0 : PyArray_DIM(a, 1) * PyArray_DIM(a, 2);
    *stride_b = bb == 1 ? 0 : PyArray_DIM(b, 1) * PyArray_DIM(b, 2);
    return 0;
}

/* bmm_forward(a (Ba, M, K), b (Bb, K, N)) -> out (B, M, N); a batch of 1 broadcasts. */
static PyObject *py_bmm_forward(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"a", "b", NULL};
    const char *fn = "bmm_forward";
    PyObject *o_a, *o_b;
    ct_held held = {0};
    if (!ct_parse_args(args, kw, "OO:bmm_forward", names, &o_a, &o_b)) return NULL;
    PyArrayObject *a = ct_input(&held, o_a, fn, "a", CT_ANY_FLOAT, 3, 3, 0);
    if (a == NULL) goto fail;
    int t = PyArray_TYPE(a);
    PyArrayObject *b = ct_input(&held, o_b, fn, "b", t, 3, 3, 0);
    if (b == NULL || ct_check_dim(b, fn, "b", 1, PyArray_DIM(a, 2), "a.shape[2]")) goto fail;
    npy_intp batch, sa, sb, M = PyArray_DIM(a, 1), K = PyArray_DIM(a, 2), N = PyArray_DIM(b, 2);
    if (bmm_batch(a, b, fn, &batch, &sa, &sb)) goto fail;
    npy_intp shape[3] = {batch, M, N};
    PyArrayObject *out = ct_empty(&held, t, 3, shape);
    if (out == NULL) goto fail;
    CT_DISPATCH(t, bmm_forward, PyArray_DATA(out), PyArray_DATA(a), PyArray_DATA(b), batch, sa, sb,
                M, K, N);
    return ct_finish(&held, ct_ret(out));
fail:
    return ct_finish(&held, NULL);
}

/* bmm_backward(dout (B, M, N), a, b, need_da=True, need_db=True) -> (da | None, db | None) */
static PyObject *py_bmm_backward(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"dout", "a", "b", "need_da", "need_db", NULL};
    const char *fn = "bmm_backward";
    PyObject *o_dout, *o_a, *o_b;
    int need_da = 1, need_db = 1;
    ct_held held = {0};
    if (!ct_parse_args(args, kw, "OOO|pp:bmm_backward", names, &o_dout, &o_a, &o_b, &need_da,
                                     &need_db))
        return NULL;
    PyArrayObject *a = ct_input(&held, o_a, fn, "a", CT_ANY_FLOAT, 3, 3, 0);
    if (a == NULL) goto fail;
    int t = PyArray_TYPE(a);
    PyArrayObject *b = ct_input(&held, o_b, fn, "b", t, 3, 3, 0);
    if (b == NULL || ct_check_dim(b, fn, "b", 1, PyArray_DIM(a, 2), "a.shape[2]")) goto fail;
    npy_intp batch, sa, sb, M = PyArray_DIM(a, 1), K = PyArray_DIM(a, 2), N = PyArray_DIM(b, 2);
    if (bmm_batch(a, b, fn, &batch, &sa, &sb)) goto fail;
    PyArrayObject *dout = ct_input(&held, o_dout, fn, "dout", t, 3, 3, 0);
    if (dout == NULL || ct_check_dim(dout, fn, "dout", 0, batch, "the batch size") ||
        ct_check_dim(dout, fn, "dout", 1, M, "a.shape[1]") ||
        ct_check_dim(dout, fn, "dout", 2, N, "b.shape[2]"))
        goto fail;
    PyArrayObject *da = NULL, *db = NULL;
    if (need_da && !(da = ct_grad_like(&held, NULL, fn, "da", a))) goto fail;
    if (need_db && !(db = ct_grad_like(&held, NULL, fn, "db", b))) goto fail;
    CT_DISPATCH(t, bmm_backward, CT_DATA(da), CT_DATA(db), PyArray_DATA(dout), PyArray_DATA(a),
                PyArray_DATA(b), batch, sa, sb, M, K, N);
    return ct_finish(&held, ct_results(2, da, db));
fail:
    return ct_finish(&held, NULL);
}

PyMethodDef ct_methods_linear[] = {
    CT_METHOD(linear_forward, "linear_forward(inp, weight, bias=None) -> out"),
    CT_METHOD(linear_backward, "linear_backward(dout, inp, weight, with_bias=True, need_dinp=True, "
                               "dinp=None, dweight=None, dbias=None) -> (dinp, dweight, dbias)"),
    CT_METHOD(bmm_forward, "bmm_forward(a, b) -> out"),
    CT_METHOD(bmm_backward, "bmm_backward(dout, a, b, need_da=True, need_db=True) -> (da, db)"),
    {NULL, NULL, 0, NULL},
};
