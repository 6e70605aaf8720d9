/* softmax.h - prototypes of softmax.c (a template: see ct_template.h). */
#ifndef CT_TEMPLATE_PASS
#define CT_TEMPLATE_FILE "softmax.h"
#include "ct_template.h"
#else
real FN(softmax_row)(real *row, ct_int D);
void FN(softmax_rows)(real *P, ct_int N, ct_int D);
acc_t FN(sum_exp_shifted)(const real *x, real m, ct_int D);
void FN(softmax_forward)(real *out, const real *inp, ct_int N, ct_int D);
void FN(softmax_backward)(real *dinp, const real *dout, const real *out, ct_int N, ct_int D);
void FN(log_softmax_row)(real *y, const real *x, ct_int D);
void FN(log_softmax_forward)(real *out, const real *inp, ct_int N, ct_int D);
void FN(log_softmax_backward)(real *dinp, const real *dout, const real *out, ct_int N, ct_int D);
#endif
