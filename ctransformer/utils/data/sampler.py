"""torch.utils.data.sampler's path: the samplers (drawing indices lazily)."""
from ._impl import BatchSampler, RandomSampler, Sampler, SequentialSampler

__all__ = ["Sampler", "SequentialSampler", "RandomSampler", "BatchSampler"]
