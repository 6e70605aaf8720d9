/* bind_softmax.c - the bindings of softmax.c are all generated from kernel_table.py. */
#include "../softmax.h"
