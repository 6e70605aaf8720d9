"""Shared test helpers: finite-difference checks for kernels and a runner
for code that might crash the interpreter."""
import os
import subprocess
import sys
import tempfile
import textwrap

import numpy as np
import pytest

from tolerances import F32, F64  # noqa: F401  (re-exported: older tests import them from here)


def numeric_grad(f, x, eps=1e-6):
    """Central-difference gradient of the scalar function f() w.r.t. the
    float64 array x (modified in place and restored)."""
    g = np.zeros_like(x)
    flat, gflat = x.reshape(-1), g.reshape(-1)
    for i in range(flat.size):
        old = flat[i]
        flat[i] = old + eps
        up = f()
        flat[i] = old - eps
        down = f()
        flat[i] = old
        gflat[i] = (up - down) / (2 * eps)
    return g


def check_grads(forward, grads, inputs, wrt, seed=0, rtol=1e-5, atol=1e-7):
    """Check analytic gradients of a kernel against central differences.

    forward(*inputs) -> out (an array; the first array if a tuple)
    grads(dout, *inputs) -> dict name -> analytic gradient of sum(out * dout)
    inputs: dict name -> float64 array (positional order = dict order)
    wrt: names to check.
    """
    rng = np.random.default_rng(seed)
    names = list(inputs)

    def out_of():
        out = forward(*[inputs[n] for n in names])
        return out[0] if isinstance(out, tuple) else out

    dout = rng.standard_normal(out_of().shape)
    analytic = grads(dout, *[inputs[n] for n in names])
    for name in wrt:
        num = numeric_grad(lambda: float(np.sum(out_of() * dout)), inputs[name])
        np.testing.assert_allclose(analytic[name], num, rtol=rtol, atol=atol,
                                   err_msg=f"gradient w.r.t. {name}")


def run_isolated(code: str, timeout: int = 120) -> subprocess.CompletedProcess:
    """Run Python code in a fresh interpreter, so a crash fails one test
    rather than the whole run.  It imports the same ctransformer as this
    test run (installed or in-place build).  Returns the completed process."""
    import ctransformer

    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(ctransformer.__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = package_parent + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=tempfile.gettempdir())


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture(autouse=True)
def _golden_reference(request):
    """Binds golden.torch_reference (helpers' route to torch) to this test."""
    import golden
    golden.current = golden.TorchReference(request.node.nodeid)
    yield
    golden.current = None


@pytest.fixture
def torch_ref(_golden_reference):
    """Torch reference values, live or from the golden fixtures (tests/golden.py)."""
    import golden
    return golden.current


def pytest_sessionfinish(session, exitstatus):
    import golden
    if golden.mode() == "record":
        for path in golden.write_recorded():
            print(f"\ngolden: wrote {os.path.relpath(path)}")
