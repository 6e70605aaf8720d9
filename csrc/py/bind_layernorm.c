/* bind_layernorm.c - the bindings of layernorm.c (all of them are
 * generated from kernel_table.py). */
#include "../layernorm.h"
