"""Misuse cases run through torch and through ctransformer: the exception
class each raises, compared (torch's recorded classes in tests/golden when
torch is not installed).  A test module lists its cases as
``{name: case(lib)}`` and calls ``assert_torchs_classes``."""
import warnings

import numpy as np


def exception_classes(lib, cases: dict) -> dict:
    """name -> the class name of the exception each case raises ('' when none).
    Warnings are silenced: torch's notes (an LSTM's dropout, a loss's broadcast)."""
    lib.manual_seed(0)
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, case in cases.items():
            try:
                case(lib)
                out[name] = ""
            except Exception as e:  # noqa: BLE001
                out[name] = type(e).__name__
    return out


def assert_torchs_classes(torch_ref, cases: dict, ours) -> None:
    """Every case raises the class torch raises, and every case is refused."""
    theirs = torch_ref(lambda torch: {k: np.array(v) for k, v in exception_classes(torch, cases).items()})
    got = exception_classes(ours, cases)
    want = {name: str(theirs[name]) for name in cases}
    differ = {name: (got[name], want[name]) for name in cases if got[name] != want[name]}
    assert not differ, f"(ours, torch's) exception classes differ: {differ}"
    ran = [name for name, cls in got.items() if not cls]
    assert not ran, f"cases that should be refused ran: {ran}"
