"""ctransformer.nn: PyTorch's module API over our kernels.

    import ctransformer.nn as nn
    import ctransformer.nn.functional as F
"""
from . import functional, init, utils
from .module import Module
from .modules import (GELU, CrossEntropyLoss, Dropout, Embedding, Identity, LayerNorm, Linear, LogSoftmax,
                      ModuleDict, ModuleList, MSELoss, NLLLoss, ReLU, Sequential, Sigmoid, Softmax, Tanh)
from .parameter import Parameter

__all__ = ["functional", "init", "utils", "Module", "Parameter", "GELU", "CrossEntropyLoss", "Dropout", "Embedding",
           "Identity", "LayerNorm", "Linear", "LogSoftmax", "ModuleDict", "ModuleList", "MSELoss", "NLLLoss",
           "ReLU", "Sequential", "Sigmoid", "Softmax", "Tanh"]
from .transformer import (MultiheadAttention, PositionalEncoding, Transformer, TransformerDecoder, TransformerDecoderLayer, TransformerEncoder, TransformerEncoderLayer)  # noqa: E402,F401  (attention / Transformer layers)
from .rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNBase, RNNCell, RNNCellBase  # noqa: E402,F401  (recurrent modules)
__all__ += ["MultiheadAttention", "PositionalEncoding", "Transformer", "TransformerDecoder", "TransformerDecoderLayer",
            "TransformerEncoder", "TransformerEncoderLayer", "GRU", "LSTM", "RNN", "GRUCell", "LSTMCell", "RNNBase",
            "RNNCell", "RNNCellBase"]
from .modules import rnn as _modules_rnn, transformer as _modules_transformer  # noqa: E402,F401  (torch's module paths)
from . import parallel  # noqa: E402,F401  (importable; DistributedDataParallel refuses clearly)
from .modules.extra import Flatten, KLDivLoss, RMSNorm, SiLU, Unflatten  # noqa: E402,F401
from .functional_extra import cosine_similarity, kl_div, normalize, rms_norm, silu  # noqa: E402
from .modules.container import ParameterDict, ParameterList  # noqa: E402,F401
from .modules.more import (BCELoss, BCEWithLogitsLoss, ELU, HuberLoss, L1Loss, LeakyReLU,  # noqa: E402,F401
                           LogSigmoid, SmoothL1Loss, Softplus, Hardtanh, ReLU6, Hardsigmoid, Hardswish, Threshold,
                           SELU, CELU, GLU, Mish, Softsign, Tanhshrink, Softmin, PReLU, CosineSimilarity,
                           PairwiseDistance, BatchNorm1d)
from . import functional_act as _functional_act  # noqa: E402
from .functional_more import (binary_cross_entropy, binary_cross_entropy_with_logits, elu,  # noqa: E402
                              huber_loss, l1_loss, leaky_relu, logsigmoid, smooth_l1_loss, softplus)
for _f in (cosine_similarity, kl_div, normalize, rms_norm, silu, binary_cross_entropy,  # torch.nn.functional.<name>
           binary_cross_entropy_with_logits, elu, huber_loss, l1_loss, leaky_relu, logsigmoid, smooth_l1_loss,
           softplus):
    setattr(functional, _f.__name__, _f)
for _name in _functional_act.__all__:  # torch.nn.functional.<name>
    setattr(functional, _name, getattr(_functional_act, _name))
__all__ += ["Flatten", "KLDivLoss", "RMSNorm", "SiLU", "Unflatten", "BCELoss", "BCEWithLogitsLoss", "ELU", "HuberLoss",
            "L1Loss", "LeakyReLU", "LogSigmoid", "SmoothL1Loss", "Softplus", "Hardtanh", "ReLU6", "Hardsigmoid",
            "Hardswish", "Threshold", "SELU", "CELU", "GLU", "Mish", "Softsign", "Tanhshrink", "Softmin", "PReLU",
            "CosineSimilarity", "PairwiseDistance", "BatchNorm1d", "ParameterList", "ParameterDict"]
