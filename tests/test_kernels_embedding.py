"""embedding kernels: lookup, scatter-add gradient with duplicates and
padding_idx, float64 gradients, torch parity, id checks, bad input."""
import numpy as np
import pytest

import ctransformer.kernels as K
from conftest import check_grads
from tolerances import F32


def reference_backward(dout, ids, V, padding_idx=None):
    dw = np.zeros((V, dout.shape[-1]))
    np.add.at(dw, ids.reshape(-1), dout.reshape(-1, dout.shape[-1]))
    if padding_idx is not None:
        dw[padding_idx] = 0
    return dw


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("id_dtype", [np.int64, np.int32, np.int16, np.uint8, np.uint64])
@pytest.mark.parametrize("shape", [(), (5,), (2, 3), (2, 1, 4)])
def test_forward_matches_numpy(rng, dtype, id_dtype, shape):
    w = rng.standard_normal((7, 3)).astype(dtype)
    ids = np.asarray(rng.integers(0, 7, shape), dtype=id_dtype)
    out = K.embedding_forward(ids, w)
    assert out.dtype == dtype and out.shape == shape + (3,)
    np.testing.assert_array_equal(out, w[ids.astype(np.int64)])


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


def test_gradients_float64(rng):
    ids = np.array([[0, 3, 3], [5, 0, 1]])
    inputs = dict(w=rng.standard_normal((6, 4)))

    def grads(dout, w):
        return dict(w=K.embedding_backward(dout, ids, 6))

    check_grads(lambda w: K.embedding_forward(ids, w), grads, inputs, ["w"])


def test_backward_accumulates(rng):
    ids, dout = np.array([0, 2, 2]), rng.standard_normal((3, 4))
    fresh = K.embedding_backward(dout, ids, 3)
    acc = np.ones((3, 4))
    assert K.embedding_backward(dout, ids, 3, dweight=acc) is acc
    np.testing.assert_allclose(acc, fresh + 1, rtol=1e-12)


@pytest.mark.parametrize("padding_idx", [None, 0, 3, -2])
def test_torch_parity(rng, padding_idx, torch_ref):
    w = rng.standard_normal((8, 5)).astype(np.float32)
    ids = rng.integers(0, 8, (4, 6))
    ids[0, :3] = 0 if padding_idx is None else padding_idx % 8
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


def test_views_empty_and_nan(rng):
    w = rng.standard_normal((9, 6))
    ids = rng.integers(0, 9, (4, 6))
    ids_view, w_view = ids[::-1, ::2], w[::-2, ::2]  # (4, 3) ids into a (5, 3) table
    ids_view = ids_view % 5
    np.testing.assert_array_equal(K.embedding_forward(ids_view, w_view), w_view[ids_view])
    dout_view = rng.standard_normal((4, 3, 6))[..., ::-2]
    np.testing.assert_allclose(K.embedding_backward(dout_view, ids_view, 5),
                               reference_backward(dout_view, ids_view, 5), rtol=1e-12)
    assert K.embedding_forward(np.zeros((0, 2), np.int64), w).shape == (0, 2, 6)
    assert K.embedding_forward(np.array([1, 2]), np.zeros((3, 0))).shape == (2, 0)
    np.testing.assert_array_equal(K.embedding_backward(np.zeros((0, 6)), np.zeros(0, np.int64), 9), 0)
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
