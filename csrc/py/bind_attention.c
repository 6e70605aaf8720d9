/* bind_attention.c - Python bindings of attention.c (to be filled in). */
#include "ct_py.h"

PyMethodDef ct_methods_attention[] = {
    {NULL, NULL, 0, NULL},
};
