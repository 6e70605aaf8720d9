/* dropout.h - prototypes of dropout.c (a template: see ct_template.h). */
#ifndef CT_TEMPLATE_PASS
#define CT_TEMPLATE_FILE "dropout.h"
#include "ct_template.h"
#else
void FN(dropout_range)(real *out, uint8_t *mask, const real *inp, ct_int n, double p, uint64_t seed,
                       uint64_t offset);
void FN(dropout_forward)(real *out, uint8_t *mask, const real *inp, ct_int n, double p,
                         uint64_t seed, uint64_t offset);
void FN(dropout_backward)(real *dinp, const real *dout, const uint8_t *mask, ct_int n, double p,
                          int accumulate);
#endif
