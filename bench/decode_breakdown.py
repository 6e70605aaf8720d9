"""Where does a cached greedy decoding step of bench_transformer's (c) model
go, against its streaming floor?  All timings interleaved in one process
(this machine's memory bandwidth drifts by 2x over minutes, so numbers
taken minutes apart do not compare; these do).

    python bench/decode_breakdown.py               # this checkout
    python bench/decode_breakdown.py --lib DIR     # another checkout (e.g. a baseline build)

Per token, at 1 and 2 threads (median of ROUNDS rounds):
  floor        one decode_linear GEMV over as many float32 weights as a step
               reads, in the model's own parameter memory (own_weight_rows,
               as bench_transformer.weight_stream)
  gemvs        the step's 19 projections (3 layers x qkv, out, cross q,
               cross out, ff1, ff2, and the generator) as back-to-back
               decode_linear calls: what the weights cost in separate GEMVs
  step         one TranslationTransformer.decode_step (position 20)
  encode/50    encoding the 32-token source and projecting the memory once,
               spread over 50 tokens
  setup/50     all greedy_decode does before its kernel loop (eval mode on
               and back, encode/50's work, the cache, the step program),
               spread over 50 tokens
  greedy       greedy_decode of 50 tokens, per token (everything)
No torch needed.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROUNDS, TOKENS = 15, 50


def build(ct):
    """The (c) model of bench_transformer (d512, 3+3 layers, vocab 8000) with random weights."""
    import numpy as np
    from ctransformer.models import TranslationTransformer
    ct.manual_seed(0)
    model = TranslationTransformer(8000, 8000, 512, 8, 3, 3, 2048, dropout=0.1, pad_id=1).eval()
    src = np.random.default_rng(1).integers(4, 8000, (1, 32))
    return model, src


def projections(model) -> list:
    """The weight matrices a batch-1 step streams, in the order it reads them."""
    ws = []
    for layer in model.decoder.layers:
        d = layer.self_attn.embed_dim
        ws += [layer.self_attn.in_proj_weight._data, layer.self_attn.out_proj.weight._data,
               layer.multihead_attn.in_proj_weight._data[:d], layer.multihead_attn.out_proj.weight._data,
               layer.linear1.weight._data, layer.linear2.weight._data]
    return ws + [model.generator.weight._data]


def _root(a):
    """The array that owns a's memory."""
    while a.base is not None:
        a = a.base
    return a


def own_weight_rows(model, nbytes: int):
    """The floor's matrix, (nbytes / 2048, 512) float32: a view of nbytes of
    the model's own parameter memory, from its first decoder weight on (the
    decoder's and the generator's weights, where a TranslationTransformer
    keeps them in one block: ctransformer/models/_storage.py); a fresh random
    matrix when they are not views of one float32 block that long.

    Why not a fresh matrix: on this VM the bandwidth of a stream depends on
    where its pages landed.  In one process, one GEMV over a fresh 58 MB
    matrix and one over the same number of the model's weight bytes took, at
    2 threads, 1.31 / 1.32, 1.86 / 1.60 and 1.81 / 1.56 ms in three processes
    (at 1 thread 2.31-2.36 / 2.28-2.43), and decode_linear over six fresh
    16 MB arrays read 16.4-20.4 GB/s at 1 thread: greedy decoding over the
    fresh floor read 0.93-1.10x at 2 threads, over its own weights'
    memory 1.07-1.11x.  A floor is the time to stream the bytes decoding
    streams, so it reads those bytes."""
    import numpy as np
    rows = nbytes // 4 // 512
    ws = [p.detach().numpy() for name, p in model.named_parameters() if name.startswith(("decoder.", "generator."))]
    block = _root(ws[0]) if ws else None
    if ws and all(_root(w) is block for w in ws) and block.dtype == np.float32 and block.flags.c_contiguous:
        first = min(w.__array_interface__["data"][0] for w in ws) - block.__array_interface__["data"][0]
        start = min(first // 4, block.size - rows * 512)
        if start >= 0:
            return block.reshape(-1)[start:start + rows * 512].reshape(rows, 512)
    return np.random.default_rng(0).standard_normal((rows, 512)).astype(np.float32)


def closures(ct, model, src) -> dict:
    import numpy as np
    import ctransformer.kernels as K
    from ctransformer.decoding import _eval, _Stepper, greedy_decode
    ws = projections(model)
    rows = sum(w.size for w in ws) // 512
    big = own_weight_rows(model, rows * 512 * 4)
    xs = {k: np.ones((1, k), np.float32) for k in {w.shape[1] for w in ws}}
    with ct.no_grad():
        memory, pad = model.encode(ct.tensor(src))
        cache = model.init_cache(memory, pad, TOKENS)
    token = ct.tensor(np.array([2]))

    def step():
        with ct.no_grad():
            cache.t = 20
            model.decode_step(token, cache)

    def encode():
        with ct.no_grad():
            model.init_cache(*model.encode(ct.tensor(src)), TOKENS)

    def setup():
        with _eval(model):
            model._step_program(_Stepper(model, ct.tensor(src), TOKENS, True).cache)

    return {"floor": (lambda: K.decode_linear(xs[512], big, None), 1),
            "gemvs": (lambda: [K.decode_linear(xs[w.shape[1]], w, None) for w in ws], 1),
            "step": (step, 1),
            "encode/50": (encode, TOKENS),
            "setup/50": (setup, TOKENS),
            "greedy": (lambda: greedy_decode(model, src, TOKENS, 2, -1), TOKENS)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", help="checkout whose ctransformer to time (default: this one)")
    args = ap.parse_args()
    sys.path.insert(0, args.lib or ROOT)
    import ctransformer as ct
    model, src = build(ct)
    fns = closures(ct, model, src)
    print(f"ctransformer from {os.path.dirname(ct.__file__)}; ms per token, median of {ROUNDS} interleaved rounds")
    for threads in (1, 2):
        ct.set_num_threads(threads)
        times = {name: [] for name in fns}
        for _ in range(ROUNDS):
            for name, (fn, per) in fns.items():
                reps = 1 if per > 1 else 10
                t0 = time.perf_counter()
                for _ in range(reps):
                    fn()
                times[name].append((time.perf_counter() - t0) / reps / per)
        med = {name: statistics.median(v) for name, v in times.items()}
        cols = "  ".join(f"{name} {1e3 * t:.2f}" for name, t in med.items())
        print(f"{threads} thread(s): {cols}  -> greedy / floor {med['greedy'] / med['floor']:.2f}, "
              f"step / floor {med['step'] / med['floor']:.2f}", flush=True)


if __name__ == "__main__":
    main()
