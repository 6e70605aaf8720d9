/* optim.c - in-place optimizer updates (torch.optim.SGD, Adam, AdamW) and
 * gradient-norm clipping (torch.nn.utils.clip_grad_norm_).
 *
 * Updates follow torch's single-tensor code path operation by operation,
 * with every scalar rounded to the parameter dtype where torch rounds it,
 * so float64 results agree with torch to the last bits and float32 ones
 * to rounding.  Norms accumulate in double. */
#include "optim.h"

#ifndef CT_TEMPLATE_PASS
#define CT_TEMPLATE_FILE "optim.c"
#include "ct_template.h"
#else

/* sgd_step (in place)
 *   param, grad, momentum_buffer (n); momentum_buffer may be NULL when
 *   momentum == 0.  With g = grad (negated when maximize):
 *     g += weight_decay * param
 *     buf = g                                      on the first step
 *     buf = momentum * buf + (1 - dampening) * g   afterwards
 *     g = nesterov ? g + momentum * buf : buf      (when momentum != 0)
 *     param -= lr * g
 */
void FN(sgd_step)(real *param, const real *grad, real *momentum_buffer, ct_int n, acc_t lr,
                  acc_t momentum, acc_t dampening, int nesterov, acc_t weight_decay, int maximize,
                  int first_step)
{
    real neg_lr = (real)-lr, mom = (real)momentum, wd = (real)weight_decay;
    real undamped = (real)(1 - dampening);
    for (ct_int i = 0; i < n; i++) {
        real g = maximize ? -grad[i] : grad[i];
        if (weight_decay != 0) g = g + wd * param[i];
        if (momentum != 0) {
            real buf = first_step ? g : momentum_buffer[i] * mom + undamped * g;
            momentum_buffer[i] = buf;
            g = nesterov ? g + mom * buf : buf;
        }
        param[i] = param[i] + neg_lr * g;
    }
}

/* torch.lerp(start, end, w): the two-sided formula that is exact at w = 0
 * and w = 1. */
static inline real FN(lerp)(real start, real end, real w)
{
    return FABS(w) < (real)0.5 ? start + w * (end - start) : end - (end - start) * (1 - w);
}

/* torch.maximum: NaN in either argument gives NaN. */
static inline real FN(nan_max)(real a, real b)
{
    return (a > b || a != a) ? a : b;
}

/* adam_step (in place); step >= 1 is the number of this step.
 *   param, grad, exp_avg (m), exp_avg_sq (v) (n); max_exp_avg_sq (n) for
 *   AMSGrad, else NULL.  With g = grad (negated when maximize):
 *     AdamW (decoupled_weight_decay): param *= 1 - lr * weight_decay
 *     Adam:                           g += weight_decay * param
 *     m = lerp(m, g, 1 - beta1);   v = v * beta2 + (1 - beta2) * g * g
 *     vmax = max(vmax, v)                              (AMSGrad; used for v)
 *     denom = sqrt(v) / sqrt(1 - beta2^step) + eps
 *     param += -(lr / (1 - beta1^step)) * m / denom
 */
void FN(adam_step)(real *param, const real *grad, real *exp_avg, real *exp_avg_sq,
                   real *max_exp_avg_sq, ct_int n, int64_t step, acc_t lr, acc_t beta1,
                   acc_t beta2, acc_t eps, acc_t weight_decay, int decoupled_weight_decay,
                   int maximize)
{
    /* scalars in double, as torch computes them in Python */
    acc_t bias_correction1 = 1 - pow(beta1, (acc_t)step);
    acc_t bias_correction2 = 1 - pow(beta2, (acc_t)step);
    real neg_step_size = (real)-(lr / bias_correction1);
    real bias_correction2_sqrt = (real)sqrt(bias_correction2);
    real decay = (real)(1 - lr * weight_decay), wd = (real)weight_decay;
    real w1 = (real)(1 - beta1), b2 = (real)beta2, w2 = (real)(1 - beta2), eps_r = (real)eps;
    int coupled_decay = weight_decay != 0 && !decoupled_weight_decay;
    int decoupled_decay = weight_decay != 0 && decoupled_weight_decay;
    for (ct_int i = 0; i < n; i++) {
        real g = maximize ? -grad[i] : grad[i];
        if (decoupled_decay) param[i] = param[i] * decay;
        if (coupled_decay) g = g + wd * param[i];
        exp_avg[i] = FN(lerp)(exp_avg[i], g, w1);
        real v = exp_avg_sq[i] * b2;
        v = v + w2 * g * g;
        exp_avg_sq[i] = v;
        if (max_exp_avg_sq != NULL) v = max_exp_avg_sq[i] = FN(nan_max)(max_exp_avg_sq[i], v);
        real denom = SQRT(v) / bias_correction2_sqrt + eps_r;
        param[i] = param[i] + neg_step_size * exp_avg[i] / denom;
    }
}

/* norm_partial
 *   x (n) -> sum |x_i|^p in double, or max |x_i| when p = inf (NaN if any
 *   x_i is NaN); ct_norm_combine / ct_norm_finish (optim.h) make the norm
 *   of a list of arrays from these.
 */
acc_t FN(norm_partial)(const real *x, ct_int n, acc_t norm_type)
{
    acc_t total = 0;
    if (isinf(norm_type)) {
        for (ct_int i = 0; i < n; i++) {
            acc_t a = FABS(x[i]);
            if (a > total) total = a;
            else if (a != a) return a;
        }
    } else if (norm_type == 2) {
        for (ct_int i = 0; i < n; i++) total += (acc_t)x[i] * (acc_t)x[i];
    } else if (norm_type == 1) {
        for (ct_int i = 0; i < n; i++) total += FABS(x[i]);
    } else {
        for (ct_int i = 0; i < n; i++) total += pow(FABS(x[i]), norm_type);
    }
    return total;
}

/* scale_inplace: x (n) *= coef (rounded to the dtype, as torch's mul_). */
void FN(scale_inplace)(real *x, ct_int n, acc_t coef)
{
    real c = (real)coef;
    for (ct_int i = 0; i < n; i++) x[i] *= c;
}

#endif
