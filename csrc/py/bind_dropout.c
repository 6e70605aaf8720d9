/* bind_dropout.c - Python bindings of dropout.c (to be filled in). */
#include "ct_py.h"

PyMethodDef ct_methods_dropout[] = {
    {NULL, NULL, 0, NULL},
};
