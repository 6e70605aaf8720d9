"""The specification table of the kernel bindings: one entry per kernel, from
which csrc/py/generate_bindings.py writes the C shells (py_<name>), the
method tables and the Python pass-throughs (ctransformer/kernels/_bindings.py).

An entry: Kernel(name, family, args, doc, returns, body).
  args     the Python signature, once: "x, weight: array? = None, eps: float = 1e-5"
           (kinds: array (default), array? (may be None), object (converted by
           custom C), bool, float, str, int (long long), size (Py_ssize_t),
           uint64; "[hint]" after the kind overrides the Python type hint)
  doc      the Python docstring (its first line is the C method's summary)
  returns  the Python return type hint
  body     the binding, step by step in the order of its checks (and so of its
           error messages):
             In(name, dtype, ndim, checks)   an input array (ct_input); dtype "float"
                                             (float32/float64: defines t and nd), "t",
                                             "bool", "ids", "f64"; checks dim(...) /
                                             like(...) / C expressions (@ = the array)
             Grad(name, like | shape, when)  a gradient: the caller's accumulator
                                             (argument `arg`) or fresh zeros
             Out(name, like | shape, ...)    a new output array
             C("...")                        hand-written C (custom checks; goto fail)
             Call(kernel, "args")            the call, by dtype t, GIL released
             ("a", "b") or "C expression"    the result
           or None: the body is hand-written, <name>_impl in bind_<family>.c.
Shapes are C: (ndim, dims pointer), e.g. ("nd - 1", "PyArray_DIMS(x)").
"""
from generate_bindings import C, Call, Grad, In, Kernel, Out, dim, like  # noqa: F401

ARRAY = "np.ndarray"
OPT = "Optional[np.ndarray]"

KERNELS = []


def kernel(*args, **kwargs):
    KERNELS.append(Kernel(*args, **kwargs))


def rows(x):
    """N = prod(x.shape[:-1]), D = x.shape[-1] (x is at least 1-D)."""
    return C(f"npy_intp N = ct_prod({x}, 0, nd - 1), D = PyArray_DIM({x}, nd - 1);")


# ------------------------------------------------------------------ activation
ACT_KIND = C("int kind_id = activation_kind(kind, fn);\nif (kind_id < 0) goto fail;")

kernel("activation_forward", "activation", "x, kind: str", '''
``out = act(x)`` elementwise.

x (...) float32/float64 -> out (...) of the same shape and dtype.
kind: "relu"; "gelu" (exact, ``x * Phi(x)`` with erf: torch's default);
"gelu_tanh" (torch's ``approximate='tanh'``); "tanh"; "sigmoid".
''', ARRAY, [
    ACT_KIND,
    In("x", "float"),
    Out("out", like="x"),
    Call("activation_forward", "out, x, PyArray_SIZE(x), (ct_activation)kind_id"),
    ("out",)])

kernel("activation_saves_output", "activation", "kind: str", '''
True when :func:`activation_backward` takes the forward *output*
(tanh, sigmoid), False when it takes the *input* x (relu, gelu, gelu_tanh).
''', "bool", [ACT_KIND, "PyBool_FromLong(activation_saves[kind_id])"])

kernel("activation_backward", "activation", "dout, saved, kind: str, dinp: array? = None", '''
Gradient of :func:`activation_forward`: ``dinp += dout * act'(x)``.

dout (...), saved (...) of the same shape: the input x when
``activation_saves_output(kind)`` is False, else the output.  A given
C-contiguous ``dinp`` is accumulated into and returned; otherwise a new
array is.  relu'(0) = 0, as in torch.
''', ARRAY, [
    ACT_KIND,
    In("saved", "float"),
    In("dout", "t", "nd", [like("saved", "saved's shape")]),
    Grad("dinp", like="saved", arg="dinp"),
    Call("activation_backward", "dinp, dout, saved, PyArray_SIZE(saved), (ct_activation)kind_id"),
    ("dinp",)])

# ------------------------------------------------------------------ softmax
for log, doc_f, doc_b in [
    ("", '''
``y = exp(x - max) / sum exp(x - max)`` over the last axis.

x (..., D) float32/float64, at least 1-D -> y (..., D).  Stable for any
finite inputs (e.g. +-1e30).  A row of all -inf gives zeros; a row
containing NaN gives NaN.
''', '''
Gradient of :func:`softmax_forward` from its output y:
``dinp += y * (dout - sum(dout * y, axis=-1))``.

dout (..., D), y (..., D) -> dinp (..., D) (accumulated into when given).
An all -inf input row (y = 0) gets zero gradient.
'''),
        ("log_", '''
``y = x - max - log sum exp(x - max)`` over the last axis.

x (..., D) -> y (..., D).  A row of all -inf gives -inf; a row containing
NaN gives NaN.
''', '''
Gradient of :func:`log_softmax_forward` from its output y:
``dinp += dout - exp(y) * sum(dout, axis=-1)``.

dout (..., D), y (..., D) -> dinp (..., D) (accumulated into when given).
An all -inf row gets zero gradient (never NaN).
''')]:
    kernel(f"{log}softmax_forward", "softmax", "x", doc_f, ARRAY, [
        In("x", "float", (1, -1)), rows("x"),
        Out("y", like="x"),
        Call(f"{log}softmax_forward", "y, x, N, D"),
        ("y",)])
    kernel(f"{log}softmax_backward", "softmax", "dout, y, dinp: array? = None", doc_b, ARRAY, [
        In("y", "float", (1, -1)), rows("y"),
        In("dout", "t", "nd", [like("y", "y's shape")]),
        Grad("dinp", like="y", arg="dinp"),
        Call(f"{log}softmax_backward", "dinp, dout, y, N, D"),
        ("dinp",)])
