/* embedding.h - prototypes of embedding.c (a template: see ct_template.h). */
#ifndef CT_TEMPLATE_PASS
#define CT_TEMPLATE_FILE "embedding.h"
#include "ct_template.h"
#else
void FN(embedding_forward)(real *out, const int64_t *ids, const real *weight, ct_int M, ct_int D);
void FN(embedding_backward)(real *dweight, const real *dout, const int64_t *ids, ct_int M,
                            ct_int D, int64_t padding_idx);
#endif
