"""dropout kernels: counter-based mask (reproducible, splittable), keep rate,
scaling, p = 0 and 1, NaN, torch statistics, bad input.  Forward against the
mask's formula, float64 gradients, accumulation, views and empty input:
tests/test_kernel_table.py."""
import numpy as np
import pytest

import ctransformer.kernels as K


def within_sigmas(rate, expected, n, sigmas=5.0):
    """|rate - expected| within `sigmas` binomial standard deviations."""
    return abs(rate - expected) <= sigmas * np.sqrt(expected * (1 - expected) / n)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_forward_scales_kept_and_zeroes_dropped(rng, dtype):
    x = rng.standard_normal((8, 33)).astype(dtype)
    out, mask = K.dropout_forward(x, 0.3, seed=7)
    assert mask.dtype == np.bool_ and mask.shape == x.shape and out.dtype == dtype
    np.testing.assert_array_equal(out[~mask], 0)
    np.testing.assert_allclose(out[mask], x[mask] * dtype(1 / 0.7), rtol=1e-6 if dtype == np.float32 else 1e-15)


def test_same_seed_and_offset_same_mask_different_seed_differs():
    x = np.ones(4096)
    _, m1 = K.dropout_forward(x, 0.5, seed=123, offset=10)
    _, m2 = K.dropout_forward(x, 0.5, seed=123, offset=10)
    np.testing.assert_array_equal(m1, m2)
    _, other_seed = K.dropout_forward(x, 0.5, seed=124, offset=10)
    _, other_offset = K.dropout_forward(x, 0.5, seed=123, offset=11)
    for other in (other_seed, other_offset):
        # independent masks agree on about half the elements
        assert within_sigmas(np.mean(other == m1), 0.5, x.size)


def test_counter_property_halves_concatenate():
    x = np.ones((6, 50), np.float32)
    _, whole = K.dropout_forward(x, 0.4, seed=99, offset=1000)
    _, top = K.dropout_forward(x[:3], 0.4, seed=99, offset=1000)
    _, bottom = K.dropout_forward(x[3:], 0.4, seed=99, offset=1000 + 150)
    np.testing.assert_array_equal(whole, np.concatenate([top, bottom]))
    # the same holds element by element along the flat order
    _, flat = K.dropout_forward(x.reshape(-1), 0.4, seed=99, offset=1000)
    np.testing.assert_array_equal(flat.reshape(6, 50), whole)


@pytest.mark.parametrize("offset", [0, 1, 2, 7, 31, 32, 33])
def test_counter_property_at_odd_offsets_and_lengths(offset):
    """One key serves a block of 32 counters (32 b .. 32 b + 31): a part
    starting or ending inside a block must still see its own lanes of it."""
    x = np.ones(75, np.float64)
    _, whole = K.dropout_forward(x, 0.5, seed=3, offset=offset)
    for cut in range(1, 75):
        _, head = K.dropout_forward(x[:cut], 0.5, seed=3, offset=offset)
        _, tail = K.dropout_forward(x[cut:], 0.5, seed=3, offset=offset + cut)
        np.testing.assert_array_equal(np.concatenate([head, tail]), whole)
    singles = [K.dropout_forward(x[:1], 0.5, seed=3, offset=offset + i)[1][0] for i in range(75)]
    np.testing.assert_array_equal(np.array(singles), whole)


@pytest.mark.parametrize("offset", [0, 1, 2, 7, 31, 2**33 + 5])
@pytest.mark.parametrize("p", [0.1, 0.5, 1.0])
def test_long_masks_match_the_one_element_masks(offset, p):
    """Long runs make their flags a block of 32 at a time in a vectorised loop
    (csrc/ct.h), one element alone takes the scalar path: the same mask, at
    every alignment of the block against the counter."""
    x = np.ones(203, np.float32)
    _, whole = K.dropout_forward(x, p, seed=17, offset=offset)
    singles = [K.dropout_forward(x[:1], p, seed=17, offset=offset + i)[1][0] for i in range(x.size)]
    np.testing.assert_array_equal(np.array(singles), whole)
    for cut in (1, 31, 32, 33, 64, 100):
        _, head = K.dropout_forward(x[:cut], p, seed=17, offset=offset)
        _, tail = K.dropout_forward(x[cut:], p, seed=17, offset=offset + cut)
        np.testing.assert_array_equal(np.concatenate([head, tail]), whole)


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_keep_rate_is_one_minus_p(p):
    n = 100_000
    out, mask = K.dropout_forward(np.ones(n, np.float32), p, seed=2024)
    assert within_sigmas(mask.mean(), 1 - p, n)
    # each half separately too (no drift along the counter)
    assert within_sigmas(mask[: n // 2].mean(), 1 - p, n // 2)
    assert within_sigmas(mask[n // 2:].mean(), 1 - p, n // 2)
    # inverted dropout keeps the expectation
    assert abs(out.mean() - 1) <= 5 * np.sqrt(p / (1 - p) / n)


def test_neighbouring_elements_are_uncorrelated():
    n = 100_000
    _, mask = K.dropout_forward(np.ones(n), 0.5, seed=5)
    both = np.mean(mask[1:] & mask[:-1])
    assert within_sigmas(both, 0.25, n - 1)
    # lanes 0 and 1 of one block key, and the last lane of a block with the first of the next
    assert within_sigmas(np.mean(mask[0::32] & mask[1::32]), 0.25, n // 32)
    assert within_sigmas(np.mean(mask[31:-1:32] & mask[32::32]), 0.25, n // 32 - 1)
    # each lane of the block keeps at the same rate
    lanes = mask[: n // 32 * 32].reshape(-1, 32).mean(axis=0)
    assert all(within_sigmas(rate, 0.5, n // 32) for rate in lanes)


def _numpy_keep(seed: int, counters: np.ndarray, p: float) -> np.ndarray:
    """csrc/ct.h's generator in NumPy: block key = SplitMix64's finaliser of the
    seed's Weyl sequence at term counter // 32, then lowbias32 of the lane."""
    u64 = np.uint64
    with np.errstate(over="ignore"):
        z = u64(seed) * u64(0xD1B54A32D192ED03) + (counters // u64(32) + u64(1)) * u64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> u64(30))) * u64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> u64(27))) * u64(0x94D049BB133111EB)
        z = z ^ (z >> u64(31))
        key_lo, key_hi = (z & u64(0xFFFFFFFF)).astype(np.uint32), (z >> u64(32)).astype(np.uint32)
        x = key_lo ^ ((counters % u64(32)).astype(np.uint32) * np.uint32(0x9E3779B9))
        x ^= x >> np.uint32(16)
        x *= np.uint32(0x7FEB352D)
        x ^= (x >> np.uint32(15)) ^ key_hi
        x *= np.uint32(0x846CA68B)
        x ^= x >> np.uint32(16)
    return x.astype(np.uint64) >= np.uint64(np.ceil(p * 2.0**32))


@pytest.mark.parametrize("seed,offset", [(0, 0), (17, 5), (2**63 + 11, 2**40 - 3)])
@pytest.mark.parametrize("p", [0.1, 0.5])
def test_mask_is_the_documented_generator(seed, offset, p):
    x = np.ones(301, np.float32)
    _, mask = K.dropout_forward(x, p, seed=seed, offset=offset)
    counters = np.arange(offset, offset + x.size, dtype=np.uint64)
    np.testing.assert_array_equal(mask, _numpy_keep(seed, counters, p))


def test_p_zero_and_one(rng):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    out, mask = K.dropout_forward(x, 0.0, seed=1)
    np.testing.assert_array_equal(out, x)
    assert out is not x and not np.shares_memory(out, x)
    assert mask.all()
    out, mask = K.dropout_forward(x, 1.0, seed=1)
    np.testing.assert_array_equal(out, 0)
    assert not mask.any()
    np.testing.assert_array_equal(K.dropout_backward(np.ones_like(x), mask, 1.0), 0)


def test_nan_stays_nan():
    x = np.array([np.nan] * 64 + [1.0])
    out, mask = K.dropout_forward(x, 0.5, seed=3)
    assert np.isnan(out[:64]).all() and not mask[:64].all() and mask[:64].any()
    assert np.isnan(K.dropout_forward(x, 1.0, seed=3)[0][:64]).all()


def test_torch_statistics(rng, torch_ref):
    n, p = 50_000, 0.35
    x = np.ones(n, np.float32)

    def torch_side(torch):
        t_out = torch.nn.functional.dropout(torch.tensor(x), p=p, training=True).numpy()
        return dict(values=np.unique(t_out), keep_rate=np.mean(t_out != 0))

    ref = torch_ref(torch_side, inputs=dict(x=x))
    out, mask = K.dropout_forward(x, p, seed=0)
    # the same two output values (0 and 1/(1-p) in float32) ...
    np.testing.assert_array_equal(np.unique(out), ref["values"])
    # ... in proportions that agree within binomial noise
    assert abs(mask.mean() - ref["keep_rate"]) <= 5 * np.sqrt(2 * p * (1 - p) / n)


def test_bad_input(rng):
    x = rng.standard_normal((3, 4))
    for p in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match=r"dropout_forward: p must be in \[0, 1\], got"):
            K.dropout_forward(x, p, seed=0)
    with pytest.raises(ValueError, match=r"dropout_backward: p must be in \[0, 1\], got 2.0"):
        K.dropout_backward(x, np.ones((3, 4), bool), 2.0)
    with pytest.raises(ValueError, match=r"dropout_forward: seed must be in \[0, 2\*\*64\), got -1"):
        K.dropout_forward(x, 0.5, seed=-1)
    with pytest.raises(ValueError, match=r"dropout_forward: offset must be in \[0, 2\*\*64\), got 18446744073709551616"):
        K.dropout_forward(x, 0.5, seed=0, offset=2 ** 64)
    with pytest.raises(TypeError, match="dropout_forward: seed must be an int, got float"):
        K.dropout_forward(x, 0.5, seed=1.5)
    K.dropout_forward(x, 0.5, seed=np.uint64(2 ** 64 - 1), offset=np.int32(5))  # NumPy ints are fine
    with pytest.raises(TypeError, match="dropout_forward: x must have dtype float32 or float64, got int64"):
        K.dropout_forward(np.arange(3), 0.5, seed=0)
    with pytest.raises(TypeError, match="dropout_backward: mask must have dtype bool, got uint8"):
        K.dropout_backward(x, np.ones((3, 4), np.uint8), 0.5)
    with pytest.raises(ValueError, match=r"dropout_backward: mask.shape\[1\] must be 4 \(dout's shape\), got 5"):
        K.dropout_backward(x, np.ones((3, 5), bool), 0.5)
    with pytest.raises(ValueError, match="dropout_backward: mask must have 2 dimensions, got 1"):
        K.dropout_backward(x, np.ones(12, bool), 0.5)
    with pytest.raises(TypeError, match="dropout_backward: dinp must have dtype float64, got float32"):
        K.dropout_backward(x, np.ones((3, 4), bool), 0.5, dinp=np.zeros((3, 4), np.float32))
    with pytest.raises(ValueError, match="dropout_backward: dinp is updated in place"):
        K.dropout_backward(x, np.ones((3, 4), bool), 0.5, dinp=np.zeros((4, 3)).T)


def test_fresh_dinp_is_written_not_added_to(rng):
    """Without a given dinp the backward writes a fresh array (not zero-filled
    first): the same values as accumulating into zeros, even where the
    allocator hands back memory that held NaN; a given dinp is added to."""
    x = rng.standard_normal((300, 70)).astype(np.float32)
    out, mask = K.dropout_forward(x, 0.3, seed=4)
    dout = rng.standard_normal(x.shape).astype(np.float32)
    want = K.dropout_backward(dout, mask, 0.3, dinp=np.zeros_like(x))
    for _ in range(3):
        junk = np.full_like(x, np.nan)
        del junk
        np.testing.assert_array_equal(K.dropout_backward(dout, mask, 0.3), want)
    start = rng.standard_normal(x.shape).astype(np.float32)
    np.testing.assert_array_equal(K.dropout_backward(dout, mask, 0.3, dinp=start.copy()), start + want)
