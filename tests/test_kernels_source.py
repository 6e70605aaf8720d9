"""ctransformer.kernels.source(name): the C text of a kernel, read from the
installed package's _csrc/ (or the checkout's csrc/), comment block first."""
import re

import pytest

from ctransformer import kernels
from ctransformer.kernels.source import ALIASES, KernelSource, names, source_dir

SRC_DIR = source_dir()
C_NAME = re.compile(r"(?:FN\((\w+)\)|\b(\w+))\s*\(")


def _kernel_names():
    return sorted(n for n in kernels.__all__ if n.endswith(("_forward", "_backward")))


def test_layernorm_backward_is_the_whole_definition_with_its_comment():
    text = kernels.source("layernorm_backward")
    assert isinstance(text, str) and isinstance(text, KernelSource)
    assert text.startswith("/* layernorm_backward")
    assert "int FN(layernorm_backward)(real *dinp" in text
    assert text.rstrip().endswith("}") and text.count("{") == text.count("}")
    file_text = (SRC_DIR / "layernorm.c").read_text(encoding="utf-8")
    assert text in file_text  # verbatim
    lines = file_text.splitlines()
    assert lines[text.first_line - 1].startswith("/* layernorm_backward")
    assert lines[text.last_line - 1] == "}"
    assert text.path == "csrc/layernorm.c" and text.name == "layernorm_backward"
    assert "layernorm_forward" not in text.split("int FN(layernorm_backward)")[1]  # stops at its own end


def test_forward_kernels_and_helpers():
    forward = kernels.source("linear_forward")
    assert forward.startswith("/* linear_forward") and "GEMM_BIAS(" in forward and forward.path == "csrc/linear.c"
    helper = kernels.source("row_moments")
    assert helper.startswith("/* Mean and biased variance") and "FN(row_moments)" in helper
    assert kernels.source("layernorm.c:row_moments") == helper
    whole = kernels.source("ct_template.h")
    assert whole == (SRC_DIR / "ct_template.h").read_text(encoding="utf-8")


def test_every_c_kernel_exported_by_kernels_is_found():
    for name in _kernel_names():
        text = kernels.source(name)
        c_name = ALIASES.get(name, name)
        assert text.name == c_name
        defined = {a or b for a, b in C_NAME.findall(text.split("{", 1)[0])}
        assert c_name in defined, f"{name}: the text does not define {c_name}:\n{text[:400]}"
        assert text.count("{") == text.count("}"), name
        if name in ALIASES:
            assert f"{name} runs the C kernel {c_name}" in text.caption


def test_every_c_definition_is_indexed():
    """Each `FN(name)(...)` or `type name(...)` followed by a body in csrc/*.c is found."""
    definition = re.compile(r"(?:FN\((\w+)\)|\b(\w+))\((?:[^()]|\([^()]*\))*\)[ \t]*\n\{")
    found = set(names())
    checked = 0
    for path in SRC_DIR.glob("*.c"):
        for a, b in definition.findall(path.read_text(encoding="utf-8")):
            if (a or b) in ("if", "for", "while", "switch"):
                continue
            assert (a or b) in found, f"{path.name}: {a or b} not indexed"
            checked += 1
    assert checked > 50


def test_unknown_names_raise_with_close_matches():
    with pytest.raises(ValueError, match=r"no C function named 'layrnorm_backward'.*close matches: layernorm_backward"):
        kernels.source("layrnorm_backward")
    with pytest.raises(ValueError, match="no C function named 'no_such_kernel_at_all'"):
        kernels.source("no_such_kernel_at_all")
    with pytest.raises(ValueError, match=r"several files.*'crossentropy.c:row_backward'.*'recurrent.c:row_backward'"):
        kernels.source("row_backward")
    with pytest.raises(TypeError):
        kernels.source(3)


def test_jupyter_rendering():
    text = kernels.source("dropout_forward")
    page = text._repr_html_()
    assert "csrc/dropout.c, lines " in page and "dropout_forward" in page
    try:
        import pygments  # noqa: F401
    except ImportError:
        assert "<pre>" in page
    else:
        assert "<span" in page  # highlighted
    assert text._repr_markdown_().endswith(f"```c\n{text}\n```")


def test_reads_the_installed_copy_first(tmp_path, monkeypatch):
    """An installed package has its C in ctransformer/_csrc/: that copy wins over a checkout."""
    import importlib
    module = importlib.import_module("ctransformer.kernels.source")  # the module (kernels.source is the function)
    package = tmp_path / "ctransformer"
    (package / "_csrc").mkdir(parents=True)
    (package / "_csrc" / "tiny.c").write_text("/* tiny_forward: doubles x */\nvoid FN(tiny_forward)(real *x)\n{\n"
                                              "    *x *= 2;\n}\n", encoding="utf-8")
    monkeypatch.setattr(module, "_PACKAGE", package)
    assert module.source_dir() == package / "_csrc"
    text = module.source("tiny_forward")
    assert text.startswith("/* tiny_forward") and text.endswith("}") and (text.first_line, text.last_line) == (1, 5)
    (package / "_csrc" / "tiny.c").unlink()
    with pytest.raises(FileNotFoundError, match="reinstall"):
        module.source_dir()
