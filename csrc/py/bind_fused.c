/* bind_fused.c - the custom parts of the bindings of fused.c (the rest is
 * generated from kernel_table.py). */
#include "../fused.h"

/* "relu" | "gelu" | "gelu_tanh" -> CT_ACT_*, or -1 with a ValueError (also
 * used by decode_layer_step: declared in ct_py.h). */
int ct_parse_act(const char *name, const char *fn)
{
    if (strcmp(name, "relu") == 0) return CT_ACT_RELU;
    if (strcmp(name, "gelu") == 0) return CT_ACT_GELU;
    if (strcmp(name, "gelu_tanh") == 0) return CT_ACT_GELU_TANH;
    PyErr_Format(PyExc_ValueError, "%s: act must be 'relu', 'gelu' or 'gelu_tanh', got '%s'", fn,
                 name);
    return -1;
}
