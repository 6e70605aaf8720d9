/* bind_optim.c - Python bindings of optim.c (to be filled in). */
#include "ct_py.h"

PyMethodDef ct_methods_optim[] = {
    {NULL, NULL, 0, NULL},
};
