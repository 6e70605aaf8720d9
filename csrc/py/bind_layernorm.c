/* bind_layernorm.c - Python bindings of layernorm.c (to be filled in). */
#include "ct_py.h"

PyMethodDef ct_methods_layernorm[] = {
    {NULL, NULL, 0, NULL},
};
