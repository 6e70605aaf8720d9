"""Thread control shared by our kernels and the bundled OpenBLAS."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .. import _C


def set_num_threads(n: int) -> None:
    """Use at most ``n`` threads in every kernel: our pool's, which splits
    GEMMs and the per-head and recurrent loops (OpenBLAS runs each piece on
    one thread).

    ``n`` is a ceiling: each call uses as many of them as its work is worth
    (``threads_for``), so that the default (all cores) is never slower than
    one thread, on a quiet or a busy machine."""
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"set_num_threads: n must be an int, got {type(n).__name__}")
    if n >= 2 ** 31:
        raise ValueError(f"set_num_threads: n must be < 2**31, got {n}")
    _C.set_num_threads(n)


def get_num_threads() -> int:
    """Number of threads kernels use."""
    return _C.get_num_threads()


def threads_for(flops: float, ceiling: int | None = None) -> int:
    """Threads (1 .. ceiling) the thread policy gives one kernel call doing
    ``flops`` floating-point operations (a GEMM (M, K) @ (K, N): 2 M N K),
    with ``ceiling`` defaulting to ``get_num_threads()``.

    Below ~5 MFLOP one thread; from ~4 GFLOP the ceiling; in between as
    many as there are idle cores (other processes' load counts), the
    thresholds measured in csrc/parallel.c (bench/bench_threads.py --gemm)."""
    if ceiling is None:
        ceiling = get_num_threads()
    return _C.threads_for(float(flops), int(ceiling))


def pool_threads_for(flops: float, ceiling: int | None = None) -> int:
    """Threads (1 .. ceiling) the thread policy gives one job of our own
    thread pool (the per-head loop of attention) doing about ``flops``
    floating-point operations; ``ceiling`` defaults to ``get_num_threads()``.

    The pool's workers stay awake between the kernels of a training step, so
    a job is worth a second thread from ~0.25 MFLOP (a GEMM from ~5); above it,
    as many as there are idle cores, or the ceiling in deterministic mode.
    The results of a pooled kernel do not depend on the count."""
    if ceiling is None:
        ceiling = get_num_threads()
    return _C.pool_threads_for(float(flops), int(ceiling))


def share_speeds(speeds: Sequence[float] | None = None) -> tuple[float, ...]:
    """Pin the relative speeds of the pool's threads (thread 0 the caller,
    then the workers; each within [0.33, 3]) that size the blocks of a split
    GEMM or decoding GEMV, or with None forget them and learn them again from
    the next split jobs.  Returns the speeds of threads 0-7 before the call.

    A thread's block is as long as its speed makes it: on a machine whose
    cores run at different speeds (other guests, other processes) equal
    halves leave the faster thread waiting for the slower.  Pinned speeds
    apply in deterministic mode too (which otherwise splits into equal
    blocks, so that results repeat run to run); tests use them to check
    skewed splits."""
    if speeds is not None:
        speeds = [float(v) for v in speeds]
    return _C.share_speeds(speeds)


def copy_array(a: np.ndarray) -> np.ndarray:
    """A C-ordered copy of ``a`` (``np.array(a, order="C", copy=True)``): a
    contiguous float32 or float64 array is copied in blocks on the thread
    pool, the GIL released; any other array by NumPy."""
    return _C.copy_array(a)


def blas_config() -> str:
    """Which OpenBLAS this build links."""
    return _C.blas_config()


def packed_gemm(mode: str | None = None) -> tuple[str, str]:
    """The float32 recurrent kernels' packed-weight GEMM (csrc/packed_gemm.h).

    ``mode`` is ``"auto"`` (default: AVX-512 or AVX2, whichever the CPU
    runs), ``"avx512"``, ``"avx2"`` or ``"off"`` (every step a BLAS GEMM), or
    None to only ask.  Returns ``(previous mode, kernel now in use)``, the
    kernel being ``"avx512"``, ``"avx2"`` or ``"off"``.  Results agree to
    float32 rounding whichever runs; tests use this to check every path."""
    if mode is not None and not isinstance(mode, str):
        raise TypeError(f"packed_gemm: mode must be a str or None, got {type(mode).__name__}")
    return _C.packed_gemm(mode)


# glibc malloc settings.  Backward frees each node's saved activations as
# soon as the node has run (as torch does), so a training step ends with its
# large buffers free.  With glibc's defaults those buffers are mmap'd and
# unmapped, or trimmed from the heap top, and the next step's forward takes
# a page fault for every page again (measured: 60x more minor faults and a
# 40% slower MultiheadAttention step).  A fixed mmap threshold (32 MiB,
# glibc's maximum for the dynamic one) and a larger trim threshold keep
# freed buffers in the heap for reuse.  Set CT_MALLOPT=0 to leave malloc alone.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
MALLOC_SETTINGS = {"mmap_threshold": 32 << 20, "trim_threshold": 128 << 20}


def tune_malloc() -> bool:
    """Apply MALLOC_SETTINGS through glibc's mallopt (False where not glibc,
    or when disabled with CT_MALLOPT=0 or the MALLOC_*_ environment)."""
    import ctypes
    import os
    import sys

    if os.environ.get("CT_MALLOPT", "1") == "0" or not sys.platform.startswith("linux"):
        return False
    if "MALLOC_MMAP_THRESHOLD_" in os.environ or "MALLOC_TRIM_THRESHOLD_" in os.environ:
        return False  # the user chose
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    ok = mallopt(_M_MMAP_THRESHOLD, MALLOC_SETTINGS["mmap_threshold"])
    ok &= mallopt(_M_TRIM_THRESHOLD, MALLOC_SETTINGS["trim_threshold"])
    return bool(ok)


MALLOC_TUNED = tune_malloc()
