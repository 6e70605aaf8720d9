"""What a new user meets first: importing a source tree that has no built
extension explains itself, the package imports from the checkout root once
built, and the README's commands are the ones CI runs."""
import os
import re
import shutil
import subprocess
import sys

import ctransformer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(ctransformer.__file__)))


def test_unbuilt_source_tree_says_what_to_do(tmp_path):
    source = os.path.dirname(os.path.abspath(ctransformer.__file__))
    shutil.copytree(source, tmp_path / "ctransformer",
                    ignore=shutil.ignore_patterns("_C.*", "_libs", "__pycache__", "_csrc"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([sys.executable, "-c", "import ctransformer"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: ctransformer's C extension (ctransformer._C) is not built"), r.stderr
    assert "pip install ." in last and "circular" not in r.stderr


def test_python_dash_m_from_the_package_parent():
    """`python -m ctransformer` run where the package folder is (the clone
    root after the README's install) imports that folder and works."""
    r = subprocess.run([sys.executable, "-m", "ctransformer", "--version"], cwd=PACKAGE_PARENT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert ctransformer.__version__ in r.stdout


def test_ci_runs_the_readme_commands_verbatim():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    commands = re.findall(r"^python3 -m venv \.venv .*$", readme, flags=re.M)
    assert any(c.endswith("python -m ctransformer demo") for c in commands), commands
    assert any(c.endswith("pytest") for c in commands), commands
    with open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8") as f:
        ci = f.read()
    assert 'readme_command "python -m ctransformer demo"' in ci and 'readme_command "pytest"' in ci
    assert "cd /" not in ci.replace('cd "$(dirname "$0")/.."', "")
