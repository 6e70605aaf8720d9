/* bind_activation.c - Python bindings of activation.c (to be filled in). */
#include "ct_py.h"

PyMethodDef ct_methods_activation[] = {
    {NULL, NULL, 0, NULL},
};
