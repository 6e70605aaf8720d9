"""The packed-weight GEMM of the float32 recurrent kernels (csrc/packed_gemm.c).

Each kernel the CPU runs (AVX-512, AVX2) and the BLAS path ("off") must give
the float64 NumPy reference's forward and gradients, on shapes that leave
remainders everywhere: batch rows not a multiple of the row block (12 / 6),
gate widths not a multiple of the panel (32 / 16 columns), tiny and wide K."""
import numpy as np
import pytest

import ctransformer.kernels as K
from tolerances import F32
from kernel_table_rnn import GATES, ref_forward

CPU_ISA = K.packed_gemm()[1]
ISAS = ["off"] + {"avx512": ["avx2", "avx512"], "avx2": ["avx2"], "off": []}[CPU_ISA]


@pytest.fixture
def isa(request):
    """Run the test with one kernel forced, on one BLAS thread (the packed
    kernel's condition), and restore both afterwards."""
    threads = K.get_num_threads()
    K.set_num_threads(1)
    previous, active = K.packed_gemm(request.param)
    assert active == request.param
    yield request.param
    K.packed_gemm(previous)
    K.set_num_threads(threads)


def make(rng, mode, T, B, In, H):
    g = GATES[mode]
    return dict(x=rng.standard_normal((T, B, In)), h0=rng.standard_normal((B, H)) * 0.5,
                c0=rng.standard_normal((B, H)) * 0.5 if mode == "lstm" else None,
                w_ih=rng.standard_normal((g * H, In)) / np.sqrt(In),
                w_hh=rng.standard_normal((g * H, H)) / np.sqrt(H),
                b_ih=rng.standard_normal(g * H) * 0.1, b_hh=rng.standard_normal(g * H) * 0.1)


def f32(d):
    return {k: None if v is None else v.astype(np.float32) for k, v in d.items()}


def run(d, mode, lengths=None, reverse=False):
    out, h_n, c_n, saved = K.rnn_forward(d["x"], d["h0"], d["w_ih"], d["w_hh"], d["b_ih"], d["b_hh"], mode,
                                         c0=d["c0"], lengths=lengths, reverse=reverse)
    dout = np.cos(np.arange(out.size)).reshape(out.shape).astype(out.dtype)
    grads = K.rnn_backward(dout, None, None, d["x"], d["w_ih"], d["w_hh"], saved, mode, lengths=lengths,
                           reverse=reverse, with_bias=d["b_ih"] is not None)
    return out, h_n, grads


# T >= 3: shorter sequences keep the BLAS product (CT_RNN_PACK_MIN_STEPS in
# csrc/recurrent.c).
SHAPES = [(3, 1, 4, 5), (4, 13, 7, 20), (3, 25, 3, 33), (3, 12, 40, 64), (5, 7, 9, 32)]


@pytest.mark.parametrize("isa", ISAS, indirect=True)
@pytest.mark.parametrize("mode", ["rnn_tanh", "lstm", "gru"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "T%dB%dI%dH%d" % s)
@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
def test_packed_matches_reference(isa, mode, shape, reverse):
    rng = np.random.default_rng(sum(shape))
    d = make(rng, mode, *shape)
    lengths = np.maximum(1, shape[0] - np.arange(shape[1]) % shape[0])
    out, h_n, grads = run(f32(d), mode, lengths, reverse)
    ref_out, ref_h, _ = ref_forward(d["x"], d["h0"], d["c0"], d["w_ih"], d["w_hh"], d["b_ih"], d["b_hh"], mode,
                                    lengths=lengths, reverse=reverse)
    np.testing.assert_allclose(out, ref_out, **F32)
    np.testing.assert_allclose(h_n, ref_h, **F32)
    # gradients: the float64 kernel (BLAS path, checked by finite differences
    # in test_kernels_recurrent) is the reference
    _, _, grads64 = run(d, mode, lengths, reverse)
    for name, g, g64 in zip(["dx", "dh0", "dc0", "dw_ih", "dw_hh", "db_ih", "db_hh"], grads, grads64):
        if g64 is None:
            assert g is None, name
            continue
        np.testing.assert_allclose(g, g64, rtol=2e-4, atol=2e-4, err_msg=name)


@pytest.mark.parametrize("isa", ISAS, indirect=True)
def test_packed_nan_stays_in_its_row(isa):
    rng = np.random.default_rng(0)
    d = f32(make(rng, "lstm", 3, 14, 4, 9))
    d["h0"][5, 2] = np.nan
    out, h_n, _ = run(d, "lstm")
    assert np.isnan(h_n[5]).all()
    assert np.isfinite(np.delete(h_n, 5, axis=0)).all()
    assert np.isfinite(np.delete(out, 5, axis=1)).all()


def test_packed_gemm_mode_errors():
    with pytest.raises(ValueError, match="packed_gemm: mode must be"):
        K.packed_gemm("sse")
    with pytest.raises(TypeError, match="packed_gemm: mode must be a str"):
        K.packed_gemm(3)
    assert K.packed_gemm()[0] == "auto"


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_recurrent_two_threads(mode):
    """A layer whose step product is >= 16 MFLOP runs its time loop on the
    configured threads, each on a block of batch rows: the forward is
    bit-identical to one thread (every row runs the same code), and both
    match the reference."""
    rng = np.random.default_rng(3)
    d = make(rng, mode, 3, 64, 16, 256)
    lengths = np.array([3, 2, 1, 3] * 16)
    threads = K.get_num_threads()
    try:
        K.set_num_threads(1)
        one = run(f32(d), mode, lengths)
        K.set_num_threads(2)
        two = run(f32(d), mode, lengths)
    finally:
        K.set_num_threads(threads)
    ref_out, ref_h, _ = ref_forward(d["x"], d["h0"], d["c0"], d["w_ih"], d["w_hh"], d["b_ih"], d["b_hh"], mode,
                                    lengths=lengths)
    np.testing.assert_allclose(two[0], ref_out, **F32)
    np.testing.assert_allclose(two[1], ref_h, **F32)
    np.testing.assert_array_equal(two[0], one[0])
    np.testing.assert_array_equal(two[1], one[1])
    for g1, g2 in zip(one[2], two[2]):
        if g1 is not None:
            np.testing.assert_allclose(g2, g1, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("speeds", [[3.0, 0.33], [0.33, 3.0]])
def test_recurrent_blocks_by_speed(speeds):
    """The sweepers' blocks of batch rows are sized by the threads' speeds
    (pinned here far apart): every row is still swept once, the forward
    bit-identical to one thread."""
    from ctransformer.kernels.runtime import share_speeds
    rng = np.random.default_rng(5)
    d = make(rng, "lstm", 3, 64, 16, 256)
    lengths = np.array([3, 1, 2, 3] * 16)
    threads = K.get_num_threads()
    try:
        K.set_num_threads(1)
        one = run(f32(d), "lstm", lengths)
        share_speeds(speeds)
        K.set_num_threads(2)
        skewed = run(f32(d), "lstm", lengths)
    finally:
        share_speeds(None)
        K.set_num_threads(threads)
    np.testing.assert_array_equal(skewed[0], one[0])
    np.testing.assert_array_equal(skewed[1], one[1])
    for g1, g2 in zip(one[2], skewed[2]):
        if g1 is not None:
            np.testing.assert_allclose(g2, g1, rtol=2e-5, atol=2e-6)


# K 37 and 100: whole 16 x 16 blocks of the AVX-512 packing plus a tail of K, in panels 32 and 13 / 6 wide
LINEAR_SHAPES = [(1, 1, 1), (13, 7, 33), (25, 64, 31), (768, 64, 192), (100, 256, 65), (50, 37, 45), (20, 100, 70),
                 (40, 257, 20), (1100, 256, 40), (300, 512, 130), (40, 600, 20), (50, 512, 2100), (3, 40, 20),
                 (4, 40, 20),
                 # AVX2 too (K <= 64, 128 rows or more): row, panel and K remainders
                 (200, 37, 45), (130, 64, 17),
                 # 9-32 rows with K > 256: the weight streamed, the rows packed (row and weight-block remainders)
                 (9, 257, 37), (20, 300, 13), (32, 517, 45), (31, 1030, 70), (8, 300, 20), (33, 300, 20)]


@pytest.mark.parametrize("isa", ISAS, indirect=True)
def test_linear_forward_short_k_every_kernel(isa):
    """float32 linear_forward runs the streamed-weight kernel for 9-32 rows
    with K > 256, else the packed kernel for, on AVX-512, 4 rows or more, K
    <= 512 and a weight up to 4 MB, its rows in chunks (the 1.1 MB inp, K
    512), on AVX2 128 rows or more and K <= 64 (csrc/linear.c; sgemm
    otherwise: 1 to 3 rows, K 600, the 4.3 MB weight): with every kernel the CPU
    has, on shapes with row, column and K remainders, with and without a
    bias, the float64 product to float32 rounding; a NaN stays in its row."""
    rng = np.random.default_rng(12)
    for m, k, n in LINEAR_SHAPES:
        x = rng.standard_normal((m, k)).astype(np.float32)
        w = rng.standard_normal((n, k)).astype(np.float32)
        b = rng.standard_normal(n).astype(np.float32)
        for bias in (b, None):
            ref = x.astype(np.float64) @ w.astype(np.float64).T + (0 if bias is None else bias)
            bound = (k + 1) * np.finfo(np.float32).eps * (np.abs(x) @ np.abs(w).T + (0 if bias is None else
                                                                                  np.abs(bias)))
            got = K.linear_forward(x, w, bias)
            assert got.dtype == np.float32 and got.shape == (m, n)
            assert (np.abs(got - ref) <= bound).all(), (m, k, n, isa)
    for k in (40, 300):
        x = rng.standard_normal((30, k)).astype(np.float32)
        x[17, 3] = np.nan
        got = K.linear_forward(x, rng.standard_normal((50, k)).astype(np.float32))
        assert np.isnan(got[17]).all() and np.isfinite(np.delete(got, 17, axis=0)).all()


@pytest.mark.parametrize("m, k", [(1000, 64), (1000, 128), (100, 512), (32, 600), (9, 257)],
                         ids=["packed64", "packed", "packed512", "streamed32", "streamed9"])
def test_linear_forward_short_k_same_bits_on_any_thread_count(m, k):
    """Each output of the packed forward (the weight packed, or the rows
    packed and the weight streamed) is one k-order sum whatever the blocks,
    so splitting the rows (the weight's rows) over 2 or 3 threads (in blocks
    sized by pinned, far-apart speeds too; the streamed weight's rows at 2
    threads from both ends, ct_parallel_converge) changes no bit."""
    if CPU_ISA == "off" or (CPU_ISA == "avx2" and 32 < m and k > 64):
        pytest.skip(f"this {m} x {k} forward takes sgemm on {CPU_ISA} (csrc/linear.c); "
                    "sgemm agrees to rounding (test_thread_pool.py)")
    from ctransformer.kernels.runtime import share_speeds
    import ctransformer as ct
    rng = np.random.default_rng(13)
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((300, k)).astype(np.float32)
    b = rng.standard_normal(300).astype(np.float32)
    threads = K.get_num_threads()
    ct.use_deterministic_algorithms(True)
    try:
        K.set_num_threads(1)
        one = K.linear_forward(x, w, b)
        for speeds in (None, [3.0, 0.33, 1.0], [0.33, 1.0, 3.0]):
            if speeds is not None:
                share_speeds(speeds)
            for n in (2, 3):
                K.set_num_threads(n)
                np.testing.assert_array_equal(K.linear_forward(x, w, b), one)
    finally:
        share_speeds(None)
        ct.use_deterministic_algorithms(False)
        K.set_num_threads(threads)


@pytest.mark.parametrize("k", [257, 512, 1024, 1030, 2048])
def test_linear_forward_streamed_rows_same_bits_as_packed(k):
    """A few rows (9-32, K > 256: the weight streamed, the next block of its
    rows asked for while a block is multiplied when K <= 1024) give the bits
    those rows get among many (more than 32 rows: sgemm, or from K <= 512 the
    rows streamed against the packed weight): each output is the same k-order
    sum of single FMAs, then the bias."""
    if CPU_ISA == "off":
        pytest.skip("the streamed and packed forwards need AVX2 or AVX-512")
    rng = np.random.default_rng(14)
    x = rng.standard_normal((600, k)).astype(np.float32)
    w = rng.standard_normal((70, k)).astype(np.float32)
    b = rng.standard_normal(70).astype(np.float32)
    many = K.linear_forward(x, w, b)
    for rows in (9, 20, 32):
        few = K.linear_forward(x[:rows], w, b)
        if k <= 512 and CPU_ISA == "avx512":
            np.testing.assert_array_equal(few, many[:rows])
        else:  # many rows of a long K (on AVX2, of K > 64) take sgemm: the same sum to rounding,
            # within twice the bound of one float32 sum of k products (outputs ~ +-sqrt(k) from
            # terms ~ 1 cancel, so a relative tolerance on the result says nothing here)
            bound = 2 * (k + 1) * np.finfo(np.float32).eps * (np.abs(x[:rows]) @ np.abs(w).T + np.abs(b))
            assert (np.abs(few - many[:rows]) <= bound).all(), (k, rows)


# (M, K, N) of linear_backward: dinp (M, K) = dout (M, N) weight (N, K), the
# inner dimension N.  The packed kernel takes M >= 32 (AVX2: 512) and N <= 1536
# (sgemm: M 1, 13, 25, 31 and N 1537); N 1536 makes chunks of 36 rows (256 KB of dout)
DINP_SHAPES = [(1, 1, 1), (13, 7, 33), (25, 64, 31), (31, 40, 50), (32, 40, 50), (576, 64, 192), (100, 256, 65),
               (50, 37, 45), (40, 20, 257), (100, 45, 1536), (40, 45, 1537),
               # AVX2 takes the packed kernel from 512 rows: 511 stays with sgemm
               (511, 40, 50), (512, 40, 50), (600, 45, 1536)]


@pytest.mark.parametrize("isa", ISAS, indirect=True)
def test_linear_backward_dinp_every_kernel(isa):
    """float32 linear_backward's dinp runs the packed kernel from 32 rows on
    AVX-512 (512 on AVX2) and an inner dimension up to 1536, with the weight packed as it
    is (csrc/linear.c; sgemm otherwise): fresh and
    accumulated into a given buffer, on shapes with row, column and inner
    remainders and chunks of rows, the float64 product to float32 rounding;
    dweight and dbias beside it unchanged; a NaN in dout stays in its row."""
    rng = np.random.default_rng(14)
    for m, k, n in DINP_SHAPES:
        x = rng.standard_normal((m, k)).astype(np.float32)
        w = rng.standard_normal((n, k)).astype(np.float32)
        d = rng.standard_normal((m, n)).astype(np.float32)
        given = rng.standard_normal((m, k)).astype(np.float32)
        ref = d.astype(np.float64) @ w.astype(np.float64)
        bound = (n + 1) * np.finfo(np.float32).eps * (np.abs(d) @ np.abs(w) + np.abs(given))
        dinp, dw, db = K.linear_backward(d, x, w)
        assert dinp.dtype == np.float32 and dinp.shape == (m, k)
        assert (np.abs(dinp - ref) <= bound).all(), (m, k, n, isa)
        acc = given.copy()
        out = K.linear_backward(d, x, w, dinp=acc)[0]
        assert out is acc and (np.abs(acc - (given + ref)) <= bound).all(), (m, k, n, isa)
        np.testing.assert_allclose(dw, d.astype(np.float64).T @ x, rtol=1e-4, atol=1e-4 * np.sqrt(m))
        np.testing.assert_allclose(db, d.astype(np.float64).sum(0), rtol=1e-4, atol=1e-4 * np.sqrt(m))
    d = rng.standard_normal((30, 300)).astype(np.float32)
    d[17, 3] = np.nan
    got = K.linear_backward(d, rng.standard_normal((30, 40)).astype(np.float32),
                            rng.standard_normal((300, 40)).astype(np.float32), with_bias=False)[0]
    assert np.isnan(got[17]).all() and np.isfinite(np.delete(got, 17, axis=0)).all()


@pytest.mark.parametrize("m, k, n", [(1000, 128, 384), (100, 64, 1536), (600, 64, 1536)],
                         ids=["d128", "chunks36", "chunks36_600"])
def test_linear_backward_dinp_same_bits_on_any_thread_count(m, k, n):
    """Each row of the packed dinp is one inner-order sum whatever the row
    blocks, so 2 or 3 threads (blocks sized by far-apart speeds too) change
    no bit, fresh or accumulated."""
    if CPU_ISA == "off" or (CPU_ISA == "avx2" and m < 512):
        pytest.skip(f"dinp of {m} rows takes sgemm on {CPU_ISA} (csrc/linear.c); "
                    "sgemm agrees to rounding (test_thread_pool.py)")
    from ctransformer.kernels.runtime import share_speeds
    import ctransformer as ct
    rng = np.random.default_rng(15)
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((n, k)).astype(np.float32)
    d = rng.standard_normal((m, n)).astype(np.float32)
    given = rng.standard_normal((m, k)).astype(np.float32)
    threads = K.get_num_threads()
    ct.use_deterministic_algorithms(True)
    try:
        K.set_num_threads(1)
        one = K.linear_backward(d, x, w)[0]
        one_acc = K.linear_backward(d, x, w, dinp=given.copy())[0]
        for speeds in (None, [3.0, 0.33, 1.0], [0.33, 1.0, 3.0]):
            if speeds is not None:
                share_speeds(speeds)
            for t in (2, 3):
                K.set_num_threads(t)
                np.testing.assert_array_equal(K.linear_backward(d, x, w)[0], one)
                np.testing.assert_array_equal(K.linear_backward(d, x, w, dinp=given.copy())[0], one_acc)
    finally:
        share_speeds(None)
        ct.use_deterministic_algorithms(False)
        K.set_num_threads(threads)
