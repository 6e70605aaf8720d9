"""decode_model_greedy (greedy decoding's whole loop in one call): the same
tokens, done flags and cache writes as decode_model_step called token by
token with NumPy's argmax (greedy_decode's loop), float32 and float64, with
and without cross-attention; rows finishing at different steps, a start
after a prefix, NumPy's argmax on ties and NaN; bad input.  greedy_decode's
use of it is tested in test_decoding.py."""
import numpy as np
import pytest

import ctransformer.kernels as K
from test_decode_model_step import V, model_parts, model_step, plans_of

MAX_POS = 5  # the caches' TMAX: positions 0 .. 4


def parts(rng, dtype, B, cross, out_rows=V):
    """model_parts with an output layer of out_rows <= V rows (a picked id is fed back)."""
    layers, caches, mem, top = model_parts(rng, dtype, B, cross)
    top = dict(top, out_w=top["out_w"][:out_rows].copy(), out_b=top["out_b"][:out_rows].copy())
    return layers, caches, mem, top


def loop_reference(ys, done, start, stop, pos, eos_id, pad_id, plans, top):
    """The contract, as greedy_decode's loop over decode_model_step and NumPy's argmax."""
    last = start - 1
    for n in range(start, stop):
        nxt = model_step(ys[:, n - 1].copy(), pos + n - start, plans, top).argmax(1)
        nxt[done] = pad_id
        ys[:, n] = nxt
        done |= nxt == eos_id
        last = n
        if done.all():
            break
    return last


def greedy(ys, done, start, stop, pos, eos_id, pad_id, plans, top):
    norm = top["norm"] or (None, None, 0.0)
    return K.decode_model_greedy(ys, done, start, stop, pos, eos_id, pad_id, top["emb"], 1.7, top["pe"], plans, *norm,
                                 top["out_w"], top["out_b"], top["norm"] is not None)


def both(rng, dtype, B, cross, ys, done, start, stop, pos, eos_id, pad_id, top_change=None):
    """(kernel's (last, ys, done, caches), the reference's) from the same model and caches."""
    layers, caches, mem, top = parts(rng, dtype, B, cross)
    if top_change:
        top = top_change(top)
    results = []
    for run in (greedy, loop_reference):
        cs = [(k.copy(), v.copy()) for k, v in caches]
        y, d = ys.copy(), done.copy()
        last = run(y, d, start, stop, pos, eos_id, pad_id, plans_of(layers, cs, mem, False, "relu"), top)
        results.append((last, y, d, cs))
    return results


def assert_same(got, want):
    assert got[0] == want[0]
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_array_equal(got[2], want[2])
    for (k, v), (k2, v2) in zip(got[3], want[3]):
        np.testing.assert_array_equal(k, k2)
        np.testing.assert_array_equal(v, v2)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("cross, B", [(True, 3), (False, 1), (False, 4)])
def test_greedy_is_the_step_loop(dtype, cross, B):
    ys = np.zeros((B, 1 + MAX_POS), np.int64)
    ys[:, 0] = np.arange(B) % V
    done = np.zeros(B, bool)
    # first without eos (every column), then with eos = a token some row picks midway, so rows finish apart
    free = both(np.random.default_rng(1), dtype, B, cross, ys, done, 1, 1 + MAX_POS, 0, -1, 0)
    assert_same(*free)
    assert free[0][0] == MAX_POS and not free[0][2].any()
    eos = int(free[1][1][0, 2])
    got, want = both(np.random.default_rng(1), dtype, B, cross, ys, done, 1, 1 + MAX_POS, 0, eos, 0)
    assert_same(got, want)
    assert got[2][0]  # row 0 emitted eos (at column 2 at the latest) ...
    assert np.all(got[1][0, 3:got[0] + 1] == 0)  # ... and holds pad_id after it


def test_a_start_after_a_prefix_and_rows_already_done(rng):
    """Columns 0..2 given (positions 0, 1 already in the caches): start 3 feeds column 2 at position 2."""
    ys = np.zeros((3, 7), np.int64)
    ys[:, :3] = [[1, 4, 6], [2, 5, 7], [3, 3, 3]]
    done = np.array([False, True, False])
    got, want = both(rng, np.float64, 3, True, ys, done, 3, 5, 2, -1, 9)
    assert_same(got, want)
    assert got[0] == 4 and np.all(got[1][1, 3:5] == 9) and np.all(got[1][:, 5:] == 0)


def test_argmax_is_numpys_on_ties_and_nan(rng):
    """Every row's logits are out_b alone (out_w = 0): equal maxima give the
    first one; a NaN anywhere gives the first NaN, as np.argmax."""
    ys = np.zeros((2, 3), np.int64)
    done = np.zeros(2, bool)

    def ties(top):
        b = np.zeros(V)
        b[[3, 6]] = 2.0
        return dict(top, out_w=np.zeros_like(top["out_w"]), out_b=b)

    def nan(top):
        b = ties(top)["out_b"]
        b[[5, 8]] = np.nan
        return dict(ties(top), out_b=b)

    for change, token in ((ties, 3), (nan, 5)):
        got, want = both(rng, np.float64, 2, False, ys, done, 1, 3, 0, -1, 0, change)
        assert_same(got, want)
        assert np.all(got[1][:, 1:] == token)


def test_every_row_done_stops_after_that_column(rng):
    ys = np.zeros((2, 1 + MAX_POS), np.int64)
    done = np.zeros(2, bool)
    got, want = both(rng, np.float64, 2, False, ys, done, 1, 1 + MAX_POS, 0, 3, 0,
                     lambda top: dict(top, out_w=np.zeros_like(top["out_w"]), out_b=np.eye(V)[3]))
    assert_same(got, want)
    assert got[0] == 1 and got[2].all() and np.all(got[1][:, 1] == 3) and np.all(got[1][:, 2:] == 0)


@pytest.fixture
def small(rng):
    layers, caches, _, top = parts(rng, np.float64, 2, False)
    return caches, top, plans_of(layers, caches, None, False, "relu")


def test_bad_greedy_input(small):
    caches, top, plans = small
    before = [(k.copy(), v.copy()) for k, v in caches]
    ys, done = np.zeros((2, 4), np.int64), np.zeros(2, bool)

    def call(ys=ys, done=done, start=1, stop=4, pos=0, pad_id=0, top=top):
        return greedy(ys, done, start, stop, pos, 1, pad_id, plans, top)

    with pytest.raises(TypeError, match="decode_model_greedy: ys must have dtype int64, got int32"):
        call(ys=ys.astype(np.int32))
    with pytest.raises(ValueError, match="decode_model_greedy: ys is updated in place, so it must be a C-contiguous"):
        call(ys=np.zeros((4, 2), np.int64).T)
    with pytest.raises(ValueError, match="decode_model_greedy: ys must have 2 dimensions, got 1"):
        call(ys=np.zeros(4, np.int64))
    for start, stop in ((0, 4), (2, 2), (1, 5)):
        with pytest.raises(ValueError, match=r"decode_model_greedy: start and stop must satisfy 1 <= start < stop <= "
                                             rf"4 \(ys.shape\[1\]\), got start {start}, stop {stop}"):
            call(start=start, stop=stop)
    with pytest.raises(IndexError, match=r"decode_model_greedy: ys\[1, 0\] = 11 is out of range; expected "
                                         r"0 <= id < 11 \(a row of emb\)"):
        call(ys=np.array([[0, 0, 0, 0], [V, 0, 0, 0]]))
    with pytest.raises(TypeError, match="decode_model_greedy: done must have dtype bool, got int64"):
        call(done=np.zeros(2, np.int64))
    with pytest.raises(ValueError, match=r"decode_model_greedy: done.shape\[0\] must be 2 \(ys.shape\[0\]\), got 3"):
        call(done=np.zeros(3, bool))
    for pad in (-1, V):
        with pytest.raises(ValueError, match=rf"decode_model_greedy: pad_id must be in \[0, 11\) \(a row of emb: it "
                                             rf"is fed back\), got {pad}"):
            call(pad_id=pad)
    with pytest.raises(ValueError, match=r"decode_model_greedy: out_w.shape\[0\] must be <= 11 \(emb.shape\[0\]\): a "
                                         "picked id is fed back, got 12"):
        call(top=dict(top, out_w=np.zeros((V + 1, top["out_w"].shape[1])), out_b=None))
    with pytest.raises(IndexError, match=r"decode_model_greedy: the last position pos \+ stop - start - 1 must be in "
                                         r"\[0, 5\) \(a slot of plans\[0\]'s cache\), got 5"):
        call(pos=3)  # positions 3, 4, 5: the last is past the caches
    with pytest.raises(IndexError, match=r"decode_model_greedy: positions pos \.\. pos \+ stop - start - 1 must be "
                                         r"in \[0, 7\) \(rows of pe\), got pos -1 for 3 positions"):
        call(pos=-1)
    with pytest.raises(IndexError, match=r"decode_model_greedy: positions .* got pos 5 for 3 positions"):
        call(pos=5, top=dict(top, pe=top["pe"][:7]))
    for (k, v), (k0, v0) in zip(caches, before):  # refused before any cache was written
        np.testing.assert_array_equal(k, k0)
        np.testing.assert_array_equal(v, v0)
    assert not ys.any() and not done.any()


def test_no_rows_runs_every_column(rng):
    """With 0 rows nothing is ever done (the loop stops only once some row
    is): every column, as greedy_decode's loop."""
    layers, caches, _, top = parts(rng, np.float32, 0, False)
    ys, done = np.zeros((0, 4), np.int64), np.zeros(0, bool)
    assert greedy(ys, done, 1, 4, 0, 1, 0, plans_of(layers, caches, None, False, "relu"), top) == 3
