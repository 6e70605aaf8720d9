"""Elementwise and row kernels: ours vs torch vs NumPy, forward and backward.

Times relu, gelu, tanh, sigmoid, softmax, log_softmax, layernorm and
cross-entropy at (8, 128) and (4096, 1024) float32 on ONE thread (our
OpenBLAS and torch both pinned to 1 thread; NumPy is single-threaded for
these).  The three libraries are interleaved sample by sample, so a load
spike from other processes hits them alike, and the median is reported.
Samples are process CPU time by default (--clock cpu): on a machine shared
with other jobs, wall time mostly measures the scheduler; --clock wall for
wall time.

    python bench/bench_elementwise.py [--repeats 15] [--shapes 8x128 4096x1024]
                                      [--ops tanh softmax ...] [--json out.json]

Ours is the public NumPy kernel API (ctransformer.kernels), which allocates
its outputs, like torch's and NumPy's functional calls.  Backward is the
kernel that produces the input gradient (torch: the aten *_backward op;
layernorm: input, weight and bias gradients in both).
NumPy has no erf, so gelu has no NumPy column; NumPy backward is the
textbook formula.  Prints microseconds per call, and ours / torch.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Callable, Dict, List, Optional, Tuple

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from a checkout

import numpy as np  # noqa: E402

OPS = ("relu", "gelu", "tanh", "sigmoid", "softmax", "log_softmax", "layernorm", "cross_entropy")
Case = Dict[str, Optional[Callable[[], object]]]  # library -> zero-argument call (None: not available)


def _inputs(shape: Tuple[int, int], seed: int = 0):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 2).astype(np.float32)
    dout = rng.standard_normal(shape).astype(np.float32)
    targets = rng.integers(0, shape[1], size=shape[0])
    return x, dout, targets


def _np_softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _np_log_softmax(x):
    z = x - x.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def _np_layernorm(x, w, b, eps=1e-5):
    mu = x.mean(axis=-1, keepdims=True)
    var = x.var(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def _np_layernorm_backward(dy, x, w, eps=1e-5):
    mu = x.mean(axis=-1, keepdims=True)
    rs = 1 / np.sqrt(x.var(axis=-1, keepdims=True) + eps)
    xhat = (x - mu) * rs
    g = dy * w
    return rs * (g - g.mean(axis=-1, keepdims=True) - xhat * (g * xhat).mean(axis=-1, keepdims=True))


def _np_cross_entropy(x, t):
    return -_np_log_softmax(x)[np.arange(x.shape[0]), t].mean()


def _np_cross_entropy_backward(x, t):
    p = _np_softmax(x)
    p[np.arange(x.shape[0]), t] -= 1
    return p / x.shape[0]


def ours_cases(op: str, x, dout, targets) -> Tuple[Callable, Callable]:
    """(forward, backward) calls of our kernels on x."""
    import ctransformer.kernels as K

    if op in ("relu", "gelu", "tanh", "sigmoid"):
        saved = K.activation_forward(x, op) if K.activation_saves_output(op) else x
        return (lambda: K.activation_forward(x, op)), (lambda: K.activation_backward(dout, saved, op))
    if op == "softmax":
        y = K.softmax_forward(x)
        return (lambda: K.softmax_forward(x)), (lambda: K.softmax_backward(dout, y))
    if op == "log_softmax":
        y = K.log_softmax_forward(x)
        return (lambda: K.log_softmax_forward(x)), (lambda: K.log_softmax_backward(dout, y))
    if op == "layernorm":
        D = x.shape[-1]
        w, b = np.ones(D, np.float32), np.zeros(D, np.float32)
        _, mean, rstd = K.layernorm_forward(x, w, b)
        return ((lambda: K.layernorm_forward(x, w, b)),
                (lambda: K.layernorm_backward(dout, x, w, mean, rstd)))
    if op == "cross_entropy":
        _, lse = K.cross_entropy_forward(x, targets)
        one = np.ones((), np.float32)
        return ((lambda: K.cross_entropy_forward(x, targets)),
                (lambda: K.cross_entropy_backward(one, x, targets, lse)))
    raise ValueError(op)


def torch_cases(op: str, x, dout, targets) -> Tuple[Callable, Callable]:
    import torch
    import torch.nn.functional as F

    aten = torch.ops.aten
    tx, td = torch.from_numpy(x), torch.from_numpy(dout)
    if op == "relu":
        return (lambda: torch.relu(tx)), (lambda: aten.threshold_backward(td, tx, 0))
    if op == "gelu":
        return (lambda: F.gelu(tx)), (lambda: aten.gelu_backward(td, tx))
    if op == "tanh":
        ty = torch.tanh(tx)
        return (lambda: torch.tanh(tx)), (lambda: aten.tanh_backward(td, ty))
    if op == "sigmoid":
        ty = torch.sigmoid(tx)
        return (lambda: torch.sigmoid(tx)), (lambda: aten.sigmoid_backward(td, ty))
    if op == "softmax":
        ty = torch.softmax(tx, -1)
        return ((lambda: torch.softmax(tx, -1)),
                (lambda: aten._softmax_backward_data(td, ty, -1, torch.float32)))
    if op == "log_softmax":
        ty = torch.log_softmax(tx, -1)
        return ((lambda: torch.log_softmax(tx, -1)),
                (lambda: aten._log_softmax_backward_data(td, ty, -1, torch.float32)))
    if op == "layernorm":
        D = x.shape[-1]
        w, b = torch.ones(D), torch.zeros(D)
        _, mean, rstd = aten.native_layer_norm(tx, [D], w, b, 1e-5)
        return ((lambda: F.layer_norm(tx, [D], w, b)),
                (lambda: aten.native_layer_norm_backward(td, tx, [D], mean, rstd, w, b,
                                                         [True, True, True])))
    if op == "cross_entropy":
        tt = torch.from_numpy(targets)
        logp = torch.log_softmax(tx, -1)
        one = torch.ones(())
        noweight = None

        def backward():  # aten's own decomposition of F.cross_entropy's backward
            g = aten.nll_loss_backward(one, logp, tt, noweight, 1, -100, torch.tensor(float(len(targets))))
            return aten._log_softmax_backward_data(g, logp, -1, torch.float32)

        return (lambda: F.cross_entropy(tx, tt)), backward
    raise ValueError(op)


def numpy_cases(op: str, x, dout, targets) -> Tuple[Optional[Callable], Optional[Callable]]:
    if op == "relu":
        return (lambda: np.maximum(x, 0)), (lambda: dout * (x > 0))
    if op == "gelu":
        return None, None
    if op == "tanh":
        y = np.tanh(x)
        return (lambda: np.tanh(x)), (lambda: dout * (1 - y * y))
    if op == "sigmoid":
        y = 1 / (1 + np.exp(-x))
        return (lambda: 1 / (1 + np.exp(-x))), (lambda: dout * y * (1 - y))
    if op == "softmax":
        y = _np_softmax(x)
        return (lambda: _np_softmax(x)), (lambda: y * (dout - (dout * y).sum(-1, keepdims=True)))
    if op == "log_softmax":
        y = _np_log_softmax(x)
        return (lambda: _np_log_softmax(x)), (lambda: dout - np.exp(y) * dout.sum(-1, keepdims=True))
    if op == "layernorm":
        D = x.shape[-1]
        w, b = np.ones(D, np.float32), np.zeros(D, np.float32)
        return (lambda: _np_layernorm(x, w, b)), (lambda: _np_layernorm_backward(dout, x, w))
    if op == "cross_entropy":
        return (lambda: _np_cross_entropy(x, targets)), (lambda: _np_cross_entropy_backward(x, targets))
    raise ValueError(op)


CLOCK = time.process_time


def calls_per_sample(fn: Callable, target_s: float = 0.004) -> int:
    """Enough calls that one sample lasts about target_s."""
    fn()
    t0 = time.perf_counter()
    fn()
    dt = max(time.perf_counter() - t0, 1e-7)
    return max(1, int(target_s / dt))


def time_interleaved(cases: Case, repeats: int) -> Dict[str, Optional[float]]:
    """Median microseconds per call for each library, interleaving the
    libraries within every round."""
    live = {lib: fn for lib, fn in cases.items() if fn is not None}
    number = {lib: calls_per_sample(fn) for lib, fn in live.items()}
    samples: Dict[str, List[float]] = {lib: [] for lib in live}
    for _ in range(repeats):
        for lib, fn in live.items():
            t0 = CLOCK()
            for _ in range(number[lib]):
                fn()
            samples[lib].append((CLOCK() - t0) / number[lib] * 1e6)
    return {lib: (statistics.median(samples[lib]) if lib in samples else None) for lib in cases}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--shapes", nargs="+", default=["8x128", "4096x1024"])
    ap.add_argument("--ops", nargs="+", default=list(OPS), choices=OPS)
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    args = ap.parse_args()

    global CLOCK
    CLOCK = time.process_time if args.clock == "cpu" else time.perf_counter
    import ctransformer.kernels as K
    K.set_num_threads(1)
    have_torch = False
    if not args.no_torch:
        try:
            import torch
            torch.set_num_threads(1)
            have_torch = True
        except ImportError:
            print("torch not installed: no torch column")

    def fmt(v: Optional[float]) -> str:
        return f"{v:10.1f}" if v is not None else f"{'-':>10}"

    rows = []
    print(f"{'op':<14}{'shape':<11}{'pass':<9}{'ours us':>10}{'torch us':>10}{'numpy us':>10}{'ours/torch':>11}")
    for shape_text in args.shapes:
        shape = tuple(int(s) for s in shape_text.split("x"))
        x, dout, targets = _inputs(shape)
        for op in args.ops:
            libs = {"ours": ours_cases(op, x, dout, targets),
                    "torch": torch_cases(op, x, dout, targets) if have_torch else (None, None),
                    "numpy": numpy_cases(op, x, dout, targets)}
            for pass_index, pass_name in enumerate(("forward", "backward")):
                res = time_interleaved({lib: pair[pass_index] for lib, pair in libs.items()}, args.repeats)
                ratio = (f"{res['ours'] / res['torch']:11.2f}" if res.get("torch") else f"{'-':>11}")
                print(f"{op:<14}{shape_text:<11}{pass_name:<9}{fmt(res['ours'])}{fmt(res['torch'])}"
                      f"{fmt(res['numpy'])}{ratio}", flush=True)
                rows.append(dict(op=op, shape=shape_text, pass_=pass_name, **res))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
