"""Decoding: greedy and beam search for :class:`ctransformer.models.TranslationTransformer`,
sampling for :class:`ctransformer.models.DecoderLM`.

With ``use_cache=True`` (the default) each step feeds one token through the
model's ``decode_step``: self-attention keys/values are appended to a KV
cache, cross-attention keys/values are computed once per source.  With
``use_cache=False`` every step re-runs the decoder over the whole prefix
(the textbook loop); both give the same tokens.

Sequences are returned as int64 Tensors that start with ``sos_id``
(translation) or the prompt (LM).  A row that emitted ``eos_id`` is
finished: its later positions hold ``pad_id`` (translation; the model's
``pad_id`` by default) and it no longer changes.  Everything runs without
gradients and in eval semantics (the model is put in eval mode for the call
and restored after).
"""
from __future__ import annotations

import contextlib
from typing import Optional

import numpy as np

from .autograd import no_grad
from .kernels import beam_step, log_softmax_forward
from .random import default_generator
from .tensor import Tensor

__all__ = ["greedy_decode", "beam_search", "generate"]


@contextlib.contextmanager
def _eval(model):
    """Eval mode and no_grad for a decoding loop, then every module's own mode
    back: ``model.train(was)`` would push the root's mode down onto submodules
    the caller had set apart (a frozen layer kept in eval while training)."""
    modes = [(module, module.training) for module in model.modules()]
    model.eval()
    try:
        with no_grad():
            yield
    finally:
        for module, training in modes:
            module.training = training


def _log_softmax(x: np.ndarray) -> np.ndarray:
    """log_softmax over the last axis in float64 (the log_softmax kernel of softmax.c)."""
    return log_softmax_forward(np.ascontiguousarray(x, dtype=np.float64))


def _src(src_ids) -> Tensor:
    t = src_ids if isinstance(src_ids, Tensor) else Tensor._wrap(np.asarray(src_ids))
    if t.ndim == 1:
        t = t.unsqueeze(0)
    if t.ndim != 2 or t.dtype.kind not in "iu":
        raise ValueError(f"decoding: src_ids must be 2-D (batch, seq) integer ids, got shape {tuple(t.shape)} "
                         f"and dtype {t.dtype}")
    return t


def _check_len(max_len: int, fn: str) -> None:
    if not isinstance(max_len, (int, np.integer)) or max_len < 1:
        raise ValueError(f"{fn}: max_len must be an int >= 1, got {max_len!r}")


class _Stepper:
    """Next-token log-probabilities of a translation model for a growing
    prefix, cached (decode_step) or not (decode over the prefix)."""

    def __init__(self, model, src: Tensor, max_len: int, use_cache: bool, rows: Optional[np.ndarray] = None):
        self.model, self.use_cache = model, use_cache
        memory, pad = model.encode(src)
        if use_cache:
            self.cache = model.init_cache(memory, pad, max_len)
            if rows is not None:
                self.cache.expand(rows)
        else:
            if rows is not None:
                memory = Tensor._wrap(memory._data[rows])
                pad = Tensor._wrap(pad._data[rows])
            self.memory, self.pad = memory, pad

    def logits(self, prefix: np.ndarray) -> np.ndarray:
        """prefix (R, t) ids (sos first) -> (R, V) logits of token t + 1."""
        if self.use_cache:
            return self.model.decode_step(Tensor._wrap(prefix[:, -1].copy()), self.cache)._data
        return self.model.decode(Tensor._wrap(np.ascontiguousarray(prefix)), self.memory, self.pad)._data[:, -1]

    def reorder(self, rows: np.ndarray) -> None:
        if self.use_cache:
            self.cache.reorder(rows)

    def greedy(self, ys: np.ndarray, done: np.ndarray, eos_id: int, pad_id: int) -> Optional[int]:
        """greedy_decode's loop over columns 1 .. L - 1 of ys (B, L) in kernel
        calls of _GREEDY_CHUNK tokens, when the model's cached step is one
        (its StepProgram): the last column written.  None (nothing done)
        otherwise."""
        program_of = getattr(self.model, "_step_program", None)
        if not self.use_cache or program_of is None:
            return None
        program = program_of(self.cache)
        if program is None or not program.can_feed_back(pad_id):
            return None
        start, L = 1, ys.shape[1]
        while True:
            stop = min(L, start + _GREEDY_CHUNK)
            last = program.greedy(ys, done, start, stop, self.cache.t, eos_id, pad_id)
            self.cache.t += last - start + 1  # columns start .. last were fed
            if stop == L or (done.size and done.all()):  # no column left, or every row done: the kernel stopped
                return last
            start = stop


# Tokens per decode_model_greedy call: the kernel runs without the interpreter,
# so Ctrl-C (KeyboardInterrupt) is seen between calls; one call per 16 tokens
# costs ~1 us a token of argument checks.
_GREEDY_CHUNK = 16


def greedy_decode(model, src_ids, max_len: int, sos_id: int, eos_id: int, pad_id: Optional[int] = None,
                  use_cache: bool = True) -> Tensor:
    """Pick the most likely next token until every row emitted ``eos_id`` or
    ``max_len`` tokens were generated.

    src_ids (B, S) (padded with the model's pad_id) -> (B, 1 + n) int64 with
    n <= max_len: sos_id, the tokens (eos included), then pad_id."""
    fn = "greedy_decode"
    _check_len(max_len, fn)
    src = _src(src_ids)
    pad_id = model.pad_id if pad_id is None else pad_id
    B = src.shape[0]
    with _eval(model):
        step = _Stepper(model, src, max_len, use_cache)
        ys = np.full((B, 1 + max_len), sos_id, dtype=np.int64)  # filled column by column (no copy per token)
        done = np.zeros(B, dtype=bool)
        last = step.greedy(ys, done, eos_id, pad_id)  # the whole loop below in one kernel call, when it applies
        if last is not None:
            return Tensor._wrap(ys[:, :last + 1].copy())
        n_done = 0
        for n in range(1, max_len + 1):
            nxt = step.logits(ys[:, :n]).argmax(-1)  # the most likely token: argmax of the logits, as torch's loop
            if n_done:
                nxt[done] = pad_id
            ys[:, n] = nxt
            # NumPy's bookkeeping only when some row emitted eos: after a step's weight stream
            # evicted NumPy's code and data, `done |= nxt == eos_id` and `done.all()` at every
            # token took ~30 us of it (bench_transformer (c), batch 1), where `in` on the list is ~1 us
            if eos_id in nxt.tolist():
                done |= nxt == eos_id
                n_done = int(np.count_nonzero(done))
                if n_done == B:
                    break
    return Tensor._wrap(ys[:, :n + 1].copy())


def _length_penalty(n: np.ndarray, alpha: float) -> np.ndarray:
    """GNMT's ((5 + n) / 6) ** alpha; 1 when alpha = 0."""
    return ((5.0 + n) / 6.0) ** alpha


def beam_search(model, src_ids, beam_size: int, max_len: int, sos_id: int, eos_id: int,
                length_penalty: float = 0.0, pad_id: Optional[int] = None, use_cache: bool = True,
                return_all: bool = False):
    """Batched beam search.

    Each source keeps ``beam_size`` hypotheses ranked by their summed
    log-probability; a hypothesis that emitted ``eos_id`` is finished and
    frozen (it keeps its slot and score while the others grow).  The search
    stops when every hypothesis is finished or after ``max_len`` tokens.
    The result is ranked by ``score / ((5 + n) / 6) ** length_penalty`` (n =
    generated tokens, eos included; GNMT's length penalty, 0 = raw sum).

    src_ids (B, S) -> (tokens (B, 1 + n) int64: sos_id, the best hypothesis,
    then pad_id; scores (B,) float64: its normalised log-probability).  With
    ``return_all=True``: (tokens (B, beam_size, 1 + n), scores (B, beam_size)),
    best first.  beam_size=1 is greedy decoding.
    """
    fn = "beam_search"
    _check_len(max_len, fn)
    if not isinstance(beam_size, (int, np.integer)) or beam_size < 1:
        raise ValueError(f"{fn}: beam_size must be an int >= 1, got {beam_size!r}")
    src = _src(src_ids)
    pad_id = model.pad_id if pad_id is None else pad_id
    B, k = src.shape[0], int(beam_size)
    R = B * k
    with _eval(model):
        step = _Stepper(model, src, max_len, use_cache, rows=np.repeat(np.arange(B), k))
        ys = np.full((R, 1), sos_id, dtype=np.int64)
        scores = np.full((B, k), -np.inf)
        scores[:, 0] = 0.0  # one live beam per source at the start: no duplicates
        done = np.zeros(R, dtype=bool)
        lengths = np.zeros(R, dtype=np.int64)
        for _ in range(max_len):
            logits = step.logits(ys)  # (R, V)
            if not 0 <= pad_id < logits.shape[1]:  # (a finished beam continues with pad_id: a token of the output)
                raise ValueError(f"{fn}: pad_id must be in [0, {logits.shape[1]}) (a token of the model's output), "
                                 f"got {pad_id}")
            # each source's k best of its k x V continuations (scores + log-softmax of the logits;
            # a finished beam's one continuation is pad, at no cost): beam origin[r] + token tok[r]
            scores, origin, tok = beam_step(logits, scores, done, pad_id)
            was_done = done[origin]
            ys = np.concatenate([ys[origin], tok[:, None]], axis=1)
            lengths = lengths[origin] + ~was_done
            done = was_done | (tok == eos_id)
            step.reorder(origin)
            if done.all():
                break
        norm = scores / _length_penalty(lengths.reshape(B, k), length_penalty)
        norm = np.where(np.isneginf(scores), -np.inf, norm)
        order = np.argsort(-norm, axis=1, kind="stable")
        ys = ys.reshape(B, k, ys.shape[-1])  # (no -1: B may be 0)
        ranked = np.take_along_axis(ys, order[:, :, None], axis=1)
        ranked_scores = np.take_along_axis(norm, order, axis=1)
    if return_all:
        return Tensor._wrap(ranked), Tensor._wrap(ranked_scores)
    return Tensor._wrap(np.ascontiguousarray(ranked[:, 0])), Tensor._wrap(ranked_scores[:, 0].copy())


def generate(lm, prompt_ids, max_new_tokens: int, temperature: float = 1.0, top_k: Optional[int] = None,
             greedy: bool = False, use_cache: bool = True, eos_id: Optional[int] = None) -> Tensor:
    """Continue prompts with a :class:`~ctransformer.models.DecoderLM`.

    prompt_ids (B, P) -> (B, P + max_new_tokens) int64 (fewer columns when
    every row emitted ``eos_id``; finished rows repeat eos_id).  Each new
    token is the argmax (``greedy=True``) or a sample from softmax(logits /
    temperature) restricted to the ``top_k`` most likely tokens, drawn from
    ctransformer's default generator (``ctransformer.manual_seed``)."""
    fn = "generate"
    p = prompt_ids if isinstance(prompt_ids, Tensor) else Tensor._wrap(np.asarray(prompt_ids))
    if p.ndim == 1:
        p = p.unsqueeze(0)
    if p.ndim != 2 or p.dtype.kind not in "iu" or p.shape[1] < 1:
        raise ValueError(f"{fn}: prompt_ids must be 2-D (batch, seq >= 1) integer ids, got shape "
                         f"{tuple(p.shape)} and dtype {p.dtype}")
    if not greedy and not temperature > 0:
        raise ValueError(f"{fn}: temperature must be > 0, got {temperature}")
    if top_k is not None and top_k < 1:
        raise ValueError(f"{fn}: top_k must be >= 1 or None, got {top_k}")
    ids = np.ascontiguousarray(p._data, dtype=np.int64)
    B, P = ids.shape
    total = P + int(max_new_tokens)
    if total > lm.max_len:
        raise ValueError(f"{fn}: prompt length + max_new_tokens ({total}) exceeds the model's max_len ({lm.max_len})")
    with _eval(lm):
        cache = lm.init_cache(B, total) if use_cache else None
        done = np.zeros(B, dtype=bool)
        for i in range(int(max_new_tokens)):
            if use_cache:
                start = cache.t  # feed every token the cache has not seen (the whole prompt first)
                for t in range(start, ids.shape[1]):
                    logits = lm.decode_step(Tensor._wrap(ids[:, t].copy()), cache)._data
            else:
                logits = lm(Tensor._wrap(ids))._data[:, -1]
            nxt = _pick(logits.astype(np.float64), temperature, top_k, greedy)
            if eos_id is not None:
                nxt = np.where(done, eos_id, nxt)
                done |= nxt == eos_id
            ids = np.concatenate([ids, nxt[:, None]], axis=1)
            if eos_id is not None and done.all():
                break
    return Tensor._wrap(ids)


def _pick(logits: np.ndarray, temperature: float, top_k: Optional[int], greedy: bool) -> np.ndarray:
    """(B, V) logits -> (B,) next tokens."""
    if greedy:
        return logits.argmax(-1)
    z = logits / temperature
    if top_k is not None and top_k < z.shape[1]:
        kth = np.sort(z, axis=1)[:, -top_k][:, None]
        z = np.where(z < kth, -np.inf, z)
    prob = np.exp(_log_softmax(z))
    u = default_generator.uniform(0.0, 1.0, (z.shape[0], 1))
    cdf = np.cumsum(prob, axis=1)
    return np.minimum((cdf < u * cdf[:, -1:]).sum(axis=1), z.shape[1] - 1).astype(np.int64)
