"""The bindings generated from csrc/py/kernel_table.py: the committed Python
pass-throughs (ctransformer/kernels/_bindings.py) are what the table gives
now, and each C function's signature is the Python one."""
import importlib.util
import inspect
import sys
from pathlib import Path

import pytest

from ctransformer import _C
from ctransformer.kernels import _bindings

GENERATOR = Path(__file__).resolve().parent.parent / "csrc" / "py" / "generate_bindings.py"


def _generator():
    spec = importlib.util.spec_from_file_location("generate_bindings", GENERATOR)
    module = importlib.util.module_from_spec(spec)
    sys.modules["generate_bindings"] = module
    spec.loader.exec_module(module)
    return module


def test_python_bindings_are_up_to_date():
    gen = _generator()
    expected = gen.render_python(gen.load_table())
    assert Path(_bindings.__file__).read_text() == expected, \
        "ctransformer/kernels/_bindings.py is stale: run python3 csrc/py/generate_bindings.py"


@pytest.mark.parametrize("kernel", _generator().load_table(), ids=lambda k: k.name)
def test_c_and_python_signatures_agree(kernel):
    c_params = list(inspect.signature(getattr(_C, kernel.name)).parameters)
    assert c_params == [a.name for a in kernel.parsed]
    if kernel.python:
        py = getattr(_bindings, kernel.name)
        assert list(inspect.signature(py).parameters) == c_params
        assert py.__doc__ and py.__doc__.strip()
