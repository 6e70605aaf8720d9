"""The main job: train a small translation Transformer on the built-in
Chinese -> English corpus, report held-out accuracy and BLEU, show greedy and
beam translations, save a checkpoint and an attention heatmap.

    ctransformer demo [--epochs N] [--threads N] [--output-dir DIR]
    python -m ctransformer demo ...            (the same, without the console script)

A second run with the same output directory continues an unfinished training
from its checkpoint (model, optimizer, scheduler, RNG state), or, when the
training is complete, says so and just evaluates and translates.  The
checkpoint records the options it was trained with; different options are
refused (``--fresh`` starts over).  Ctrl-C stops at once: the checkpoint is
only ever replaced whole (written aside, then renamed), so it keeps the last
finished epoch.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
import unicodedata
from typing import Dict, List, Optional, Sequence, Tuple

import ctransformer as ct
from ctransformer import nn, optim
from ctransformer.data import bucket_batches, make_translation_corpus, pad_batch
from ctransformer.decoding import beam_search, greedy_decode
from ctransformer.metrics import corpus_bleu, exact_match
from ctransformer.models import TranslationTransformer
from ctransformer.tokenizers import CharTokenizer, WordTokenizer

PAD, SOS, EOS = 0, 1, 2
CHECKPOINT = "checkpoint.pt"          # PyTorch's format: torch.load(path, weights_only=True) reads it
LEGACY_CHECKPOINT = "checkpoint.npz"   # what earlier versions wrote: converted once, on the next run
HEATMAP = "attention.png"
N_VALID = 200
N_SAMPLES = 6
INTERRUPTED = 130  # the shell's status for a process ended by SIGINT (128 + 2)

DESCRIPTION = (
    "Train a small Transformer to translate the built-in synthetic Chinese->English corpus "
    "(numbers, dates, tense, plurals, word order), then report held-out exact match and BLEU, "
    "print greedy and beam-search translations, and save a checkpoint and an attention heatmap. "
    "Run it again with the same --output-dir to continue an unfinished training or to evaluate "
    "the finished model.")

# The options a checkpoint records: continuing it with any of them changed
# would mix two runs (model shape, vocabulary, data, optimisation).
CONFIG = ("train_size", "test_size", "seed", "batch_size", "d_model", "layers", "heads", "lr", "dropout",
          "label_smoothing")


# ----------------------------------------------------------------------------------------------
# options

def _number(kind, text: str):
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected {'a whole number' if kind is int else 'a number'}, got {text!r}") from None
    if kind is float and not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def at_least(lo: int, hint: str = ""):
    """argparse type: an int >= lo."""
    def parse(text: str) -> int:
        value = _number(int, text)
        if value < lo:
            raise argparse.ArgumentTypeError(f"must be at least {lo}, got {value}{hint}")
        return value
    parse.__name__ = f"int >= {lo}"
    return parse


def positive_float(text: str) -> float:
    value = _number(float, text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {text}")
    return value


def probability(text: str) -> float:
    """argparse type: 0 <= p < 1 (a dropout rate)."""
    value = _number(float, text)
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {text}")
    return value


def add_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("--epochs", type=at_least(1, "; to evaluate a saved model without training, use --eval-only"),
                   default=8, help="train until this many epochs are done in total (default: %(default)s)")
    p.add_argument("--eval-only", action="store_true",
                   help="evaluate and translate with the checkpoint in --output-dir, without training")
    p.add_argument("--threads", type=at_least(1), default=None,
                   help="threads for the kernels and OpenBLAS (default: all cores, or OMP_NUM_THREADS)")
    p.add_argument("--output-dir", default="ctransformer_demo",
                   help="where the checkpoint and the heatmap go (default: ./%(default)s)")
    p.add_argument("--train-size", type=at_least(1), default=24000,
                   help="training sentence pairs (default: %(default)s)")
    p.add_argument("--test-size", type=at_least(1), default=500, help="held-out test pairs (default: %(default)s)")
    p.add_argument("--batch-size", type=at_least(1), default=64, help="sentence pairs per batch (default: %(default)s)")
    p.add_argument("--d-model", type=at_least(1), default=64, help="model width (default: %(default)s)")
    p.add_argument("--layers", type=at_least(1), default=2,
                   help="encoder and decoder layers each (default: %(default)s)")
    p.add_argument("--heads", type=at_least(1), default=4,
                   help="attention heads; must divide --d-model (default: %(default)s)")
    p.add_argument("--lr", type=positive_float, default=3e-3, help="peak learning rate (default: %(default)s)")
    p.add_argument("--dropout", type=probability, default=0.0,
                   help="dropout in the Transformer, in [0, 1) (default: %(default)s: the corpus is large "
                        "enough not to overfit)")
    p.add_argument("--label-smoothing", type=probability, default=0.1,
                   help="label smoothing of the cross-entropy, in [0, 1) (default: %(default)s; held-out exact "
                        "match after the default 8 epochs: ~97%% with it, ~92%% with 0)")
    p.add_argument("--beam-size", type=at_least(1), default=4,
                   help="beam width for the beam-search samples (default: %(default)s)")
    p.add_argument("--seed", type=at_least(0), default=0, help="corpus and initialisation seed (default: %(default)s)")
    p.add_argument("--fresh", action="store_true",
                   help="ignore an existing checkpoint and train from scratch (it is replaced after the first epoch)")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bars (they are only drawn when stderr is a terminal anyway)")
    return p


def build_parser(prog: Optional[str] = None) -> argparse.ArgumentParser:
    """The demo's parser on its own (``python -m ctransformer.demo``)."""
    from ctransformer.__main__ import ArgumentParser
    if prog is None:
        spec = getattr(sys.modules.get("__main__"), "__spec__", None)
        python = os.path.basename(sys.executable or "") or "python"
        by_module = spec is not None and spec.name == "ctransformer.demo"
        prog = f"{python} -m ctransformer.demo" if by_module else "ctransformer demo"
    return add_arguments(ArgumentParser(prog=prog, description=DESCRIPTION))


def check_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """The checks that involve more than one option."""
    if args.d_model % args.heads:
        divisors = [h for h in range(1, args.d_model + 1) if args.d_model % h == 0]
        parser.error(f"--heads {args.heads} does not divide --d-model {args.d_model} "
                     f"(each head gets d_model / heads dimensions); choose one of {_short_list(divisors)}")
    if args.eval_only and args.fresh:
        parser.error("--eval-only and --fresh contradict each other (--fresh trains from scratch)")


def _short_list(values: Sequence[int], n: int = 8) -> str:
    shown = ", ".join(map(str, values[:n]))
    return shown + (", ..." if len(values) > n else "")


def _option(name: str) -> str:
    return "--" + name.replace("_", "-")


def config_of(args: argparse.Namespace) -> Dict[str, object]:
    return {k: getattr(args, k) for k in CONFIG}


def config_mismatch(saved: Dict[str, object], args: argparse.Namespace) -> List[str]:
    """The names (in CONFIG order) whose saved value differs from the options."""
    current = config_of(args)
    return [k for k in CONFIG if k in saved and saved[k] != current[k]]


def mismatch_sentence(path: str, saved: Dict[str, object], args: argparse.Namespace, names: List[str]) -> str:
    was = " ".join(f"{_option(k)} {saved[k]}" for k in names)
    now = " ".join(f"{_option(k)} {getattr(args, k)}" for k in names)
    return (f"{path} was trained with {was}, not {now}; repeat those options to use it, "
            f"or add --fresh to train from scratch (or choose another --output-dir)")


# ----------------------------------------------------------------------------------------------
# tables

def display_width(text: str) -> int:
    """Terminal columns of ``text``: wide and fullwidth characters (Chinese,
    fullwidth punctuation) take two, combining marks none."""
    width = 0
    for ch in text:
        if unicodedata.combining(ch):
            continue
        width += 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1
    return width


def pad_to(text: str, width: int) -> str:
    return text + " " * max(0, width - display_width(text))


def truncate(text: str, width: int) -> str:
    """``text`` cut to ``width`` display columns, with an ellipsis when cut."""
    if display_width(text) <= width:
        return text
    out = ""
    for ch in text:
        if display_width(out + ch) > width - 1:
            break
        out += ch
    return out + "…"


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]], sep: str = " | ") -> List[str]:
    """Rows of cells as aligned lines (by display width), a rule under the header."""
    widths = [max(display_width(c) for c in column) for column in zip(header, *rows)]
    lines = [sep.join(pad_to(c, w) for c, w in zip(row, widths)).rstrip() for row in [header, *rows]]
    rule = "-+-".join("-" * w for w in widths)
    return [lines[0], rule, *lines[1:]]


# ----------------------------------------------------------------------------------------------

def encode_pairs(pairs, src_tok, tgt_tok) -> Tuple[List[List[int]], List[List[int]]]:
    src = [src_tok.encode(zh) for zh, _ in pairs]
    tgt = [tgt_tok.encode(en, add_sos=True, add_eos=True) for _, en in pairs]
    return src, tgt


def translate(model, src_tok, tgt_tok, sentences: Sequence[str], beam_size: int = 1,
              max_len: int = 24) -> List[str]:
    """Translate Chinese sentences (greedy when beam_size == 1)."""
    if not sentences:
        return []
    ids = [src_tok.encode(s) or [PAD] for s in sentences]
    src = ct.from_numpy(pad_batch(ids, PAD))
    with ct.no_grad():
        if beam_size == 1:
            out = greedy_decode(model, src, max_len=max_len, sos_id=SOS, eos_id=EOS)
        else:
            out, _scores = beam_search(model, src, beam_size=beam_size, max_len=max_len, sos_id=SOS, eos_id=EOS,
                                       length_penalty=1.0)
    rows = out.tolist() if hasattr(out, "tolist") else out
    results = []
    for s, row in zip(sentences, rows):
        results.append("" if not s.strip() else tgt_tok.decode(row, skip_special=True, stop_at_eos=True))
    return results


def train_step(model, criterion, optimizer, params, src_ids: Sequence[List[int]], tgt_ids: Sequence[List[int]],
               idx: Sequence[int]):
    """One training step on the pairs ``idx``: pad the batch, teacher-forced
    forward, loss, backward, gradient clipping to norm 1, optimizer step.
    Returns the loss (a 0-d Tensor).  Also timed by bench/ab_step.py."""
    src = ct.from_numpy(pad_batch([src_ids[i] for i in idx], PAD))
    tgt = pad_batch([tgt_ids[i] for i in idx], PAD)
    tgt_in, tgt_out = ct.from_numpy(tgt[:, :-1].copy()), ct.from_numpy(tgt[:, 1:].copy())
    logits = model(src, tgt_in)
    loss = criterion(logits.reshape(-1, logits.shape[-1]), tgt_out.reshape(-1))
    optimizer.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(params, 1.0)
    optimizer.step()
    return loss


def evaluate(model, src_tok, tgt_tok, pairs, batch_size: int = 128) -> Dict[str, float]:
    model.eval()
    hyps: List[str] = []
    for i in range(0, len(pairs), batch_size):
        chunk = pairs[i:i + batch_size]
        hyps += translate(model, src_tok, tgt_tok, [zh for zh, _ in chunk])
    refs = [en for _, en in pairs]
    return {"exact_match": exact_match(hyps, refs), "bleu": corpus_bleu(hyps, refs)}



def save_heatmap(model, src_tok, tgt_tok, zh: str, path: str) -> str:
    """Cross-attention of the last decoder layer (mean over heads) for one
    sentence, as a PNG; returns the translation plotted."""
    from ctransformer.plotting import attention_heatmap
    en = translate(model, src_tok, tgt_tok, [zh])[0]
    src = ct.tensor([src_tok.encode(zh)])
    tgt_in = ct.tensor([[SOS] + tgt_tok.encode(en)])
    with ct.no_grad():
        attn = model.cross_attention_weights(src, tgt_in)[-1][0]  # last layer, (T, S)
    attention_heatmap(attn, src_tok.tokenize(zh), ["<sos>"] + tgt_tok.tokenize(en),
                      title="decoder cross-attention (last layer, mean over heads)",
                      xlabel="source (Chinese characters)", ylabel="target (decoder input: English words)",
                      path=path)
    return en


def _progress_bar(args):
    """tqdm's bar class when stderr is a terminal (and --no-progress is not given), else None."""
    if args.no_progress or not (hasattr(sys.stderr, "isatty") and sys.stderr.isatty()):
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm


class _Status:
    """What is on disk, for the message after Ctrl-C."""

    def __init__(self, path: str):
        self.path, self.saved_epoch, self.total = path, None, None


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m ctransformer.demo [options]`` (also reachable as ``ctransformer demo``)."""
    parser = build_parser()
    return run(parser.parse_args(argv), parser)


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Run the demo with parsed options; ``parser`` reports option errors (exit 2)."""
    status = _Status(os.path.join(args.output_dir, CHECKPOINT))
    try:
        return _run(args, parser, status)
    except KeyboardInterrupt:
        sys.stdout.flush()
        if status.saved_epoch:
            kept = (f"{status.path} holds epoch {status.saved_epoch}"
                    + ("" if status.saved_epoch >= status.total else "; the same command continues from there"))
        else:
            kept = "nothing was saved"
        print(f"\ninterrupted: {kept}", file=sys.stderr)
        return INTERRUPTED


def _convert_legacy_checkpoint(output_dir: str, ckpt_path: str) -> None:
    """An earlier version's checkpoint.npz, and no checkpoint.pt yet: rewrite
    it once in PyTorch's format (atomically), remove the old file, say so."""
    legacy = os.path.join(output_dir, LEGACY_CHECKPOINT)
    if os.path.exists(ckpt_path) or not os.path.exists(legacy):
        return
    ct.save(ct.load(legacy), ckpt_path)
    os.remove(legacy)
    print(f"converted {legacy} (an earlier version's format) to {ckpt_path}, PyTorch's checkpoint format")


def _run(args, parser, status: _Status) -> int:
    check_args(args, parser)
    if os.path.exists(args.output_dir) and not os.path.isdir(args.output_dir):
        parser.error(f"--output-dir {args.output_dir} is a file, not a directory")
    if args.threads is not None:
        ct.set_num_threads(args.threads)
    ckpt_path = status.path
    status.total = args.epochs
    started = time.time()

    state = None
    if not args.fresh:
        _convert_legacy_checkpoint(args.output_dir, ckpt_path)
    if os.path.exists(ckpt_path) and not args.fresh:
        try:
            state = ct.load(ckpt_path)
        except Exception as err:  # not ours, or damaged
            parser.error(f"cannot read {ckpt_path} ({type(err).__name__}: {err}); "
                         f"add --fresh to train from scratch, or choose another --output-dir")
        saved = dict(state.get("config") or {})
        differing = config_mismatch(saved, args)
        if differing:
            parser.error(mismatch_sentence(ckpt_path, saved, args, differing))
        status.saved_epoch = int(state["epoch"])
    elif args.eval_only:
        parser.error(f"--eval-only needs a checkpoint, and {ckpt_path} does not exist; train first "
                     f"(without --eval-only) or point --output-dir at a finished run")

    os.makedirs(args.output_dir, exist_ok=True)
    try:
        corpus = make_translation_corpus(n_train=args.train_size, n_valid=N_VALID, n_test=args.test_size,
                                         seed=args.seed)
    except ValueError as err:  # more distinct sentences asked for than the grammar has
        parser.error(f"--train-size {args.train_size} / --test-size {args.test_size}: {err}")
    src_tok, tgt_tok = CharTokenizer(), WordTokenizer()
    src_tok.build_vocab(zh for zh, _ in corpus["train"])
    tgt_tok.build_vocab(en for _, en in corpus["train"])
    print(f"corpus: {len(corpus['train'])} train / {len(corpus['test'])} held-out pairs; "
          f"vocab {len(src_tok)} zh chars, {len(tgt_tok)} en words; threads {ct.get_num_threads()}", flush=True)

    ct.manual_seed(args.seed)
    model = TranslationTransformer(len(src_tok), len(tgt_tok), d_model=args.d_model, nhead=args.heads,
                                   num_encoder_layers=args.layers, num_decoder_layers=args.layers,
                                   dim_feedforward=4 * args.d_model, dropout=args.dropout, pad_id=PAD)
    params = list(model.parameters())  # walked every step by clip_grad_norm_: not re-collected each time
    optimizer = optim.Adam(params, lr=args.lr, betas=(0.9, 0.98), eps=1e-9)
    src_ids, tgt_ids = encode_pairs(corpus["train"], src_tok, tgt_tok)
    batches_per_epoch = len(bucket_batches([len(s) for s in src_ids], args.batch_size, shuffle=False))
    # linear warm-up over 200 steps, then linear decay to 1 % of the peak at the last step
    total_steps, warmup = args.epochs * batches_per_epoch, 200
    scheduler = optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min((step + 1) / warmup, max(0.01, 1 - step / total_steps)))
    criterion = nn.CrossEntropyLoss(ignore_index=PAD, label_smoothing=args.label_smoothing)
    n_params = sum(p.numel() for p in params)
    print(f"model: Transformer d_model={args.d_model}, {args.layers}+{args.layers} layers, "
          f"{args.heads} heads, {n_params:,} parameters", flush=True)

    start_epoch = 0
    if state is not None:
        if (list(state.get("src_vocab", src_tok.itos)) != list(src_tok.itos)
                or list(state.get("tgt_vocab", tgt_tok.itos)) != list(tgt_tok.itos)):
            parser.error(f"{ckpt_path} was trained on another vocabulary (another corpus); "
                         f"add --fresh to train from scratch, or choose another --output-dir")
        try:
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            scheduler.load_state_dict(state["scheduler"])
        except (KeyError, ValueError, RuntimeError):  # a checkpoint without its options recorded
            parser.error(f"{ckpt_path} does not fit these options (its weights have other shapes); "
                         f"add --fresh to train from scratch, or choose another --output-dir")
        ct.set_rng_state(state["rng"])
        start_epoch = int(state["epoch"])
        if args.eval_only:
            print(f"evaluating {ckpt_path} after epoch {start_epoch} (--eval-only: no training)")
        elif start_epoch >= args.epochs:
            more = f" (more than --epochs {args.epochs})" if start_epoch > args.epochs else ""
            print(f"{ckpt_path} is already trained for {start_epoch} epochs{more}; "
                  f"--fresh retrains, --epochs N continues (N > {start_epoch})")
        else:
            print(f"resumed from {ckpt_path} after epoch {start_epoch}; training to epoch {args.epochs}")
    del state

    bar_class = _progress_bar(args)
    last_epoch = start_epoch if args.eval_only else args.epochs
    for epoch in range(start_epoch, last_epoch):
        model.train()
        order = bucket_batches([len(s) for s in src_ids], args.batch_size, shuffle=True,
                               seed=args.seed * 1000 + epoch)
        bar = bar_class(order, desc=f"epoch {epoch + 1}/{args.epochs}", leave=False) if bar_class else None
        total, count = 0.0, 0
        try:
            for idx in (bar if bar is not None else order):
                loss = train_step(model, criterion, optimizer, params, src_ids, tgt_ids, idx)
                scheduler.step()
                total += loss.item()
                count += 1
                if bar is not None:
                    bar.set_postfix(loss=f"{loss.item():.3f}", refresh=False)
        finally:
            if bar is not None:
                bar.close()
        valid = evaluate(model, src_tok, tgt_tok, corpus["valid"])
        print(f"epoch {epoch + 1:2d}: train loss {total / max(count, 1):.3f}, "
              f"valid exact match {100 * valid['exact_match']:.1f}%  ({time.time() - started:.0f} s)", flush=True)
        ct.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                 "scheduler": scheduler.state_dict(), "rng": ct.get_rng_state(), "epoch": epoch + 1,
                 "config": config_of(args), "src_vocab": src_tok.itos, "tgt_vocab": tgt_tok.itos}, ckpt_path)
        status.saved_epoch = epoch + 1

    test = evaluate(model, src_tok, tgt_tok, corpus["test"])
    print(f"\nheld-out test: exact match {100 * test['exact_match']:.1f}%, BLEU {test['bleu']:.1f} "
          f"({len(corpus['test'])} sentences never seen in training)")
    chosen = corpus["test"][:N_SAMPLES]
    samples = [zh for zh, _ in chosen]
    greedy = translate(model, src_tok, tgt_tok, samples)
    beam = translate(model, src_tok, tgt_tok, samples, beam_size=args.beam_size)
    rows = [(zh, ref, _mark(g, ref), _mark(b, ref)) for (zh, ref), g, b in zip(chosen, greedy, beam)]
    print("\nsamples (✓ = the reference exactly):")
    for line in format_table(("source", "reference", "greedy", f"beam (k={args.beam_size})"), rows):
        print("  " + line)
    heatmap = os.path.join(args.output_dir, HEATMAP)
    save_heatmap(model, src_tok, tgt_tok, samples[0], heatmap)
    print(f"\ncheckpoint: {ckpt_path}\nattention heatmap: {heatmap}\ntotal time {time.time() - started:.0f} s")
    return 0


def _mark(hypothesis: str, reference: str, width: int = 40) -> str:
    return "✓" if hypothesis == reference else truncate(hypothesis, width)


if __name__ == "__main__":
    sys.exit(main())
