"""ctransformer.save / load: round trips in PyTorch's checkpoint format,
atomic writes, and clear errors for truncated or foreign files
(tests/test_checkpoint_torch_format.py covers interop with torch and
hostile files)."""
import io
import math
import pickle
import zipfile
from collections import OrderedDict

import numpy as np
import pytest

import ctransformer as ct
import ctransformer.nn as nn


def test_roundtrip_nested_structure(tmp_path):
    t = ct.randn(3, 4)
    obj = {
        "tensor": t,
        "same_tensor": t,
        "double": ct.randn(2).double(),
        "ids": ct.tensor([1, 2, 3]),
        "mask": ct.tensor([True, False]),
        "scalar_t": ct.tensor(2.5),
        "array": np.arange(6, dtype=np.int16).reshape(2, 3),
        "np_scalar": np.float32(1.5),
        "numbers": [1, -2, 3.25, float("inf"), float("nan"), 2 ** 70, True, False, None],
        "tuple": (1, "two", (3.0,)),
        "str": "héllo \"quoted\" \n",
        "odict": OrderedDict([("b", 1), ("a", 2)]),
        7: "int key",
        (1, 2): "tuple key",
        "empty": [],
        "empty_dict": {},
        "empty_array": np.zeros((0, 3), np.float32),
    }
    path = tmp_path / "ckpt.pt"
    ct.save(obj, path)
    back = ct.load(str(path))
    assert list(back) == list(obj)
    np.testing.assert_array_equal(back["tensor"].numpy(), t.numpy())
    assert isinstance(back["tensor"], ct.Tensor) and back["tensor"].dtype == np.float32
    assert back["same_tensor"] is back["tensor"]  # stored once, loaded as one object
    assert back["double"].dtype == np.float64 and back["ids"].dtype == np.int64 and back["mask"].dtype == np.bool_
    assert back["scalar_t"].shape == () and back["scalar_t"].item() == 2.5
    assert back["array"].dtype == np.int16 and isinstance(back["array"], np.ndarray)
    np.testing.assert_array_equal(back["array"], obj["array"])
    assert isinstance(back["np_scalar"], np.float32) and back["np_scalar"] == 1.5
    nums = back["numbers"]
    assert nums[:4] == [1, -2, 3.25, float("inf")] and math.isnan(nums[4]) and nums[5] == 2 ** 70
    assert nums[6] is True and nums[7] is False and nums[8] is None
    assert isinstance(nums[0], int) and isinstance(nums[2], float)
    assert back["tuple"] == (1, "two", (3.0,)) and isinstance(back["tuple"][2], tuple)
    assert back["str"] == obj["str"]
    assert isinstance(back["odict"], OrderedDict) and list(back["odict"]) == ["b", "a"]
    assert back[7] == "int key" and back[(1, 2)] == "tuple key"
    assert back["empty"] == [] and back["empty_dict"] == {} and back["empty_array"].shape == (0, 3)
    assert not any(p.name.endswith(".tmp") for p in tmp_path.iterdir())  # no temp files left


def test_model_and_optimizer_checkpoint_roundtrip(tmp_path):
    ct.manual_seed(0)
    model = nn.Sequential(nn.Embedding(5, 4), nn.LayerNorm(4), nn.Linear(4, 5))
    opt = ct.optim.Adam(model.parameters(), lr=0.01)
    sched = ct.optim.lr_scheduler.NoamLR(opt, 4, 3)
    ids = ct.tensor([[1, 2], [3, 4]])
    for _ in range(2):
        opt.zero_grad()
        model(ids).sum().backward()
        opt.step()
        sched.step()
    path = tmp_path / "model.pt"
    ct.save({"model": model.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict(), "epoch": 2}, path)
    ck = ct.load(path)

    ct.manual_seed(1)
    model2 = nn.Sequential(nn.Embedding(5, 4), nn.LayerNorm(4), nn.Linear(4, 5))
    opt2 = ct.optim.Adam(model2.parameters(), lr=0.5)
    sched2 = ct.optim.lr_scheduler.NoamLR(opt2, 4, 3)
    model2.load_state_dict(ck["model"])
    opt2.load_state_dict(ck["opt"])
    sched2.load_state_dict(ck["sched"])
    assert ck["epoch"] == 2 and opt2.param_groups[0]["betas"] == (0.9, 0.999)
    assert sorted(ck["opt"]["state"]) == [0, 1, 2, 3, 4]  # int keys survive
    for m, o, s in ((model, opt, sched), (model2, opt2, sched2)):
        o.zero_grad()
        m(ids).sum().backward()
        o.step()
        s.step()
    for (k, a), (_, b) in zip(model.state_dict().items(), model2.state_dict().items()):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=k)
    assert sched2.get_last_lr() == sched.get_last_lr()


def test_rng_state_roundtrip(tmp_path):
    """The generator state (128-bit PCG64 integers) survives, so resumed runs draw the same numbers."""
    ct.manual_seed(11)
    ct.randn(3)
    ct.save({"rng": ct.get_rng_state()}, tmp_path / "rng.pt")
    expected = ct.randn(4).numpy().copy()
    ct.manual_seed(0)
    ct.set_rng_state(ct.load(tmp_path / "rng.pt")["rng"])
    np.testing.assert_array_equal(ct.randn(4).numpy(), expected)


def test_parameters_stay_parameters_and_state_dict_is_plain(tmp_path):
    lin = nn.Linear(2, 3)
    ct.save({"w": lin.weight, "sd": lin.state_dict()}, tmp_path / "p.bin")
    back = ct.load(tmp_path / "p.bin")
    assert isinstance(back["w"], nn.Parameter) and back["w"].requires_grad
    assert not isinstance(back["sd"]["weight"], nn.Parameter) and not back["sd"]["weight"].requires_grad
    arr = back["w"].detach().numpy()
    assert arr.flags.c_contiguous and arr.flags.writeable


def test_file_objects(tmp_path):
    buf = io.BytesIO()
    ct.save({"a": ct.ones(2)}, buf)
    buf.seek(0)
    assert ct.load(buf)["a"].tolist() == [1.0, 1.0]


def test_overwrite_is_atomic_when_saving_fails(tmp_path):
    path = tmp_path / "keep.pt"
    ct.save({"v": 1}, path)
    with pytest.raises(pickle.PicklingError, match=r"cannot store an object of type function at obj\['bad'\]\[1\]"):
        ct.save({"v": 2, "bad": [1, lambda: 0]}, path)
    assert ct.load(path) == {"v": 1}  # the old checkpoint is intact
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.pt"]


def test_unsupported_values_are_rejected_before_writing(tmp_path):
    """What pickle cannot store (torch.save raises pickle.PicklingError too) is refused before any file exists."""
    with pytest.raises(pickle.PicklingError, match="cannot store an object of type function"):
        ct.save({"f": lambda: 0}, tmp_path / "x.pt")
    with pytest.raises(pickle.PicklingError, match="cannot store an object of type generator"):
        ct.save([(i for i in range(3))], tmp_path / "x.pt")
    assert not (tmp_path / "x.pt").exists()


@pytest.mark.parametrize("cut", [0.2, 0.5, 0.9, 0.99])
def test_truncated_file_is_a_clear_value_error(tmp_path, cut):
    path = tmp_path / "trunc.pt"
    ct.save({"w": ct.randn(64, 64), "meta": {"step": 3}}, path)
    data = path.read_bytes()
    path.write_bytes(data[:int(len(data) * cut)])
    with pytest.raises(ValueError, match=r"load: '.*trunc\.pt' is not a valid ctransformer checkpoint"):
        ct.load(path)


def test_corrupted_member_is_a_clear_value_error(tmp_path):
    path = tmp_path / "corrupt.pt"
    ct.save({"w": ct.zeros(1000)}, path)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # inside the array member: the CRC check fails
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="corrupt.pt"):
        ct.load(path)


def test_foreign_files_are_clear_value_errors(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("just some text\n")
    with pytest.raises(ValueError, match=r"notes\.txt.*not a valid ctransformer checkpoint"):
        ct.load(text)
    npz = tmp_path / "plain.npz"
    np.savez(npz, a=np.ones(3))
    with pytest.raises(ValueError, match=r"plain\.npz.*__ctransformer__"):
        ct.load(npz)
    npy = tmp_path / "arr.npy"
    np.save(npy, np.ones(3))
    with pytest.raises(ValueError, match=r"arr\.npy"):
        ct.load(npy)
    zf = tmp_path / "other.zip"
    with zipfile.ZipFile(zf, "w") as z:
        z.writestr("__ctransformer__.npy", b"garbage")
    with pytest.raises(ValueError, match=r"other\.zip"):
        ct.load(zf)
    empty = tmp_path / "empty.pt"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match=r"empty\.pt"):
        ct.load(empty)
    with pytest.raises(FileNotFoundError, match="no such file"):
        ct.load(tmp_path / "missing.pt")


def test_torch_checkpoint_loads(tmp_path, torch_ref):
    """A file torch.save wrote is read (weights only), no conversion step."""
    def torch_side(torch):
        import io
        buf = io.BytesIO()
        torch.save({"w": torch.ones(2)}, buf)
        return dict(file=np.frombuffer(buf.getvalue(), np.uint8))

    path = tmp_path / "torch.pt"
    path.write_bytes(torch_ref(torch_side)["file"].tobytes())  # the bytes torch.save wrote
    assert ct.load(path)["w"].tolist() == [1.0, 1.0]


def test_archive_is_pytorchs_layout(tmp_path):
    """data.pkl, one raw record per storage, and torch's bookkeeping records."""
    path = tmp_path / "c.pt"
    ct.save({"a": ct.ones(2), "b": [1, "x"]}, path)
    with zipfile.ZipFile(path) as z:
        assert sorted(z.namelist()) == sorted([
            "archive/data.pkl", "archive/.format_version", "archive/.storage_alignment", "archive/byteorder",
            "archive/data/0", "archive/version", "archive/.data/serialization_id"])
        assert np.frombuffer(z.read("archive/data/0"), np.float32).tolist() == [1.0, 1.0]
        assert z.read("archive/version") == b"3\n" and z.read("archive/byteorder") == b"little"
