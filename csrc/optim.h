/* optim.h - prototypes of optim.c (a template: see ct_template.h), plus the
 * dtype-free helpers that combine per-array norms. */
#ifndef CT_OPTIM_COMMON
#define CT_OPTIM_COMMON
#include <math.h>

/* Per-array partial norms (sum |x|^p, or max |x| for p = inf) are combined
 * over a list of arrays by ct_norm_combine and turned into the norm by
 * ct_norm_finish.  NaN propagates. */
static inline double ct_norm_combine(double total, double partial, double norm_type)
{
    if (isinf(norm_type)) return (partial > total || isnan(partial)) ? partial : total;
    return total + partial;
}

static inline double ct_norm_finish(double total, double norm_type)
{
    if (isinf(norm_type) || norm_type == 1) return total;
    if (norm_type == 2) return sqrt(total);
    return pow(total, 1 / norm_type);
}
#endif

#ifndef CT_TEMPLATE_PASS
#define CT_TEMPLATE_FILE "optim.h"
#include "ct_template.h"
#else
void FN(sgd_step)(real *param, const real *grad, real *momentum_buffer, ct_int n, acc_t lr,
                  acc_t momentum, acc_t dampening, int nesterov, acc_t weight_decay, int maximize,
                  int first_step);
void FN(adam_step)(real *param, const real *grad, real *exp_avg, real *exp_avg_sq,
                   real *max_exp_avg_sq, ct_int n, int64_t step, acc_t lr, acc_t beta1,
                   acc_t beta2, acc_t eps, acc_t weight_decay, int decoupled_weight_decay,
                   int maximize);
/* One parameter of adam_multi_step: its arrays as adam_step takes them, n
 * elements, its step number. */
typedef struct {
    real *param, *exp_avg, *exp_avg_sq, *max_exp_avg_sq;
    const real *grad;
    ct_int n;
    int64_t step;
} FN(adam_param);
int FN(adam_multi_step)(const FN(adam_param) *params, ct_int count, acc_t lr, acc_t beta1, acc_t beta2, acc_t eps,
                        acc_t weight_decay, int decoupled_weight_decay, int maximize);
void FN(rmsprop_step)(real *param, const real *grad, real *square_avg, real *grad_avg, real *momentum_buffer,
                      ct_int n, acc_t lr, acc_t alpha, acc_t eps, acc_t weight_decay, acc_t momentum,
                      int centered, int maximize);
acc_t FN(norm_partial)(const real *x, ct_int n, acc_t norm_type);
void FN(scale_inplace)(real *x, ct_int n, acc_t coef);
#endif
