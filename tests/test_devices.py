"""Devices as a CPU-only build of torch has them: any of torch's device
types can be named (scripts write ``device = torch.device("cuda:0")`` before
checking ``cuda.is_available()``), and putting a tensor, a module or a
factory's result on anything but the CPU is refused with torch's exception
class (AssertionError for CUDA).  Compared with torch 2.13 live, or with its
recorded answers (tests/golden) without torch."""
import numpy as np
import pytest

import ctransformer as ct
from misuse import assert_torchs_classes

NAMES = {  # name: case(lib) -> str
    "cuda": lambda lib: str(lib.device("cuda")),
    "cuda_1": lambda lib: str(lib.device("cuda:1")),
    "cuda_index_arg": lambda lib: repr(lib.device("cuda", 0)),
    "cpu_repr": lambda lib: repr(lib.device("cpu")),
    "cpu_0": lambda lib: repr(lib.device("cpu:0")),
    "mps": lambda lib: lib.device("mps").type,
    "copy": lambda lib: str(lib.device(lib.device("cuda:2"))),
    "index": lambda lib: repr(lib.device("cuda:3").index),
    "eq_str": lambda lib: str(lib.device("cpu") == "cpu"),
    "eq_index": lambda lib: str(lib.device("cuda:0") == lib.device("cuda")),
    "hash": lambda lib: str(len({lib.device("cpu"), lib.device("cpu"), lib.device("cuda")})),
    "tensor_device": lambda lib: str(lib.zeros(1).device),
    "cuda_counts": lambda lib: str((lib.cuda.is_available(), lib.cuda.device_count(), lib.cuda.is_initialized())),
    "cuda_memory": lambda lib: str((lib.cuda.memory_allocated(), lib.cuda.max_memory_allocated(),
                                    lib.cuda.memory_reserved(), lib.cuda.empty_cache())),
    "is_pinned": lambda lib: str(lib.zeros(1).is_pinned()),
}

REFUSED = {  # name: case(lib) -> raises
    "bad_type": lambda lib: lib.device("gpu"),
    "negative_index": lambda lib: lib.device("cuda:-1"),
    "bad_index": lambda lib: lib.device("cuda:x"),
    "int_device": lambda lib: lib.device(0),
    "tensor_to_cuda": lambda lib: lib.zeros(1).to("cuda"),
    "tensor_to_cuda_device": lambda lib: lib.zeros(1).to(lib.device("cuda:0")),
    "tensor_to_index": lambda lib: lib.zeros(1).to(0),
    "tensor_cuda": lambda lib: lib.zeros(1).cuda(),
    "tensor_to_mps": lambda lib: lib.zeros(1).to("mps"),
    "module_to_cuda": lambda lib: lib.nn.Linear(2, 2).to("cuda"),
    "module_cuda": lambda lib: lib.nn.Linear(2, 2).cuda(),
    "zeros_on_cuda": lambda lib: lib.zeros(2, device="cuda"),
    "tensor_on_cuda": lambda lib: lib.tensor([1.0], device="cuda"),
    "arange_on_cuda": lambda lib: lib.arange(3, device="cuda"),
    "randn_on_cuda": lambda lib: lib.randn(2, device="cuda"),
    "linear_on_cuda": lambda lib: lib.nn.Linear(2, 2, device="cuda"),
    "embedding_on_cuda": lambda lib: lib.nn.Embedding(3, 2, device="cuda"),
    "layernorm_on_cuda": lambda lib: lib.nn.LayerNorm(2, device="cuda"),
    "lstm_on_cuda": lambda lib: lib.nn.LSTM(2, 2, device="cuda"),
    "mha_on_cuda": lambda lib: lib.nn.MultiheadAttention(4, 2, device="cuda"),
    "encoder_layer_on_cuda": lambda lib: lib.nn.TransformerEncoderLayer(4, 2, 8, device="cuda"),
    "cuda_synchronize": lambda lib: lib.cuda.synchronize(),
    "cuda_current_device": lambda lib: lib.cuda.current_device(),
    "cuda_device_name": lambda lib: lib.cuda.get_device_name(0),
    "pin_memory": lambda lib: lib.zeros(1).pin_memory(),
}


def _names(lib) -> dict:
    return {name: np.array(case(lib)) for name, case in NAMES.items()}


def test_devices_are_named_as_torch_names_them(torch_ref):
    theirs = torch_ref(_names)
    ours = _names(ct)
    assert {k: str(v) for k, v in ours.items()} == {k: str(theirs[k]) for k in NAMES}


def test_non_cpu_devices_are_refused_with_torchs_classes(torch_ref):
    assert_torchs_classes(torch_ref, REFUSED, ct)


def test_refusals_say_the_package_runs_on_the_cpu():
    with pytest.raises(AssertionError, match="Torch not compiled with CUDA enabled.*CPU only"):
        ct.ones(2).to("cuda")
    with pytest.raises(RuntimeError, match="Expected one of cpu, cuda"):
        ct.device("gpu")


def test_default_device_is_used_by_factories_and_restored():
    with ct.device("cpu"):
        assert ct.zeros(2).device == ct.device("cpu")
    made_before = ct.tensor([1.0])
    with ct.device("cuda"):  # as torch's CPU build: named, then refused by the factory
        with pytest.raises(AssertionError):
            ct.zeros(2)
        with pytest.raises(AssertionError):
            ct.tensor([1.0])
        assert ct.zeros_like(made_before).shape == (1,)  # *_like: the tensor's device
    assert ct.zeros(2).shape == (2,) and ct.get_default_device() == ct.device("cpu")
    ct.set_default_device("cuda:0")
    try:
        with pytest.raises(AssertionError):
            ct.nn.Linear(2, 2)
    finally:
        ct.set_default_device(None)
    assert ct.nn.Linear(2, 2).weight.device == ct.device("cpu")


def test_the_cpu_is_accepted_everywhere():
    cpu = ct.device("cpu")
    model = ct.nn.Linear(2, 2, device=cpu).to("cpu").to(cpu)
    x = ct.ones(1, 2, device="cpu").to(cpu).cpu()
    assert model(x).shape == (1, 2) and x.device == cpu and str(x.device) == "cpu"
    assert ct.device(cpu) == cpu and ct.device("cpu", 0).index == 0


def _checkpoint(lib) -> bytes:
    import io
    buf = io.BytesIO()
    lib.save({"w": lib.ones(2)}, buf)
    return buf.getvalue()


def _load(lib, map_location):
    import io
    return lib.load(io.BytesIO(_checkpoint(lib)), map_location=map_location)


MAP_REFUSED = {
    "map_cuda": lambda lib: _load(lib, "cuda"),
    "map_cuda_device": lambda lib: _load(lib, lib.device("cuda:0")),
    "map_cpu_to_cuda": lambda lib: _load(lib, {"cpu": "cuda"}),
}


def test_map_location_onto_cuda_is_refused_as_torch(torch_ref):
    assert_torchs_classes(torch_ref, MAP_REFUSED, ct)


def test_map_location_onto_the_cpu_loads():
    for where in (None, "cpu", ct.device("cpu"), {"cuda:0": "cpu"}, lambda storage, location: storage):
        assert _load(ct, where)["w"].tolist() == [1.0, 1.0]
