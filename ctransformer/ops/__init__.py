"""Kernel-backed autograd ops: one module per kernel family, named like
``csrc/<family>.c`` and ``ctransformer/kernels/<family>.py`` so that one
layer of the model is found under the same file name at every stratum.

Each op takes Tensors whose arguments have already been checked (torch's
argument handling lives in ``nn.functional`` and ``Tensor``), runs the
family's forward kernel and records ONE autograd node whose backward calls
the family's backward kernel:

=============  =====================================================
activation     relu / tanh / sigmoid / gelu (a fast Node subclass)
softmax        softmax / log_softmax along any dim
linear         matmul (torch's broadcasting rules), linear
layernorm      layer_norm
embedding      embedding
dropout        dropout
crossentropy   cross_entropy with class ids or class probabilities
attention      scaled_dot_product_attention, multi-head attention
fused          the Transformer's feed-forward block, add + layer norm
recurrent      RNN / LSTM / GRU stacks and cells
=============  =====================================================

Ops whose maths is plain NumPy (elementwise arithmetic, reductions,
indexing, ...) stay with the Tensor (``ctransformer.tensor``).
"""
