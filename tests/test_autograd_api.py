"""torch's autograd API around the engine: autograd.grad, tensor hooks,
retain_grad, graphs freed after backward (retain_graph), inference_mode,
testing.assert_close and gradcheck's argument checks — compared against
torch 2.13 through golden fixtures."""
import gc
import weakref

import numpy as np
import pytest

import ctransformer as ct
from ctransformer.autograd import gradcheck
from ctransformer.testing import assert_close


def _err(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        return type(e).__name__, str(e)
    return "", ""


def _same_err(ours, ref, normalise=False):
    kind, msg = str(ref[0]), str(ref[1])
    if normalise:
        msg = msg.replace("torch.", "ctransformer.")
    assert ours == (kind, msg)


# ---------------------------------------------------------------- autograd.grad
def _grad_cases(lib, x, w):
    xt = lib.tensor(x, requires_grad=True)
    wt = lib.tensor(w, requires_grad=True)
    h = (xt * wt).tanh()
    out = (h * h).sum()
    gx, gh = lib.autograd.grad(out, (xt, h), retain_graph=True)
    res = dict(gx=gx, gh=gh, x_grad_untouched=int(xt.grad is None and wt.grad is None))
    (gw,) = lib.autograd.grad([out, h.sum()], [wt], grad_outputs=[lib.tensor(2.0, dtype=lib.float64), None])
    res["gw_two_outputs"] = gw
    res["second"] = _err(lambda: lib.autograd.grad(out, xt))
    unused = lib.tensor(x, requires_grad=True)
    y = (xt * 3).sum()
    res["unused"] = _err(lambda: lib.autograd.grad(y, [xt, unused], retain_graph=True))
    res["allow_unused"] = [int(g is None) for g in lib.autograd.grad(y, [xt, unused], allow_unused=True,
                                                                          retain_graph=True)]
    res["materialize"] = lib.autograd.grad(y, [unused], allow_unused=True, materialize_grads=True)[0]
    res["no_grad_input"] = _err(lambda: lib.autograd.grad(y, [lib.tensor(x)]))
    res["non_scalar"] = _err(lambda: lib.autograd.grad(xt * 2, xt))
    return res


def test_autograd_grad_matches_torch(rng, torch_ref):
    x, w = rng.standard_normal((2, 3)), rng.standard_normal((2, 3))
    ref = torch_ref(lambda torch: _grad_cases(torch, x, w), inputs=dict(x=x, w=w))
    ours = _grad_cases(ct, x, w)
    for k in ("gx", "gh", "gw_two_outputs", "materialize"):
        np.testing.assert_allclose(ours[k].numpy(), ref[k], rtol=1e-12, atol=1e-14, err_msg=k)
    assert ours["x_grad_untouched"] == int(ref["x_grad_untouched"]) == 1
    assert ours["allow_unused"] == list(ref["allow_unused"]) == [0, 1]
    for k in ("second", "unused", "no_grad_input", "non_scalar"):
        _same_err(ours[k], ref[k])


# ---------------------------------------------------------------- hooks and retain_grad
def _hook_cases(lib, x):
    seen = []
    a = lib.tensor(x, requires_grad=True)
    h = a * 2
    h.register_hook(lambda g: seen.append(g.clone()) or g * 10)  # replaces the gradient
    h.retain_grad()
    handle = a.register_hook(lambda g: g + 1)
    (h * h).sum().backward()
    res = dict(seen=seen[0], h_grad=h.grad, a_grad=a.grad, retains=[int(h.retains_grad), int(a.retains_grad)])
    handle.remove()
    a.grad = None
    (a * 3).sum().backward()
    res["after_remove"] = a.grad
    res["hook_on_no_grad"] = _err(lambda: lib.ones(2).register_hook(lambda g: g))
    res["retain_no_grad"] = _err(lambda: lib.ones(2).retain_grad())
    b = lib.tensor(x, requires_grad=True)
    res["leaf_retains"] = int(b.retains_grad)
    c = b.exp()
    c.retain_grad()
    c.retain_grad()  # twice: still one accumulation
    c.sum().backward()
    res["c_grad"] = c.grad
    return res


def test_hooks_and_retain_grad_match_torch(rng, torch_ref):
    x = rng.standard_normal(4)
    ref = torch_ref(lambda torch: _hook_cases(torch, x), inputs=dict(x=x))
    ours = _hook_cases(ct, x)
    for k in ("seen", "h_grad", "a_grad", "after_remove", "c_grad"):
        np.testing.assert_allclose(ours[k].numpy(), ref[k], rtol=1e-12, err_msg=k)
    assert ours["retains"] == list(ref["retains"]) == [1, 0]
    assert ours["leaf_retains"] == int(ref["leaf_retains"]) == 0
    for k in ("hook_on_no_grad", "retain_no_grad"):
        _same_err(ours[k], ref[k])


def _module_hook_cases(lib, x, w, b, w2):
    res = {}
    lin = lib.nn.Linear(3, 2).double()
    with lib.no_grad():
        lin.weight.copy_(lib.tensor(w))
        lin.bias.copy_(lib.tensor(b))
    seen = []

    def hook(module, grad_input, grad_output):
        seen.append((module is lin, [g.clone() for g in grad_input], [g.clone() for g in grad_output]))
        return (grad_input[0] * 2,)  # replaces the gradient reaching the input

    handle = lin.register_full_backward_hook(hook)
    xt = lib.tensor(x, requires_grad=True)
    (lin(xt).tanh() * lib.tensor(w2)).sum().backward()
    res["x_grad"] = xt.grad
    res["weight_grad"] = lin.weight.grad
    res["is_module"] = int(seen[0][0])
    res["grad_input"] = seen[0][1][0]
    res["grad_output"] = seen[0][2][0]
    # an input that needs no gradient: the hook still runs, grad_input (None,)
    calls = []
    lin.register_full_backward_hook(lambda m, gi, go: calls.append([g is None for g in gi]))
    handle.remove()
    import warnings
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        lin(lib.tensor(x)).sum().backward()
    res["no_grad_input"] = [int(v) for v in calls[0]]
    res["warning"] = [str(m.message) for m in w][:1]
    return res


def test_module_full_backward_hook_matches_torch(rng, torch_ref):
    x, w, b, w2 = rng.standard_normal((4, 3)), rng.standard_normal((2, 3)), rng.standard_normal(2), \
        rng.standard_normal((4, 2))
    ref = torch_ref(lambda torch: _module_hook_cases(torch, x, w, b, w2), inputs=dict(x=x, w=w, b=b, w2=w2))
    ours = _module_hook_cases(ct, x, w, b, w2)
    for k in ("x_grad", "weight_grad", "grad_input", "grad_output"):
        np.testing.assert_allclose(ours[k].numpy(), ref[k], rtol=1e-12, atol=1e-14, err_msg=k)
    assert ours["is_module"] == int(ref["is_module"]) == 1
    assert ours["no_grad_input"] == list(ref["no_grad_input"]) == [1]
    assert ours["warning"] == [str(m) for m in np.atleast_1d(ref["warning"])]


# ---------------------------------------------------------------- graphs freed after backward
def _second_backward_cases(lib, x):
    res = {}
    a = lib.tensor(x, requires_grad=True)
    y = (a * a).sum()
    y.backward()
    res["mul_twice"] = _err(lambda: y.backward())
    a.grad = None
    y = (a * a).sum()
    y.backward(retain_graph=True)
    y.backward()
    res["retained"] = a.grad
    a.grad = None
    z = (a + 1).sum()  # add and sum save no tensors: torch lets this run again
    z.backward()
    z.backward()
    res["add_twice"] = a.grad
    return res


def test_second_backward_raises_as_torch(rng, torch_ref):
    x = rng.standard_normal(3)
    ref = torch_ref(lambda torch: _second_backward_cases(torch, x), inputs=dict(x=x))
    ours = _second_backward_cases(ct, x)
    _same_err(ours["mul_twice"], ref["mul_twice"])
    assert ours["mul_twice"][1].startswith("Trying to backward through the graph a second time")
    np.testing.assert_allclose(ours["retained"].numpy(), ref["retained"], rtol=1e-12)
    np.testing.assert_allclose(ours["add_twice"].numpy(), ref["add_twice"], rtol=1e-12)


SECOND_BACKWARD_OPS = {  # op -> the loss it builds from x (3, 4)
 "sum": lambda l, x: x.sum(), "mean": lambda l, x: x.mean(), "view": lambda l, x: x.view(-1).sum(),
 "permute": lambda l, x: x.permute(1, 0).sum(), "transpose": lambda l, x: x.transpose(0, 1).sum(),
 "expand": lambda l, x: x[:1].expand(3, 4).sum(), "clone": lambda l, x: x.clone().sum(), "neg": lambda l, x: (-x).sum(),
 "add": lambda l, x: (x + x).sum(), "sub": lambda l, x: (x - 1).sum(), "mul_scalar": lambda l, x: (x * 2).sum(),
 "div_scalar": lambda l, x: (x / 2).sum(), "getitem_slice": lambda l, x: x[1:, :2].sum(),
 "cat": lambda l, x: l.cat([x, x]).sum(), "stack": lambda l, x: l.stack([x, x]).sum(),
 "unsqueeze": lambda l, x: x.unsqueeze(0).sum(), "squeeze": lambda l, x: x.unsqueeze(0).squeeze(0).sum(),
 "reshape": lambda l, x: x.reshape(2, 6).sum(), "flatten": lambda l, x: x.flatten().sum(),
 "exp": lambda l, x: x.exp().sum(), "tanh": lambda l, x: x.tanh().sum(), "relu": lambda l, x: x.relu().sum(),
 "matmul": lambda l, x: (x @ x.t()).sum(), "softmax": lambda l, x: x.softmax(-1).sum(),
 "log_softmax": lambda l, x: x.log_softmax(-1).sum(), "pow": lambda l, x: (x ** 2).sum(), "abs": lambda l, x: x.abs().sum(),
 "sigmoid": lambda l, x: x.sigmoid().sum(), "mul": lambda l, x: (x * x).sum(),
 "index_select": lambda l, x: x.index_select(0, l.tensor([0, 2])).sum(),
 "where": lambda l, x: l.where(x > 0, x, 0 * x).sum(), "masked_fill": lambda l, x: x.masked_fill(x > 0, 0.0).sum(),
 "max_dim": lambda l, x: x.max(1)[0].sum(), "max_all": lambda l, x: x.max(), "amax": lambda l, x: x.amax(1).sum(),
 "var": lambda l, x: x.var(), "sqrt": lambda l, x: x.abs().sqrt().sum(), "log": lambda l, x: x.abs().log().sum(),
 "clamp": lambda l, x: x.clamp(-0.5, 0.5).sum(), "gather": lambda l, x: x.gather(1, l.tensor([[0], [1], [2]])).sum(),
 "repeat": lambda l, x: x.repeat(2, 1).sum(), "flip": lambda l, x: x.flip(0).sum(), "tril": lambda l, x: x.tril().sum(),
 "cumsum": lambda l, x: x.cumsum(1).sum(), "linear": lambda l, x: l.nn.functional.linear(x, x).sum(),
 "layer_norm": lambda l, x: l.nn.functional.layer_norm(x, (4,)).sum(), "dropout0": lambda l, x: l.nn.functional.dropout(x, 0.0).sum(),
 "split": lambda l, x: x.split(2, 1)[0].sum(), "chunk": lambda l, x: x.chunk(2, 0)[1].sum(), "sort": lambda l, x: x.sort(1)[0].sum(),
 "mse": lambda l, x: l.nn.functional.mse_loss(x, x.detach() * 0), "cross_entropy": lambda l, x: l.nn.functional.cross_entropy(x, l.tensor([0, 1, 3])),
 "embedding": lambda l, x: l.nn.functional.embedding(l.tensor([0, 2]), x).sum(),
}


def _second_backward_per_op(lib, xa):
    """0: a second backward runs (the op saved nothing), 1: torch's error."""
    out = {}
    for name, f in SECOND_BACKWARD_OPS.items():
        x = lib.tensor(xa, requires_grad=True)
        y = f(lib, x)
        y.backward()
        kind, msg = _err(lambda: y.backward())
        out[name] = 0 if not kind else 1 if "second time" in msg else 2
    return out


def test_which_ops_allow_a_second_backward_matches_torch(rng, torch_ref):
    # torch frees what each node saved: ops that save nothing (add, sum, view, cat, ...) may run
    # again, ops that saved tensors (mul, exp, matmul, x * 2, ...) raise
    x = rng.standard_normal((3, 4))
    ref = torch_ref(lambda torch: _second_backward_per_op(torch, x), inputs=dict(x=x))
    ours = _second_backward_per_op(ct, x)
    assert ours == {k: int(v) for k, v in ref.items()}
    assert 0 in ours.values() and 1 in ours.values()


def test_second_backward_through_the_lstm_kernel_raises(rng, torch_ref):
    x = rng.standard_normal((5, 2, 3)).astype(np.float32)

    def run(lib):
        lib.manual_seed(0)
        lstm = lib.nn.LSTM(3, 4, num_layers=2)
        out, _ = lstm(lib.tensor(x))
        loss = out.sum()
        loss.backward()
        return dict(err=_err(lambda: loss.backward()))

    ref = torch_ref(run, inputs=dict(x=x))
    _same_err(run(ct)["err"], ref["err"])


def test_saved_arrays_are_released_once_their_node_has_run(rng):
    x = ct.tensor(rng.standard_normal(1000), requires_grad=True)

    def build(retain):
        h = x.exp()
        probe = weakref.ref(h._data)
        z = (h * h).sum()
        del h
        z.backward(retain_graph=retain)
        gc.collect()
        return z, probe

    z, probe = build(retain=False)
    assert probe() is None  # freed while the loss tensor is still alive
    z, probe = build(retain=True)
    assert probe() is not None  # retain_graph keeps what backward needs
    z.backward()  # and a second pass works


# ---------------------------------------------------------------- inference_mode
def test_inference_mode_context_and_decorator():
    x = ct.ones(2, requires_grad=True)
    with ct.inference_mode():
        assert ct.is_inference_mode_enabled() and not ct.is_grad_enabled()
        assert not (x * 2).requires_grad
    assert ct.is_grad_enabled() and not ct.is_inference_mode_enabled()
    with ct.inference_mode(False):
        assert (x * 2).requires_grad

    @ct.inference_mode()
    def f(a):
        return a * 2

    @ct.inference_mode
    def g(a):
        return a * 3

    assert not f(x).requires_grad and not g(x).requires_grad
    assert (x * 2).requires_grad


# ---------------------------------------------------------------- assert_close
def _close_cases(lib):
    a = lambda v, **k: lib.tensor(v, **k)  # noqa: E731
    cases = [
        (a([1., 2., 3.]), a([1., 2.1, 3.]), {}),
        (a([1., 2., 3.], dtype=lib.float64), a([1., 2.1, 3.], dtype=lib.float64), {}),
        (a([1, 2, 3]), a([1, 4, 3]), {}),
        (a([1., 2.]), a([1., 2., 3.]), {}),
        (a([1., 2.]), a([1., 2.], dtype=lib.float64), {}),
        (a([1., float("nan")]), a([1., float("nan")]), {}),
        (a([[1., 2.], [3., 4.]]), a([[1., 2.], [3., 5.]]), {}),
        (1.0, 1.1, {}),
        (a([0., 2.]), a([1e-3, 2.]), {}),
        (a([True, False]), a([True, True]), {}),
        (a([1., 2.]), a([1., 2.5]), dict(msg="custom")),
        (a(1.), a(1.5), {}),
        (a([1., 2.]), a([1., 2.5]), dict(rtol=0.1)),
        (a([1., 2.]), a([1., 2.5]), dict(rtol=0.1, atol=0.6)),
        (a([1., 2.]), a([1, 2]), dict(check_dtype=False)),
        (a([1., float("inf")]), a([1., float("-inf")]), {}),
        (a([1., 2.]), a([1., 2.000001]), {}),
        ([a([1.]), a([1., 2.])], [a([1.]), a([1., 2.5])], {}),
        ([1, 2], [1, 2, 3], {}),
        ({"a": a(1.)}, {"a": a(2.)}, {}),
        (a([1., 2.]), a([1., 2.5]), dict(msg=lambda m: "X" + m)),
        (a([1., float("nan")]), a([1., float("nan")]), dict(equal_nan=True)),
    ]
    return [_err(lambda c=c: lib.testing.assert_close(c[0], c[1], **c[2])) for c in cases]


def test_assert_close_matches_torch(torch_ref):
    ref = torch_ref(lambda torch: dict(r=_close_cases(torch)))
    ours = _close_cases(ct)
    assert len(ours) == len(ref["r"])
    for i, (o, r) in enumerate(zip(ours, ref["r"])):
        _same_err(o, r, normalise=True)


def test_assert_close_accepts_numpy_and_default_tolerances():
    assert_close(np.float32(1.0) + np.zeros(3, np.float32), np.ones(3, np.float32) * (1 + 1e-6))
    with pytest.raises(AssertionError, match="Mismatched elements: 1 / 3"):
        assert_close(np.ones(3, np.float64), np.array([1.0, 1.0, 1.0 + 1e-6]))


# ---------------------------------------------------------------- gradcheck's argument checks
def _gradcheck_arg_cases(lib, x):
    res = {}
    res["none"] = _err(lambda: lib.autograd.gradcheck(lambda a: a * 2, (lib.tensor(x),)))
    import warnings
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        ok = lib.autograd.gradcheck(lambda a: a * 2, (lib.tensor(x.astype(np.float32), requires_grad=True),),
                                    raise_exception=False)
    res["float32_warning"] = [str(m.message) for m in w if issubclass(m.category, UserWarning)][:1]
    res["float32_result"] = int(bool(ok))
    res["float64_ok"] = int(lib.autograd.gradcheck(lambda a: (a * a).sum(),
                                                   (lib.tensor(x, requires_grad=True),)))
    return res


def test_gradcheck_argument_errors_match_torch(rng, torch_ref):
    x = rng.standard_normal(3)
    ref = torch_ref(lambda torch: _gradcheck_arg_cases(torch, x), inputs=dict(x=x))
    ours = _gradcheck_arg_cases(ct, x)
    _same_err(ours["none"], ref["none"])
    assert ours["none"][0] == "ValueError"
    assert ours["float32_warning"] == [str(m) for m in np.atleast_1d(ref["float32_warning"])]
    assert ours["float64_ok"] == int(ref["float64_ok"]) == 1


def test_double_backward_is_refused_clearly():
    x = ct.ones(2, requires_grad=True)
    with pytest.raises(NotImplementedError, match="create_graph=True"):
        (x * x).sum().backward(create_graph=True)
    with pytest.raises(NotImplementedError, match="create_graph=True"):
        ct.autograd.grad((x * x).sum(), x, create_graph=True)
    with pytest.raises(NotImplementedError, match="double backward"):
        ct.autograd.gradgradcheck(lambda a: a * a, (x,))


def test_autograd_backward_runs_shared_graphs_once(rng):
    x = ct.tensor(rng.standard_normal(3), requires_grad=True)
    h = x.exp()
    ct.autograd.backward([(h * 2).sum(), (h * h).sum()])  # one pass: the shared exp node is freed once
    np.testing.assert_allclose(x.grad.numpy(), (2 + 2 * h.detach().numpy()) * h.detach().numpy(), rtol=1e-12)
    y = ct.tensor(rng.standard_normal(3), requires_grad=True)
    z = (y * y).sum() + (y * 3).sum()
    z.backward(inputs=[y])
    np.testing.assert_allclose(y.grad.numpy(), 2 * y.detach().numpy() + 3, rtol=1e-12)
    assert gradcheck(lambda a: (a * a).tanh(), (ct.tensor(rng.standard_normal(3), requires_grad=True),))


# ---------------------------------------------------------------- grad_fn.next_functions
def _graph_walk(lib, x):
    """Names along next_functions, from a sum of products down to the leaves."""
    a = lib.tensor(x, requires_grad=True)
    b = lib.tensor(x)  # needs no gradient: its edge is (None, 0)
    z = (a * a + b * a).sum()
    add = z.grad_fn.next_functions[0][0]
    mul_aa, mul_ba = (f for f, _ in add.next_functions)
    acc = mul_aa.next_functions[0][0]
    return dict(z=z.grad_fn.name(), add=add.name(), mul=mul_aa.name(),
                acc_type=type(acc).__name__, acc_name=acc.name(),
                acc_is_leaf=np.array(acc.variable is a),
                same_object=np.array(acc is mul_aa.next_functions[1][0] and acc is mul_ba.next_functions[1][0]),
                acc_next=np.array(len(acc.next_functions)),
                none_edge=np.array(mul_ba.next_functions[0] == (None, 0)))


def test_next_functions_walk_to_the_leaves_as_torch(rng, torch_ref):
    """A notebook walks ``grad_fn.next_functions`` down to a leaf's
    AccumulateGrad (``.variable`` is the leaf, the same object from every
    edge); a tensor that needs no gradient is (None, 0)."""
    x = rng.standard_normal(3)
    ref = torch_ref(lambda torch: _graph_walk(torch, x), inputs=dict(x=x))
    ours = _graph_walk(ct, x)
    for k in ours:
        assert np.array_equal(np.asarray(ours[k]), np.asarray(ref[k])) if isinstance(ours[k], np.ndarray) \
            else ours[k] == str(ref[k]), (k, ours[k], ref[k])
