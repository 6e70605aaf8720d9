"""Thread control shared by our kernels and the bundled OpenBLAS."""
from __future__ import annotations

from .. import _C


def set_num_threads(n: int) -> None:
    """Use ``n`` threads in every kernel (OpenBLAS included)."""
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"set_num_threads: n must be an int, got {type(n).__name__}")
    if n >= 2 ** 31:
        raise ValueError(f"set_num_threads: n must be < 2**31, got {n}")
    _C.set_num_threads(n)


def get_num_threads() -> int:
    """Number of threads kernels use."""
    return _C.get_num_threads()


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
