"""ctransformer.autograd.Function: torch's contract for ops with a hand-written
backward (the coursework exercise: LayerNorm's backward, proven with
gradcheck), compared against torch 2.13 through golden fixtures."""
import numpy as np
import pytest

import ctransformer as ct
from ctransformer.autograd import Function, gradcheck


def make_layernorm(lib):
    """A student's LayerNorm over the last dim, with its backward by hand.
    Written once against the torch API, run with either library."""

    class LayerNormFn(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight, bias, eps):
            mu = x.mean(-1, keepdim=True)
            xc = x - mu
            var = (xc * xc).mean(-1, keepdim=True)
            rstd = 1.0 / (var + eps).sqrt()
            xhat = xc * rstd
            ctx.save_for_backward(xhat, rstd, weight)
            return xhat * weight + bias

        @staticmethod
        def backward(ctx, g):
            xhat, rstd, weight = ctx.saved_tensors
            n = xhat.shape[-1]
            gx_hat = g * weight
            gx = rstd * (gx_hat - gx_hat.mean(-1, keepdim=True) - xhat * (gx_hat * xhat).mean(-1, keepdim=True))
            lead = tuple(range(g.dim() - 1))
            gw = (g * xhat).sum(lead)
            gb = g.sum(lead)
            assert n == xhat.shape[-1]
            return gx, gw, gb, None

    return LayerNormFn


def make_wrong_layernorm(lib):
    """The same with a classic mistake: the mean-of-gradient term forgotten."""
    good = make_layernorm(lib)

    class WrongLayerNormFn(good):
        @staticmethod
        def backward(ctx, g):
            xhat, rstd, weight = ctx.saved_tensors
            gx_hat = g * weight
            gx = rstd * (gx_hat - xhat * (gx_hat * xhat).mean(-1, keepdim=True))
            lead = tuple(range(g.dim() - 1))
            return gx, (g * xhat).sum(lead), g.sum(lead), None

    return WrongLayerNormFn


def _err(fn):
    """(exception class name, message) of fn(), or ('', '') if it did not raise."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the class is what we compare
        return type(e).__name__, str(e)
    return "", ""


def test_student_layernorm_function_passes_gradcheck(rng):
    x = ct.tensor(rng.standard_normal((3, 5)), requires_grad=True)
    w = ct.tensor(rng.standard_normal(5) + 1.0, requires_grad=True)
    b = ct.tensor(rng.standard_normal(5), requires_grad=True)
    LN = make_layernorm(ct)
    assert gradcheck(lambda x, w, b: LN.apply(x, w, b, 1e-5), (x, w, b))
    # and it agrees with the built-in layer_norm
    y = LN.apply(x, w, b, 1e-5)
    ref = ct.nn.functional.layer_norm(x, (5,), w, b, 1e-5)
    np.testing.assert_allclose(y.detach().numpy(), ref.detach().numpy(), rtol=1e-12, atol=1e-12)


def test_student_layernorm_matches_torch(rng, torch_ref):
    x = rng.standard_normal((2, 3, 4))
    w = rng.standard_normal(4) + 1.0
    b = rng.standard_normal(4)
    g = rng.standard_normal((2, 3, 4))

    def run(lib):
        xt, wt, bt = (lib.tensor(a, requires_grad=True) for a in (x, w, b))
        y = make_layernorm(lib).apply(xt, wt, bt, 1e-5)
        y.backward(lib.tensor(g))
        return dict(y=y.detach().numpy(), dx=xt.grad.numpy(), dw=wt.grad.numpy(), db=bt.grad.numpy(),
                    name=type(y.grad_fn).__name__ if lib is not ct else y.grad_fn.name())

    ref = torch_ref(run, inputs=dict(x=x, w=w, b=b, g=g))
    ours = run(ct)
    for k in ("y", "dx", "dw", "db"):
        np.testing.assert_allclose(ours[k], ref[k], rtol=1e-10, atol=1e-12, err_msg=k)
    assert ours["name"] == str(ref["name"]) == "LayerNormFnBackward"


def test_wrong_backward_fails_gradcheck_with_a_readable_report(rng):
    x = ct.tensor(rng.standard_normal((2, 4)), requires_grad=True)
    w = ct.tensor(rng.standard_normal(4) + 1.0, requires_grad=True)
    b = ct.tensor(rng.standard_normal(4), requires_grad=True)
    Wrong = make_wrong_layernorm(ct)
    with pytest.raises(RuntimeError) as info:
        gradcheck(lambda x, w, b: Wrong.apply(x, w, b, 1e-5), (x, w, b))
    assert type(info.value).__name__ == "GradcheckError"
    msg = str(info.value)
    assert msg.startswith("Jacobian mismatch for output 0 with respect to input 0,\nnumerical:tensor(")
    assert "\nanalytical:tensor(" in msg
    assert "The largest mismatch is d output[0] element" in msg and "Jacobian entries differ" in msg
    assert gradcheck(lambda x, w, b: Wrong.apply(x, w, b, 1e-5), (x, w, b), raise_exception=False) is False
    # only x's gradient is wrong: checking w and b alone passes
    x.requires_grad_(False)
    assert gradcheck(lambda x, w, b: Wrong.apply(x, w, b, 1e-5), (x, w, b))


def test_wrong_backward_fails_torch_gradcheck_too(rng, torch_ref):
    x = rng.standard_normal((2, 4))

    def run(torch):
        xt = torch.tensor(x, requires_grad=True)
        wt, bt = torch.ones(4, dtype=torch.float64), torch.zeros(4, dtype=torch.float64)
        W = make_wrong_layernorm(torch)
        kind, msg = _err(lambda: torch.autograd.gradcheck(lambda a: W.apply(a, wt, bt, 1e-5), (xt,)))
        return dict(kind=kind, head=msg.split("\n")[0])

    ref = torch_ref(run, inputs=dict(x=x))
    ours = run(ct)
    assert ours == {k: str(v) for k, v in ref.items()}


class _Contract:
    """Functions exercising each clause of the contract, for both libraries."""

    @staticmethod
    def classes(lib):
        class Scale(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x, factor, y):
                ctx.factor = factor
                ctx.flags = ctx.needs_input_grad
                ctx.save_for_backward(x, y)
                return x * factor + y

            @staticmethod
            def backward(ctx, g):
                return g * ctx.factor, None, g

        class TooFew(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x, y):
                return x + y

            @staticmethod
            def backward(ctx, g):
                return g

        class TooMany(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2

            @staticmethod
            def backward(ctx, g):
                return g * 2, g

        class ExtraNone(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2

            @staticmethod
            def backward(ctx, g):
                return g * 2, None, None

        class BadShape(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x.sum(0)

            @staticmethod
            def backward(ctx, g):
                return g[:2]

        class Broadcast(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 3

            @staticmethod
            def backward(ctx, g):
                return (g * 3).expand(2, *g.shape)  # expandable to x's shape: summed back by the engine

        class GradForNonTensor(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x, k):
                return x * k

            @staticmethod
            def backward(ctx, g):
                return g * 2, g

        class SortFn(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                values, idx = x.sort(-1)
                ctx.mark_non_differentiable(idx)
                ctx.save_for_backward(idx)
                return values, idx

            @staticmethod
            def backward(ctx, g_values, g_idx):
                (idx,) = ctx.saved_tensors
                ctx.g_idx_was_none = g_idx is None
                out = lib.zeros_like(g_values)
                return out.scatter(-1, idx, g_values)

        class TwoOut(lib.autograd.Function):
            materialize = True

            @staticmethod
            def forward(ctx, x):
                ctx.set_materialize_grads(TwoOut.materialize)
                return x * 2, x * 3

            @staticmethod
            def backward(ctx, g1, g2):
                ctx.seen = (g1 is None, g2 is None, None if g2 is None else float(g2.abs().sum()))
                total = g1 * 2
                if g2 is not None:
                    total = total + g2 * 3
                return total

        return dict(Scale=Scale, TooFew=TooFew, TooMany=TooMany, ExtraNone=ExtraNone, BadShape=BadShape,
                    Broadcast=Broadcast, GradForNonTensor=GradForNonTensor, SortFn=SortFn, TwoOut=TwoOut)

    @staticmethod
    def run(lib, x):
        C = _Contract.classes(lib)
        res = {}
        xt = lib.tensor(x, requires_grad=True)
        yt = lib.tensor(x * 0.5)
        out = C["Scale"].apply(xt, 3.0, yt)
        out.sum().backward()
        res["scale_dx"] = xt.grad.numpy()
        res["needs_input_grad"] = [int(f) for f in out.grad_fn.ctx.flags] if lib is ct else \
            [int(f) for f in out.grad_fn.flags]
        res["out_requires_grad"] = int(out.requires_grad)
        with lib.no_grad():
            res["no_grad_requires_grad"] = int(C["Scale"].apply(xt, 3.0, yt).requires_grad)
        res["too_few"] = _err(lambda: C["TooFew"].apply(lib.tensor(x, requires_grad=True),
                                                        lib.tensor(x, requires_grad=True)).sum().backward())
        res["too_many"] = _err(lambda: C["TooMany"].apply(lib.tensor(x, requires_grad=True)).sum().backward())
        xe = lib.tensor(x, requires_grad=True)
        C["ExtraNone"].apply(xe).sum().backward()
        res["extra_none_dx"] = xe.grad.numpy()
        res["bad_shape"] = _err(lambda: C["BadShape"].apply(lib.tensor(x, requires_grad=True)).sum().backward())
        xb = lib.tensor(x[0], requires_grad=True)
        C["Broadcast"].apply(xb).sum().backward()
        res["broadcast_dx"] = xb.grad.numpy()
        res["grad_for_non_tensor"] = _err(
            lambda: C["GradForNonTensor"].apply(lib.tensor(x, requires_grad=True), 2.0).sum().backward())
        xs = lib.tensor(x, requires_grad=True)
        values, idx = C["SortFn"].apply(xs)
        res["idx_requires_grad"] = int(idx.requires_grad)
        res["values_requires_grad"] = int(values.requires_grad)
        (values * lib.arange(values.shape[-1], dtype=values.dtype)).sum().backward()
        res["sort_dx"] = xs.grad.numpy()
        for mat in (True, False):
            C["TwoOut"].materialize = mat
            xm = lib.tensor(x, requires_grad=True)
            a, b = C["TwoOut"].apply(xm)
            a.sum().backward()
            ctx = a.grad_fn.ctx if lib is ct else a.grad_fn
            res[f"two_out_{mat}_seen"] = [-1 if v is None else float(v) for v in ctx.seen]
            res[f"two_out_{mat}_dx"] = xm.grad.numpy()
        return res


def test_function_contract_matches_torch(rng, torch_ref):
    x = rng.standard_normal((3, 4))
    ref = torch_ref(lambda torch: _Contract.run(torch, x), inputs=dict(x=x))
    ours = _Contract.run(ct, x)
    assert set(ours) == set(ref)
    for k, v in ours.items():
        r = ref[k]
        if isinstance(v, tuple):  # (exception class, message)
            assert (v[0], v[1]) == (str(r[0]), str(r[1])), k
        else:
            np.testing.assert_allclose(np.asarray(v, dtype=np.float64), np.asarray(r, dtype=np.float64),
                                       rtol=1e-12, atol=1e-12, err_msg=k)


def test_saved_tensors_are_released_after_backward(rng, torch_ref):
    x = rng.standard_normal(3)

    def run(lib):
        class Exp(lib.autograd.Function):
            @staticmethod
            def forward(ctx, a):
                y = a.exp()
                ctx.save_for_backward(y)
                return y

            @staticmethod
            def backward(ctx, g):
                (y,) = ctx.saved_tensors
                return g * y

        a = lib.tensor(x, requires_grad=True)
        y = Exp.apply(a)
        y.sum().backward(retain_graph=True)
        y.sum().backward()  # the retained graph runs again
        twice = a.grad.numpy().copy()
        second = _err(lambda: y.sum().backward())
        ctx = y.grad_fn.ctx if lib is ct else y.grad_fn
        saved_after = _err(lambda: ctx.saved_tensors)
        # a saved tensor modified in place is refused when backward needs it
        b = lib.tensor(x, requires_grad=True)
        z = Exp.apply(b)
        with lib.no_grad():
            z.mul_(2)
        modified = _err(lambda: z.sum().backward())
        return dict(twice=twice, second=second, saved_after=saved_after, modified_kind=modified[0],
                    modified_head=modified[1].split(":")[0])

    ref = torch_ref(run, inputs=dict(x=x))
    ours = run(ct)
    np.testing.assert_allclose(ours["twice"], ref["twice"], rtol=1e-12)
    for k in ("second", "saved_after"):
        assert ours[k] == (str(ref[k][0]), str(ref[k][1])), k
    assert ours["modified_kind"] == str(ref["modified_kind"]) == "RuntimeError"
    assert ours["modified_head"] == str(ref["modified_head"])


def test_function_without_grad_inputs_is_not_recorded():
    class Double(Function):
        @staticmethod
        def forward(ctx, a):
            return a * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2

    y = Double.apply(ct.ones(3))
    assert not y.requires_grad and y.grad_fn is None
    np.testing.assert_array_equal(y.numpy(), [2.0, 2.0, 2.0])


def test_function_new_style_setup_context(rng):
    class Mul(Function):
        @staticmethod
        def forward(a, b):
            return a * b

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(*inputs)

        @staticmethod
        def backward(ctx, g):
            a, b = ctx.saved_tensors
            return g * b, g * a

    a = ct.tensor(rng.standard_normal(4), requires_grad=True)
    b = ct.tensor(rng.standard_normal(4), requires_grad=True)
    assert gradcheck(Mul.apply, (a, b))


def test_function_gradient_flows_through_the_rest_of_the_graph(rng):
    LN = make_layernorm(ct)
    lin = ct.nn.Linear(4, 4).double()
    x = ct.tensor(rng.standard_normal((2, 4)), requires_grad=True)
    w, b = ct.ones(4, dtype=ct.float64, requires_grad=True), ct.zeros(4, dtype=ct.float64, requires_grad=True)
    assert gradcheck(lambda x, w, b: lin(LN.apply(lin(x).tanh(), w, b, 1e-5)).sigmoid(), (x, w, b))
    out = lin(LN.apply(lin(x), w, b, 1e-5)).sum()
    out.backward()
    assert lin.weight.grad is not None and x.grad is not None and w.grad is not None
