"""torch.utils.data.sampler's path: the samplers (drawing indices lazily)."""
from ._impl import (BatchSampler, RandomSampler, Sampler, SequentialSampler, SubsetRandomSampler,
                    WeightedRandomSampler)

__all__ = ["Sampler", "SequentialSampler", "RandomSampler", "SubsetRandomSampler", "WeightedRandomSampler", "BatchSampler"]
