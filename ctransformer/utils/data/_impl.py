"""utils.data: Dataset, TensorDataset, DataLoader (torch.utils.data's API,
single-process).

Shuffling draws a permutation from ``ctransformer``'s default generator (or
the loader's ``generator``) at the start of each epoch, so the order is
reproducible after ``ctransformer.manual_seed``.
"""
from __future__ import annotations

import collections.abc
import math
import numbers
from typing import Any, Callable, Generic, Iterable, Iterator, List, Optional, Sequence, TypeVar

import numpy as np

from ...random import Generator, default_generator
from ...tensor import Tensor, int64, multinomial, stack, tensor

__all__ = ["SubsetRandomSampler", "WeightedRandomSampler", "Dataset", "IterableDataset", "TensorDataset", "Subset", "ConcatDataset",
           "random_split", "Sampler",
           "SequentialSampler", "RandomSampler", "BatchSampler", "DataLoader", "default_collate"]

T_co = TypeVar("T_co", covariant=True)


class Dataset(Generic[T_co]):
    """A map-style dataset: define ``__getitem__(index)`` and ``__len__()``."""

    def __getitem__(self, index: int) -> T_co:
        raise NotImplementedError(f"Subclasses of Dataset should implement __getitem__ ({type(self).__name__})")

    def __add__(self, other: "Dataset") -> "ConcatDataset":
        return ConcatDataset([self, other])


class IterableDataset(Dataset[T_co]):
    """A stream-style dataset: define ``__iter__()``."""

    def __iter__(self) -> Iterator[T_co]:
        raise NotImplementedError(f"Subclasses of IterableDataset should implement __iter__ ({type(self).__name__})")


class TensorDataset(Dataset):
    """Samples are tuples ``(t[i] for t in tensors)``; all tensors share dim 0."""

    def __init__(self, *tensors: Tensor) -> None:
        if not tensors:
            raise ValueError("TensorDataset: expected at least one tensor")
        n = tensors[0].shape[0] if tensors[0].dim() else None
        if any(t.dim() == 0 or t.shape[0] != n for t in tensors):
            raise ValueError("Size mismatch between tensors: every tensor must have the same size in dim 0, got "
                             + ", ".join(str(tuple(t.shape)) for t in tensors))
        self.tensors = tensors

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def __len__(self) -> int:
        return self.tensors[0].shape[0]


class Subset(Dataset):
    """The samples of ``dataset`` at ``indices``."""

    def __init__(self, dataset: Dataset, indices: Sequence[int]) -> None:
        self.dataset = dataset
        self.indices = list(indices)

    def __getitem__(self, idx):
        if isinstance(idx, list):
            return self.dataset[[self.indices[i] for i in idx]]
        return self.dataset[self.indices[idx]]

    def __len__(self) -> int:
        return len(self.indices)


class ConcatDataset(Dataset):
    """Several datasets, one after the other."""

    def __init__(self, datasets: Iterable[Dataset]) -> None:
        self.datasets = list(datasets)
        if not self.datasets:
            raise ValueError("datasets should not be an empty iterable")
        self.cumulative_sizes = list(np.cumsum([len(d) for d in self.datasets]))

    def __len__(self) -> int:
        return int(self.cumulative_sizes[-1])

    def __getitem__(self, idx: int):
        if idx < 0:
            if -idx > len(self):
                raise ValueError("absolute value of index should not exceed dataset length")
            idx = len(self) + idx
        d = int(np.searchsorted(self.cumulative_sizes, idx, side="right"))
        start = 0 if d == 0 else int(self.cumulative_sizes[d - 1])
        return self.datasets[d][idx - start]


def random_split(dataset: Dataset, lengths: Sequence, generator: Optional[Generator] = None) -> List[Subset]:
    """Split into non-overlapping random Subsets of the given lengths (or
    fractions summing to 1, remainders spread round-robin as torch)."""
    n = len(dataset)
    lengths = list(lengths)
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1 and all(isinstance(x, float) for x in lengths):
        sizes = [int(math.floor(n * frac)) for frac in lengths]
        for i in range(n - sum(sizes)):
            sizes[i % len(sizes)] += 1
        lengths = sizes
    if sum(lengths) != n:
        raise ValueError("Sum of input lengths does not equal the length of the input dataset!")
    perm = (generator or default_generator).permutation(n).tolist()
    out, start = [], 0
    for length in lengths:
        out.append(Subset(dataset, perm[start:start + length]))
        start += length
    return out


# ------------------------------------------------------------------ samplers
class Sampler:
    """Yields dataset indices."""

    def __iter__(self) -> Iterator[int]:
        raise NotImplementedError


class SequentialSampler(Sampler):
    def __init__(self, data_source) -> None:
        self.data_source = data_source

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


class RandomSampler(Sampler):
    """A fresh permutation of range(len(data_source)) per epoch (with
    ``replacement``: ``num_samples`` uniform draws)."""

    def __init__(self, data_source, replacement: bool = False, num_samples: Optional[int] = None,
                 generator: Optional[Generator] = None) -> None:
        self.data_source = data_source
        self.replacement = replacement
        self._num_samples = num_samples
        self.generator = generator
        if not isinstance(self.num_samples, int) or self.num_samples < 0:
            raise ValueError(f"num_samples should be a non-negative integer value, but got num_samples={num_samples}")

    @property
    def num_samples(self) -> int:
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self) -> Iterator[int]:
        """Indices drawn lazily: with replacement in chunks of 32 (as torch),
        without it one permutation of the dataset at a time, so a huge
        ``num_samples`` costs no memory up front."""
        gen = self.generator or default_generator
        n = len(self.data_source)
        left = self.num_samples
        if self.replacement:
            while left > 0:
                chunk = min(32, left)
                yield from gen.integers(0, n, (chunk,)).tolist()
                left -= chunk
            return
        while left > 0:
            perm = gen.permutation(n).tolist()
            yield from perm[:left]
            left -= len(perm)
            if n == 0:
                return

    def __len__(self) -> int:
        return self.num_samples


class SubsetRandomSampler(Sampler):
    """The given indices in a fresh random order each epoch."""

    def __init__(self, indices: Sequence[int], generator: Optional[Generator] = None) -> None:
        self.indices = indices
        self.generator = generator

    def __iter__(self) -> Iterator[int]:
        gen = self.generator or default_generator
        for i in gen.permutation(len(self.indices)).tolist():
            yield self.indices[i]

    def __len__(self) -> int:
        return len(self.indices)


class WeightedRandomSampler(Sampler):
    """``num_samples`` indices drawn with probability proportional to
    ``weights`` (torch.multinomial's draw, so torch's checks: weights finite
    and >= 0 with a positive sum; without replacement, at most len(weights)
    samples)."""

    def __init__(self, weights: Sequence[float], num_samples: int, replacement: bool = True,
                 generator: Optional[Generator] = None) -> None:
        if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples <= 0:
            raise ValueError(f"num_samples should be a positive integer value, but got num_samples={num_samples}")
        if not isinstance(replacement, bool):
            raise ValueError(f"replacement should be a boolean value, but got replacement={replacement}")
        w = np.asarray(weights.numpy() if hasattr(weights, "numpy") else weights, dtype=np.float64)
        if w.ndim != 1:
            raise ValueError(f"weights should be a 1d sequence but given weights have shape {tuple(w.shape)}")
        self.weights = tensor(w)
        self.num_samples = num_samples
        self.replacement = replacement
        self.generator = generator

    def __iter__(self) -> Iterator[int]:
        yield from multinomial(self.weights, self.num_samples, self.replacement,
                               generator=self.generator).tolist()

    def __len__(self) -> int:
        return self.num_samples


class BatchSampler(Sampler):
    """Groups a sampler's indices into lists of ``batch_size``."""

    def __init__(self, sampler: Iterable[int], batch_size: int, drop_last: bool) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise ValueError(f"batch_size should be a positive integer value, but got batch_size={batch_size}")
        self.sampler = sampler
        self.batch_size = batch_size
        self.drop_last = drop_last

    def __iter__(self) -> Iterator[List[int]]:
        batch: List[int] = []
        for idx in self.sampler:
            batch.append(idx)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self) -> int:
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)


# ------------------------------------------------------------------ collation
def default_convert(data: Any) -> Any:
    """NumPy arrays -> Tensors, recursively (used when batch_size=None)."""
    if isinstance(data, np.ndarray) and data.dtype.kind in "biuf":
        return Tensor._wrap(data)
    if isinstance(data, collections.abc.Mapping):
        return type(data)({k: default_convert(v) for k, v in data.items()}) if not isinstance(data, dict) \
            else {k: default_convert(v) for k, v in data.items()}
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(default_convert(d) for d in data))
    if isinstance(data, (list, tuple)):
        return type(data)(default_convert(d) for d in data)
    return data


def default_collate(batch: Sequence[Any]) -> Any:
    """Merge a list of samples into a batch, as torch's default_collate:
    Tensors / NumPy arrays are stacked on a new dim 0; Python floats become a
    float64 Tensor, ints an int64 Tensor, bools a bool Tensor; strings stay
    a list; dicts, tuples and lists are collated field by field."""
    elem = batch[0]
    if isinstance(elem, Tensor):
        shapes = {tuple(b.shape) for b in batch}
        if len(shapes) != 1:
            raise RuntimeError(f"default_collate: stack expects each tensor to be equal size, but got "
                               f"{sorted(shapes)}; pad the samples or pass a collate_fn")
        return stack(list(batch), 0)
    if isinstance(elem, np.ndarray):
        if elem.dtype.kind not in "biuf":
            raise TypeError(f"default_collate: batch must contain tensors, numpy arrays, numbers, dicts or "
                            f"lists; found numpy array of dtype {elem.dtype}")
        return default_collate([Tensor._wrap(np.asarray(b)) for b in batch])
    if isinstance(elem, np.generic):
        return Tensor._wrap(np.asarray(batch))
    if isinstance(elem, bool):
        return Tensor._wrap(np.asarray(batch, dtype=bool))
    if isinstance(elem, numbers.Integral):
        return Tensor._wrap(np.asarray(batch, dtype=int64))
    if isinstance(elem, numbers.Real):
        return Tensor._wrap(np.asarray(batch, dtype=np.float64))
    if isinstance(elem, (str, bytes)):
        return list(batch)
    if isinstance(elem, collections.abc.Mapping):
        return {key: default_collate([d[key] for d in batch]) for key in elem}
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):
        return type(elem)(*(default_collate(samples) for samples in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        if any(len(e) != len(elem) for e in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        transposed = list(zip(*batch))
        if isinstance(elem, tuple):
            return [default_collate(samples) for samples in transposed]
        return [default_collate(samples) for samples in transposed]
    raise TypeError(f"default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; "
                    f"found {type(elem).__name__}")


# ------------------------------------------------------------------ loader
class DataLoader:
    """Iterate over ``dataset`` in batches.

    batch_size (int or None for no batching), shuffle (a new permutation
    from the seeded generator each epoch), collate_fn (default:
    :func:`default_collate`), drop_last (skip a final short batch).
    ``sampler`` / ``batch_sampler`` are supported as in torch;
    ``num_workers`` and ``pin_memory`` are accepted and ignored (loading
    runs in the calling process)."""

    def __init__(self, dataset: Dataset, batch_size: Optional[int] = 1, shuffle: Optional[bool] = None,
                 sampler: Optional[Iterable] = None, batch_sampler: Optional[Iterable] = None, num_workers: int = 0,
                 collate_fn: Optional[Callable] = None, pin_memory: bool = False, drop_last: bool = False,
                 timeout: float = 0, worker_init_fn: Optional[Callable] = None, multiprocessing_context=None,
                 generator: Optional[Generator] = None, *, prefetch_factor=None, persistent_workers: bool = False,
                 pin_memory_device: str = "", in_order: bool = True) -> None:
        if num_workers < 0:
            raise ValueError("num_workers option should be non-negative; use num_workers=0 to disable "
                             "multiprocessing.")
        self.dataset = dataset
        self.num_workers = num_workers
        self.pin_memory = pin_memory
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.generator = generator
        self._iterable = isinstance(dataset, IterableDataset) or (
            not hasattr(dataset, "__getitem__") and hasattr(dataset, "__iter__"))
        if self._iterable:
            if shuffle:
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified shuffle option, "
                                 f"but got shuffle={shuffle}")
            if sampler is not None or batch_sampler is not None:
                raise ValueError("DataLoader with IterableDataset: expected unspecified sampler / batch_sampler")
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("batch_sampler option is mutually exclusive with batch_size, shuffle, "
                                 "sampler, and drop_last")
            batch_size = None
            drop_last = False
        elif batch_size is None and drop_last:
            raise ValueError("batch_size=None option disables auto-batching and is mutually exclusive with "
                             "drop_last")
        if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int)
                                       or batch_size <= 0):
            raise ValueError(f"batch_size should be a positive integer value, but got batch_size={batch_size}")
        if sampler is None and not self._iterable:
            sampler = RandomSampler(dataset, generator=generator) if shuffle else SequentialSampler(dataset)
        if batch_size is not None and batch_sampler is None and not self._iterable:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self._auto_collation = batch_sampler is not None or (self._iterable and batch_size is not None)
        if collate_fn is None:
            collate_fn = default_collate if self._auto_collation else default_convert
        self.collate_fn = collate_fn

    def __iter__(self) -> Iterator[Any]:
        if self._iterable:
            yield from self._iter_stream()
            return
        if self.batch_sampler is not None:
            for indices in self.batch_sampler:
                yield self.collate_fn([self.dataset[i] for i in indices])
        else:
            for i in self.sampler:
                yield self.collate_fn(self.dataset[i])

    def _iter_stream(self) -> Iterator[Any]:
        if self.batch_size is None:
            for sample in self.dataset:
                yield self.collate_fn(sample)
            return
        batch: List[Any] = []
        for sample in self.dataset:
            batch.append(sample)
            if len(batch) == self.batch_size:
                yield self.collate_fn(batch)
                batch = []
        if batch and not self.drop_last:
            yield self.collate_fn(batch)

    def __len__(self) -> int:
        if self._iterable:
            n = len(self.dataset)  # raises TypeError for streams without a length, as torch
            if self.batch_size is None:
                return n
            return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
        if self.batch_sampler is not None:
            return len(self.batch_sampler)
        return len(self.sampler)
