"""nn.Module: the container of parameters, buffers and sub-modules.

Mirrors torch.nn.Module: attributes that are Parameters / Modules are
registered by ``__setattr__``; ``named_parameters`` walks modules in
registration order (own parameters first, then each child's), deduplicating
shared tensors; ``state_dict`` keys are dotted paths (``"0.weight"``,
``"encoder.layers.1.norm.bias"``).
"""
from __future__ import annotations

from collections import OrderedDict, namedtuple
from typing import Any, Callable, Iterator, Mapping, Optional, Set, Tuple

import numpy as np

from ..autograd import no_grad
from ..tensor import Tensor, _as_dtype, device as _device
from ..tensor._dtypes import _require_cpu
from .parameter import Parameter

__all__ = ["Module"]


class _IncompatibleKeys(namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    """What ``load_state_dict(strict=False)`` returns."""

    def __repr__(self) -> str:
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()

    __str__ = __repr__


def _addindent(s: str, num_spaces: int) -> str:
    lines = s.split("\n")
    if len(lines) == 1:
        return s
    first = lines.pop(0)
    return first + "\n" + "\n".join(" " * num_spaces + line for line in lines)


def _to_array(value, name: str) -> np.ndarray:
    if isinstance(value, Tensor):
        return value._data
    if isinstance(value, np.ndarray):
        return value
    try:
        return np.asarray(value)
    except Exception as exc:  # noqa: BLE001  (report which key was unusable)
        raise TypeError(f"load_state_dict: value for {name!r} must be a Tensor or array, "
                        f"got {type(value).__name__}") from exc


class Module:
    """Base class of every layer and model (torch.nn.Module's API)."""

    training: bool
    _version = 1

    def __init__(self, *args, **kwargs) -> None:
        if args or kwargs:
            raise TypeError(f"{type(self).__name__}.__init__() got unexpected arguments "
                            f"{args!r} {kwargs!r} (Module.__init__ takes none)")
        d = self.__dict__
        d["training"] = True
        d["_parameters"] = OrderedDict()
        d["_buffers"] = OrderedDict()
        d["_non_persistent_buffers_set"] = set()
        d["_modules"] = OrderedDict()
        d["_forward_hooks"] = OrderedDict()
        d["_forward_pre_hooks"] = OrderedDict()

    # ------------------------------------------------------------ forward
    def forward(self, *args, **kwargs):
        raise NotImplementedError(f'Module [{type(self).__name__}] is missing the required "forward" function')

    def __call__(self, *args, **kwargs):
        for hook in self.__dict__.get("_forward_pre_hooks", {}).values():
            res = hook(self, args)
            if res is not None:
                args = res if isinstance(res, tuple) else (res,)
        bw_hooks = self.__dict__.get("_backward_hooks")
        if bw_hooks:
            from ._backward_hooks import call_with_backward_hooks
            out = call_with_backward_hooks(self, list(bw_hooks.values()), args,
                                           lambda a: self.forward(*a, **kwargs))
        else:
            out = self.forward(*args, **kwargs)
        for hook in self.__dict__.get("_forward_hooks", {}).values():
            res = hook(self, args, out)
            if res is not None:
                out = res
        return out

    def register_forward_hook(self, hook: Callable) -> "_RemovableHandle":
        """``hook(module, args, output)`` runs after forward; a non-None result replaces the output."""
        return _RemovableHandle(self._forward_hooks, hook)

    def register_full_backward_hook(self, hook: Callable, prepend: bool = False) -> "_RemovableHandle":
        """``hook(module, grad_input, grad_output)`` runs when the gradients
        w.r.t. the module's positional Tensor inputs have been computed
        (entries None where an input needs none); a tuple it returns
        replaces grad_input.  grad_output: the gradients of the outputs."""
        if "_backward_hooks" not in self.__dict__:
            self.__dict__["_backward_hooks"] = OrderedDict()
        handle = _RemovableHandle(self._backward_hooks, hook)
        if prepend:
            self._backward_hooks.move_to_end(handle.id, last=False)
        return handle

    def register_forward_pre_hook(self, hook: Callable) -> "_RemovableHandle":
        """``hook(module, args)`` runs before forward; a non-None result replaces the args."""
        return _RemovableHandle(self._forward_pre_hooks, hook)

    # ------------------------------------------------------------ registration
    def _check_name(self, name: str, kind: str) -> None:
        if "_parameters" not in self.__dict__:
            raise AttributeError(f"cannot assign {kind} before Module.__init__() call")
        if not isinstance(name, str):
            raise TypeError(f"{kind} name should be a string. Got {type(name).__name__}")
        if name == "":
            raise KeyError(f'{kind} name can\'t be empty string ""')
        if "." in name:
            raise KeyError(f'{kind} name can\'t contain ".", got: {name}')

    def register_parameter(self, name: str, param: Optional[Parameter]) -> None:
        """Add ``param`` (a Parameter, or None for an absent optional weight) as ``name``."""
        self._check_name(name, "parameter")
        if hasattr(self, name) and name not in self._parameters:
            raise KeyError(f"attribute '{name}' already exists")
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"cannot assign '{type(param).__name__}' object to parameter '{name}' "
                            "(ctransformer.nn.Parameter or None required)")
        self._parameters[name] = param

    def register_buffer(self, name: str, tensor: Optional[Tensor], persistent: bool = True) -> None:
        """Add a non-learnable Tensor (e.g. a positional table) as ``name``.
        Persistent buffers are part of ``state_dict``."""
        self._check_name(name, "buffer")
        if hasattr(self, name) and name not in self._buffers:
            raise KeyError(f"attribute '{name}' already exists")
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"cannot assign '{type(tensor).__name__}' object to buffer '{name}' "
                            "(ctransformer Tensor or None required)")
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent_buffers_set.discard(name)
        else:
            self._non_persistent_buffers_set.add(name)

    def add_module(self, name: str, module: Optional["Module"]) -> None:
        """Add a child module as ``name``."""
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        self._check_name(name, "module")
        if hasattr(self, name) and name not in self._modules:
            raise KeyError(f"attribute '{name}' already exists")
        self._modules[name] = module

    register_module = add_module

    def __setattr__(self, name: str, value: Any) -> None:
        d = self.__dict__
        params = d.get("_parameters")
        if isinstance(value, Parameter):
            if params is None:
                raise AttributeError("cannot assign parameters before Module.__init__() call")
            self._remove_everywhere(name)
            self.register_parameter(name, value)
            return
        if params is not None and name in params:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as parameter '{name}' "
                                "(ctransformer.nn.Parameter or None expected)")
            params[name] = None
            return
        modules = d.get("_modules")
        if isinstance(value, Module):
            if modules is None:
                raise AttributeError("cannot assign module before Module.__init__() call")
            self._remove_everywhere(name)
            modules[name] = value
            return
        if modules is not None and name in modules:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as child module '{name}' "
                                "(ctransformer.nn.Module or None expected)")
            modules[name] = None
            return
        buffers = d.get("_buffers")
        if buffers is not None and name in buffers:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"cannot assign '{type(value).__name__}' as buffer '{name}' "
                                "(ctransformer Tensor or None expected)")
            buffers[name] = value
            return
        object.__setattr__(self, name, value)

    def _remove_everywhere(self, name: str) -> None:
        d = self.__dict__
        d.pop(name, None)
        for key in ("_parameters", "_buffers", "_modules"):
            d[key].pop(name, None)
        d["_non_persistent_buffers_set"].discard(name)

    def __getattr__(self, name: str) -> Any:
        d = self.__dict__
        for key in ("_parameters", "_buffers", "_modules"):
            store = d.get(key)
            if store is not None and name in store:
                return store[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name: str) -> None:
        d = self.__dict__
        for key in ("_parameters", "_buffers", "_modules"):
            if name in d.get(key, ()):
                del d[key][name]
                d["_non_persistent_buffers_set"].discard(name)
                return
        object.__delattr__(self, name)

    def __dir__(self):
        keys = list(super().__dir__())
        keys += list(self._parameters) + list(self._buffers) + list(self._modules)
        return sorted(set(k for k in keys if not k[0].isdigit()))

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)

    # ------------------------------------------------------------ traversal
    def named_modules(self, memo: Optional[Set[int]] = None, prefix: str = "",
                      remove_duplicate: bool = True) -> Iterator[Tuple[str, "Module"]]:
        """(dotted name, module) for self and every descendant, pre-order."""
        if memo is None:
            memo = set()
        if remove_duplicate:
            if id(self) in memo:
                return
            memo.add(id(self))
        yield prefix, self
        for name, module in self._modules.items():
            if module is None:
                continue
            sub = prefix + ("." if prefix else "") + name
            yield from module.named_modules(memo, sub, remove_duplicate)

    def modules(self) -> Iterator["Module"]:
        for _, m in self.named_modules():
            yield m

    def named_children(self) -> Iterator[Tuple[str, "Module"]]:
        seen = set()
        for name, module in self._modules.items():
            if module is not None and id(module) not in seen:
                seen.add(id(module))
                yield name, module

    def children(self) -> Iterator["Module"]:
        for _, m in self.named_children():
            yield m

    def _named_members(self, get_members, prefix: str, recurse: bool, remove_duplicate: bool):
        seen = set()
        mods = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) if recurse \
            else [(prefix, self)]
        for mod_prefix, mod in mods:
            for name, value in get_members(mod):
                if value is None:
                    continue
                if remove_duplicate:
                    if id(value) in seen:
                        continue
                    seen.add(id(value))
                yield mod_prefix + ("." if mod_prefix else "") + name, value

    def named_parameters(self, prefix: str = "", recurse: bool = True,
                         remove_duplicate: bool = True) -> Iterator[Tuple[str, Parameter]]:
        """(dotted name, Parameter), torch's order; a parameter shared by
        several modules appears once (first name) unless remove_duplicate=False."""
        return self._named_members(lambda m: m._parameters.items(), prefix, recurse, remove_duplicate)

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix: str = "", recurse: bool = True,
                      remove_duplicate: bool = True) -> Iterator[Tuple[str, Tensor]]:
        return self._named_members(lambda m: m._buffers.items(), prefix, recurse, remove_duplicate)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def get_submodule(self, target: str) -> "Module":
        """The descendant at dotted path ``target`` ("" is self)."""
        mod = self
        if target == "":
            return mod
        for item in target.split("."):
            if item not in mod._modules or mod._modules[item] is None:
                raise AttributeError(f"{mod._get_name()} has no attribute `{item}`")
            mod = mod._modules[item]
        return mod

    def get_parameter(self, target: str) -> Parameter:
        mod_path, _, name = target.rpartition(".")
        mod = self.get_submodule(mod_path)
        if name not in mod._parameters:
            raise AttributeError(f"{mod._get_name()} has no parameter `{name}`")
        return mod._parameters[name]

    def get_buffer(self, target: str) -> Tensor:
        mod_path, _, name = target.rpartition(".")
        mod = self.get_submodule(mod_path)
        if not hasattr(mod, name):
            raise AttributeError(f"{mod._get_name()} has no attribute `{name}`")
        if name not in mod._buffers:
            raise AttributeError(f"`{name}` is not a buffer")
        return mod._buffers[name]

    def apply(self, fn: Callable[["Module"], None]) -> "Module":
        """Call ``fn`` on every child (recursively) and then on self."""
        for module in self.children():
            module.apply(fn)
        fn(self)
        return self

    # ------------------------------------------------------------ modes and grads
    def train(self, mode: bool = True) -> "Module":
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        self.training = mode
        for module in self.children():
            module.train(mode)
        return self

    def eval(self) -> "Module":
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> "Module":
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset every parameter's gradient (to None, or to zeros in place)."""
        for p in self.parameters():
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                p.grad = Tensor._wrap(np.zeros_like(p.grad._data, order="C"))

    # ------------------------------------------------------------ dtype / device
    def _apply(self, fn: Callable[[np.ndarray], np.ndarray]) -> "Module":
        """Replace every parameter's / buffer's storage by ``fn(storage)``,
        keeping the Parameter objects (so optimizers still hold them)."""
        for module in self.modules():
            for p in module._parameters.values():
                if p is None:
                    continue
                new = fn(p._data)
                if new is not p._data:
                    p._data = np.ascontiguousarray(new)
                    if p.grad is not None:
                        p.grad = Tensor._wrap(np.ascontiguousarray(fn(p.grad._data)))
            for name, b in module._buffers.items():
                if b is not None:
                    new = fn(b._data)
                    if new is not b._data:
                        b._data = new
        return self

    def to(self, *args, **kwargs) -> "Module":
        """``to(dtype)``, ``to("cpu")``, ``to(tensor)``: floating-point
        parameters and buffers are cast in place; CUDA is an error."""
        dtype = kwargs.get("dtype")
        for a in list(args) + [kwargs.get("device")]:
            if a is None:
                continue
            if isinstance(a, Tensor):
                dtype = a.dtype
            elif isinstance(a, (str, _device)):
                _require_cpu(a)  # CUDA: AssertionError, as torch's CPU build
            else:
                dtype = a
        if dtype is None:
            return self
        dt = _as_dtype(dtype)
        if dt.kind != "f":
            raise TypeError(f"nn.Module.to only accepts floating point dtypes, but got desired dtype={dt}")
        return self._apply(lambda a: a.astype(dt) if a.dtype.kind == "f" and a.dtype != dt else a)

    def float(self) -> "Module":
        return self.to(np.float32)

    def double(self) -> "Module":
        return self.to(np.float64)

    def cpu(self) -> "Module":
        return self

    def cuda(self, device=None) -> "Module":
        _require_cpu("cuda")
        return self

    def type(self, dst_type) -> "Module":
        return self.to(dst_type)

    # ------------------------------------------------------------ state dict
    def _state_items(self, prefix: str, keep_vars: bool):
        for name, p in self._parameters.items():
            if p is not None:
                yield prefix + name, p
        for name, b in self._buffers.items():
            if b is not None and name not in self._non_persistent_buffers_set:
                yield prefix + name, b
        for name, module in self._modules.items():
            if module is not None:
                yield from module._state_items(prefix + name + ".", keep_vars)

    def state_dict(self, *args, destination: Optional[dict] = None, prefix: str = "",
                   keep_vars: bool = False) -> "OrderedDict[str, Tensor]":
        """Parameters and persistent buffers by dotted name (torch's keys).
        Values share storage with the module but carry no autograd history
        (the Parameters themselves with keep_vars=True)."""
        if args:  # torch's deprecated positional (destination, prefix, keep_vars)
            destination = args[0]
            prefix = args[1] if len(args) > 1 else prefix
            keep_vars = args[2] if len(args) > 2 else keep_vars
        if destination is None:
            destination = OrderedDict()
        for key, t in self._state_items(prefix, keep_vars):
            destination[key] = t if keep_vars else t.detach()
        return destination

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True,
                        assign: bool = False) -> _IncompatibleKeys:
        """Copy values (Tensors or NumPy arrays) into this module's
        parameters and persistent buffers, casting to their dtypes.

        Every problem is reported at once in one RuntimeError: missing and
        unexpected keys (when strict) and every shape mismatch (always).
        Nothing is copied unless all checks pass."""
        if not isinstance(state_dict, Mapping):
            raise TypeError(f"Expected state_dict to be dict-like, got {type(state_dict).__name__}.")
        own = OrderedDict(self._state_items("", True))
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        errors, copies = [], []
        for key, target in own.items():
            if key not in state_dict:
                continue
            src = _to_array(state_dict[key], key)
            if src.shape != target._data.shape:
                errors.append(f"size mismatch for {key}: copying a param with shape {_fmt_shape(src.shape)} "
                              f"from checkpoint, the shape in current model is {_fmt_shape(target._data.shape)}.")
                continue
            copies.append((target, src))
        if strict:
            if unexpected:
                errors.insert(0, "Unexpected key(s) in state_dict: {}. ".format(
                    ", ".join(f'"{k}"' for k in unexpected)))
            if missing:
                errors.insert(0, "Missing key(s) in state_dict: {}. ".format(", ".join(f'"{k}"' for k in missing)))
        if errors:
            raise RuntimeError("Error(s) in loading state_dict for {}:\n\t{}".format(
                type(self).__name__, "\n\t".join(errors)))
        with no_grad():
            for target, src in copies:
                if assign:
                    target._data = np.array(src, dtype=target._data.dtype, order="C", copy=True)
                    continue
                if not target._data.flags.writeable:
                    target._data = np.array(target._data, order="C", copy=True)
                np.copyto(target._data, src, casting="unsafe")
        return _IncompatibleKeys(missing, unexpected)

    # ------------------------------------------------------------ repr
    def _get_name(self) -> str:
        return type(self).__name__

    def extra_repr(self) -> str:
        """One line of constructor arguments shown inside ``repr``; override."""
        return ""

    def __repr__(self) -> str:
        extra = self.extra_repr()
        extra_lines = extra.split("\n") if extra else []
        child_lines = [f"({key}): " + _addindent(repr(module), 2) for key, module in self._modules.items()]
        lines = extra_lines + child_lines
        main = self._get_name() + "("
        if lines:
            if len(extra_lines) == 1 and not child_lines:
                main += extra_lines[0]
            else:
                main += "\n  " + "\n  ".join(lines) + "\n"
        return main + ")"


def _fmt_shape(shape) -> str:
    return f"ctransformer.Size({list(shape)})"


class _RemovableHandle:
    _next_id = 0

    def __init__(self, store: dict, hook: Callable) -> None:
        self.store = store
        self.id = _RemovableHandle._next_id
        _RemovableHandle._next_id += 1
        store[self.id] = hook

    def remove(self) -> None:
        self.store.pop(self.id, None)
