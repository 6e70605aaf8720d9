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

/* The value/slope functions are branch-free (ct_math.h's VGELU, VTANH,
 * VSIGMOID, VSELECT), so the loops below vectorise. */

/* relu(x) = max(x, 0); NaN stays NaN (the comparison is false).
 * relu'(x) = 1 for x > 0, else 0 (torch's choice at 0); NaN at NaN. */
static inline real FN(relu_value)(real x) { return VSELECT(x < 0, (real)0, x); }
static inline real FN(relu_slope)(real x) { return VSELECT(x != x, x, (real)(x > 0)); }

/* gelu (erf form) and gelu_tanh, value and slope from the input: ct_math.h,
 * shared with the feed-forward's bias_act (fused.c). */
static inline real FN(gelu_value)(real x) { return VGELU(x); }
static inline real FN(gelu_slope)(real x) { return VGELU_SLOPE(x); }
static inline real FN(gelu_tanh_value)(real x) { return VGELU_TANH(x); }
static inline real FN(gelu_tanh_slope)(real x) { return VGELU_TANH_SLOPE(x); }

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
