"""Module-level forms of Tensor methods (torch.exp, torch.sum, torch.max, ...).

Kept apart from the ctransformer.tensor package because their names shadow Python builtins."""
from .tensor import Tensor, tensor

_METHODS = (
    "exp", "log", "log1p", "sqrt", "rsqrt", "square", "abs", "sign", "floor", "ceil", "round", "sin", "cos",
    "tanh", "sigmoid", "relu", "clamp", "clip", "sum", "mean", "std", "var", "max", "min", "amax", "amin",
    "argmax", "argmin", "topk", "sort", "argsort", "cumsum", "softmax", "log_softmax", "norm", "masked_fill",
    "masked_select", "transpose", "t", "permute", "reshape", "flatten", "unflatten", "squeeze", "unsqueeze",
    "chunk", "split", "unbind", "flip", "gather", "index_select", "repeat_interleave", "clone", "detach",
    "allclose", "isclose", "equal", "logical_not", "logical_and", "logical_or", "neg", "any", "all", "isnan",
    "isinf", "isfinite", "nonzero", "sub", "eq", "ne", "lt", "le", "gt", "ge", "swapaxes", "true_divide",
    "reciprocal", "log2", "log10", "exp2", "expm1", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh",
    "acosh", "atanh", "arcsin", "arccos", "arctan", "arcsinh", "arccosh", "arctanh", "trunc", "fix", "frac",
    "atan2", "arctan2", "sgn", "prod", "remainder", "fmod", "erf", "erfc",
)


def _wrap_fn(name):
    method = getattr(Tensor, name)

    def fn(t, *args, **kwargs):
        if not isinstance(t, Tensor):
            t = tensor(t)
        return method(t, *args, **kwargs)
    fn.__name__ = name
    fn.__qualname__ = name
    fn.__doc__ = f"Module-level form of ``Tensor.{name}``."
    return fn


for _name in _METHODS:
    globals()[_name] = _wrap_fn(_name)

del _name


def pow(a, b) -> Tensor:
    """``a ** b``; either side may be a Python number."""
    if isinstance(a, Tensor):
        return a ** b
    if isinstance(b, Tensor):
        return b.__rpow__(a)
    return tensor(a) ** b


def add(a, b, alpha=1) -> Tensor:
    return a.add(b, alpha) if isinstance(a, Tensor) else tensor(a).add(b, alpha)


def mul(a, b) -> Tensor:
    return a * b if isinstance(a, Tensor) else b.__rmul__(a) if isinstance(b, Tensor) else tensor(a) * b


multiply = mul


def div(a, b) -> Tensor:
    return a / b if isinstance(a, Tensor) else b.__rtruediv__(a) if isinstance(b, Tensor) else tensor(a) / b


divide = div

__all__ = [_n for _n in list(globals()) if not _n.startswith("_") and _n not in ("Tensor", "tensor")]
