"""utils.data: Dataset / TensorDataset / DataLoader behaviour (batching,
shuffling reproducible after manual_seed, drop_last, collate)."""
from collections import namedtuple

import numpy as np
import pytest

import ctransformer as ct
from ctransformer.utils.data import (BatchSampler, ConcatDataset, DataLoader, Dataset, IterableDataset,
                                     RandomSampler, Subset, TensorDataset, default_collate, random_split)


class Squares(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return {"x": np.array([i, i * i], np.float32), "y": i, "name": f"s{i}", "w": float(i) / 2}


def test_tensor_dataset_and_sequential_batches():
    xs = ct.arange(10).float().reshape(10, 1) * 2
    ys = ct.arange(10)
    ds = TensorDataset(xs, ys)
    assert len(ds) == 10
    x3, y3 = ds[3]
    assert x3.tolist() == [6.0] and y3.item() == 3
    dl = DataLoader(ds, batch_size=4)
    batches = list(dl)
    assert len(dl) == 3 and len(batches) == 3
    assert [b[1].tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert batches[0][0].shape == (4, 1) and batches[0][0].dtype == np.float32
    assert batches[0][1].dtype == np.int64
    with pytest.raises(ValueError, match="Size mismatch between tensors"):
        TensorDataset(ct.zeros(3), ct.zeros(4))


def test_drop_last_and_default_batch_size():
    ds = TensorDataset(ct.arange(10))
    dl = DataLoader(ds, batch_size=4, drop_last=True)
    assert len(dl) == 2 and [b[0].tolist() for b in dl] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    one = DataLoader(ds)
    assert len(one) == 10 and next(iter(one))[0].shape == (1,)


def test_shuffle_is_a_permutation_reproducible_after_manual_seed():
    ds = TensorDataset(ct.arange(20))
    dl = DataLoader(ds, batch_size=6, shuffle=True)
    ct.manual_seed(123)
    epoch1 = [b[0].tolist() for b in dl]
    epoch2 = [b[0].tolist() for b in dl]
    flat1 = sum(epoch1, [])
    assert sorted(flat1) == list(range(20)) and flat1 != list(range(20))
    assert [len(b) for b in epoch1] == [6, 6, 6, 2]
    assert epoch1 != epoch2  # a new order each epoch
    ct.manual_seed(123)
    assert [b[0].tolist() for b in dl] == epoch1
    assert [b[0].tolist() for b in dl] == epoch2
    gen = ct.Generator(5)
    a = [b[0].tolist() for b in DataLoader(ds, batch_size=20, shuffle=True, generator=gen)]
    gen.manual_seed(5)
    assert [b[0].tolist() for b in DataLoader(ds, batch_size=20, shuffle=True, generator=gen)] == a


def test_default_collate_of_dicts_arrays_numbers_strings():
    dl = DataLoader(Squares(5), batch_size=3)
    b = next(iter(dl))
    assert set(b) == {"x", "y", "name", "w"}
    assert isinstance(b["x"], ct.Tensor) and b["x"].shape == (3, 2) and b["x"].dtype == np.float32
    np.testing.assert_array_equal(b["x"].numpy(), [[0, 0], [1, 1], [2, 4]])
    assert b["y"].dtype == np.int64 and b["y"].tolist() == [0, 1, 2]
    assert b["w"].dtype == np.float64 and b["w"].tolist() == [0.0, 0.5, 1.0]
    assert b["name"] == ["s0", "s1", "s2"]


def test_default_collate_matches_torch_types(torch_ref):
    Point = namedtuple("Point", "a b")
    samples = [
        [(np.ones(2, np.float32) * i, i, True) for i in range(3)],
        [Point(i, float(i)) for i in range(3)],
        [[i, i + 1] for i in range(3)],
        [np.float32(i) for i in range(3)],
    ]

    def torch_side(torch):
        from torch.utils.data import default_collate as t_collate
        res = []
        for batch in samples:
            theirs = t_collate(batch)
            res.append(dict(type=type(theirs).__name__,
                            items=[dict(dtype=str(t.dtype), value=t) for t in theirs]))
        return dict(batches=res)

    ref = torch_ref(torch_side)
    assert len(ref["batches"]) == len(samples)
    for batch, theirs in zip(samples, ref["batches"]):
        ours = default_collate(batch)
        assert type(ours).__name__ == theirs["type"]
        assert len(ours) == len(theirs["items"])
        for o, t in zip(ours, theirs["items"]):
            assert np.dtype(str(t["dtype"]).replace("torch.", "")) == o.dtype
            np.testing.assert_array_equal(o.numpy(), t["value"])
    with pytest.raises(RuntimeError, match="equal size"):
        default_collate([ct.zeros(2), ct.zeros(3)])


def test_custom_collate_fn_padding_variable_lengths():
    seqs = [[1, 2, 3], [4], [5, 6]]

    class Seqs(Dataset):
        def __len__(self):
            return len(seqs)

        def __getitem__(self, i):
            return ct.tensor(seqs[i])

    def collate(batch):
        return ct.nn.utils.rnn.pad_sequence(batch, batch_first=True, padding_value=0)

    out = list(DataLoader(Seqs(), batch_size=3, collate_fn=collate))
    np.testing.assert_array_equal(out[0].numpy(), [[1, 2, 3], [4, 0, 0], [5, 6, 0]])
    raw = list(DataLoader(Seqs(), batch_size=2, collate_fn=lambda b: b))
    assert len(raw) == 2 and isinstance(raw[0], list) and len(raw[1]) == 1


def test_batch_size_none_sampler_and_batch_sampler():
    ds = Squares(4)
    items = list(DataLoader(ds, batch_size=None))
    assert len(items) == 4 and isinstance(items[2]["x"], ct.Tensor) and items[2]["y"] == 2
    ct.manual_seed(0)
    sampler = RandomSampler(ds)
    order = list(DataLoader(TensorDataset(ct.arange(4)), sampler=sampler, batch_size=4))[0][0].tolist()
    assert sorted(order) == [0, 1, 2, 3]
    bs = BatchSampler(range(5), 2, drop_last=False)
    assert list(bs) == [[0, 1], [2, 3], [4]] and len(bs) == 3
    dl = DataLoader(TensorDataset(ct.arange(5)), batch_sampler=[[4, 0], [2]])
    assert [b[0].tolist() for b in dl] == [[4, 0], [2]]
    with pytest.raises(ValueError, match="mutually exclusive"):
        DataLoader(ds, sampler=sampler, shuffle=True)
    with pytest.raises(ValueError, match="positive integer"):
        DataLoader(ds, batch_size=0)


def test_iterable_dataset():
    class Stream(IterableDataset):
        def __iter__(self):
            return iter(range(7))

    assert [b.tolist() for b in DataLoader(Stream(), batch_size=3)] == [[0, 1, 2], [3, 4, 5], [6]]
    assert [b.tolist() for b in DataLoader(Stream(), batch_size=3, drop_last=True)] == [[0, 1, 2], [3, 4, 5]]
    with pytest.raises(ValueError, match="shuffle"):
        DataLoader(Stream(), shuffle=True)


def test_subset_concat_random_split():
    ds = TensorDataset(ct.arange(10))
    sub = Subset(ds, [9, 1])
    assert len(sub) == 2 and sub[0][0].item() == 9
    cat = ConcatDataset([sub, ds])
    assert len(cat) == 12 and cat[2][0].item() == 0 and cat[-1][0].item() == 9
    ct.manual_seed(0)
    a, b = random_split(ds, [7, 3])
    assert len(a) == 7 and len(b) == 3 and sorted(a.indices + b.indices) == list(range(10))
    parts = random_split(ds, [0.5, 0.5])
    assert [len(p) for p in parts] == [5, 5]
    with pytest.raises(ValueError, match="Sum of input lengths"):
        random_split(ds, [3, 3])
