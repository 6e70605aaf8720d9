"""Which of two builds trains the demo (or decodes) faster, when single runs cannot tell?

    python bench/ab_step.py --other DIR                 # this checkout against the build in DIR
    python bench/ab_step.py --other DIR --threads 1 --rounds 30
    python bench/ab_step.py --other DIR --decode        # greedy decoding of bench_transformer's (c) model
    python bench/ab_step.py --other DIR --model d128 --threads 1 --steps 5   # bench_transformer's (b) step

On a shared or virtual machine one build's step time drifts by 10-30 % within
minutes (seen here: the same demo in 51 s and in 67 s, ten minutes apart), so
two separate runs cannot show a 5 % change.  This loads both builds' C
extensions into ONE process and runs the demo's own training loop
(``ctransformer demo``'s model, corpus, batches, loss, clipping and Adam, at
its default size) in blocks of ``--steps`` steps, alternating the builds
block by block (the ``_C`` of every ctransformer module swapped, the order
flipped every round).  It prints each build's median ms per step and the
median of the per-round ratios.

--decode times greedy_decode instead (bench/decode_breakdown.py's d512
model, batch 1, 50 tokens: a fresh cache per call, so each build decodes
with its own plans), ``--steps`` calls per block, in ms per token, and the
streaming floor the same way (decode_linear over as many float32 weights as a
step reads).  Decoding is memory-bound and this machine's bandwidth moved
the same build's floor 0.8-1.6 ms from one process to the next at 2
threads, so separate runs cannot compare builds at all; here, with the
same decoding kernels on both sides, 8 rounds read 1.057 (greedy) and 0.969
(floor): use 20 rounds or more for a 5 % change.

DIR is another checkout with its extension built in place (``python setup.py
build_ext --inplace``), e.g. a ``git worktree`` of the baseline commit.  The
Python layer is this checkout's for both, so the two extensions must take the
same arguments (true between commits that change only C bodies).  No torch
needed.
"""
from __future__ import annotations

import argparse
import glob
import importlib.util
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def load_extension(lib_dir: str):
    """The ``ctransformer._C`` built in lib_dir, as a separate module object."""
    paths = glob.glob(os.path.join(lib_dir, "ctransformer", "_C*.so"))
    if not paths:
        sys.exit(f"ab_step: no built extension under {lib_dir}/ctransformer (build it in place first)")
    spec = importlib.util.spec_from_file_location("ctransformer._C", paths[0])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name, fallback in OLDER_BUILDS.items():
        if not hasattr(module, name):
            setattr(module, name, fallback)
    return module


def _numpy_copy(a):
    import numpy as np
    return np.array(a, order="C", copy=True)


# Functions of _C that the Python layer calls and an older build lacks: what
# that build's Python did instead.
OLDER_BUILDS = {"copy_array": _numpy_copy}


def demo_trainer(ct):
    """(step(batch_indices), batches): the demo's training step (demo.train_step) at its default settings."""
    from ctransformer import nn, optim
    from ctransformer.data import bucket_batches, make_translation_corpus
    from ctransformer.demo import PAD, encode_pairs, train_step
    from ctransformer.models import TranslationTransformer
    from ctransformer.tokenizers import CharTokenizer, WordTokenizer
    corpus = make_translation_corpus(n_train=24000, n_valid=200, n_test=500, seed=0)
    src_tok, tgt_tok = CharTokenizer(), WordTokenizer()
    src_tok.build_vocab(zh for zh, _ in corpus["train"])
    tgt_tok.build_vocab(en for _, en in corpus["train"])
    ct.manual_seed(0)
    model = TranslationTransformer(len(src_tok), len(tgt_tok), d_model=64, nhead=4, num_encoder_layers=2,
                                   num_decoder_layers=2, dim_feedforward=256, dropout=0.0, pad_id=PAD)
    params = list(model.parameters())
    opt = optim.Adam(params, lr=3e-3, betas=(0.9, 0.98), eps=1e-9)
    crit = nn.CrossEntropyLoss(ignore_index=PAD, label_smoothing=0.1)
    src_ids, tgt_ids = encode_pairs(corpus["train"], src_tok, tgt_tok)
    order = bucket_batches([len(s) for s in src_ids], 64, shuffle=True, seed=0)

    def step(idx) -> None:
        train_step(model, crit, opt, params, src_ids, tgt_ids, idx)

    return step, order


def d128_trainer(ct):
    """(step(_), batches): bench_transformer.py's (b) training step (the tutorial's model at d_model
    128, its one batch of 25 % padding, CrossEntropyLoss(ignore_index=PAD), Adam), ours only."""
    sys.path.insert(0, HERE)
    import bench_transformer as bt
    bt.have_torch = lambda: False  # ours only: torch's threads would share the cores
    cfg = bt.CONFIGS["b"]
    (model, ns), _ = bt.build_pair(cfg)
    src, tgt = bt.make_batch(cfg["vocab"])
    train = bt.trainer(model, ns, ct, src, tgt)
    return (lambda _: train()), [None]


def decode_blocks(ct):
    """{name: (run(), tokens)}: greedy decoding of decode_breakdown's d512 model and its streaming floor
    (decode_breakdown's closures; the floor's one-token GEMV run 10 times a call)."""
    sys.path.insert(0, HERE)
    import decode_breakdown as D
    model, src = D.build(ct)
    fns = D.closures(ct, model, src)
    floor_token = fns["floor"][0]
    return {"greedy": fns["greedy"], "floor": (lambda: [floor_token() for _ in range(10)], 10)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--other", required=True, help="checkout whose in-place build is compared with this one")
    ap.add_argument("--threads", type=int, default=2, help="set_num_threads for both builds (default: 2)")
    ap.add_argument("--rounds", type=int, default=20, help="rounds of one block per build (default: 20)")
    ap.add_argument("--steps", type=int, default=None,
                    help="steps per block (default: 40; with --decode, greedy runs per block, default 2)")
    ap.add_argument("--decode", action="store_true", help="time greedy decoding and the streaming floor instead")
    ap.add_argument("--model", choices=("demo", "d128"), default="demo",
                    help="the training step: the demo's (default) or bench_transformer's (b) d128 step")
    args = ap.parse_args()
    if args.steps is None:
        args.steps = 2 if args.decode else 40
    sys.path.insert(0, ROOT)
    import ctransformer as ct
    import ctransformer._C as this_ext
    other_ext = load_extension(args.other)
    holders = [m for name, m in list(sys.modules.items())
               if name.startswith("ctransformer") and getattr(m, "_C", None) is this_ext]

    def use(ext) -> None:
        for m in holders:
            m._C = ext
        ext.set_num_threads(args.threads)

    if args.decode:
        compare_decoding(ct, use, this_ext, other_ext, holders, args)
        return
    step, order = demo_trainer(ct) if args.model == "demo" else d128_trainer(ct)
    batches = order * (1 + (40 + 2 * args.rounds * args.steps) // len(order))  # 40 warm-up steps first
    for ext, warm in ((this_ext, batches[:20]), (other_ext, batches[20:40])):
        use(ext)
        for idx in warm:
            step(idx)
    times = {"this": [], "other": []}
    pos = 40
    for r in range(args.rounds):
        for name in (("this", "other") if r % 2 == 0 else ("other", "this")):
            use(this_ext if name == "this" else other_ext)
            t0 = time.perf_counter()
            for idx in batches[pos:pos + args.steps]:
                step(idx)
            times[name].append((time.perf_counter() - t0) / args.steps)
            pos += args.steps
    use(this_ext)
    ratios = [a / b for a, b in zip(times["this"], times["other"])]
    print(f"ctransformer from {ROOT} (this) and {args.other} (other); {len(holders)} modules switched; "
          f"{args.threads} thread(s), {args.rounds} rounds of {args.steps} steps each")
    print(f"this  {statistics.median(times['this']) * 1e3:7.2f} ms per step (median of rounds)")
    print(f"other {statistics.median(times['other']) * 1e3:7.2f} ms per step")
    print(f"this / other: median of per-round ratios {statistics.median(ratios):.3f} "
          f"(range {min(ratios):.2f}-{max(ratios):.2f})")


def compare_decoding(ct, use, this_ext, other_ext, holders, args) -> None:
    """--decode: blocks of args.steps calls of each decode block per build, alternating."""
    blocks = decode_blocks(ct)
    for ext in (this_ext, other_ext):  # warm-up
        use(ext)
        for run, _ in blocks.values():
            run()
    times = {(block, name): [] for block in blocks for name in ("this", "other")}
    for r in range(args.rounds):
        for block, (run, per_call) in blocks.items():
            for name in (("this", "other") if r % 2 == 0 else ("other", "this")):
                use(this_ext if name == "this" else other_ext)
                t0 = time.perf_counter()
                for _ in range(args.steps):
                    run()
                times[(block, name)].append((time.perf_counter() - t0) / (args.steps * per_call))
    use(this_ext)
    print(f"ctransformer from {ROOT} (this) and {args.other} (other); {len(holders)} modules switched; "
          f"{args.threads} thread(s), {args.rounds} rounds of {args.steps} calls each; ms per token")
    for block in blocks:
        this, other = times[(block, "this")], times[(block, "other")]
        ratios = [a / b for a, b in zip(this, other)]
        print(f"{block:6s} this {statistics.median(this) * 1e3:6.3f}  other {statistics.median(other) * 1e3:6.3f}  "
              f"this / other: median of per-round ratios {statistics.median(ratios):.3f} "
              f"(range {min(ratios):.2f}-{max(ratios):.2f})")


if __name__ == "__main__":
    main()
