"""``ctransformer.kernels.source(name)``: the C text of a kernel, as it was compiled.

    >>> from ctransformer import kernels
    >>> print(kernels.source("layernorm_backward"))      # the comment block, then the whole definition
    >>> kernels.source("layernorm_backward")             # in Jupyter: syntax-highlighted, with file and lines

The C files are read from the installed package (``ctransformer/_csrc/``,
copied there by the build), or, in a source checkout, from ``csrc/`` beside
the package.  Each maths file is a template compiled twice, for float32 and
float64: ``FN(layernorm_backward)`` defines ``layernorm_backward_f32`` and
``layernorm_backward_f64``, with ``real`` standing for ``float`` / ``double``
(see ``csrc/ct_template.h``, shown by ``source("ct_template.h")``).
Helpers are found too (``source("row_moments")``); a name defined in two files
is asked for as ``"file.c:name"``.
"""
from __future__ import annotations

import difflib
import html
import re
from functools import lru_cache
from pathlib import Path
from typing import Dict, List, Optional, Tuple

__all__ = ["source", "KernelSource"]

_PACKAGE = Path(__file__).resolve().parent.parent

# Python-level kernels that are compositions over another C kernel: what actually runs.
ALIASES = {
    "matmul_forward": "bmm_forward",          # batched broadcasting over bmm
    "matmul_backward": "bmm_backward",
    "rnn_cell_forward": "rnn_forward",        # one step: the same kernel with T = 1
    "rnn_cell_backward": "rnn_backward",
    "rnn_stack_forward": "rnn_forward",       # layer by layer in Python
    "rnn_stack_backward": "rnn_backward",
}

_TEMPLATE_NOTE = "one template for float32 and float64: FN(name) becomes name_f32 / name_f64, real float / double"


class KernelSource(str):
    """The C text of one function (a ``str``), plus where it comes from:
    ``name``, ``path`` (``csrc/<file>.c``), ``first_line``, ``last_line``.
    Jupyter shows it syntax-highlighted (pygments when installed)."""

    name: str
    path: str
    first_line: int
    last_line: int
    note: str

    def __new__(cls, text: str, name: str, path: str, first_line: int, last_line: int, note: str = ""):
        obj = super().__new__(cls, text)
        obj.name, obj.path, obj.first_line, obj.last_line, obj.note = name, path, first_line, last_line, note
        return obj

    @property
    def caption(self) -> str:
        where = f"{self.path}, lines {self.first_line}-{self.last_line}"
        return f"{where}; {self.note}" if self.note else where

    def _repr_html_(self) -> str:
        caption = f'<div style="font-size:85%;opacity:0.75;margin-bottom:2px">{html.escape(self.caption)}</div>'
        try:
            from pygments import highlight
            from pygments.formatters import HtmlFormatter
            from pygments.lexers import CLexer
        except ImportError:
            return caption + f"<pre>{html.escape(str(self))}</pre>"
        body = highlight(str(self), CLexer(), HtmlFormatter(noclasses=True, nobackground=False))
        return caption + body

    def _repr_markdown_(self) -> str:
        return f"*{self.caption}*\n\n```c\n{self}\n```"

    def _repr_pretty_(self, printer, cycle) -> None:  # IPython's plain-text display: the C itself
        printer.text(f"// {self.caption}\n{self}")


def source_dir() -> Path:
    """Where the C sources are read from: the installed copy, else the checkout's csrc/."""
    for candidate in (_PACKAGE / "_csrc", _PACKAGE.parent / "csrc"):
        if candidate.is_dir() and any(candidate.glob("*.c")):
            return candidate
    raise FileNotFoundError(
        f"the C sources are not in this installation ({_PACKAGE / '_csrc'} is missing, and there is no csrc/ "
        f"beside {_PACKAGE}); reinstall ctransformer")


def _mask(text: str) -> str:
    """``text`` with comments, string/char literals and preprocessor lines
    blanked (same length, newlines kept), so braces can be counted."""
    out = list(text)
    i, n = 0, len(text)
    line_start = True

    def blank(a: int, b: int) -> None:
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        ch = text[i]
        if line_start and ch in " \t":
            i += 1
            continue
        if line_start and ch == "#":  # a directive, with its continuation lines
            j = i
            while j < n:
                end = text.find("\n", j)
                end = n if end < 0 else end
                if end > j and text[end - 1] == "\\":
                    j = end + 1
                    continue
                j = end
                break
            blank(i, j)
            i = j
            continue
        line_start = False
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            blank(i, j)
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            blank(i, j)
            i = j
        elif ch in "\"'":
            j = i + 1
            while j < n and text[j] != ch and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            blank(i, j + 1)
            i = j + 1
        else:
            if ch == "\n":
                line_start = True
            i += 1
    return "".join(out)


_NAME_BEFORE_PAREN = re.compile(r"(?:FN\(\s*(\w+)\s*\)|(\w+))\s*$")


def _definitions(text: str) -> List[Tuple[str, int, int]]:
    """(name, start offset, end offset) of every function defined at file
    scope in ``text``: from its leading comment block to its closing brace."""
    masked = _mask(text)
    found = []
    depth, i, n = 0, 0, len(masked)
    while i < n:
        ch = masked[i]
        if ch == "{":
            if depth == 0:
                head = masked[:i].rstrip()
                if head.endswith(")"):
                    definition = _function_head(text, masked, head)
                    if definition is not None:
                        name, start = definition
                        end = _matching_brace(masked, i)
                        found.append((name, start, end))
                        i = end
                        continue
            depth += 1
        elif ch == "}":
            depth = max(0, depth - 1)
        i += 1
    return found


def _function_head(text: str, masked: str, head: str) -> Optional[Tuple[str, int]]:
    # the parameter list: back from its ')' to the matching '('
    j, level = len(head) - 1, 0
    while j >= 0:
        if head[j] == ")":
            level += 1
        elif head[j] == "(":
            level -= 1
            if level == 0:
                break
        j -= 1
    if j < 0:
        return None
    before = head[:j]
    match = _NAME_BEFORE_PAREN.search(before)
    if match is None:
        return None
    name = match.group(1) or match.group(2)
    if name in ("if", "for", "while", "switch", "return", "sizeof"):
        return None
    # the declaration's first line: up while the lines above hold code that does not end a statement
    start = masked.rfind("\n", 0, match.start()) + 1
    while start > 0:
        prev_start = masked.rfind("\n", 0, start - 1) + 1
        prev = masked[prev_start:start - 1].strip()
        if not prev or prev.endswith((";", "}", "{")):
            break
        start = prev_start
    return name, _with_comment(text, start)


def _with_comment(text: str, start: int) -> int:
    """Move ``start`` (a line start) up over the comment block that ends on the line just above."""
    if start == 0:
        return start
    above_start = text.rfind("\n", 0, start - 1) + 1
    above = text[above_start:start - 1].strip()
    if above.endswith("*/"):
        opening = text.rfind("/*", 0, start)
        return text.rfind("\n", 0, opening) + 1 if opening >= 0 else start
    while above.startswith("//"):
        start = above_start
        if start == 0:
            break
        above_start = text.rfind("\n", 0, start - 1) + 1
        above = text[above_start:start - 1].strip()
    return start


def _matching_brace(masked: str, open_at: int) -> int:
    depth = 0
    for j in range(open_at, len(masked)):
        if masked[j] == "{":
            depth += 1
        elif masked[j] == "}":
            depth -= 1
            if depth == 0:
                return j + 1
    return len(masked)


@lru_cache(maxsize=4)
def _index(directory: str) -> Dict[str, List[KernelSource]]:
    index: Dict[str, List[KernelSource]] = {}
    for path in sorted(Path(directory).glob("*.c")):
        text = path.read_text(encoding="utf-8")
        note = _TEMPLATE_NOTE if "ct_template.h" in text else ""
        spans: Dict[str, Tuple[int, int]] = {}
        for name, start, end in _definitions(text):
            # a name defined twice in one file is two branches of an #if: show the whole region
            first_start = spans.get(name, (start, end))[0]
            spans[name] = (first_start, end)
        for name, (start, end) in spans.items():
            first = text.count("\n", 0, start) + 1
            last = text.count("\n", 0, end) + 1
            entry = KernelSource(text[start:end], name, f"csrc/{path.name}", first, last, note)
            index.setdefault(name, []).append(entry)
    return index


def names() -> List[str]:
    """Every C function that :func:`source` can show."""
    return sorted(_index(str(source_dir())))


def source(name: str) -> KernelSource:
    """The C definition of ``name`` (e.g. ``"layernorm_backward"``): the
    comment block above it, then the whole function, as a :class:`KernelSource`
    (a ``str``).  ``"file.c:name"`` picks a file; a ``*.h`` or ``*.c`` file name
    returns the whole file.  Python kernels that run another C kernel
    (``matmul_forward`` -> ``bmm_forward``) return that kernel.  An unknown name
    raises ValueError with the closest names."""
    if not isinstance(name, str):
        raise TypeError(f"source: name must be a str, got {type(name).__name__}")
    directory = source_dir()
    if name.endswith((".c", ".h")) and "/" not in name and (directory / name).is_file():
        text = (directory / name).read_text(encoding="utf-8")
        return KernelSource(text, name, f"csrc/{name}", 1, text.count("\n") + (not text.endswith("\n")))
    index = _index(str(directory))
    wanted_file, _, short = name.rpartition(":")
    short = short.strip()
    note = ""
    if short not in index and short in ALIASES:
        note = f"{short} runs the C kernel {ALIASES[short]}"
        short = ALIASES[short]
    entries = index.get(short, [])
    if wanted_file:
        entries = [e for e in entries if e.path.rsplit("/", 1)[-1] in (wanted_file, wanted_file + ".c")]
    if len(entries) == 1:
        entry = entries[0]
        if note:
            return KernelSource(str(entry), entry.name, entry.path, entry.first_line, entry.last_line,
                                note + ("; " + entry.note if entry.note else ""))
        return entry
    if len(entries) > 1:
        choices = ", ".join(f"'{e.path.rsplit('/', 1)[-1]}:{short}'" for e in entries)
        raise ValueError(f"source: {short!r} is defined in several files; ask for one of {choices}")
    close = difflib.get_close_matches(short, list(index) + list(ALIASES), n=6, cutoff=0.5)
    hint = f"; close matches: {', '.join(close)}" if close else ""
    raise ValueError(f"source: no C function named {name!r} in {directory}{hint}")
