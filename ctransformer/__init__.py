"""ctransformer - sequence models with every forward and backward kernel in
readable C, behind PyTorch's API over NumPy.

    import ctransformer as torch
    import ctransformer.nn as nn
    import ctransformer.nn.functional as F
    import ctransformer.optim as optim
"""
__version__ = "0.1.0"

import os as _os

# (ctransformer keeps OpenBLAS on one thread and splits GEMMs over its own
# pool, csrc/ct_blas.h; this matters to a program that sets OpenBLAS's own
# thread count through its API.)
# Idle OpenBLAS threads busy-wait for 2^OPENBLAS_THREAD_TIMEOUT cycles after
# each parallel call before they sleep: by default 2^28 (~0.1 s), spinning on
# a core that another process (or our recurrent kernels' own threads, see
# csrc/packed_gemm.c: that halved 2-thread LSTM speed) needs.  2^20 cycles
# (~0.3 ms) keeps back-to-back GEMMs warm: waking a worker that went to sleep
# costs more than a second thread gains on a small GEMM inside a training
# step (measured, demo-size Transformer step, 2 threads / 1 thread: 0.89 at
# 20, 1.14 at 4, OpenBLAS's minimum).  The thread policy (csrc/parallel.c)
# uses a second thread only where no other process needs the core, so the
# spinning is short and on an idle core.  The bundled OpenBLAS reads this
# name (checked in its strings) once, when it loads with _C below; a value
# the user set wins.
_os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "20")


def _load_extension() -> None:
    """Import the compiled kernels (ctransformer._C) first, so that a source
    tree without them fails with one sentence and the fix, not with an
    import error from deep inside a submodule."""
    try:
        from . import _C  # noqa: F401
    except ImportError as exc:
        here = _os.path.dirname(_os.path.abspath(__file__))
        built = [n for n in _os.listdir(here) if n.startswith("_C.") and n.endswith((".so", ".pyd"))]
        if built:  # compiled but unloadable (wrong Python, missing OpenBLAS, ...)
            raise ImportError(f"ctransformer's C extension in {here} failed to load ({exc}); rebuild it "
                              "with `pip install .` from the repository root") from exc
        raise ImportError(
            f"ctransformer's C extension (ctransformer._C) is not built in {here}: this is a source "
            "tree. Build it with `pip install .` from the repository root (which also makes this "
            "tree importable), or `pip install -e . --no-build-isolation` for development "
            "(see CONTRIBUTING.md).") from None


_load_extension()

from . import kernels  # noqa: E402
from .autograd import (enable_grad, inference_mode, is_grad_enabled, is_inference_mode_enabled, no_grad,
                       set_grad_enabled)
from .random import Generator, default_generator, get_rng_state, initial_seed, manual_seed, seed, set_rng_state
import builtins as _builtins

from .tensor import *  # noqa: F401,F403  (dtypes, Tensor, factories, ops)
from ._functions import *  # noqa: F401,F403  (torch.exp, torch.sum, ...)
from .tensor import Size, Tensor, device, float32, get_default_dtype, set_default_dtype
from .tensor._dtypes import _CPU_ONLY, _require_cpu  # noqa: E402
from .tensor import bool_ as bool  # noqa: A001  (torch.bool)
from .tensor import int_ as int  # noqa: A001  (torch.int)
from .tensor import float_ as float  # noqa: A001  (torch.float)
from . import autograd
from . import testing  # noqa: E402


def set_num_threads(n: int) -> None:
    """One knob for every thread we use: the ceiling of our thread pool
    (csrc/parallel.c), which splits GEMMs, attention's heads and the
    recurrent time loops; OpenBLAS itself stays on one thread.
    OMP_NUM_THREADS / OPENBLAS_NUM_THREADS are read at import."""
    kernels.set_num_threads(n)


def get_num_threads() -> int:
    return kernels.get_num_threads()


def set_flush_denormal(mode: bool) -> bool:
    """Not supported: ctransformer leaves the caller's floating-point
    environment alone (IEEE subnormals, like NumPy).  Returns False, as torch
    does on CPUs without support.  (Softmax weights below the smallest
    normal number are 0 regardless, and the attention kernels flush every
    subnormal term: on x86 each subnormal costs a microcode assist, and a
    trained model's attention has many.  csrc/softmax.c; csrc/ct.h,
    ct_flush_subnormals_begin.)"""
    return False


_NEEDS_CUDA = frozenset("""synchronize current_device set_device get_device_name get_device_properties
get_device_capability init ipc_collect mem_get_info get_rng_state set_rng_state get_rng_state_all
set_rng_state_all initial_seed reset_peak_memory_stats memory_stats memory_summary current_stream
default_stream stream""".split())


class _Cuda:
    """ctransformer runs on the CPU; ``cuda.is_available()`` is False."""

    @staticmethod
    def is_available() -> bool:
        return False

    @staticmethod
    def device_count() -> int:
        return 0

    @staticmethod
    def manual_seed(seed: int) -> None:  # noqa: F811  (torch's parameter name)
        return None

    manual_seed_all = manual_seed

    @staticmethod
    def is_bf16_supported(including_emulation: bool = True) -> bool:
        return False

    @staticmethod
    def seed() -> None:
        return None

    @staticmethod
    def is_initialized() -> bool:
        return False

    @staticmethod
    def empty_cache() -> None:
        """Nothing is cached (torch's CPU build: a no-op too)."""
        return None

    @staticmethod
    def memory_allocated(device=None) -> int:  # noqa: F811  (torch's parameter name)
        return 0

    memory_reserved = max_memory_allocated = max_memory_reserved = memory_allocated

    def __getattr__(self, name: str):
        """The calls that need a GPU raise as torch's CPU build raises them:
        AssertionError('Torch not compiled with CUDA enabled') on the call."""
        if name not in _NEEDS_CUDA:
            raise AttributeError(f"ctransformer.cuda has no attribute {name!r} ({_CPU_ONLY})")

        def needs_cuda(*args, **kwargs):
            _require_cpu("cuda")

        needs_cuda.__name__ = name
        return needs_cuda

    @property
    def amp(self):
        """torch.cuda.amp (GradScaler disables itself; autocast is a no-op)."""
        import types

        from . import amp as _amp
        return types.SimpleNamespace(GradScaler=_amp.CudaGradScaler, autocast=_amp.autocast)


cuda = _Cuda()


def _threads_from_env() -> None:
    n = _os.environ.get("OMP_NUM_THREADS", "")
    if n.isdigit() and _builtins.int(n) > 0:
        kernels.set_num_threads(_builtins.int(n))


_threads_from_env()

# PyTorch-style layers, optimizers, data loading and checkpoints (Python over the kernels).
from . import nn, optim, utils  # noqa: E402
from .serialization import load, save  # noqa: E402

# Names real PyTorch scripts use around their models (tensor_ops_extra.py, runtime_extra.py, ...).
from . import tensor_ops_extra as _tensor_ops_extra, dtype_extra as _dtype_extra  # noqa: E402
_tensor_ops_extra.attach()
from . import tensor_ops_more as _tensor_ops_more  # noqa: E402
_tensor_ops_more.attach()
from .tensor_ops_more import (broadcast_to, diag, diagonal, diff, dot, ger, hstack, index_add,  # noqa: E402,F401
                              index_put, masked_scatter, meshgrid, moveaxis, movedim, outer, take_along_dim,
                              tensor_split, trace, unique, vstack)
from . import tensor_ops_stats as _tensor_ops_stats  # noqa: E402
_tensor_ops_stats.attach()
from . import tensor_ops_inplace as _tensor_ops_inplace  # noqa: E402
_tensor_ops_inplace.attach()  # (last: the in-place forms of every method above)
from .tensor_ops_inplace import clamp_max, clamp_min  # noqa: E402,F401
from .tensor_ops_stats import (addcdiv, addcmul, addmm, bernoulli, bincount, bucketize, can_cast,  # noqa: E402,F401
                               cdist, count_nonzero, cumprod, histc, isin, kthvalue, lerp, linalg, logaddexp,
                               logspace, median, promote_types, result_type, searchsorted, std_mean, var_mean)
_dtype_extra.attach()
from .tensor_ops_extra import (einsum, index_fill, logsumexp, nan_to_num, narrow, roll,  # noqa: E402,F401
                               scatter_add, tril_indices, triu_indices)
from .dtype_extra import bfloat16  # noqa: E402,F401
from .runtime_extra import (are_deterministic_algorithms_enabled, backends, compile,  # noqa: E402,F401,A004
                            get_default_device, is_deterministic_algorithms_warn_only_enabled,
                            set_default_device, set_printoptions, use_deterministic_algorithms)
from . import amp, distributed, multiprocessing, serialization  # noqa: E402,F401
import sys as _sys  # noqa: E402
_sys.modules[__name__ + ".backends"] = backends
from . import onnx  # noqa: E402,F401
from .amp import autocast  # noqa: E402,F401  (torch.autocast: a no-op context here)
from . import _coverage  # noqa: E402
_coverage.install()  # a missing torch name is an AttributeError saying why, and what to use
