"""adam_multi_step: one call for a list of parameters (torch's fused Adam)
gives exactly what adam_step gives parameter by parameter; its checks name
the list entry and run before any parameter moves."""
import numpy as np
import pytest

import ctransformer.kernels as K

SHAPES = [(3, 4), (7,), (), (0, 5), (2, 3, 2)]
CONFIGS = [
    dict(),
    dict(lr=0.01, beta1=0.8, beta2=0.99, eps=1e-6),
    dict(lr=0.01, weight_decay=0.1),
    dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True),
    dict(lr=0.02, amsgrad=True),
    dict(lr=0.02, maximize=True, weight_decay=0.05),
]


def make_group(rng, dtypes):
    """[(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq)] with nonzero state."""
    group = []
    for i, shape in enumerate(SHAPES):
        dt = dtypes[i % len(dtypes)]
        p, g, m = (np.asarray(rng.standard_normal(shape), dt) for _ in range(3))
        v, vmax = (np.asarray(np.abs(rng.standard_normal(shape)), dt) for _ in range(2))
        group.append((p, g, m, v, vmax))
    return group


def copy_group(group):
    return [tuple(a.copy() for a in entry) for entry in group]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()) or "default")
@pytest.mark.parametrize("dtypes", [(np.float32,), (np.float64,), (np.float32, np.float64)], ids=["f32", "f64", "mixed"])
def test_same_bits_as_adam_step_per_parameter(rng, config, dtypes):
    group = make_group(rng, dtypes)
    steps = [1, 2, 5, 1, 30]
    one_by_one = copy_group(group)
    amsgrad = config.get("amsgrad", False)
    for (p, g, m, v, vmax), step in zip(one_by_one, steps):
        K.adam_step(p, g, m, v, step, **config, max_exp_avg_sq=vmax if amsgrad else None)
    fused = copy_group(group)
    K.adam_multi_step([e[0] for e in fused], [e[1] for e in fused], [e[2] for e in fused], [e[3] for e in fused],
                      steps, **config, max_exp_avg_sqs=[e[4] for e in fused] if amsgrad else None)
    for a, b in zip(fused, one_by_one):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)
    # the arrays really moved (the comparison is not between two untouched copies)
    assert not np.array_equal(fused[0][0], group[0][0])


@pytest.mark.parametrize("threads", [1, 2])
def test_pieces_over_the_pool_give_adam_steps_bits(rng, threads):
    """adam_multi_step cuts all the elements into pieces of 8192 and runs them
    on the pool: parameters across piece boundaries (and one of 0 elements),
    both dtypes, at 1 and 2 threads, give adam_step's bits parameter by
    parameter."""
    import ctransformer as ct
    shapes, dtypes = [(2 * 8192 + 5,), (3, 8193), (0,), (8192,), (1,)], [np.float32, np.float64]
    group = []
    for i, shape in enumerate(shapes):
        dt = dtypes[i % 2]
        p, g, m = (np.asarray(rng.standard_normal(shape), dt) for _ in range(3))
        group.append((p, g, m, np.asarray(np.abs(rng.standard_normal(shape)), dt)))
    steps = [3, 1, 2, 7, 1]
    one_by_one = copy_group(group)
    for (p, g, m, v), step in zip(one_by_one, steps):
        K.adam_step(p, g, m, v, step, lr=0.01, weight_decay=0.1)
    fused = copy_group(group)
    before = ct.get_num_threads()
    ct.set_num_threads(threads)
    try:
        K.adam_multi_step(*[[e[k] for e in fused] for k in range(4)], steps, lr=0.01, weight_decay=0.1)
    finally:
        ct.set_num_threads(before)
    for a, b in zip(fused, one_by_one):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)
    assert not np.array_equal(fused[0][0], group[0][0])


def test_empty_list_is_a_no_op():
    assert K.adam_multi_step([], [], [], [], []) is None


def test_bad_input_names_the_entry_and_updates_nothing(rng):
    group = make_group(rng, (np.float64,))[:3]
    params = [e[0] for e in group]
    before = [p.copy() for p in params]
    grads, avgs, sqs = [e[1] for e in group], [e[2] for e in group], [e[3] for e in group]
    with pytest.raises(ValueError, match=r"adam_multi_step: exp_avg_sqs\[2\] must have 1 elements, got 3"):
        K.adam_multi_step(params, grads, avgs, sqs[:2] + [np.zeros(3)], [1, 1, 1])
    with pytest.raises(ValueError, match=r"adam_multi_step: exp_avg_sqs\[1\] must have shape \(7,\), got \(6,\)"):
        K.adam_multi_step(params, grads, avgs, [sqs[0], np.zeros(6), sqs[2]], [1, 1, 1])
    with pytest.raises(TypeError, match=r"adam_multi_step: grads\[1\] must have dtype float64, got float32"):
        K.adam_multi_step(params, [grads[0], grads[1].astype(np.float32), grads[2]], avgs, sqs, [1, 1, 1])
    with pytest.raises(ValueError, match=r"adam_multi_step: steps\[1\] must be > 0, got 0"):
        K.adam_multi_step(params, grads, avgs, sqs, [1, 0, 1])
    with pytest.raises(TypeError, match=r"adam_multi_step: steps\[0\] must be an int, got str"):
        K.adam_multi_step(params, grads, avgs, sqs, ["1", 1, 1])
    with pytest.raises(ValueError, match=r"adam_multi_step: grads must have one entry per parameter \(3\), got 2"):
        K.adam_multi_step(params, grads[:2], avgs, sqs, [1, 1, 1])
    with pytest.raises(TypeError, match="adam_multi_step: params must be a list of arrays, got numpy.ndarray"):
        K.adam_multi_step(params[0], grads, avgs, sqs, [1, 1, 1])
    with pytest.raises(ValueError, match=r"adam_multi_step: exp_avgs\[0\] is updated in place"):
        K.adam_multi_step(params, grads, [np.zeros(24)[::2].reshape(3, 4)] + avgs[1:], sqs, [1, 1, 1])
    with pytest.raises(TypeError, match="adam_multi_step: max_exp_avg_sqs is required when amsgrad=True, got None"):
        K.adam_multi_step(params, grads, avgs, sqs, [1, 1, 1], amsgrad=True)
    with pytest.raises(ValueError, match=r"adam_multi_step: beta1 must be in \[0.0, 1.0\), got 1.0"):
        K.adam_multi_step(params, grads, avgs, sqs, [1, 1, 1], beta1=1.0)
    with pytest.raises(TypeError, match="adam_multi_step: lr must be a float, got str"):
        K.adam_multi_step(params, grads, avgs, sqs, [1, 1, 1], lr="0.1")
    for p, b in zip(params, before):
        np.testing.assert_array_equal(p, b)


def test_single_adam_step_checks_the_state_of_a_0d_parameter():
    """A 0-d parameter has no dims to compare: its state is held to its size."""
    with pytest.raises(ValueError, match="adam_step: exp_avg_sq must have 1 elements, got 3"):
        K.adam_step(np.zeros(()), np.zeros(()), np.zeros(()), np.zeros(3), 1)
