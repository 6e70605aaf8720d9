"""Torch reference values for the parity tests: live from torch when it is
installed, otherwise from committed golden fixtures recorded from torch 2.13.

A parity test puts everything it needs from torch into one function of the
torch module and asks the ``torch_ref`` fixture (tests/conftest.py) for it::

    def test_linear_parity(torch_ref, rng):
        x = rng.standard_normal((6, 10)).astype(np.float32)

        def torch_side(torch):
            lin = torch.nn.Linear(10, 7)
            xt = torch.tensor(x, requires_grad=True)
            lin(xt).sum().backward()
            return dict(w=lin.weight, b=lin.bias, dx=xt.grad)

        ref = torch_ref(torch_side, inputs=dict(x=x))   # NumPy arrays
        ...compare ctransformer's answer with ref["dx"]...

Modes (environment variable ``CT_GOLDEN``):
  auto    (default) live torch if it imports, else the fixtures;
  replay  the fixtures even when torch is installed;
  record  live torch, and the values are written to ``tests/golden/<module>.npz``
          at the end of the run: ``python tests/make_golden.py`` does this.

``torch.manual_seed(0)`` runs before each torch function, so the torch side
is deterministic and the fixtures are reproducible.  ``inputs`` (the arrays
the torch function reads) are fingerprinted when recorded and checked when
replayed: a test whose inputs changed fails with the command that
regenerates its fixture instead of comparing against stale values.  A
missing fixture is a failure, never a skip.

Returned values are the torch function's dict (nested dicts / lists / tuples
allowed) with every tensor, number or flat list of numbers turned into a
NumPy array (0-d for a number), identically in all modes.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Dict, Optional

import numpy as np
import pytest

GOLDEN_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden")
TORCH_VERSION = "2.13.0"   # the torch the fixtures are recorded from
SEP = "|"

_recorded: Dict[str, Dict[str, np.ndarray]] = {}   # module file -> key -> array
_recorded_tests: Dict[str, set] = {}              # module file -> test ids recorded this run
_loaded: Dict[str, Dict[str, np.ndarray]] = {}


def mode() -> str:
    chosen = os.environ.get("CT_GOLDEN", "auto").lower()
    if chosen not in ("auto", "replay", "record"):
        raise ValueError(f"CT_GOLDEN must be auto, replay or record, got {chosen!r}")
    if chosen == "auto":
        try:
            import torch  # noqa: F401
        except ImportError:
            return "replay"
        return "live"
    return chosen


# ---- turning torch results into plain arrays and back ----------------------

def _to_numpy(value: Any) -> np.ndarray:
    if hasattr(value, "detach") and hasattr(value, "numpy") and not isinstance(value, np.ndarray):
        value = value.detach()
        if str(value.dtype) == "torch.bfloat16":
            value = value.float()
        return value.numpy().copy()
    return np.asarray(value)


def _flatten(value: Any, prefix: str, out: Dict[str, np.ndarray]) -> None:
    if isinstance(value, dict):
        if not value:
            out[prefix + "{}"] = np.zeros(0)
        for k, v in value.items():
            _flatten(v, f"{prefix}{k}/", out)
    elif isinstance(value, (list, tuple)) and not _is_flat_scalar_list(value):
        out[prefix + ("#list" if isinstance(value, list) else "#tuple")] = np.asarray(len(value))
        for i, v in enumerate(value):
            _flatten(v, f"{prefix}{i}/", out)
    else:
        array = _to_numpy(value)
        if array.dtype == object:
            raise TypeError(f"golden: cannot store {type(value).__name__} at {prefix!r}")
        out[prefix.rstrip("/")] = array


def _is_flat_scalar_list(value) -> bool:
    """A non-empty list/tuple of numbers only, or of strings only: stored as one array."""
    if not value:
        return False
    if all(isinstance(v, str) for v in value):
        return True
    return all(isinstance(v, (int, float, bool, np.number, np.bool_)) for v in value)


def _unflatten(flat: Dict[str, np.ndarray]) -> Any:
    root: Dict[str, Any] = {}
    kinds: Dict[tuple, str] = {}
    for key, array in flat.items():
        parts = key.split("/")
        if parts[-1] in ("#list", "#tuple", "{}"):
            kinds[tuple(parts[:-1])] = parts[-1]
            node = root
            for p in parts[:-1]:
                node = node.setdefault(p, {})
            continue
        node = root
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = array

    def build(node: Any, path: tuple) -> Any:
        if not isinstance(node, dict):
            return node
        kind = kinds.get(path)
        children = {k: build(v, path + (k,)) for k, v in node.items()}
        if kind in ("#list", "#tuple"):
            items = [children[str(i)] for i in range(len(children))]
            return items if kind == "#list" else tuple(items)
        return children

    return build(root, ())


# ---- input fingerprints ------------------------------------------------------

def _fingerprint(array: np.ndarray) -> np.ndarray:
    """shape-independent summary: sum, sum of |x|, and up to 8 sampled values (float64)."""
    a = np.asarray(array)
    if a.dtype.kind in "US":
        a = np.frombuffer("\x00".join(map(str, a.reshape(-1))).encode(), dtype=np.uint8)
    flat = a.reshape(-1).astype(np.float64)
    finite = np.where(np.isfinite(flat), flat, 0.0)
    step = max(1, flat.size // 8)
    return np.concatenate([[finite.sum(), np.abs(finite).sum()], flat[::step][:8]])


def _check_inputs(key: str, stored: Dict[str, np.ndarray], inputs: Dict[str, Any], fix: str) -> None:
    for name, value in inputs.items():
        a = np.asarray(value)
        shape_key, print_key = f"{key}{SEP}in/{name}/shape", f"{key}{SEP}in/{name}/print"
        if shape_key not in stored:
            pytest.fail(f"golden fixture {key!r} has no input {name!r}: {fix}")
        if tuple(stored[shape_key]) != a.shape:
            pytest.fail(f"golden fixture {key!r}: input {name!r} has shape {a.shape}, "
                        f"recorded {tuple(stored[shape_key])}: {fix}")
        tol = dict(rtol=1e-5, atol=1e-6) if a.dtype.kind in "fc" else dict(rtol=0, atol=0)
        if not np.allclose(_fingerprint(a), stored[print_key], equal_nan=True, **tol):
            pytest.fail(f"golden fixture {key!r}: input {name!r} differs from the one recorded: {fix}")


# ---- the fixture -------------------------------------------------------------

def _module_file(nodeid: str) -> str:
    module = os.path.splitext(os.path.basename(nodeid.split("::")[0]))[0]
    return os.path.join(GOLDEN_DIR, module + ".npz")


def _load(path: str) -> Dict[str, np.ndarray]:
    if path not in _loaded:
        if os.path.exists(path):
            with np.load(path, allow_pickle=False) as data:
                _loaded[path] = {k: data[k] for k in data.files}
        else:
            _loaded[path] = {}
    return _loaded[path]


class TorchReference:
    """Callable bound to one test: ``torch_ref(fn, inputs=...)``, possibly
    several times per test (each call has its own index)."""

    def __init__(self, nodeid: str):
        self.test_id = nodeid.split("::", 1)[1] if "::" in nodeid else nodeid
        self.path = _module_file(nodeid)
        self.calls = 0

    def __call__(self, torch_side: Callable[[Any], Any], inputs: Optional[Dict[str, Any]] = None) -> Any:
        key = f"{self.test_id}{SEP}{self.calls}"
        self.calls += 1
        inputs = inputs or {}
        fix = f"run `python tests/make_golden.py {os.path.basename(self.path)[:-4]}.py` with torch {TORCH_VERSION}"
        how = mode()
        if how == "replay":
            stored = _load(self.path)
            prefix = f"{key}{SEP}out/"
            flat = {k[len(prefix):]: v for k, v in stored.items() if k.startswith(prefix)}
            if not flat:
                pytest.fail(f"no golden fixture for {key!r} in tests/golden/{os.path.basename(self.path)}: {fix}")
            _check_inputs(key, stored, inputs, fix)
            return _unflatten(flat)
        import torch
        torch.manual_seed(0)
        flat: Dict[str, np.ndarray] = {}
        _flatten(torch_side(torch), "", flat)
        if how == "record":
            self._record(key, flat, inputs)
        return _unflatten(flat)

    def _record(self, key: str, flat: Dict[str, np.ndarray], inputs: Dict[str, Any]) -> None:
        store = _recorded.setdefault(self.path, {})
        _recorded_tests.setdefault(self.path, set()).add(self.test_id)
        for name, array in flat.items():
            store[f"{key}{SEP}out/{name}"] = array
        for name, value in inputs.items():
            a = np.asarray(value)
            store[f"{key}{SEP}in/{name}/shape"] = np.asarray(a.shape, dtype=np.int64)
            store[f"{key}{SEP}in/{name}/print"] = _fingerprint(a)


current: Optional[TorchReference] = None   # set for each test by tests/conftest.py


def torch_reference(torch_side: Callable[[Any], Any], inputs: Optional[Dict[str, Any]] = None) -> Any:
    """``torch_ref`` for helpers that are not fixtures (the running test's)."""
    if current is None:
        raise RuntimeError("golden.torch_reference called outside a test")
    return current(torch_side, inputs)


# ---- helpers for torch sides that return many tensors ------------------------

def packed(torch, tensors):
    """Tensors as one flat tensor: a fixture stores one array instead of many
    small ones (each .npz entry costs ~280 bytes of headers)."""
    return torch.cat([t.detach().reshape(-1) for t in tensors])


def unpack(flat, shapes):
    """The arrays ``packed`` joined, given their shapes (ours, which must match torch's)."""
    shapes = [tuple(s) for s in shapes]
    sizes = [int(np.prod(s)) for s in shapes]
    assert flat.size == sum(sizes), f"torch's values hold {flat.size} numbers, ours {sum(sizes)} ({shapes})"
    return [part.reshape(s) for part, s in zip(np.split(flat, np.cumsum(sizes)[:-1]), shapes)]


def write_recorded() -> list:
    """Merge this run's recordings into tests/golden/*.npz (entries of the
    tests that ran replace their old ones); returns the files written."""
    written = []
    os.makedirs(GOLDEN_DIR, exist_ok=True)
    for path, new in sorted(_recorded.items()):
        ran = _recorded_tests[path]
        old = {}
        if os.path.exists(path):
            with np.load(path, allow_pickle=False) as data:
                old = {k: data[k] for k in data.files if k.split(SEP, 1)[0] not in ran}
        merged = dict(sorted({**old, **new}.items()))
        tmp = path + ".tmp.npz"
        np.savez_compressed(tmp, **merged)
        os.replace(tmp, path)
        written.append(path)
    return written
