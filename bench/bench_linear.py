"""Benchmark: our linear layer (forward + backward) against raw OpenBLAS sgemm
and torch, at 1 and 2 threads.

    python bench/bench_linear.py

Shapes: float32, inp (M=4096, K=512), weight (N=2048, K), bias (N).  One
forward + backward is three GEMMs (out = inp @ W^T, dinp = dout @ W,
dW = dout^T @ inp) = 6*M*K*N flops, plus the bias broadcast and reduction.

* ours:  ctransformer.kernels.linear_forward + linear_backward (allocating
  their outputs, as the autograd layer does).
* sgemm: the same three GEMMs straight into preallocated outputs, by calling
  scipy_cblas_sgemm of our bundled libscipy_openblas (ctransformer/_libs)
  through ctypes: the floor our kernels sit on.
* torch: torch.nn.functional.linear forward + autograd backward.

Each figure is the median of REPS runs after WARMUP runs.  Threads are set
with ctransformer.kernels.set_num_threads (OpenBLAS) and
torch.set_num_threads.

Inputs are normal random values, so no subnormals occur.  The FP environment
is left alone (no FTZ/DAZ): subnormal operands slow sgemm ~30x on this CPU,
so a benchmark fed with tiny values would measure that instead.
The machine is shared: the load average is printed with the results.
"""
from __future__ import annotations

import ctypes
import os
import statistics
import sys
import time

import numpy as np

# run from a checkout (python bench/bench_linear.py): use the in-place build
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import ctransformer  # noqa: E402
import ctransformer.kernels as K  # noqa: E402

M, KDIM, N = 4096, 512, 2048
WARMUP, REPS = 1, 5
FLOPS = 6.0 * M * KDIM * N

CBLAS_ROW_MAJOR, CBLAS_NO_TRANS, CBLAS_TRANS = 101, 111, 112


def load_openblas() -> ctypes.CDLL:
    """The libscipy_openblas our extension links (same file, so same threads)."""
    path = os.path.join(os.path.dirname(ctransformer.__file__), "_libs", "libscipy_openblas.so")
    lib = ctypes.CDLL(path)
    lib.scipy_cblas_sgemm.restype = None
    lib.scipy_cblas_sgemm.argtypes = [ctypes.c_int] * 6 + [ctypes.c_float, ctypes.c_void_p, ctypes.c_int,
                                                           ctypes.c_void_p, ctypes.c_int, ctypes.c_float,
                                                           ctypes.c_void_p, ctypes.c_int]
    lib.scipy_openblas_set_num_threads.argtypes = [ctypes.c_int]
    return lib


def sgemm(lib, trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc):
    """Row-major c (m, n) = op(a) @ op(b)."""
    lib.scipy_cblas_sgemm(CBLAS_ROW_MAJOR, trans_a, trans_b, m, n, k, 1.0, a.ctypes.data, lda,
                          b.ctypes.data, ldb, 0.0, c.ctypes.data, ldc)


def median_ms(fn) -> float:
    for _ in range(WARMUP):
        fn()
    times = []
    for _ in range(REPS):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def main() -> None:
    try:
        import torch
    except ImportError:  # ours and raw sgemm only
        torch = None

    rng = np.random.default_rng(0)
    x = rng.standard_normal((M, KDIM), dtype=np.float32)
    w = (rng.standard_normal((N, KDIM), dtype=np.float32) / np.sqrt(KDIM)).astype(np.float32)
    b = rng.standard_normal(N, dtype=np.float32)
    dout = rng.standard_normal((M, N), dtype=np.float32)
    lib = load_openblas()
    out, dx, dw = (np.empty(s, np.float32) for s in [(M, N), (M, KDIM), (N, KDIM)])

    def ours():
        K.linear_forward(x, w, b)
        K.linear_backward(dout, x, w)

    def raw():
        sgemm(lib, CBLAS_NO_TRANS, CBLAS_TRANS, M, N, KDIM, x, KDIM, w, KDIM, out, N)
        sgemm(lib, CBLAS_NO_TRANS, CBLAS_NO_TRANS, M, KDIM, N, dout, N, w, KDIM, dx, KDIM)
        sgemm(lib, CBLAS_TRANS, CBLAS_NO_TRANS, N, KDIM, M, dout, N, x, KDIM, dw, KDIM)

    impls = {"ours": ours, "sgemm": raw}
    # they agree (checked once, outside the timings)
    ref_dx, ref_dw, _ = K.linear_backward(dout, x, w)
    raw()
    assert np.allclose(dx, ref_dx, rtol=1e-3, atol=1e-3) and np.allclose(dw, ref_dw, rtol=1e-3, atol=1e-2)
    if torch is not None:
        xt = torch.tensor(x, requires_grad=True)
        wt = torch.tensor(w, requires_grad=True)
        bt = torch.tensor(b, requires_grad=True)
        doutt = torch.tensor(dout)

        def torch_linear():
            xt.grad = wt.grad = bt.grad = None
            torch.nn.functional.linear(xt, wt, bt).backward(doutt)

        torch_linear()
        assert np.allclose(xt.grad.numpy(), ref_dx, rtol=1e-3, atol=1e-3)
        impls["torch"] = torch_linear

    print(f"linear forward+backward, float32, M={M} K={KDIM} N={N}, bias; "
          f"{FLOPS / 1e9:.1f} GFLOP per run; median of {REPS} after {WARMUP} warm-up")
    print(f"BLAS: {K.blas_config()}; torch {torch.__version__ if torch else 'not installed'}; "
          f"load average before: {os.getloadavg()[0]:.2f}")
    print(f"{'threads':>7} {'impl':>6} {'ms':>9} {'GFLOP/s':>8} {'ours/impl':>10}")
    for threads in (1, 2):
        K.set_num_threads(threads)
        if torch is not None:
            torch.set_num_threads(threads)
        times = {}
        for name, fn in impls.items():
            # raw sgemm threads itself; ours keeps OpenBLAS at one thread and splits over its pool
            lib.scipy_openblas_set_num_threads(threads if name == "sgemm" else 1)
            times[name] = median_ms(fn)
        lib.scipy_openblas_set_num_threads(1)
        for name, ms in times.items():
            ratio = "" if name == "ours" else f"{times['ours'] / ms:.3f}"
            print(f"{threads:>7} {name:>6} {ms:>9.1f} {FLOPS / ms / 1e6:>8.1f} {ratio:>10}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
