/* bind_recurrent.c - Python bindings of recurrent.c (to be filled in). */
#include "ct_py.h"

PyMethodDef ct_methods_recurrent[] = {
    {NULL, NULL, 0, NULL},
};
