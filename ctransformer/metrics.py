"""Evaluation metrics: BLEU as sacreBLEU computes it, and exact match.

:func:`corpus_bleu` reproduces ``sacrebleu.corpus_bleu`` (sacreBLEU 2.x,
default signature ``nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp``) in plain
Python, with no dependency:

1. tokenisation ``13a`` (mteval-v13a, the WMT standard), ``char`` or ``none``;
2. per sentence: n-gram counts (n = 1..4) of the hypothesis, matches clipped
   by the maximum count of that n-gram in any reference, and the reference
   length closest to the hypothesis length (ties -> the shorter one);
3. corpus sums of matches, n-gram totals, hypothesis and reference lengths;
4. BLEU = BP * exp(mean log p_n) * 100 with brevity penalty
   BP = exp(1 - ref_len / hyp_len) if hyp_len < ref_len else 1, and for a
   zero match count the ``exp`` smoothing (mteval's): the k-th order with no
   match gets precision 1 / (2^k * total_n).

References: ``references[i]`` are the reference(s) of ``hypotheses[i]``,
either one string or a list of strings (possibly different numbers per
sentence).  NOTE sacreBLEU's own API takes reference *streams* instead
(``[[ref1 of sent 1, ref1 of sent 2, ...], [ref2 of sent 1, ...]]``); convert
with ``[list(refs) for refs in zip(*streams)]``.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from typing import List, Sequence, Tuple, Union

References = Union[Sequence[str], Sequence[Sequence[str]]]
MAX_ORDER = 4
_SMOOTH_DEFAULTS = {"none": None, "floor": 0.1, "add-k": 1, "exp": None}

# mteval-v13a's language-dependent rules, applied in this order
_13A_RULES = [
    # split most ASCII punctuation: {|}~ [\]^_` space!"#$%& ()*+ :;<=>?@ /
    (re.compile(r"([\{-\~\[-\` -\&\(-\+\:-\@\/])"), r" \1 "),
    (re.compile(r"([^0-9])([\.,])"), r"\1 \2 "),   # period/comma not preceded by a digit
    (re.compile(r"([\.,])([^0-9])"), r" \1 \2"),   # period/comma not followed by a digit
    (re.compile(r"([0-9])(-)"), r"\1 \2 "),        # dash preceded by a digit
]


def tokenize_13a(line: str) -> str:
    """mteval-v13a tokenisation (sacreBLEU's default), tokens joined by spaces."""
    line = line.replace("<skipped>", "").replace("-\n", "").replace("\n", " ")
    if "&" in line:
        line = line.replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">")
    line = f" {line} "
    for pattern, repl in _13A_RULES:
        line = pattern.sub(repl, line)
    return " ".join(line.split())


_TOKENIZERS = {"13a": tokenize_13a, "char": lambda line: " ".join(line), "none": lambda line: line}


def _ngrams(tokens: List[str]) -> Counter:
    return Counter(tuple(tokens[i:i + n]) for n in range(1, MAX_ORDER + 1) for i in range(len(tokens) - n + 1))


def _closest_ref_len(hyp_len: int, ref_lens: List[int]) -> int:
    return min(ref_lens, key=lambda r: (abs(hyp_len - r), r))


def _as_ref_lists(hypotheses, references, where: str) -> List[List[str]]:
    if isinstance(hypotheses, str) or isinstance(references, str):
        raise TypeError(f"{where}: hypotheses and references must be lists, got a str")
    if len(hypotheses) != len(references):
        raise ValueError(f"{where}: references must have one entry per hypothesis "
                         f"({len(hypotheses)}), got {len(references)}")
    out = []
    for i, refs in enumerate(references):
        refs = [refs] if isinstance(refs, str) else [r for r in refs if r is not None]
        if not refs or not all(isinstance(r, str) for r in refs):
            raise TypeError(f"{where}: references[{i}] must be a str or a non-empty list of str, got {refs!r}")
        out.append(refs)
    for i, hyp in enumerate(hypotheses):
        if not isinstance(hyp, str):
            raise TypeError(f"{where}: hypotheses[{i}] must be a str, got {type(hyp).__name__}")
    return out


def _check_options(tokenize: str, smooth: str, where: str) -> None:
    if tokenize not in _TOKENIZERS:
        raise ValueError(f"{where}: tokenize must be one of {sorted(_TOKENIZERS)}, got {tokenize!r}")
    if smooth not in _SMOOTH_DEFAULTS:
        raise ValueError(f"{where}: smooth must be one of {sorted(_SMOOTH_DEFAULTS)}, got {smooth!r}")


def bleu_statistics(hypotheses: Sequence[str], references: References, tokenize: str = "13a",
                    lowercase: bool = False) -> Tuple[List[int], List[int], int, int]:
    """Corpus sufficient statistics: (matches per order (4), n-gram totals
    per order (4), hypothesis length, reference length)."""
    return _statistics(hypotheses, references, tokenize, lowercase, "bleu_statistics")


def _statistics(hypotheses, references, tokenize: str, lowercase: bool, where: str):
    _check_options(tokenize, "exp", where)
    refs_per_sent = _as_ref_lists(hypotheses, references, where)
    tok = _TOKENIZERS[tokenize]

    def prep(line: str) -> List[str]:
        return tok((line.lower() if lowercase else line).rstrip()).split()

    correct, total = [0] * MAX_ORDER, [0] * MAX_ORDER
    sys_len = ref_len = 0
    for hyp, refs in zip(hypotheses, refs_per_sent):
        hyp_tokens = prep(hyp)
        ref_counts: Counter = Counter()
        ref_lens = []
        for ref in refs:
            ref_tokens = prep(ref)
            ref_lens.append(len(ref_tokens))
            for gram, n in _ngrams(ref_tokens).items():
                ref_counts[gram] = max(ref_counts[gram], n)
        for gram, n in _ngrams(hyp_tokens).items():
            total[len(gram) - 1] += n
            correct[len(gram) - 1] += min(n, ref_counts.get(gram, 0))
        sys_len += len(hyp_tokens)
        ref_len += _closest_ref_len(len(hyp_tokens), ref_lens)
    return correct, total, sys_len, ref_len


def bleu_from_statistics(correct: Sequence[int], total: Sequence[int], sys_len: int, ref_len: int,
                         smooth: str = "exp", smooth_value=None, effective_order: bool = False) -> float:
    """BLEU (0..100) from :func:`bleu_statistics`, as sacreBLEU's
    ``BLEU.compute_bleu``.  ``effective_order`` averages only over the orders
    up to the longest with any n-gram (sacreBLEU's sentence-level default)."""
    _check_options("13a", smooth, "bleu_from_statistics")
    if smooth_value is None:
        smooth_value = _SMOOTH_DEFAULTS[smooth]
    correct, total = list(correct), list(total)
    bp = 1.0
    if sys_len < ref_len:
        bp = math.exp(1 - ref_len / sys_len) if sys_len > 0 else 0.0
    if not any(correct):
        return 0.0
    precisions = [0.0] * MAX_ORDER
    exp_factor = 1.0
    orders = MAX_ORDER
    for n in range(1, MAX_ORDER + 1):
        if smooth == "add-k" and n > 1:
            correct[n - 1] += smooth_value
            total[n - 1] += smooth_value
        if total[n - 1] == 0:
            break
        if effective_order:
            orders = n
        if correct[n - 1] == 0:
            if smooth == "exp":
                exp_factor *= 2
                precisions[n - 1] = 100.0 / (exp_factor * total[n - 1])
            elif smooth == "floor":
                precisions[n - 1] = 100.0 * smooth_value / total[n - 1]
        else:
            precisions[n - 1] = 100.0 * correct[n - 1] / total[n - 1]
    # a zero precision counts as log 0 = -9999999999 in sacreBLEU -> score 0
    log_sum = sum(math.log(p) if p > 0 else -9999999999.0 for p in precisions[:orders])
    return bp * math.exp(log_sum / orders)


def corpus_bleu(hypotheses: Sequence[str], references: References, tokenize: str = "13a",
                smooth: str = "exp", lowercase: bool = False) -> float:
    """Corpus BLEU in 0..100, equal to ``sacrebleu.corpus_bleu(hypotheses,
    streams).score`` (default options).  ``references[i]`` is the reference
    string of ``hypotheses[i]`` or a list of them (see the module docstring
    for sacreBLEU's stream layout).  Hypotheses must be detokenised text.
    ``smooth``: "exp" (default), "none", "floor" (0.1) or "add-k" (1)."""
    _check_options(tokenize, smooth, "corpus_bleu")
    stats = _statistics(hypotheses, references, tokenize, lowercase, "corpus_bleu")
    return bleu_from_statistics(*stats, smooth=smooth)


def sentence_bleu(hypothesis: str, references: Union[str, Sequence[str]], tokenize: str = "13a",
                  smooth: str = "exp", lowercase: bool = False) -> float:
    """Sentence BLEU in 0..100, equal to ``sacrebleu.sentence_bleu(hypothesis,
    refs).score``: exp smoothing and effective order (orders longer than the
    hypothesis are left out of the mean)."""
    _check_options(tokenize, smooth, "sentence_bleu")
    if not isinstance(hypothesis, str):
        raise TypeError(f"sentence_bleu: hypothesis must be a str, got {type(hypothesis).__name__}")
    refs = [references] if isinstance(references, str) else list(references)
    stats = _statistics([hypothesis], [refs], tokenize, lowercase, "sentence_bleu")
    return bleu_from_statistics(*stats, smooth=smooth, effective_order=True)


def exact_match(hypotheses: Sequence[str], references: References, normalize: bool = True) -> float:
    """Fraction (0..1) of hypotheses equal to their reference (or to any of
    their references).  ``normalize`` compares after collapsing whitespace
    runs and stripping the ends.  An empty list gives 0.0."""
    refs_per_sent = _as_ref_lists(hypotheses, references, "exact_match")
    if not hypotheses:
        return 0.0

    def norm(s: str) -> str:
        return " ".join(s.split()) if normalize else s

    hits = sum(norm(h) in {norm(r) for r in refs} for h, refs in zip(hypotheses, refs_per_sent))
    return hits / len(hypotheses)
