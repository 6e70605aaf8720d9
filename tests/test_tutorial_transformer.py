"""Three classic tutorials' hand-written Transformers, pasted into
tests/tutorial_transformer_sources.py (indentation restored, comments
translated or shortened, code unchanged except where noted), run twice:
with torch, and with ``import ctransformer as torch; import
ctransformer.nn as nn; import ctransformer.nn.functional as F``.  From the same weights (torch's, copied by
state_dict) they must give torch's outputs and every parameter gradient
(rtol 2e-4, atol 2e-5, float32), in eval mode (dropout off).

* CLASSIC, the classic tutorial's Transformer: MHABlock, LayerNorm (std + eps,
  the tutorial's own), PositionalEncoding, FFNBlock, EncoderBlock, Encoder,
  DecoderBlock, Decoder, Transformer.
* LYNN_EVANS, Lynn-Evans' tutorial: Embedder ... Transformer with copy.deepcopy
  clones.  Edits: ``.cuda()`` dropped (CPU only; torch's CPU build raises too)
  and ``Variable(x, requires_grad=False)`` written as ``x`` (Variable is the
  identity since torch 0.4); its loops read a global ``N``, given here.  The
  test sets FeedForward's default width d_ff (2048) to 64 in both libraries,
  as it picks d_model 16 and N 2, to keep its golden fixture small.
* LAYERS, the layer-by-layer tutorial: PositionalEncoding (NumPy table),
  ScaledDotProductAttention, MultiHeadAttention, PositionwiseFeedForward,
  EncoderLayer, DecoderLayer.

torch's run of each test is one ``torch_side(torch)`` function returning the
initial weights, outputs and gradients: live when torch is installed,
otherwise its golden fixture (tests/golden/test_tutorial_transformer.npz, see
tests/golden.py).
"""
import copy
import math

import numpy as np
import pytest

import ctransformer
import ctransformer.nn
import ctransformer.nn.functional
from golden import packed, unpack
from tutorial_transformer_sources import CLASSIC, LAYERS, LYNN_EVANS

TOL = dict(rtol=2e-4, atol=2e-5)

def load(source, name, torch, **extra):
    """exec a pasted tutorial with torch / nn / F bound to the given library."""
    ns = {"torch": torch, "nn": torch.nn, "F": torch.nn.functional, "math": math, "np": np, "copy": copy, **extra}
    exec(compile(source, f"<the {name} tutorial>", "exec"), ns)
    return ns


def randomise(torch, tm, seed):
    """Non-trivial norms and biases (the tutorials start them at 1 / 0)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in tm.parameters():
            if p.dim() == 1:
                p.add_(torch.randn(p.shape, generator=g) * 0.2)


def layout(state_dict):
    """A state_dict's keys with their shapes, in order."""
    return [f"{k} {tuple(v.shape)}" for k, v in state_dict.items()]


def torch_state(torch, tm):
    sd = tm.state_dict()
    return dict(layout=layout(sd), values=packed(torch, sd.values()))


def state_from(ref, cm):
    """torch's initial state_dict (from torch_state) as a dict of arrays, by our keys
    (which must be torch's, in torch's order, with the same shapes)."""
    sd = cm.state_dict()
    assert layout(sd) == [str(k) for k in ref["layout"]]
    return dict(zip(sd, unpack(ref["values"], [v.shape for v in sd.values()])))


def same_weights(cm, state):
    cm.load_state_dict({k: ctransformer.from_numpy(v.copy()) for k, v in state.items()})


def torch_check(torch, tm, t_args, select=lambda out: out):
    """torch's half of check: the output, and every parameter gradient of sum(out * w)."""
    tm.eval()
    t_out = select(tm(*t_args))
    w = np.random.default_rng(3).standard_normal(tuple(t_out.shape)).astype(np.float32)
    (t_out * torch.from_numpy(w)).sum().backward()
    named = list(tm.named_parameters())
    return dict(out=t_out, names=[n for n, _ in named], has_grad=[p.grad is not None for _, p in named],
                grads=packed(torch, [p.grad for _, p in named if p.grad is not None]))


def check(cm, ref, c_args, select=lambda out: out):
    """Our output and every parameter gradient of sum(out * w) against torch_check's."""
    cm.eval()
    c_out = select(cm(*c_args))
    np.testing.assert_allclose(c_out._data, ref["out"], err_msg="output", **TOL)
    w = np.random.default_rng(3).standard_normal(tuple(ref["out"].shape)).astype(np.float32)
    (c_out * ctransformer.from_numpy(w)).sum().backward()
    ours = dict(cm.named_parameters())
    names = [str(n) for n, has in zip(ref["names"], ref["has_grad"]) if has]
    t_grads = dict(zip(names, unpack(ref["grads"], [ours[n].shape for n in names])))
    for n, has in zip(ref["names"], ref["has_grad"]):
        n = str(n)
        assert (ours[n].grad is None) == (not has), n
        if has:
            np.testing.assert_allclose(ours[n].grad._data, t_grads[n], err_msg=f"gradient of {n}", **TOL)
    assert set(ours) == {str(n) for n in ref["names"]}


def keep_masks(lib, src, tgt, pad=0):
    """The tutorials' masks: True / 1 = keep."""
    src_mask = lib.tensor(src != pad).unsqueeze(1).unsqueeze(1)  # (B, 1, 1, S)
    T = tgt.shape[1]
    sub = np.tril(np.ones((T, T), bool))
    tgt_mask = lib.tensor((tgt != pad)[:, None, None, :] & sub)  # (B, 1, T, T)
    return src_mask, tgt_mask


SRC = np.array([[3, 4, 5, 6, 2], [7, 8, 2, 0, 0]])
TGT = np.array([[1, 5, 6, 7], [1, 9, 0, 0]])


def test_classic_tutorial_transformer(torch_ref):
    kw = dict(src_vocab_size=11, tgt_vocab_size=10, d_model=16, nhead=2, num_encoder_layers=2,
              num_decoder_layers=2, dim_feedforward=32, dropout=0.1, src_seq_len=12, tgt_seq_len=12)

    def torch_side(torch):
        tm = load(CLASSIC, "classic", torch)["Transformer"](**kw)
        randomise(torch, tm, 1)
        state = torch_state(torch, tm)
        t_args = (torch.tensor(SRC), torch.tensor(TGT), *keep_masks(torch, SRC, TGT))
        return dict(state=state, **torch_check(torch, tm, t_args))

    ref = torch_ref(torch_side, inputs=dict(src=SRC, tgt=TGT))
    cm = load(CLASSIC, "classic", ctransformer)["Transformer"](**kw)
    state = state_from(ref["state"], cm)
    # our positional table, before the state_dict (which holds torch's) is loaded
    np.testing.assert_allclose(cm.input_pe.pe._data, state["input_pe.pe"], **TOL)
    same_weights(cm, state)
    c_args = (ctransformer.tensor(SRC), ctransformer.tensor(TGT), *keep_masks(ctransformer, SRC, TGT))
    check(cm, ref, c_args)


def lynn_evans(torch, N):
    ns = load(LYNN_EVANS, "Lynn-Evans", torch, N=N)
    ns["FeedForward"].__init__.__defaults__ = (64, 0.1)  # d_ff 2048 -> 64 (see the module docstring)
    return ns


def test_lynn_evans_tutorial_transformer(torch_ref):
    N = 2
    # Lynn-Evans masks: src (B, 1, S) and trg (B, T, T), unsqueezed over heads in attention()
    T_len = TGT.shape[1]
    trg = (TGT != 0)[:, None, :] & np.tril(np.ones((T_len, T_len), bool))

    def torch_side(torch):
        tm = lynn_evans(torch, N)["Transformer"](11, 10, 16, N, 2)
        for p in tm.parameters():
            if p.dim() > 1:
                torch.nn.init.xavier_uniform_(p)
        randomise(torch, tm, 2)
        state = torch_state(torch, tm)
        src_mask, _ = keep_masks(torch, SRC, TGT)
        t_args = (torch.tensor(SRC), torch.tensor(TGT), src_mask[:, 0], torch.tensor(trg))
        return dict(state=state, **torch_check(torch, tm, t_args))

    ref = torch_ref(torch_side, inputs=dict(src=SRC, tgt=TGT))
    cm = lynn_evans(ctransformer, N)["Transformer"](11, 10, 16, N, 2)
    assert cm.encoder.layers[0].attn.q_linear.weight is not cm.encoder.layers[1].attn.q_linear.weight
    assert tuple(cm.encoder.layers[0].ff.linear_1.weight.shape) == (64, 16)
    state = state_from(ref["state"], cm)
    # the tutorial's PE (exponent applied twice) is reproduced as written, by both libraries
    np.testing.assert_allclose(cm.encoder.pe.pe._data, state["encoder.pe.pe"], **TOL)
    same_weights(cm, state)
    c_src_mask, _ = keep_masks(ctransformer, SRC, TGT)
    c_args = (ctransformer.tensor(SRC), ctransformer.tensor(TGT), c_src_mask[:, 0], ctransformer.tensor(trg))
    check(cm, ref, c_args)


@pytest.mark.parametrize("layer", ["EncoderLayer", "DecoderLayer"])
def test_layers_tutorial(layer, torch_ref):
    d_model, d_inner, n_head, d_k, d_v = 16, 32, 2, 8, 6
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 5, d_model)).astype(np.float32)
    mem = rng.standard_normal((2, 6, d_model)).astype(np.float32)
    causal = np.tril(np.ones((5, 5), bool))  # this tutorial's masks: (T, T), unsqueezed over heads
    cross = np.ones((5, 6), bool)
    cross[:, -1] = False

    def args(lib, xs):
        if layer == "EncoderLayer":
            return xs, lib.tensor(causal)
        return xs, lib.tensor(mem), lib.tensor(causal), lib.tensor(cross)

    def torch_side(torch):
        T = load(LAYERS, "layers", torch)
        tm = T[layer](d_model, d_inner, n_head, d_k, d_v)
        randomise(torch, tm, 3)
        state = torch_state(torch, tm)
        xt = T["PositionalEncoding"](d_model, 20)(torch.tensor(x))
        t_args = args(torch, xt)
        result = torch_check(torch, tm, t_args, select=lambda out: out[0])
        return dict(state=state, x=xt, attention=list(tm(*t_args)[1:]), **result)

    ref = torch_ref(torch_side, inputs=dict(x=x, mem=mem))
    C = load(LAYERS, "layers", ctransformer)
    cm = C[layer](d_model, d_inner, n_head, d_k, d_v)
    same_weights(cm, state_from(ref["state"], cm))
    xc = C["PositionalEncoding"](d_model, 20)(ctransformer.tensor(x))
    np.testing.assert_allclose(xc._data, ref["x"], **TOL)
    c_args = args(ctransformer, xc)
    check(cm, ref, c_args, select=lambda out: out[0])
    # the attention weights returned by the tutorial's modules agree too
    cm_out = cm(*c_args)
    assert len(cm_out[1:]) == len(ref["attention"])
    for a, b in zip(cm_out[1:], ref["attention"]):
        np.testing.assert_allclose(a._data, b, **TOL)
