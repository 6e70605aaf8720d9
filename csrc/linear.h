/* linear.h - prototypes of linear.c (a template: see ct_template.h). */
#ifndef CT_TEMPLATE_PASS
#define CT_TEMPLATE_FILE "linear.h"
#include "ct_template.h"
#else
void FN(linear_forward)(real *out, const real *inp, const real *weight, const real *bias,
                        ct_int M, ct_int K, ct_int N);
void FN(linear_backward)(real *dinp, real *dweight, real *dbias, const real *dout,
                         const real *inp, const real *weight, ct_int M, ct_int K, ct_int N,
                         int accumulate);
void FN(bmm_forward)(real *out, const real *a, const real *b, ct_int batch, ct_int stride_a,
                     ct_int stride_b, ct_int M, ct_int K, ct_int N);
void FN(bmm_backward)(real *da, real *db, const real *dout, const real *a, const real *b,
                      ct_int batch, ct_int stride_a, ct_int stride_b, ct_int M, ct_int K,
                      ct_int N);
#endif
