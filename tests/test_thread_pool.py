"""Our thread pool (csrc/parallel.c): the per-head loops of attention split
over threads give the same bits as one thread, whatever the thread count,
the load, another Python thread using the pool, or a fork."""
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import ctransformer as ct
from ctransformer import kernels as K
from ctransformer.kernels.runtime import pool_threads_for, share_speeds


@pytest.fixture
def load_blind():
    """Deterministic mode: the pool takes the ceiling whatever the machine's
    load, so the split really happens in these tests (on a busy machine the
    policy would keep small jobs on the caller)."""
    before = ct.get_num_threads()
    ct.use_deterministic_algorithms(True)
    yield
    ct.use_deterministic_algorithms(False)
    ct.set_num_threads(before)


def test_pool_policy_small_jobs_stay_on_the_caller():
    assert pool_threads_for(1e4, 2) == 1
    assert pool_threads_for(2e5, 8) == 1
    for flops in (1e3, 2e6, 1e9):
        for ceiling in (1, 2, 5):
            assert 1 <= pool_threads_for(flops, ceiling) <= ceiling


def test_pool_policy_load_blind_takes_the_ceiling(load_blind):
    assert pool_threads_for(2e6, 2) == 2
    assert pool_threads_for(2e6, 5) == 5
    assert pool_threads_for(2e6, 1) == 1


def _packed_case(dtype, self_attn, seq_first, dropout_p, causal, rng):
    """Arguments of mha_packed_forward / backward with ~3 MFLOP of head work
    (B * H slices of (T, T) weights: split over the pool) but every GEMM of
    the projections under the 5 MFLOP from which a GEMM is split (its row
    blocks may take another OpenBLAS kernel, see test_split_gemm_...)."""
    B, Tq, Tk, E, H = 24, 20, 17, 32, 4
    if self_attn:
        Tk = Tq
    q_shape = (Tq, B, E) if seq_first else (B, Tq, E)
    kv_shape = (Tk, B, E) if seq_first else (B, Tk, E)
    x = rng.standard_normal(q_shape).astype(dtype)
    kv = None if self_attn else rng.standard_normal(kv_shape).astype(dtype)
    w_in = (rng.standard_normal((3 * E, E)) * 0.2).astype(dtype)
    b_in = rng.standard_normal(3 * E).astype(dtype)
    wo = (rng.standard_normal((E, E)) * 0.2).astype(dtype)
    bo = rng.standard_normal(E).astype(dtype)
    keep = np.ones((B, 1, 1, Tk), bool)
    keep[::3, :, :, Tk - 4:] = False   # padded keys in every third sequence
    opts = dict(mask=keep, dropout_p=dropout_p, seed=11, seq_first=seq_first)
    if causal:
        opts["is_causal"] = True
    return (x, kv, w_in, b_in, wo, bo, H), opts


def _packed_run(args, opts):
    out, saved = K.mha_packed_forward(*args, **opts)
    dout = np.cos(np.arange(out.size, dtype=out.dtype)).reshape(out.shape)
    grads = K.mha_packed_backward(dout, *args, saved, **opts)
    return [out, saved.probs] + [g for g in grads if g is not None]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("self_attn,seq_first,dropout_p,causal", [
    (True, False, 0.0, False), (True, True, 0.0, True), (False, False, 0.2, False), (False, True, 0.0, False),
    (True, False, 0.3, True)])
def test_packed_attention_same_bits_on_any_thread_count(load_blind, dtype, self_attn, seq_first, dropout_p,
                                                       causal):
    rng = np.random.default_rng(5)
    args, opts = _packed_case(dtype, self_attn, seq_first, dropout_p, causal, rng)
    ct.set_num_threads(1)
    one = _packed_run(args, opts)
    for threads in (2, 3, 8):
        ct.set_num_threads(threads)
        many = _packed_run(args, opts)
        assert ct.get_num_threads() == threads      # the ceiling is back after every call
        assert len(many) == len(one)
        for a, b in zip(one, many):
            assert np.array_equal(a, b), f"{threads} threads differ from 1"


def _sdpa_and_mha(dtype, dropout_p, rng):
    B, H, Tq, Tk, D = 6, 4, 18, 21, 16   # mha's projections: <= 2 * 126 * 64 * 64 flops, not split
    q = rng.standard_normal((B, H, Tq, D)).astype(dtype)
    k = rng.standard_normal((B, H, Tk, D)).astype(dtype)
    v = rng.standard_normal((B, H, Tk, D)).astype(dtype)
    out, probs = K.sdpa_forward(q, k, v, dropout_p=dropout_p, seed=3)
    dout = np.sin(np.arange(out.size, dtype=dtype)).reshape(out.shape)
    results = [out, probs, *K.sdpa_backward(dout, q, k, v, probs, dropout_p=dropout_p, seed=3)]
    E = H * D
    query = rng.standard_normal((B, Tq, E)).astype(dtype)
    key = rng.standard_normal((B, Tk, E)).astype(dtype)
    ws = [(rng.standard_normal((E, E)) * 0.2).astype(dtype) for _ in range(4)]
    bs = [rng.standard_normal(E).astype(dtype) for _ in range(4)]
    margs = (query, key, key, ws[0], ws[1], ws[2], bs[0], bs[1], bs[2], ws[3], bs[3], H)
    mout, saved = K.mha_forward(*margs, dropout_p=dropout_p, seed=4)
    grads = K.mha_backward(np.cos(mout), *margs, saved, dropout_p=dropout_p, seed=4)
    results += [mout, saved.probs] + [g for g in grads if g is not None]
    return results


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("dropout_p", [0.0, 0.25])
def test_sdpa_and_mha_same_bits_on_any_thread_count(load_blind, dtype, dropout_p):
    ct.set_num_threads(1)
    one = _sdpa_and_mha(dtype, dropout_p, np.random.default_rng(9))
    ct.set_num_threads(2)
    two = _sdpa_and_mha(dtype, dropout_p, np.random.default_rng(9))
    for a, b in zip(one, two):
        assert np.array_equal(a, b)


def test_two_python_threads_share_the_pool(load_blind):
    """Kernels from two Python threads at once: one gets the pool, the other
    runs its slices itself; both give the 1-thread bits."""
    rng = np.random.default_rng(1)
    args, opts = _packed_case(np.float32, True, False, 0.1, True, rng)
    ct.set_num_threads(1)
    expected = _packed_run(args, opts)
    ct.set_num_threads(2)
    failures = []

    def work():
        for _ in range(15):
            got = _packed_run(args, opts)
            if not all(np.array_equal(a, b) for a, b in zip(expected, got)):
                failures.append("mismatch")

    runners = [threading.Thread(target=work) for _ in range(3)]
    for t in runners:
        t.start()
    for t in runners:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in runners), "a pooled kernel hung"
    assert failures == []


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork() is POSIX only")
def test_pool_restarts_in_a_forked_child():
    """The child of a fork has none of the pool's workers: its first pooled
    call starts new ones instead of waiting for threads that are not there."""
    import ctransformer as package

    code = """
        import os, numpy as np, ctransformer as ct
        from ctransformer import kernels as K
        ct.use_deterministic_algorithms(True)
        ct.set_num_threads(2)
        rng = np.random.default_rng(0)
        q = rng.standard_normal((8, 4, 24, 16)).astype(np.float32)
        ref = K.sdpa_forward(q, q, q)[0]          # starts the pool in the parent
        for _ in range(5):
            pid = os.fork()
            if pid == 0:
                ok = all(np.array_equal(K.sdpa_forward(q, q, q)[0], ref) for _ in range(3))
                os._exit(0 if ok else 3)
            _, status = os.waitpid(pid, 0)
            assert os.WEXITSTATUS(status) == 0, status
        print("children ok")
    """
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(package.__file__))))
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "children ok" in proc.stdout


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_split_gemm_matches_one_thread_to_rounding(load_blind, dtype):
    """A GEMM above 5 MFLOP is split into row (or column) blocks over the
    pool, each a one-thread OpenBLAS call; a block may take another OpenBLAS
    micro-kernel than the whole product, so entries agree with one thread to
    the rounding of the sum of |terms| (README: determinism)."""
    rng = np.random.default_rng(4)
    eps = np.finfo(dtype).eps
    for m, k, n in [(768, 64, 256), (100, 512, 700), (1024, 128, 1000), (33, 300, 4000)]:
        x = rng.standard_normal((m, k)).astype(dtype)
        w = rng.standard_normal((n, k)).astype(dtype)
        dy = rng.standard_normal((m, n)).astype(dtype)
        ct.set_num_threads(1)
        one = [K.linear_forward(x, w), *K.linear_backward(dy, x, w, with_bias=False)[:2]]
        bounds = [k * eps * (np.abs(x) @ np.abs(w).T), n * eps * (np.abs(dy) @ np.abs(w)),
                  m * eps * (np.abs(dy).T @ np.abs(x))]
        for threads in (2, 3):
            ct.set_num_threads(threads)
            many = [K.linear_forward(x, w), *K.linear_backward(dy, x, w, with_bias=False)[:2]]
            for a, b, bound in zip(one, many, bounds):
                assert (np.abs(a - b) <= bound).all()


def test_split_rows_of_decoding_match_one_thread(load_blind):
    """Decoding's Linear for a few rows is split over the pool into blocks of
    weight rows; each output is one thread's dot product, so the split
    changes no bit."""
    rng = np.random.default_rng(6)
    x = rng.standard_normal((12, 512)).astype(np.float32)
    w = rng.standard_normal((3000, 512)).astype(np.float32)
    b = rng.standard_normal(3000).astype(np.float32)
    ct.set_num_threads(1)
    one = [K.decode_linear(x[:M], w, b) for M in (1, 4, 12)]
    for threads in (2, 3):
        ct.set_num_threads(threads)
        for M, expected in zip((1, 4, 12), one):
            np.testing.assert_array_equal(K.decode_linear(x[:M], w, b), expected)


def test_decoding_rows_from_both_ends_cover_every_row_once(load_blind):
    """At 2 threads decode_linear's weight rows are claimed from the two ends
    towards the middle (ct_parallel_converge): a first block each, then
    halves of what is left, down to blocks of 16 rows.  Whatever the extent
    (short of two blocks, odd, or where the halving ends on a partial block),
    every output row is computed once, by one thread's dot product: the bits
    of the 1-thread result, and no row left unwritten (the output starts
    uninitialised)."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((5, 1024)).astype(np.float32)
    w = rng.standard_normal((3001, 1024)).astype(np.float32)
    b = rng.standard_normal(3001).astype(np.float32)
    for n in (32, 33, 47, 48, 49, 100, 511, 1023, 3001):
        for m in (1, 5):
            ct.set_num_threads(1)
            one = K.decode_linear(x[:m], w[:n], b[:n])
            ct.set_num_threads(2)
            for _ in range(3):  # the claims race differently each call
                np.testing.assert_array_equal(K.decode_linear(x[:m], w[:n], b[:n]), one, err_msg=f"N {n}, M {m}")


@pytest.fixture
def pinned_speeds(load_blind):
    """Pin the threads' speeds (ct_parallel_shares, csrc/parallel.h) for one
    test and learn them afresh after it; in deterministic mode, so that the
    split happens whatever the machine's load."""
    yield share_speeds
    share_speeds(None)


SKEWED_SPEEDS = ([3.0, 0.33, 1.0], [0.33, 3.0, 0.5], [1.0, 1.0, 3.0])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_split_gemm_blocks_by_speed_cover_every_row(pinned_speeds, dtype):
    """Each thread's block of a split GEMM is as long as its speed makes it
    (a third of an equal part up to 3x; the last block taken runs to the
    end): whatever the speeds, every row and column is computed once, to the
    rounding of one thread's product."""
    rng = np.random.default_rng(9)
    eps = np.finfo(dtype).eps
    for m, k, n in [(1000, 64, 256), (48, 256, 3001), (35, 300, 4000)]:
        x = rng.standard_normal((m, k)).astype(dtype)
        w = rng.standard_normal((n, k)).astype(dtype)
        b = rng.standard_normal(n).astype(dtype)
        ct.set_num_threads(1)
        one = K.linear_forward(x, w, b)
        bound = (k + 1) * eps * (np.abs(x) @ np.abs(w).T + np.abs(b))
        for speeds in SKEWED_SPEEDS:
            pinned_speeds(speeds)
            for threads in (2, 3):
                ct.set_num_threads(threads)
                many = K.linear_forward(x, w, b)
                assert (np.abs(many - one) <= bound).all(), (m, k, n, speeds, threads)


def test_split_decoding_rows_by_speed_change_no_bit(pinned_speeds):
    """decode_linear's blocks of weight rows (at 3 threads sized by the
    threads' speeds; at 2 claimed from both ends, speeds unused): each
    output is still one thread's dot product, the same bits."""
    rng = np.random.default_rng(10)
    x = rng.standard_normal((3, 512)).astype(np.float32)
    w = rng.standard_normal((3001, 512)).astype(np.float32)
    ct.set_num_threads(1)
    one = K.decode_linear(x, w)
    for speeds in SKEWED_SPEEDS:
        pinned_speeds(speeds)
        for threads in (2, 3):
            ct.set_num_threads(threads)
            np.testing.assert_array_equal(K.decode_linear(x, w), one)


def test_share_speeds_pins_and_forgets(pinned_speeds):
    """share_speeds returns the speeds before the call; None forgets them (1:
    not measured); out-of-range speeds are refused and change nothing."""
    pinned_speeds([2.0, 0.5])
    assert pinned_speeds([1.5])[:3] == (2.0, 0.5, 1.0)
    with pytest.raises(ValueError, match="share_speeds: every speed must be within"):
        pinned_speeds([1.0, 5.0])
    with pytest.raises(ValueError, match="share_speeds: 1 to 64 speeds"):
        pinned_speeds([])
    assert pinned_speeds(None)[:2] == (1.5, 1.0)
    assert pinned_speeds(None)[:2] == (1.0, 1.0)


def test_learnt_speeds_stay_in_their_bounds():
    """Split GEMMs on a live machine teach the pool its threads' speeds
    (each thread's rate over the job's mean, averaged): whatever the load,
    every speed stays within [0.33, 3]."""
    share_speeds(None)
    before = ct.get_num_threads()
    ct.set_num_threads(2)
    try:
        rng = np.random.default_rng(11)
        x = rng.standard_normal((512, 256)).astype(np.float32)
        w = rng.standard_normal((1024, 256)).astype(np.float32)
        for _ in range(20):
            K.linear_forward(x, w)
        speeds = share_speeds(None)
    finally:
        ct.set_num_threads(before)
    assert all(0.33 <= v <= 3.0 for v in speeds)


def _layernorm_backwards(rng, dtype):
    """Layer-norm backward split over the pool (blocks of 64 rows, each with
    its partial dweight and dbias, added in block order; the last block
    partial: N = 3000), with and without a residual and a weight,
    accumulating into given gradients."""
    N, D = 3000, 101  # >= 1 MFLOP
    x, res, dout = (rng.standard_normal((N, D)).astype(dtype) for _ in range(3))
    w, b = rng.standard_normal(D).astype(dtype), rng.standard_normal(D).astype(dtype)
    _, mean, rstd = K.layernorm_forward(x, w, b)
    _, mean_r, rstd_r = K.add_layernorm_forward(x, res, w, b)
    start = rng.standard_normal((N, D)).astype(dtype), rng.standard_normal(D).astype(dtype)
    return [*K.layernorm_backward(dout, x, w, mean, rstd),
            *K.layernorm_backward(dout, x, None, mean, rstd, dinp=start[0].copy(), dbias=start[1].copy())[::2],
            *K.add_layernorm_backward(dout, x, res, w, mean_r, rstd_r, dweight=start[1].copy()),
            K.layernorm_backward(dout, x, w, mean, rstd, need_dinp=False, with_bias=False)[1]]


def _cross_entropies(rng, dtype):
    """Cross-entropy forward (losses summed in row order after the rows ran
    on the pool, blocks of 1024 rows) and backward, with ignored rows, class
    weights, label smoothing and a -inf logit; each reduction."""
    N, C = 2500, 300
    z = rng.standard_normal((N, C)).astype(dtype)
    z[5, 7] = -np.inf
    t = rng.integers(0, C, N)
    t[::17] = -100
    w = rng.random(C).astype(dtype)
    out = []
    for reduction, weight, eps in (("mean", None, 0.0), ("sum", w, 0.1), ("none", w, 0.0), ("mean", w, 0.2)):
        loss, lse = K.cross_entropy_forward(z, t, -100, eps, reduction, weight)
        dloss = np.ones(N if reduction == "none" else (), dtype)
        out += [loss, lse, K.cross_entropy_backward(dloss, z, t, lse, -100, eps, reduction, weight)]
    return out


def _row_kernels(dtype):
    """The row kernels that split their rows over the pool, on inputs big
    enough for it (>= 1 MFLOP of work), with NaN / -inf rows among them; also
    dropout's backward, a Linear's dbias (column blocks) and the packing of a
    float32 Linear's weight (panels on the pool)."""
    rng = np.random.default_rng(8)
    x = rng.standard_normal((1000, 96)).astype(dtype)
    x[7, 3] = np.nan
    x[11] = -np.inf
    r = rng.standard_normal((1000, 96)).astype(dtype)
    w, b = rng.standard_normal(96).astype(dtype), rng.standard_normal(96).astype(dtype)
    big = rng.standard_normal((3001, 700)).astype(dtype)
    dropped, mask = K.dropout_forward(big, 0.3, 12, offset=5)
    wide = rng.standard_normal((1000, 1001)).astype(dtype)  # dbias: columns in blocks of 16, one short
    return [*K.layernorm_forward(r, w, b), *K.add_layernorm_forward(r, x[::-1].copy(), w, b),
            K.dropout_backward(big[::-1].copy(), mask, 0.3), K.dropout_backward(big, mask, 0.3, big.copy()),
            K.linear_backward(wide, x, rng.standard_normal((1001, 96)).astype(dtype), need_dinp=False)[2],
            # float32: the packed kernel (K <= 64 on AVX2 too), 94 / 188 panels
            K.linear_forward(x[:, :64].copy(), big[:, :64].copy()),
            *_layernorm_backwards(rng, dtype), *_cross_entropies(rng, dtype),
            K.softmax_forward(x), K.log_softmax_forward(x), K.bias_act_forward(x, b, "relu"),
            K.bias_act_forward(x, b, "gelu"), K.bias_act_forward(x, None, "gelu", "tanh"),
            *K.dropout_forward(big, 0.3, 12, offset=5), *K.dropout_forward(big[:, :333], 0.5, 3)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_row_kernels_same_bits_on_any_thread_count(load_blind, dtype):
    ct.set_num_threads(1)
    one = _row_kernels(dtype)
    for threads in (2, 3, 7):
        ct.set_num_threads(threads)
        many = _row_kernels(dtype)
        for i, (a, b) in enumerate(zip(one, many)):
            assert np.array_equal(a, b, equal_nan=True), f"output {i} differs at {threads} threads"


def test_openblas_itself_stays_on_one_thread():
    """set_num_threads(n) is our pool's ceiling; the bundled OpenBLAS stays on
    one thread (its idle workers would busy-wait on the cores the pool uses),
    and a GEMM worth more threads is split by us."""
    import ctypes

    path = os.path.join(os.path.dirname(ct.__file__), "_libs", "libscipy_openblas.so")
    if not os.path.exists(path):
        pytest.skip("built against a system OpenBLAS (CT_BLAS=system), not the bundled one")
    lib = ctypes.CDLL(path)
    before = ct.get_num_threads()
    try:
        ct.set_num_threads(3)
        x = np.ones((1024, 256), np.float32)
        K.linear_forward(x, np.ones((512, 256), np.float32))
        assert ct.get_num_threads() == 3
        assert lib.scipy_openblas_get_num_threads() == 1
    finally:
        ct.set_num_threads(before)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fresh_gradient_buffers_are_zeroed_on_the_pool(load_blind, dtype):
    """A fresh buffer a backward accumulates into is zero-filled in blocks of
    pages on the pool (ct_parallel_zero): every byte it does not write stays 0,
    at any thread count, sizes below and above the split threshold (0.5 MB)
    and not a whole number of pages.  Filled with garbage first, so a block
    left unzeroed would show (malloc reuses the freed memory)."""
    rng = np.random.default_rng(11)
    for V, D in ((7, 5), (3001, 64), (20011, 33)):
        ids = np.array([[1, 5], [5, 2]])
        dout = rng.standard_normal((2, 2, D)).astype(dtype)
        expected = np.zeros((V, D), dtype)
        np.add.at(expected, ids, dout)
        for threads in (1, 2, 3):
            ct.set_num_threads(threads)
            np.full((V, D), 7.0, dtype)  # garbage where the next buffer may land
            got = K.embedding_backward(dout, ids, V)
            np.testing.assert_array_equal(got, expected)


def test_copy_array_copies_on_the_pool(load_blind):
    """kernels.runtime.copy_array is np.array(a, order="C", copy=True): a new
    buffer with the same values, dtype and shape (in page blocks on the pool for
    contiguous float32/float64), and NumPy's copy for anything else."""
    from ctransformer.kernels.runtime import copy_array
    rng = np.random.default_rng(12)
    cases = [rng.standard_normal((3, 4)).astype(np.float32),            # below the split threshold
             rng.standard_normal((1000, 333)).astype(np.float32),       # 1.3 MB, not whole pages
             rng.standard_normal((257, 1031)),                          # float64, 2.1 MB
             rng.standard_normal((600, 700)).astype(np.float32).T,      # not C-contiguous
             rng.standard_normal(100_001).astype(">f4"),                # big-endian
             np.arange(300_000, dtype=np.int64).reshape(600, 500),      # not a float
             np.zeros((0, 5), np.float32)]
    for threads in (1, 2):
        ct.set_num_threads(threads)
        for a in cases:
            got = copy_array(a)
            assert got.dtype == a.dtype and got.shape == a.shape and got.flags.c_contiguous
            assert not np.shares_memory(got, a)
            np.testing.assert_array_equal(got, a)
    with pytest.raises(TypeError, match="copy_array: a must be a numpy.ndarray, got list"):
        copy_array([1.0, 2.0])


def test_first_gradient_of_a_leaf_is_its_own_copy():
    """A leaf's first .grad is a fresh C-contiguous copy (made by copy_array,
    on the pool for this 0.7 MB one), never the gradient array handed to the
    engine: changing that array afterwards leaves .grad alone, and a second
    backward adds to it."""
    w = ct.tensor(np.ones((600, 300), np.float32), requires_grad=True)
    given = np.full((600, 300), 2.0, np.float32)
    w.backward(ct.from_numpy(given))  # the engine receives this very array
    grad = w.grad.numpy()
    assert grad.flags.c_contiguous and not np.shares_memory(grad, given)
    given[:] = 5.0
    np.testing.assert_array_equal(grad, np.full((600, 300), 2.0, np.float32))
    w.backward(ct.tensor(given))
    np.testing.assert_array_equal(w.grad.numpy(), np.full((600, 300), 7.0, np.float32))
