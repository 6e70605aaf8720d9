"""The thread policy (issue 15): set_num_threads(n) is a ceiling, each
kernel call uses as many threads as its work is worth (csrc/parallel.c),
and the thread count seen from Python never moves under a call."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import ctransformer as ct
from ctransformer import kernels as K
from ctransformer.kernels.runtime import threads_for


@pytest.fixture
def threads():
    before = ct.get_num_threads()
    yield
    ct.set_num_threads(before)


def test_small_calls_run_on_one_thread_and_huge_ones_on_all():
    # below the quiet-machine threshold (~5 MFLOP): one thread whatever the ceiling
    assert threads_for(2.0 * 256 * 64 * 64, 2) == 1
    assert threads_for(1e6, 64) == 1
    # from ~4 GFLOP the ceiling, however busy the machine is
    assert threads_for(2.0 * 1024 * 8000 * 512, 2) == 2
    assert threads_for(1e12, 4) == 4


@pytest.mark.parametrize("flops", [1e3, 1e6, 2e7, 5e8, 1e10])
def test_never_more_than_the_ceiling_nor_less_than_one(flops):
    for ceiling in (1, 2, 3, 8):
        assert 1 <= threads_for(flops, ceiling) <= ceiling
    assert threads_for(flops, 1) == 1


def test_threads_for_defaults_to_the_current_ceiling(threads):
    ct.set_num_threads(1)
    assert threads_for(1e12) == 1
    ct.set_num_threads(3)
    assert threads_for(1e12) == 3


@pytest.mark.parametrize("rows", [4, 160, 768, 2048])
def test_ceiling_is_restored_after_every_call(threads, rows):
    """A call that ran on fewer threads leaves the ceiling as it was (it is
    our pool's; OpenBLAS itself stays on one thread)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, 256)).astype(np.float32)
    w = rng.standard_normal((256, 256)).astype(np.float32)
    for ceiling in (2, 1, 2):
        ct.set_num_threads(ceiling)
        K.linear_forward(x, w)
        K.linear_backward(x.copy(), x, w)  # three GEMMs
        assert ct.get_num_threads() == ceiling


def test_results_do_not_depend_on_the_policy(threads):
    """Whatever thread count the policy picks, a GEMM equals the 1-thread one
    to float32 rounding of the sum of |terms| (README: OpenBLAS's row blocks
    move with the thread count)."""
    rng = np.random.default_rng(2)
    for m, k, n in [(96, 64, 64), (768, 64, 256), (1024, 512, 512)]:
        x = rng.standard_normal((m, k)).astype(np.float32)
        w = rng.standard_normal((n, k)).astype(np.float32)
        ct.set_num_threads(1)
        one = K.linear_forward(x, w)
        ct.set_num_threads(2)
        two = K.linear_forward(x, w)
        bound = k * np.finfo(np.float32).eps * (np.abs(x) @ np.abs(w).T)
        assert (np.abs(one - two) <= bound).all()


def _timeout_seen(extra_env: dict) -> str:
    """OPENBLAS_THREAD_TIMEOUT as a fresh interpreter sees it after import."""
    import ctransformer as package

    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_THREAD_TIMEOUT"}
    env.update(extra_env)
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(os.path.abspath(package.__file__)))
    code = "import os, ctransformer; print(os.environ['OPENBLAS_THREAD_TIMEOUT'])"
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_idle_openblas_workers_spin_briefly_unless_the_user_chose():
    """Idle workers spin 2^20 cycles (~0.3 ms), not OpenBLAS's default 2^28
    (~0.1 s) on a core another process may need; a value the user set wins."""
    assert _timeout_seen({}) == "20"
    assert _timeout_seen({"OPENBLAS_THREAD_TIMEOUT": "4"}) == "4"


def _spin(seconds):
    """A busy process for `seconds` (the load the policy reads)."""
    return subprocess.Popen([sys.executable, "-c", f"import time\nend = time.time() + {seconds}\nwhile time.time() < end: pass"])


def test_deterministic_mode_makes_the_thread_count_load_blind():
    """use_deterministic_algorithms(True): a mid-size call uses the ceiling
    even while other processes keep every core busy (the count depends on
    size and ceiling only), so its rows split the same way every run."""
    mid = 1e8   # between the one-thread and the always-ceiling thresholds
    busy = [_spin(3) for _ in range(os.cpu_count() or 2)]
    try:
        ct.use_deterministic_algorithms(True)
        assert ct.are_deterministic_algorithms_enabled()
        assert [threads_for(mid, 2) for _ in range(20)] == [2] * 20
        assert threads_for(1e3, 2) == 1   # small calls stay on the caller either way
    finally:
        ct.use_deterministic_algorithms(False)
        for p in busy:
            p.kill()
            p.wait()
    assert not ct.are_deterministic_algorithms_enabled()
    assert not ct.is_deterministic_algorithms_warn_only_enabled()


def test_use_deterministic_algorithms_refuses_non_bool_like_torch():
    with pytest.raises(TypeError, match="use_deterministic_algorithms: mode must be bool, got int"):
        ct.use_deterministic_algorithms(1)
    ct.use_deterministic_algorithms(True, warn_only=True)
    try:
        assert ct.is_deterministic_algorithms_warn_only_enabled()
    finally:
        ct.use_deterministic_algorithms(False)
