"""ReduceLROnPlateau, MultiStepLR, WeightedRandomSampler and
SubsetRandomSampler as torch's: the learning-rate trajectories for a metric
sequence under every option, against torch 2.13 (live, or recorded in
tests/golden without torch); the samplers' draws (which follow our
generator, not torch's) by their distribution, and torch's exception
classes for bad arguments."""
import numpy as np
import pytest

import ctransformer as ct
from misuse import assert_torchs_classes

METRICS = [1.0, 0.9, 0.95, 0.95, 0.95, 0.89, 0.9, 0.9, 0.9, 0.9, 0.5, 0.6, 0.6, 0.6, 0.6, 0.6]
SETTINGS = {
    "default_patience_2": dict(patience=2),
    "max_mode": dict(mode="max", patience=1, factor=0.5),
    "abs_threshold": dict(patience=1, threshold=0.05, threshold_mode="abs"),
    "cooldown": dict(patience=1, cooldown=2, factor=0.5),
    "min_lr": dict(patience=0, factor=0.1, min_lr=0.02),
    "min_lr_per_group": dict(patience=0, factor=0.5, min_lr=[0.3, 0.0]),
    "eps": dict(patience=0, factor=0.999999, eps=1e-3),
}


def _trajectories(lib) -> dict:
    out = {}
    for name, kw in SETTINGS.items():
        w1, w2 = lib.zeros(2, requires_grad=True), lib.zeros(2, requires_grad=True)
        opt = lib.optim.SGD([{"params": [w1]}, {"params": [w2], "lr": 0.4}], lr=1.0)
        sched = lib.optim.lr_scheduler.ReduceLROnPlateau(opt, **kw)
        lrs = []
        for m in METRICS:
            opt.step()
            sched.step(lib.tensor(m) if name == "eps" else m)
            lrs.append([g["lr"] for g in opt.param_groups])
        out[name] = np.array(lrs)
        out[name + "_last"] = np.array(sched.get_last_lr())
    return out


def _multistep(lib) -> dict:
    out = {}
    for name, milestones in {"plain": [2, 5], "unsorted_repeated": [6, 2, 2]}.items():
        opt = lib.optim.SGD([lib.zeros(1, requires_grad=True)], lr=1.0)
        sched = lib.optim.lr_scheduler.MultiStepLR(opt, milestones, gamma=0.5)
        lrs = []
        for _ in range(8):
            opt.step()
            sched.step()
            lrs.append(sched.get_last_lr()[0])
        out[name] = np.array(lrs)
    return out


def test_multistep_lr_as_torch(torch_ref):
    theirs = torch_ref(_multistep)
    ours = _multistep(ct)
    for key, ref in theirs.items():
        np.testing.assert_allclose(ours[key], ref, rtol=1e-12, atol=0, err_msg=key)


def test_subset_random_sampler_permutes_the_subset():
    ct.manual_seed(0)
    sampler = ct.utils.data.SubsetRandomSampler([10, 20, 30, 40])
    first, second = list(sampler), list(sampler)
    assert sorted(first) == sorted(second) == [10, 20, 30, 40] and len(sampler) == 4

    def order(seed):
        return list(ct.utils.data.SubsetRandomSampler(list(range(30)), generator=ct.Generator().manual_seed(seed)))
    assert order(5) == order(5) and order(5) != order(6)  # the generator's draws, a fresh order per epoch
    loader = ct.utils.data.DataLoader(list(range(50)), batch_size=3, sampler=sampler)
    assert sorted(int(v) for b in loader for v in b) == [10, 20, 30, 40]


def test_reduce_lr_on_plateau_as_torch(torch_ref):
    theirs = torch_ref(_trajectories)
    ours = _trajectories(ct)
    for key, ref in theirs.items():
        np.testing.assert_allclose(ours[key], ref, rtol=1e-12, atol=0, err_msg=key)


MISUSE = {
    "plateau_factor": lambda lib: lib.optim.lr_scheduler.ReduceLROnPlateau(
        lib.optim.SGD([lib.zeros(1, requires_grad=True)], lr=1.0), factor=1.0),
    "plateau_mode": lambda lib: lib.optim.lr_scheduler.ReduceLROnPlateau(
        lib.optim.SGD([lib.zeros(1, requires_grad=True)], lr=1.0), mode="lowest"),
    "plateau_threshold_mode": lambda lib: lib.optim.lr_scheduler.ReduceLROnPlateau(
        lib.optim.SGD([lib.zeros(1, requires_grad=True)], lr=1.0), threshold_mode="ratio"),
    "plateau_min_lrs": lambda lib: lib.optim.lr_scheduler.ReduceLROnPlateau(
        lib.optim.SGD([lib.zeros(1, requires_grad=True)], lr=1.0), min_lr=[0.1, 0.2]),
    "sampler_num_samples": lambda lib: lib.utils.data.WeightedRandomSampler([1.0, 2.0], 0),
    "sampler_replacement": lambda lib: lib.utils.data.WeightedRandomSampler([1.0, 2.0], 2, replacement=1),
    "sampler_weights_2d": lambda lib: lib.utils.data.WeightedRandomSampler([[1.0, 2.0]], 2),
    "sampler_too_many": lambda lib: list(lib.utils.data.WeightedRandomSampler([1.0, 2.0], 3, replacement=False)),
    "sampler_negative": lambda lib: list(lib.utils.data.WeightedRandomSampler([1.0, -2.0], 3)),
    "multinomial_too_many": lambda lib: lib.multinomial(lib.tensor([1.0, 2.0]), 3),
}


def test_misuse_raises_torchs_classes(torch_ref):
    assert_torchs_classes(torch_ref, MISUSE, ct)


def test_weighted_sampler_draws_in_proportion():
    ct.manual_seed(0)
    draws = list(ct.utils.data.WeightedRandomSampler([1.0, 3.0, 0.0], 4000))
    counts = np.bincount(draws, minlength=3)
    assert len(draws) == 4000 and counts[2] == 0
    assert abs(counts[1] / 4000 - 0.75) < 0.03  # 0.75 +- 4.4 standard deviations


def test_weighted_sampler_without_replacement_and_in_a_loader():
    ct.manual_seed(1)
    sampler = ct.utils.data.WeightedRandomSampler(ct.tensor([0.1, 5.0, 1.0, 0.0]), 3, replacement=False)
    assert sorted(sampler) == [0, 1, 2] and len(sampler) == 3  # the zero-weight item is never drawn
    loader = ct.utils.data.DataLoader(list(range(4)), batch_size=2, sampler=sampler)
    batches = list(loader)
    assert [len(b) for b in batches] == [2, 1] and sorted(int(v) for b in batches for v in b) == [0, 1, 2]


def test_weighted_sampler_follows_the_generator():
    def draw(seed):
        return list(ct.utils.data.WeightedRandomSampler([1.0, 1.0, 1.0], 20, generator=ct.Generator().manual_seed(seed)))
    assert draw(3) == draw(3) and draw(3) != draw(4)


@pytest.mark.parametrize("worse", [float("nan"), 2.0])
def test_reduce_lr_on_plateau_counts_a_nan_metric_as_no_better(worse):
    """A NaN metric is never better than the best (a bad epoch), as in torch."""
    opt = ct.optim.SGD([ct.zeros(1, requires_grad=True)], lr=1.0)
    sched = ct.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0)
    sched.step(1.0)
    sched.step(worse)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.1)


def test_multinomial_without_replacement_runs_out_of_weight_as_torch():
    """torch draws the categories that have weight first, then zero-weight ones (NumPy refused)."""
    ct.manual_seed(2)
    out = ct.multinomial(ct.tensor([[1.0, 0.0, 0.0, 0.0], [0.0, 2.0, 1.0, 0.0]]), 3).numpy()
    assert out[0, 0] == 0 and sorted(out[0]) != [0, 0, 0] and len(set(out[0])) == 3
    assert set(out[1, :2]) == {1, 2} and out[1, 2] in (0, 3)
