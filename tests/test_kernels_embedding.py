"""embedding kernels: the bespoke edge cases -- the scatter-add gradient with
duplicates and padding_idx (also against torch), ids out of range, NaN, bad
input.  Lookup against NumPy (every integer dtype of ids), float64 gradients,
accumulation, views, empty input and torch parity: tests/test_kernel_table.py."""
import numpy as np
import pytest

import ctransformer.kernels as K
from tolerances import F32


def reference_backward(dout, ids, V, padding_idx=None):
    dw = np.zeros((V, dout.shape[-1]))
    np.add.at(dw, ids.reshape(-1), dout.reshape(-1, dout.shape[-1]))
    if padding_idx is not None:
        dw[padding_idx] = 0
    return dw


@pytest.mark.parametrize("padding_idx", [None, 2, -1])
def test_backward_sums_duplicates_and_skips_padding(rng, padding_idx):
    ids = np.array([[1, 2, 1], [4, 1, 2]])
    dout = rng.standard_normal((2, 3, 4))
    dw = K.embedding_backward(dout, ids, 5, padding_idx=padding_idx)
    np.testing.assert_allclose(dw, reference_backward(dout, ids, 5, padding_idx), rtol=1e-12)
    np.testing.assert_allclose(dw[1], dout[0, 0] + dout[0, 2] + dout[1, 1], rtol=1e-12)
    if padding_idx is not None:
        np.testing.assert_array_equal(dw[padding_idx], 0)
    np.testing.assert_array_equal(dw[[0, 3]], 0)


@pytest.mark.parametrize("padding_idx", [0, 3, -2])
def test_torch_parity_padding_idx(rng, padding_idx, torch_ref):
    w = rng.standard_normal((8, 5)).astype(np.float32)
    ids = rng.integers(0, 8, (4, 6))
    ids[0, :3] = padding_idx % 8
    dout = rng.standard_normal((4, 6, 5)).astype(np.float32)

    def torch_side(torch):
        wt = torch.tensor(w, requires_grad=True)
        yt = torch.nn.functional.embedding(torch.tensor(ids), wt, padding_idx=padding_idx)
        yt.backward(torch.tensor(dout))
        return dict(y=yt, dw=wt.grad)

    ref = torch_ref(torch_side, inputs=dict(w=w, ids=ids, dout=dout))
    np.testing.assert_array_equal(K.embedding_forward(ids, w), ref["y"])
    np.testing.assert_allclose(K.embedding_backward(dout, ids, 8, padding_idx=padding_idx), ref["dw"], **F32)


def test_out_of_range_ids_raise_index_error(rng):
    w = rng.standard_normal((4, 3))
    with pytest.raises(IndexError, match=r"embedding_forward: ids\[1, 1\] = 9 is out of range; "
                                         r"expected 0 <= id < 4 \(weight.shape\[0\]\)"):
        K.embedding_forward(np.array([[1, 2], [3, 9]]), w)
    with pytest.raises(IndexError, match=r"embedding_forward: ids\[2\] = -1 is out of range"):
        K.embedding_forward(np.array([0, 1, -1, 7], np.int8), w)
    with pytest.raises(IndexError, match=r"embedding_forward: ids = 4 is out of range"):
        K.embedding_forward(np.array(4), w)
    with pytest.raises(IndexError, match=r"embedding_forward: ids\[0\] = 0 is out of range; expected 0 <= id < 0"):
        K.embedding_forward(np.array([0]), np.zeros((0, 3)))
    with pytest.raises(IndexError, match=r"embedding_backward: ids\[0, 1\] = 5 is out of range; "
                                         r"expected 0 <= id < 5 \(num_embeddings\)"):
        K.embedding_backward(np.ones((1, 2, 3)), np.array([[0, 5]]), 5)
    acc = np.zeros((5, 3))
    with pytest.raises(IndexError):
        K.embedding_backward(np.ones((2, 3)), np.array([0, -3]), 5, dweight=acc)
    np.testing.assert_array_equal(acc, 0)  # checked before anything is written


def test_nan_is_copied(rng):
    w = rng.standard_normal((9, 6))
    w[3, 1] = np.nan
    out = K.embedding_forward(np.array([3, 2]), w)
    assert np.isnan(out[0, 1]) and np.isfinite(out[1]).all()


def test_bad_input(rng):
    w = rng.standard_normal((4, 3))
    ids = np.array([0, 1])
    with pytest.raises(TypeError, match="embedding_forward: ids must have dtype an integer dtype, got float64"):
        K.embedding_forward(np.array([0.0, 1.0]), w)
    with pytest.raises(TypeError, match="embedding_forward: ids must have dtype an integer dtype, got bool"):
        K.embedding_forward(np.array([True]), w)
    with pytest.raises(TypeError, match="embedding_forward: weight must have dtype float32 or float64, got int64"):
        K.embedding_forward(ids, np.zeros((4, 3), np.int64))
    with pytest.raises(ValueError, match="embedding_forward: weight must have 2 dimensions, got 1"):
        K.embedding_forward(ids, np.zeros(4))
    with pytest.raises(TypeError, match="embedding_forward: ids must be a numpy.ndarray, got list"):
        K.embedding_forward([0, 1], w)
    dout = np.ones((2, 3))
    with pytest.raises(ValueError, match=r"embedding_backward: dout.shape\[0\] must be 2 \(ids' shape\), got 3"):
        K.embedding_backward(np.ones((3, 3)), ids, 4)
    with pytest.raises(ValueError, match="embedding_backward: dout must have 2 dimensions, got 1"):
        K.embedding_backward(np.ones(3), ids, 4)
    with pytest.raises(ValueError, match=r"embedding_backward: padding_idx must be in \[-4, 4\) \(num_embeddings\), got 4"):
        K.embedding_backward(dout, ids, 4, padding_idx=4)
    with pytest.raises(ValueError, match=r"embedding_backward: padding_idx must be in \[-4, 4\) \(num_embeddings\), got -5"):
        K.embedding_backward(dout, ids, 4, padding_idx=-5)
    with pytest.raises(TypeError, match="embedding_backward: padding_idx must be an int or None, got float"):
        K.embedding_backward(dout, ids, 4, padding_idx=1.0)
    with pytest.raises(ValueError, match="embedding_backward: num_embeddings must be >= 0, got -1"):
        K.embedding_backward(dout, ids, -1)
    with pytest.raises(ValueError, match=r"embedding_backward: dweight must have shape \(4, 3\), got \(4, 2\)"):
        K.embedding_backward(dout, ids, 4, dweight=np.zeros((4, 2)))
    with pytest.raises(TypeError, match="embedding_backward: dweight must have dtype float64, got float32"):
        K.embedding_backward(dout, ids, 4, dweight=np.zeros((4, 3), np.float32))
    with pytest.raises(ValueError, match="embedding_backward: dweight is updated in place"):
        K.embedding_backward(dout, ids, 4, dweight=np.zeros((3, 4)).T)
