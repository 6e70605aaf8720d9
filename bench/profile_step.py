"""Where does a small training step spend its time?  A breakdown by layer of
the stack, from py-spy's sampled stacks (native frames included).

    python bench/profile_step.py                    # demo-size step, 1 thread
    python bench/profile_step.py --model d128 --threads 2
    python bench/profile_step.py --steps 200 --lib DIR   # time the build in DIR

Runs STEPS training steps of bench_transformer's tutorial model (ours only,
no torch needed) under ``py-spy record --native --format raw`` and sorts
every sample into one bucket by the innermost frame that names it:

  gemm        OpenBLAS (sgemm kernels, packing, its thread pool)
  kernel      our C (csrc/*.c) outside OpenBLAS
  binding     the extension's argument checks and allocation (csrc/py/*)
  numpy       NumPy's C code (array creation, ufuncs, copies)
  python      everything else: the interpreter running ctransformer's Python

py-spy must be on PATH (``pip install py-spy``); without it the script
prints the per-step time and the cProfile top functions instead.
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

MODELS = {  # (config, batch, length): as bench_threads.py and bench_transformer.py (b)
    "demo": (dict(d_model=64, nhead=4, layers=2, ff=256, vocab=300), 64, 12),
    "d128": (dict(d_model=128, nhead=4, layers=2, ff=512, vocab=1000), 32, 32),
}

BUCKETS = ("gemm", "kernel", "binding", "numpy", "python")


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
    """Seconds per step; the profile keeps only samples inside this function."""
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - t0) / steps


def bucket_of(stack: str) -> str:
    """The bucket of one raw py-spy stack (frames outermost first, ';'-joined)."""
    frames = stack.split(";")
    for frame in reversed(frames):  # innermost first; libc (memcpy, malloc) counts for its caller
        low = frame.lower()
        if "openblas" in low:
            return "gemm"
        if "args.c" in low or "module.c" in low or "bind_" in low or "generated" in low or "ct_py" in low:
            return "binding"
        if ".c:" in low or ".h:" in low:
            return "kernel"
        if "numpy/" in low and ".so)" in low:
            return "numpy"
        if ".py:" in low or "libpython" in low:
            return "python"
    return "python"


def native_owner(stack: str, bucket: str) -> str:
    """The innermost frame of `bucket` (kernel: our C function; numpy: the Python line calling NumPy)."""
    frames = stack.split(";")
    for i in range(len(frames) - 1, -1, -1):
        if bucket_of(";".join(frames[:i + 1])) != bucket:
            continue
        if bucket == "numpy":
            outer = [f for f in frames[:i] if ".py:" in f]
            return outer[-1].strip() if outer else frames[i].strip()
        return frames[i].strip()
    return "?"


def python_owner(stack: str) -> str:
    """The innermost ctransformer Python function of a stack, for the top list."""
    for frame in reversed(stack.split(";")):
        if "ctransformer/" in frame and ".py" in frame:
            return frame.strip()
    return "(outside ctransformer)"


def profile(args) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        raw = os.path.join(tmp, "stacks.txt")
        cmd = ["py-spy", "record", "--native", "--format", "raw", "-r", "250", "-o", raw, "--",
               sys.executable, os.path.abspath(__file__), "--child", "--model", args.model,
               "--steps", str(args.steps), "--threads", str(args.threads)]
        if args.lib:
            cmd += ["--lib", args.lib]
        out = subprocess.run(cmd, capture_output=True, text=True)
        if args.keep:
            shutil.copy(raw, args.keep)
        print(out.stdout.strip())
        counts = collections.Counter()
        owners = collections.Counter()
        natives = {"kernel": collections.Counter(), "numpy": collections.Counter(), "gemm": collections.Counter()}
        with open(raw) as f:
            for line in f:
                stack, _, n = line.rstrip("\n").rpartition(" ")
                if "timed_steps" not in stack:
                    continue  # import, model construction, warm-up stacks before the timed loop
                b = bucket_of(stack)
                counts[b] += int(n)
                if b == "python":
                    owners[python_owner(stack)] += int(n)
                elif b in natives:
                    natives[b][native_owner(stack, b)] += int(n)
    total = sum(counts.values()) or 1
    print(f"{'bucket':10s} {'share':>7s}")
    for b in BUCKETS:
        print(f"{b:10s} {100 * counts[b] / total:6.1f}%")
    print("top Python functions (share of all samples):")
    for name, n in owners.most_common(args.top):
        print(f"  {100 * n / total:5.1f}%  {name}")
    for b, counter in natives.items():
        print(f"top {b} frames (numpy: the Python line calling it):")
        for name, n in counter.most_common(args.top):
            print(f"  {100 * n / total:5.1f}%  {name}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=sorted(MODELS), default="demo")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--lib", default=None, help="directory holding the ctransformer package to profile")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--keep", default=None, help="also save py-spy's raw stacks to this file")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        sec = run_steps(args.model, args.steps, args.threads, args.lib)
        print(f"{args.model} step at {args.threads} thread(s): {1e3 * sec:.1f} ms (under the profiler)")
        return
    if shutil.which("py-spy") is None:
        import cProfile
        import pstats
        prof = cProfile.Profile()
        prof.runcall(run_steps, args.model, args.steps, args.threads, args.lib)
        pstats.Stats(prof).sort_stats("tottime").print_stats(args.top)
        return
    profile(args)


if __name__ == "__main__":
    main()
