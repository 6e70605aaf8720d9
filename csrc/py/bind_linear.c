/* bind_linear.c - the custom parts of the bindings of linear.c (the rest is
 * generated from kernel_table.py). */
#include "../fused.h" /* rows_linear_backward: linear_backward over the live rows */
#include "../linear.h"

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
