"""Optimizers and LR schedulers: torch parity over several steps (per-group
options included), torch's state_dict layout, resuming, errors."""
import copy

import numpy as np
import pytest

import ctransformer as ct
import ctransformer.nn as nn
from nn_parity import F32, F64, copy_weights

torch = pytest.importorskip("torch")

SHAPES = [(3, 4), (4,), (2, 2, 3)]


def make_params(dtype, seed=0):
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(s).astype(dtype) for s in SHAPES]
    return ([torch.tensor(a.copy(), requires_grad=True) for a in arrays],
            [nn.Parameter(ct.tensor(a.copy())) for a in arrays])


def run_parity(t_cls, c_cls, kwargs, dtype=np.float32, steps=5, groups=False, skip_grad=None):
    """Feed both optimizers the same gradients for ``steps`` steps; compare
    parameters and state after each.  ``groups`` splits the parameters into
    two groups, the second with its own lr (and weight decay)."""
    tp, cp = make_params(dtype)
    if groups:
        extra = dict(lr=kwargs.get("lr", 1e-3) * 3, weight_decay=0.05)
        t_opt = t_cls([{"params": tp[:2]}, {"params": tp[2:], **extra}], **kwargs)
        c_opt = c_cls([{"params": cp[:2]}, {"params": cp[2:], **extra}], **kwargs)
    else:
        t_opt, c_opt = t_cls(tp, **kwargs), c_cls(cp, **kwargs)
    rng = np.random.default_rng(1)
    tol = F64 if dtype == np.float64 else F32
    for step in range(steps):
        for i, (t, c) in enumerate(zip(tp, cp)):
            if skip_grad is not None and skip_grad(step, i):
                t.grad, c.grad = None, None
                continue
            g = rng.standard_normal(t.shape).astype(dtype)
            t.grad = torch.tensor(g)
            c.grad = ct.tensor(g)
        t_opt.step()
        c_opt.step()
        for i, (t, c) in enumerate(zip(tp, cp)):
            np.testing.assert_allclose(c.detach().numpy(), t.detach().numpy(), **tol, err_msg=f"param {i} at step {step}")
    t_sd, c_sd = t_opt.state_dict(), c_opt.state_dict()
    assert sorted(c_sd["state"]) == sorted(t_sd["state"])
    for k, t_state in t_sd["state"].items():
        assert sorted(c_sd["state"][k]) == sorted(t_state)
        for name, tv in t_state.items():
            cv = c_sd["state"][k][name]
            np.testing.assert_allclose(cv.numpy(), tv.numpy(), **tol, err_msg=f"state {k}.{name}")
            assert cv.dtype == np.dtype(str(tv.dtype).replace("torch.", ""))
    assert [sorted(g) for g in c_sd["param_groups"]] == [sorted(g) for g in t_sd["param_groups"]]
    for cg, tg in zip(c_sd["param_groups"], t_sd["param_groups"]):
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
    run_parity(torch.optim.SGD, ct.optim.SGD, kw, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kw", ADAM_CASES, ids=str)
def test_adam_parity(kw, dtype):
    run_parity(torch.optim.Adam, ct.optim.Adam, kw, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kw", ADAM_CASES, ids=str)
def test_adamw_parity(kw, dtype):
    run_parity(torch.optim.AdamW, ct.optim.AdamW, kw, dtype)


@pytest.mark.parametrize("t_cls,c_cls,kw", [
    (torch.optim.SGD, ct.optim.SGD, dict(lr=0.1, momentum=0.9)),
    (torch.optim.Adam, ct.optim.Adam, dict(lr=0.01)),
    (torch.optim.AdamW, ct.optim.AdamW, dict(lr=0.01, amsgrad=True)),
])
def test_per_group_options_parity(t_cls, c_cls, kw):
    run_parity(t_cls, c_cls, kw, groups=True)


def test_parameters_without_grad_are_skipped_like_torch():
    run_parity(torch.optim.Adam, ct.optim.Adam, dict(lr=0.01), skip_grad=lambda step, i: (step + i) % 3 == 0)
    run_parity(torch.optim.SGD, ct.optim.SGD, dict(lr=0.1, momentum=0.9), skip_grad=lambda step, i: i == 1 and step < 2)


def test_defaults_match_torch():
    for t_cls, c_cls in [(torch.optim.SGD, ct.optim.SGD), (torch.optim.Adam, ct.optim.Adam),
                         (torch.optim.AdamW, ct.optim.AdamW)]:
        t_opt = t_cls([torch.zeros(1, requires_grad=True)])
        c_opt = c_cls([nn.Parameter(ct.zeros(1))])
        assert c_opt.defaults == t_opt.defaults, t_cls.__name__
    assert ct.optim.AdamW([nn.Parameter(ct.zeros(1))]).defaults["weight_decay"] == 0.01


def test_training_loop_parity_with_model():
    """A model, a loss, backward, clip, step: 4 iterations agree with torch."""
    def build(m):
        return m.Sequential(m.Linear(5, 8), m.Tanh(), m.Linear(8, 3))
    tm, cm = build(torch.nn), build(nn)
    copy_weights(tm, cm)
    t_opt = torch.optim.AdamW(tm.parameters(), lr=0.02)
    c_opt = ct.optim.AdamW(cm.parameters(), lr=0.02)
    rng = np.random.default_rng(0)
    for _ in range(4):
        x = rng.standard_normal((6, 5)).astype(np.float32)
        y = rng.integers(0, 3, 6)
        for m, opt, lib, F in [(tm, t_opt, torch, torch.nn.functional), (cm, c_opt, ct, nn.functional)]:
            opt.zero_grad()
            loss = F.cross_entropy(m(lib.tensor(x)), lib.tensor(y))
            loss.backward()
            lib.nn.utils.clip_grad_norm_(m.parameters(), 0.5)
            opt.step()
    t_sd = tm.state_dict()
    for k, v in cm.state_dict().items():
        np.testing.assert_allclose(v.numpy(), t_sd[k].numpy(), rtol=1e-4, atol=1e-5, err_msg=k)


def test_state_dict_resume_equals_uninterrupted():
    rng = np.random.default_rng(3)
    grads = [[rng.standard_normal(s).astype(np.float32) for s in SHAPES] for _ in range(6)]

    def run(params, opt, gs):
        for step_grads in gs:
            for p, g in zip(params, step_grads):
                p.grad = ct.tensor(g)
            opt.step()

    _, p_full = make_params(np.float32)
    opt_full = ct.optim.Adam(p_full, lr=0.01, amsgrad=True)
    run(p_full, opt_full, grads)

    _, p_a = make_params(np.float32)
    opt_a = ct.optim.Adam(p_a, lr=0.01, amsgrad=True)
    run(p_a, opt_a, grads[:3])
    sd = copy.deepcopy(opt_a.state_dict())
    _, p_b = make_params(np.float32, seed=9)
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
    tp, cp = make_params(np.float32)
    t_opt = torch.optim.SGD(tp, lr=0.1, momentum=0.9)
    for t in tp:
        t.grad = torch.ones_like(t)
    t_opt.step()
    sd = t_opt.state_dict()
    converted = {"state": {k: {n: ct.from_numpy(v.numpy().copy()) for n, v in s.items()}
                           for k, s in sd["state"].items()},
                 "param_groups": sd["param_groups"]}
    for c, t in zip(cp, tp):
        with ct.no_grad():
            c.copy_(ct.tensor(t.detach().numpy()))
    c_opt = ct.optim.SGD(cp, lr=0.1, momentum=0.9)
    c_opt.load_state_dict(converted)
    for t, c in zip(tp, cp):
        t.grad = torch.full_like(t, 0.5)
        c.grad = ct.full(tuple(c.shape), 0.5)
    t_opt.step()
    c_opt.step()
    for t, c in zip(tp, cp):
        np.testing.assert_allclose(c.detach().numpy(), t.detach().numpy(), **F32)


def test_load_state_dict_errors():
    _, cp = make_params(np.float32)
    opt = ct.optim.SGD(cp, lr=0.1)
    sd = opt.state_dict()
    other = ct.optim.SGD([{"params": cp[:1]}, {"params": cp[1:]}], lr=0.1)
    with pytest.raises(ValueError, match="different number of parameter groups"):
        other.load_state_dict(sd)
    small = ct.optim.SGD(cp[:2], lr=0.1)
    with pytest.raises(ValueError, match="doesn't match the size"):
        small.load_state_dict(sd)


def test_zero_grad_and_add_param_group():
    _, cp = make_params(np.float32)
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
    tps = [torch.zeros(1, requires_grad=True) for _ in range(groups)]
    cps = [nn.Parameter(ct.zeros(1)) for _ in range(groups)]
    lrs = [0.1 * (i + 1) for i in range(groups)]
    t_opt = torch.optim.SGD([{"params": [p], "lr": lr} for p, lr in zip(tps, lrs)], lr=1.0)
    c_opt = ct.optim.SGD([{"params": [p], "lr": lr} for p, lr in zip(cps, lrs)], lr=1.0)
    t_s, c_s = make_t(t_opt), make_c(c_opt)
    history = []
    for _ in range(steps):
        np.testing.assert_allclose(c_s.get_last_lr(), t_s.get_last_lr(), rtol=1e-12)
        assert [g["lr"] for g in c_opt.param_groups] == pytest.approx([g["lr"] for g in t_opt.param_groups],
                                                                       rel=1e-12)
        history.append(list(c_s.get_last_lr()))
        t_opt.step()
        c_opt.step()
        t_s.step()
        c_s.step()
    assert c_s.last_epoch == t_s.last_epoch
    return c_s, c_opt, history


def test_lambda_lr_parity():
    scheduler_parity(lambda o: torch.optim.lr_scheduler.LambdaLR(o, lambda e: 0.9 ** e + 0.1 * (e % 3)),
                     lambda o: ct.optim.lr_scheduler.LambdaLR(o, lambda e: 0.9 ** e + 0.1 * (e % 3)))
    scheduler_parity(lambda o: torch.optim.lr_scheduler.LambdaLR(o, [lambda e: 1 / (e + 1), lambda e: e]),
                     lambda o: ct.optim.lr_scheduler.LambdaLR(o, [lambda e: 1 / (e + 1), lambda e: e]))


def test_step_and_exponential_lr_parity():
    scheduler_parity(lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=3, gamma=0.5),
                     lambda o: ct.optim.lr_scheduler.StepLR(o, step_size=3, gamma=0.5))
    scheduler_parity(lambda o: torch.optim.lr_scheduler.ExponentialLR(o, gamma=0.8),
                     lambda o: ct.optim.lr_scheduler.ExponentialLR(o, gamma=0.8))


def test_noam_lr_is_the_paper_formula():
    d_model, warmup, factor = 64, 4, 2.0

    def rate(s):
        return factor * d_model ** -0.5 * min(s ** -0.5, s * warmup ** -1.5)

    _, _, history = scheduler_parity(
        # torch's LambdaLR scales each group's base lr (0.1, 0.2): divide it out
        lambda o: torch.optim.lr_scheduler.LambdaLR(o, [lambda e, lr=lr: rate(e + 1) / lr for lr in (0.1, 0.2)]),
        lambda o: ct.optim.lr_scheduler.NoamLR(o, d_model, warmup, factor=factor))
    lrs = [h[0] for h in history]
    assert lrs[0] == pytest.approx(rate(1)) and lrs[warmup - 1] == pytest.approx(max(lrs))  # peak at warmup
    assert all(a < b for a, b in zip(lrs[:warmup - 1], lrs[1:warmup]))  # linear warmup
    assert all(a > b for a, b in zip(lrs[warmup:], lrs[warmup + 1:]))  # then inverse sqrt decay
    assert lrs[-1] == pytest.approx(factor * d_model ** -0.5 * len(lrs) ** -0.5)
    with pytest.raises(ValueError, match="warmup_steps must be positive"):
        ct.optim.lr_scheduler.NoamLR(ct.optim.SGD([nn.Parameter(ct.zeros(1))], lr=1), 8, 0)


def test_scheduler_state_dict_roundtrip():
    sched, opt, _ = scheduler_parity(lambda o: torch.optim.lr_scheduler.StepLR(o, 2, 0.5),
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
