"""English text for character/word-level language models, with nothing to download.

Where the text comes from: the **docstrings of pure-Python modules of the
CPython standard library** that is running this code (the modules listed in
:data:`TEXT_MODULES`).  For each module, in that fixed order, we take the
module docstring, then the docstrings of its public classes, functions and
methods (sorted by name, only objects defined in that module), as
:func:`inspect.getdoc` gives them.  The text is English prose written by the
CPython developers (Python Software Foundation License).

Cleaning: interactive examples (``>>>`` / ``...`` lines and the output
lines that follow them) are dropped; characters outside printable ASCII are
dropped; tabs become spaces; trailing spaces are removed; runs of blank lines
become one blank line; documents are separated by one blank line.

Determinism: for a given CPython version the text is identical on every run
(no randomness, sorted traversal); different CPython versions have slightly
different docstrings.  Under ``python -OO`` docstrings are stripped, and
:func:`load_text_corpus` raises RuntimeError.
"""
from __future__ import annotations

import importlib
import inspect
import re
import sys
import warnings
from functools import lru_cache
from typing import Iterator, List, Optional, Tuple

#: Standard-library modules whose docstrings make up the corpus (pure Python,
#: present in every CPython >= 3.9, importable without side effects).
TEXT_MODULES: Tuple[str, ...] = (
    "textwrap", "string", "difflib", "fractions", "statistics", "calendar", "argparse", "functools",
    "collections", "contextlib", "dataclasses", "enum", "pathlib", "shlex", "queue", "random", "json",
    "csv", "configparser", "logging", "ipaddress", "heapq", "bisect", "abc", "copy", "pprint",
    "tempfile", "shutil", "fnmatch", "glob", "gettext", "locale", "base64", "html", "urllib.parse",
    "email.message", "http.client", "http.server", "socketserver", "threading", "subprocess",
    "zipfile", "tarfile", "gzip", "uuid", "datetime", "decimal", "numbers", "operator", "typing",
    "inspect", "ast", "dis", "pdb", "doctest", "unittest.case", "timeit", "trace", "tokenize",
    "sched", "selectors", "smtplib", "ftplib", "imaplib", "mailbox", "wave", "colorsys", "mimetypes",
    "netrc", "plistlib", "quopri", "filecmp", "fileinput", "linecache", "traceback", "warnings",
    "weakref", "reprlib", "graphlib", "codecs", "pickle", "shelve", "sqlite3.dbapi2",
)

_PROMPT = re.compile(r"^\s*(>>>|\.\.\.)( |$)")


def _strip_examples(doc: str) -> str:
    """Drop interactive examples: prompt lines and the output lines after
    them, up to the next blank line."""
    out: List[str] = []
    in_example = False
    for line in doc.splitlines():
        if _PROMPT.match(line):
            in_example = True
            continue
        if in_example and line.strip():
            continue
        in_example = False
        out.append(line)
    return "\n".join(out)


def _clean(doc: str) -> str:
    doc = _strip_examples(doc.replace("\t", "    "))
    doc = "".join(ch for ch in doc if ch == "\n" or " " <= ch <= "~")
    doc = "\n".join(line.rstrip() for line in doc.splitlines())
    doc = re.sub(r"\n{3,}", "\n\n", doc)
    return doc.strip("\n")


def _members(module) -> Iterator[object]:
    """Public classes and functions defined in ``module`` (sorted by name),
    each class followed by its public methods (sorted by name)."""
    for name in sorted(vars(module)):
        obj = vars(module)[name]
        if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
            continue
        if inspect.isclass(obj):
            yield obj
            for attr in sorted(vars(obj)):
                member = vars(obj)[attr]
                if not attr.startswith("_") and inspect.isfunction(member):
                    yield member
        elif inspect.isfunction(obj):
            yield obj


def _docstrings(module_name: str) -> Iterator[str]:
    try:
        module = importlib.import_module(module_name)
    except ImportError:       # e.g. a CPython built without sqlite3
        return
    with warnings.catch_warnings():     # e.g. typing.io warns when its docstring is read
        warnings.simplefilter("ignore", DeprecationWarning)
        docs = [obj.__doc__ if obj is module else inspect.getdoc(obj) for obj in [module, *_members(module)]]
    for doc in docs:
        if isinstance(doc, str):
            doc = _clean(inspect.cleandoc(doc))
            if doc:
                yield doc


@lru_cache(maxsize=1)
def _full_corpus() -> str:
    seen = set()
    docs = []
    for module_name in TEXT_MODULES:
        for doc in _docstrings(module_name):
            if doc not in seen:            # inherited / aliased docstrings only once
                seen.add(doc)
                docs.append(doc)
    return "\n\n".join(docs) + "\n"


def load_text_corpus(max_chars: Optional[int] = None) -> str:
    """English prose from the standard library's docstrings (see the module
    docstring for the exact source and cleaning).

    Returns the first ``max_chars`` characters (all of it if None: about
    470,000 characters, 72,000 words on CPython 3.11).  Only printable ASCII and newlines occur.
    Raises RuntimeError under ``python -OO`` (docstrings stripped).
    """
    if max_chars is not None and (isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 0):
        raise ValueError(f"load_text_corpus: max_chars must be a non-negative int or None, got {max_chars!r}")
    if sys.flags.optimize >= 2:
        raise RuntimeError("load_text_corpus: docstrings are stripped under python -OO; run without -OO")
    text = _full_corpus()
    return text if max_chars is None else text[:max_chars]
