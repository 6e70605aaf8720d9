"""ctransformer.kernels - the C kernels as plain functions over NumPy arrays.

Every kernel family has a ``*_forward`` / ``*_backward`` pair.  Conventions:

* float32 and float64 arrays (one C source serves both); all float inputs of
  one call must share a dtype.  Integer ids may be any integer dtype.
* Non-contiguous, negative-stride, misaligned and big-endian inputs are
  copied, never misread.  Arrays a kernel updates in place (optimizer
  state, gradient accumulators passed as ``d*=`` arguments, KV caches) must
  be C-contiguous and in the machine's byte order, and are never copied; one
  that shares memory with another argument of the call is a ValueError.
* Zero-size dimensions give empty results and zero gradients, as torch.
  Dimensions the 32-bit OpenBLAS cannot take (``shape[-1]`` or
  ``prod(shape[:-1])`` >= 2**31) are a ValueError.
* Forward returns what backward needs (e.g. LayerNorm's mean and rstd).
* Backward returns fresh gradients, or *accumulates* (``+=``) into arrays you
  pass, which is how the autograd layer sums gradients without copies.
* Bad input raises TypeError / ValueError / IndexError naming the function,
  the argument, and the expected and actual value.
* The GIL is released while the C code runs.

``source(name)`` returns the C of any kernel (``source("layernorm_backward")``),
syntax-highlighted in Jupyter.
"""
from .activation import ACTIVATION_KINDS, activation_backward, activation_forward, activation_saves_output
from .dropout import dropout_backward, dropout_forward
from .embedding import embedding_backward, embedding_forward
from .layernorm import layernorm_backward, layernorm_forward
from .attention import (MHAGrads, MHASaved, PackedGrads, PackedSaved, mha_backward, mha_forward,  # noqa: F401
                        mha_packed_backward, mha_packed_forward, positional_encoding, sdpa_backward, sdpa_forward)
from .decode import (attend_step, beam_step, cache_permute, cache_reorder, decode_layer_plan, decode_layer_step,
                     decode_linear, decode_model_greedy, decode_model_step, kv_cache_append)
from .fused import (add_layernorm_backward, add_layernorm_forward, bias_act_backward, bias_act_dropout_forward,
                    bias_act_forward, dropout_add_layernorm_backward, dropout_add_layernorm_forward, ff_backward)
from .linear import bmm_backward, bmm_forward, linear_backward, linear_forward, matmul_forward, matmul_backward
from .softmax import log_softmax_backward, log_softmax_forward, softmax_backward, softmax_forward
from .crossentropy import cross_entropy_backward, cross_entropy_forward
from .recurrent import (rnn_backward, rnn_cell_backward, rnn_cell_forward, rnn_forward, rnn_stack_backward,
                        rnn_stack_forward)
from .optim import adam_multi_step, adam_step, clip_grad_norm, grad_norm, rmsprop_step, sgd_step
from .runtime import blas_config, get_num_threads, packed_gemm, set_num_threads
from .source import source  # the C text of a kernel: source("layernorm_backward")

__all__ = [name for name in dir() if not name.startswith("_")]
