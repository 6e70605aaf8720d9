"""Settings and entry points that CPU scripts execute even though they
concern GPUs, compilers or clusters: ``torch.backends`` flags,
``torch.compile`` (returns its argument), default-device calls,
``set_printoptions``, and ``bfloat16`` (a name
only: tensors of it are refused, NumPy has no such type)."""
from __future__ import annotations

import types
from typing import Any, Callable, Optional

import numpy as np

from . import _C
from .tensor import _dtypes, device

__all__ = ["compile", "set_default_device", "get_default_device", "set_printoptions",
           "backends", "use_deterministic_algorithms", "are_deterministic_algorithms_enabled",
           "is_deterministic_algorithms_warn_only_enabled"]


def compile(model: Optional[Callable] = None, *, fullgraph: bool = False, dynamic: Optional[bool] = None,
            backend: Any = "inductor", mode: Optional[str] = None, options: Optional[dict] = None,
            disable: bool = False) -> Any:
    """``torch.compile``: there is no compiler here, so the model (or
    function) is returned unchanged; its results are those torch's
    compiled model computes.  Used as ``@compile(...)`` it returns an
    identity decorator."""
    if model is None:
        return lambda fn: fn
    if not callable(model):
        raise RuntimeError(f"torch.compile: model must be callable, got {type(model).__name__}")
    return model


def set_default_device(dev: Any) -> None:
    """The device factories use when given none (None: the CPU).  As in a
    CPU-only build of torch, any device can be set; a factory then refuses a
    non-CPU one (AssertionError for CUDA)."""
    _dtypes._default_device[0] = _dtypes._cpu if dev is None else device(dev)


def get_default_device() -> device:
    """The default device (a CUDA one is refused on reading, as torch's CPU build does)."""
    current = _dtypes._default_device[0]
    if current.type == "cuda":
        _dtypes._require_cpu(current)
    return current


def set_printoptions(precision: Optional[int] = None, threshold: Optional[int] = None,
                     edgeitems: Optional[int] = None, linewidth: Optional[int] = None,
                     profile: Optional[str] = None, sci_mode: Optional[bool] = None) -> None:
    """How tensors print (NumPy's print options underneath; ``profile`` is
    "default", "short" or "full" as in torch)."""
    opts: dict = {}
    if profile is not None:
        presets = {"default": dict(precision=4, threshold=1000, edgeitems=3, linewidth=80),
                   "short": dict(precision=2, threshold=1000, edgeitems=2, linewidth=80),
                   "full": dict(precision=4, threshold=np.iinfo(np.int64).max, edgeitems=3, linewidth=80)}
        if profile not in presets:
            raise ValueError(f"set_printoptions: unknown profile {profile!r}")
        opts.update(presets[profile])
    for k, v in dict(precision=precision, threshold=threshold, edgeitems=edgeitems, linewidth=linewidth).items():
        if v is not None:
            opts[k] = v
    if sci_mode is not None:
        opts["suppress"] = not sci_mode
    np.set_printoptions(**opts)


class _Flags(types.SimpleNamespace):
    """A settings namespace whose flags can be read and set (no effect on a CPU build)."""


def _is_available() -> bool:
    return False


backends = types.ModuleType("ctransformer.backends")
backends.__doc__ = ("torch.backends: cudnn / cuda / mps flags are settable and have no effect on the CPU "
                    "(cudnn.is_available() and mps.is_available() are False).")
backends.cudnn = _Flags(enabled=True, deterministic=False, benchmark=False, allow_tf32=True,
                        is_available=_is_available, version=lambda: None)
backends.cuda = _Flags(matmul=_Flags(allow_tf32=False, allow_fp16_reduced_precision_reduction=True,
                                     allow_bf16_reduced_precision_reduction=True), is_built=_is_available)
backends.mps = _Flags(is_available=_is_available, is_built=_is_available)
backends.mkldnn = _Flags(enabled=True, is_available=_is_available)
backends.opt_einsum = _Flags(enabled=False, is_available=_is_available)


_deterministic_warn_only = False


def use_deterministic_algorithms(mode: bool, *, warn_only: bool = False) -> None:
    """``torch.use_deterministic_algorithms``.  Every kernel here is already
    deterministic at a fixed thread count except in one way: the thread
    policy (``kernels.threads_for``) lets a mid-size GEMM use fewer threads
    while other processes keep the cores busy, and OpenBLAS sums a product
    in an order that depends on its thread count, so the last bits can
    differ from run to run.  ``mode=True`` makes the policy load-blind (the
    thread count of a call depends on its size and ``set_num_threads`` only),
    so the same seed and thread count repeat every bit; ``False`` (the
    default) lets speed under load win."""
    if not isinstance(mode, bool):
        raise TypeError(f"use_deterministic_algorithms: mode must be bool, got {type(mode).__name__}")
    if not isinstance(warn_only, bool):
        raise TypeError(f"use_deterministic_algorithms: warn_only must be bool, got {type(warn_only).__name__}")
    global _deterministic_warn_only
    _C.thread_policy_load_blind(mode)
    _deterministic_warn_only = mode and warn_only


def are_deterministic_algorithms_enabled() -> bool:
    """Whether ``use_deterministic_algorithms(True)`` is in force."""
    return bool(_C.thread_policy_load_blind(None))


def is_deterministic_algorithms_warn_only_enabled() -> bool:
    """Whether it was set with ``warn_only=True`` (nothing here warns: no
    kernel is nondeterministic once the thread policy is load-blind)."""
    return _deterministic_warn_only
