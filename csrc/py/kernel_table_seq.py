"""The specification table, continued: the optim, recurrent and attention
families (kernel_table.py explains the entries and steps; the decode family
is in kernel_table_decode.py, loaded before this file)."""
from generate_bindings import C, Call, Grad, In, InPlace, Out, dim, like  # noqa: F401
from binding_kernel_table import ARRAY, OPT, accumulators, kernel, row_vector, rows  # noqa: F401  (kernel_table.py)


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

kernel("rmsprop_step", "optim",
       "param, grad, square_avg, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8, "
       "weight_decay: float = 0.0, momentum: float = 0.0, centered: bool = False, grad_avg: array? = None, "
       "momentum_buffer: array? = None, maximize: bool = False", '''
One step of torch.optim.RMSprop on one parameter, in place.

param, grad, square_avg (and grad_avg, required when ``centered``;
momentum_buffer, required when momentum > 0): same shape and dtype;
state starts at zeros.
''', "None", [
    C(f"if ({at_least('lr', 'alpha', 'eps', 'weight_decay', 'momentum')})\n    goto fail;"),
    *param_and_grad(),
    InPlace("square_avg", like="param"),
    InPlace("grad_avg", like="param", when="centered"),
    InPlace("momentum_buffer", like="param", when="momentum > 0"),
    Call("rmsprop_step", "param, grad, square_avg, grad_avg, momentum_buffer, PyArray_SIZE(param), lr, alpha, eps, "
         "weight_decay, momentum, centered, maximize"),
    "ct_none()"])

# one call for a whole parameter group (torch's fused Adam): the checks and the
# loop over adam_step are custom C in bind_optim.c
kernel("adam_multi_step", "optim",
       "params: object, grads: object, exp_avgs: object, exp_avg_sqs: object, steps: object, lr: float = 1e-3, "
       "beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8, weight_decay: float = 0.0, "
       "decoupled_weight_decay: bool = False, amsgrad: bool = False, max_exp_avg_sqs: object = None, "
       "maximize: bool = False",
       "adam_step on every parameter of a list, in one call; steps[i] is parameter i's step number.",
       "None", python=False)
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
       "need_dkv: bool = True, dquery: array? = None, dkv: array? = None, din_proj_weight: array? = None, "
       "din_proj_bias: array? = None, dout_weight: array? = None, dout_bias: array? = None",
       "Gradients of mha_packed_forward -> (dquery, dkv, din_proj_weight, din_proj_bias, dout_weight, dout_bias): "
       "the arrays given, accumulated into, else fresh ones.",
       "tuple", [
           PACKED_INPUTS,
           saved("dout", 3, "out_shape"), saved("proj_q", 3, "pq_shape"),
           C('''
               PyArrayObject *proj_kv = NULL;
               if (!self_attn && !(proj_kv = saved_arg(&held, o_proj_kv, fn, "proj_kv", t, 3, pkv_shape))) goto fail;''',
             arrays=["proj_kv"]),
           saved("probs", 4, "p_shape"), saved("context", 3, "out_shape"),
           *accumulators(Grad("dquery", like="a.query", when="need_dquery", arg="dquery"),
                         Grad("dkv", like="a.kv", when="need_dkv && !self_attn", arg="dkv"),
                         Grad("din_proj_weight", like="a.w_in", arg="din_proj_weight"),
                         Grad("din_proj_bias", like="a.b_in", when="a.b_in != NULL", arg="din_proj_bias"),
                         Grad("dout_weight", like="a.wo", arg="dout_weight"),
                         Grad("dout_bias", like="a.bo", when="a.bo != NULL", arg="dout_bias")),
           Call("mha_packed_backward", "dquery, dkv, din_proj_weight, din_proj_bias, dout_weight, dout_bias, dout, "
                "CT_DATA(a.query), CT_DATA(a.kv), CT_DATA(a.w_in), CT_DATA(a.wo), proj_q, proj_kv, probs, context, "
                "&a.opts, s, given", alloc=True),
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
