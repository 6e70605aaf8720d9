"""Where does a small training step spend its time?  A breakdown by layer of
the stack, from `perf` samples of the whole process.

    python bench/profile_step.py                    # demo-size step, 1 thread
    python bench/profile_step.py --model d128 --threads 2
    python bench/profile_step.py --steps 200 --lib DIR   # profile the build in DIR

Builds bench_transformer's tutorial model (ours only, no torch needed), warms
up, then runs STEPS training steps under ``perf record`` (every thread) and
sorts the samples by the shared object they fall in:

  gemm        OpenBLAS (sgemm kernels, packing, its thread pool)
  ours        our extension: the C kernels and the bindings (csrc/)
  python      the interpreter (running ctransformer's Python layers)
  numpy       NumPy's C code (array creation, ufuncs, copies)
  libc        memset / memcpy / malloc (mostly array allocation and copies)
  other       the OS kernel, the loader, ...

then lists the top symbols.  The model construction and warm-up are in the
samples too; with the default 300 steps they are a few per cent.  A sampling
profiler that stops the process to unwind stacks (py-spy --native) more than
doubles a small step's time here, so the shares are taken with perf, which
does not.  Needs `perf` (linux-perf); the step time is printed without it.
"""
from __future__ import annotations

import argparse
import collections
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

MODELS = {  # (config, batch, length): as bench_threads.py and bench_transformer.py (b), (a)
    "demo": (dict(d_model=64, nhead=4, layers=2, ff=256, vocab=300), 64, 12),
    "d128": (dict(d_model=128, nhead=4, layers=2, ff=512, vocab=1000), 32, 32),
    "d512": (dict(d_model=512, nhead=8, layers=3, ff=2048, vocab=8000), 32, 32),
}

BUCKETS = {  # bucket: substrings of perf's shared-object names
    "gemm": ("openblas",),
    "ours": ("ctransformer/_C", "_C.cpython"),
    "python": ("libpython", "python3"),
    "numpy": ("numpy", "_multiarray", "_umath"),
    "libc": ("libc.so", "libm.so"),
}


def run_steps(model: str, steps: int, threads: int, lib_dir: str | None) -> float:
    """Build the model, warm up, run `steps` steps; seconds per step."""
    sys.path.insert(0, lib_dir or ROOT)
    import ctransformer as ct
    sys.path.insert(0, HERE)
    import bench_transformer as bt
    bt.have_torch = lambda: False
    cfg, batch_size, seq = MODELS[model]
    bt.BATCH, bt.SEQ = batch_size, seq
    (m_c, ns_c), _ = bt.build_pair(cfg)
    src, tgt = bt.make_batch(cfg["vocab"])
    step = bt.trainer(m_c, ns_c, ct, src, tgt)
    ct.set_num_threads(threads)
    for _ in range(3):
        step()
    return timed_steps(step, steps)


def timed_steps(step, steps: int) -> float:
    """Seconds per step of `steps` calls of `step`."""
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - t0) / steps


def bucket_of(dso: str) -> str:
    for bucket, names in BUCKETS.items():
        if any(n in dso for n in names):
            return bucket
    return "other"


def perf_report(data: str, sort: str) -> list:
    """[(percent, fields...)] rows of `perf report --sort sort`."""
    out = subprocess.run(["perf", "report", "-i", data, "--sort", sort, "--stdio"], capture_output=True,
                         text=True).stdout
    rows = []
    for line in out.splitlines():
        parts = line.split()
        if not parts or line.startswith("#") or not parts[0].endswith("%"):
            continue
        rows.append((float(parts[0].rstrip("%")), *parts[1:]))
    return rows


def profile(args) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "perf.data")
        cmd = ["perf", "record", "-q", "-F", "999", "-o", data, "--", sys.executable, os.path.abspath(__file__),
               "--child", "--model", args.model, "--steps", str(args.steps), "--threads", str(args.threads)]
        if args.lib:
            cmd += ["--lib", args.lib]
        out = subprocess.run(cmd, capture_output=True, text=True)
        print(out.stdout.strip())
        shares = collections.Counter()
        for pct, dso, *_ in perf_report(data, "dso"):
            shares[bucket_of(dso)] += pct
        symbols = perf_report(data, "dso,sym")
    print(f"{'bucket':8s} {'share':>7s}")
    for b in (*BUCKETS, "other"):
        print(f"{b:8s} {shares[b]:6.1f}%")
    print("top symbols:")
    for pct, dso, *sym in symbols[:args.top]:
        print(f"  {pct:5.1f}%  {bucket_of(dso):7s} {' '.join(s for s in sym if s != '[.]')}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=sorted(MODELS), default="demo")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--lib", default=None, help="directory holding the ctransformer package to profile")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        sec = run_steps(args.model, args.steps, args.threads, args.lib)
        print(f"{args.model} step at {args.threads} thread(s): {1e3 * sec:.1f} ms (under the profiler)")
        return
    if shutil.which("perf") is None:
        import cProfile
        import pstats
        prof = cProfile.Profile()
        prof.runcall(run_steps, args.model, args.steps, args.threads, args.lib)
        pstats.Stats(prof).sort_stats("tottime").print_stats(args.top)
        return
    profile(args)


if __name__ == "__main__":
    main()
