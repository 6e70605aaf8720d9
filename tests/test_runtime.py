"""Process-level behaviour: threads knob, fork safety, the private module."""
import numpy as np
import pytest

import ctransformer as ct
import ctransformer.kernels as K
from conftest import run_isolated


def test_set_get_num_threads_roundtrip():
    before = ct.get_num_threads()
    try:
        ct.set_num_threads(1)
        assert ct.get_num_threads() == 1
    finally:
        ct.set_num_threads(before)
    assert ct.get_num_threads() == before


@pytest.mark.parametrize("bad", [0, -2])
def test_set_num_threads_rejects_non_positive(bad):
    with pytest.raises(ValueError, match="set_num_threads: n must be >= 1"):
        ct.set_num_threads(bad)


def test_set_num_threads_rejects_non_int():
    with pytest.raises(TypeError, match="set_num_threads: n must be an int"):
        ct.set_num_threads(1.5)


def test_omp_num_threads_is_honoured():
    r = run_isolated("""
        import os
        os.environ["OMP_NUM_THREADS"] = "1"
        import ctransformer
        print("threads", ctransformer.get_num_threads())
    """)
    assert r.returncode == 0, r.stderr
    assert "threads 1" in r.stdout


def test_kernels_work_in_a_forked_child_after_threaded_use():
    """No OpenMP: a child forked after the parent used BLAS threads must not hang."""
    r = run_isolated("""
        import os, numpy as np
        import ctransformer as ct, ctransformer.kernels as K
        ct.set_num_threads(2)
        x = np.random.rand(512, 512).astype(np.float32)
        K.linear_forward(x, x)                      # parent starts the BLAS thread pool
        pid = os.fork()
        if pid == 0:
            out = K.linear_forward(x, x)
            os._exit(0 if np.allclose(out, x @ x.T, rtol=1e-4, atol=1e-3) else 3)
        _, status = os.waitpid(pid, 0)
        print("child", os.waitstatus_to_exitcode(status))
    """, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "child 0" in r.stdout


def test_gil_is_released_during_kernels():
    """Two Python threads running a long GEMM overlap (the GIL is released):
    checked by a counter thread making progress while a kernel runs."""
    import threading
    import time

    before = ct.get_num_threads()
    ct.set_num_threads(1)
    x = np.random.rand(1536, 1536).astype(np.float32)
    ticks = []
    done = threading.Event()

    def counter():
        while not done.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.0005)

    t = threading.Thread(target=counter)
    t.start()
    try:
        time.sleep(0.01)
        start = time.perf_counter()
        K.linear_forward(x, x)  # one call of ~0.1-0.5 s
        end = time.perf_counter()
    finally:
        done.set()
        t.join()
        ct.set_num_threads(before)
    during = [s for s in ticks if start < s < end]
    # With the GIL held the counter could not run at all during the call.
    assert len(during) >= 10, f"counter ran {len(during)} times in {end - start:.3f} s of kernel time"
