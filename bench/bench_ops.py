"""Per-op overhead: a chain of 10 000 small elementwise autograd ops.

Target: ctransformer no slower than torch for 10 000 elementwise ops on
8x128 float32 tensors that require grad (forward, and forward + backward).

    python bench/bench_ops.py [--ops 10000] [--repeats 5] [--threads 1 2]

Prints one row per (library, threads) with the median time of the
forward pass and of forward + backward, per op in microseconds, and the
ratio ours / torch (< 1 means we are faster)."""
from __future__ import annotations

import argparse
import os
import sys
import statistics
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from a checkout


def chain(lib, x, w, v, n_ops: int):
    """A mix of Tensor-Tensor, Tensor-scalar and activation ops; values stay
    bounded (tanh/sigmoid every few steps)."""
    h = x
    for i in range(n_ops):
        k = i % 8
        if k == 0:
            h = h + w
        elif k == 1:
            h = h * v
        elif k == 2:
            h = lib.tanh(h)
        elif k == 3:
            h = h - w
        elif k == 4:
            h = h * 0.5
        elif k == 5:
            h = lib.sigmoid(h)
        elif k == 6:
            h = 1.0 + h
        else:
            h = h / 1.5
    return h


def run(lib, n_ops: int, repeats: int, backward: bool):
    gen = lib.manual_seed(0)  # noqa: F841  (same inputs every run)
    x = lib.randn(8, 128, requires_grad=True)
    w = lib.randn(8, 128, requires_grad=True)
    v = lib.rand(8, 128, requires_grad=True)
    times = []
    chain(lib, x, w, v, 200)  # warm-up
    for _ in range(repeats):
        x.grad = w.grad = v.grad = None
        t0 = time.perf_counter()
        h = chain(lib, x, w, v, n_ops)
        if backward:
            h.sum().backward()
        times.append(time.perf_counter() - t0)
        del h
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--no-torch", action="store_true")
    args = ap.parse_args()

    import ctransformer as ct
    libs = [("ctransformer", ct)]
    if not args.no_torch:
        try:
            import torch
            libs.append(("torch", torch))
        except ImportError:
            print("torch not installed: ours only")
    print(f"{args.ops} elementwise ops on 8x128 float32, median of {args.repeats}")
    print(f"{'library':<14}{'threads':>8}{'fwd ms':>10}{'fwd us/op':>11}{'f+b ms':>10}{'f+b us/op':>11}"
          f"{'fwd ratio':>11}{'f+b ratio':>11}")
    for n in args.threads:
        rows = {}
        for name, lib in libs:
            lib.set_num_threads(n)
            fwd = run(lib, args.ops, args.repeats, backward=False)
            both = run(lib, args.ops, args.repeats, backward=True)
            rows[name] = (fwd, both)
        for name, (fwd, both) in rows.items():
            ref = rows.get("torch")
            r1 = f"{fwd / ref[0]:.2f}" if ref else "-"
            r2 = f"{both / ref[1]:.2f}" if ref else "-"
            print(f"{name:<14}{n:>8}{fwd * 1e3:>10.1f}{fwd / args.ops * 1e6:>11.2f}{both * 1e3:>10.1f}"
                  f"{both / args.ops * 1e6:>11.2f}{r1:>11}{r2:>11}")


if __name__ == "__main__":
    main()
