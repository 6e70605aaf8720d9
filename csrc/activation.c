/* activation.c - elementwise activations: relu, gelu (erf), gelu_tanh, tanh,
 * sigmoid.  Each kind is two scalar functions (value, and derivative from
 * what backward is given); one macro turns them into the two loops, and a
 * table indexed by ct_activation (activation.h) picks the loops. */
#ifndef CT_TEMPLATE_PASS
#define CT_TEMPLATE_FILE "activation.c"
#include "ct_template.h"
#else
#include "activation.h"
#include "ct_math.h"

#ifndef CT_ACTIVATION_CONSTANTS
#define CT_ACTIVATION_CONSTANTS
#define CT_SQRT1_2 0.70710678118654752440      /* 1 / sqrt(2) */
#define CT_INV_SQRT_2PI 0.39894228040143267794 /* 1 / sqrt(2 pi), the N(0,1) density at 0 */
#define CT_SQRT_2_PI 0.79788456080286535588    /* sqrt(2 / pi) */
#define CT_GELU_CUBIC 0.044715                 /* cubic coefficient of the tanh approximation */
#endif

/* The value/slope functions are branch-free (ct_math.h's VEXP, VTANH,
 * VERF, VSELECT), so the loops below vectorise. */

/* relu(x) = max(x, 0); NaN stays NaN (the comparison is false).
 * relu'(x) = 1 for x > 0, else 0 (torch's choice at 0); NaN at NaN. */
static inline real FN(relu_value)(real x) { return VSELECT(x < 0, (real)0, x); }
static inline real FN(relu_slope)(real x) { return VSELECT(x != x, x, (real)(x > 0)); }

/* gelu(x) = x Phi(x), Phi(x) = (1 + erf(x / sqrt 2)) / 2 the normal CDF.
 * gelu'(x) = Phi(x) + x phi(x), phi(x) = exp(-x^2 / 2) / sqrt(2 pi). */
static inline real FN(gelu_value)(real x) { return (real)0.5 * x * (1 + VERF(x * (real)CT_SQRT1_2)); }
static inline real FN(gelu_slope)(real x)
{
    real cdf = (real)0.5 * (1 + VERF(x * (real)CT_SQRT1_2));
    real pdf = (real)CT_INV_SQRT_2PI * VEXP((real)-0.5 * x * x);
    return cdf + x * pdf;
}

/* gelu_tanh(x) = x (1 + tanh(u)) / 2, u = sqrt(2/pi) (x + 0.044715 x^3)
 * (torch's approximate='tanh').  With t = tanh(u):
 * gelu_tanh'(x) = (1 + t) / 2 + x (1 - t^2) / 2 * sqrt(2/pi) (1 + 3 * 0.044715 x^2). */
static inline real FN(gelu_tanh_value)(real x)
{
    real u = (real)CT_SQRT_2_PI * (x + (real)CT_GELU_CUBIC * x * x * x);
    return (real)0.5 * x * (1 + VTANH(u));
}
static inline real FN(gelu_tanh_slope)(real x)
{
    real u = (real)CT_SQRT_2_PI * (x + (real)CT_GELU_CUBIC * x * x * x);
    real t = VTANH(u);
    real du_dx = (real)CT_SQRT_2_PI * (1 + 3 * (real)CT_GELU_CUBIC * x * x);
    return (real)0.5 * (1 + t) + (real)0.5 * x * (1 - t * t) * du_dx;
}

/* tanh, derivative from the output y: 1 - y^2. */
static inline real FN(tanh_value)(real x) { return VTANH(x); }
static inline real FN(tanh_slope)(real y) { return 1 - y * y; }

/* sigmoid(x) = 1 / (1 + exp(-x)), evaluated without overflow and with full
 * relative accuracy in both tails (see ct_sigmoidf); derivative from the
 * output y: y (1 - y). */
static inline real FN(sigmoid_value)(real x) { return VSIGMOID(x); }
static inline real FN(sigmoid_slope)(real y) { return y * (1 - y); }

/* The two loops of one kind (n elements, contiguous):
 *   forward : out[i] = value(inp[i])
 *   backward: dinp[i] += dout[i] * slope(saved[i])   (saved = inp or out) */
#define CT_ACT_LOOPS(kind)                                                                \
    static CT_VECTOR_CLONES void FN(kind##_forward_loop)(real *restrict out,                \
                                                          const real *restrict inp, ct_int n) \
    {                                                                                       \
        for (ct_int i = 0; i < n; i++) out[i] = FN(kind##_value)(inp[i]);                   \
    }                                                                                       \
    static CT_VECTOR_CLONES void FN(kind##_backward_loop)(real *restrict dinp,              \
                                                           const real *restrict dout,       \
                                                           const real *restrict saved, ct_int n) \
    {                                                                                       \
        for (ct_int i = 0; i < n; i++) dinp[i] += dout[i] * FN(kind##_slope)(saved[i]);     \
    }
CT_ACT_LOOPS(relu)
CT_ACT_LOOPS(gelu)
CT_ACT_LOOPS(gelu_tanh)
CT_ACT_LOOPS(tanh)
CT_ACT_LOOPS(sigmoid)
#undef CT_ACT_LOOPS

/* Loops by kind, in the order of CT_ACTIVATIONS. */
static const struct {
    void (*forward)(real *out, const real *inp, ct_int n);
    void (*backward)(real *dinp, const real *dout, const real *saved, ct_int n);
} FN(activation_table)[CT_ACT_COUNT] = {
    [CT_ACT_RELU] = {FN(relu_forward_loop), FN(relu_backward_loop)},
    [CT_ACT_GELU] = {FN(gelu_forward_loop), FN(gelu_backward_loop)},
    [CT_ACT_GELU_TANH] = {FN(gelu_tanh_forward_loop), FN(gelu_tanh_backward_loop)},
    [CT_ACT_TANH] = {FN(tanh_forward_loop), FN(tanh_backward_loop)},
    [CT_ACT_SIGMOID] = {FN(sigmoid_forward_loop), FN(sigmoid_backward_loop)},
};

/* activation_forward
 *   inp (n), out (n) = act(inp)      any shape, flattened
 */
void FN(activation_forward)(real *out, const real *inp, ct_int n, ct_activation kind)
{
    FN(activation_table)[kind].forward(out, inp, n);
}

/* activation_backward (accumulates)
 *   dout (n), saved (n): the input x, or the output y when the kind saves
 *   its output (tanh, sigmoid; see CT_ACTIVATIONS)
 *   dinp (n) += dout * act'(x)
 */
void FN(activation_backward)(real *dinp, const real *dout, const real *saved, ct_int n,
                             ct_activation kind)
{
    FN(activation_table)[kind].backward(dinp, dout, saved, n);
}

#endif
