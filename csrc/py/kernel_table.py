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
             InPlace(name, dtype, like, ...) an array written in place (ct_inplace);
                                             optional / when: C conditions; checks as In
             Grad(name, like | shape, when)  a gradient: the caller's accumulator
                                             (argument `arg`) or fresh zeros
             Out(name, like | shape, ...)    a new output array
             C("...")                        hand-written C (custom checks; goto fail)
             Call(kernel, "args")            the call, by dtype t, GIL released
             ("a", "b") or "C expression"    the result
           or None: the body is hand-written, <name>_impl in bind_<family>.c
           (only grad_norm / clip_grad_norm, which take a sequence of arrays).
Custom checks and helpers the C steps call live in bind_<family>.c.
Shapes are C: (ndim, dims pointer), e.g. ("nd - 1", "PyArray_DIMS(x)").
"""
from generate_bindings import C, Call, Grad, In, InPlace, Kernel, Out, dim, like  # noqa: F401

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

# ------------------------------------------------------------------ dropout
kernel("dropout_forward", "dropout", "x, p: float, seed: object[int], offset: object[int] = 0", '''
Zero each element with probability p and scale the rest by 1/(1-p).

x (...) float32/float64 -> (out (...), mask (...) of dtype **bool**,
True where kept).  Element i (in C order) is kept iff
``ct_random_uniform(seed, offset + i) >= p``: a pure function of
(seed, offset + i), so equal arguments give equal masks and the mask of
an array equals the masks of its flat parts computed at their offsets.
p = 0 returns a copy and an all-True mask; p = 1 returns zeros (values
are multiplied, so NaN stays NaN).  p outside [0, 1] is a ValueError;
seed and offset are ints in [0, 2**64).
''', "Tuple[np.ndarray, np.ndarray]", [
    C('''uint64_t seed_value, offset_value = 0;
    if (ct_check_probability(p, fn, "p") || uint64_arg(o_seed, fn, "seed", &seed_value) ||
        (o_offset != NULL && uint64_arg(o_offset, fn, "offset", &offset_value)))
        goto fail;'''),
    In("x", "float"),
    Out("out", like="x"), Out("mask", like="x", dtype="bool"),
    Call("dropout_forward", "out, mask, x, PyArray_SIZE(x), p, seed_value, offset_value"),
    ("out", "mask")])

kernel("dropout_backward", "dropout", "dout, mask, p: float, dinp: array? = None", '''
Gradient of :func:`dropout_forward`: ``dinp += dout * mask / (1 - p)``.

dout (...), mask (...) bool from the forward -> dinp (...); a given
C-contiguous ``dinp`` is accumulated into and returned.
''', ARRAY, [
    C('if (ct_check_probability(p, fn, "p")) goto fail;'),
    In("dout", "float"),
    In("mask", "bool", "nd", [like("dout", "dout's shape")]),
    Grad("dinp", like="dout", arg="dinp"),
    Call("dropout_backward", "dinp, dout, mask, PyArray_SIZE(dout), p"),
    ("dinp",)])

# ------------------------------------------------------------------ embedding
IDS_NDIM = (0, "NPY_MAXDIMS - 1")

kernel("embedding_forward", "embedding", "ids, weight", '''
``out[...] = weight[ids[...]]``.

ids (...) of any integer dtype and shape (0-d included), weight (V, D)
float32/float64 -> out ids.shape + (D,).  An id outside [0, V) raises
IndexError naming its position and value, before anything is read.
''', ARRAY, [
    In("weight", "float", 2),
    C("npy_intp V = PyArray_DIM(weight, 0), D = PyArray_DIM(weight, 1);"),
    In("ids", "ids", IDS_NDIM, ['check_ids_in_range(@, fn, V, "weight.shape[0]")']),
    C('''int ids_nd = PyArray_NDIM(ids);
    npy_intp shape[NPY_MAXDIMS];
    if (ids_nd > 0) memcpy(shape, PyArray_DIMS(ids), sizeof(npy_intp) * ids_nd); /* 0-d: DIMS may be NULL */
    shape[ids_nd] = D;'''),
    Out("out", shape=("ids_nd + 1", "shape")),
    Call("embedding_forward", "out, ids, weight, PyArray_SIZE(ids), D"),
    ("out",)])

kernel("embedding_backward", "embedding",
       "dout, ids, num_embeddings: size, padding_idx: object[Optional[int]] = None, dweight: array? = None", '''
Gradient of :func:`embedding_forward` w.r.t. weight (a scatter-add).

dout ids.shape + (D,), ids (...), num_embeddings V -> dweight (V, D) with
``dweight[ids[i]] += dout[i]`` (repeated ids sum).  The row
``padding_idx`` (an int in [-V, V), negative counting from V as in
torch; None for no padding) receives no gradient.  A given C-contiguous
``dweight`` is accumulated into and returned.
''', ARRAY, [
    C('''if (ct_check_positive(num_embeddings, fn, "num_embeddings", 1)) goto fail;
    int64_t pad = padding_row(o_padding_idx == NULL ? Py_None : o_padding_idx, fn, num_embeddings);
    if (pad == -2) goto fail;'''),
    In("ids", "ids", IDS_NDIM),
    C("int ids_nd = PyArray_NDIM(ids);"),
    In("dout", "float", ("ids_nd + 1", "ids_nd + 1"), [like("ids", "ids' shape", ndim="ids_nd")]),
    C('''if (check_ids_in_range(ids, fn, num_embeddings, "num_embeddings")) goto fail;
    npy_intp D = PyArray_DIM(dout, ids_nd), wshape[2] = {num_embeddings, D};'''),
    Grad("dweight", shape=("2", "wshape"), arg="dweight"),
    Call("embedding_backward", "dweight, dout, ids, PyArray_SIZE(ids), D, pad"),
    ("dweight",)])

# ------------------------------------------------------------------ crossentropy
CE_OPTIONS = "ignore_index: int = -100, label_smoothing: float = 0.0, reduction: str = 'mean', weight: array? = None"
CE_COMMON = C('''ce_args a;
    if (ce_common(&held, &a, fn, o_logits, o_targets, o_weight, ignore_index, label_smoothing, reduction))
        goto fail;
    int t = a.t;''')

kernel("cross_entropy_forward", "crossentropy", "logits, targets, " + CE_OPTIONS, '''
Cross-entropy of ``log_softmax(logits)`` against class ids, as torch.

logits (N, C) float32/float64, targets (N) any integer dtype with values
in [0, C) or ``ignore_index``, weight (C) optional class weights of the
logits' dtype.  ``label_smoothing`` eps in [0, 1] mixes in the uniform
target: ``loss = (1 - eps) * nll + eps * mean_c(-w_c * log p_c) ``.
reduction "mean" divides by the summed weight of the non-ignored targets
(NaN if all are ignored, as torch), "sum" adds, "none" keeps rows
(ignored rows are 0).

Returns (loss, lse): loss () for mean/sum or (N) for "none", in the
logits' dtype; lse (N) float64, each row's log-sum-exp, to be passed to
:func:`cross_entropy_backward` (kept in double so the recomputed softmax
is exact even for huge logits).  Raises IndexError naming the position
and value of an out-of-range target.
''', "Tuple[np.ndarray, np.ndarray]", [
    CE_COMMON,
    C("npy_intp nshape[1] = {a.N};"),
    Out("loss", shape=("a.reduction == CT_REDUCE_NONE ? 1 : 0", "nshape")),
    Out("lse", shape=("1", "nshape"), dtype="f64"),
    Call("cross_entropy_forward", "loss, lse, CT_DATA(a.logits), CT_DATA(a.targets), CT_DATA(a.weight), "
         "a.N, a.C, (int64_t)ignore_index, label_smoothing, a.reduction"),
    ("loss", "lse")])

kernel("cross_entropy_backward", "crossentropy", "dloss, logits, targets, lse, " + CE_OPTIONS
       + ", dlogits: array? = None", '''
Gradient of :func:`cross_entropy_forward` with respect to the logits.

dloss () for mean/sum or (N) for "none", in the logits' dtype; logits
(N, C), targets (N), lse (N) float64 from the forward; the remaining
options must be those of the forward.  Returns dlogits (N, C); a given
C-contiguous ``dlogits`` is accumulated into (``+=``) and returned.
Ignored rows get a zero gradient.
''', ARRAY, [
    CE_COMMON,
    C("int dloss_ndim = a.reduction == CT_REDUCE_NONE ? 1 : 0;"),
    In("dloss", "t", ("dloss_ndim", "dloss_ndim"), ["(dloss_ndim && " + dim(0, "a.N", "logits.shape[0]") + ")"]),
    In("lse", "f64", 1, [dim(0, "a.N", "logits.shape[0]")]),
    Grad("dlogits", like="a.logits", arg="dlogits"),
    Call("cross_entropy_backward", "dlogits, dloss, CT_DATA(a.logits), CT_DATA(a.targets), lse, "
         "CT_DATA(a.weight), a.N, a.C, (int64_t)ignore_index, label_smoothing, a.reduction"),
    ("dlogits",)])

# ------------------------------------------------------------------ layernorm
def row_vector(name, size="D", what="x.shape[-1]"):
    """An optional (size) parameter vector of x's dtype."""
    return In(name, "t", 1, [dim(0, size, what)], none_ok=True)


kernel("layernorm_forward", "layernorm", "x, weight: array? = None, bias: array? = None, eps: float = 1e-5", '''
``out = (x - mean) / sqrt(var + eps) * weight + bias`` over the last axis.

x (..., D) float32/float64, weight (D) or None (scale 1), bias (D) or None
(shift 0) -> (out (..., D), mean (...), rstd (...)), mean and rstd in x's
dtype, ``rstd = 1 / sqrt(var + eps)`` with the biased variance (as torch),
eps inside the root.  Statistics are computed in double with two passes,
so rows far from zero and constant rows are exact.  An empty row (D = 0)
has mean 0 and rstd 1 / sqrt(eps).
''', "Tuple[np.ndarray, np.ndarray, np.ndarray]", [
    C('if (ct_check_eps(eps, fn, "finite and >= 0")) goto fail;'),
    In("x", "float", (1, -1)), rows("x"),
    row_vector("weight"), row_vector("bias"),
    Out("out", like="x"),
    Out("mean", shape=("nd - 1", "PyArray_DIMS(x)")), Out("rstd", shape=("nd - 1", "PyArray_DIMS(x)")),
    Call("layernorm_forward", "out, mean, rstd, x, weight, bias, N, D, eps"),
    ("out", "mean", "rstd")])

kernel("layernorm_backward", "layernorm",
       "dout, x, weight: array?, mean, rstd, dinp: array? = None, dweight: array? = None, dbias: array? = None, "
       "need_dinp: bool = True, with_bias: bool = True", '''
Gradients of :func:`layernorm_forward`.

dout (..., D), x (..., D), weight (D) or None, mean (...), rstd (...) from
the forward -> (dinp (..., D) or None if not need_dinp, dweight (D) or
None if weight is None, dbias (D) or None if not with_bias).  Arrays
passed as ``dinp``/``dweight``/``dbias`` (C-contiguous) are accumulated
into (``+=``) and returned.
''', "Tuple[Optional[np.ndarray], Optional[np.ndarray], Optional[np.ndarray]]", [
    In("x", "float", (1, -1)), rows("x"),
    In("dout", "t", "nd", [like("x", "x's shape")]),
    row_vector("weight"),
    In("mean", "t", "nd - 1", [like("x", "x.shape[:-1]", ndim="nd - 1")]),
    In("rstd", "t", "nd - 1", [like("x", "x.shape[:-1]", ndim="nd - 1")]),
    C("npy_intp dshape[1] = {D};"),
    Grad("dinp", like="x", when="need_dinp", arg="dinp"),
    C('''if (weight == NULL && o_dweight != Py_None) {
        PyErr_Format(PyExc_ValueError, "%s: dweight must be None when weight is None, got an array", fn);
        goto fail;
    }'''),
    Grad("dweight", shape=("1", "dshape"), when="weight != NULL", arg="dweight"),
    Grad("dbias", shape=("1", "dshape"), when="with_bias", arg="dbias"),
    Call("layernorm_backward", "dinp, dweight, dbias, dout, x, weight, mean, rstd, N, D"),
    ("dinp", "dweight", "dbias")])

# ------------------------------------------------------------------ linear
kernel("linear_forward", "linear", "inp, weight, bias: array? = None", '''
``out = inp @ weight.T + bias``.

inp (..., K), weight (N, K) (torch's out x in layout), bias (N) or None
-> out (..., N).
''', ARRAY, [
    In("inp", "float", (1, -1)),
    In("weight", "t", 2, [dim(1, "PyArray_DIM(inp, nd - 1)", "inp.shape[-1]")]),
    C("npy_intp K = PyArray_DIM(weight, 1), N = PyArray_DIM(weight, 0), M = ct_prod(inp, 0, nd - 1);"),
    row_vector("bias", "N", "weight.shape[0]"),
    C('''npy_intp shape[NPY_MAXDIMS];
    memcpy(shape, PyArray_DIMS(inp), sizeof(npy_intp) * nd);
    shape[nd - 1] = N;'''),
    Out("out", shape=("nd", "shape")),
    Call("linear_forward", "out, inp, weight, bias, M, K, N"),
    ("out",)])

kernel("linear_backward", "linear",
       "dout, inp, weight, with_bias: bool = True, need_dinp: bool = True, dinp: array? = None, "
       "dweight: array? = None, dbias: array? = None", '''
Gradients of :func:`linear_forward`.

dout (..., N), inp (..., K), weight (N, K) -> (dinp (..., K) or None,
dweight (N, K), dbias (N) or None).  ``dinp``/``dweight``/``dbias`` given
as C-contiguous arrays are accumulated into (``+=``) and returned.
''', "Tuple[Optional[np.ndarray], np.ndarray, Optional[np.ndarray]]", [
    In("inp", "float", (1, -1)),
    In("weight", "t", 2, [dim(1, "PyArray_DIM(inp, nd - 1)", "inp.shape[-1]")]),
    C("npy_intp K = PyArray_DIM(weight, 1), N = PyArray_DIM(weight, 0), M = ct_prod(inp, 0, nd - 1);"),
    In("dout", "t", "nd", [like("inp", "inp's leading dims", ndim="nd - 1"), dim(-1, "N", "weight.shape[0]")]),
    # Given buffers are accumulated into.  When none is given the fresh
    # buffers are written, not accumulated (no zero-fill needed); when only
    # some are, the missing ones start from zeros.
    C('''int given = (need_dinp && o_dinp != Py_None) || o_dweight != Py_None ||
                (with_bias && o_dbias != Py_None);
    npy_intp nshape[1] = {N};'''),
    Grad("dinp", like="inp", when="need_dinp", zero_fill="given", arg="dinp"),
    Grad("dweight", like="weight", zero_fill="given", arg="dweight"),
    Grad("dbias", shape=("1", "nshape"), when="with_bias", zero_fill="given", arg="dbias"),
    Call("linear_backward", "dinp, dweight, dbias, dout, inp, weight, M, K, N, given"),
    ("dinp", "dweight", "dbias")])

BMM_OPERANDS = [
    In("a", "float", 3),
    In("b", "t", 3, [dim(1, "PyArray_DIM(a, 2)", "a.shape[2]")]),
    C('''npy_intp batch, sa, sb, M = PyArray_DIM(a, 1), K = PyArray_DIM(a, 2), N = PyArray_DIM(b, 2);
    if (bmm_batch(a, b, fn, &batch, &sa, &sb)) goto fail;'''),
]

kernel("bmm_forward", "linear", "a, b", '''
Batched product: a (B|1, M, K) @ b (B|1, K, N) -> (B, M, N).
''', ARRAY, BMM_OPERANDS + [
    C("npy_intp shape[3] = {batch, M, N};"),
    Out("out", shape=("3", "shape")),
    Call("bmm_forward", "out, a, b, batch, sa, sb, M, K, N"),
    ("out",)])

kernel("bmm_backward", "linear", "dout, a, b, need_da: bool = True, need_db: bool = True", '''
Gradients of :func:`bmm_forward`: (da like a, db like b); an operand
with batch 1 receives the sum over the batch.
''', "Tuple[Optional[np.ndarray], Optional[np.ndarray]]", BMM_OPERANDS + [
    In("dout", "t", 3, [dim(0, "batch", "the batch size"), dim(1, "M", "a.shape[1]"), dim(2, "N", "b.shape[2]")]),
    Grad("da", like="a", when="need_da"), Grad("db", like="b", when="need_db"),
    Call("bmm_backward", "da, db, dout, a, b, batch, sa, sb, M, K, N"),
    ("da", "db")])

# ------------------------------------------------------------------ fused
# (the Python functions convert act / approximate, so they are hand-written in kernels/fused.py)
ACT = C("int act_id = parse_act(act, fn);\nif (act_id < 0) goto fail;")
SAME_AS_INP = [like("inp", "inp.shape", same_ndim=True)]

kernel("bias_act_forward", "fused", "inp, bias: array? = None, act: str = 'relu'",
       "act(inp + bias) over the last axis.", ARRAY, [
           ACT,
           In("inp", "float", (1, -1)),
           C("npy_intp N = PyArray_DIM(inp, nd - 1), M = ct_prod(inp, 0, nd - 1);"),
           row_vector("bias", "N", "inp.shape[-1]"),
           Out("out", like="inp"),
           Call("bias_act_forward", "out, inp, bias, act_id, M, N"),
           ("out",)], python=False)

kernel("bias_act_backward", "fused",
       "dout, inp, bias: array? = None, act: str = 'relu', dinp: array? = None, dbias: array? = None",
       "Gradients of bias_act_forward; given arrays are accumulated into.",
       "Tuple[np.ndarray, Optional[np.ndarray]]", [
           ACT,
           In("inp", "float", (1, -1)),
           C("npy_intp N = PyArray_DIM(inp, nd - 1), M = ct_prod(inp, 0, nd - 1);"),
           row_vector("bias", "N", "inp.shape[-1]"),
           In("dout", "t", (1, -1), SAME_AS_INP),
           Grad("dinp", like="inp", arg="dinp"),
           Grad("dbias", like="bias", when="bias != NULL", arg="dbias"),
           Call("bias_act_backward", "dinp, dbias, dout, inp, bias, act_id, M, N"),
           ("dinp", "dbias")], python=False)

kernel("add_layernorm_forward", "fused",
       "inp, residual, weight: array? = None, bias: array? = None, eps: float = 1e-5",
       "LayerNorm(inp + residual) over the last axis -> (out, mean, rstd).",
       "Tuple[np.ndarray, np.ndarray, np.ndarray]", [
           C('if (ct_check_eps(eps, fn, ">= 0 and finite")) goto fail;'),
           In("inp", "float", (1, -1)),
           C("npy_intp N = PyArray_DIM(inp, nd - 1), M = ct_prod(inp, 0, nd - 1);"),
           In("residual", "t", (1, -1), SAME_AS_INP),
           row_vector("weight", "N", "inp.shape[-1]"), row_vector("bias", "N", "inp.shape[-1]"),
           Out("out", like="inp"),
           Out("mean", shape=("nd - 1", "PyArray_DIMS(inp)")), Out("rstd", shape=("nd - 1", "PyArray_DIMS(inp)")),
           Call("add_layernorm_forward", "out, mean, rstd, inp, residual, weight, bias, eps, M, N"),
           ("out", "mean", "rstd")], python=False)

kernel("add_layernorm_backward", "fused",
       "dout, inp, residual, weight: array?, mean, rstd, with_bias: bool = True, dinp: array? = None, "
       "dweight: array? = None, dbias: array? = None",
       "Gradients of add_layernorm_forward -> (dinp, dweight, dbias); given arrays are accumulated into.",
       "Tuple[np.ndarray, Optional[np.ndarray], Optional[np.ndarray]]", [
           In("inp", "float", (1, -1)),
           C("npy_intp N = PyArray_DIM(inp, nd - 1), M = ct_prod(inp, 0, nd - 1);"),
           In("residual", "t", (1, -1), SAME_AS_INP),
           In("dout", "t", (1, -1), SAME_AS_INP),
           row_vector("weight", "N", "inp.shape[-1]"),
           In("mean", "t"), In("rstd", "t"),
           C('''if (PyArray_SIZE(mean) != M || PyArray_SIZE(rstd) != M) {
               PyErr_Format(PyExc_ValueError, "%s: mean and rstd must have %zd elements (inp.shape[:-1]), "
                            "got %zd and %zd", fn, (Py_ssize_t)M, (Py_ssize_t)PyArray_SIZE(mean),
                            (Py_ssize_t)PyArray_SIZE(rstd));
               goto fail;
           }
           npy_intp nshape[1] = {N};'''),
           Grad("dinp", like="inp", arg="dinp"),
           Grad("dweight", shape=("1", "nshape"), when="weight != NULL", arg="dweight"),
           Grad("dbias", shape=("1", "nshape"), when="with_bias", arg="dbias"),
           Call("add_layernorm_backward", "dinp, dweight, dbias, dout, inp, residual, weight, mean, rstd, M, N"),
           ("dinp", "dweight", "dbias")], python=False)

kernel("ff_backward", "fused",
       "dout, x, h, keep: array?, p: float, w1, b1: array?, w2, with_bias2: bool = True, act: str = 'relu', "
       "need_dx: bool = True",
       "Gradients of the feed-forward block -> (dx, dw1, db1, dw2, db2), fresh arrays.",
       "Tuple[Optional[np.ndarray], np.ndarray, Optional[np.ndarray], np.ndarray, Optional[np.ndarray]]", [
           ACT,
           C('if (ct_check_probability(p, fn, "p")) goto fail;'),
           In("x", "float", (1, -1)),
           C("npy_intp D = PyArray_DIM(x, nd - 1), M = ct_prod(x, 0, nd - 1);"),
           In("dout", "t", (1, -1), [like("x", "x.shape", same_ndim=True)]),
           In("h", "t", "nd", [like("x", "x.shape", ndim="nd - 1")]),
           C("npy_intp F = PyArray_DIM(h, nd - 1), dshape[1] = {D};"),
           In("keep", "bool", (1, -1), [like("h", "h.shape", same_ndim=True)], none_ok=True),
           In("w1", "t", 2, [dim(0, "F", "h.shape[-1]"), dim(1, "D", "x.shape[-1]")]),
           In("b1", "t", 1, [dim(0, "F", "h.shape[-1]")], none_ok=True),
           In("w2", "t", 2, [dim(0, "D", "x.shape[-1]"), dim(1, "F", "h.shape[-1]")]),
           Grad("dx", like="x", when="need_dx"), Grad("dw1", like="w1"), Grad("db1", like="b1", when="b1 != NULL"),
           Grad("dw2", like="w2"), Grad("db2", shape=("1", "dshape"), when="with_bias2"),
           Call("ff_backward", "dx, dw1, db1, dw2, db2, dout, x, h, keep, p, w1, b1, w2, act_id, M, D, F",
                alloc=True),
           ("dx", "dw1", "db1", "dw2", "db2")], python=False)

# ------------------------------------------------------------------ decode
ROW_INTS = "object[Union[int, np.ndarray]]"


def float_type(arg):
    """t from the dtype of `arg` (float32 / float64), checked before the arrays."""
    return C(f'int t;\nif (ct_float_type(o_{arg}, fn, "{arg}", &t)) goto fail;')


def same_dims(cache, axes, names):
    """@.shape[axis] == cache.shape[cache_axis] for (axis, cache_axis) in axes."""
    return [dim(ax, f"PyArray_DIM({cache}, {cax})", f"{cache}.shape[{cax}], {name}")
            for (ax, cax), name in zip(axes, names)]


def step_dims(cache):
    """A step input (B, H, D) against its cache (B, H, Tmax, D)."""
    return same_dims(cache, [(0, 0), (1, 1), (2, 3)], ["the rows", "the heads", "the head dim"])


def cache_dims(cache):
    """A second cache (B, H, Tmax, D') against the first."""
    return same_dims(cache, [(0, 0), (1, 1), (2, 2)], ["the rows", "the heads", "Tmax"])


def row_ints(arg, high, range_):
    """Per-row integers (B) in [0, high]: an int or a 1-D array (row_ints in bind_decode.c)."""
    return C(f'PyArrayObject *{arg} = row_ints(&held, o_{arg}, fn, "{arg}", B, 0, (long long){high}, "{range_}");\n'
             f"if ({arg} == NULL) goto fail;", arrays=[arg])


kernel("kv_cache_append", "decode", "cache_k, cache_v, k_t, v_t, pos: " + ROW_INTS, '''
Write k_t (B, H, Dh) into cache_k[:, :, pos] and v_t (B, H, Dv) into
cache_v[:, :, pos], in place.  pos: an int, or (B,) ints (one slot per
row), each in [0, Tmax).
''', "None", [
    float_type("cache_k"),
    InPlace("cache_k", checks=['check_cache(@, fn, "@")', "distinct_caches(@, o_cache_v, fn)"]),
    # any other overlap is refused by ct_inplace
    InPlace("cache_v", checks=['check_cache(@, fn, "@")'] + cache_dims("cache_k")),
    In("k_t", "t", 3, step_dims("cache_k")),
    In("v_t", "t", 3, step_dims("cache_v")),
    C("npy_intp B = PyArray_DIM(cache_k, 0), H = PyArray_DIM(cache_k, 1), Tmax = PyArray_DIM(cache_k, 2);"),
    row_ints("pos", "Tmax - 1", "a slot of the cache, < Tmax"),
    Call("kv_cache_append", "cache_k, cache_v, k_t, v_t, pos, B, H, Tmax, PyArray_DIM(cache_k, 3), "
         "PyArray_DIM(cache_v, 3)"),
    "ct_none()"])

kernel("attend_step", "decode", "q_t, cache_k, cache_v, lengths: " + ROW_INTS
       + ", key_padding_mask: array? = None, scale: object[Optional[float]] = None", '''
Attention of one query per (row, head) over the cache.

q_t (B, H, Dh), cache_k (B, H, Tmax, Dh), cache_v (B, H, Tmax, Dv);
lengths: int or (B,) ints in [0, Tmax], row b sees slots < lengths[b];
key_padding_mask (B, Tmax) bool, True = hidden, or None; scale defaults
to 1/sqrt(Dh) -> out (B, H, Dv) = softmax(scale q k^T) v.
''', ARRAY, [
    float_type("q_t"),
    In("cache_k", "t", 4),
    In("q_t", "t", 3, step_dims("cache_k")),
    In("cache_v", "t", 4, cache_dims("cache_k")),
    C('''npy_intp B = PyArray_DIM(cache_k, 0), H = PyArray_DIM(cache_k, 1), Tmax = PyArray_DIM(cache_k, 2);
    npy_intp Dh = PyArray_DIM(cache_k, 3), Dv = PyArray_DIM(cache_v, 3);'''),
    row_ints("lengths", "Tmax", "0 to Tmax keys"),
    In("key_padding_mask", "bool", 2, [dim(0, "B", "cache_k.shape[0], the rows"), dim(1, "Tmax", "cache_k.shape[2], Tmax")],
       none_ok=True),
    C("double scale;\nif (ct_parse_scale(o_scale, Dh, fn, &scale)) goto fail;"),
    Out("out", shape=("3", "((npy_intp[3]){B, H, Dv})")),
    Call("attend_step", "out, q_t, cache_k, cache_v, lengths, key_padding_mask, scale, B, H, Tmax, Dh, Dv",
         alloc=True),
    ("out",)])

kernel("cache_reorder", "decode", "cache, rows, length: object[Optional[int]] = None", '''
Gather cache rows: cache (B_in, H, Tmax, D), rows (B_out,) ints in
[0, B_in) -> new (B_out, H, Tmax, D) with out[i] = cache[rows[i]] for the
first ``length`` slots (all by default) and zeros after.  B_out may
differ from B_in (e.g. expanding a batch to batch x beams).
''', ARRAY, [
    In("cache", "float", 4),
    C('''npy_intp B_in = PyArray_DIM(cache, 0), H = PyArray_DIM(cache, 1), Tmax = PyArray_DIM(cache, 2);
    npy_intp D = PyArray_DIM(cache, 3), length = Tmax;'''),
    In("rows", "ids", 1, ['ct_check_ids(@, fn, "rows", 0, B_in, 0, 0)']),
    C('''if (o_length != NULL && o_length != Py_None) {
        long long v;
        if (ct_int_arg(o_length, fn, "length", 0, (long long)Tmax, "cache.shape[2]", PyExc_ValueError, &v))
            goto fail;
        length = (npy_intp)v;
    }
    npy_intp shape[4] = {PyArray_DIM(rows, 0), H, Tmax, D};
    PyArrayObject *out = length < Tmax ? ct_zeros(&held, t, 4, shape) : ct_empty(&held, t, 4, shape);
    if (out == NULL) goto fail;''', arrays=["out"]),
    Call("cache_reorder", "out, cache, rows, shape[0], H, Tmax, D, length"),
    ("out",)])

kernel("decode_linear", "decode", "x, w, bias: array? = None", '''
``x @ w.T + bias`` for the few rows of one decoding step: x (..., K),
w (N, K), bias (N) or None -> (..., N).  One row goes through GEMV
(streaming the weights at about twice the bandwidth of a one-row GEMM);
more rows through the GEMM, exactly as :func:`linear_forward`.
''', ARRAY, [
    In("x", "float", (1, -1)),
    C("npy_intp K = PyArray_DIM(x, nd - 1), M = ct_prod(x, 0, nd - 1);"),
    In("w", "t", 2, [dim(1, "K", "x.shape[-1]")]),
    C("npy_intp N = PyArray_DIM(w, 0);"),
    row_vector("bias", "N", "w.shape[0]"),
    C('''npy_intp shape[NPY_MAXDIMS];
    for (int ax = 0; ax < nd - 1; ax++) shape[ax] = PyArray_DIM(x, ax);
    shape[nd - 1] = N;'''),
    Out("out", shape=("nd", "shape")),
    Call("decode_linear", "out, x, w, bias, M, K, N"),
    ("out",)])

# ------------------------------------------------------------------ optim
# Parameters and state are updated in place (InPlace: C-contiguous, writeable);
# the gradient is only read (a view is copied).


def at_least(*names):
    """ValueError unless every float argument is >= 0 (check_range in bind_optim.c)."""
    return " ||\n    ".join(f'check_range({n}, fn, "{n}", 0, 0, 0, 0)' for n in names)


def param_and_grad():
    return [InPlace("param", "float"), In("grad", "t", "nd", [like("param", "param's shape")])]

kernel("sgd_step", "optim",
       "param, grad, momentum_buffer: array?, lr: float, momentum: float = 0.0, dampening: float = 0.0, "
       "nesterov: bool = False, weight_decay: float = 0.0, maximize: bool = False, first_step: bool = False", '''
One step of torch.optim.SGD on one parameter, in place.

param, grad, momentum_buffer: same shape and dtype (buffer may be None
when momentum == 0).  ``first_step`` initialises the buffer to the
(decayed) gradient without dampening, as torch does when the buffer
does not exist yet.
''', "None", [
    C(f"if ({at_least('lr', 'momentum', 'weight_decay')} ||\n"
      "    check_nesterov(nesterov, momentum, dampening, fn))\n    goto fail;"),
    *param_and_grad(),
    InPlace("momentum_buffer", like="param", optional="momentum == 0"),
    Call("sgd_step", "param, grad, momentum_buffer, PyArray_SIZE(param), lr, momentum, dampening, nesterov, "
         "weight_decay, maximize, first_step"),
    "ct_none()"])

kernel("adam_step", "optim",
       "param, grad, exp_avg, exp_avg_sq, step: int, lr: float = 1e-3, beta1: float = 0.9, beta2: float = 0.999, "
       "eps: float = 1e-8, weight_decay: float = 0.0, decoupled_weight_decay: bool = False, amsgrad: bool = False, "
       "max_exp_avg_sq: array? = None, maximize: bool = False", '''
One step of torch.optim.Adam (AdamW with ``decoupled_weight_decay``), in place.

param, grad, exp_avg, exp_avg_sq (and max_exp_avg_sq, required when
``amsgrad``): same shape and dtype; state starts at zeros.  ``step`` is
the number of this step, from 1 (bias correction 1 - beta**step).
''', "None", [
    C('if (ct_check_positive(step, fn, "step", 0) || check_range(lr, fn, "lr", 0, 0, 0, 0) ||\n'
      '    check_range(beta1, fn, "beta1", 0, 0, 1, 1) || check_range(beta2, fn, "beta2", 0, 0, 1, 1) ||\n'
      f"    {at_least('eps', 'weight_decay')})\n    goto fail;"),
    *param_and_grad(),
    InPlace("exp_avg", like="param"),
    InPlace("exp_avg_sq", like="param"),
    InPlace("max_exp_avg_sq", like="param", when="amsgrad"),
    Call("adam_step", "param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, PyArray_SIZE(param), (int64_t)step, lr, "
         "beta1, beta2, eps, weight_decay, decoupled_weight_decay, maximize"),
    "ct_none()"])

# (the Python functions convert their floats first: hand-written in kernels/optim.py)
kernel("grad_norm", "optim", "grads: object, norm_type: float = 2.0",
       "p-norm of all gradients seen as one vector.", "float", python=False)
kernel("clip_grad_norm", "optim", "grads: object, max_norm: float, norm_type: float = 2.0",
       "Scale every gradient in place by min(max_norm / (total_norm + 1e-6), 1); returns total_norm.",
       "float", python=False)

# ------------------------------------------------------------------ recurrent
# The Python stacks (rnn_stack_*) are hand-written in kernels/recurrent.py.
# Whole-sequence kernels (x (T, B, I)) and one-step cells (x (B, I): the same
# C kernel with T = 1); G = the gate count of the mode (1, 1, 4, 3).
STATE = 'ct_check_shape(@, fn, "@", 2, (npy_intp[2]){B, H}, "(batch, hidden)")'


def lstm_only(arg, why=""):
    """ValueError when a cell-state argument is given for a mode without one."""
    return C(f'if (lstm_only(o_{arg}, mode, fn, "{arg}", "{why}")) goto fail;')


def rnn_inputs(cell, biases=True, state=None):
    """mode, x, w_ih (G*H, I), w_hh (G*H, H), b_ih, b_hh (G*H) or None, the
    initial state (`state`: the names of h0 and c0) and, for sequences, lengths."""
    steps = [C("int mode = parse_mode(o_mode, fn);\nif (mode < 0) goto fail;"),
             In("x", "float", 2 if cell else 3), In("w_ih", "t", 2), In("w_hh", "t", 2),
             C('''
                 npy_intp H = PyArray_DIM(w_hh, 1), GH = ct_rnn_gate_count(mode) * H;
                 if (check_gates(w_hh, GH, mode, fn) || ct_check_dim(w_ih, fn, "w_ih", 0, GH, "w_hh.shape[0]") ||
                     ct_check_dim(x, fn, "x", -1, PyArray_DIM(w_ih, 1), "w_ih.shape[1], the input size"))
                     goto fail;''')]
    if biases:
        steps += [In("b_ih", "t", 1, [dim(0, "GH", "w_ih.shape[0]")], none_ok=True),
                  In("b_hh", "t", 1, [dim(0, "GH", "w_hh.shape[0]")], none_ok=True)]
    steps.append(C(f"npy_intp B = PyArray_DIM(x, {0 if cell else 1}), T = {1 if cell else 'PyArray_DIM(x, 0)'};"))
    if state:
        h0, c0 = state
        steps += [In("h0", "t", -1, [STATE], none_ok=True, arg=h0), lstm_only(c0, " (only lstm has a cell state)"),
                  In("c0", "t", -1, [STATE], none_ok=True, arg=c0)]
    shape = "ct_rnn_shape s = {.mode = mode, .T = T, .B = B, .In = PyArray_DIM(w_ih, 1), .H = H"
    if cell:
        return steps + [C(shape + "};")]
    return steps + [In("lengths", "ids", 1, [dim(0, "B", "x.shape[1], the batch size"), "check_lengths(@, T, fn)"],
                       none_ok=True),
                    C(shape + ", .reverse = reverse,\n"
                      "                  .lengths = lengths ? (const int64_t *)PyArray_DATA(lengths) : NULL};")]


def rnn_forward_body(cell):
    """(out, [h_n,] c_n or None, saved)."""
    return [*rnn_inputs(cell, state=("h", "c") if cell else ("h0", "c0")),
            C("npy_intp state_shape[2] = {B, H}, saved_size[1] = {ct_rnn_saved_size(mode, T, B, H)};"),
            Out("out", shape=("2", "state_shape") if cell else ("3", "((npy_intp[3]){T, B, H})")),
            *([] if cell else [Out("h_n", shape=("2", "state_shape"))]),
            Out("c_n", shape=("2", "state_shape"), when="mode == CT_LSTM"),
            Out("saved", shape=("1", "saved_size")),
            Call("rnn_forward", f"out, {'NULL' if cell else 'h_n'}, c_n, saved, x, h0, c0, w_ih, w_hh, b_ih, b_hh, &s",
                 alloc=True),
            ("out", "c_n", "saved") if cell else ("out", "h_n", "c_n", "saved")]


def rnn_backward_body(cell):
    """(dx or None, dh0, dc0 or None, dw_ih, dw_hh, db_ih or None, db_hh or None), all fresh."""
    dh, dc = ("dh_new", "dc_new") if cell else ("dh_n", "dc_n")
    steps = rnn_inputs(cell, biases=cell, state=("h", "c") if cell else None)
    if not cell:
        steps.append(In("dout", "t", 3, [dim(0, "T", "x.shape[0]"), dim(1, "B", "x.shape[1]"),
                                          dim(2, "H", "w_hh.shape[1]")], none_ok=True))
    with_bias = "b_ih != NULL" if cell else "with_bias"
    with_bias_hh = "b_hh != NULL" if cell else "with_bias"
    return steps + [
        In("dh_n", "t", -1, [STATE], none_ok=True, arg=dh), lstm_only(dc),
        In("dc_n", "t", -1, [STATE], none_ok=True, arg=dc),
        In("saved", "t", 1, [dim(0, "ct_rnn_saved_size(mode, T, B, H)", "the size rnn_forward returns for these shapes")]),
        C("npy_intp state_shape[2] = {B, H}, gates[1] = {GH};"),
        Grad("dx", like="x", when="need_dx"), Grad("dh0", shape=("2", "state_shape")),
        Grad("dc0", shape=("2", "state_shape"), when="mode == CT_LSTM"),
        Grad("dw_ih", like="w_ih"), Grad("dw_hh", like="w_hh"),
        Grad("db_ih", shape=("1", "gates"), when=with_bias), Grad("db_hh", shape=("1", "gates"), when=with_bias_hh),
        Call("rnn_backward", "dx, dh0, dc0, dw_ih, dw_hh, db_ih, db_hh, " + ("NULL" if cell else "dout")
             + ", dh_n, dc_n, x, w_ih, w_hh, saved, &s", alloc=True),
        ("dx", "dh0", "dc0", "dw_ih", "dw_hh", "db_ih", "db_hh")]

kernel("rnn_forward", "recurrent",
       "x, h0: array?, w_ih, w_hh, b_ih: array?, b_hh: array?, mode: object[str], c0: array? = None, "
       "lengths: array? = None, reverse: bool = False", '''
One recurrent layer in one direction over a whole sequence.

x (T, B, I) time-major; h0, c0 (B, H) or None (zeros; c0 for lstm only);
lengths (B) integers in [1, T] or None: steps t >= lengths[b] are padding
(output 0, state unchanged, no gradient), as ``pad_packed_sequence``
gives; reverse: each sequence runs from its own last real step back to 0.

Returns (out (T, B, H), h_n (B, H), c_n (B, H) or None, saved), h_n / c_n
the state after each sequence's last real step and ``saved`` a 1-D
buffer for :func:`rnn_backward`.
''', "Tuple[np.ndarray, np.ndarray, Optional[np.ndarray], np.ndarray]", rnn_forward_body(cell=False))

kernel("rnn_backward", "recurrent",
       "dout: array?, dh_n: array?, dc_n: array?, x, w_ih, w_hh, saved, mode: object[str], "
       "lengths: array? = None, reverse: bool = False, need_dx: bool = True, with_bias: bool = True", '''
Gradients of :func:`rnn_forward` (backward through time in C).

dout (T, B, H), dh_n, dc_n (B, H): gradients of the outputs, None = zero.
x, w_ih, w_hh, mode, lengths, reverse as given to :func:`rnn_forward`,
saved as it returned (the initial state and the biases are not needed).
Returns (dx (T, B, I) or None when not need_dx, dh0 (B, H), dc0 (B, H)
or None (not lstm), dw_ih, dw_hh, db_ih, db_hh (G*H) - both None when
not with_bias).
''', "Tuple[Optional[np.ndarray], np.ndarray, Optional[np.ndarray], np.ndarray, np.ndarray, "
     "Optional[np.ndarray], Optional[np.ndarray]]", rnn_backward_body(cell=False))

kernel("rnn_cell_forward", "recurrent",
       "x, h: array?, w_ih, w_hh, b_ih: array?, b_hh: array?, mode: object[str], c: array? = None", '''
One step, as ``torch.nn.RNNCell`` / ``LSTMCell`` / ``GRUCell``.

x (B, I), h, c (B, H) or None (zeros; c for lstm only)
-> (h' (B, H), c' (B, H) or None, saved for :func:`rnn_cell_backward`).
''', "Tuple[np.ndarray, Optional[np.ndarray], np.ndarray]", rnn_forward_body(cell=True))

kernel("rnn_cell_backward", "recurrent",
       "dh_new: array?, dc_new: array?, x, h: array?, c: array?, w_ih, w_hh, b_ih: array?, b_hh: array?, saved, "
       "mode: object[str], need_dx: bool = True", '''
Gradients of :func:`rnn_cell_forward`.

dh_new, dc_new (B, H) or None -> (dx (B, I) or None, dh (B, H),
dc (B, H) or None, dw_ih, dw_hh, db_ih or None, db_hh or None).
''', "Tuple[Optional[np.ndarray], np.ndarray, Optional[np.ndarray], np.ndarray, np.ndarray, "
     "Optional[np.ndarray], Optional[np.ndarray]]", rnn_backward_body(cell=True))

# ------------------------------------------------------------------ attention
# (mha_* keep hand-written bodies in bind_attention.c: weight structs, packed layouts)
# The Python functions convert options and wrap results (kernels/attention.py).
MASK = "mask: object[Optional[np.ndarray]] = None, is_causal: bool = False"
DROPOUT = "dropout_p: float = 0.0, seed: uint64 = 0"
MHA_WEIGHTS = ("query, key, value, q_weight, k_weight, v_weight, q_bias: array?, k_bias: array?, v_bias: array?, "
               "out_weight, out_bias: array?, num_heads: int")
MHA_GRADS = ", ".join(f"d{name}: array? = None" for name in (
    "query", "key", "value", "q_weight", "k_weight", "v_weight", "q_bias", "k_bias", "v_bias", "out_weight",
    "out_bias"))
PACKED = ("query, kv: array?, in_proj_weight, in_proj_bias: array?, out_weight, out_bias: array?, num_heads: int, "
          "self_attn: bool, seq_first: bool")

def sdpa_inputs():
    """q (B, H, Tq, Dh), k (B, H, Tk, Dh), v (B, H, Tk, Dv), then the mask and the options."""
    batch, heads = dim(0, "B", "q.shape[0], the batch"), dim(1, "H", "q.shape[1], the heads")
    return [
        In("q", "float", 4),
        C("npy_intp B = PyArray_DIM(q, 0), H = PyArray_DIM(q, 1), Tq = PyArray_DIM(q, 2), Dh = PyArray_DIM(q, 3);"),
        In("k", "t", 4, [batch, heads, dim(3, "Dh", "q.shape[3], the head dim")]),
        C("npy_intp Tk = PyArray_DIM(k, 2);"),
        In("v", "t", 4, [batch, heads, dim(2, "Tk", "k.shape[2], the keys")]),
        C('''
            npy_intp Dv = PyArray_DIM(v, 3), oshape[4] = {B, H, Tq, Dv}, pshape[4] = {B, H, Tq, Tk};
            ct_attn_opts opts;
            if (parse_mask(&held, o_mask, fn, t, pshape, "q", &opts.mask) ||
                parse_opts(o_scale, is_causal, dropout_p, seed, Dh, fn, &opts))
                goto fail;''')]


def sdpa_saved(name, shape, whats):
    """A saved array of exactly `shape` (4 C dims), each axis named by whats."""
    return In(name, "t", 4, [dim(ax, f"{shape}[{ax}]", what) for ax, what in enumerate(whats)])


kernel("sdpa_forward", "attention", f"q, k, v, {MASK}, scale: object[Optional[float]] = None, {DROPOUT}",
       "Scaled dot-product attention -> (out, probs).", "Tuple[np.ndarray, np.ndarray]", [
           *sdpa_inputs(),
           Out("out", shape=("4", "oshape")), Out("probs", shape=("4", "pshape")),
           Call("sdpa_forward", "out, probs, q, k, v, &opts, B, H, Tq, Tk, Dh, Dv"),
           ("out", "probs")], python=False)
kernel("sdpa_backward", "attention",
       f"dout, q, k, v, probs, {MASK}, scale: object[Optional[float]] = None, {DROPOUT}, "
       "dq: array? = None, dk: array? = None, dv: array? = None",
       "Gradients of sdpa_forward -> (dq, dk, dv); given arrays are accumulated into.",
       "Tuple[np.ndarray, np.ndarray, np.ndarray]", [
           *sdpa_inputs(),
           sdpa_saved("dout", "oshape", ["q.shape[0]", "q.shape[1]", "q.shape[2]", "v.shape[3]"]),
           sdpa_saved("probs", "pshape", ["q.shape[0]", "q.shape[1]", "q.shape[2]", "k.shape[2]"]),
           Grad("dq", like="q", arg="dq"), Grad("dk", like="k", arg="dk"), Grad("dv", like="v", arg="dv"),
           Call("sdpa_backward", "dq, dk, dv, dout, q, k, v, probs, &opts, B, H, Tq, Tk, Dh, Dv", alloc=True),
           ("dq", "dk", "dv")], python=False)
def saved(name, nd, shape):
    """An array mha_forward / mha_packed_forward returned: dtype t, exactly `shape`."""
    return In(name, "t", nd, [f'ct_check_dims(@, fn, "@", {nd}, {shape}, "its shape in mha_forward", 0)'])


def objects(names):
    """The argument objects as a C array literal (for parse_mha / parse_packed)."""
    return f"(PyObject *const[{len(names)}]){{{', '.join('o_' + n for n in names)}}}"


MHA_ARRAYS = ["query", "key", "value", "q_weight", "k_weight", "v_weight", "q_bias", "k_bias", "v_bias",
              "out_weight", "out_bias"]
MHA_FIELDS = ["query", "key", "value", "wq", "wk", "wv", "bq", "bk", "bv", "wo", "bo"]
MHA_INPUTS = C(f'''
    mha_args a;
    if (parse_mha(&held, fn, {objects(MHA_ARRAYS)}, num_heads, o_mask, is_causal, dropout_p, seed, &a))
        goto fail;
    int t = a.t;
    npy_intp Dh = a.E / a.H, out_shape[3] = {{a.B, a.Tq, a.E}}, qh_shape[4] = {{a.B, a.H, a.Tq, Dh}};
    npy_intp kh_shape[4] = {{a.B, a.H, a.Tk, Dh}}, p_shape[4] = {{a.B, a.H, a.Tq, a.Tk}};''')

kernel("mha_forward", "attention", f"{MHA_WEIGHTS}, {MASK}, {DROPOUT}",
       "Multi-head attention -> (out, q, k, v, probs, context).", "tuple", [
           MHA_INPUTS,
           Out("out", shape=("3", "out_shape")), Out("ctx", shape=("3", "out_shape")),
           Out("qh", shape=("4", "qh_shape")), Out("kh", shape=("4", "kh_shape")),
           Out("vh", shape=("4", "kh_shape")), Out("probs", shape=("4", "p_shape")),
           Call("mha_forward_call", "&a, out, qh, kh, vh, probs, ctx", alloc=True),
           ("out", "qh", "kh", "vh", "probs", "ctx")], python=False)
kernel("mha_backward", "attention", f"dout, {MHA_WEIGHTS}, q, k, v, probs, context, {MASK}, {DROPOUT}, {MHA_GRADS}",
       "Gradients of mha_forward -> 11 gradients; given arrays are accumulated into.", "tuple", [
           MHA_INPUTS,
           saved("dout", 3, "out_shape"), saved("q", 4, "qh_shape"), saved("k", 4, "kh_shape"),
           saved("v", 4, "kh_shape"), saved("probs", 4, "p_shape"), saved("context", 3, "out_shape"),
           # gradients shaped like the inputs; bias gradients only for the biases given
           *[Grad("d" + name, like="a." + field, arg="d" + name, when=f"a.{field} != NULL" if "bias" in name else None)
             for name, field in zip(MHA_ARRAYS, MHA_FIELDS)],
           Call("mha_backward_call", f"&a, (PyArrayObject *const[11]){{{', '.join('d' + n for n in MHA_ARRAYS)}}}, "
                "dout, q, k, v, probs, context", alloc=True),
           tuple("d" + name for name in MHA_ARRAYS)], python=False)

PACKED_INPUTS = C(f'''
    packed_args a;
    if (parse_packed(&held, fn, {objects(["query", "kv", "in_proj_weight", "in_proj_bias", "out_weight", "out_bias"])},
                     num_heads, self_attn, seq_first, o_mask, is_causal, dropout_p, seed, &a))
        goto fail;
    int t = a.t;
    ct_mha_shape *s = &a.shape;
    npy_intp out_shape[3], pq_shape[3], pkv_shape[3], p_shape[4] = {{s->B, s->H, s->Tq, s->Tk}};
    packed_rows_shape(&a, s->Tq, s->E, out_shape);
    packed_rows_shape(&a, s->Tq, self_attn ? 3 * s->E : s->E, pq_shape);
    packed_rows_shape(&a, s->Tk, 2 * s->E, pkv_shape);''')

kernel("mha_packed_forward", "attention", f"{PACKED}, {MASK}, {DROPOUT}",
       "Multi-head attention with a packed in_proj_weight -> (out, proj_q, proj_kv, probs, context).",
       "tuple", [
           PACKED_INPUTS,
           Out("out", shape=("3", "out_shape")), Out("ctx", shape=("3", "out_shape")),
           Out("pq", shape=("3", "pq_shape")), Out("probs", shape=("4", "p_shape")),
           Out("pkv", shape=("3", "pkv_shape"), when="!self_attn"),
           Call("mha_packed_forward", "out, pq, pkv, probs, ctx, CT_DATA(a.query), CT_DATA(a.kv), CT_DATA(a.w_in), "
                "CT_DATA(a.b_in), CT_DATA(a.wo), CT_DATA(a.bo), &a.opts, s", alloc=True),
           ("out", "pq", "pkv", "probs", "ctx")], python=False)
kernel("mha_packed_backward", "attention",
       f"dout, {PACKED}, proj_q, proj_kv: array?, probs, context, {MASK}, {DROPOUT}, need_dquery: bool = True, "
       "need_dkv: bool = True",
       "Gradients of mha_packed_forward -> (dquery, dkv, din_proj_weight, din_proj_bias, dout_weight, dout_bias).",
       "tuple", [
           PACKED_INPUTS,
           saved("dout", 3, "out_shape"), saved("proj_q", 3, "pq_shape"),
           C('''
               PyArrayObject *proj_kv = NULL;
               if (!self_attn && !(proj_kv = saved_arg(&held, o_proj_kv, fn, "proj_kv", t, 3, pkv_shape))) goto fail;''',
             arrays=["proj_kv"]),
           saved("probs", 4, "p_shape"), saved("context", 3, "out_shape"),
           # fresh gradients (the kernel writes them)
           Grad("dquery", like="a.query", when="need_dquery"), Grad("dkv", like="a.kv", when="need_dkv && !self_attn"),
           Grad("din_proj_weight", like="a.w_in"), Grad("din_proj_bias", like="a.b_in", when="a.b_in != NULL"),
           Grad("dout_weight", like="a.wo"), Grad("dout_bias", like="a.bo", when="a.bo != NULL"),
           Call("mha_packed_backward", "dquery, dkv, din_proj_weight, din_proj_bias, dout_weight, dout_bias, dout, "
                "CT_DATA(a.query), CT_DATA(a.kv), CT_DATA(a.w_in), CT_DATA(a.wo), proj_q, proj_kv, probs, context, "
                "&a.opts, s", alloc=True),
           ("dquery", "dkv", "din_proj_weight", "din_proj_bias", "dout_weight", "dout_bias")], python=False)
kernel("positional_encoding", "attention", "max_len: int, d_model: int, double: bool = False",
       "Sinusoidal positional-encoding table (max_len, d_model).", ARRAY, [
           C('''if (ct_check_positive(max_len, fn, "max_len", 1) || ct_check_positive(d_model, fn, "d_model", 1))
    goto fail;
int t = double_ ? NPY_FLOAT64 : NPY_FLOAT32;
npy_intp shape[2] = {(npy_intp)max_len, (npy_intp)d_model};'''),
           Out("pe", shape=("2", "shape")),
           Call("positional_encoding", "pe, shape[0], shape[1]"),
           ("pe",)], python=False)
