"""Benchmark: recurrent models, ours against torch in the same run, at 1 and
2 threads.

    python bench/bench_rnn.py [--reps N]

Cases (float32, wall-clock median after a warm-up; REPS steps for (b),
10 x REPS for (a), 3 x REPS for (c), which are shorter):
  (a) seq2seq epoch - the seed tutorial's LSTM Encoder/Decoder (embedding 32,
      hidden 128, vocab 29, batch 8, source length 8, target length 9,
      teacher forcing 0.5 with the same random draws in both libraries),
      one epoch = forward, CrossEntropyLoss(ignore_index), backward, Adam.
      The model code is bench/seq2seq_model.py (one text for both libraries).
  (b) LM training step - Embedding(1000, 256) -> 2-layer LSTM (or GRU),
      hidden 512 -> Linear(512, 1000), batch 64, length 50: forward,
      cross-entropy, backward, Adam.
  (c) LM forward throughput - the LSTM model of (b) in eval / no_grad, in
      tokens per second (higher is better).
Targets: (a) ours <= 0.5 x torch, (b) <= 0.8 x torch, (c) >= torch.
Ours and torch alternate step by step (warm-up first), so a slow spell of
the shared machine hits both, each timed call after SETTLE_S of quiet (as
bench_transformer.py: torch's OpenMP worker stays runnable for 7-9 ms after
its step, taking a core from whatever runs next in this process); the table
also gives the ratio of each library's fastest rep (the least disturbed
one: noise only adds time).
For (b) a third contestant takes its turn in the same alternation, the GEMM
floor: every GEMM of the step (input projections, recurrent products forward
and backward, weight and input gradients, the output Linear) through raw
OpenBLAS sgemm (bench_linear.sgemm) into preallocated arrays, the T per-step
products merged into one big GEMM (a lower bound: see lm_gemms) - the step
with nothing but its matrix products at OpenBLAS's best speed, against
0.8 x torch.
Then one LSTM layer (T 50, B 64, I 512, H 512) forward with W_hh packed once
per call (csrc/packed_gemm.c) against one OpenBLAS GEMM per step.
The machine is shared: the load average is printed with the results.
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # run from a checkout (pip install . makes it importable)
import ctransformer  # noqa: E402

import seq2seq_model  # noqa: E402  (bench/)

try:
    import torch
except ImportError:  # the torch columns print as "-"
    torch = None

VOCAB, EMB, HID, BATCH, LENGTH = 1000, 256, 512, 64, 50


def median_time(fn, reps: int, warmup: int = 1) -> float:
    return paired_times([fn], reps, warmup)[0][0]


SETTLE_S = 0.02  # quiet before each timed call: the other library's spinning threads stop (see the top)


def paired_times(fns, reps: int, warmup: int = 1) -> list:
    """(median, min) seconds of each fn, the fns taking turns rep by rep,
    each call after SETTLE_S of sleep."""
    for fn in fns:
        for _ in range(warmup):
            fn()
    times = [[] for _ in fns]
    for _ in range(reps):
        for fn, ts in zip(fns, times):
            time.sleep(SETTLE_S)
            start = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - start)
    return [(statistics.median(ts), min(ts)) for ts in times]


# ---------------------------------------------------------------- (a) seq2seq
def seq2seq_step(use_torch: bool):
    lib = torch if use_torch else ctransformer
    lib.manual_seed(0)
    model = seq2seq_model.build(lib)
    counter = [0]

    def step():
        random.seed(counter[0])  # the same teacher-forcing draws in both libraries
        counter[0] += 1
        model.train_epoch()

    return step


# ---------------------------------------------------------------- (b), (c) language model
def lm_model(lib, nn, kind: str):
    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(VOCAB, EMB)
            self.rnn = getattr(nn, kind)(EMB, HID, num_layers=2, batch_first=True)
            self.out = nn.Linear(HID, VOCAB)

        def forward(self, ids):
            h, _ = self.rnn(self.emb(ids))
            return self.out(h)

    return LM()


def lm_setup(use_torch: bool, kind: str):
    lib = torch if use_torch else ctransformer
    import importlib
    nn = importlib.import_module("torch.nn" if use_torch else "ctransformer.nn")
    optim = importlib.import_module("torch.optim" if use_torch else "ctransformer.optim")
    lib.manual_seed(0)
    model = lm_model(lib, nn, kind)
    rng = np.random.default_rng(0)
    ids = lib.tensor(rng.integers(0, VOCAB, (BATCH, LENGTH)))
    targets = lib.tensor(rng.integers(0, VOCAB, (BATCH * LENGTH,)))
    return lib, nn, optim, model, ids, targets


def lm_train_step(use_torch: bool, kind: str):
    lib, nn, optim, model, ids, targets = lm_setup(use_torch, kind)
    crit = nn.CrossEntropyLoss()
    opt = optim.Adam(model.parameters(), lr=1e-3)

    def step():
        opt.zero_grad()
        logits = model(ids)
        loss = crit(logits.reshape(-1, VOCAB), targets)
        loss.backward()
        opt.step()

    return step


def lm_forward(use_torch: bool):
    lib, nn, optim, model, ids, targets = lm_setup(use_torch, "LSTM")
    model.eval()

    def step():
        with lib.no_grad():
            model(ids)

    return step


def lm_gemms(kind: str) -> list:
    """The GEMMs of one LM training step (b): (trans_a, trans_b, m, n, k),
    row-major c (m, n) = op(a) @ op(b).  The T per-step recurrent products
    (B rows each) are listed as one GEMM of all T*B rows: the same flops in
    the shape sgemm runs fastest, which no recurrence can use - so the floor
    is a lower bound for any implementation on OpenBLAS-class GEMMs."""
    from bench_linear import CBLAS_NO_TRANS as N_, CBLAS_TRANS as T_
    G = {"LSTM": 4, "GRU": 3}[kind]
    rows, GH = BATCH * LENGTH, G * HID
    gemms = []
    for inp in (EMB, HID):  # layer 1, layer 2
        gemms += [(N_, T_, rows, GH, inp),        # x W_ih^T, all steps
                  (N_, T_, rows, GH, HID),        # h W_hh^T, all steps at once
                  (N_, N_, rows, HID, GH),        # dgates W_hh, all steps at once
                  (T_, N_, GH, inp, rows),        # dW_ih = dgates^T x
                  (N_, N_, rows, inp, GH),        # dx = dgates W_ih
                  (T_, N_, GH, HID, rows)]        # dW_hh = dgates^T h
    gemms += [(N_, T_, rows, VOCAB, HID),         # logits
              (N_, N_, rows, HID, VOCAB),         # dh = dlogits W
              (T_, N_, VOCAB, HID, rows)]         # dW = dlogits^T h
    return gemms


def gemm_floor(kind: str) -> tuple:
    """(GFLOP, run): run() calls every GEMM of lm_gemms(kind) through raw
    OpenBLAS sgemm into preallocated arrays."""
    from bench_linear import CBLAS_NO_TRANS, load_openblas, sgemm
    lib = load_openblas()
    rng = np.random.default_rng(0)
    calls, flops = [], 0.0
    for ta, tb, m, n, k in lm_gemms(kind):
        a = rng.standard_normal((m, k) if ta == CBLAS_NO_TRANS else (k, m)).astype(np.float32)
        b = rng.standard_normal((k, n) if tb == CBLAS_NO_TRANS else (n, k)).astype(np.float32)
        c = np.empty((m, n), np.float32)
        calls.append((ta, tb, m, n, k, a, b, c))
        flops += 2.0 * m * n * k

    def run():
        for ta, tb, m, n, k, a, b, c in calls:
            sgemm(lib, ta, tb, m, n, k, a, a.shape[1], b, b.shape[1], c, n)

    return flops / 1e9, run


def packed_vs_blas(reps: int) -> list:
    """One LSTM layer forward (T 50, B 64, I 512, H 512, float32) with W_hh
    packed once (csrc/packed_gemm.c) and with one OpenBLAS GEMM per step:
    (mode, ms, GFLOP/s of the layer's GEMMs)."""
    import ctransformer.kernels as K
    rng = np.random.default_rng(0)
    x = rng.standard_normal((LENGTH, BATCH, HID)).astype(np.float32)
    w_ih = (rng.standard_normal((4 * HID, HID)) / 23).astype(np.float32)
    w_hh = (rng.standard_normal((4 * HID, HID)) / 23).astype(np.float32)
    b = np.zeros(4 * HID, np.float32)
    flops = 2.0 * LENGTH * BATCH * HID * 4 * HID * 2
    rows = []
    for mode in ("auto", "off"):
        previous, active = K.packed_gemm(mode)
        t = median_time(lambda: K.rnn_forward(x, None, w_ih, w_hh, b, b, "lstm"), reps)
        K.packed_gemm(previous)
        rows.append((f"packed {active}" if mode == "auto" else "OpenBLAS per step", t * 1e3, flops / t / 1e9))
    return rows


def set_threads(n: int) -> None:
    ctransformer.set_num_threads(n)
    if torch is not None:
        torch.set_num_threads(n)


def fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=7)
    args = ap.parse_args()
    rows, floors = [], []
    for threads in (1, 2):
        set_threads(threads)
        cases = [("(a) seq2seq epoch [ms]", lambda t: seq2seq_step(t), 10 * args.reps, 1e3, "<= 0.5"),
                 ("(b) LSTM LM train step [ms]", lambda t: lm_train_step(t, "LSTM"), args.reps, 1e3, "<= 0.8"),
                 ("(b) GRU LM train step [ms]", lambda t: lm_train_step(t, "GRU"), args.reps, 1e3, "<= 0.8"),
                 ("(c) LSTM LM forward [ktok/s]", lambda t: lm_forward(t), 3 * args.reps, None, ">= 1")]
        for name, make, reps, scale, target in cases:
            fns = [make(False)] + ([make(True)] if torch is not None else [])
            if name.startswith("(b)"):  # the GEMM floor takes its turn with the two steps
                kind = name.split()[1]
                gflop, floor_run = gemm_floor(kind)
                fns.append(floor_run)
            times = paired_times(fns, reps)
            (t_ours, best_ours) = times.pop(0)
            t_torch, best_torch = times.pop(0) if torch is not None else (None, None)
            t_floor = times[0][0] if times else None
            tok = BATCH * LENGTH / 1e3
            ours = tok / t_ours if scale is None else t_ours * scale   # throughput or time
            ref = best_ratio = ratio = None
            if t_torch is not None:
                ref = tok / t_torch if scale is None else t_torch * scale
                ratio = ours / ref
                best_ratio = best_ours / best_torch if scale else best_torch / best_ours
            rows.append((threads, name, ours, ref, ratio, best_ratio, target))
            print(f"{threads}  {name:30s} ours {ours:9.2f}  torch {fmt(ref, '9.2f')}  ratio {fmt(ratio, '5.2f')}  "
                  f"(of the best reps {fmt(best_ratio, '5.2f')}; target {target})", flush=True)
            if t_floor is not None:
                floors.append((threads, kind, gflop, t_floor * 1e3, ours, ref))
                print(f"{threads}  {kind} step GEMMs {gflop:.1f} GFLOP: sgemm floor {t_floor * 1e3:.1f} ms "
                      f"({gflop / t_floor:.1f} GFLOP/s), ours {gflop / t_ours:.1f} GFLOP/s, "
                      f"floor / torch {fmt(ref and t_floor * 1e3 / ref, '.2f')} (target 0.8)", flush=True)
    print()
    for threads in (1, 2):
        set_threads(threads)
        for mode, ms, gf in packed_vs_blas(3 * args.reps):
            print(f"{threads}  LSTM layer forward, W_hh {mode:18s} {ms:7.2f} ms  {gf:6.1f} GFLOP/s", flush=True)
    print()
    print(f"load average: {os.getloadavg()}")
    print("| threads | case | ours | torch | ours/torch | best rep / best rep | target |")
    print("|---|---|---|---|---|---|---|")
    for threads, name, ours, ref, ratio, best_ratio, target in rows:
        print(f"| {threads} | {name} | {ours:.2f} | {fmt(ref, '.2f')} | {fmt(ratio, '.2f')} | "
              f"{fmt(best_ratio, '.2f')} | {target} |")
    print()
    print("| threads | step | GEMM GFLOP | sgemm floor ms | floor GFLOP/s | ours GFLOP/s | floor / torch |")
    print("|---|---|---|---|---|---|---|")
    for threads, kind, gflop, floor_ms, ours, ref in floors:
        print(f"| {threads} | {kind} | {gflop:.1f} | {floor_ms:.1f} | {gflop / floor_ms * 1e3:.1f} | "
              f"{gflop / ours * 1e3:.1f} | {fmt(ref and floor_ms / ref, '.2f')} |")


if __name__ == "__main__":
    main()
