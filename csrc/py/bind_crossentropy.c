/* bind_crossentropy.c - Python bindings of crossentropy.c (to be filled in). */
#include "ct_py.h"

PyMethodDef ct_methods_crossentropy[] = {
    {NULL, NULL, 0, NULL},
};
