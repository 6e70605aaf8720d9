"""nn.TransformerEncoderLayer / DecoderLayer / Encoder / Decoder / Transformer:
torch parity of outputs and every gradient from the same weights (dropout 0),
state_dict keys, fused ops, masks, bad input.

torch's side of each parity test is one ``torch_side(torch)`` function: live
when torch is installed, otherwise its golden fixture
(tests/golden/test_transformer_layers.npz, see tests/golden.py)."""
import ast
import inspect

import numpy as np
import pytest

import ctransformer as ct
import ctransformer.nn as nn
from tolerances import F32, F64
from golden import packed, unpack

D, H, FF = 8, 2, 16


def tol(dtype):
    return F32 if dtype == np.float32 else F64


def initial_weights(module, dtype, seed=0):
    """Seeded values for every state_dict entry, packed flat in state_dict order, loaded
    into both libraries: matrices uniform in +-1/sqrt(fan_in) (torch's Linear init scale),
    LayerNorm weights 1 + 0.2 N(0, 1) and biases 0.2 N(0, 1), so their gradients are exercised."""
    rng = np.random.default_rng(seed)
    parts = []
    for name, value in module.state_dict().items():
        shape = tuple(value.shape)
        if len(shape) > 1:
            bound = 1 / np.sqrt(shape[1])
            parts.append(rng.uniform(-bound, bound, shape))
        else:
            parts.append(rng.standard_normal(shape) * 0.2 + (1.0 if "norm" in name and "weight" in name else 0.0))
    return np.concatenate([x.reshape(-1) for x in parts]).astype(dtype)


def layout(state_dict):
    """A state_dict's keys with their shapes, in order."""
    return [f"{k} {tuple(v.shape)}" for k, v in state_dict.items()]


def load_flat(module, flat, tensor):
    sd = module.state_dict()
    module.load_state_dict({k: tensor(v.copy()) for k, v in zip(sd, unpack(flat, [v.shape for v in sd.values()]))})


def cotangent(shape, dtype):
    return np.random.default_rng(99).standard_normal(tuple(shape)).astype(dtype)


def compare(torch_ref, make_torch, make_ours, inputs, dtype=np.float32, **kw):
    """torch's module and ours with the same weights (initial_weights; the state_dict
    keys and shapes must be torch's, in torch's order): forward both with the same
    inputs/masks (numpy), compare the output and the gradients of every input and
    parameter.  Returns our module."""
    m = make_ours()
    if dtype == np.float64:
        m = m.double()
    weights = initial_weights(m, dtype)

    def torch_side(torch):
        tm = make_torch(torch)
        if dtype == np.float64:
            tm = tm.double()
        load_flat(tm, weights, torch.tensor)
        tm.train()  # the slow path (torch's eval fast path zeroes padded outputs)
        b = [torch.tensor(x, requires_grad=True) for x in inputs]
        kt = {n: (torch.tensor(v) if isinstance(v, np.ndarray) else v) for n, v in kw.items()}
        ref = tm(*b, **kt)
        (ref * torch.tensor(cotangent(ref.shape, dtype))).sum().backward()
        named = list(tm.named_parameters())
        return dict(layout=layout(tm.state_dict()), out=ref, input_grads=packed(torch, [x.grad for x in b]),
                    param_names=[n for n, _ in named], param_grads=packed(torch, [p.grad for _, p in named]))

    arrays = {f"input{i}": x for i, x in enumerate(inputs)}
    arrays.update({n: v for n, v in kw.items() if isinstance(v, np.ndarray)})
    ref = torch_ref(torch_side, inputs=dict(weights=weights, **arrays))
    assert layout(m.state_dict()) == [str(k) for k in ref["layout"]], "state_dict keys/shapes differ from torch's"
    load_flat(m, weights, ct.tensor)

    a = [ct.tensor(x, requires_grad=True) for x in inputs]
    ko = {n: (ct.tensor(v) if isinstance(v, np.ndarray) else v) for n, v in kw.items()}
    out = m(*a, **ko)
    np.testing.assert_allclose(out._data, ref["out"], err_msg="output", **tol(dtype))
    (out * ct.tensor(cotangent(out.shape, dtype))).sum().backward()
    for i, (x, g) in enumerate(zip(a, unpack(ref["input_grads"], [x.shape for x in inputs]))):
        np.testing.assert_allclose(x.grad._data, g, err_msg=f"gradient of input {i}", **tol(dtype))
    ours_named = dict(m.named_parameters())
    names = [str(n) for n in ref["param_names"]]
    named = dict(zip(names, unpack(ref["param_grads"], [ours_named[n].shape for n in names])))
    for n, p in m.named_parameters():
        assert p.grad is not None, f"no gradient for {n}"
        np.testing.assert_allclose(p.grad._data, named[n], err_msg=f"gradient of {n}", **tol(dtype))
    return m


def x_of(rng, T, N, dtype, batch_first):
    return rng.standard_normal((N, T, D) if batch_first else (T, N, D)).astype(dtype)


LAYER_CONFIGS = [
    dict(norm_first=False, activation="relu"),
    dict(norm_first=True, activation="relu"),
    dict(norm_first=False, activation="gelu"),
    dict(norm_first=True, activation="gelu"),
]


LAYOUTS = [(False, np.float32), (True, np.float32), (True, np.float64)]


@pytest.mark.parametrize("batch_first,dtype", LAYOUTS, ids=["seqfirst-f32", "batchfirst-f32", "batchfirst-f64"])
@pytest.mark.parametrize("cfg", LAYER_CONFIGS, ids=lambda c: f"{c['activation']}-prenorm{c['norm_first']}")
def test_encoder_layer_parity(cfg, batch_first, dtype, torch_ref):
    rng = np.random.default_rng(1)
    kw = dict(dim_feedforward=FF, dropout=0.0, batch_first=batch_first, **cfg)
    kpm = np.zeros((3, 5), bool)
    kpm[1, 3:] = True
    compare(torch_ref, lambda torch: torch.nn.TransformerEncoderLayer(D, H, **kw),
            lambda: nn.TransformerEncoderLayer(D, H, **kw), [x_of(rng, 5, 3, dtype, batch_first)], dtype,
            src_key_padding_mask=kpm)


@pytest.mark.parametrize("batch_first,dtype", LAYOUTS, ids=["seqfirst-f32", "batchfirst-f32", "batchfirst-f64"])
@pytest.mark.parametrize("cfg", LAYER_CONFIGS, ids=lambda c: f"{c['activation']}-prenorm{c['norm_first']}")
def test_decoder_layer_parity(cfg, batch_first, dtype, torch_ref):
    rng = np.random.default_rng(2)
    kw = dict(dim_feedforward=FF, dropout=0.0, batch_first=batch_first, **cfg)
    tgt, mem = x_of(rng, 4, 2, dtype, batch_first), x_of(rng, 6, 2, dtype, batch_first)
    mkpm = np.zeros((2, 6), bool)
    mkpm[0, 4:] = True
    causal = np.triu(np.ones((4, 4), bool), 1)
    compare(torch_ref, lambda torch: torch.nn.TransformerDecoderLayer(D, H, **kw),
            lambda: nn.TransformerDecoderLayer(D, H, **kw), [tgt, mem], dtype, tgt_mask=causal,
            memory_key_padding_mask=mkpm)


@pytest.mark.parametrize("make", [lambda lib: lib.nn.GELU(approximate="tanh"), lambda lib: lib.nn.ReLU(),
                                  lambda lib: lib.tanh])
def test_callable_activations(make, torch_ref):
    """Module activations (fused when relu/gelu) and any other callable (unfused path)."""
    rng = np.random.default_rng(3)
    kw = dict(dim_feedforward=FF, dropout=0.0)
    compare(torch_ref, lambda torch: torch.nn.TransformerEncoderLayer(D, H, activation=make(torch), **kw),
            lambda: nn.TransformerEncoderLayer(D, H, activation=make(ct), **kw), [x_of(rng, 4, 2, np.float32, False)])


def test_layers_without_bias_parity(torch_ref):
    rng = np.random.default_rng(4)
    kw = dict(dim_feedforward=FF, dropout=0.0, bias=False, batch_first=True)
    m = compare(torch_ref, lambda torch: torch.nn.TransformerDecoderLayer(D, H, **kw),
                lambda: nn.TransformerDecoderLayer(D, H, **kw),
                [x_of(rng, 3, 2, np.float32, True), x_of(rng, 4, 2, np.float32, True)])
    assert m.norm1.bias is None and m.linear1.bias is None


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_decoder_stacks_parity(norm_first, torch_ref):
    rng = np.random.default_rng(5)
    kw = dict(dim_feedforward=FF, dropout=0.0, norm_first=norm_first)
    kpm = np.zeros((2, 5), bool)
    kpm[0, -1] = True
    compare(torch_ref, lambda torch: torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(D, H, **kw), 2,
                                                                 torch.nn.LayerNorm(D), enable_nested_tensor=False),
            lambda: nn.TransformerEncoder(nn.TransformerEncoderLayer(D, H, **kw), 2, nn.LayerNorm(D)),
            [x_of(rng, 5, 2, np.float32, False)], src_key_padding_mask=kpm)
    mask = np.triu(np.full((3, 3), -np.inf, np.float32), 1)  # torch's generate_square_subsequent_mask(3)
    compare(torch_ref, lambda torch: torch.nn.TransformerDecoder(torch.nn.TransformerDecoderLayer(D, H, **kw), 2),
            lambda: nn.TransformerDecoder(nn.TransformerDecoderLayer(D, H, **kw), 2),
            [x_of(rng, 3, 2, np.float32, False), x_of(rng, 5, 2, np.float32, False)], tgt_mask=mask,
            tgt_is_causal=True)


def test_stack_layers_are_independent_deep_copies():
    layer = nn.TransformerEncoderLayer(D, H, FF)
    enc = nn.TransformerEncoder(layer, 3)
    ps = [l.linear1.weight for l in enc.layers]
    assert len({id(p) for p in ps}) == 3 and all(p is not layer.linear1.weight for p in ps)
    np.testing.assert_array_equal(ps[0]._data, ps[2]._data)  # copies of one layer start equal
    ps[0].data.fill_(1.0)
    assert not np.all(ps[1]._data == 1.0)
    assert list(enc.state_dict())[:2] == ["layers.0.self_attn.in_proj_weight", "layers.0.self_attn.in_proj_bias"]


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("batch_first,norm_first", [(False, False), (True, True)])
def test_transformer_parity(batch_first, norm_first, torch_ref):
    """(compare also checks that the state_dict keys are torch's, in torch's order)"""
    rng = np.random.default_rng(6)
    kw = dict(d_model=D, nhead=H, num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=FF, dropout=0.0,
              batch_first=batch_first, norm_first=norm_first)
    S, T, N = 5, 4, 2
    src, tgt = x_of(rng, S, N, np.float32, batch_first), x_of(rng, T, N, np.float32, batch_first)
    skpm = np.zeros((N, S), bool)
    skpm[1, 3:] = True
    tkpm = np.zeros((N, T), bool)
    tkpm[0, 3:] = True
    tgt_mask = nn.Transformer.generate_square_subsequent_mask(T)._data
    memory_mask = (rng.standard_normal((T, S)) * 0.5).astype(np.float32)
    compare(torch_ref, lambda torch: torch.nn.Transformer(**kw), lambda: nn.Transformer(**kw), [src, tgt],
            tgt_mask=tgt_mask, memory_mask=memory_mask, src_key_padding_mask=skpm, tgt_key_padding_mask=tkpm,
            memory_key_padding_mask=skpm)


def test_transformer_init_is_xavier():
    ct.manual_seed(0)
    m = nn.Transformer(d_model=16, nhead=4, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=32)
    w = m.encoder.layers[0].linear1.weight._data  # (32, 16): xavier bound sqrt(6 / 48)
    assert np.abs(w).max() <= np.sqrt(6 / 48) and np.abs(w).max() > 0.8 * np.sqrt(6 / 48)
    assert isinstance(m.encoder.norm, nn.LayerNorm) and isinstance(m.decoder.norm, nn.LayerNorm)
    assert m.encoder.layers[0].norm1.eps == 1e-5 and m.encoder.layers[0].dropout.p == 0.1


def _same_default(ours, torch_repr):
    """ours == torch's default, given as its repr (a literal, or e.g. inspect's "no default" marker)."""
    try:
        theirs = ast.literal_eval(torch_repr)
    except (ValueError, SyntaxError):
        return repr(ours) == torch_repr
    return ours == theirs


def test_defaults_match_torch(torch_ref):
    classes = ("Transformer", "TransformerEncoderLayer", "TransformerDecoderLayer", "MultiheadAttention")

    def torch_side(torch):
        sigs = [inspect.signature(getattr(torch.nn, name).__init__).parameters.values() for name in classes]
        return dict(names=[[p.name for p in ps] for ps in sigs], defaults=[[repr(p.default) for p in ps] for ps in sigs],
                    transformer_keys=list(torch.nn.Transformer(d_model=16, nhead=2).state_dict()))

    ref = torch_ref(torch_side)
    for name, torch_names, torch_defaults in zip(classes, ref["names"], ref["defaults"]):
        ours_sig = inspect.signature(getattr(nn, name).__init__).parameters
        assert list(ours_sig) == [str(n) for n in torch_names], name
        for p, default in zip(ours_sig.values(), torch_defaults):
            if p.name != "activation":  # torch's default is F.relu, ours the equivalent "relu"
                assert _same_default(p.default, str(default)), (name, p.name, default)
    m = nn.Transformer(d_model=16, nhead=2)
    assert list(m.state_dict()) == [str(k) for k in ref["transformer_keys"]]
    assert (m.d_model, m.nhead, len(m.encoder.layers), len(m.decoder.layers)) == (16, 2, 6, 6)
    assert m.encoder.layers[0].linear1.weight.shape == (2048, 16)


def test_generate_square_subsequent_mask(torch_ref):
    got = nn.Transformer.generate_square_subsequent_mask(4)
    ref = torch_ref(lambda torch: dict(mask=torch.nn.Transformer.generate_square_subsequent_mask(4)))
    np.testing.assert_array_equal(got._data, ref["mask"])
    assert got.dtype == np.float32
    assert nn.Transformer.generate_square_subsequent_mask(3, dtype=ct.float64).dtype == np.float64


def test_post_norm_uses_the_fused_residual_layernorm():
    layer = nn.TransformerEncoderLayer(D, H, FF, dropout=0.0)
    out = layer(ct.randn(3, 2, D, requires_grad=True))
    assert out.grad_fn.name() == "AddLayerNormBackward0"
    names, stack = set(), [out.grad_fn]
    while stack:
        fn = stack.pop()
        names.add(fn.name())
        stack.extend(f for f, _ in fn.next_functions if f is not None and hasattr(f, "next_functions"))
    assert {"FeedForwardBackward0", "MultiheadAttentionBackward0", "AddLayerNormBackward0"} <= names


def _graph_names(out) -> set:
    names, stack = set(), [out.grad_fn]
    while stack:
        fn = stack.pop()
        names.add(fn.name())
        stack.extend(f for f, _ in fn.next_functions if f is not None and hasattr(f, "next_functions"))
    return names


@pytest.mark.parametrize("kind", ["encoder", "decoder"])
def test_training_dropout_is_fused_into_the_residual_layernorm_with_the_same_bits(kind):
    """In training the sublayers' dropouts run inside the residual's fused
    op (DropoutAddLayerNorm, no Dropout node), with the masks the Dropout
    modules would draw: output and every gradient equal, bit for bit, the
    module path, which a forward hook on a dropout or a norm selects (the
    hooks then run, as in torch).  A subclass overriding a _*_block method
    has it called."""
    rng = np.random.default_rng(3)
    make = nn.TransformerEncoderLayer if kind == "encoder" else nn.TransformerDecoderLayer
    layer = make(D, H, FF, dropout=0.3)
    x = ct.tensor(rng.standard_normal((5, 2, D)).astype(np.float32), requires_grad=True)
    mem = ct.tensor(rng.standard_normal((4, 2, D)).astype(np.float32), requires_grad=True)
    args = (x,) if kind == "encoder" else (x, mem)
    params = list(layer.parameters())

    def run():
        for t in args + tuple(params):
            t.grad = None
        ct.manual_seed(11)
        out = layer(*args)
        (out * ct.tensor(np.linspace(-1, 1, out.numel(), dtype=np.float32).reshape(out.shape))).sum().backward()
        return out, [out._data.copy()] + [t.grad._data.copy() for t in args + tuple(params)]

    out, fused = run()
    names = _graph_names(out)
    assert "DropoutAddLayerNormBackward0" in names and "DropoutBackward0" not in names
    seen = []
    handle = layer.dropout1.register_forward_hook(lambda m, a, o: seen.append(m))
    out, hooked = run()
    assert seen == [layer.dropout1] and "DropoutBackward0" in _graph_names(out)
    handle.remove()
    handle = layer.norm2.register_forward_hook(lambda m, a, o: seen.append(m))
    _, norm_hooked = run()
    assert seen[-1] is layer.norm2
    handle.remove()
    for a, b, c in zip(fused, hooked, norm_hooked):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)

    class Override(make):
        def _ff_block(self, x):
            seen.append("ff")
            return super()._ff_block(x)

    sub = Override(D, H, FF, dropout=0.3)
    sub(*args)
    assert seen[-1] == "ff"
    layer.eval()  # no dropout: the plain fused residual
    assert layer(*args).grad_fn.name() == "AddLayerNormBackward0"


@pytest.mark.parametrize("norm_first", [False, True])
def test_gradcheck_layer_float64(norm_first):
    rng = np.random.default_rng(7)
    layer = nn.TransformerDecoderLayer(4, 2, 6, dropout=0.0, norm_first=norm_first, batch_first=True,
                                       activation="gelu").double()
    tgt = ct.tensor(rng.standard_normal((1, 2, 4)), requires_grad=True)
    mem = ct.tensor(rng.standard_normal((1, 3, 4)), requires_grad=True)
    ps = [layer.linear1.weight, layer.norm2.weight, layer.multihead_attn.in_proj_weight]
    assert ct.autograd.gradcheck(lambda t, m, *p: layer(t, m), (tgt, mem, *ps))


def test_dropout_active_in_train_only():
    layer = nn.TransformerEncoderLayer(D, H, FF, dropout=0.5)
    x = ct.randn(4, 2, D)
    ct.manual_seed(3)
    a = layer(x)
    ct.manual_seed(3)
    b = layer(x)
    c = layer(x)
    np.testing.assert_array_equal(a._data, b._data)
    assert not np.allclose(a._data, c._data)
    layer.eval()
    np.testing.assert_array_equal(layer(x)._data, layer(x)._data)


@pytest.mark.parametrize("kind", ["bool", "-inf"])
def test_fully_padded_source_row_no_nan(kind):
    m = nn.Transformer(D, H, 1, 1, FF, dropout=0.0, batch_first=True)
    src = ct.randn(2, 4, D, requires_grad=True)
    tgt = ct.randn(2, 3, D, requires_grad=True)
    kpm = np.zeros((2, 4), bool)
    kpm[1] = True
    mask = ct.tensor(kpm if kind == "bool" else np.where(kpm, -np.inf, 0).astype(np.float32))
    out = m(src, tgt, src_key_padding_mask=mask, memory_key_padding_mask=mask)
    assert np.isfinite(out._data).all()
    out.sum().backward()
    assert np.isfinite(src.grad._data).all() and np.isfinite(tgt.grad._data).all()
    assert all(np.isfinite(p.grad._data).all() for p in m.parameters())


def test_bad_input():
    with pytest.raises(AssertionError, match=r"MultiheadAttention: embed_dim \(10\) must be divisible by num_heads \(3\)"):
        nn.TransformerEncoderLayer(10, 3)
    with pytest.raises(RuntimeError, match="activation should be relu/gelu, not swish"):
        nn.TransformerEncoderLayer(D, H, activation="swish")
    m = nn.Transformer(D, H, 1, 1, FF)
    with pytest.raises(RuntimeError, match=r"Transformer: the batch number of src and tgt must be equal: src.shape\[1\] = 2, "
                                         r"tgt.shape\[1\] = 3 \(batch_first=False\)"):
        m(ct.randn(5, 2, D), ct.randn(4, 3, D))
    with pytest.raises(RuntimeError, match=r"Transformer: tgt.shape\[-1\] \(the features\) must be d_model = 8, got 6"):
        m(ct.randn(5, 2, D), ct.randn(4, 2, 6))
    with pytest.raises(AssertionError, match=r"Transformer: tgt must be 3-D \(seq, batch, d_model\) \(batch_first=False\) or 2-D unbatched"):
        m(ct.randn(5, D), ct.randn(1, 4, 2, D))
    enc = nn.TransformerEncoderLayer(D, H, FF)
    with pytest.raises(AssertionError, match=r"MultiheadAttention: key_padding_mask must have shape \(batch, source length S\) = \(2, 5\), got \(5, 2\)"):
        enc(ct.randn(5, 2, D), src_key_padding_mask=ct.zeros(5, 2, dtype=ct.bool))
    with pytest.raises(RuntimeError, match=r"MultiheadAttention: the 2-D attn_mask must have shape \(target length L, source length S\) = \(5, 5\), got \(4, 4\)"):
        enc(ct.randn(5, 2, D), src_mask=nn.Transformer.generate_square_subsequent_mask(4))
    dec = nn.TransformerDecoderLayer(D, H, FF, batch_first=True)
    with pytest.raises(RuntimeError, match=r"MultiheadAttention: key.shape\[0\] \(the batch axis, batch_first=True: \(batch, seq, feature\)\) must be 2"):
        dec(ct.randn(2, 3, D), ct.randn(4, 3, D))
