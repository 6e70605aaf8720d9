"""Thread control shared by our kernels and the bundled OpenBLAS."""
from .. import _C


def set_num_threads(n: int) -> None:
    """Use ``n`` threads in every kernel (OpenBLAS included)."""
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"set_num_threads: n must be an int, got {type(n).__name__}")
    _C.set_num_threads(n)


def get_num_threads() -> int:
    """Number of threads kernels use."""
    return _C.get_num_threads()


def blas_config() -> str:
    """Which OpenBLAS this build links."""
    return _C.blas_config()
