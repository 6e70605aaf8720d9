"""Regenerate the teaching notebooks: Jupytext .py (the source of truth) ->
.ipynb, executed top to bottom so the committed .ipynb carries real outputs.

    python notebooks/build.py                 # all notebooks
    python notebooks/build.py 03 05           # the ones whose name starts with 03 / 05
    python notebooks/build.py --no-execute    # only re-pair .py -> .ipynb (no outputs)

Needs jupytext, nbclient and ipykernel (``pip install -e ".[notebooks,test]"``).
The kernel imports the same ``ctransformer`` as this script does.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
try:
    import ctransformer  # noqa: F401
except ImportError:  # an in-place build of this checkout
    sys.path.insert(0, str(HERE.parent))


def kernel_env() -> dict:
    """Environment for the kernel: PYTHONPATH led by the directory holding the
    ctransformer this interpreter imports (an in-place build or an install)."""
    import ctransformer
    root = str(Path(ctransformer.__file__).resolve().parent.parent)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    return env


def build(py_file: Path, execute: bool = True, timeout: int = 600) -> float:
    import jupytext
    nb = jupytext.read(py_file)
    nb.metadata.setdefault("kernelspec", {"name": "python3", "display_name": "Python 3", "language": "python"})
    started = time.time()
    try:
        if execute:
            from nbclient import NotebookClient
            client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                                    resources={"metadata": {"path": str(HERE)}})
            client.execute(env=kernel_env(), cwd=str(HERE))
    finally:  # written even when a cell fails, so the error can be read in place
        jupytext.write(nb, py_file.with_suffix(".ipynb"), fmt="ipynb")
    return time.time() - started


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("prefixes", nargs="*", help="build only notebooks whose file name starts with one of these")
    p.add_argument("--no-execute", action="store_true", help="write .ipynb without running them")
    args = p.parse_args(argv)
    files = sorted(HERE.glob("[0-9][0-9]_*.py"))
    if args.prefixes:
        files = [f for f in files if any(f.name.startswith(x) for x in args.prefixes)]
    failed = 0
    for f in files:
        try:
            seconds = build(f, execute=not args.no_execute)
        except Exception as err:  # nbclient.exceptions.CellExecutionError and kernel failures
            failed += 1
            last = str(err).strip().splitlines()[-1:] or [type(err).__name__]
            print(f"{f.name}: FAILED: {last[0]}", flush=True)
            continue
        print(f"{f.name}: {seconds:.1f} s", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
