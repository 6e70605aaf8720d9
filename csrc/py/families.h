/* families.h - every kernel family with a binding file (csrc/py/bind_<family>.c).
 * Add one line per family; module.c joins their method tables. */
#define CT_FAMILIES(X) \
    X(linear)          \
    X(activation)      \
    X(softmax)         \
    X(layernorm)       \
    X(embedding)       \
    X(dropout)         \
    X(crossentropy)    \
    X(optim)           \
    X(attention)       \
    X(fused)           \
    X(recurrent)       \
    X(decode)
