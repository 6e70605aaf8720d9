"""Helpers for torch-parity tests of ctransformer.nn: copy weights between
a torch module and ours through state_dict, run both on the same inputs and
compare outputs and the gradients of inputs and every parameter."""
import numpy as np

import ctransformer as ct

F32 = dict(rtol=2e-4, atol=2e-5)
F64 = dict(rtol=1e-10, atol=1e-12)


def copy_weights(torch_module, our_module):
    """torch -> ours, as the porting guide says."""
    our_module.load_state_dict({k: ct.from_numpy(v.detach().numpy().copy())
                                for k, v in torch_module.state_dict().items()})


def check_module(torch, torch_module, our_module, *arrays, dtype=np.float32, grad_inputs=None, seed=0,
                 tol=None):
    """Forward both modules on ``arrays`` (float arrays become inputs that
    require grad unless grad_inputs says otherwise), backpropagate the same
    random upstream gradient, and compare everything."""
    if dtype == np.float64:
        torch_module.double()
        our_module.double()
    copy_weights(torch_module, our_module)
    tol = tol or (F64 if dtype == np.float64 else F32)
    rng = np.random.default_rng(seed)
    t_in, c_in = [], []
    for i, a in enumerate(arrays):
        a = np.asarray(a)
        is_float = a.dtype.kind == "f"
        if is_float:
            a = a.astype(dtype)
        wants_grad = is_float and (grad_inputs is None or grad_inputs[i])
        t_in.append(torch.tensor(a.copy(), requires_grad=wants_grad))
        c_in.append(ct.tensor(a.copy(), requires_grad=wants_grad))
    t_out = torch_module(*t_in)
    c_out = our_module(*c_in)
    np.testing.assert_allclose(c_out.detach().numpy(), t_out.detach().numpy(), **tol, err_msg="output")
    assert c_out.dtype == np.dtype(str(t_out.dtype).replace("torch.", "")), (c_out.dtype, t_out.dtype)
    g = rng.standard_normal(tuple(t_out.shape)).astype(dtype)
    t_out.backward(torch.tensor(g))
    c_out.backward(ct.tensor(g))
    for i, (t, c) in enumerate(zip(t_in, c_in)):
        if t.requires_grad:
            np.testing.assert_allclose(c.grad.numpy(), t.grad.numpy(), **tol, err_msg=f"grad of input {i}")
    t_params = dict(torch_module.named_parameters())
    c_params = dict(our_module.named_parameters())
    assert list(t_params) == list(c_params)
    for name, tp in t_params.items():
        cp = c_params[name]
        if tp.grad is None:
            assert cp.grad is None or not np.any(cp.grad.numpy()), name
            continue
        np.testing.assert_allclose(cp.grad.numpy(), tp.grad.numpy(), **tol, err_msg=f"grad of {name}")
    return c_out, t_out


def check_state_dict_roundtrip(torch_module, our_module):
    """ours -> torch gives back the same tensors, with the same keys."""
    sd = our_module.state_dict()
    assert list(sd) == list(torch_module.state_dict())
    import torch
    torch_module.load_state_dict({k: torch.from_numpy(v.numpy().copy()) for k, v in sd.items()})
    for k, v in torch_module.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), sd[k].numpy())
