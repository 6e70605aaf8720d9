"""ctransformer.optim: SGD, Adam, AdamW and learning-rate schedulers
(torch.optim's API); each parameter update is one C kernel call."""
from . import lr_scheduler
from .adam import Adam, AdamW
from .optimizer import Optimizer
from .rmsprop import RMSprop
from .sgd import SGD

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "lr_scheduler"]
