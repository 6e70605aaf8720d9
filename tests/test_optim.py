"""Optimizers and LR schedulers: torch parity over several steps (per-group
options included), torch's state_dict layout, resuming, errors."""
import ast
import copy

import numpy as np
import pytest

import ctransformer as ct
import ctransformer.nn as nn
from nn_parity import F32, F64, load_torch_state, torch_reference, torch_state

SHAPES = [(3, 4), (4,), (2, 2, 3)]


def param_arrays(dtype, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(dtype) for s in SHAPES]


def make_params(dtype, seed=0):
    return [nn.Parameter(ct.tensor(a.copy())) for a in param_arrays(dtype, seed)]


def grad_schedule(dtype, steps, skip_grad=None):
    """The gradients fed at each step (None: that parameter has none)."""
    rng = np.random.default_rng(1)
    return [[None if skip_grad is not None and skip_grad(step, i) else rng.standard_normal(s).astype(dtype)
             for i, s in enumerate(SHAPES)] for step in range(steps)]


def literal(value):
    """A Python literal (param_groups, defaults) from its recorded repr."""
    return ast.literal_eval(str(value))


def run_parity(name, kwargs, dtype=np.float32, steps=5, groups=False, skip_grad=None):
    """Feed both optimizers (``name`` in torch.optim and ours) the same
    gradients for ``steps`` steps; compare parameters after each step, and
    state and param_groups at the end.  ``groups`` splits the parameters
    into two groups, the second with its own lr (and weight decay)."""
    arrays = param_arrays(dtype)
    schedule = grad_schedule(dtype, steps, skip_grad)
    extra = dict(lr=kwargs.get("lr", 1e-3) * 3, weight_decay=0.05)

    def param_groups(ps):
        return [{"params": ps[:2]}, {"params": ps[2:], **extra}] if groups else ps

    def torch_side(torch):
        tp = [torch.tensor(a.copy(), requires_grad=True) for a in arrays]
        t_opt = getattr(torch.optim, name)(param_groups(tp), **kwargs)
        after = []
        for row in schedule:
            for t, g in zip(tp, row):
                t.grad = None if g is None else torch.tensor(g)
            t_opt.step()
            after.append([t.detach().clone() for t in tp])
        sd = t_opt.state_dict()
        return dict(params=after, state_keys=list(sd["state"]),
                    state={str(k): dict(v) for k, v in sd["state"].items()}, param_groups=repr(sd["param_groups"]))

    ref = torch_reference(torch_side, {f"g{s}_{i}": g for s, row in enumerate(schedule) for i, g in enumerate(row)
                                       if g is not None})
    cp = [nn.Parameter(ct.tensor(a.copy())) for a in arrays]
    c_opt = getattr(ct.optim, name)(param_groups(cp), **kwargs)
    tol = F64 if dtype == np.float64 else F32
    for step, (row, t_params) in enumerate(zip(schedule, ref["params"])):
        for c, g in zip(cp, row):
            c.grad = None if g is None else ct.tensor(g)
        c_opt.step()
        for i, (c, t) in enumerate(zip(cp, t_params)):
            np.testing.assert_allclose(c.detach().numpy(), t, **tol, err_msg=f"param {i} at step {step}")
    c_sd = c_opt.state_dict()
    t_keys = [int(k) for k in ref["state_keys"]]
    assert sorted(c_sd["state"]) == sorted(t_keys)
    for k in t_keys:
        t_state = ref["state"][str(k)]
        assert sorted(c_sd["state"][k]) == sorted(t_state)
        for state_name, tv in t_state.items():
            cv = c_sd["state"][k][state_name]
            np.testing.assert_allclose(cv.numpy(), tv, **tol, err_msg=f"state {k}.{state_name}")
            assert cv.dtype == tv.dtype
    t_groups = literal(ref["param_groups"])
    assert [sorted(g) for g in c_sd["param_groups"]] == [sorted(g) for g in t_groups]
    for cg, tg in zip(c_sd["param_groups"], t_groups):
        assert cg == tg
    return c_opt, cp


SGD_CASES = [dict(lr=0.1), dict(lr=0.1, momentum=0.9), dict(lr=0.05, momentum=0.9, dampening=0.3),
             dict(lr=0.1, momentum=0.8, nesterov=True), dict(lr=0.1, weight_decay=0.1),
             dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01, maximize=True)]
ADAM_CASES = [dict(), dict(lr=0.01), dict(lr=0.01, betas=(0.8, 0.99), eps=1e-6), dict(lr=0.01, weight_decay=0.1),
              dict(lr=0.01, amsgrad=True), dict(lr=0.01, maximize=True, weight_decay=0.01)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kw", SGD_CASES, ids=str)
def test_sgd_parity(kw, dtype):
    run_parity("SGD", kw, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kw", ADAM_CASES, ids=str)
def test_adam_parity(kw, dtype):
    run_parity("Adam", kw, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kw", ADAM_CASES, ids=str)
def test_adamw_parity(kw, dtype):
    run_parity("AdamW", kw, dtype)


@pytest.mark.parametrize("name,kw", [
    ("SGD", dict(lr=0.1, momentum=0.9)),
    ("Adam", dict(lr=0.01)),
    ("AdamW", dict(lr=0.01, amsgrad=True)),
])
def test_per_group_options_parity(name, kw):
    run_parity(name, kw, groups=True)


def test_parameters_without_grad_are_skipped_like_torch():
    run_parity("Adam", dict(lr=0.01), skip_grad=lambda step, i: (step + i) % 3 == 0)
    run_parity("SGD", dict(lr=0.1, momentum=0.9), skip_grad=lambda step, i: i == 1 and step < 2)


def test_defaults_match_torch():
    names = ["SGD", "Adam", "AdamW"]
    ref = torch_reference(lambda torch: {n: repr(getattr(torch.optim, n)([torch.zeros(1, requires_grad=True)]).defaults)
                                         for n in names})
    for name in names:
        c_opt = getattr(ct.optim, name)([nn.Parameter(ct.zeros(1))])
        assert c_opt.defaults == literal(ref[name]), name
    assert ct.optim.AdamW([nn.Parameter(ct.zeros(1))]).defaults["weight_decay"] == 0.01


def test_training_loop_parity_with_model():
    """A model, a loss, backward, clip, step: 4 iterations agree with torch."""
    def build(lib):
        m = lib.nn
        return m.Sequential(m.Linear(5, 8), m.Tanh(), m.Linear(8, 3))
    rng = np.random.default_rng(0)
    batches = [(rng.standard_normal((6, 5)).astype(np.float32), rng.integers(0, 3, 6)) for _ in range(4)]

    def train(lib, m):
        opt = lib.optim.AdamW(m.parameters(), lr=0.02)
        for x, y in batches:
            opt.zero_grad()
            loss = lib.nn.functional.cross_entropy(m(lib.tensor(x)), lib.tensor(y))
            loss.backward()
            lib.nn.utils.clip_grad_norm_(m.parameters(), 0.5)
            opt.step()

    def torch_side(torch):
        tm = build(torch)
        initial = torch_state(tm)
        train(torch, tm)
        return dict(initial=initial, final=dict(tm.state_dict()))

    ref = torch_reference(torch_side, {f"{n}{i}": a for i, b in enumerate(batches) for n, a in zip("xy", b)})
    cm = build(ct)
    load_torch_state(cm, ref["initial"])
    train(ct, cm)
    for k, v in cm.state_dict().items():
        np.testing.assert_allclose(v.numpy(), ref["final"][k], rtol=1e-4, atol=1e-5, err_msg=k)


def test_state_dict_resume_equals_uninterrupted():
    rng = np.random.default_rng(3)
    grads = [[rng.standard_normal(s).astype(np.float32) for s in SHAPES] for _ in range(6)]

    def run(params, opt, gs):
        for step_grads in gs:
            for p, g in zip(params, step_grads):
                p.grad = ct.tensor(g)
            opt.step()

    p_full = make_params(np.float32)
    opt_full = ct.optim.Adam(p_full, lr=0.01, amsgrad=True)
    run(p_full, opt_full, grads)

    p_a = make_params(np.float32)
    opt_a = ct.optim.Adam(p_a, lr=0.01, amsgrad=True)
    run(p_a, opt_a, grads[:3])
    sd = copy.deepcopy(opt_a.state_dict())
    p_b = make_params(np.float32, seed=9)
    for dst, src in zip(p_b, p_a):
        with ct.no_grad():
            dst.copy_(src)
    opt_b = ct.optim.Adam(p_b, lr=0.5)
    opt_b.load_state_dict(sd)
    assert opt_b.param_groups[0]["lr"] == 0.01 and opt_b.param_groups[0]["params"][0] is p_b[0]
    assert opt_b.state[p_b[0]]["exp_avg"] is not sd["state"][0]["exp_avg"]  # copied
    run(p_b, opt_b, grads[3:])
    for a, b in zip(p_full, p_b):
        np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())


def test_load_torch_state_dict_values():
    """A torch optimizer state (tensors converted to ours) loads and continues identically."""
    arrays = param_arrays(np.float32)

    def torch_side(torch):
        tp = [torch.tensor(a.copy(), requires_grad=True) for a in arrays]
        t_opt = torch.optim.SGD(tp, lr=0.1, momentum=0.9)
        for t in tp:
            t.grad = torch.ones_like(t)
        t_opt.step()
        sd = t_opt.state_dict()
        state = {str(k): {n: v.clone() for n, v in st.items()} for k, st in sd["state"].items()}  # before step 2
        first = [t.detach().clone() for t in tp]
        for t in tp:
            t.grad = torch.full_like(t, 0.5)
        t_opt.step()
        return dict(state_keys=list(sd["state"]), state=state, param_groups=repr(sd["param_groups"]), first=first,
                    second=[t.detach() for t in tp])

    ref = torch_reference(torch_side, arrays_dict(arrays))
    converted = {"state": {int(k): {n: ct.from_numpy(v.copy()) for n, v in ref["state"][str(int(k))].items()}
                           for k in ref["state_keys"]},
                 "param_groups": literal(ref["param_groups"])}
    cp = make_params(np.float32)
    for c, t in zip(cp, ref["first"]):
        with ct.no_grad():
            c.copy_(ct.tensor(t))
    c_opt = ct.optim.SGD(cp, lr=0.1, momentum=0.9)
    c_opt.load_state_dict(converted)
    for c in cp:
        c.grad = ct.full(tuple(c.shape), 0.5)
    c_opt.step()
    for t, c in zip(ref["second"], cp):
        np.testing.assert_allclose(c.detach().numpy(), t, **F32)


def arrays_dict(arrays):
    return {f"p{i}": a for i, a in enumerate(arrays)}


def test_load_state_dict_errors():
    cp = make_params(np.float32)
    opt = ct.optim.SGD(cp, lr=0.1)
    sd = opt.state_dict()
    other = ct.optim.SGD([{"params": cp[:1]}, {"params": cp[1:]}], lr=0.1)
    with pytest.raises(ValueError, match="different number of parameter groups"):
        other.load_state_dict(sd)
    small = ct.optim.SGD(cp[:2], lr=0.1)
    with pytest.raises(ValueError, match="doesn't match the size"):
        small.load_state_dict(sd)


def test_zero_grad_and_add_param_group():
    cp = make_params(np.float32)
    opt = ct.optim.SGD(cp[:2], lr=0.1, momentum=0.5)
    opt.add_param_group({"params": cp[2], "lr": 0.01})
    assert opt.param_groups[1]["lr"] == 0.01 and opt.param_groups[1]["momentum"] == 0.5
    for p in cp:
        p.grad = ct.ones(tuple(p.shape))
    opt.zero_grad(set_to_none=False)
    assert all(np.all(p.grad.numpy() == 0) for p in cp)
    opt.zero_grad()
    assert all(p.grad is None for p in cp)
    with pytest.raises(ValueError, match="more than one parameter group"):
        opt.add_param_group({"params": [cp[0]]})


def test_optimizer_argument_errors():
    p = nn.Parameter(ct.zeros(2))
    with pytest.raises(ValueError, match="empty parameter list"):
        ct.optim.SGD([], lr=0.1)
    with pytest.raises(TypeError, match="iterable of Tensors"):
        ct.optim.SGD(p, lr=0.1)
    with pytest.raises(ValueError, match="Nesterov momentum requires a momentum and zero dampening"):
        ct.optim.SGD([p], lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="Invalid learning rate"):
        ct.optim.Adam([p], lr=-1)
    with pytest.raises(ValueError, match="Invalid beta parameter at index 1"):
        ct.optim.Adam([p], betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="non-leaf"):
        ct.optim.SGD([p * 2], lr=0.1)


def test_step_updates_in_place_and_closure():
    p = nn.Parameter(ct.tensor([1.0, 2.0]))
    arr = p.detach().numpy()
    opt = ct.optim.SGD([p], lr=0.5)

    def closure():
        opt.zero_grad()
        loss = (p * p).sum()
        loss.backward()
        return loss

    loss = opt.step(closure)
    assert loss.item() == 5.0
    assert p.detach().numpy() is arr  # same storage, updated in place
    np.testing.assert_allclose(p.detach().numpy(), [0.0, 0.0])


# ------------------------------------------------------------------ schedulers
def scheduler_parity(make_t, make_c, steps=12, groups=2):
    """``make_t(torch, optimizer)`` and ``make_c(optimizer)``: the same
    schedule over SGD with per-group lrs; lrs agree at every step."""
    lrs = [0.1 * (i + 1) for i in range(groups)]

    def torch_side(torch):
        tps = [torch.zeros(1, requires_grad=True) for _ in range(groups)]
        t_opt = torch.optim.SGD([{"params": [p], "lr": lr} for p, lr in zip(tps, lrs)], lr=1.0)
        t_s = make_t(torch, t_opt)
        last, group_lrs = [], []
        for _ in range(steps):
            last.append([float(v) for v in t_s.get_last_lr()])
            group_lrs.append([float(g["lr"]) for g in t_opt.param_groups])
            t_opt.step()
            t_s.step()
        return dict(last=last, group_lrs=group_lrs, last_epoch=t_s.last_epoch)

    ref = torch_reference(torch_side)
    cps = [nn.Parameter(ct.zeros(1)) for _ in range(groups)]
    c_opt = ct.optim.SGD([{"params": [p], "lr": lr} for p, lr in zip(cps, lrs)], lr=1.0)
    c_s = make_c(c_opt)
    history = []
    for t_last, t_group_lrs in zip(ref["last"], ref["group_lrs"]):
        np.testing.assert_allclose(c_s.get_last_lr(), t_last, rtol=1e-12)
        assert [g["lr"] for g in c_opt.param_groups] == pytest.approx(list(t_group_lrs), rel=1e-12)
        history.append(list(c_s.get_last_lr()))
        c_opt.step()
        c_s.step()
    assert len(history) == steps
    assert c_s.last_epoch == ref["last_epoch"]
    return c_s, c_opt, history


def test_lambda_lr_parity():
    scheduler_parity(lambda torch, o: torch.optim.lr_scheduler.LambdaLR(o, lambda e: 0.9 ** e + 0.1 * (e % 3)),
                     lambda o: ct.optim.lr_scheduler.LambdaLR(o, lambda e: 0.9 ** e + 0.1 * (e % 3)))
    scheduler_parity(lambda torch, o: torch.optim.lr_scheduler.LambdaLR(o, [lambda e: 1 / (e + 1), lambda e: e]),
                     lambda o: ct.optim.lr_scheduler.LambdaLR(o, [lambda e: 1 / (e + 1), lambda e: e]))


def test_step_and_exponential_lr_parity():
    scheduler_parity(lambda torch, o: torch.optim.lr_scheduler.StepLR(o, step_size=3, gamma=0.5),
                     lambda o: ct.optim.lr_scheduler.StepLR(o, step_size=3, gamma=0.5))
    scheduler_parity(lambda torch, o: torch.optim.lr_scheduler.ExponentialLR(o, gamma=0.8),
                     lambda o: ct.optim.lr_scheduler.ExponentialLR(o, gamma=0.8))


def test_noam_lr_is_the_paper_formula():
    d_model, warmup, factor = 64, 4, 2.0

    def rate(s):
        return factor * d_model ** -0.5 * min(s ** -0.5, s * warmup ** -1.5)

    _, _, history = scheduler_parity(
        # torch's LambdaLR scales each group's base lr (0.1, 0.2): divide it out
        lambda torch, o: torch.optim.lr_scheduler.LambdaLR(o, [lambda e, lr=lr: rate(e + 1) / lr for lr in (0.1, 0.2)]),
        lambda o: ct.optim.lr_scheduler.NoamLR(o, d_model, warmup, factor=factor))
    lrs = [h[0] for h in history]
    assert lrs[0] == pytest.approx(rate(1)) and lrs[warmup - 1] == pytest.approx(max(lrs))  # peak at warmup
    assert all(a < b for a, b in zip(lrs[:warmup - 1], lrs[1:warmup]))  # linear warmup
    assert all(a > b for a, b in zip(lrs[warmup:], lrs[warmup + 1:]))  # then inverse sqrt decay
    assert lrs[-1] == pytest.approx(factor * d_model ** -0.5 * len(lrs) ** -0.5)
    with pytest.raises(ValueError, match="warmup_steps must be positive"):
        ct.optim.lr_scheduler.NoamLR(ct.optim.SGD([nn.Parameter(ct.zeros(1))], lr=1), 8, 0)


def test_scheduler_state_dict_roundtrip():
    sched, opt, _ = scheduler_parity(lambda torch, o: torch.optim.lr_scheduler.StepLR(o, 2, 0.5),
                                     lambda o: ct.optim.lr_scheduler.StepLR(o, 2, 0.5), steps=5)
    sd = sched.state_dict()
    assert "optimizer" not in sd and sd["last_epoch"] == 5
    opt2 = ct.optim.SGD([{"params": [nn.Parameter(ct.zeros(1))]}, {"params": [nn.Parameter(ct.zeros(1))]}], lr=1.0)
    opt2.load_state_dict(opt.state_dict())
    s2 = ct.optim.lr_scheduler.StepLR(opt2, 2, 0.5)
    s2.load_state_dict(sd)
    for _ in range(3):
        sched.step()
        s2.step()
        assert s2.get_last_lr() == sched.get_last_lr()
    lam = ct.optim.lr_scheduler.LambdaLR(ct.optim.SGD([nn.Parameter(ct.zeros(1))], lr=1.0), lambda e: e)
    assert lam.state_dict()["lr_lambdas"] == [None]  # functions are not stored, as torch
    noam = ct.optim.lr_scheduler.NoamLR(ct.optim.Adam([nn.Parameter(ct.zeros(1))]), 16, 10)
    for _ in range(7):
        noam.step()
    fresh = ct.optim.lr_scheduler.NoamLR(ct.optim.Adam([nn.Parameter(ct.zeros(1))]), 16, 10)
    fresh.load_state_dict(noam.state_dict())
    noam.step()
    fresh.step()
    assert fresh.get_last_lr() == noam.get_last_lr()
