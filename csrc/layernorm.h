/* layernorm.h - prototypes of layernorm.c (a template: see ct_template.h). */
#ifndef CT_TEMPLATE_PASS
#define CT_TEMPLATE_FILE "layernorm.h"
#include "ct_template.h"
#else
void FN(layernorm_forward)(real *out, real *mean, real *rstd, const real *inp, const real *weight,
                           const real *bias, ct_int N, ct_int D, double eps);
int FN(layernorm_backward)(real *dinp, real *dweight, real *dbias, const real *dout,
                            const real *inp, const real *weight, const real *mean,
                            const real *rstd, ct_int N, ct_int D);
#endif
