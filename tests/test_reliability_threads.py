"""fork() while another thread runs kernels, and what the thread count may
change (issue 16).  Each scenario runs in a fresh interpreter with a
timeout, so a deadlock fails one test instead of hanging the run."""
import subprocess

import numpy as np
import pytest

import ctransformer as ct
from ctransformer import kernels as K
from conftest import run_isolated

FORK_WHILE_GEMM = """
import os, sys, threading
import numpy as np
import ctransformer as ct
from ctransformer import kernels as K
ct.set_num_threads(2)
x = np.ones((768, 768), np.float32)
stop = False
def loop():
    while not stop:
        K.linear_forward(x, x)
worker = threading.Thread(target=loop)
worker.start()
for i in range(20):
    pid = os.fork()
    if pid == 0:            # the child can run kernels (2 threads) too
        y = K.linear_forward(x[:4], x)
        os._exit(0 if y[0, 0] == 768 else 1)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"child {i} failed: {status}")
stop = True
worker.join()
print("forked 20 times")
"""


def test_fork_while_another_thread_runs_gemm():
    """With 2 threads, one Python thread looping on a 768x768 linear_forward
    while the main thread forks deadlocked the parent 3 runs of 3 (OpenBLAS's
    pre-fork handler waited for its busy workers)."""
    try:
        proc = run_isolated(FORK_WHILE_GEMM, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("fork() deadlocked while another thread ran a GEMM")
    assert proc.returncode == 0, proc.stderr
    assert "forked 20 times" in proc.stdout


def test_fork_while_another_thread_trains():
    """The same with a whole forward/backward (every kernel family's calls)."""
    code = """
    import os, sys, threading
    import numpy as np
    import ctransformer as ct
    import ctransformer.nn as nn
    ct.set_num_threads(2)
    ct.manual_seed(0)
    model = nn.TransformerEncoderLayer(64, 4, 128, batch_first=True)
    lstm = nn.LSTM(64, 64)
    x = ct.randn(8, 30, 64)
    stop = False
    def loop():
        while not stop:
            model(x).sum().backward()
            lstm(x)[0].sum().backward()
    worker = threading.Thread(target=loop)
    worker.start()
    for i in range(10):
        pid = os.fork()
        if pid == 0:
            os._exit(0 if model(x).shape == (8, 30, 64) else 1)
        _, status = os.waitpid(pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            sys.exit(f"child {i} failed")
    stop = True
    worker.join()
    print("ok")
    """
    try:
        proc = run_isolated(code, timeout=180)
    except subprocess.TimeoutExpired:
        pytest.fail("fork() deadlocked while another thread trained")
    assert proc.returncode == 0, proc.stderr


@pytest.fixture
def threads():
    before = ct.get_num_threads()
    yield
    ct.set_num_threads(before)


def _at(n, fn):
    ct.set_num_threads(n)
    out = fn()
    return [np.array(o) for o in (out if isinstance(out, tuple) else (out,)) if isinstance(o, np.ndarray)]


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "layernorm", "dropout", "activation", "cross_entropy",
                                  "embedding_backward", "adam"])
def test_own_kernels_do_not_depend_on_thread_count(threads, name):
    """Our own loops give the same bits with 1 and 2 threads; OpenBLAS's
    GEMM may not (README: its row blocks move with the thread count), and
    every kernel that multiplies matrices through it inherits that."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((257, 96)).astype(np.float32)
    ids = rng.integers(0, 50, 1000)
    dout_rows = rng.standard_normal((1000, 8)).astype(np.float32)

    def adam():
        p, m, v = x.copy(), np.zeros_like(x), np.zeros_like(x)
        K.adam_step(p, x, m, v, 1)
        return p

    fns = {
        "softmax": lambda: K.softmax_forward(x),
        "log_softmax": lambda: K.log_softmax_forward(x),
        "layernorm": lambda: K.layernorm_forward(x, x[0], x[1]),
        "dropout": lambda: K.dropout_forward(x, 0.3, 7),
        "activation": lambda: K.activation_forward(x, "gelu"),
        "cross_entropy": lambda: K.cross_entropy_forward(x, ids[:257] % 96),
        "embedding_backward": lambda: K.embedding_backward(dout_rows, ids, 50),
        "adam": adam,
    }
    one, two = _at(1, fns[name]), _at(2, fns[name])
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a, b)


def test_gemm_thread_count_changes_only_the_last_bits(threads):
    """OpenBLAS's sgemm at 1 and 2 threads: the same products summed in a
    different order for some rows (README), so equal to float32 rounding of
    the sum of |terms|."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((160, 64)).astype(np.float32)
    w = rng.standard_normal((64, 64)).astype(np.float32)
    one, two = _at(1, lambda: K.linear_forward(x, w))[0], _at(2, lambda: K.linear_forward(x, w))[0]
    bound = 64 * np.finfo(np.float32).eps * (np.abs(x) @ np.abs(w).T)
    assert (np.abs(one - two) <= bound).all()
