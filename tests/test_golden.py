"""The golden-fixture machinery itself (tests/golden.py): values survive the
round trip through a fixture file unchanged, stale inputs are caught, and
every committed fixture belongs to a test that exists."""
import ast
import glob
import os

import numpy as np
import pytest

import golden

HERE = os.path.dirname(os.path.abspath(__file__))


def test_flatten_round_trip_keeps_structure_and_dtypes():
    value = dict(out=np.arange(6, dtype=np.float32).reshape(2, 3), loss=np.float64(1.5),
                 grads=[np.ones(2), np.zeros((0, 4), np.float32)], pair=(np.int64(3), "word"),
                 words=["man", "woman"], nested=dict(a=dict(b=np.array([True, False]))), empty={})
    flat = {}
    golden._flatten(value, "", flat)
    back = golden._unflatten(flat)
    assert set(back) == set(value)
    assert back["out"].dtype == np.float32 and back["out"].shape == (2, 3)
    np.testing.assert_array_equal(back["out"], value["out"])
    assert back["loss"].shape == () and float(back["loss"]) == 1.5
    assert isinstance(back["grads"], list) and back["grads"][1].shape == (0, 4)
    assert isinstance(back["pair"], tuple) and int(back["pair"][0]) == 3 and str(back["pair"][1]) == "word"
    assert list(back["words"]) == ["man", "woman"]
    np.testing.assert_array_equal(back["nested"]["a"]["b"], [True, False])
    assert back["empty"] == {}


def test_flatten_refuses_objects():
    with pytest.raises(TypeError, match="cannot store"):
        golden._flatten(dict(x=object()), "", {})


def test_changed_inputs_fail_with_the_fix(tmp_path):
    x = np.linspace(-1, 1, 50).astype(np.float32)
    stored = {"t|0|in/x/shape": np.asarray(x.shape), "t|0|in/x/print": golden._fingerprint(x)}
    golden._check_inputs("t|0", stored, dict(x=x), "regenerate")        # unchanged: passes
    with pytest.raises(pytest.fail.Exception, match="differs from the one recorded: regenerate"):
        golden._check_inputs("t|0", stored, dict(x=x * 1.01), "regenerate")
    with pytest.raises(pytest.fail.Exception, match="has shape"):
        golden._check_inputs("t|0", stored, dict(x=x[:10]), "regenerate")


def _test_names(module_path):
    with open(module_path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    return {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(golden.GOLDEN_DIR, "*.npz"))),
                         ids=os.path.basename)
def test_every_fixture_belongs_to_an_existing_test(path):
    module = os.path.join(HERE, os.path.basename(path)[:-4] + ".py")
    assert os.path.exists(module), f"{path}: no test module {module}"
    names = _test_names(module)
    with np.load(path, allow_pickle=False) as data:
        tests = {key.split(golden.SEP, 1)[0] for key in data.files}
    for test in tests:
        function = test.split("::")[-1].split("[")[0]
        assert function in names, f"{os.path.basename(path)}: fixture for {test!r}, which no longer exists"
