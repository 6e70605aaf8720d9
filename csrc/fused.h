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
void FN(bias_act_dropout_forward)(real *out, uint8_t *keep, const real *inp, const real *bias, int act,
                                  ct_int M, ct_int N, double p, uint64_t seed);
void FN(bias_act_backward)(real *dinp, real *dbias, const real *dout, const real *inp,
                           const real *bias, int act, ct_int M, ct_int N);
void FN(add_layernorm_forward)(real *out, real *mean, real *rstd, const real *inp,
                               const real *residual, const real *weight, const real *bias,
                               double eps, ct_int M, ct_int N);
int FN(rows_linear_backward)(real *dinp, real *dweight, real *dbias, const real *dout,
                             const real *inp, const real *weight, ct_int M, ct_int K, ct_int N,
                             int accumulate);
int FN(ff_backward)(real *dx, real *dw1, real *db1, real *dw2, real *db2, const real *dout,
                    const real *x, const real *h, const uint8_t *keep, double p, const real *w1,
                    const real *b1, const real *w2, int act, ct_int M, ct_int D, ct_int F,
                    int accumulate);
int FN(add_layernorm_backward)(real *dinp, real *dweight, real *dbias, const real *dout,
                                const real *inp, const real *residual, const real *weight,
                                const real *mean, const real *rstd, ct_int M, ct_int N);
int FN(dropout_add_layernorm_forward)(real *out, real *mean, real *rstd, uint8_t *keep, const real *inp,
                                      const real *residual, const real *weight, const real *bias, double eps,
                                      double p, uint64_t seed, ct_int M, ct_int N);
int FN(dropout_add_layernorm_backward)(real *dinp, real *dres, real *dweight, real *dbias, const real *dout,
                                       const real *inp, const uint8_t *keep, double p, const real *residual,
                                       const real *weight, const real *mean, const real *rstd, ct_int M,
                                       ct_int N, int accumulate);
#endif
