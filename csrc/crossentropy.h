/* crossentropy.h - prototypes of crossentropy.c (a template: see ct_template.h). */
#ifndef CT_CROSSENTROPY_COMMON
#define CT_CROSSENTROPY_COMMON
/* How per-row losses are reduced (torch's reduction= argument). */
enum { CT_REDUCE_NONE = 0, CT_REDUCE_MEAN = 1, CT_REDUCE_SUM = 2 };
#endif

#ifndef CT_TEMPLATE_PASS
#define CT_TEMPLATE_FILE "crossentropy.h"
#include "ct_template.h"
#else
void FN(cross_entropy_forward)(real *loss, acc_t *lse, const real *logits, const int64_t *targets,
                               const real *weight, ct_int N, ct_int C, int64_t ignore_index,
                               acc_t label_smoothing, int reduction);
void FN(cross_entropy_backward)(real *dlogits, const real *dloss, const real *logits,
                                const int64_t *targets, const acc_t *lse, const real *weight,
                                ct_int N, ct_int C, int64_t ignore_index, acc_t label_smoothing,
                                int reduction, int accumulate);
#endif
