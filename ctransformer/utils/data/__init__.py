"""ctransformer.utils.data (torch.utils.data's API, single-process): the
``dataset``, ``sampler`` and ``dataloader`` submodules torch scripts import
from, and every name at the package level."""
from . import dataloader, dataset, distributed, sampler
from ._impl import (BatchSampler, ConcatDataset, DataLoader, Dataset, IterableDataset, RandomSampler, Sampler,
                    SequentialSampler, Subset, SubsetRandomSampler, TensorDataset, WeightedRandomSampler, default_collate,
                    default_convert, random_split)

__all__ = ["Dataset", "IterableDataset", "TensorDataset", "Subset", "ConcatDataset", "random_split", "Sampler",
           "SequentialSampler", "RandomSampler", "SubsetRandomSampler", "WeightedRandomSampler", "BatchSampler", "DataLoader", "default_collate",
           "default_convert", "dataset", "sampler", "dataloader", "distributed"]
