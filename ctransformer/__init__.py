"""ctransformer - sequence models with every kernel in readable C."""
from . import kernels
