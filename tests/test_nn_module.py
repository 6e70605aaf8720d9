"""nn.Module / Parameter / containers: registration, traversal order and
names as torch's, state_dict keys and errors, modes, dtype conversion,
deepcopy, repr."""
import copy
from collections import OrderedDict

import numpy as np
import pytest

import ctransformer as ct
import ctransformer.nn as nn
from nn_parity import F32, assert_param_grads, load_torch_state, torch_param_grads, torch_reference, torch_state


def build(lib):
    """A model touching every registration path, built from torch or ours (``lib``)."""
    m = lib.nn

    class Block(m.Module):
        def __init__(self):
            super().__init__()
            self.scale = m.Parameter(lib.ones(4))
            self.proj = m.Linear(4, 4)
            self.norm = m.LayerNorm(4)
            self.register_buffer("pos", lib.arange(4.0))
            self.register_buffer("cache", lib.zeros(2), persistent=False)

        def forward(self, x):
            return self.norm(self.proj(x) * self.scale + self.pos)

    class Net(m.Module):
        def __init__(self):
            super().__init__()
            self.embed = m.Embedding(7, 4)
            self.blocks = m.ModuleList([Block(), Block()])
            self.heads = m.ModuleDict({"a": m.Linear(4, 3), "b": m.Sequential(m.ReLU(), m.Linear(4, 2))})
            self.out = m.Linear(4, 7, bias=False)
            self.out.weight = self.embed.weight  # tied, as in many Transformer tutorials
            self.register_parameter("unused", None)

        def forward(self, ids):
            h = self.embed(ids)
            for b in self.blocks:
                h = b(h)
            return self.out(h), self.heads["a"](h), self.heads["b"](h)

    return Net()


def names(named):
    return [n for n, _ in named]


def test_names_order_and_keys_match_torch():
    def torch_side(torch):
        tm = build(torch)
        return dict(params=names(tm.named_parameters()),
                    params_dup=names(tm.named_parameters(remove_duplicate=False)),
                    buffers=names(tm.named_buffers()), modules=names(tm.named_modules()),
                    children=names(tm.named_children()), state=list(tm.state_dict()),
                    n_params=len(list(tm.parameters())), shapes=[list(p.shape) for p in tm.parameters()],
                    repr=repr(tm))

    ref = torch_reference(torch_side)
    cm = build(ct)
    assert names(cm.named_parameters()) == list(ref["params"])
    assert names(cm.named_parameters(remove_duplicate=False)) == list(ref["params_dup"])
    assert names(cm.named_buffers()) == list(ref["buffers"])
    assert names(cm.named_modules()) == list(ref["modules"])
    assert names(cm.named_children()) == list(ref["children"])
    assert list(cm.state_dict()) == list(ref["state"])
    assert "blocks.0.cache" not in cm.state_dict() and "blocks.0.pos" in cm.state_dict()
    assert len(list(cm.parameters())) == ref["n_params"]  # the tied weight counts once
    assert [tuple(p.shape) for p in cm.parameters()] == [tuple(int(d) for d in s) for s in ref["shapes"]]
    assert repr(cm) == ref["repr"]


def test_full_model_parity_through_state_dict():
    ids = np.array([[1, 2, 3], [6, 0, 2]])

    def torch_side(torch):
        tm = build(torch)
        state = torch_state(tm)
        outs = tm(torch.tensor(ids))
        (outs[0].sum() + outs[1].pow(2).sum() + outs[2].sum()).backward()
        return dict(state=state, outs=list(outs), grads=torch_param_grads(tm))

    ref = torch_reference(torch_side, dict(ids=ids))
    cm = build(ct)
    load_torch_state(cm, ref["state"])
    assert cm.out.weight is cm.embed.weight  # loading keeps the tie
    c_outs = cm(ct.tensor(ids))
    for t, c in zip(ref["outs"], c_outs):
        np.testing.assert_allclose(c.detach().numpy(), t, **F32)
    (c_outs[0].sum() + (c_outs[1] ** 2).sum() + c_outs[2].sum()).backward()
    assert_param_grads(cm, ref["grads"])


def test_load_state_dict_reports_every_problem_at_once():
    cm = build(ct)
    sd = cm.state_dict()
    del sd["blocks.0.proj.bias"]
    del sd["out.weight"]
    sd["blocks.9.x"] = ct.zeros(1)
    sd["blocks.1.proj.weight"] = ct.zeros(3, 4)
    sd["heads.a.bias"] = np.zeros(5, np.float32)
    before = cm.blocks[0].proj.weight.detach().numpy().copy()
    sd["blocks.0.proj.weight"] = ct.ones(4, 4)
    with pytest.raises(RuntimeError) as err:
        cm.load_state_dict(sd)
    msg = str(err.value)
    assert msg.startswith("Error(s) in loading state_dict for Net:")
    assert 'Missing key(s) in state_dict: "blocks.0.proj.bias", "out.weight".' in msg
    assert 'Unexpected key(s) in state_dict: "blocks.9.x".' in msg
    assert "size mismatch for blocks.1.proj.weight: copying a param with shape ctransformer.Size([3, 4])" in msg
    assert "size mismatch for heads.a.bias" in msg and "current model is ctransformer.Size([3])" in msg
    np.testing.assert_array_equal(cm.blocks[0].proj.weight.detach().numpy(), before)  # nothing was copied

    with pytest.raises(RuntimeError, match="size mismatch") as err:
        cm.load_state_dict(sd, strict=False)  # shapes are checked even when not strict
    assert "Missing" not in str(err.value)
    del sd["blocks.1.proj.weight"], sd["heads.a.bias"]
    res = cm.load_state_dict(sd, strict=False)
    assert res.missing_keys == ["blocks.0.proj.bias", "out.weight", "blocks.1.proj.weight", "heads.a.bias"] or \
        set(res.missing_keys) == {"blocks.0.proj.bias", "out.weight", "blocks.1.proj.weight", "heads.a.bias"}
    assert res.unexpected_keys == ["blocks.9.x"]
    np.testing.assert_array_equal(cm.blocks[0].proj.weight.detach().numpy(), np.ones((4, 4)))
    assert repr(nn.Linear(2, 2).load_state_dict(nn.Linear(2, 2).state_dict())) == "<All keys matched successfully>"


def test_state_dict_values_share_storage_but_not_history():
    m = nn.Linear(3, 2)
    sd = m.state_dict()
    assert not sd["weight"].requires_grad and sd["weight"].is_leaf
    with ct.no_grad():
        m.weight[0, 0] = 5.0
    assert sd["weight"].numpy()[0, 0] == 5.0
    assert m.state_dict(keep_vars=True)["weight"] is m.weight
    assert isinstance(m.state_dict(), OrderedDict)
    assert list(m.state_dict(prefix="enc.")) == ["enc.weight", "enc.bias"]


def test_load_state_dict_casts_dtype_and_accepts_numpy():
    m = nn.Linear(2, 2)
    m.load_state_dict({"weight": np.eye(2), "bias": np.array([1, 2])})
    assert m.weight.dtype == np.float32 and m.bias.dtype == np.float32
    np.testing.assert_array_equal(m.bias.detach().numpy(), [1, 2])


def test_setattr_registration_rules():
    m = nn.Module()
    m.w = nn.Parameter(ct.zeros(2))
    m.sub = nn.Linear(1, 1)
    m.t = ct.zeros(3)  # a plain Tensor is just an attribute
    assert [n for n, _ in m.named_parameters()] == ["w", "sub.weight", "sub.bias"]
    assert list(m._modules) == ["sub"] and "t" not in m._buffers
    with pytest.raises(TypeError, match="cannot assign 'Tensor' as parameter 'w'"):
        m.w = ct.zeros(2)
    m.w = None
    assert m.w is None and [n for n, _ in m.named_parameters()] == ["sub.weight", "sub.bias"]
    m.register_buffer("buf", ct.ones(1))
    with pytest.raises(TypeError, match="cannot assign 'int' as buffer 'buf'"):
        m.buf = 3
    m.buf = ct.zeros(1)
    assert m.buffers().__next__().numpy()[0] == 0
    with pytest.raises(KeyError, match="attribute 't' already exists"):
        m.register_buffer("t", ct.zeros(1))
    with pytest.raises(KeyError, match=r'parameter name can.*contain "\.", got: a\.b'):
        m.register_parameter("a.b", None)
    del m.sub
    assert "sub" not in m._modules
    with pytest.raises(AttributeError, match="'Module' object has no attribute 'nope'"):
        m.nope

    class Early(nn.Module):
        def __init__(self):
            self.w = nn.Parameter(ct.zeros(1))

    with pytest.raises(AttributeError, match="before Module.__init__"):
        Early()


def test_parameter_is_a_shared_tensor():
    t = ct.randn(3, 4)
    p = nn.Parameter(t)
    assert isinstance(p, ct.Tensor) and p.requires_grad and p.is_leaf
    assert np.shares_memory(p.detach().numpy(), t.detach().numpy())
    assert not nn.Parameter(t, requires_grad=False).requires_grad
    assert repr(p).startswith("Parameter containing:\ntensor(")
    view = nn.Parameter(ct.from_numpy(np.zeros((4, 3), np.float32).T))
    assert view.detach().numpy().flags.c_contiguous  # kernels update parameters in place
    out = (p * 2).sum()
    assert type(p * 2) is ct.Tensor
    out.backward()
    np.testing.assert_array_equal(p.grad.numpy(), np.full((3, 4), 2.0))


def test_train_eval_apply_zero_grad_requires_grad():
    m = nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.5), nn.Sequential(nn.Dropout(0.1)))
    assert all(x.training for x in m.modules())
    assert m.eval() is m and not any(x.training for x in m.modules())
    m.train()
    assert all(x.training for x in m.modules())
    with pytest.raises(ValueError, match="boolean"):
        m.train("yes")
    seen = []
    m.apply(lambda mod: seen.append(type(mod).__name__))
    assert seen == ["Linear", "Dropout", "Dropout", "Sequential", "Sequential"]
    m(ct.randn(3, 2)).sum().backward()
    assert m[0].weight.grad is not None
    m.zero_grad(set_to_none=False)
    np.testing.assert_array_equal(m[0].weight.grad.numpy(), 0)
    m.zero_grad()
    assert m[0].weight.grad is None
    m.requires_grad_(False)
    assert not any(p.requires_grad for p in m.parameters())


def test_to_double_float_keeps_parameter_objects():
    m = build(ct)
    w = m.blocks[0].proj.weight
    m(ct.tensor([[1, 2]]))[0].sum().backward()
    assert m.double() is m
    assert m.blocks[0].proj.weight is w and w.dtype == np.float64 and w.grad.dtype == np.float64
    assert m.blocks[0].pos.dtype == np.float64
    assert m.out.weight is m.embed.weight
    m.to(ct.float32)
    assert w.dtype == np.float32 and w.detach().numpy().flags.c_contiguous
    assert m.to("cpu") is m and m.cpu() is m
    with pytest.raises(AssertionError, match="CPU only"):  # torch's CPU build: AssertionError
        m.to("cuda")
    m.to(ct.zeros(1, dtype=ct.float64))
    assert w.dtype == np.float64


def test_deepcopy_preserves_ties_and_is_independent():
    m = build(ct)
    m2 = copy.deepcopy(m)
    assert m2.out.weight is m2.embed.weight and m2.out.weight is not m.out.weight
    assert isinstance(m2.out.weight, nn.Parameter)
    for (n1, a), (n2, b) in zip(m.state_dict().items(), m2.state_dict().items()):
        assert n1 == n2
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    with ct.no_grad():
        m2.blocks[0].proj.weight.fill_(0)
    assert np.any(m.blocks[0].proj.weight.detach().numpy() != 0)


def test_sequential_containers_like_torch():
    layers = [nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1)]
    s = nn.Sequential(*layers)
    assert len(s) == 3 and s[0] is layers[0] and s[-1] is layers[2]
    assert list(s) == layers
    sub = s[1:]
    assert isinstance(sub, nn.Sequential) and len(sub) == 2 and sub[0] is layers[1]
    with pytest.raises(IndexError):
        s[3]
    named = nn.Sequential(OrderedDict([("fc", nn.Linear(2, 2)), ("act", nn.Tanh())]))
    assert list(named.state_dict()) == ["fc.weight", "fc.bias"]
    assert named.fc is named[0]
    s.append(nn.Sigmoid())
    assert len(s) == 4 and list(s._modules) == ["0", "1", "2", "3"]
    x = ct.randn(4, 2)
    np.testing.assert_allclose(s(x).detach().numpy(), s[3](s[2](s[1](s[0](x)))).detach().numpy())

    ml = nn.ModuleList([nn.Linear(1, 1)])
    ml.append(nn.Linear(1, 2))
    ml += [nn.Linear(2, 2)]
    assert len(ml) == 3 and [n for n, _ in ml.named_parameters()][-1] == "2.bias"
    assert ml[-1] is list(ml)[2]
    ml.insert(0, nn.Identity())
    assert isinstance(ml[0], nn.Identity) and list(ml._modules) == ["0", "1", "2", "3"]

    md = nn.ModuleDict({"x": nn.Linear(1, 1)})
    md["y"] = nn.ReLU()
    assert list(md.keys()) == ["x", "y"] and "x" in md and len(md) == 2
    ref = torch_reference(lambda torch: dict(repr=repr(torch.nn.ModuleDict({"x": torch.nn.Linear(1, 1),
                                                                            "y": torch.nn.ReLU()}))))
    assert repr(md) == ref["repr"]


def test_forward_hooks_and_missing_forward():
    m = nn.Linear(2, 2)
    calls = []
    h = m.register_forward_hook(lambda mod, args, out: calls.append(out.shape))
    m(ct.randn(1, 2))
    h.remove()
    m(ct.randn(1, 2))
    assert calls == [(1, 2)]
    with pytest.raises(NotImplementedError, match='missing the required "forward"'):
        nn.Module()(1)


def test_get_submodule_and_parameter():
    m = build(ct)
    assert m.get_submodule("blocks.1.proj") is m.blocks[1].proj
    assert m.get_parameter("heads.b.1.weight") is m.heads["b"][1].weight
    with pytest.raises(AttributeError):
        m.get_submodule("blocks.x")
