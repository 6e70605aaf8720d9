"""Regenerate the golden torch fixtures (tests/golden/*.npz) from torch 2.13.

    pip install torch==2.13.0
    python tests/make_golden.py                       # every test module
    python tests/make_golden.py test_nn_rnn.py -k lstm  # some tests (other entries kept)

It runs the tests with CT_GOLDEN=record: each ``torch_ref`` call runs torch
live (the tests still compare against it) and its values are merged into
tests/golden/<module>.npz at the end of the run.  Commit the changed files.
Without torch, the tests read these fixtures (see tests/golden.py).
"""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def _names_test_module(arg: str) -> bool:
    """test_x.py or test_x.py::test_y given relative to tests/ (other
    arguments, such as the expression after -k, pass through unchanged)."""
    module = arg.split("::")[0]
    return module.endswith(".py") and not os.path.exists(module)


def main(argv):
    import torch
    from golden import TORCH_VERSION
    if torch.__version__.split("+")[0] != TORCH_VERSION:
        raise SystemExit(f"make_golden: fixtures are recorded from torch {TORCH_VERSION}, "
                         f"this is torch {torch.__version__}")
    os.environ["CT_GOLDEN"] = "record"
    args = [os.path.join(HERE, a) if _names_test_module(a) else a for a in argv]
    return pytest.main(["-q", "-p", "no:cacheprovider"] + (args or [HERE]))


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    sys.exit(main(sys.argv[1:]))
