"""Module-level forms of Tensor methods (torch.exp, torch.sum, torch.max, ...).

Kept apart from tensor.py because their names shadow Python builtins."""
from .tensor import Tensor, tensor

def _wrap_fn(name):
    def fn(t, *args, **kwargs):
        if not isinstance(t, Tensor):
            t = tensor(t)
        return getattr(t, name)(*args, **kwargs)
    fn.__name__ = name
    fn.__doc__ = f"Module-level form of ``Tensor.{name}``."
    return fn


for _name in ("exp", "log", "sqrt", "rsqrt", "abs", "sin", "cos", "tanh", "sigmoid", "relu", "sum", "mean",
              "std", "var", "max", "min", "argmax", "argmin", "softmax", "log_softmax", "clamp", "clip",
              "masked_fill", "transpose", "permute", "reshape", "flatten", "squeeze", "unsqueeze", "topk",
              "norm", "chunk", "split", "flip", "gather", "index_select", "allclose", "equal",
              "logical_not", "neg", "any", "all"):
    globals()[_name] = _wrap_fn(_name)

del _name


def pow(a, b) -> Tensor:
    return a ** b if isinstance(a, Tensor) else tensor(a) ** b


def add(a, b, alpha=1) -> Tensor:
    return a.add(b, alpha) if isinstance(a, Tensor) else tensor(a).add(b, alpha)


def mul(a, b) -> Tensor:
    return a * b if isinstance(a, Tensor) else tensor(a) * b


def div(a, b) -> Tensor:
    return a / b if isinstance(a, Tensor) else tensor(a) / b

__all__ = [_n for _n in list(globals()) if not _n.startswith("_") and _n not in ("Tensor", "tensor")]
