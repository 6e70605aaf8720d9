"""Shape ops, indexing, item assignment, cat/stack/where/gather: torch
parity (values, gradients) and float64 gradchecks."""
import numpy as np
import pytest

import ctransformer as ct
from tensor_check import assert_parity, assert_same, both_libraries, check_gradients

R = np.random.default_rng(11)


@pytest.fixture(autouse=True)
def _fresh_rng():
    """Every test draws from the same seeded stream whatever ran before it
    (-k, -x), so the inputs its golden fixture was recorded with stay the same."""
    global R
    R = np.random.default_rng(11)


def f32(*shape):
    return R.standard_normal(shape).astype(np.float32)


SHAPE_OPS = {
    "view": lambda T, a: a.view(4, 6) * 1.5,
    "view_neg": lambda T, a: a.view(-1, 3),
    "view_tuple": lambda T, a: a.view((2, 12)),
    "view_size": lambda T, a: a.view(T.Size([24])),
    "view_as": lambda T, a: a.view_as(a.reshape(6, 4)),
    "reshape": lambda T, a: a.reshape(3, 8),
    "reshape_fn": lambda T, a: T.reshape(a, (-1,)),
    "flatten": lambda T, a: a.flatten(),
    "flatten_1": lambda T, a: a.flatten(1),
    "flatten_0_1": lambda T, a: T.flatten(a, 0, 1),
    "transpose": lambda T, a: a.transpose(0, 2),
    "transpose_neg": lambda T, a: a.transpose(-2, -1),
    "transpose_view": lambda T, a: a.transpose(1, 2).contiguous().view(2, -1),
    "t": lambda T, a: a[0].t(),
    "T": lambda T, a: a.T if False else a.permute(2, 1, 0),
    "permute": lambda T, a: a.permute(1, 2, 0),
    "permute_tuple": lambda T, a: a.permute((2, 0, 1)),
    "contiguous": lambda T, a: a.contiguous(),
    "unsqueeze": lambda T, a: a.unsqueeze(1),
    "unsqueeze_neg": lambda T, a: a.unsqueeze(-1).unsqueeze(0),
    "squeeze": lambda T, a: a[:, :1].squeeze(),
    "squeeze_dim": lambda T, a: a[:, :1].squeeze(1),
    "squeeze_noop": lambda T, a: a.squeeze(0),
    "expand": lambda T, a: a[:, :1, :].expand(2, 5, 4),
    "expand_neg": lambda T, a: a[:1].expand(3, -1, -1),
    "expand_new": lambda T, a: a[0, 0].expand(2, 3, 4),
    "expand_as": lambda T, a: a[:, :, :1].expand_as(a),
    "repeat": lambda T, a: a.repeat(2, 1, 3),
    "repeat_more": lambda T, a: a[0].repeat(2, 1, 2),
    "chunk": lambda T, a: a.chunk(2, dim=-1),
    "chunk_uneven": lambda T, a: a.chunk(2, 1),
    "split": lambda T, a: a.split(2, dim=1),
    "split_sizes": lambda T, a: T.split(a, [1, 3], dim=2),
    "unbind": lambda T, a: a.unbind(1),
    "flip": lambda T, a: a.flip(0),
    "flip_dims": lambda T, a: a.flip([1, 2]),
    "tril": lambda T, a: a.tril(),
    "tril_diag": lambda T, a: T.tril(a, diagonal=-1),
    "triu": lambda T, a: a.triu(1),
    "triu_fn": lambda T, a: T.triu(a),
    "clone": lambda T, a: a.clone() * 2,
}


@pytest.mark.parametrize("name", list(SHAPE_OPS))
def test_shape_op_parity_and_gradcheck(name):
    x = f32(2, 3, 4)
    assert_parity(SHAPE_OPS[name], x)
    check_gradients(SHAPE_OPS[name], x)


def test_size_and_shape():
    x = ct.zeros(2, 3, 4)
    assert x.size() == (2, 3, 4) and x.shape == ct.Size([2, 3, 4]) and x.size(-1) == 4 and x.size(0) == 2
    assert x.size()[:-1] + (5,) == ct.Size([2, 3, 5])
    assert isinstance(x.size()[1:], ct.Size) and x.shape.numel() == 24
    b, t, d = x.size()
    assert (b, t, d) == (2, 3, 4) and x.dim() == 3 and x.ndim == 3 and x.numel() == 24 and len(x) == 2
    assert ct.Size([2, 3]) == ct.Size((2, 3)) and ct.Size([2, 3]) != ct.Size([3, 2])
    with pytest.raises(IndexError, match="out of range"):
        x.size(3)


def test_view_errors_and_aliasing():
    x = ct.arange(6)
    with pytest.raises(RuntimeError, match=r"shape '\[4, 2\]' is invalid for input of size 6"):
        x.view(4, 2)
    with pytest.raises(RuntimeError, match="invalid"):
        x.reshape(-1, 4)
    v = x.view(2, 3)
    v[0, 0] = 100  # a view shares storage, as in torch
    assert x[0].item() == 100
    with pytest.raises(RuntimeError, match="permutation"):
        ct.zeros(2, 3).permute(0, 0)
    with pytest.raises(RuntimeError, match="t\\(\\) expects"):
        ct.zeros(2, 3, 4).t()
    with pytest.raises(RuntimeError, match="expand"):
        ct.zeros(2, 3).expand(4, 3)
    with pytest.raises(RuntimeError, match="split"):
        ct.zeros(4).split([1, 2])


def test_contiguous_after_transpose():
    x = ct.zeros(2, 3).t()
    assert not x.is_contiguous()
    y = x.contiguous()
    assert y.is_contiguous() and y.shape == (3, 2)
    z = ct.zeros(2, 3)
    assert z.contiguous() is z


# ---------------------------------------------------------------- indexing
INDEX = {
    "int": lambda T, a: a[1],
    "neg": lambda T, a: a[-1],
    "slice_t": lambda T, a: a[:, 2, :],
    "list_last": lambda T, a: a[:, [-1], :],
    "step": lambda T, a: a[:, ::2],
    "ellipsis": lambda T, a: a[..., 1:3],
    "none": lambda T, a: a[:, None, 1],
    "scalar_el": lambda T, a: a[1, 2, 3] * 3,
    "neg_slice": lambda T, a: a[:, -2:, :-1],
    "list_repeat": lambda T, a: a[[0, 1, 0, 0]],
    "two_lists": lambda T, a: a[[0, 1, 1], [2, 0, 2]],
}


@pytest.mark.parametrize("name", list(INDEX))
def test_indexing_parity_and_gradcheck(name):
    x = f32(2, 4, 5)
    assert_parity(INDEX[name], x)
    check_gradients(INDEX[name], x)


def test_index_with_int_tensor_repeats_and_bool_mask():
    x = f32(4, 4)
    idx = np.array([3, 0, 3, 3, 1])
    assert_parity(lambda T, a, i: a[i], x, idx)
    assert_parity(lambda T, a, i: a[:, i[:2]], x, idx)
    check_gradients(lambda T, a, i: a[i], x, idx)
    mask = x > 0
    assert_parity(lambda T, a, m: a[m], x, mask)
    assert_parity(lambda T, a, m: a[m[:, 0]], x, mask)
    check_gradients(lambda T, a, m: a[m] * 2, x, mask)
    assert_parity(lambda T, a: a[T.tensor(2)], x)
    assert_parity(lambda T, a: a.masked_select(a > 0.1), x)


def test_indexing_errors_and_views():
    x = ct.arange(6).view(2, 3)
    with pytest.raises(IndexError):
        x[2]
    with pytest.raises(IndexError, match="long, int, byte or bool"):
        x[ct.tensor([0.0])]
    row = x[1]
    row[0] = -1  # basic indexing is a view
    assert x[1, 0].item() == -1
    el = x[0, 0]
    el += 10  # even a 0-d element is a view
    assert x[0, 0].item() == 10
    it = [r.tolist() for r in x]
    assert it == [[10, 1, 2], [-1, 4, 5]]


def test_item_assignment_decoder_loop():
    # outputs[t] = output in a loop, like a Seq2Seq decoder, then differentiate
    T_, B, V = 4, 2, 3
    w0 = f32(B, V)

    def body(lib):
        w = lib.tensor(w0.copy(), requires_grad=True)
        outputs = lib.zeros(T_, B, V)
        h = w
        for t in range(1, T_):
            h = lib.tanh(h * 1.5 + t)
            outputs[t] = h
        loss = (outputs[1:] * lib.arange(B * V, dtype=lib.float32).view(B, V)).sum()
        loss.backward()
        return dict(outputs=outputs, grad=w.grad, requires_grad=outputs.requires_grad)

    ours, theirs = both_libraries(body, inputs=dict(w0=w0))
    np.testing.assert_allclose(ours["outputs"], theirs["outputs"], rtol=2e-4, atol=2e-5)
    np.testing.assert_allclose(ours["grad"], theirs["grad"], rtol=2e-4, atol=2e-5)
    assert ours["requires_grad"].dtype == bool and ours["requires_grad"] and theirs["requires_grad"]


SETITEM = {
    "row": lambda T, a, v: _set(T, a, (1,), v[0]),
    "slice_col": lambda T, a, v: _set(T, a, (slice(None), 2), v[:, 0]),
    "broadcast": lambda T, a, v: _set(T, a, (slice(0, 2),), v[0, :1]),
    "scalar": lambda T, a, v: _set(T, a, (0, 0), 5.0) * v.sum(),
    "list": lambda T, a, v: _set(T, a, ([0, 2],), v[:2]),
    "mask": lambda T, a, v: _set(T, a, (a > 0.5,), 0.0) + v.sum(),
}


def _set(T, a, key, value):
    b = a.clone()
    b[key] = value
    return b * 2


@pytest.mark.parametrize("name", list(SETITEM))
def test_setitem_parity_and_gradcheck(name):
    a, v = f32(3, 4), f32(3, 4)
    assert_parity(SETITEM[name], a, v)
    check_gradients(SETITEM[name], a, v)


def test_setitem_broadcasts_leading_ones_as_torch():
    outputs = ct.zeros(4).type_as(ct.tensor([1]))
    outputs[0] = ct.LongTensor([7])
    assert outputs.tolist() == [7, 0, 0, 0] and outputs.dtype == ct.int64
    x = ct.zeros(2, 3)
    x[0] = ct.ones(1, 3)
    assert x.sum().item() == 3
    with pytest.raises(RuntimeError, match="does not fit"):
        x[0] = ct.ones(2, 3)


def test_setitem_on_leaf_requiring_grad_is_an_error():
    w = ct.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable"):
        w[0] = 2.0
    with ct.no_grad():
        w[0] = 2.0
    assert w.tolist() == [2.0, 1.0, 1.0] and w.requires_grad


def test_positional_encoding_slice_assignment():
    pe = ct.zeros(5, 4)
    position = ct.arange(0, 5, dtype=ct.float).unsqueeze(1)
    div_term = ct.exp(ct.arange(0, 4, 2).float() * (-np.log(10000.0) / 4))
    pe[:, 0::2] = ct.sin(position * div_term)
    pe[:, 1::2] = ct.cos(position * div_term)
    ref = np.zeros((5, 4))
    pos = np.arange(5)[:, None]
    div = np.exp(np.arange(0, 4, 2) * (-np.log(10000.0) / 4))
    ref[:, 0::2], ref[:, 1::2] = np.sin(pos * div), np.cos(pos * div)
    np.testing.assert_allclose(pe.numpy(), ref, rtol=1e-5, atol=1e-6)
    assert pe.dtype == ct.float32 and not pe.requires_grad


# ---------------------------------------------------------------- cat / stack / where / gather
JOIN = {
    "cat0": lambda T, a, b: T.cat([a, b], 0),
    "cat1": lambda T, a, b: T.cat((a, b[:, :2]), dim=1),
    "cat_neg": lambda T, a, b: T.cat([a, b, a], dim=-1),
    "stack0": lambda T, a, b: T.stack([a, b]),
    "stack_last": lambda T, a, b: T.stack((a, b), dim=-1),
    "stack1": lambda T, a, b: T.stack([a, b, a], 1),
    "where": lambda T, a, b: T.where(a > 0, a, b),
    "where_scalar": lambda T, a, b: T.where(a > b, a, 0.0) + T.where(b > 0, 1.0, b),
    "where_bcast": lambda T, a, b: T.where(a[:, :1] > 0, a[0], b),
    "where_method": lambda T, a, b: a.where(b > 0, b),
    "masked_fill": lambda T, a, b: a.masked_fill(b > 0, -1e9),
    "masked_fill_inf": lambda T, a, b: a.masked_fill(b[0] > 0, float("-inf")).clamp(min=-5),
    "masked_fill_fn": lambda T, a, b: T.masked_fill(a, b == 0, 0.5),
}


@pytest.mark.parametrize("name", list(JOIN))
def test_join_parity_and_gradcheck(name):
    a, b = f32(3, 4), f32(3, 4)
    assert_parity(JOIN[name], a, b)
    check_gradients(JOIN[name], a, b)


def test_cat_mixed_requires_grad_and_errors():
    assert_parity(lambda T, a, b: T.cat([a, b], 0), f32(2, 3), f32(1, 3), grad=[0])
    with pytest.raises(RuntimeError, match="sizes"):
        ct.cat([ct.zeros(2, 3), ct.zeros(2, 4)], 0)
    with pytest.raises(RuntimeError, match="equal size"):
        ct.stack([ct.zeros(2), ct.zeros(3)])


def test_gather_index_select():
    x = f32(3, 4)
    idx = np.array([[0, 0, 3], [1, 2, 1], [3, 3, 3]])
    assert_parity(lambda T, a, i: a.gather(1, i), x, idx)
    assert_parity(lambda T, a, i: T.gather(a, 0, i[:2] % 3), x, idx)
    check_gradients(lambda T, a, i: a.gather(1, i), x, idx)
    sel = np.array([2, 0, 2])
    assert_parity(lambda T, a, i: a.index_select(0, i), x, sel)
    assert_parity(lambda T, a, i: T.index_select(a, 1, i), x, sel)
    check_gradients(lambda T, a, i: a.index_select(1, i), x, sel)


def test_masked_fill_requires_bool_mask():
    x = ct.zeros(2, 2)
    with pytest.raises(TypeError, match="masked_fill: mask must have dtype bool, got int64"):
        x.masked_fill(ct.tensor([[1, 0], [0, 1]]), 1.0)
    with pytest.raises(TypeError, match="masked_fill_: mask must have dtype bool"):
        x.masked_fill_(ct.tensor([[1.0, 0.0], [0.0, 1.0]]), 1.0)
    with pytest.raises(RuntimeError, match="broadcast"):
        x.masked_fill_(ct.ones(3, 2, 2).bool(), 1.0)


def test_attention_style_masking_matches_torch():
    q, k = f32(2, 5, 8), f32(2, 5, 8)
    seq = np.array([[3, 4, 0, 0, 0], [1, 2, 3, 4, 0]])

    def body(lib):
        Q, Kt = lib.tensor(q, requires_grad=True), lib.tensor(k, requires_grad=True)
        mask = (lib.tensor(seq) != 0).unsqueeze(1)
        causal = lib.tril(lib.ones((5, 5))).bool()
        scores = lib.matmul(Q, Kt.transpose(-2, -1)) / np.sqrt(8)
        scores = scores.masked_fill((mask & causal) == 0, -1e9)
        attn = scores.softmax(dim=-1)
        attn.sum(1).pow(2).sum().backward()
        return dict(attn=attn, dq=Q.grad, dk=Kt.grad)

    ours, theirs = both_libraries(body, inputs=dict(q=q, k=k, seq=seq))
    for name in ("attn", "dq", "dk"):
        np.testing.assert_allclose(ours[name], theirs[name], rtol=2e-4, atol=2e-5, err_msg=name)


def test_tutorial_idioms():
    """Idioms from the classic tutorials, the same in both libraries."""
    from ctransformer.autograd import Variable

    logits, x0 = f32(2, 3, 5), f32(2, 6, 4)

    def body(lib):
        out = lib.tensor(logits)
        val, ix = out[:, -1].data.topk(1)
        assert tuple(ix.shape) == (2, 1) and ix.dtype == lib.int64
        src = lib.LongTensor([[1, 2, 3]])
        outputs = lib.zeros(4).type_as(src.data)
        outputs[0] = lib.LongTensor([7])
        assert outputs.tolist() == [7, 0, 0, 0]
        assert out.size(-1) == 5 and out.size() == lib.Size([2, 3, 5]) and out.shape[1:] == (3, 5)
        assert out.max(1)[1].shape == (2, 5) and out.argmax(2)[:, -1].shape == (2,)
        assert isinstance(out.argmax(2)[0, -1].item(), int)
        mask = lib.triu(lib.full((1, 4, 4), float("-inf")), diagonal=1)
        assert mask[0, 0, 1].item() == float("-inf") and mask[0, 1, 0].item() == 0.0
        pe = lib.zeros(1, 10, 4)
        x = lib.tensor(x0, requires_grad=True)
        y = x + pe[:, : x.size(1)].requires_grad_(False)
        z = x + pe[:, : x.size(1)].clone().detach()
        assert y.shape == z.shape == (2, 6, 4) and y.requires_grad
        b, t = lib.randint(0, 10, (4, 16), dtype=lib.long).size()
        assert (b, t) == (4, 16)
        targets = lib.zeros(4, 16, dtype=lib.long)
        targets[:, -1] = -1
        assert targets[0, -1].item() == -1
        return dict(val=val, ix=ix, outputs=outputs, argmax=out.argmax(2), max=out.max(1)[0], mask=mask,
                    y=y, z=z, targets=targets)

    ours, theirs = both_libraries(body, inputs=dict(logits=logits, x0=x0))
    assert_same(ours, theirs)
    v = Variable(ct.LongTensor([[1, 2]]))
    assert v.dtype == ct.int64 and Variable(ct.ones(2), requires_grad=True).requires_grad
    trg_mask = np.triu(np.ones((1, 3, 3)), k=1).astype("uint8")
    m = ct.from_numpy(trg_mask) == 0
    assert m.dtype == ct.bool and m.sum().item() == 6
