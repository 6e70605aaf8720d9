/* fused.h - prototypes of fused.c (a template: see ct_template.h). */
#ifndef CT_FUSED_COMMON
#define CT_FUSED_COMMON
/* Activations of bias_act. */
enum { CT_ACT_RELU = 0, CT_ACT_GELU = 1, CT_ACT_GELU_TANH = 2 };
#endif

#ifndef CT_TEMPLATE_PASS
#define CT_TEMPLATE_FILE "fused.h"
#include "ct_template.h"
#else
void FN(bias_act_forward)(real *out, const real *inp, const real *bias, int act, ct_int M,
                          ct_int N);
void FN(bias_act_backward)(real *dinp, real *dbias, const real *dout, const real *inp,
                           const real *bias, int act, ct_int M, ct_int N);
void FN(add_layernorm_forward)(real *out, real *mean, real *rstd, const real *inp,
                               const real *residual, const real *weight, const real *bias,
                               double eps, ct_int M, ct_int N);
void FN(add_layernorm_backward)(real *dinp, real *dweight, real *dbias, const real *dout,
                                const real *inp, const real *residual, const real *weight,
                                const real *mean, const real *rstd, ct_int M, ct_int N);
#endif
