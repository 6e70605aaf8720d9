"""Checkpoint robustness: no leaked file handle on any error path,
temporary files of killed saves swept, limits on what a crafted legacy
(.npz) checkpoint can make load() allocate, malformed structures refused.
(The PyTorch-format archive's own limits: tests/test_checkpoint_torch_format.py.)"""
import gc
import json
import signal
import subprocess
import sys
import warnings

import numpy as np
import pytest

import ctransformer as ct
from ctransformer import serialization
from conftest import run_isolated


def _checkpoint(tmp_path, obj=None):
    path = tmp_path / "ckpt.pt"
    ct.save(obj if obj is not None else {"w": ct.ones(64, 64), "n": 3}, path)
    return path


@pytest.mark.parametrize("fraction", [0.0, 0.1, 0.5, 0.9, 0.999])
def test_truncated_file_closes_its_handle(tmp_path, fraction):
    """load() of a truncated file left its handle open (a ResourceWarning;
    4 failures of tests/test_save_load.py under -X dev -W error)."""
    path = _checkpoint(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[:int(len(data) * fraction)])
    unraisable = []
    previous_hook = sys.unraisablehook
    sys.unraisablehook = unraisable.append
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", ResourceWarning)   # raised in the finalizer: unraisable
            with pytest.raises(ValueError, match="is not a valid ctransformer checkpoint"):
                ct.load(path)
            gc.collect()
    finally:
        sys.unraisablehook = previous_hook
    assert not unraisable, [str(u.exc_value) for u in unraisable]


def test_file_object_is_left_open_for_the_caller(tmp_path):
    path = _checkpoint(tmp_path)
    with open(path, "rb") as fh:
        assert ct.load(fh)["n"] == 3
        assert not fh.closed


def _write_structure(path, structure, arrays=None, compress=False):
    arrays = dict(arrays or {})
    arrays["__ctransformer__"] = np.frombuffer(json.dumps(structure).encode(), np.uint8)
    (np.savez_compressed if compress else np.savez)(path, **arrays)


def test_npscalar_node_must_be_0d(tmp_path):
    path = tmp_path / "bad.npz"
    _write_structure(path, {"format": "ctransformer", "version": 1, "root": {"t": "npscalar", "k": "a0"}},
                     {"a0": np.ones((2, 3))})
    with pytest.raises(ValueError, match="npscalar node refers to a 2-D array"):
        ct.load(path)


def test_deep_structure_refused(tmp_path):
    node = {"t": "none"}
    for _ in range(serialization.limits.max_depth + 5):
        node = {"t": "list", "items": [node]}
    path = tmp_path / "deep.npz"
    _write_structure(path, {"format": "ctransformer", "version": 1, "root": node})
    with pytest.raises(ValueError, match="nested more than"):
        ct.load(path)


def test_inflating_structure_refused(tmp_path, monkeypatch):
    """A small file whose JSON inflates far beyond its stored size (1 MB to
    200 MB in the audit) is refused before it is decompressed."""
    path = tmp_path / "bomb.npz"
    structure = {"format": "ctransformer", "version": 1, "root": {"t": "str", "v": " " * (4 << 20)}}
    _write_structure(path, structure, compress=True)
    assert path.stat().st_size < 64 << 10
    monkeypatch.setattr(serialization.limits, "max_structure_bytes", 1 << 20)
    with pytest.raises(ValueError, match="more than limits.max_structure_bytes"):
        ct.load(path)
    monkeypatch.setattr(serialization.limits, "max_structure_bytes", 64 << 20)
    monkeypatch.setattr(serialization.limits, "max_compression_ratio", 10)
    with pytest.raises(ValueError, match="more than limits.max_compression_ratio = 10 times"):
        ct.load(path)


def test_structure_node_of_wrong_type_refused(tmp_path):
    path = tmp_path / "odd.npz"
    _write_structure(path, {"format": "ctransformer", "version": 1, "root": {"t": "list", "items": [5]}})
    with pytest.raises(ValueError, match="a structure node must be a JSON object"):
        ct.load(path)


def test_killed_save_leaves_a_temporary_swept_by_the_next_save(tmp_path):
    """26 of 30 SIGKILLed saves left .ckpt.pt.*.tmp files behind forever."""
    path = tmp_path / "ckpt.pt"
    code = f"""
    import os, signal, ctransformer as ct
    from ctransformer import serialization
    real = serialization.os.replace
    def die_before_replace(src, dst):
        os.kill(os.getpid(), signal.SIGKILL)
    serialization.os.replace = die_before_replace
    ct.save({{"w": ct.ones(10)}}, {str(path)!r})
    """
    proc = run_isolated(code, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    left = [p.name for p in tmp_path.iterdir()]
    assert len(left) == 1 and left[0].startswith(".ckpt.pt.") and left[0].endswith(".tmp"), left
    ct.save({"w": ct.zeros(3)}, path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pt"]
    assert ct.load(path)["w"].shape == (3,)


def test_temporary_of_a_live_saver_is_kept(tmp_path):
    path = tmp_path / "ckpt.pt"
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        live = tmp_path / f".ckpt.pt.{sleeper.pid}.abc.tmp"
        live.write_bytes(b"in progress")
        ct.save({"n": 1}, path)
        assert live.exists()
    finally:
        sleeper.kill()
        sleeper.wait()
    ct.save({"n": 2}, path)
    assert not live.exists()
