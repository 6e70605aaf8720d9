"""ctransformer.utils (torch.utils's role): ``utils.data`` holds Dataset / DataLoader."""
from . import data

__all__ = ["data"]
