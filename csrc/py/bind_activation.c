/* bind_activation.c - the custom parts of the bindings of activation.c (the
 * rest is generated from kernel_table.py). */
#include "../activation.h"

/* Python names and "backward needs the output" flags, in enum order. */
#define CT_ACT_NAME(id, name, saves_output) name,
#define CT_ACT_SAVES(id, name, saves_output) saves_output,
static const char *const activation_names[CT_ACT_COUNT] = {CT_ACTIVATIONS(CT_ACT_NAME)};
static const int activation_saves[CT_ACT_COUNT] = {CT_ACTIVATIONS(CT_ACT_SAVES)};
#undef CT_ACT_NAME
#undef CT_ACT_SAVES

/* The kind named `name`, or -1 with ValueError listing the valid names. */
static int activation_kind(const char *name, const char *fn)
{
    for (int k = 0; k < CT_ACT_COUNT; k++)
        if (strcmp(name, activation_names[k]) == 0) return k;
    PyErr_Format(PyExc_ValueError,
                 "%s: kind must be one of 'relu', 'gelu', 'gelu_tanh', 'tanh', 'sigmoid', got '%s'",
                 fn, name);
    return -1;
}

