"""torch.utils.data.dataloader's path: DataLoader and the collate functions."""
from ._impl import DataLoader, default_collate, default_convert

__all__ = ["DataLoader", "default_collate", "default_convert"]
