/* activation.h - prototypes of activation.c (a template: see ct_template.h).
 *
 * The kinds are listed once, in CT_ACTIVATIONS: enum name, Python name, and
 * whether backward needs the forward OUTPUT (1) or the INPUT (0).  For tanh
 * and sigmoid the derivative is cheapest from the output y (1 - y^2,
 * y (1 - y)); relu and both gelus need the input x. */
#ifndef CT_TEMPLATE_PASS
#define CT_TEMPLATE_FILE "activation.h"
#include "ct_template.h"
#else

#ifndef CT_ACTIVATION_COMMON
#define CT_ACTIVATION_COMMON
#define CT_ACTIVATIONS(X)                 \
    X(CT_ACT_RELU, "relu", 0)             \
    X(CT_ACT_GELU, "gelu", 0)             \
    X(CT_ACT_GELU_TANH, "gelu_tanh", 0)   \
    X(CT_ACT_TANH, "tanh", 1)             \
    X(CT_ACT_SIGMOID, "sigmoid", 1)

#define CT_ACT_ENUM_ITEM(id, name, saves_output) id,
typedef enum { CT_ACTIVATIONS(CT_ACT_ENUM_ITEM) CT_ACT_COUNT } ct_activation;
#undef CT_ACT_ENUM_ITEM
#endif

void FN(activation_forward)(real *out, const real *inp, ct_int n, ct_activation kind);
void FN(activation_backward)(real *dinp, const real *dout, const real *saved, ct_int n,
                             ct_activation kind);
#endif
