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
import dataclasses

from generate_bindings import C, Call, Grad, In, InPlace, Kernel, Out, dim, like  # noqa: F401

ARRAY = "np.ndarray"
OPT = "Optional[np.ndarray]"

KERNELS = []


def kernel(*args, **kwargs):
    KERNELS.append(Kernel(*args, **kwargs))


def rows(x):
    """N = prod(x.shape[:-1]), D = x.shape[-1] (x is at least 1-D)."""
    return C(f"npy_intp N = ct_prod({x}, 0, nd - 1), D = PyArray_DIM({x}, nd - 1);")


def accumulators(*grads: Grad) -> list:
    """The steps of gradients a caller may pass in (each Grad with its `arg`):
    ``int given``, whether any gradient that is computed (its `when`) was
    passed, derived from the Grads themselves, then the Grads.  The kernel
    takes `given` as its accumulate flag: given arrays are added to, the ones
    not passed start from zeros; with none passed the fresh buffers are left
    uninitialised and the kernel writes them (no zeroing pass)."""
    terms = [f"(({g.when}) && o_{g.arg} != Py_None)" if g.when else f"o_{g.arg} != Py_None" for g in grads]
    return [C("int given = " + " ||\n    ".join(terms) + ";")] + [dataclasses.replace(g, zero_fill="given") for g in grads]


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
``ct_random_kept(seed, offset + i)`` (csrc/ct.h: u >= p, u from a 32-bit hash): a pure function of
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
    *accumulators(Grad("dinp", like="dout", arg="dinp")),
    Call("dropout_backward", "dinp, dout, mask, PyArray_SIZE(dout), p, given"),
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
    *accumulators(Grad("dlogits", like="a.logits", arg="dlogits")),
    Call("cross_entropy_backward", "dlogits, dloss, CT_DATA(a.logits), CT_DATA(a.targets), lse, "
         "CT_DATA(a.weight), a.N, a.C, (int64_t)ignore_index, label_smoothing, a.reduction, given"),
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
    Call("layernorm_backward", "dinp, dweight, dbias, dout, x, weight, mean, rstd, N, D", alloc=True),
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
as C-contiguous arrays are accumulated into (``+=``) and returned.  Rows of
dout that are all zero (a loss's ignored targets) are left out of the
products when the saved rows and the weight are finite: the same result.
''', "Tuple[Optional[np.ndarray], np.ndarray, Optional[np.ndarray]]", [
    In("inp", "float", (1, -1)),
    In("weight", "t", 2, [dim(1, "PyArray_DIM(inp, nd - 1)", "inp.shape[-1]")]),
    C("npy_intp K = PyArray_DIM(weight, 1), N = PyArray_DIM(weight, 0), M = ct_prod(inp, 0, nd - 1);"),
    In("dout", "t", "nd", [like("inp", "inp's leading dims", ndim="nd - 1"), dim(-1, "N", "weight.shape[0]")]),
    C("npy_intp nshape[1] = {N};"),
    *accumulators(Grad("dinp", like="inp", when="need_dinp", arg="dinp"), Grad("dweight", like="weight", arg="dweight"),
                  Grad("dbias", shape=("1", "nshape"), when="with_bias", arg="dbias")),
    Call("rows_linear_backward", "dinp, dweight, dbias, dout, inp, weight, M, K, N, given", alloc=True),
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
ACT = C("int act_id = ct_parse_act(act, fn);\nif (act_id < 0) goto fail;")
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

kernel("bias_act_dropout_forward", "fused", "inp, p: float, seed: uint64, bias: array? = None, "
       "act: str = 'relu'",
       "dropout(act(inp + bias), p) over the last axis, and its mask.", "Tuple[np.ndarray, np.ndarray]", [
           ACT,
           C('if (ct_check_probability(p, fn, "p")) goto fail;'),
           In("inp", "float", (1, -1)),
           C("npy_intp N = PyArray_DIM(inp, nd - 1), M = ct_prod(inp, 0, nd - 1);"),
           row_vector("bias", "N", "inp.shape[-1]"),
           Out("out", like="inp"), Out("keep", like="inp", dtype="bool"),
           Call("bias_act_dropout_forward", "out, keep, inp, bias, act_id, M, N, p, seed"),
           ("out", "keep")], python=False)

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

# add_layernorm_forward's and dropout_add_layernorm_forward's inputs and outputs
ADD_LN_FORWARD = [
    In("inp", "float", (1, -1)),
    C("npy_intp N = PyArray_DIM(inp, nd - 1), M = ct_prod(inp, 0, nd - 1);"),
    In("residual", "t", (1, -1), SAME_AS_INP),
    row_vector("weight", "N", "inp.shape[-1]"), row_vector("bias", "N", "inp.shape[-1]"),
    Out("out", like="inp"),
    Out("mean", shape=("nd - 1", "PyArray_DIMS(inp)")), Out("rstd", shape=("nd - 1", "PyArray_DIMS(inp)"))]

# the backwards' saved mean and rstd (one per row of inp), and nshape (N) for dweight / dbias
MEAN_RSTD = [
    In("mean", "t"), In("rstd", "t"),
    C('''if (PyArray_SIZE(mean) != M || PyArray_SIZE(rstd) != M) {
    PyErr_Format(PyExc_ValueError, "%s: mean and rstd must have %zd elements (inp.shape[:-1]), "
                 "got %zd and %zd", fn, (Py_ssize_t)M, (Py_ssize_t)PyArray_SIZE(mean),
                 (Py_ssize_t)PyArray_SIZE(rstd));
    goto fail;
}
npy_intp nshape[1] = {N};''')]

kernel("add_layernorm_forward", "fused",
       "inp, residual, weight: array? = None, bias: array? = None, eps: float = 1e-5",
       "LayerNorm(inp + residual) over the last axis -> (out, mean, rstd).",
       "Tuple[np.ndarray, np.ndarray, np.ndarray]", [
           C('if (ct_check_eps(eps, fn, ">= 0 and finite")) goto fail;'),
           *ADD_LN_FORWARD,
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
           *MEAN_RSTD,
           Grad("dinp", like="inp", arg="dinp"),
           Grad("dweight", shape=("1", "nshape"), when="weight != NULL", arg="dweight"),
           Grad("dbias", shape=("1", "nshape"), when="with_bias", arg="dbias"),
           Call("add_layernorm_backward", "dinp, dweight, dbias, dout, inp, residual, weight, mean, rstd, M, N",
                alloc=True),
           ("dinp", "dweight", "dbias")], python=False)

kernel("dropout_add_layernorm_forward", "fused",
       "inp, residual, p: float, seed: uint64, weight: array? = None, bias: array? = None, eps: float = 1e-5",
       "LayerNorm(dropout(inp, p) + residual) over the last axis -> (out, mean, rstd, keep).",
       "Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]", [
           C('if (ct_check_probability(p, fn, "p") || ct_check_eps(eps, fn, ">= 0 and finite")) goto fail;'),
           *ADD_LN_FORWARD,
           Out("keep", like="inp", dtype="bool"),
           Call("dropout_add_layernorm_forward",
                "out, mean, rstd, keep, inp, residual, weight, bias, eps, p, seed, M, N", alloc=True),
           ("out", "mean", "rstd", "keep")], python=False)

kernel("dropout_add_layernorm_backward", "fused",
       "dout, inp, keep, p: float, residual, weight: array?, mean, rstd, with_bias: bool = True, "
       "dinp: array? = None, dresidual: array? = None, dweight: array? = None, dbias: array? = None",
       "Gradients of dropout_add_layernorm_forward -> (dinp, dresidual, dweight, dbias); given arrays are "
       "accumulated into.",
       "Tuple[np.ndarray, np.ndarray, Optional[np.ndarray], Optional[np.ndarray]]", [
           C('if (ct_check_probability(p, fn, "p")) goto fail;'),
           In("inp", "float", (1, -1)),
           C("npy_intp N = PyArray_DIM(inp, nd - 1), M = ct_prod(inp, 0, nd - 1);"),
           In("residual", "t", (1, -1), SAME_AS_INP),
           In("dout", "t", (1, -1), SAME_AS_INP),
           In("keep", "bool", "nd", [like("inp", "inp's shape")]),
           row_vector("weight", "N", "inp.shape[-1]"),
           *MEAN_RSTD,
           *accumulators(Grad("dinp", like="inp", arg="dinp"), Grad("dresidual", like="inp", arg="dresidual"),
                         Grad("dweight", shape=("1", "nshape"), when="weight != NULL", arg="dweight"),
                         Grad("dbias", shape=("1", "nshape"), when="with_bias", arg="dbias")),
           Call("dropout_add_layernorm_backward",
                "dinp, dresidual, dweight, dbias, dout, inp, keep, p, residual, weight, mean, rstd, M, N, given",
                alloc=True),
           ("dinp", "dresidual", "dweight", "dbias")], python=False)

kernel("ff_backward", "fused",
       "dout, x, h, keep: array?, p: float, w1, b1: array?, w2, with_bias2: bool = True, act: str = 'relu', "
       "need_dx: bool = True, dx: array? = None, dw1: array? = None, db1: array? = None, dw2: array? = None, "
       "db2: array? = None",
       "Gradients of the feed-forward block -> (dx, dw1, db1, dw2, db2): the arrays given, accumulated into, "
       "else fresh ones.",
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
           *accumulators(Grad("dx", like="x", when="need_dx", arg="dx"), Grad("dw1", like="w1", arg="dw1"),
                         Grad("db1", like="b1", when="b1 != NULL", arg="db1"), Grad("dw2", like="w2", arg="dw2"),
                         Grad("db2", shape=("1", "dshape"), when="with_bias2", arg="db2")),
           Call("ff_backward", "dx, dw1, db1, dw2, db2, dout, x, h, keep, p, w1, b1, w2, act_id, M, D, F, given",
                alloc=True),
           ("dx", "dw1", "db1", "dw2", "db2")], python=False)


# The sequence families are in kernel_table_decode.py (decode) and
# kernel_table_seq.py (optim, recurrent, attention), loaded after this file in
# that order (generate_bindings.load_table).
