"""The teaching notebooks (notebooks/NN_*.ipynb) run top to bottom.

Each notebook is executed headless with nbclient (kernel python3) in a
temporary copy of notebooks/, so the committed outputs are never rewritten.
A cell that raises - including the notebooks' own asserts (the hand-written
layers equal the fused modules, the Seq2Seq model decodes its 8 training
pairs, the translation model reaches 90% held-out exact match, ...) - fails
the test.  Skipped only when nbclient / ipykernel are missing (the ``test``
extra installs them).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

import pytest

NOTEBOOK_DIR = Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.ipynb"))
SOURCES = sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.py"))
EXPECTED = ["01_embeddings_and_positional_encoding", "02_rnn", "03_lstm", "04_seq2seq", "05_attention",
            "06_transformer_blocks", "07_translation", "08_decoder_language_model"]
NOTEBOOK_TIMEOUT = 300  # seconds, whole notebook
IMPORT_TORCH = re.compile(r"^\s*(import\s+torch\b|from\s+torch(\.\w+)*\s+import\b)", re.MULTILINE)


def _cells(path: Path) -> list:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def _text(cell_source) -> str:
    return "".join(cell_source) if isinstance(cell_source, list) else cell_source


def test_every_notebook_is_present_and_paired():
    assert [p.stem for p in NOTEBOOKS] == EXPECTED
    assert [p.stem for p in SOURCES] == EXPECTED
    for nb in NOTEBOOKS:
        py_text = nb.with_suffix(".py").read_text(encoding="utf-8")
        assert "format_name: percent" in py_text, f"{nb.with_suffix('.py').name} is not a Jupytext percent file"
        for cell in _cells(nb):
            if cell["cell_type"] == "code":
                src = _text(cell["source"]).strip()
                assert src in py_text, (f"{nb.name} is out of sync with its .py (regenerate with "
                                        f"python notebooks/build.py): a code cell starting {src[:60]!r}")


def test_committed_notebooks_carry_outputs_of_a_clean_run():
    for nb in NOTEBOOKS:
        code = [c for c in _cells(nb) if c["cell_type"] == "code"]
        assert code and all(c.get("outputs") is not None for c in code)
        outputs = [o for c in code for o in c["outputs"]]
        assert any("image/png" in o.get("data", {}) for o in outputs), f"{nb.name}: no figure in the outputs"
        assert not [o for o in outputs if o["output_type"] == "error"], f"{nb.name}: committed with an error"
        counts = [c["execution_count"] for c in code]
        assert counts == list(range(1, len(code) + 1)), f"{nb.name}: not executed top to bottom in one run"


@pytest.mark.parametrize("path", SOURCES + NOTEBOOKS, ids=lambda p: p.name)
def test_no_notebook_imports_torch(path):
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".ipynb":
        text = "\n".join(_text(c["source"]) for c in json.loads(text)["cells"] if c["cell_type"] == "code")
    hits = IMPORT_TORCH.findall(text)
    assert not hits, f"{path.name} imports PyTorch ({hits[0][0]!r}); write `import ctransformer as torch`"
    assert "import ctransformer" in text


STANDS_ALONE = re.compile(r"walkthrough|shared/|seeds?/|seed \d{3}|/work/", re.IGNORECASE)
C_SHOWN = re.compile(r"kernels\.source\(\"(\w+|\w+\.c:\w+)\"\)")


@pytest.mark.parametrize("path", SOURCES + NOTEBOOKS + [NOTEBOOK_DIR / "README.md"], ids=lambda p: p.name)
def test_notebooks_stand_alone(path):
    """No pointer to material a reader does not have (tutorial file numbers, machine paths)."""
    text = path.read_text(encoding="utf-8")
    hits = sorted({m.group(0) for m in STANDS_ALONE.finditer(text)})
    assert not hits, f"{path.name} mentions {hits}: credit the classic tutorials in words instead"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_every_notebook_shows_the_c_of_its_layer(path):
    from ctransformer import kernels
    names = C_SHOWN.findall(path.read_text(encoding="utf-8"))
    assert names, f"{path.name} never shows its C with kernels.source(...)"
    for name in names:
        assert kernels.source(name).startswith("/*"), name  # found, with its comment block
    committed = json.loads(path.with_suffix(".ipynb").read_text(encoding="utf-8"))["cells"]
    shown = [o for c in committed if c["cell_type"] == "code" for o in c.get("outputs", [])
             if "csrc/" in "".join(o.get("data", {}).get("text/html", ""))]
    assert len(shown) >= len(names), f"{path.name}: the committed outputs do not show the C"


def _kernel_env() -> dict:
    import ctransformer
    root = str(Path(ctransformer.__file__).resolve().parent.parent)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env.pop("MPLBACKEND", None)  # the kernel's inline backend
    return env


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path, tmp_path):
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    nbformat = pytest.importorskip("nbformat")

    workdir = tmp_path / "notebooks"
    shutil.copytree(NOTEBOOK_DIR, workdir, ignore=shutil.ignore_patterns("*.ipynb_checkpoints", "__pycache__"))
    nb = nbformat.read(workdir / path.name, as_version=4)
    for cell in nb.cells:  # run from a clean slate, not from the committed outputs
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    client = nbclient.NotebookClient(nb, timeout=NOTEBOOK_TIMEOUT, kernel_name="python3",
                                     resources={"metadata": {"path": str(workdir)}})
    started = time.time()
    client.execute(env=_kernel_env(), cwd=str(workdir))
    elapsed = time.time() - started
    assert elapsed < NOTEBOOK_TIMEOUT, f"{path.name} took {elapsed:.0f} s"

    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        for out in cell.outputs:
            assert out.output_type != "error", f"{path.name} cell {i}: {out.get('ename')}: {out.get('evalue')}"
            text = out.get("text", "") or "".join(str(v) for v in out.get("data", {}).values())
            assert "Traceback" not in text, f"{path.name} cell {i} printed a traceback:\n{text[:2000]}"
