"""Streaming reader for the translation2019zh JSON-lines format.

translation2019zh (the corpus of the classic Chinese -> English Transformer
tutorial, about 5.2 million pairs, 1.2 GB) stores one JSON object per line::

    {"english": "Tomorrow is another day.", "chinese": "明天又是新的一天。"}

:class:`TranslationJsonl` reads such a file lazily, one line at a time (it
never holds the file in memory, unlike the tutorial's ``f.read()``), and
yields ``(chinese, english)`` tuples, the same order as
:func:`ctransformer.data.make_translation_corpus`.  Files ending in ``.gz`` are
decompressed on the fly.

A *malformed* line is one that is not valid UTF-8, not valid JSON, not a JSON
object, or lacks either key, or whose values are not strings.  Blank lines
are not records and are ignored in both modes.  With ``on_error="skip"``
(default) malformed lines are counted (``.skipped``, with their line numbers
in ``.skipped_lines``, the first 1000 of them) and one RuntimeWarning
summarises them when iteration reaches the end of the file; with
``on_error="raise"`` the first one raises ValueError naming the file and
the 1-based line number.
"""
from __future__ import annotations

import gzip
import json
import os
import warnings
from typing import IO, Iterator, List, Tuple, Union

PathLike = Union[str, "os.PathLike[str]"]
_MAX_RECORDED = 1000


class TranslationJsonl:
    """Iterable over the (chinese, english) pairs of a JSONL file.

    Each ``iter()`` re-reads the file from the start and resets the
    counters.  Attributes after (or during) iteration: ``skipped`` (number of
    malformed lines so far), ``skipped_lines`` (their 1-based line numbers,
    first 1000), ``n_read`` (pairs yielded).
    """

    def __init__(self, path: PathLike, on_error: str = "skip", src_key: str = "chinese",
                 tgt_key: str = "english", strip: bool = True):
        if on_error not in ("skip", "raise"):
            raise ValueError(f"TranslationJsonl: on_error must be 'skip' or 'raise', got {on_error!r}")
        self.path = os.fspath(path)
        self.on_error = on_error
        self.src_key, self.tgt_key = src_key, tgt_key
        self.strip = strip
        self.skipped = 0
        self.skipped_lines: List[int] = []
        self.n_read = 0

    def _open(self) -> IO[bytes]:
        if self.path.endswith(".gz"):
            return gzip.open(self.path, "rb")
        return open(self.path, "rb")

    def _parse(self, raw: bytes, lineno: int) -> Tuple[str, str]:
        """One line -> (src, tgt); raises ValueError describing the problem."""
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise ValueError(f"not valid UTF-8 ({err.reason} at byte {err.start})") from None
        if lineno == 1:
            text = text.lstrip("\ufeff")       # byte-order mark
        try:
            record = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"not valid JSON ({err.msg} at column {err.colno})") from None
        if not isinstance(record, dict):
            raise ValueError(f"must be a JSON object, got {type(record).__name__}")
        values = []
        for key in (self.src_key, self.tgt_key):
            if key not in record:
                raise ValueError(f"missing key {key!r}")
            if not isinstance(record[key], str):
                raise ValueError(f"{key!r} must be a string, got {type(record[key]).__name__}")
            values.append(record[key].strip() if self.strip else record[key])
        return values[0], values[1]

    def __iter__(self) -> Iterator[Tuple[str, str]]:
        self.skipped, self.skipped_lines, self.n_read = 0, [], 0
        with self._open() as stream:
            for lineno, raw in enumerate(stream, start=1):
                if not raw.strip():
                    continue
                try:
                    pair = self._parse(raw, lineno)
                except ValueError as err:
                    if self.on_error == "raise":
                        raise ValueError(f"{self.path}: line {lineno}: {err}") from None
                    self.skipped += 1
                    if len(self.skipped_lines) < _MAX_RECORDED:
                        self.skipped_lines.append(lineno)
                    continue
                self.n_read += 1
                yield pair
        if self.skipped:
            warnings.warn(f"{self.path}: skipped {self.skipped} malformed line(s) "
                          f"(first at line {self.skipped_lines[0]}); read {self.n_read} pair(s)",
                          RuntimeWarning, stacklevel=2)


def read_translation_jsonl(path: PathLike, on_error: str = "skip", src_key: str = "chinese",
                           tgt_key: str = "english") -> TranslationJsonl:
    """Lazy iterable of (chinese, english) pairs of a translation2019zh-style
    JSONL file; see :class:`TranslationJsonl` (``.skipped`` counts malformed
    lines)."""
    return TranslationJsonl(path, on_error=on_error, src_key=src_key, tgt_key=tgt_key)
