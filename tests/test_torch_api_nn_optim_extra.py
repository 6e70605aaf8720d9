"""nn / functional / optim names the issue lists: SiLU, normalize,
cosine_similarity, KLDivLoss (the Annotated Transformer's label
smoothing), RMSNorm, Flatten, RMSprop and the schedulers
CosineAnnealingLR, LinearLR, OneCycleLR, SequentialLR: parity with torch
(live or golden fixtures), float64 gradchecks, bad inputs."""
import warnings

import numpy as np
import pytest
from tensor_check import assert_parity, both_libraries, check_gradients

import ctransformer as ct
import ctransformer.nn as nn
import ctransformer.nn.functional as F


@pytest.fixture
def x():
    return np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)


def test_functional_parity(x):
    y = np.random.default_rng(1).standard_normal((3, 5)).astype(np.float32)
    assert_parity(lambda lib, a: (lib.nn.functional.silu(a), lib.nn.SiLU()(a)), x)
    assert_parity(lambda lib, a: (lib.nn.functional.normalize(a), lib.nn.functional.normalize(a, p=1.0, dim=0)), x)
    assert_parity(lambda lib, a, b: (lib.nn.functional.cosine_similarity(a, b),
                                     lib.nn.functional.cosine_similarity(a, b, dim=0)), x, y)
    assert_parity(lambda lib, a: (lib.nn.RMSNorm(5)(a), lib.nn.functional.rms_norm(a, (5,), eps=1e-5)), x)
    assert_parity(lambda lib, a: lib.nn.Flatten(0)(a.unsqueeze(0)), x)


def test_kl_div_parity_label_smoothing(x):
    """The Annotated Transformer's LabelSmoothing: KLDivLoss(reduction="sum") against a smoothed
    target with zeros (padding column and padded rows)."""
    target = np.full((3, 5), 0.1 / 3, np.float32)
    target[:, 0] = 0.0
    target[np.arange(3), [2, 1, 4]] = 0.9
    target[1] = 0.0

    def op(lib, a, t):
        logp = lib.nn.functional.log_softmax(a, dim=-1)
        return (lib.nn.KLDivLoss(reduction="sum")(logp, t), lib.nn.functional.kl_div(logp, t, reduction="batchmean"),
                lib.nn.functional.kl_div(logp, t, reduction="none"),
                lib.nn.functional.kl_div(logp, t.log_softmax(-1), reduction="sum", log_target=True))
    # gradients w.r.t. the log-probabilities; w.r.t. the target torch gives NaN wherever the target is 0
    # (the derivative of 0 * log 0 does not exist), so the target's gradient is checked by finite
    # differences on a positive target below
    assert_parity(op, x, target, grad=[0])
    check_gradients(lambda lib, a, t: lib.nn.functional.kl_div(a, t, reduction="sum"), x, target + 0.01)


def test_gradchecks(x):
    y = np.random.default_rng(1).standard_normal((3, 5))
    check_gradients(lambda lib, a: F.silu(a), x)
    check_gradients(lambda lib, a: F.normalize(a, p=3.0), x)
    check_gradients(lambda lib, a, b: F.cosine_similarity(a, b), x, y)
    check_gradients(lambda lib, a, w: F.rms_norm(a, (5,), w), x, y[0])


def test_bad_inputs(x):
    with pytest.raises(ValueError, match="avg is not a valid value for reduction"):
        F.kl_div(ct.tensor(x), ct.tensor(x), reduction="avg")
    with pytest.warns(UserWarning, match="'batchmean' divides only by the batch size"):
        F.kl_div(ct.tensor(x), ct.tensor(x))
    with pytest.raises(RuntimeError, match=r"expected input with shape \[\*, 4\]"):
        nn.RMSNorm(4)(ct.tensor(x))
    with pytest.raises(TypeError, match="must be Tensor"):
        F.silu(x)
    with pytest.raises(ValueError, match="Invalid alpha value"):
        ct.optim.RMSprop(nn.Linear(2, 2).parameters(), alpha=-1)
    with pytest.raises(ValueError, match="either total_steps OR"):
        ct.optim.lr_scheduler.OneCycleLR(ct.optim.SGD(nn.Linear(2, 2).parameters(), lr=0.1), 1.0)
    with pytest.raises(ValueError, match="one more than the number of milestone"):
        opt = ct.optim.SGD(nn.Linear(2, 2).parameters(), lr=0.1)
        ct.optim.lr_scheduler.SequentialLR(opt, [ct.optim.lr_scheduler.LinearLR(opt)], [3])


def _rmsprop_run(lib, kwargs):
    lib.manual_seed(0)
    w = lib.nn.Parameter(lib.tensor(np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)))
    opt = lib.optim.RMSprop([w], **kwargs)
    out = {}
    for step in range(4):
        opt.zero_grad()
        ((w * w * w).sum() + w.sum()).backward()
        opt.step()
        out[f"w{step}"] = w.detach().clone()
    out["state"] = {k: v for k, v in opt.state_dict()["state"][0].items()}
    return out


@pytest.mark.parametrize("kwargs", [dict(lr=0.01), dict(lr=0.01, momentum=0.9, centered=True, weight_decay=0.1),
                                    dict(lr=0.05, alpha=0.9, eps=1e-6, maximize=True)])
def test_rmsprop_parity(kwargs):
    ours, theirs = both_libraries(lambda lib: _rmsprop_run(lib, kwargs))
    for k in theirs:
        if k == "state":
            assert sorted(ours["state"]) == sorted(theirs["state"])
            for s in theirs["state"]:
                np.testing.assert_allclose(ours["state"][s], theirs["state"][s], rtol=1e-5, atol=1e-7, err_msg=s)
        else:
            np.testing.assert_allclose(ours[k], theirs[k], rtol=1e-5, atol=1e-7, err_msg=k)


def _schedules(lib):
    def run(make, n=12, opt_cls="SGD"):
        p = lib.nn.Parameter(lib.zeros(1))
        opt = (lib.optim.SGD([p], lr=0.1, momentum=0.9) if opt_cls == "SGD" else lib.optim.Adam([p], lr=0.1))
        sched = make(opt)
        lrs, moms = [], []
        for _ in range(n):
            lrs.append(opt.param_groups[0]["lr"])
            g = opt.param_groups[0]
            moms.append(g["momentum"] if "momentum" in g else g["betas"][0])
            opt.step()
            sched.step()
        return np.array(lrs), np.array(moms)

    S = lib.optim.lr_scheduler
    out = {}
    out["cos"], _ = run(lambda o: S.CosineAnnealingLR(o, T_max=5, eta_min=0.01))
    out["linear"], _ = run(lambda o: S.LinearLR(o, start_factor=0.25, total_iters=4))
    out["onecycle"], out["onecycle_m"] = run(lambda o: S.OneCycleLR(o, max_lr=1.0, total_steps=12))
    out["onecycle3"], out["onecycle3_m"] = run(
        lambda o: S.OneCycleLR(o, max_lr=0.5, total_steps=12, anneal_strategy="linear", three_phase=True), 12,
        "Adam")
    out["seq"], _ = run(lambda o: S.SequentialLR(o, [S.LinearLR(o, start_factor=0.5, total_iters=3),
                                                     S.CosineAnnealingLR(o, T_max=6)], milestones=[4]))
    return out


def test_scheduler_parity():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns about step order for SequentialLR's inner step(0)
        ours, theirs = both_libraries(_schedules)
    for k in theirs:
        np.testing.assert_allclose(ours[k], theirs[k], rtol=1e-12, atol=1e-15, err_msg=k)
