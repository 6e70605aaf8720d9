"""ParameterList, ParameterDict and Module.get_buffer as torch's: the keys a
state_dict gets, the reprs, a Tensor made a Parameter, slicing, gradients
reaching every parameter through an optimizer step, and torch's exception
classes; compared with torch 2.13 (live, or recorded in tests/golden)."""
import numpy as np

import ctransformer as ct
from misuse import assert_torchs_classes


def _model(lib):
    class Mixture(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.scales = lib.nn.ParameterList([lib.ones(3), lib.nn.Parameter(lib.full((3,), 2.0))])
            self.scales.append(lib.full((3,), 0.5))
            self.named = lib.nn.ParameterDict({"shift": lib.zeros(3)})
            self.named["tilt"] = lib.nn.Parameter(lib.full((3,), 0.25))
            self.register_buffer("offset", lib.full((3,), 0.1))

        def forward(self, x):
            for s in self.scales:
                x = x * s
            return x + self.named["shift"] + self.named["tilt"] * x + self.offset

    return Mixture()


def _run(lib) -> dict:
    m = _model(lib)
    opt = lib.optim.SGD(m.parameters(), lr=0.1)
    x = lib.tensor(np.array([[1.0, -2.0, 3.0]], np.float32))
    m(x).sum().backward()
    grads = {n: p.grad.clone() for n, p in m.named_parameters()}
    opt.step()
    return {"keys": np.array(list(m.state_dict().keys())), "grads": grads,
            "after": {k: v.clone() for k, v in m.state_dict().items()},
            "repr": np.array(repr(m).replace("torch.float32", "float32")),
            "slice_len": np.array(len(m.scales[1:])), "in": np.array("tilt" in m.named),
            "buffer": m.get_buffer("offset"), "is_param": np.array(type(m.scales[0]).__name__)}


def test_parameter_containers_as_torch(torch_ref):
    theirs = torch_ref(_run)
    ours = _run(ct)
    for key in ("keys", "repr", "slice_len", "in", "is_param"):
        assert str(ours[key]) == str(theirs[key]), key
    for group in ("grads", "after"):
        for name, ref in theirs[group].items():
            np.testing.assert_allclose(ours[group][name].numpy(), ref, rtol=1e-6, err_msg=f"{group} {name}")
    np.testing.assert_allclose(ours["buffer"].numpy(), theirs["buffer"])


MISUSE = {
    "get_buffer_missing": lambda lib: lib.nn.Linear(1, 1).get_buffer("nothing"),
    "get_buffer_not_buffer": lambda lib: lib.nn.Linear(1, 1).get_buffer("weight"),
    "parameterlist_index": lambda lib: lib.nn.ParameterList([lib.zeros(1)])[3],
    "parameterdict_key": lambda lib: lib.nn.ParameterDict({"a": lib.zeros(1)})["b"],
}


def test_misuse_raises_torchs_classes(torch_ref):
    assert_torchs_classes(torch_ref, MISUSE, ct)
