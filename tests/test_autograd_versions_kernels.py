"""The version-counter check through kernel-backed ops (Linear, LayerNorm,
LSTM, GRU, the Transformer's fused feed-forward and attention) and the
optimizers' in-place updates: an ``optimizer.step()`` (or any in-place
change) between forward and backward is refused where torch refuses it, and
allowed where torch allows it."""
import numpy as np
import pytest

import ctransformer as ct

MESSAGE = "one of the variables needed for gradient computation has been modified by an inplace operation"

# name -> (builder(lib) -> module, input shape, input requires grad, optimizer name)
CASES = {
    "linear_input_grad": (lambda lib: lib.nn.Linear(3, 2), (4, 3), True, "SGD"),
    "linear_no_input_grad": (lambda lib: lib.nn.Linear(3, 2), (4, 3), False, "SGD"),
    "layernorm": (lambda lib: lib.nn.LayerNorm(3), (4, 3), False, "Adam"),
    "lstm": (lambda lib: lib.nn.LSTM(3, 4), (5, 2, 3), False, "Adam"),
    "gru": (lambda lib: lib.nn.GRU(3, 4, batch_first=True), (2, 5, 3), True, "SGD"),
    "encoder_layer": (lambda lib: lib.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0), (5, 2, 8), True, "Adam"),
}


def step_then_backward(lib, case, x):
    """Forward, an optimizer step on made-up gradients, then backward:
    returns the RuntimeError's message, or None if backward ran."""
    build, _, input_grad, opt_name = CASES[case]
    lib.manual_seed(0)
    module = build(lib)
    inp = lib.tensor(x, requires_grad=input_grad)
    out = module(inp)
    out = out[0] if isinstance(out, tuple) else out
    opt = getattr(lib.optim, opt_name)(module.parameters(), lr=0.1)
    for p in module.parameters():
        p.grad = lib.ones_like(p)
    opt.step()
    try:
        out.sum().backward()
    except RuntimeError as err:
        return str(err)
    return None


@pytest.mark.parametrize("case", sorted(CASES))
def test_step_between_forward_and_backward_like_torch(case, torch_ref):
    x = np.random.default_rng(0).standard_normal(CASES[case][1]).astype(np.float32)
    ref = torch_ref(lambda torch: dict(raised=step_then_backward(torch, case, x) is not None), inputs=dict(x=x))
    message = step_then_backward(ct, case, x)
    assert (message is not None) == bool(ref["raised"]), (case, message)
    if message is not None:
        assert message.startswith(MESSAGE)


def test_in_place_change_of_a_saved_weight_without_optimizer():
    lstm = ct.nn.LSTM(3, 4)
    out, _ = lstm(ct.randn(5, 2, 3))
    with ct.no_grad():
        lstm.weight_hh_l0.mul_(2)
    with pytest.raises(RuntimeError, match=MESSAGE):
        out.sum().backward()


def test_step_after_backward_is_fine():
    lin = ct.nn.Linear(3, 2)
    opt = ct.optim.Adam(lin.parameters())
    for _ in range(2):
        opt.zero_grad()
        lin(ct.randn(4, 3, requires_grad=True)).sum().backward()
        opt.step()
    assert lin.weight.grad is not None
