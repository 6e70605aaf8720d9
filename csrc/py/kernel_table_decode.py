"""The specification table, continued: the decode family (kernel_table.py
explains the entries and steps; kernel_table_seq.py, loaded next, adds the
optim, recurrent and attention families)."""
from generate_bindings import C, Call, Grad, In, InPlace, Out, dim, like  # noqa: F401
from binding_kernel_table import ARRAY, OPT, accumulators, kernel, row_vector, rows  # noqa: F401  (kernel_table.py)


# ------------------------------------------------------------------ decode
ROW_INTS = "object[Union[int, np.ndarray]]"


ACT_ID = C("int act_id = ct_parse_act(act, fn);\nif (act_id < 0) goto fail;")


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

kernel("cache_permute", "decode", "cache, rows, length: int", '''
cache_reorder in place, for as many rows as the cache has (beam search's
re-ranking): cache (B, H, Tmax, D), rows (B,) ints in [0, B); afterwards
cache[i, :, :length] holds what cache[rows[i], :, :length] held before, for
every i (0 <= length <= Tmax).  Only rows with rows[i] != i are written.
''', "None", [
    InPlace("cache", "float", checks=['check_cache(@, fn, "@")']),
    C('''npy_intp B = PyArray_DIM(cache, 0), H = PyArray_DIM(cache, 1), Tmax = PyArray_DIM(cache, 2);
    npy_intp D = PyArray_DIM(cache, 3);'''),
    In("rows", "ids", 1, [dim(0, "B", "cache.shape[0]"), 'ct_check_ids(@, fn, "rows", 0, B, 0, 0)']),
    C('''if (length < 0 || length > Tmax) {
        PyErr_Format(PyExc_ValueError, "%s: length must be in [0, %zd] (cache.shape[2]), got %lld", fn,
                     (Py_ssize_t)Tmax, length);
        goto fail;
    }'''),
    Call("cache_permute", "cache, rows, B, H, Tmax, D, length", alloc=True),
    ("None",)])

kernel("beam_step", "decode", "logits, scores, done, pad_id: int", '''
One re-ranking of batched beam search: B sources with k beams each.
logits (B * k, V) float32 or float64, the beams' next-token logits;
scores (B, k) float64, each beam's summed log-probability (-inf: no such
beam yet); done (B * k,) bool, True for a finished beam; pad_id in [0, V).
Candidate c = i * V + v of source b (beam r = b * k + i, token v) is worth
scores[b, i] + logp[r, v], logp = log_softmax of the logits in float64
(:func:`log_softmax_forward` of them as float64), except that a finished
beam has one continuation, pad_id at no cost (0; -inf for the other
tokens).  Returns (new_scores (B, k) float64, origin (B * k,) int64,
tok (B * k,) int64) for each source's k best candidates, best first as a
stable argsort of -value (ties: lower c first; NaN last):
new_scores[b, j] = its value, origin[b * k + j] = b * k + c // V the beam
it continues, tok[b * k + j] = c % V its token.
''', "Tuple[np.ndarray, np.ndarray, np.ndarray]", [
    In("logits", "float", 2),
    C("npy_intp V = PyArray_DIM(logits, 1);"),
    In("scores", "f64", 2),
    C('''npy_intp B = PyArray_DIM(scores, 0), k = PyArray_DIM(scores, 1);
    if (k < 1 || V < 1) {
        PyErr_Format(PyExc_ValueError, "%s: need k >= 1 beams (scores.shape[1]) and V >= 1 tokens "
                     "(logits.shape[1]), got k %zd, V %zd", fn, (Py_ssize_t)k, (Py_ssize_t)V);
        goto fail;
    }
    if (ct_check_dim(logits, fn, "logits", 0, B * k, "scores.shape[0] * scores.shape[1], the beams")) goto fail;
    if (pad_id < 0 || pad_id >= V) {
        PyErr_Format(PyExc_ValueError, "%s: pad_id must be in [0, %zd) (logits.shape[1]), got %lld", fn,
                     (Py_ssize_t)V, pad_id);
        goto fail;
    }'''),
    In("done", "bool", 1, [dim(0, "B * k", "scores.shape[0] * scores.shape[1], the beams")]),
    Out("new_scores", like="scores", dtype="f64"),
    Out("origin", shape=("1", "((npy_intp[1]){B * k})"), dtype="i64"),
    Out("tok", shape=("1", "((npy_intp[1]){B * k})"), dtype="i64"),
    Call("beam_step", "new_scores, origin, tok, logits, scores, done, B, k, V, pad_id", alloc=True),
    ("new_scores", "origin", "tok")])

kernel("decode_linear", "decode", "x, w, bias: array? = None", '''
``x @ w.T + bias`` for the few rows of one decoding step: x (..., K),
w (N, K), bias (N) or None -> (..., N).  Up to 8 rows (a sentence, or its
beams) read the weights once, as dot products that give each row the same
bits whatever the rows beside it; more rows go through the GEMM, exactly
as :func:`linear_forward`.
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

LAYER_WEIGHTS = ("w_qkv, b_qkv: array?, w_o, b_o: array?, w1, b1: array?, w2, b2: array?, "
                 "norm1_weight: array?, norm1_bias: array?, norm2_weight: array?, norm2_bias: array?, "
                 "norm3_weight: array? = None, norm3_bias: array? = None")
CROSS = ("w_cq: array? = None, b_cq: array? = None, w_co: array? = None, b_co: array? = None, "
         "mem_k: array? = None, mem_v: array? = None, mem_pad: array? = None")
LAYER_OPTIONS = "act: str = 'relu', norm_first: bool = False, eps: float = 1e-5"
LAYER_DOC = """
Self-attention: w_qkv (3E, E) packed, b_qkv (3E), w_o (E, E), b_o (E).
Cross-attention (w_cq given; else none, an encoder layer used causally):
w_cq, w_co (E, E), b_cq, b_co (E), mem_k, mem_v (B, H, S, Dh) the memory's
keys/values, mem_pad (B, S) bool, True = padded.  Feed-forward: w1 (F, E),
b1 (F), act 'relu' / 'gelu' / 'gelu_tanh', w2 (E, F), b2 (E).  Norm i
(weight and bias (E) or None) follows block i (post-norm: x =
norm(x + block(x))) or precedes it (norm_first: x = x + block(norm(x))),
blocks in the order self-attention, cross-attention, feed-forward.
Biases may be None."""


def layer_checks(rows_from_x):
    """The checks of a layer's caches, weights and memory, and its
    ct_decode_layer L.  rows_from_x: B and E come from x (B, E)
    (decode_layer_step); else from cache_k (B, H, Tmax, Dh), E = H * Dh
    (decode_layer_plan)."""
    e_rows = "x.shape[1]" if rows_from_x else "cache_k.shape[1] * cache_k.shape[3]"
    b_rows = "x.shape[0], the rows" if rows_from_x else "cache_k.shape[0], the rows"

    def square(name):
        """An optional (E, E) projection."""
        return In(name, "t", 2, [dim(0, "E", e_rows), dim(1, "E", e_rows)], none_ok=True)

    cache_k_checks = ['check_cache(@, fn, "@")', "distinct_caches(@, o_cache_v, fn)"]
    if rows_from_x:
        head = [float_type("x"), In("x", "t", 2), C("npy_intp B = PyArray_DIM(x, 0), E = PyArray_DIM(x, 1);"),
                InPlace("cache_k", checks=cache_k_checks + [dim(0, "B", b_rows)])]
        heads = C("""npy_intp H = PyArray_DIM(cache_k, 1), Tmax = PyArray_DIM(cache_k, 2), Dh = PyArray_DIM(cache_k, 3);
    if (H * Dh != E || H == 0) {
        PyErr_Format(PyExc_ValueError, "%s: cache_k.shape[1] * cache_k.shape[3] (heads x head dim) must be "
                     "x.shape[1] = %zd, got %zd x %zd", fn, (Py_ssize_t)E, (Py_ssize_t)H, (Py_ssize_t)Dh);
        goto fail;
    }
    if (pos < 0 || pos >= Tmax) {
        PyErr_Format(PyExc_IndexError, "%s: pos must be in [0, %zd) (a slot of the cache, < Tmax), got %lld",
                     fn, (Py_ssize_t)Tmax, pos);
        goto fail;
    }""")
    else:
        head = [float_type("cache_k"), InPlace("cache_k", checks=cache_k_checks)]
        heads = C("""npy_intp B = PyArray_DIM(cache_k, 0), H = PyArray_DIM(cache_k, 1), Tmax = PyArray_DIM(cache_k, 2);
    npy_intp Dh = PyArray_DIM(cache_k, 3), E = H * Dh;
    if (H == 0 || Dh == 0 || Tmax == 0) {
        PyErr_Format(PyExc_ValueError, "%s: cache_k must have heads, slots and a head dim, got shape (%zd, %zd, %zd, "
                     "%zd)", fn, (Py_ssize_t)B, (Py_ssize_t)H, (Py_ssize_t)Tmax, (Py_ssize_t)Dh);
        goto fail;
    }""")
    return head + [
        InPlace("cache_v", checks=['check_cache(@, fn, "@")', like("cache_k", "cache_k.shape")]),
        heads,
        In("w_qkv", "t", 2, [dim(0, "3 * E", "3 * " + e_rows), dim(1, "E", e_rows)]),
        row_vector("b_qkv", "3 * E", "3 * " + e_rows),
        In("w_o", "t", 2, [dim(0, "E", e_rows), dim(1, "E", e_rows)]),
        row_vector("b_o", "E", e_rows),
        In("w1", "t", 2, [dim(1, "E", e_rows)]),
        C("npy_intp F = PyArray_DIM(w1, 0);"),
        row_vector("b1", "F", "w1.shape[0]"),
        In("w2", "t", 2, [dim(0, "E", e_rows), dim(1, "F", "w1.shape[0]")]),
        row_vector("b2", "E", e_rows),
        *[row_vector(f"norm{i}_{p}", "E", e_rows) for i in (1, 2, 3) for p in ("weight", "bias")],
        square("w_cq"), row_vector("b_cq", "E", e_rows), square("w_co"), row_vector("b_co", "E", e_rows),
        In("mem_k", "t", 4, [dim(0, "B", b_rows), dim(1, "H", "cache_k.shape[1], the heads"),
                             dim(3, "Dh", "cache_k.shape[3], the head dim")], none_ok=True),
        In("mem_v", "t", 4, [like("mem_k", "mem_k.shape")], none_ok=True),
        C("""if ((w_cq != NULL) != (w_co != NULL) || (w_cq != NULL) != (mem_k != NULL) || (mem_k != NULL) != (mem_v != NULL)) {
        PyErr_Format(PyExc_ValueError, "%s: w_cq, w_co, mem_k and mem_v must all be given (cross-attention) "
                     "or all be None, got %s%s%s%s", fn, w_cq ? "w_cq " : "", w_co ? "w_co " : "",
                     mem_k ? "mem_k " : "", mem_v ? "mem_v " : "");
        goto fail;
    }
    npy_intp S = mem_k != NULL ? PyArray_DIM(mem_k, 2) : 0;"""),
        In("mem_pad", "bool", 2, [dim(0, "B", b_rows), dim(1, "S", "mem_k.shape[2], the source length")],
           none_ok=True),
        C("""ct_decode_layer L = {
        CT_DATA(w_qkv), CT_DATA(b_qkv), CT_DATA(w_o), CT_DATA(b_o),
        CT_DATA(w_cq), CT_DATA(b_cq), CT_DATA(w_co), CT_DATA(b_co), CT_DATA(mem_k), CT_DATA(mem_v),
        (const unsigned char *)CT_DATA(mem_pad),
        CT_DATA(w1), CT_DATA(b1), CT_DATA(w2), CT_DATA(b2),
        {CT_DATA(norm1_weight), CT_DATA(norm2_weight), CT_DATA(norm3_weight)},
        {CT_DATA(norm1_bias), CT_DATA(norm2_bias), CT_DATA(norm3_bias)},
        eps, act_id, norm_first, B, E, H, Tmax, S, F};"""),
    ]


kernel("decode_layer_step", "decode", f"x, cache_k, cache_v, pos: int, {LAYER_WEIGHTS}, {CROSS}, {LAYER_OPTIONS}",
       """
One token per row through a whole Transformer layer (eval: no dropout):
x (B, E) at position pos -> out (B, E); the self-attention cache_k and
cache_v (B, H, Tmax, Dh), H * Dh = E, get slot pos written.
""" + LAYER_DOC + """  The same result, bit for bit, as the step calling
decode_linear, kv_cache_append, attend_step, bias_act_forward and the
layer norms one by one.
""", ARRAY, [
    ACT_ID,
    C('if (ct_check_eps(eps, fn, ">= 0 and finite")) goto fail;'),
    *layer_checks(rows_from_x=True),
    Out("out", like="x"),
    Call("decode_layer_step", "out, x, cache_k, cache_v, pos, &L", alloc=True),
    ("out",)])

kernel("decode_layer_plan", "decode", f"cache_k, cache_v, {LAYER_WEIGHTS}, {CROSS}, {LAYER_OPTIONS}", """
A layer of decode_model_step: its cache, weights and options checked once
(as decode_layer_step checks them; B, E = H * Dh from cache_k (B, H, Tmax,
Dh)) and kept, with a reference to every array, in an opaque plan object.
The plan writes into cache_k and cache_v at each step and reads the
weights and memory as they are then: replace an array and the plan still
holds the old one (make a new plan).
""" + LAYER_DOC + "\n", "object", [
    ACT_ID,
    C('if (ct_check_eps(eps, fn, ">= 0 and finite")) goto fail;'),
    *layer_checks(rows_from_x=False),
    "ct_decode_plan_new(&held, &L, t, cache_k, cache_v)"])

MODEL_ARGS = ("emb, scale: float, pe, plans: object[tuple], norm_weight: array?, norm_bias: array?, eps: float, "
              "out_w, out_b: array?, final_norm: bool = True")


def model_checks(row_steps, count, pos_range, last_what):
    """The checks of decode_model_step's model arguments and the ct_decode_model
    `model` they make, for B rows (row_steps define B) fed at `count`
    positions from pos (a C expression; pos_range: C format and arguments that
    name them in the message; last_what names the last one)."""
    return [
        C('if (final_norm && ct_check_eps(eps, fn, ">= 0 and finite")) goto fail;'),
        float_type("emb"),
        In("emb", "t", 2),
        C("npy_intp V = PyArray_DIM(emb, 0), E = PyArray_DIM(emb, 1);"),
        *row_steps,
        In("pe", "t", 2, [dim(1, "E", "emb.shape[1]")]),
        C(f"""if (pos < 0 || pos >= PyArray_DIM(pe, 0) || {count} > PyArray_DIM(pe, 0) - pos) {{
        PyErr_Format(PyExc_IndexError, "%s: {pos_range[0]}", fn, (Py_ssize_t)PyArray_DIM(pe, 0), {pos_range[1]});
        goto fail;
    }}
    long long last_pos = pos + {count} - 1; /* < P: no overflow */"""),
        row_vector("norm_weight", "E", "emb.shape[1]"),
        row_vector("norm_bias", "E", "emb.shape[1]"),
        In("out_w", "t", 2, [dim(1, "E", "emb.shape[1]")]),
        C("npy_intp V_out = PyArray_DIM(out_w, 0);"),
        row_vector("out_b", "V_out", "out_w.shape[0]"),
        C(f"""const ct_decode_layer *layers[CT_DECODE_MAX_LAYERS];
    void *caches[2 * CT_DECODE_MAX_LAYERS];
    int n_layers = ct_decode_plans(o_plans, fn, t, B, E, last_pos, "{last_what}", layers, caches);
    if (n_layers < 0) goto fail;
    ct_decode_model model = {{layers, caches, n_layers, CT_DATA(emb), CT_DATA(pe), CT_DATA(norm_weight),
                             CT_DATA(norm_bias), CT_DATA(out_w), CT_DATA(out_b), scale, eps, final_norm,
                             B, E, V_out}};""")]


MODEL_DOC = """x = emb[ids] * scale + pe[pos] (emb (V, E), pe (P, E), both of the
layers' dtype); each plan of ``plans`` (decode_layer_plan, all for B rows
of E features) runs decode_layer_step on x, writing slot pos of its cache;
then the final LayerNorm when ``final_norm`` (norm_weight, norm_bias (E)
or None, eps) and out_w (V_out, E), out_b (V_out) or None."""

kernel("decode_model_step", "decode", "ids, pos: int, " + MODEL_ARGS, """
One token per row through a whole decoder in one call (eval: no dropout):
ids (B,) in [0, V) at position pos -> logits (B, V_out).

""" + MODEL_DOC + """  The same
bits as those kernels called one by one.
""", ARRAY, [
    *model_checks([In("ids", "ids", 1, ['ct_check_ids(@, fn, "ids", 0, V, 0, 0)']),
                   C("npy_intp B = PyArray_DIM(ids, 0);")],
                  "1", ("pos must be in [0, %zd) (a row of pe), got %lld", "pos"), "pos"),
    Out("logits", shape=("2", "((npy_intp[2]){B, V_out})")),
    Call("decode_model_step", "logits, ids, pos, &model", alloc=True),
    ("logits",)])

kernel("decode_model_greedy", "decode",
       "ys, done, start: int, stop: int, pos: int, eos_id: int, pad_id: int, " + MODEL_ARGS, """
Greedy decoding in one call: decode_model_step of the ids in column n - 1
of ys at position pos + n - start, then column n of ys <- each row's
argmax of the logits (NumPy's: the first maximum, the first NaN if any),
or pad_id for a row that is done; done[b] |= (ys[b, n] == eos_id); for
n = start .. stop - 1, or until every row is done.  Returns the last
column written.

ys (B, L) int64, written in place (1 <= start < stop <= L; column start - 1
holds ids in [0, V)); done (B,) bool, read and updated in place.  An id
picked is fed back, so out_w.shape[0] (V_out) must be <= V and pad_id in
[0, V).  The same tokens and cache writes as the loop over
decode_model_step and NumPy's argmax.

""" + MODEL_DOC + "\n", "int", [
    C("ct_int last = 0;"),
    *model_checks([InPlace("ys", "i64", checks=["ct_check_ndim(@, fn, \"@\", 2, 2)"]),
                   C("""npy_intp B = PyArray_DIM(ys, 0), L = PyArray_DIM(ys, 1);
    if (start < 1 || stop <= start || stop > L) {
        PyErr_Format(PyExc_ValueError, "%s: start and stop must satisfy 1 <= start < stop <= %zd (ys.shape[1]), "
                     "got start %lld, stop %lld", fn, (Py_ssize_t)L, start, stop);
        goto fail;
    }
    if (check_greedy_ids(ys, fn, start - 1, V)) goto fail;"""),
                   InPlace("done", "bool", checks=["ct_check_ndim(@, fn, \"@\", 1, 1)", dim(0, "B", "ys.shape[0]")]),
                   C("""if (pad_id < 0 || pad_id >= V) {
        PyErr_Format(PyExc_ValueError, "%s: pad_id must be in [0, %zd) (a row of emb: it is fed back), got %lld",
                     fn, (Py_ssize_t)V, pad_id);
        goto fail;
    }""")],
                  "(stop - start)",
                  ("positions pos .. pos + stop - start - 1 must be in [0, %zd) (rows of pe), got pos %lld for "
                   "%lld positions", "pos, (stop - start)"), "the last position pos + stop - start - 1"),
    C("""if (V_out > V) {
        PyErr_Format(PyExc_ValueError, "%s: out_w.shape[0] must be <= %zd (emb.shape[0]): a picked id is fed back, "
                     "got %zd", fn, (Py_ssize_t)V, (Py_ssize_t)V_out);
        goto fail;
    }"""),
    Call("decode_model_greedy", "&last, ys, done, L, start, stop, pos, eos_id, pad_id, &model", alloc=True),
    "PyLong_FromSsize_t((Py_ssize_t)last)"])
