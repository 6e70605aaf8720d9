"""torch.utils.data.dataset's path: Dataset and its relatives."""
from ._impl import ConcatDataset, Dataset, IterableDataset, Subset, TensorDataset, random_split

__all__ = ["Dataset", "IterableDataset", "TensorDataset", "Subset", "ConcatDataset", "random_split"]
