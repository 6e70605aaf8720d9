"""Tensor: a NumPy array with autograd, speaking PyTorch's API.

Elementwise arithmetic, reshapes and reductions run in NumPy (they are
memory-bound and NumPy's loops are already C); every layer's maths
(matmul, softmax, activations, layer norm, attention, recurrences, losses,
...) runs in our kernels, through the autograd ops of ``ctransformer.ops``.
The storage is ``t._data``; torch's ``t.data`` is a Tensor sharing it,
without history.

dtype rules follow torch: Python floats -> float32 (the default dtype),
ints -> int64, bools -> bool; ``int tensor * 0.5`` is float32; ``int / int``
is float32; a 0-d tensor does not promote a dimensioned tensor of the same
category (``float32 tensor * float64 0-d tensor`` is float32).

The package, in import order (each module imports only those above it; a
mixin reads the names defined below it from this package when it runs):

=================  ==========================================================
``_dtypes``        dtypes, default dtype, ``Size``, ``device``, ``FloatTensor``
``_helpers``       broadcasting sums, dims, indices, type promotion
``_operators``     mixin: arithmetic methods, comparisons, logic
``_elementwise``   mixin: exp, log, activations, clamp, masked fills
``_reductions``    mixin: sum, mean, var, max, sort, softmax
``_shape``         mixin: view, reshape, transpose, expand, split, ...
``_indexing``      mixin: ``t[i]``, ``t[i] = v``, gather, scatter, ``new_*``
``_core``          ``Tensor`` (built from the mixins): basics, autograd, in-place
``_arith``         ``_unary`` and the ``+ - * / **`` operators (fast Nodes)
``_creation``      factories, random factories, ``where``, ``mm``, ``bmm``
=================  ==========================================================
"""
from __future__ import annotations

from ._dtypes import (BoolTensor, ByteTensor, DoubleTensor, FloatTensor, IntTensor, LongTensor, Size, bool_, device,
                      double, finfo, float16, float32, float64, float_, get_default_dtype, half, iinfo, int8, int16,
                      int32, int64, int_, long, set_default_dtype, short, uint8)
from ._dtypes import _TYPE_NAMES, _TYPE_OF, _TypedTensor, _as_dtype, _check_device, _cpu
from ._helpers import (_along_axis_key, _axes, _check_index_dtype, _data_of, _float_of, _index_to_numpy,
                       _is_basic_index, _MinMax, _ndim_of, _norm_dim, _promote, _shape_args, _sum_to, _to_array,
                       _untensor)
from ._core import Tensor, _rebuild, _tnew, _wrap
from ._arith import _ARITH, _arith, _unary
from ._creation import (arange, as_tensor, bmm, cat, concat, concatenate, empty, empty_like, eye, from_numpy, full,
                        full_like, is_floating_point, is_tensor, linspace, maximum, minimum, mm, multinomial, normal,
                        numel, ones, ones_like, rand, rand_like, randint, randint_like, randn, randn_like, randperm,
                        stack, tensor, tril, triu, where, zeros, zeros_like)
from ._creation import _factory, _gen

# the kernel-backed ops (ctransformer/ops/<family>.py) import the names above
from ..ops.activation import activation as _activation
from ..ops.linear import matmul
from ..ops.softmax import softmax as _softmax

__all__ = ["BoolTensor", "ByteTensor", "DoubleTensor", "FloatTensor", "IntTensor", "LongTensor", "Size", "Tensor",
           "arange", "as_tensor", "bmm", "bool_", "cat", "concat", "concatenate", "device", "double", "empty",
           "empty_like", "eye", "finfo", "float16", "float32", "float64", "float_", "from_numpy", "full", "full_like",
           "get_default_dtype", "half", "iinfo", "int16", "int32", "int64", "int8", "int_", "is_floating_point",
           "is_tensor", "linspace", "long", "matmul", "maximum", "minimum", "mm", "multinomial", "normal", "numel",
           "ones", "ones_like", "rand", "rand_like", "randint", "randint_like", "randn", "randn_like", "randperm",
           "set_default_dtype", "short", "stack", "tensor", "tril", "triu", "uint8", "where", "zeros", "zeros_like"]

# pickles and reprs name the package, as before the split (``ctransformer.tensor.Tensor``)
Tensor.__module__ = _rebuild.__module__ = __name__
