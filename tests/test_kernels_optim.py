"""optimizer kernels: torch parity for SGD / Adam / AdamW (several steps from
one start), gradient norms and clipping, in-place contract, bad input."""
import numpy as np
import pytest

import ctransformer.kernels as K
from tolerances import F32, F64

STEPS = 5


def tol_for(dtype):
    return F32 if dtype == np.float32 else F64


def random_grads(rng, shape, dtype, steps=STEPS):
    return [rng.standard_normal(shape).astype(dtype) for _ in range(steps)]


def torch_steps(torch_ref, opt_name, start, grads, state_keys, **options):
    """Parameter (and the named optimizer state) after len(grads) steps of
    torch.optim.<opt_name> (single-tensor path), live or from the fixture."""

    def torch_side(torch):
        p = torch.nn.Parameter(torch.tensor(start))
        opt = getattr(torch.optim, opt_name)([p], foreach=False, **options)
        for g in grads:
            p.grad = torch.tensor(g)
            opt.step()
        return dict(param=p, state={k: opt.state[p][k] for k in state_keys})

    ref = torch_ref(torch_side, inputs=dict(start=start, grads=np.stack(grads)))
    return ref["param"], ref["state"]


SGD_CONFIGS = [
    dict(lr=0.1),
    dict(lr=0.1, momentum=0.9),
    dict(lr=0.05, momentum=0.9, dampening=0.3),
    dict(lr=0.05, momentum=0.8, nesterov=True),
    dict(lr=0.1, momentum=0.9, weight_decay=0.01),
    dict(lr=0.1, momentum=0.5, dampening=0.1, weight_decay=0.1, maximize=True),
    dict(lr=0.1, weight_decay=0.2, nesterov=False, maximize=True),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("config", SGD_CONFIGS, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
def test_sgd_matches_torch(rng, dtype, config, torch_ref):
    start = rng.standard_normal((4, 3)).astype(dtype)
    grads = random_grads(rng, (4, 3), dtype)
    momentum = config.get("momentum", 0.0)
    expected, state = torch_steps(torch_ref, "SGD", start, grads, ["momentum_buffer"] if momentum else [], **config)
    param = start.copy()
    buf = np.zeros_like(param) if momentum else None
    for k, g in enumerate(grads):
        K.sgd_step(param, g, buf, first_step=k == 0, **config)
    np.testing.assert_allclose(param, expected, **tol_for(dtype))
    if momentum:
        np.testing.assert_allclose(buf, state["momentum_buffer"], **tol_for(dtype))


ADAM_CONFIGS = [
    ("Adam", dict()),
    ("Adam", dict(lr=0.01, betas=(0.8, 0.99), eps=1e-6)),
    ("Adam", dict(lr=0.01, weight_decay=0.1)),
    ("Adam", dict(lr=0.01, amsgrad=True)),
    ("Adam", dict(lr=0.01, weight_decay=0.05, amsgrad=True, maximize=True)),
    ("AdamW", dict(lr=0.01)),
    ("AdamW", dict(lr=0.01, weight_decay=0.1, amsgrad=True)),
    ("AdamW", dict(lr=0.02, betas=(0.5, 0.9), weight_decay=0.3, maximize=True)),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name,config", ADAM_CONFIGS,
                         ids=[n + "-" + "-".join(f"{k}={v}" for k, v in c.items()) for n, c in ADAM_CONFIGS])
def test_adam_matches_torch(rng, dtype, name, config, torch_ref):
    start = rng.standard_normal((5, 2)).astype(dtype)
    # gradients of very different sizes per element, so bias correction and eps matter
    grads = [g * np.array([1e-4, 1.0], dtype) for g in random_grads(rng, (5, 2), dtype)]
    keys = ["exp_avg", "exp_avg_sq"] + (["max_exp_avg_sq"] if config.get("amsgrad", False) else [])
    expected, state = torch_steps(torch_ref, name, start, grads, keys, **config)
    param = start.copy()
    m, v, vmax = np.zeros_like(param), np.zeros_like(param), np.zeros_like(param)
    beta1, beta2 = config.get("betas", (0.9, 0.999))
    options = dict(lr=config.get("lr", 1e-3), beta1=beta1, beta2=beta2, eps=config.get("eps", 1e-8),
                   weight_decay=config.get("weight_decay", 0.01 if name == "AdamW" else 0.0),
                   decoupled_weight_decay=name == "AdamW", amsgrad=config.get("amsgrad", False),
                   max_exp_avg_sq=vmax, maximize=config.get("maximize", False))
    for step, g in enumerate(grads, start=1):
        K.adam_step(param, g, m, v, step, **options)
    tol = tol_for(dtype)
    np.testing.assert_allclose(param, expected, **tol)
    np.testing.assert_allclose(m, state["exp_avg"], **tol)
    np.testing.assert_allclose(v, state["exp_avg_sq"], **tol)
    if options["amsgrad"]:
        np.testing.assert_allclose(vmax, state["max_exp_avg_sq"], **tol)


def test_adam_first_step_by_hand():
    # step 1: m = 0.1 g, v = 0.001 g^2, bias-corrected m/sqrt(v) = sign(g)
    param, g = np.array([1.0, -2.0]), np.array([0.5, -3.0])
    m, v = np.zeros(2), np.zeros(2)
    K.adam_step(param, g, m, v, 1, lr=0.1, eps=0.0)
    np.testing.assert_allclose(param, [0.9, -1.9], rtol=1e-14)
    np.testing.assert_allclose(m, 0.1 * g, rtol=1e-14)
    np.testing.assert_allclose(v, 0.001 * g * g, rtol=1e-12)


def test_sgd_reads_grad_views(rng):
    param = rng.standard_normal((3, 4))
    g = rng.standard_normal((4, 3))
    expected = param - 0.5 * g.T[::-1]
    K.sgd_step(param, g.T[::-1], None, 0.5)
    np.testing.assert_allclose(param, expected, rtol=1e-15)


def test_empty_and_nan(rng):
    p = np.zeros((0, 3), np.float32)
    K.adam_step(p, p.copy(), p.copy(), p.copy(), 1)
    K.sgd_step(p, p.copy(), p.copy(), 0.1, momentum=0.9)
    param = np.ones(3)
    m, v = np.zeros(3), np.zeros(3)
    K.adam_step(param, np.array([1.0, np.nan, 1.0]), m, v, 1)
    assert np.isnan(param[1]) and np.isfinite(param[[0, 2]]).all()
    vmax = np.zeros(3)
    K.adam_step(param, np.ones(3), m, v, 2, amsgrad=True, max_exp_avg_sq=vmax)
    assert np.isnan(vmax[1]) and np.isfinite(vmax[[0, 2]]).all()


# ---------------------------------------------------------------- norms

def grad_list(rng, dtype):
    return [rng.standard_normal(s).astype(dtype) for s in [(3, 4), (5,), (2, 2, 2), ()]]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, 0.5, np.inf])
def test_grad_norm_matches_numpy(rng, dtype, norm_type):
    grads = grad_list(rng, dtype)
    flat = np.concatenate([g.reshape(-1).astype(np.float64) for g in grads])
    expected = np.abs(flat).max() if np.isinf(norm_type) else (np.abs(flat) ** norm_type).sum() ** (1 / norm_type)
    got = K.grad_norm(grads, norm_type)
    assert isinstance(got, float)
    np.testing.assert_allclose(got, expected, rtol=1e-13)
    assert K.grad_norm([]) == 0.0
    assert K.grad_norm(grads[0]) == pytest.approx(np.linalg.norm(grads[0].astype(np.float64)), rel=1e-13)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, np.inf])
@pytest.mark.parametrize("max_norm", [0.5, 1e3])
def test_clip_matches_torch(rng, dtype, norm_type, max_norm, torch_ref):
    grads = grad_list(rng, dtype)

    def torch_side(torch):
        params = [torch.nn.Parameter(torch.zeros(g.shape, dtype=torch.tensor(g).dtype)) for g in grads]
        for p, g in zip(params, grads):
            p.grad = torch.tensor(g)
        total = torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type).item()
        return dict(total=total, grads=[p.grad for p in params])

    ref = torch_ref(torch_side, inputs={f"g{i}": g for i, g in enumerate(grads)})
    total = K.clip_grad_norm(grads, max_norm, norm_type)
    tol = tol_for(dtype)
    np.testing.assert_allclose(total, ref["total"], **tol)
    assert len(ref["grads"]) == len(grads)
    for t, g in zip(ref["grads"], grads):
        np.testing.assert_allclose(g, t, **tol)
    if max_norm < 1:  # it did clip: the new norm is max_norm (up to the 1e-6)
        np.testing.assert_allclose(K.grad_norm(grads, norm_type), max_norm, rtol=1e-5)


def test_clip_nan_and_mixed_dtypes(rng):
    grads = [np.array([3.0, np.nan]), np.ones(2, np.float32)]
    assert np.isnan(K.clip_grad_norm(grads, 1.0))
    assert np.isnan(grads[0]).all() and np.isnan(grads[1]).all()  # torch scales by NaN too
    assert np.isnan(K.grad_norm([np.array([np.nan, 1.0])], np.inf))
    grads = [np.full(4, 3.0), np.full(9, 4.0, np.float32)]  # |g| = sqrt(36 + 144)
    total = K.clip_grad_norm(grads, 1.0)
    np.testing.assert_allclose(total, np.sqrt(180.0), rtol=1e-14)
    np.testing.assert_allclose(grads[1], 4 / (np.sqrt(180) + 1e-6), rtol=1e-6)
    assert K.clip_grad_norm([], 1.0) == 0.0


# ------------------------------------------------------------ bad input

def test_sgd_bad_input(rng):
    p, g = np.zeros((2, 3)), np.ones((2, 3))
    with pytest.raises(ValueError, match="sgd_step: param is updated in place"):
        K.sgd_step(np.zeros((3, 2)).T, g, None, 0.1)
    with pytest.raises(ValueError, match="sgd_step: param is updated in place"):
        K.sgd_step(np.zeros((2, 3))[:, ::-1], g, None, 0.1)
    ro = np.zeros((2, 3))
    ro.setflags(write=False)
    with pytest.raises(ValueError, match="sgd_step: param is updated in place"):
        K.sgd_step(ro, g, None, 0.1)
    with pytest.raises(ValueError, match=r"sgd_step: grad.shape\[1\] must be 3 \(param's shape\), got 4"):
        K.sgd_step(p, np.ones((2, 4)), None, 0.1)
    with pytest.raises(ValueError, match="sgd_step: grad must have 2 dimensions, got 1"):
        K.sgd_step(p, np.ones(6), None, 0.1)
    with pytest.raises(TypeError, match="sgd_step: grad must have dtype float64, got float32"):
        K.sgd_step(p, g.astype(np.float32), None, 0.1)
    with pytest.raises(TypeError, match="sgd_step: momentum_buffer is required, got None"):
        K.sgd_step(p, g, None, 0.1, momentum=0.9)
    with pytest.raises(ValueError, match=r"sgd_step: momentum_buffer must have shape \(2, 3\), got \(3, 2\)"):
        K.sgd_step(p, g, np.zeros((3, 2)), 0.1, momentum=0.9)
    with pytest.raises(ValueError, match="sgd_step: momentum_buffer is updated in place"):
        K.sgd_step(p, g, np.zeros((3, 2)).T, 0.1, momentum=0.9)
    with pytest.raises(ValueError, match="sgd_step: param and momentum_buffer must be separate arrays"):
        K.sgd_step(p, g, p, 0.1, momentum=0.9)
    with pytest.raises(ValueError, match="sgd_step: lr must be >= 0.0, got -0.1"):
        K.sgd_step(p, g, None, -0.1)
    with pytest.raises(ValueError, match="sgd_step: lr must be >= 0.0, got nan"):
        K.sgd_step(p, g, None, float("nan"))
    with pytest.raises(ValueError, match="sgd_step: momentum must be >= 0.0, got -0.5"):
        K.sgd_step(p, g, None, 0.1, momentum=-0.5)
    with pytest.raises(ValueError, match="sgd_step: weight_decay must be >= 0.0, got -1.0"):
        K.sgd_step(p, g, None, 0.1, weight_decay=-1.0)
    with pytest.raises(ValueError, match="sgd_step: nesterov must be used with momentum > 0 and dampening == 0"):
        K.sgd_step(p, g, None, 0.1, nesterov=True)
    with pytest.raises(ValueError, match="dampening=0.1"):
        K.sgd_step(p, g, np.zeros_like(p), 0.1, momentum=0.9, dampening=0.1, nesterov=True)
    with pytest.raises(TypeError, match="sgd_step: param must have dtype float32 or float64, got int64"):
        K.sgd_step(np.zeros(3, np.int64), np.zeros(3, np.int64), None, 0.1)
    assert (p == 0).all()  # nothing was updated by a refused call


def test_adam_bad_input(rng):
    p, g, m, v = (np.zeros(4) for _ in range(4))
    with pytest.raises(ValueError, match="adam_step: step must be > 0, got 0"):
        K.adam_step(p, g, m, v, 0)
    with pytest.raises(ValueError, match=r"adam_step: beta1 must be in \[0.0, 1.0\), got 1.0"):
        K.adam_step(p, g, m, v, 1, beta1=1.0)
    with pytest.raises(ValueError, match=r"adam_step: beta2 must be in \[0.0, 1.0\), got -0.1"):
        K.adam_step(p, g, m, v, 1, beta2=-0.1)
    with pytest.raises(ValueError, match="adam_step: eps must be >= 0.0, got -1e-08"):
        K.adam_step(p, g, m, v, 1, eps=-1e-8)
    with pytest.raises(ValueError, match="adam_step: lr must be >= 0.0, got -0.001"):
        K.adam_step(p, g, m, v, 1, lr=-1e-3)
    with pytest.raises(ValueError, match="adam_step: weight_decay must be >= 0.0"):
        K.adam_step(p, g, m, v, 1, weight_decay=-0.1)
    with pytest.raises(TypeError, match="adam_step: max_exp_avg_sq is required, got None"):
        K.adam_step(p, g, m, v, 1, amsgrad=True)
    with pytest.raises(ValueError, match="adam_step: exp_avg and exp_avg_sq must be separate arrays"):
        K.adam_step(p, g, m, m, 1)
    big = np.zeros(8)
    with pytest.raises(ValueError, match="adam_step: exp_avg is updated in place"):
        K.adam_step(p, g, big[::2], v, 1)
    with pytest.raises(ValueError, match=r"adam_step: exp_avg_sq must have shape \(4,\), got \(5,\)"):
        K.adam_step(p, g, m, np.zeros(5), 1)
    with pytest.raises(TypeError, match="adam_step: exp_avg must have dtype float64, got float32"):
        K.adam_step(p, g, m.astype(np.float32), v, 1)
    with pytest.raises(TypeError, match="adam_step: grad must be a numpy.ndarray, got list"):
        K.adam_step(p, [0.0] * 4, m, v, 1)


def test_norm_bad_input():
    grads = [np.ones(3), np.ones((2, 2))]
    with pytest.raises(ValueError, match="grad_norm: norm_type must be > 0.0, got 0.0"):
        K.grad_norm(grads, 0)
    with pytest.raises(ValueError, match="clip_grad_norm: norm_type must be > 0.0, got -2.0"):
        K.clip_grad_norm(grads, 1.0, -2)
    with pytest.raises(ValueError, match="clip_grad_norm: max_norm must be >= 0.0, got -1.0"):
        K.clip_grad_norm(grads, -1.0)
    with pytest.raises(TypeError, match=r"grad_norm: grads\[1\] must be a numpy.ndarray, got list"):
        K.grad_norm([np.ones(2), [1.0]])
    with pytest.raises(TypeError, match="grad_norm: grads must be a sequence of numpy.ndarray, got int"):
        K.grad_norm(3)
    with pytest.raises(TypeError, match=r"grad_norm: grads\[0\] must have dtype float32 or float64, got int64"):
        K.grad_norm([np.ones(2, np.int64)])
    # every grad is checked before any is scaled
    grads = [np.full(3, 10.0), np.full((4, 2), 10.0).T]
    with pytest.raises(ValueError, match=r"clip_grad_norm: grads\[1\] is updated in place"):
        K.clip_grad_norm(grads, 1.0)
    assert (grads[0] == 10).all()
    # a view is fine when only reading
    assert K.grad_norm(grads, np.inf) == 10.0


RMSPROP_CONFIGS = [
    dict(lr=0.01),
    dict(lr=0.01, alpha=0.9, eps=1e-6, maximize=True),
    dict(lr=0.02, weight_decay=0.1, centered=True),
    dict(lr=0.01, momentum=0.9),
    dict(lr=0.01, momentum=0.8, centered=True, weight_decay=0.05, maximize=True),
]


def rmsprop_reference(param, grads, lr=0.01, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0,
                      centered=False, maximize=False):
    """torch's single-tensor RMSprop, written out in float64 NumPy."""
    p = param.astype(np.float64)
    v, a, b = np.zeros_like(p), np.zeros_like(p), np.zeros_like(p)
    for g in grads:
        g = -g.astype(np.float64) if maximize else g.astype(np.float64)
        g = g + weight_decay * p
        v = alpha * v + (1 - alpha) * g * g
        if centered:
            a = a + (1 - alpha) * (g - a)
            avg = np.sqrt(v - a * a) + eps
        else:
            avg = np.sqrt(v) + eps
        if momentum > 0:
            b = momentum * b + g / avg
            p = p - lr * b
        else:
            p = p - lr * g / avg
    return p, v, a, b


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("config", RMSPROP_CONFIGS, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
def test_rmsprop_step_matches_numpy_reference(rng, dtype, config):
    """rmsprop_step (the kernel behind optim.RMSprop, whose torch parity is
    test_torch_api_nn_optim_extra.py::test_rmsprop_parity) against torch's
    formulas in float64, every state buffer included."""
    start = rng.standard_normal((5, 3)).astype(dtype)
    grads = [g * np.array([1e-3, 1.0, 10.0], dtype) for g in random_grads(rng, (5, 3), dtype)]
    param, v = start.copy(), np.zeros_like(start)
    a = np.zeros_like(start) if config.get("centered") else None
    b = np.zeros_like(start) if config.get("momentum", 0) > 0 else None
    for g in grads:
        K.rmsprop_step(param, g, v, grad_avg=a, momentum_buffer=b, **config)
    p_ref, v_ref, a_ref, b_ref = rmsprop_reference(start, grads, **config)
    tol = tol_for(dtype)
    np.testing.assert_allclose(param, p_ref, **tol)
    np.testing.assert_allclose(v, v_ref, **tol)
    if a is not None:
        np.testing.assert_allclose(a, a_ref, **tol)
    if b is not None:
        np.testing.assert_allclose(b, b_ref, **tol)


def test_rmsprop_step_refuses_missing_state_and_bad_options():
    p, g, v = np.zeros(3, np.float32), np.ones(3, np.float32), np.zeros(3, np.float32)
    with pytest.raises(ValueError, match="rmsprop_step: lr must be >= 0"):
        K.rmsprop_step(p, g, v, lr=-1.0)
    with pytest.raises((TypeError, ValueError), match="rmsprop_step: grad_avg"):
        K.rmsprop_step(p, g, v, centered=True)
    with pytest.raises((TypeError, ValueError), match="rmsprop_step: momentum_buffer"):
        K.rmsprop_step(p, g, v, momentum=0.9)
    with pytest.raises(ValueError, match="rmsprop_step: square_avg"):
        K.rmsprop_step(p, g, np.zeros(6, np.float32)[::2])
    assert (p == 0).all() and (v == 0).all()  # nothing moved
