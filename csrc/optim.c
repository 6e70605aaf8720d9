/* optim.c - in-place optimizer updates (torch.optim.SGD, Adam, AdamW) and
 * gradient-norm clipping (torch.nn.utils.clip_grad_norm_).
 *
 * Updates follow torch's single-tensor code path operation by operation,
 * with every scalar rounded to the parameter dtype where torch rounds it,
 * so float64 results agree with torch to the last bits and float32 ones
 * to rounding.  Norms accumulate in double. */
#ifndef CT_TEMPLATE_PASS
#include "optim.h"
#define CT_TEMPLATE_FILE "optim.c"
#include "ct_template.h"
#else
#include "ct_math.h"

/* sgd_step (in place)
 *   param, grad, momentum_buffer (n); momentum_buffer may be NULL when
 *   momentum == 0.  With g = grad (negated when maximize):
 *     g += weight_decay * param
 *     buf = g                                      on the first step
 *     buf = momentum * buf + (1 - dampening) * g   afterwards
 *     g = nesterov ? g + momentum * buf : buf      (when momentum != 0)
 *     param -= lr * g
 */
CT_VECTOR_CLONES
void FN(sgd_step)(real *restrict param, const real *restrict grad, real *restrict momentum_buffer,
                  ct_int n, acc_t lr,
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
    return VSELECT(FABS(w) < (real)0.5, start + w * (end - start), end - (end - start) * (1 - w));
}

/* torch.maximum: NaN in either argument gives NaN. */
static inline real FN(nan_max)(real a, real b)
{
    return VSELECT((a > b) | (a != a), a, b);
}

/* The per-element Adam update of adam_step below, branch-free so that it
 * vectorises: `decay` is 1 without decoupled decay (param * 1 is exact),
 * the coupled decay is selected, not branched on, and `amsgrad` is a
 * constant at each (inlined) call. */
CT_INLINE void FN(adam_loop)(real *restrict param, const real *restrict grad, real *restrict exp_avg,
                             real *restrict exp_avg_sq, real *restrict max_exp_avg_sq, ct_int n,
                             int amsgrad, real grad_sign, real decay, int coupled_decay, real wd,
                             real w1, real b2, real w2, real bias_correction2_sqrt, real eps,
                             real neg_step_size)
{
    for (ct_int i = 0; i < n; i++) {
        real p = param[i] * decay;
        real g = grad[i] * grad_sign;
        g = VSELECT(coupled_decay, g + wd * p, g);
        real m = FN(lerp)(exp_avg[i], g, w1);
        exp_avg[i] = m;
        real v = exp_avg_sq[i] * b2;
        v = v + w2 * g * g;
        exp_avg_sq[i] = v;
        if (amsgrad) v = max_exp_avg_sq[i] = FN(nan_max)(max_exp_avg_sq[i], v);
        real denom = SQRT(v) / bias_correction2_sqrt + eps;
        param[i] = p + neg_step_size * m / denom;
    }
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
CT_VECTOR_CLONES
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
    real grad_sign = maximize ? -1 : 1;
    if (!decoupled_decay) decay = 1;
    if (max_exp_avg_sq != NULL)
        FN(adam_loop)(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, n, 1, grad_sign, decay,
                      coupled_decay, wd, w1, b2, w2, bias_correction2_sqrt, eps_r, neg_step_size);
    else
        FN(adam_loop)(param, grad, exp_avg, exp_avg_sq, NULL, n, 0, grad_sign, decay, coupled_decay,
                      wd, w1, b2, w2, bias_correction2_sqrt, eps_r, neg_step_size);
}

/* The per-element RMSprop update of rmsprop_step below, branch-free; the
 * flags are constants at each (inlined) call, so each case is one loop. */
CT_INLINE void FN(rmsprop_loop)(real *restrict param, const real *restrict grad, real *restrict square_avg,
                                real *restrict grad_avg, real *restrict momentum_buffer, ct_int n,
                                int centered, int with_momentum, real grad_sign, int decay, real wd,
                                real alpha, real w, real eps, real momentum, real neg_lr)
{
    for (ct_int i = 0; i < n; i++) {
        real p = param[i];
        real g = grad[i] * grad_sign;
        g = VSELECT(decay, g + wd * p, g);
        real v = square_avg[i] * alpha;
        v = v + w * g * g;
        square_avg[i] = v;
        real avg;
        if (centered) {
            real a = FN(lerp)(grad_avg[i], g, w);
            grad_avg[i] = a;
            avg = SQRT(v - a * a) + eps;
        } else {
            avg = SQRT(v) + eps;
        }
        if (with_momentum) {
            real b = momentum_buffer[i] * momentum;
            b = b + g / avg;
            momentum_buffer[i] = b;
            param[i] = p + neg_lr * b;
        } else {
            param[i] = p + neg_lr * (g / avg);
        }
    }
}

/* adam_multi_step: adam_step on params[0 .. count - 1] (optim.h), in one
 * pool job.  The elements of all the parameters are cut into pieces of at
 * most CT_ADAM_PIECE, each one adam_step call on one thread: an element's
 * update reads nothing else, so the bits are those of one adam_step per
 * parameter on any thread count.  Returns 0, or -1 when the list of pieces
 * cannot be allocated (nothing has moved then). */
#define CT_ADAM_PIECE 8192

typedef struct {
    const FN(adam_param) *params;
    const ct_int *piece_param, *piece_start;
    acc_t lr, beta1, beta2, eps, weight_decay;
    int decoupled_weight_decay, maximize;
} FN(adam_job);

static void FN(adam_pieces)(void *ctx, ptrdiff_t begin, ptrdiff_t end)
{
    const FN(adam_job) *j = ctx;
    for (ptrdiff_t k = begin; k < end; k++) {
        const FN(adam_param) *p = &j->params[j->piece_param[k]];
        ct_int start = j->piece_start[k], len = CT_MIN((ct_int)CT_ADAM_PIECE, p->n - start);
        FN(adam_step)(p->param + start, p->grad + start, p->exp_avg + start, p->exp_avg_sq + start,
                      p->max_exp_avg_sq ? p->max_exp_avg_sq + start : NULL, len, p->step, j->lr, j->beta1,
                      j->beta2, j->eps, j->weight_decay, j->decoupled_weight_decay, j->maximize);
    }
}

int FN(adam_multi_step)(const FN(adam_param) *params, ct_int count, acc_t lr, acc_t beta1, acc_t beta2, acc_t eps,
                        acc_t weight_decay, int decoupled_weight_decay, int maximize)
{
    ct_int pieces = 0, elements = 0;
    for (ct_int i = 0; i < count; i++) {
        pieces += (params[i].n + CT_ADAM_PIECE - 1) / CT_ADAM_PIECE;
        elements += params[i].n;
    }
    ct_int *piece_param = malloc((size_t)CT_MAX(2 * pieces, 1) * sizeof(ct_int));
    if (piece_param == NULL) return -1;
    ct_int *piece_start = piece_param + pieces, k = 0;
    for (ct_int i = 0; i < count; i++)
        for (ct_int start = 0; start < params[i].n; start += CT_ADAM_PIECE, k++)
            piece_param[k] = i, piece_start[k] = start;
    FN(adam_job) job = {params, piece_param, piece_start, lr, beta1, beta2, eps, weight_decay,
                        decoupled_weight_decay, maximize};
    ct_parallel_rows(pieces, 16.0 * (double)elements, FN(adam_pieces), &job);
    free(piece_param);
    return 0;
}

/* rmsprop_step (in place)
 *   param, grad, square_avg (v) (n); grad_avg (a) (n) when centered, else
 *   NULL; momentum_buffer (b) (n) when momentum > 0, else NULL.  With g =
 *   grad (negated when maximize), as torch's single-tensor RMSprop, each
 *   line one rounding of `real` (its scalars rounded to `real` first):
 *     g += weight_decay * param
 *     v = v * alpha;  v = v + (1 - alpha) * g * g
 *     centered: a = lerp(a, g, 1 - alpha);  avg = sqrt(v - a * a) + eps
 *     else:     avg = sqrt(v) + eps
 *     momentum: b = b * momentum;  b = b + g / avg;  param += -lr * b
 *     else:     param += -lr * (g / avg)
 */
CT_VECTOR_CLONES
void FN(rmsprop_step)(real *param, const real *grad, real *square_avg, real *grad_avg, real *momentum_buffer,
                      ct_int n, acc_t lr, acc_t alpha, acc_t eps, acc_t weight_decay, acc_t momentum,
                      int centered, int maximize)
{
    real grad_sign = maximize ? -1 : 1, wd = (real)weight_decay, a = (real)alpha, w = (real)(1 - alpha);
    real e = (real)eps, m = (real)momentum, neg_lr = (real)-lr;
    int decay = weight_decay != 0;
    if (centered && momentum > 0)
        FN(rmsprop_loop)(param, grad, square_avg, grad_avg, momentum_buffer, n, 1, 1, grad_sign, decay, wd, a,
                         w, e, m, neg_lr);
    else if (centered)
        FN(rmsprop_loop)(param, grad, square_avg, grad_avg, NULL, n, 1, 0, grad_sign, decay, wd, a, w, e, m,
                         neg_lr);
    else if (momentum > 0)
        FN(rmsprop_loop)(param, grad, square_avg, NULL, momentum_buffer, n, 0, 1, grad_sign, decay, wd, a, w,
                         e, m, neg_lr);
    else
        FN(rmsprop_loop)(param, grad, square_avg, NULL, NULL, n, 0, 0, grad_sign, decay, wd, a, w, e, m,
                         neg_lr);
}

/* norm_partial
 *   x (n) -> sum |x_i|^p in double, or max |x_i| when p = inf (NaN if any
 *   x_i is NaN); ct_norm_combine / ct_norm_finish (optim.h) make the norm
 *   of a list of arrays from these.
 */
CT_VECTOR_CLONES
acc_t FN(norm_partial)(const real *x, ct_int n, acc_t norm_type)
{
    acc_t total = 0;
    if (n == 0) return 0;
    if (isinf(norm_type)) {
        real m = VMAX(x, n), neg = -VMIN(x, n); /* NaN if any x_i is NaN */
        total = (acc_t)(neg > m ? neg : m);
    } else if (norm_type == 2) {
        total = VDOT(x, x, n);
    } else if (norm_type == 1) {
        total = VSUM_ABS(x, n);
    } else {
        for (ct_int i = 0; i < n; i++) total += pow(FABS(x[i]), norm_type);
    }
    return total;
}

/* scale_inplace: x (n) *= coef (rounded to the dtype, as torch's mul_). */
CT_VECTOR_CLONES
void FN(scale_inplace)(real *x, ct_int n, acc_t coef)
{
    real c = (real)coef;
    for (ct_int i = 0; i < n; i++) x[i] *= c;
}

#endif
