"""Checkpoints in PyTorch's own format, both ways, and the loader's defences.

* torch.load(weights_only=True) reads what ctransformer.save wrote (a
  Transformer's and an LSTM's state dict): the torch side loads our bytes
  (recorded as the fixture's input fingerprint) and returns the tensors it
  read, which must equal ours;
* ctransformer.load reads what torch.save wrote (state dicts, an optimizer
  state dict, nested containers, views with offsets and strides): the
  bytes torch wrote are the fixture;
* whole modules under weights-only rules (safe_globals), torch's module paths;
* hostile files: unknown globals, truncation, zip bombs, absurd shapes,
  storages that lie about their size, object arrays; no leaked handles.
"""
import io
import os
import shutil
import pickle
import struct
import subprocess
import sys
import zipfile
from collections import OrderedDict

import numpy as np
import pytest

import ctransformer as ct
import ctransformer.nn as nn
from ctransformer.serialization import CheckpointError

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")


def _bytes_of(obj) -> np.ndarray:
    buf = io.BytesIO()
    ct.save(obj, buf)
    return np.frombuffer(buf.getvalue(), np.uint8)


def _transformer_and_lstm_state():
    ct.manual_seed(0)
    tr = nn.Transformer(d_model=8, nhead=2, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=16)
    lstm = nn.LSTM(5, 6, num_layers=2)
    return tr.state_dict(), lstm.state_dict()


# ---------------------------------------------------------------- ours -> torch
def test_torch_reads_our_state_dicts(torch_ref):
    tr_sd, lstm_sd = _transformer_and_lstm_state()
    tr_file, lstm_file = _bytes_of(tr_sd), _bytes_of(lstm_sd)

    def torch_side(torch):
        import io
        tr_back = torch.load(io.BytesIO(tr_file.tobytes()), weights_only=True)
        lstm_back = torch.load(io.BytesIO(lstm_file.tobytes()), weights_only=True)
        tr = torch.nn.Transformer(d_model=8, nhead=2, num_encoder_layers=1, num_decoder_layers=1,
                                  dim_feedforward=16)
        tr.load_state_dict(tr_back)  # strict: every key and shape matches torch's own module
        lstm = torch.nn.LSTM(5, 6, num_layers=2)
        lstm.load_state_dict(lstm_back)
        return dict(tr={k: v for k, v in tr_back.items()},
                    lstm={k: v for k, v in lstm_back.items()},
                    tr_keys=" ".join(tr_back), lstm_keys=" ".join(lstm_back),
                    dtypes=" ".join(str(v.dtype) for v in lstm_back.values()))

    ref = torch_ref(torch_side, inputs=dict(tr_file=tr_file, lstm_file=lstm_file))
    assert str(ref["tr_keys"]) == " ".join(tr_sd) and str(ref["lstm_keys"]) == " ".join(lstm_sd)
    assert str(ref["dtypes"]) == " ".join(["torch.float32"] * len(lstm_sd))
    for k, v in tr_sd.items():
        np.testing.assert_array_equal(ref["tr"][k], v.numpy(), err_msg=k)
    for k, v in lstm_sd.items():
        np.testing.assert_array_equal(ref["lstm"][k], v.numpy(), err_msg=k)


def test_saving_is_deterministic():
    tr_sd, _ = _transformer_and_lstm_state()
    assert _bytes_of(tr_sd).tobytes() == _bytes_of(tr_sd).tobytes()


def test_storages_are_64_byte_aligned(tmp_path):
    path = tmp_path / "a.pt"
    ct.save({"x": ct.randn(7), "y": ct.randn(3, 3), "i": ct.arange(5)}, path)
    with zipfile.ZipFile(path) as z:
        for info in z.infolist():
            if "/data/" in info.filename:
                raw = path.read_bytes()
                name_len, extra_len = struct.unpack("<HH", raw[info.header_offset + 26:info.header_offset + 30])
                assert (info.header_offset + 30 + name_len + extra_len) % 64 == 0, info.filename


# ---------------------------------------------------------------- torch -> ours
def _torch_files(torch):
    import io

    def saved(obj):
        buf = io.BytesIO()
        torch.save(obj, buf)
        return np.frombuffer(buf.getvalue(), np.uint8).copy()

    torch.manual_seed(0)
    tr = torch.nn.Transformer(d_model=8, nhead=2, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=16)
    lstm = torch.nn.LSTM(5, 6, num_layers=2)
    opt = torch.optim.Adam(lstm.parameters(), lr=0.01)
    lstm(torch.randn(3, 2, 5))[0].sum().backward()
    opt.step()
    base = torch.arange(24, dtype=torch.float64).reshape(4, 6)
    nested = {"list": [1, 2.5, "s", None, True], "tuple": (torch.tensor([1, 2]), {"deep": torch.ones(2, 2)}),
              "ints": torch.tensor([3, -4], dtype=torch.int32), "mask": torch.tensor([True, False]),
              "half": torch.tensor([0.5, -2.0], dtype=torch.float16),
              "bf16": torch.tensor([1.5, -3.25], dtype=torch.bfloat16),
              "view": base[1:3, 2:5], "transposed": base.t(), "scalar": torch.tensor(7.0),
              "param": torch.nn.Parameter(torch.full((2,), 0.25)), "empty": torch.zeros(0, 3),
              "odict": OrderedDict([("b", 1), ("a", 2)]), 5: "int key"}
    return dict(tr_file=saved(tr.state_dict()), lstm_file=saved(lstm.state_dict()),
                opt_file=saved(opt.state_dict()), nested_file=saved(nested),
                tr={k: v for k, v in tr.state_dict().items()}, lstm=dict(lstm.state_dict()),
                exp_avg0=opt.state_dict()["state"][0]["exp_avg"], step0=opt.state_dict()["state"][0]["step"],
                view=base[1:3, 2:5], transposed=base.t())


def test_we_read_torchs_state_dicts_into_our_models(torch_ref):
    ref = torch_ref(_torch_files)
    tr_sd = ct.load(io.BytesIO(ref["tr_file"].tobytes()))
    lstm_sd = ct.load(io.BytesIO(ref["lstm_file"].tobytes()))
    assert isinstance(tr_sd, OrderedDict)
    ours_tr, ours_lstm = _transformer_and_lstm_state()
    assert list(tr_sd) == list(ours_tr) and list(lstm_sd) == list(ours_lstm)
    tr = nn.Transformer(d_model=8, nhead=2, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=16)
    tr.load_state_dict(tr_sd)
    lstm = nn.LSTM(5, 6, num_layers=2)
    lstm.load_state_dict(lstm_sd)
    for k, v in tr.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), ref["tr"][k], err_msg=k)
    for k, v in lstm.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), ref["lstm"][k], err_msg=k)


def test_we_read_torchs_optimizer_state_dict(torch_ref):
    ref = torch_ref(_torch_files)
    sd = ct.load(io.BytesIO(ref["opt_file"].tobytes()))
    assert sorted(sd["state"]) == list(range(8))
    np.testing.assert_array_equal(sd["state"][0]["exp_avg"].numpy(), ref["exp_avg0"])
    assert sd["state"][0]["step"].item() == float(ref["step0"])
    group = sd["param_groups"][0]
    assert group["lr"] == 0.01 and group["betas"] == (0.9, 0.999) and group["params"] == list(range(8))


def test_we_read_torchs_nested_containers(torch_ref):
    ref = torch_ref(_torch_files)
    back = ct.load(io.BytesIO(ref["nested_file"].tobytes()))
    assert back["list"] == [1, 2.5, "s", None, True]
    assert back["tuple"][0].tolist() == [1, 2] and back["tuple"][0].dtype == np.int64
    assert back["tuple"][1]["deep"].tolist() == [[1.0, 1.0], [1.0, 1.0]]
    assert back["ints"].dtype == np.int32 and back["ints"].tolist() == [3, -4]
    assert back["mask"].dtype == np.bool_ and back["mask"].tolist() == [True, False]
    assert back["half"].dtype == np.float16 and back["half"].tolist() == [0.5, -2.0]
    assert back["bf16"].dtype == np.float32 and back["bf16"].tolist() == [1.5, -3.25]  # widened exactly
    np.testing.assert_array_equal(back["view"].numpy(), ref["view"])  # storage offset 8, strides (6, 1)
    np.testing.assert_array_equal(back["transposed"].numpy(), ref["transposed"])  # strides (1, 6)
    assert back["view"].dtype == np.float64 and back["view"].numpy().flags.c_contiguous
    assert back["scalar"].shape == () and back["scalar"].item() == 7.0
    assert isinstance(back["param"], nn.Parameter) and back["param"].requires_grad
    assert back["empty"].shape == (0, 3)
    assert isinstance(back["odict"], OrderedDict) and list(back["odict"]) == ["b", "a"]
    assert back[5] == "int key"


def test_whole_module_from_torch_is_refused_clearly(torch_ref):
    def torch_side(torch):
        import io
        buf = io.BytesIO()
        torch.save(torch.nn.Linear(2, 3), buf)
        return dict(file=np.frombuffer(buf.getvalue(), np.uint8).copy())

    data = torch_ref(torch_side)["file"].tobytes()
    with pytest.raises(pickle.UnpicklingError, match="torch.nn.modules.linear.Linear"):
        ct.load(io.BytesIO(data))  # weights only: the class must be allowed first
    with ct.serialization.safe_globals([nn.modules.linear.Linear]):
        with pytest.raises(pickle.UnpicklingError, match=r"pickled by PyTorch.*state_dict\(\)"):
            ct.load(io.BytesIO(data))


# ---------------------------------------------------------------- whole modules
class TinyLM(nn.Module):
    """A user subclass, as pytorch/examples' RNNModel."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.rnn = nn.LSTM(4, 5)
        self.out = nn.Linear(5, 10)

    def forward(self, x):
        return self.out(self.rnn(self.emb(x))[0])


def test_whole_module_roundtrip_under_safe_globals(tmp_path):
    ct.manual_seed(3)
    model = TinyLM()
    path = tmp_path / "model.pt"
    with open(path, "wb") as f:
        ct.save(model, f)
    with pytest.raises(pickle.UnpicklingError, match=r"refused the global .*TinyLM.*add_safe_globals\(\[TinyLM\]\)"):
        ct.load(path)
    allowed = [TinyLM, ct.nn.modules.sparse.Embedding, ct.nn.modules.rnn.LSTM, ct.nn.modules.linear.Linear]
    with pytest.raises(pickle.UnpicklingError, match="Embedding"):
        with ct.serialization.safe_globals(allowed[:1]):
            ct.load(path)
    with ct.serialization.safe_globals(allowed):
        with open(path, "rb") as f:
            back = ct.load(f)
    assert ct.serialization.get_safe_globals() == []  # the context manager restored the list
    x = ct.tensor([[1, 2, 3]])
    assert type(back) is TinyLM and type(back.rnn) is nn.LSTM
    np.testing.assert_array_equal(back(x).detach().numpy(), model(x).detach().numpy())
    assert isinstance(back.out.weight, nn.Parameter) and back.out.weight.requires_grad
    assert type(ct.load(path, weights_only=False)) is TinyLM  # trusted file: anything goes
    try:
        ct.serialization.add_safe_globals(allowed)
        assert type(ct.load(path)) is TinyLM
    finally:
        ct.serialization.clear_safe_globals()


def test_torch_module_paths_are_our_classes():
    assert nn.modules.rnn.LSTM is nn.LSTM and nn.modules.rnn.GRU is nn.GRU and nn.modules.rnn.RNN is nn.RNN
    assert nn.modules.activation.MultiheadAttention is nn.MultiheadAttention
    assert nn.modules.transformer.TransformerEncoderLayer is nn.TransformerEncoderLayer
    assert issubclass(nn.modules.linear.NonDynamicallyQuantizableLinear, nn.Linear)
    # a pickle naming torch's path resolves to ours (and is admitted when that class is allowed)
    payload = pickle.dumps(OrderedDict(), 2).replace(b"ccollections\nOrderedDict\n", b"ctorch.nn.modules.rnn\nLSTM\n")
    data = _archive_with_pickle(payload)
    with pytest.raises(pickle.UnpicklingError, match="torch.nn.modules.rnn.LSTM"):
        ct.load(io.BytesIO(data))


# ---------------------------------------------------------------- hostile files
def _archive_with_pickle(payload: bytes, records=None) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("archive/data.pkl", payload)
        for name, data in (records or {}).items():
            z.writestr(f"archive/{name}", data)
        z.writestr("archive/version", b"3\n")
    return buf.getvalue()


def _tensor_pickle(size, stride, offset=0, numel=1, storage="FloatStorage") -> bytes:
    """A data.pkl holding one _rebuild_tensor_v2 call, written opcode by opcode."""
    def ints(values):
        return b"(" + b"".join(b"J" + struct.pack("<i", v) for v in values) + b"t"
    return (b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\n(" + b"(X\x07\x00\x00\x00storage"
            + f"ctorch\n{storage}\n".encode() + b"X\x01\x00\x00\x000X\x03\x00\x00\x00cpu"
            + b"J" + struct.pack("<i", numel) + b"tQ" + b"J" + struct.pack("<i", offset) + ints(size) + ints(stride)
            + b"\x89ccollections\nOrderedDict\n)Rt" + b"R.")


def test_handmade_tensor_pickle_is_what_torch_writes():
    data = _archive_with_pickle(_tensor_pickle((2, 2), (2, 1), numel=4),
                                {"data/0": np.arange(4, dtype=np.float32).tobytes()})
    assert ct.load(io.BytesIO(data)).tolist() == [[0.0, 1.0], [2.0, 3.0]]


def test_unknown_globals_are_refused_without_running_them(tmp_path):
    marker = tmp_path / "pwned"
    command = f"touch {marker}".encode()
    payload = b"\x80\x02cos\nsystem\nX" + struct.pack("<I", len(command)) + command + b"\x85R."
    with pytest.raises(pickle.UnpicklingError, match=r"refused the global os\.system"):
        ct.load(io.BytesIO(_archive_with_pickle(payload)))
    assert not marker.exists()
    for module, name in (("builtins", "eval"), ("builtins", "getattr"), ("subprocess", "Popen"),
                         ("numpy", "load"), ("ctransformer.serialization", "save")):
        payload = b"\x80\x02c" + f"{module}\n{name}\n".encode() + b")R."
        with pytest.raises(pickle.UnpicklingError, match=f"{module}.{name}"):
            ct.load(io.BytesIO(_archive_with_pickle(payload)))


def test_numpy_object_arrays_are_refused():
    payload = pickle.dumps(np.array([1, "x"], dtype=object), 2)
    with pytest.raises(CheckpointError, match="object"):
        ct.load(io.BytesIO(_archive_with_pickle(payload)))
    ok = pickle.dumps({"a": np.arange(3, dtype=np.int16), "s": np.float64(2.5)}, 2)
    back = ct.load(io.BytesIO(_archive_with_pickle(ok)))
    assert back["a"].dtype == np.int16 and back["a"].tolist() == [0, 1, 2] and back["s"] == 2.5


@pytest.mark.parametrize("size,stride,offset,numel,match", [
    ((10 ** 6, 10 ** 6), (0, 0), 0, 1, "expand a storage"),         # 4 TB from 4 bytes
    ((3,), (1,), 0, 2, "reads past its storage"),
    ((2,), (1,), 5, 4, "reads past its storage"),
    ((2, 2), (2,), 0, 4, "differ in length"),
    ((-1,), (1,), 0, 4, "non-negative"),
    (tuple([1] * 65), tuple([1] * 65), 0, 4, "at most 64"),
])
def test_absurd_shapes_are_refused(size, stride, offset, numel, match):
    data = _archive_with_pickle(_tensor_pickle(size, stride, offset, numel),
                                {"data/0": np.zeros(numel, np.float32).tobytes()})
    with pytest.raises(CheckpointError, match=match):
        ct.load(io.BytesIO(data))


def test_storage_that_lies_about_its_size_is_refused():
    data = _archive_with_pickle(_tensor_pickle((4,), (1,), numel=4), {"data/0": b"\x00" * 8})
    with pytest.raises(CheckpointError, match="holds 8 bytes, its tensor needs 16"):
        ct.load(io.BytesIO(data))
    data = _archive_with_pickle(_tensor_pickle((4,), (1,), numel=4))
    with pytest.raises(CheckpointError, match="missing"):
        ct.load(io.BytesIO(data))


def test_zip_bomb_is_refused_before_inflating():
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("archive/data.pkl", pickle.dumps([], 2))
        with z.open("archive/data/0", "w") as out:
            zeros = bytes(1 << 20)
            for _ in range(64):  # 64 MiB of zeros deflate to ~64 KB
                out.write(zeros)
    with pytest.raises(CheckpointError, match="zip bomb"):
        ct.load(io.BytesIO(buf.getvalue()))


def test_limits_apply(monkeypatch):
    data = _bytes_of({"w": ct.zeros(100)}).tobytes()
    monkeypatch.setattr(ct.serialization.limits, "max_total_bytes", 100)
    with pytest.raises(CheckpointError, match="limit 100"):
        ct.load(io.BytesIO(data))


def test_truncated_archives_are_refused_at_every_cut(tmp_path):
    data = _bytes_of({"w": ct.randn(16, 16), "m": {"step": 3}}).tobytes()
    for cut in range(0, len(data), max(1, len(data) // 97)):
        with pytest.raises(CheckpointError, match="not a valid ctransformer checkpoint"):
            ct.load(io.BytesIO(data[:cut]))


def test_every_flipped_byte_in_a_storage_is_caught():
    data = bytearray(_bytes_of({"w": ct.zeros(64)}).tobytes())
    with zipfile.ZipFile(io.BytesIO(bytes(data))) as z:
        info = z.getinfo("archive/data/0")
    start = info.header_offset + 30 + len(info.filename) + struct.unpack(
        "<H", data[info.header_offset + 28:info.header_offset + 30])[0]
    for pos in (start, start + 100, start + 255):
        bad = bytearray(data)
        bad[pos] ^= 0x01
        with pytest.raises(CheckpointError, match="CRC|Bad"):
            ct.load(io.BytesIO(bytes(bad)))


# ---------------------------------------------------------------- files on disk
def test_legacy_npz_checkpoint_still_loads_and_migrates(tmp_path):
    path = tmp_path / "old.pt"
    shutil.copy(os.path.join(FIXTURES, "legacy_npz_checkpoint.pt"), path)
    back = ct.load(path)
    assert back["epoch"] == 4 and back["vocab"] == ["<pad>", "a"]
    assert isinstance(back["w"], nn.Parameter)
    np.testing.assert_array_equal(back["w"].detach().numpy(), back["model"]["weight"].numpy())
    np.testing.assert_allclose(back["model"]["weight"].numpy(),
                               [[0.1581, -0.2658, -0.53], [-0.5583, 0.3617, 0.4766]], atol=1e-4)
    assert ct.serialization.migrate(path) is True
    with zipfile.ZipFile(path) as z:
        assert "archive/data.pkl" in z.namelist()
    again = ct.load(path)
    np.testing.assert_array_equal(again["model"]["weight"].numpy(), back["model"]["weight"].numpy())
    assert again["rng"] == back["rng"] and ct.serialization.migrate(path) is False


def test_interrupted_save_leaves_no_temp_file_and_keeps_the_old_one(tmp_path, monkeypatch):
    path = tmp_path / "ck.pt"
    ct.save({"v": 1}, path)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(ct.serialization.ArchiveWriter, "write_checkpoint", interrupted)
    with pytest.raises(KeyboardInterrupt):
        ct.save({"v": 2}, path)
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck.pt"] and ct.load(path) == {"v": 1}


def test_temp_files_of_killed_saves_are_swept(tmp_path):
    path = tmp_path / "ck.pt"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()
    stale = tmp_path / f".ck.pt.{dead}.abc123.tmp"
    live = tmp_path / f".ck.pt.{os.getppid()}.def456.tmp"  # a running process's: spared
    other = tmp_path / f".other.pt.{dead}.x.tmp"           # another target's: not ours to sweep
    for p in (stale, live, other):
        p.write_bytes(b"partial")
    ct.save({"v": 1}, path)
    assert not stale.exists() and live.exists() and other.exists()


def test_no_leaked_handles_or_warnings_under_dev_mode(tmp_path):
    script = f"""
import pathlib
import ctransformer as ct
p = pathlib.Path({str(tmp_path / 'x.pt')!r})
ct.save({{"w": ct.randn(8, 8), "m": ct.nn.Linear(2, 2).state_dict()}}, p)
ct.load(p)
data = p.read_bytes()
for cut in (0, 10, len(data) // 2, len(data) - 5):
    p.write_bytes(data[:cut])
    try:
        ct.load(p)
    except ValueError:
        pass
p.write_bytes(data)
try:
    ct.save({{"f": lambda: 0}}, p)
except Exception:
    pass
ct.load(p)
print("ok")
"""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [os.path.dirname(os.path.dirname(
        os.path.abspath(ct.__file__))), os.environ.get("PYTHONPATH")])))
    out = subprocess.run([sys.executable, "-X", "dev", "-W", "error", "-c", script], capture_output=True,
                         text=True, env=env, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
    assert "ResourceWarning" not in out.stderr
