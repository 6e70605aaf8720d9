/* bind_embedding.c - Python bindings of embedding.c (to be filled in). */
#include "ct_py.h"

PyMethodDef ct_methods_embedding[] = {
    {NULL, NULL, 0, NULL},
};
