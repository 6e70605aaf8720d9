"""Recurrent modules with torch's names, arguments, shapes, init and
state_dict keys: RNN, LSTM, GRU and their cells.

A whole stack (every layer and direction) is ONE autograd op around
``kernels.rnn_stack_forward`` / ``rnn_stack_backward``: its outputs are
(output, h_n[, c_n]) and its parents the input, the initial states and
every weight, so backward through time runs in C.
"""
from __future__ import annotations

import math
import numbers
import warnings
from typing import List, Optional, Tuple, Union

import numpy as np

from ..autograd import no_grad
from ..ops.recurrent import NAMES as _NAMES, rnn_cell, rnn_stack
from ..tensor import Tensor, _check_device, get_default_dtype
from .module import Module
from .parameter import Parameter
from .utils.rnn_pack import PackedSequence

__all__ = ["RNNBase", "RNN", "LSTM", "GRU", "RNNCellBase", "RNNCell", "LSTMCell", "GRUCell"]

_GATES = {"rnn_tanh": 1, "rnn_relu": 1, "lstm": 4, "gru": 3}


def _check_size(name: str, value, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} should be of type int, got: {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be greater than zero" if minimum == 1
                         else f"{name} must be at least {minimum}, got {value}")
    return int(value)


def _new_weight(shape: Tuple[int, ...], dtype) -> Parameter:
    return Parameter(Tensor._wrap(np.empty(shape, np.dtype(dtype or get_default_dtype()))))


def _shape_list(t: Tensor) -> str:
    return "[" + ", ".join(str(d) for d in t.shape) + "]"


class RNNBase(Module):
    """Shared machinery of RNN / LSTM / GRU (torch.nn.RNNBase).

    Parameters per layer k and direction (suffix ``_reverse`` for the
    backward direction), registered in torch's order:
    weight_ih_l{k} (G*H, I_k), weight_hh_l{k} (G*H, H), bias_ih_l{k},
    bias_hh_l{k} (G*H); I_0 = input_size, I_k = D*H; G = 1, 4, 3."""

    def __init__(self, mode: str, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 proj_size: int = 0, device=None, dtype=None) -> None:
        super().__init__()
        if isinstance(dropout, bool) or not isinstance(dropout, numbers.Number) or not 0 <= dropout <= 1:
            raise ValueError("dropout should be a number in range [0, 1] representing the probability of an "
                             "element being zeroed")
        if dropout > 0 and num_layers == 1:
            warnings.warn("dropout option adds dropout after all but last recurrent layer, so non-zero dropout "
                          f"expects num_layers greater than 1, but got dropout={dropout} and "
                          f"num_layers={num_layers}")
        if proj_size != 0:
            raise NotImplementedError(f"{_NAMES[mode]}: proj_size (LSTM with projections) is not supported by "
                                      f"ctransformer, got proj_size={proj_size}; use proj_size=0")
        _check_device(device)
        self.mode = mode
        self.input_size = _check_size("input_size", input_size, 0)
        self.hidden_size = _check_size("hidden_size", hidden_size)
        self.num_layers = _check_size("num_layers", num_layers)
        self.bias = bool(bias)
        self.batch_first = bool(batch_first)
        self.dropout = float(dropout)
        self.bidirectional = bool(bidirectional)
        self.proj_size = 0
        D = 2 if bidirectional else 1
        G, H = _GATES[mode], self.hidden_size
        self._flat_weights_names: List[str] = []
        for layer in range(self.num_layers):
            for direction in range(D):
                suffix = "_reverse" if direction == 1 else ""
                layer_in = self.input_size if layer == 0 else H * D
                shapes = [("weight_ih", (G * H, layer_in)), ("weight_hh", (G * H, H))]
                if self.bias:
                    shapes += [("bias_ih", (G * H,)), ("bias_hh", (G * H,))]
                for stem, shape in shapes:
                    name = f"{stem}_l{layer}{suffix}"
                    setattr(self, name, _new_weight(shape, dtype))
                    self._flat_weights_names.append(name)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Every weight and bias ~ U(-1/sqrt(H), 1/sqrt(H)), as torch."""
        stdv = 1.0 / math.sqrt(self.hidden_size)
        with no_grad():  # as torch's init.uniform_: an in-place fill of leaves that require grad
            for w in self.parameters():
                w.uniform_(-stdv, stdv)

    @property
    def _flat_weights(self) -> List[Parameter]:
        return [getattr(self, n) for n in self._flat_weights_names]

    @property
    def all_weights(self) -> List[List[Parameter]]:
        per = 4 if self.bias else 2
        flat = self._flat_weights
        return [flat[i:i + per] for i in range(0, len(flat), per)]

    def flatten_parameters(self) -> None:
        """No-op (torch's cuDNN weight compaction)."""

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if self.mode == "rnn_relu":
            s += ", nonlinearity='relu'"
        if not self.bias:
            s += ", bias=False"
        if self.batch_first:
            s += ", batch_first=True"
        if self.dropout:
            s += f", dropout={self.dropout}"
        if self.bidirectional:
            s += ", bidirectional=True"
        return s

    # ---------------------------------------------------------------- checks
    def _check_input(self, x: Tensor) -> None:
        name = type(self).__name__
        if not isinstance(x, Tensor):
            raise TypeError(f"{name}: input must be a Tensor or PackedSequence, got {type(x).__name__}")
        if x.dim() not in (2, 3):
            raise ValueError(f"{name}: Expected input to be 2D or 3D, got {x.dim()}D instead")
        if x.shape[-1] != self.input_size:
            raise RuntimeError(f"input.size(-1) must be equal to input_size. Expected {self.input_size}, "
                               f"got {x.shape[-1]}")
        w = self.weight_ih_l0
        if x.dtype != w.dtype:
            raise ValueError(f"RNN input dtype ({x.dtype}) does not match weight dtype ({w.dtype}). Convert "
                             f"input: input.to({w.dtype}), or convert model: model.to({x.dtype})")

    def _check_state(self, state: Tensor, expected: Tuple[int, ...], label: str) -> None:
        if not isinstance(state, Tensor):
            raise TypeError(f"{type(self).__name__}: {label} must be a Tensor, got {type(state).__name__}")
        if tuple(state.shape) != expected:
            raise RuntimeError(f"Expected {label} size {expected}, got {_shape_list(state)}")
        if state.dtype != self.weight_ih_l0.dtype:
            raise ValueError(f"{type(self).__name__}: {label} dtype ({state.dtype}) does not match weight "
                             f"dtype ({self.weight_ih_l0.dtype})")

    # ---------------------------------------------------------------- forward
    def forward(self, input: Union[Tensor, PackedSequence], hx=None):
        """input (T, B, I) (batch_first: (B, T, I)), (T, I) unbatched, or a
        PackedSequence; hx (L*D, B, H) ((L*D, H) unbatched), for LSTM a
        tuple (h0, c0); None = zeros.
        Returns (output, h_n) / LSTM (output, (h_n, c_n)): output (T, B, D*H)
        (batch_first: (B, T, D*H)) or a PackedSequence; h_n, c_n (L*D, B, H)."""
        lstm = self.mode == "lstm"
        packed = isinstance(input, PackedSequence)
        if packed:
            x, lengths, batch_first = input.padded, input.lengths, False
            self._check_input(x)
            if x.dim() != 3:
                raise ValueError(f"{type(self).__name__}: a PackedSequence must hold (T, B, I) data, "
                                 f"got {x.dim()}D")
            unbatched = False
        else:
            x, lengths, batch_first = input, None, self.batch_first
            self._check_input(x)
            unbatched = x.dim() == 2
        h0, c0 = (hx if hx is not None else (None, None)) if lstm else (hx, None)
        if lstm and hx is not None and not (isinstance(hx, (tuple, list)) and len(hx) == 2):
            raise TypeError(f"LSTM: hx must be a tuple (h_0, c_0), got {type(hx).__name__}")
        if unbatched:
            self._check_unbatched_states(h0, c0, lstm)
            x = x.unsqueeze(0 if batch_first else 1)
            h0 = None if h0 is None else h0.unsqueeze(1)
            c0 = None if c0 is None else c0.unsqueeze(1)
        else:
            self._check_batched_states(h0, c0, lstm)
        B = x.shape[0] if batch_first else x.shape[1]
        D = 2 if self.bidirectional else 1
        expected = (self.num_layers * D, B, self.hidden_size)
        if h0 is not None:
            self._check_state(h0, expected, "hidden[0]" if lstm else "hidden")
        if c0 is not None:
            self._check_state(c0, expected, "hidden[1]")
        out, h_n, c_n = self._run(x, h0, c0, lengths, batch_first)
        if unbatched:
            out = out.squeeze(0 if batch_first else 1)
            h_n = h_n.squeeze(1)
            c_n = None if c_n is None else c_n.squeeze(1)
        if packed:
            out = PackedSequence(out, lengths, input.sorted_indices, input.unsorted_indices)
        return (out, (h_n, c_n)) if lstm else (out, h_n)

    def _check_unbatched_states(self, h0, c0, lstm: bool) -> None:
        if lstm and h0 is not None and (h0.dim() != 2 or c0.dim() != 2):
            raise RuntimeError(f"For unbatched 2-D input, hx and cx should also be 2-D but got "
                               f"({h0.dim()}-D, {c0.dim()}-D) tensors")
        if not lstm and h0 is not None and h0.dim() != 2:
            raise RuntimeError(f"For unbatched 2-D input, hx should also be 2-D but got {h0.dim()}-D tensor")

    def _check_batched_states(self, h0, c0, lstm: bool) -> None:
        if lstm and h0 is not None and (h0.dim() != 3 or c0.dim() != 3):
            raise RuntimeError(f"For batched 3-D input, hx and cx should also be 3-D but got "
                               f"({h0.dim()}-D, {c0.dim()}-D) tensors")
        if not lstm and h0 is not None and h0.dim() != 3:
            raise RuntimeError(f"For batched 3-D input, hx should also be 3-D but got {h0.dim()}-D tensor")

    def _run(self, x: Tensor, h0: Optional[Tensor], c0: Optional[Tensor], lengths: Optional[np.ndarray],
             batch_first: bool):
        """The one autograd op: (output, h_n, c_n | None)."""
        return rnn_stack(x, h0, c0, self._flat_weights, self.mode, self.num_layers, self.bidirectional, self.bias,
                         self.dropout, self.training, lengths, batch_first)


class RNN(RNNBase):
    """Elman RNN: h_t = act(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh), act = tanh | relu."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, nonlinearity: str = "tanh",
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 device=None, dtype=None) -> None:
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"Unknown nonlinearity '{nonlinearity}'. Select from 'tanh' or 'relu'.")
        self.nonlinearity = nonlinearity
        super().__init__("rnn_" + nonlinearity, input_size, hidden_size, num_layers, bias, batch_first,
                         dropout, bidirectional, 0, device, dtype)


class LSTM(RNNBase):
    """Long short-term memory (gates i, f, g, o; torch's maths and layout).
    ``proj_size`` other than 0 raises NotImplementedError."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 proj_size: int = 0, device=None, dtype=None) -> None:
        super().__init__("lstm", input_size, hidden_size, num_layers, bias, batch_first, dropout,
                         bidirectional, proj_size, device, dtype)


class GRU(RNNBase):
    """Gated recurrent unit (gates r, z, n; torch's maths and layout)."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 device=None, dtype=None) -> None:
        super().__init__("gru", input_size, hidden_size, num_layers, bias, batch_first, dropout,
                         bidirectional, 0, device, dtype)


# ---------------------------------------------------------------------------
# cells

class RNNCellBase(Module):
    """One step: weight_ih (G*H, I), weight_hh (G*H, H), bias_ih, bias_hh (G*H)."""

    def __init__(self, mode: str, input_size: int, hidden_size: int, bias: bool = True, device=None,
                 dtype=None) -> None:
        super().__init__()
        _check_device(device)  # a non-CPU device is refused as torch's CPU build refuses it
        self.mode = mode
        self.input_size = _check_size("input_size", input_size, 0)
        self.hidden_size = _check_size("hidden_size", hidden_size)
        self.bias = bool(bias)
        G, H = _GATES[mode], self.hidden_size
        self.weight_ih = _new_weight((G * H, self.input_size), dtype)
        self.weight_hh = _new_weight((G * H, H), dtype)
        if self.bias:
            self.bias_ih = _new_weight((G * H,), dtype)
            self.bias_hh = _new_weight((G * H,), dtype)
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        stdv = 1.0 / math.sqrt(self.hidden_size)
        with no_grad():  # as torch's init.uniform_: an in-place fill of leaves that require grad
            for w in self.parameters():
                w.uniform_(-stdv, stdv)

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if not self.bias:
            s += ", bias=False"
        if self.mode == "rnn_relu":
            s += ", nonlinearity='relu'"
        return s

    def _check_cell_args(self, x: Tensor, states: Tuple[Optional[Tensor], ...]) -> bool:
        """Validate as torch; returns whether the input is unbatched (1-D)."""
        name = type(self).__name__
        if not isinstance(x, Tensor):
            raise TypeError(f"{name}: input must be a Tensor, got {type(x).__name__}")
        if x.dim() not in (1, 2):
            raise ValueError(f"{name}: Expected input to be 1D or 2D, got {x.dim()}D instead")
        if x.shape[-1] != self.input_size:
            raise RuntimeError(f"input has inconsistent input_size: got {x.shape[-1]} expected {self.input_size}")
        if x.dtype != self.weight_ih.dtype:
            raise ValueError(f"{name}: input dtype ({x.dtype}) does not match weight dtype ({self.weight_ih.dtype})")
        unbatched = x.dim() == 1
        B = 1 if unbatched else x.shape[0]
        for k, s in enumerate(states):
            if s is None:
                continue
            if not isinstance(s, Tensor):
                raise TypeError(f"{name}: hx must be Tensors, got {type(s).__name__}")
            if s.dim() != x.dim():
                raise RuntimeError(f"{name}: Expected hidden[{k}] to be {x.dim()}D like the input, got {s.dim()}D")
            if not unbatched and s.shape[0] != B:
                raise RuntimeError(f"Input batch size {B} doesn't match hidden{k} batch size {s.shape[0]}")
            if s.shape[-1] != self.hidden_size:
                raise RuntimeError(f"hidden{k} has inconsistent hidden_size: got {s.shape[-1]}, "
                                   f"expected {self.hidden_size}")
            if s.dtype != x.dtype:
                raise ValueError(f"{name}: hidden{k} dtype ({s.dtype}) does not match input dtype ({x.dtype})")
        return unbatched

    def _step(self, x: Tensor, h: Optional[Tensor], c: Optional[Tensor]):
        """One autograd op: (h', c' | None)."""
        return rnn_cell(x, h, c, self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh, self.mode)


class RNNCell(RNNCellBase):
    """h' = act(x W_ih^T + b_ih + h W_hh^T + b_hh), act = tanh | relu.
    input (B, I) or (I), hx (B, H) / (H) or None -> h' (B, H) / (H)."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, nonlinearity: str = "tanh",
                 device=None, dtype=None) -> None:
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"Unknown nonlinearity: {nonlinearity}")
        self.nonlinearity = nonlinearity
        super().__init__("rnn_" + nonlinearity, input_size, hidden_size, bias, device, dtype)

    def forward(self, input: Tensor, hx: Optional[Tensor] = None) -> Tensor:
        unbatched = self._check_cell_args(input, (hx,))
        if unbatched:
            input, hx = input.unsqueeze(0), None if hx is None else hx.unsqueeze(0)
        h, _ = self._step(input, hx, None)
        return h.squeeze(0) if unbatched else h


class GRUCell(RNNCellBase):
    """One GRU step.  input (B, I) or (I), hx (B, H) / (H) or None -> h' (B, H) / (H)."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None, dtype=None) -> None:
        super().__init__("gru", input_size, hidden_size, bias, device, dtype)

    def forward(self, input: Tensor, hx: Optional[Tensor] = None) -> Tensor:
        unbatched = self._check_cell_args(input, (hx,))
        if unbatched:
            input, hx = input.unsqueeze(0), None if hx is None else hx.unsqueeze(0)
        h, _ = self._step(input, hx, None)
        return h.squeeze(0) if unbatched else h


class LSTMCell(RNNCellBase):
    """One LSTM step.  input (B, I) or (I), hx = (h, c) each (B, H) / (H), or
    None -> (h', c')."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None, dtype=None) -> None:
        super().__init__("lstm", input_size, hidden_size, bias, device, dtype)

    def forward(self, input: Tensor, hx: Optional[Tuple[Tensor, Tensor]] = None) -> Tuple[Tensor, Tensor]:
        if hx is not None and not (isinstance(hx, (tuple, list)) and len(hx) == 2):
            raise TypeError(f"LSTMCell: hx must be a tuple (h, c), got {type(hx).__name__}")
        h, c = hx if hx is not None else (None, None)
        unbatched = self._check_cell_args(input, (h, c))
        if unbatched:
            input = input.unsqueeze(0)
            h = None if h is None else h.unsqueeze(0)
            c = None if c is None else c.unsqueeze(0)
        h_new, c_new = self._step(input, h, c)
        return (h_new.squeeze(0), c_new.squeeze(0)) if unbatched else (h_new, c_new)
