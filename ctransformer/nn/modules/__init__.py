"""The layers of ``ctransformer.nn``."""
from .activation import GELU, LogSoftmax, ReLU, Sigmoid, Softmax, Tanh
from .container import ModuleDict, ModuleList, ParameterDict, ParameterList, Sequential
from .dropout import Dropout
from .linear import Identity, Linear
from .loss import CrossEntropyLoss, MSELoss, NLLLoss
from .normalization import LayerNorm
from .sparse import Embedding

__all__ = ["GELU", "LogSoftmax", "ReLU", "Sigmoid", "Softmax", "Tanh", "ModuleDict", "ModuleList", "ParameterDict", "ParameterList", "Sequential",
           "Dropout", "Identity", "Linear", "CrossEntropyLoss", "MSELoss", "NLLLoss", "LayerNorm", "Embedding"]
