/* bind_softmax.c - Python bindings of softmax.c (to be filled in). */
#include "ct_py.h"

PyMethodDef ct_methods_softmax[] = {
    {NULL, NULL, 0, NULL},
};
