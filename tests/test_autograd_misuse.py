"""Misuse that torch refuses is refused here too, with torch's exception
class and message: numpy() on a Tensor that requires grad, view() on a
layout it cannot view, in-place modification of a tensor saved for backward
(the version counter), in-place on a leaf that requires grad."""
import numpy as np

import ctransformer as ct


def _err(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        return type(e).__name__, str(e)
    return "", ""


def _run(fn):
    """(value or None, exception class, message)."""
    try:
        out = fn()
    except Exception as e:  # noqa: BLE001
        return None, type(e).__name__, str(e)
    return out, "", ""


# ---------------------------------------------------------------- numpy()
def _numpy_cases(lib, x):
    a = lib.tensor(x, requires_grad=True)
    return dict(requires=_err(lambda: a.numpy()), detached=a.detach().numpy(), nonleaf=_err(lambda: (a * 2).numpy()),
                no_grad_result=(a.detach() * 2).numpy(), force=a.numpy(force=True))


def test_numpy_on_a_tensor_requiring_grad(rng, torch_ref):
    x = rng.standard_normal(3)
    ref = torch_ref(lambda torch: _numpy_cases(torch, x), inputs=dict(x=x))
    ours = _numpy_cases(ct, x)
    for k in ("requires", "nonleaf"):
        assert ours[k] == (str(ref[k][0]), str(ref[k][1]))
    for k in ("detached", "no_grad_result", "force"):
        np.testing.assert_array_equal(ours[k], ref[k])


# ---------------------------------------------------------------- .requires_grad = ...
def _requires_grad_cases(lib, x):
    """(exception class, message) of each assignment, and the gradient a leaf gets after one."""
    a = lib.tensor(x, requires_grad=True)
    y = a * 2
    ids = lib.tensor(np.arange(3))

    def set_flag(t, value):
        return lambda: setattr(t, "requires_grad", value)

    out = dict(nonleaf_false=_err(set_flag(y, False)), nonleaf_true=_err(set_flag(y, True)),
               int_true=_err(set_flag(ids, True)), int_false=_err(set_flag(ids, False)),
               not_bool_int=_err(set_flag(lib.tensor(x), 1)), not_bool_none=_err(set_flag(lib.tensor(x), None)),
               detached_true=_err(set_flag(y.detach(), True)),
               method_nonleaf_false=_err(lambda: y.requires_grad_(False)),
               method_nonleaf_true=_err(lambda: y.requires_grad_(True)),
               method_int_true=_err(lambda: ids.requires_grad_(True)))
    leaf = lib.tensor(x)
    leaf.requires_grad = True
    (leaf * 3).sum().backward()
    out["leaf_grad"] = leaf.grad.numpy()
    out["nonleaf_still_requires"] = np.array(y.requires_grad)
    return out


def test_setting_requires_grad_as_torch(rng, torch_ref):
    """torch refuses ``.requires_grad = v`` on a computed tensor (either
    value: its flag is the graph's, or a gradient would silently stop
    there), True on an integer tensor, and a value that is not a bool; a
    leaf takes the flag and gets its gradient."""
    x = rng.standard_normal(3)
    ref = torch_ref(lambda torch: _requires_grad_cases(torch, x), inputs=dict(x=x))
    ours = _requires_grad_cases(ct, x)
    for k in ("nonleaf_false", "nonleaf_true", "int_true", "int_false", "not_bool_int", "not_bool_none",
              "detached_true"):
        cls, msg = ours[k]
        assert cls == str(ref[k][0]), (k, ours[k], ref[k])
        assert msg.startswith(str(ref[k][1])), (k, msg, ref[k][1])  # torch's words, then what we got
    for k in ("method_nonleaf_false", "method_nonleaf_true", "method_int_true"):  # requires_grad_(): one rule
        assert ours[k][0] == str(ref[k][0]), (k, ours[k], ref[k])
    np.testing.assert_allclose(ours["leaf_grad"], ref["leaf_grad"], rtol=1e-6)
    assert bool(ours["nonleaf_still_requires"]) and bool(ref["nonleaf_still_requires"])


# ---------------------------------------------------------------- view()
VIEWS = {
    "t_flat": lambda x: x.t().view(-1),
    "t_split": lambda x: x.t().view(3, 2, 2),
    "t_contiguous": lambda x: x.t().contiguous().view(-1),
    "t_reshape": lambda x: x.t().reshape(-1),
    "slice_cols_flat": lambda x: x[:, :2].view(-1),
    "slice_cols_same": lambda x: x[:, :2].view(4, 2),
    "slice_rows_flat": lambda x: x[1:3].view(-1),
    "step_flat": lambda x: x[::2].view(-1),
    "expand_flat": lambda x: x[:1].expand(3, 3).view(-1),
    "expand_merge_lead": lambda x: x[:1].unsqueeze(0).expand(2, 2, 3).view(4, 3),
    "permute3": lambda x: x.view(2, 2, 3).permute(1, 0, 2).view(2, 6),
    "permute3_ok": lambda x: x.view(2, 2, 3).permute(0, 2, 1).view(2, 3, 2),
    "bad_size": lambda x: x.view(5, 3),
}


def _view_cases(lib, x):
    t = lib.tensor(x)
    res = {}
    for name, f in VIEWS.items():
        out, kind, msg = _run(lambda: f(t))
        res[name] = dict(kind=kind, msg=msg, value=np.zeros(0) if out is None else out.numpy().copy())
    return res


def test_view_on_layouts_it_cannot_view(rng, torch_ref):
    x = rng.standard_normal((4, 3))
    ref = torch_ref(lambda torch: _view_cases(torch, x), inputs=dict(x=x))
    ours = _view_cases(ct, x)
    for name in VIEWS:
        o, r = ours[name], ref[name]
        assert o["kind"] == str(r["kind"]), name
        if name == "bad_size":  # our message names the op first
            assert o["msg"].endswith(str(r["msg"]).split("]' ", 1)[1]), name
        else:
            assert o["msg"] == str(r["msg"]), name
        np.testing.assert_array_equal(o["value"], r["value"], err_msg=name)
    assert "Use .reshape(...) instead." in ours["t_flat"]["msg"]


def test_view_keeps_the_gradient(rng):
    x = ct.tensor(rng.standard_normal((4, 3)), requires_grad=True)
    assert ct.autograd.gradcheck(lambda a: a.t().contiguous().view(2, 6) * 2, (x,))
    assert ct.autograd.gradcheck(lambda a: a.t().reshape(-1), (x,))


# ---------------------------------------------------------------- in-place on saved tensors
def _version_cases(lib, x):
    res = {}

    def case(name, build):
        res[name] = _err(build)

    def exp_output():
        a = lib.tensor(x, requires_grad=True)
        y = a.exp()
        y.add_(1)
        y.sum().backward()

    def sigmoid_output():
        a = lib.tensor(x, requires_grad=True)
        y = a.sigmoid()
        y.mul_(2)
        y.sum().backward()

    def tanh_output_no_grad():
        a = lib.tensor(x, requires_grad=True)
        y = a.tanh()
        with lib.no_grad():
            y.mul_(2)
        y.sum().backward()

    def mul_saved_constant():
        a = lib.tensor(x, requires_grad=True)
        c = lib.tensor(x * 2)
        y = a * c
        c.add_(1)
        y.sum().backward()

    def mul_saved_nonleaf_via_detach():
        a = lib.tensor(x, requires_grad=True)
        b = a * 2
        y = b * b
        b.detach().add_(1)
        y.sum().backward()

    def matmul_saved_weight():
        a = lib.tensor(x.reshape(1, -1), requires_grad=True)
        w = lib.tensor(np.ones((x.size, 2)))
        y = a @ w
        w.mul_(3)
        y.sum().backward()

    def fine_add():  # add saves nothing: torch allows it
        a = lib.tensor(x, requires_grad=True)
        y = a * 2
        y.add_(1)
        (y * 1.0).sum().backward()
        return a.grad

    def fine_mul_output():  # mul saves its inputs, not its output
        a = lib.tensor(x, requires_grad=True)
        b = lib.tensor(x + 1, requires_grad=True)
        h = a * b
        h.add_(1)
        h.sum().backward()

    for name, f in (("exp_output", exp_output), ("sigmoid_output", sigmoid_output),
                    ("tanh_output_no_grad", tanh_output_no_grad), ("mul_saved_constant", mul_saved_constant),
                    ("mul_saved_nonleaf_via_detach", mul_saved_nonleaf_via_detach),
                    ("matmul_saved_weight", matmul_saved_weight),
                    ("fine_add", fine_add), ("fine_mul_output", fine_mul_output)):
        case(name, f)
    return res


def test_inplace_on_tensors_saved_for_backward(rng, torch_ref):
    x = rng.standard_normal(3)
    ref = torch_ref(lambda torch: _version_cases(torch, x), inputs=dict(x=x))
    ours = _version_cases(ct, x)
    for name, r in ref.items():
        kind, msg = str(r[0]), str(r[1])
        assert ours[name][0] == kind, (name, ours[name])
        if kind:
            assert msg.startswith("one of the variables needed for gradient computation has been modified by an "
                                  "inplace operation")
            if name == "matmul_saved_weight":  # torch names its internal mm operand: compare the head
                assert ours[name][1].split(":")[0] == msg.split(":")[0]
            else:
                assert ours[name][1] == msg, name


# ---------------------------------------------------------------- in-place on a leaf requiring grad
def _leaf_cases(lib, x):
    res = {}
    for name, f in (("add_", lambda t: t.add_(1)), ("mul_", lambda t: t.mul_(2)), ("iadd", lambda t: t.__iadd__(1)),
                    ("fill_", lambda t: t.fill_(0)), ("zero_", lambda t: t.zero_()),
                    ("setitem", lambda t: t.__setitem__(0, 5.0)), ("uniform_", lambda t: t.uniform_()),
                    ("normal_", lambda t: t.normal_()), ("clamp_", lambda t: t.clamp_(0, 1)),
                    ("relu_", lambda t: t.relu_()), ("copy_", lambda t: t.copy_(t.detach() * 2))):
        a = lib.tensor(x, requires_grad=True)
        res[name] = _err(lambda: f(a))
    a = lib.tensor(x, requires_grad=True)
    with lib.no_grad():
        a.mul_(2)
    res["no_grad_ok"] = a.detach().numpy()
    return res


def test_inplace_on_a_leaf_that_requires_grad(rng, torch_ref):
    x = rng.standard_normal(3)
    ref = torch_ref(lambda torch: _leaf_cases(torch, x), inputs=dict(x=x))
    ours = _leaf_cases(ct, x)
    for name, r in ref.items():
        if name == "no_grad_ok":
            np.testing.assert_array_equal(ours[name], r)
            continue
        assert ours[name][0] == str(r[0]) == "RuntimeError", name
        # torch's sentence, then what to do about it
        assert ours[name][1].startswith(str(r[1])), (name, ours[name][1])
        assert "no_grad()" in ours[name][1]
