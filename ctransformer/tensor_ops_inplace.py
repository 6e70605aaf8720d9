"""torch's in-place variants (``x.exp_()``, ``x.clamp_min_(0)``, ``x.t_()``,
...) of the out-of-place methods, generated from one rule:

* a leaf that requires grad is refused (torch's RuntimeError);
* under autograd (self or an argument requires grad) the result is computed
  out of place and self becomes it, history included (``Tensor._become``);
* otherwise the result is written into self's storage, so views of it see
  the change, as in torch; a result of a wider kind than self (a float
  result into an integer tensor) is refused, as torch refuses it.

Shape-changing ones (t_, transpose_, swapaxes_, swapdims_) always take the
result's layout.  ``attach()`` installs them on :class:`Tensor`.
"""
from __future__ import annotations

from .tensor import Tensor

# out-of-place method -> its in-place form computes it, then writes it into self
_VALUE_OPS = """abs absolute acos acosh arccos arccosh arcsin arcsinh arctan arctanh asin asinh atan atanh ceil
cos cosh erf erfc exp exp2 expm1 fix floor frac log log10 log1p log2 neg negative reciprocal round rsqrt sigmoid
sin sinh sqrt square tan tanh trunc sgn sign nan_to_num clamp_min clamp_max remainder fmod atan2 arctan2 lerp
addcmul addcdiv addmm cumsum cumprod multiply divide subtract true_divide""".split()
_SHAPE_OPS = ("t", "transpose", "swapaxes", "swapdims")
_KIND_RANK = {"b": 0, "u": 1, "i": 1, "f": 2, "c": 3}


def _inplace(name: str):
    method_name = name + "_"

    def method(self: Tensor, *args, **kwargs) -> Tensor:
        self._check_inplace(method_name)
        out = getattr(self, name)(*args, **kwargs)
        if name in _SHAPE_OPS or self._tracked(*args, *kwargs.values()):
            return self._become(out)
        result = out._data
        if _KIND_RANK[result.dtype.kind] > _KIND_RANK[self._data.dtype.kind]:
            raise RuntimeError(f"{method_name}: result type {result.dtype} can't be cast to the desired output "
                               f"type {self._data.dtype}")
        if result.shape != self._data.shape:
            raise RuntimeError(f"{method_name}: the result's shape {tuple(result.shape)} is not the tensor's "
                               f"{tuple(self._data.shape)} (an in-place op cannot broadcast self)")
        self._writable()[...] = result
        return self

    method.__name__ = method.__qualname__ = method_name
    method.__doc__ = f"In place: ``self.{name}(...)`` written into self (see tensor_ops_inplace.py)."
    return method


def clamp_min(self: Tensor, min) -> Tensor:
    """clamp(self, min=min)."""
    return self.clamp(min=min)


def clamp_max(self: Tensor, max) -> Tensor:
    """clamp(self, max=max)."""
    return self.clamp(max=max)


def attach() -> None:
    """Install clamp_min / clamp_max and the in-place variants on Tensor (called once by ``ctransformer``)."""
    Tensor.clamp_min = clamp_min
    Tensor.clamp_max = clamp_max
    for name in (*_VALUE_OPS, *_SHAPE_OPS):
        if not hasattr(Tensor, name + "_") and hasattr(Tensor, name):
            setattr(Tensor, name + "_", _inplace(name))

