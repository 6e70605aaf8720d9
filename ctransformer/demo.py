"""The main job: train a small translation Transformer on the built-in
Chinese -> English corpus, report held-out accuracy and BLEU, show greedy and
beam translations, save a checkpoint and an attention heatmap.

    python -m ctransformer demo [--epochs N] [--threads N] [--output-dir DIR]

A second run with the same output directory resumes an unfinished training
from its checkpoint (model, optimizer, scheduler, RNG state), or, when the
training is complete, just evaluates and translates.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

import ctransformer as ct
from ctransformer import nn, optim
from ctransformer.data import bucket_batches, make_translation_corpus, pad_batch
from ctransformer.decoding import beam_search, greedy_decode
from ctransformer.metrics import corpus_bleu, exact_match
from ctransformer.models import TranslationTransformer
from ctransformer.tokenizers import CharTokenizer, WordTokenizer

PAD, SOS, EOS = 0, 1, 2
CHECKPOINT = "checkpoint.npz"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m ctransformer demo",
        description="Train a small Transformer to translate the built-in synthetic Chinese->English corpus "
                    "(numbers, dates, tense, plurals, word order), then report held-out exact match and BLEU, "
                    "print greedy and beam-search translations, and save a checkpoint and an attention heatmap. "
                    "Run it again with the same --output-dir to resume or to translate with the saved model.")
    p.add_argument("--epochs", type=int, default=8, help="training epochs (default: %(default)s)")
    p.add_argument("--threads", type=int, default=None,
                   help="threads for the kernels and OpenBLAS (default: all cores, or OMP_NUM_THREADS)")
    p.add_argument("--output-dir", default="ctransformer_demo",
                   help="where the checkpoint, vocabularies and heatmap go (default: ./%(default)s)")
    p.add_argument("--train-size", type=int, default=24000, help="training sentence pairs (default: %(default)s)")
    p.add_argument("--test-size", type=int, default=500, help="held-out test pairs (default: %(default)s)")
    p.add_argument("--batch-size", type=int, default=64, help="sentence pairs per batch (default: %(default)s)")
    p.add_argument("--d-model", type=int, default=64, help="model width (default: %(default)s)")
    p.add_argument("--layers", type=int, default=2, help="encoder and decoder layers each (default: %(default)s)")
    p.add_argument("--heads", type=int, default=4, help="attention heads (default: %(default)s)")
    p.add_argument("--lr", type=float, default=3e-3, help="peak learning rate (default: %(default)s)")
    p.add_argument("--dropout", type=float, default=0.0,
                   help="dropout in the Transformer (default: %(default)s: the corpus is large enough not to overfit)")
    p.add_argument("--beam-size", type=int, default=4, help="beam width for the beam-search samples (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="corpus and initialisation seed (default: %(default)s)")
    p.add_argument("--fresh", action="store_true", help="ignore an existing checkpoint and train from scratch")
    p.add_argument("--no-progress", action="store_true", help="no progress bars (plain log lines)")
    return p


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


def evaluate(model, src_tok, tgt_tok, pairs, batch_size: int = 128) -> Dict[str, float]:
    model.eval()
    hyps: List[str] = []
    for i in range(0, len(pairs), batch_size):
        chunk = pairs[i:i + batch_size]
        hyps += translate(model, src_tok, tgt_tok, [zh for zh, _ in chunk])
    refs = [en for _, en in pairs]
    return {"exact_match": exact_match(hyps, refs), "bleu": corpus_bleu(hyps, refs)}


def save_heatmap(model, src_tok, tgt_tok, zh: str, path: str) -> Optional[str]:
    """Cross-attention of the last decoder layer for one sentence, as a PNG."""
    en = translate(model, src_tok, tgt_tok, [zh])[0]
    src = ct.tensor([src_tok.encode(zh)])
    tgt_in = ct.tensor([[SOS] + tgt_tok.encode(en)])
    with ct.no_grad():
        attn = model.cross_attention_weights(src, tgt_in)[-1][0]  # last layer, (T, S)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        from ctransformer._png import write_heatmap_png
        write_heatmap_png(path, attn)
        return en
    from ctransformer.plotting import token_labels, use_cjk_font

    use_cjk_font()
    fig, ax = plt.subplots(figsize=(1 + 0.45 * attn.shape[1], 1 + 0.4 * attn.shape[0]))
    ax.imshow(attn, cmap="viridis", aspect="auto")
    ax.set_xticks(range(attn.shape[1]))
    ax.set_xticklabels(token_labels(list(zh)))
    ax.set_yticks(range(attn.shape[0]))
    ax.set_yticklabels(["<sos>"] + en.split())
    ax.set_title("decoder cross-attention (last layer, mean over heads)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return en


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    if args.threads is not None:
        ct.set_num_threads(args.threads)
    os.makedirs(args.output_dir, exist_ok=True)
    ckpt_path = os.path.join(args.output_dir, CHECKPOINT)
    started = time.time()

    corpus = make_translation_corpus(n_train=args.train_size, n_valid=200, n_test=args.test_size, seed=args.seed)
    src_tok, tgt_tok = CharTokenizer(), WordTokenizer()
    src_tok.build_vocab(zh for zh, _ in corpus["train"])
    tgt_tok.build_vocab(en for _, en in corpus["train"])
    print(f"corpus: {len(corpus['train'])} train / {len(corpus['test'])} held-out pairs; "
          f"vocab {len(src_tok)} zh chars, {len(tgt_tok)} en words; threads {ct.get_num_threads()}")

    ct.manual_seed(args.seed)
    model = TranslationTransformer(len(src_tok), len(tgt_tok), d_model=args.d_model, nhead=args.heads,
                                   num_encoder_layers=args.layers, num_decoder_layers=args.layers,
                                   dim_feedforward=4 * args.d_model, dropout=args.dropout, pad_id=PAD)
    optimizer = optim.Adam(model.parameters(), lr=args.lr, betas=(0.9, 0.98), eps=1e-9)
    src_ids, tgt_ids = encode_pairs(corpus["train"], src_tok, tgt_tok)
    batches_per_epoch = len(bucket_batches([len(s) for s in src_ids], args.batch_size, shuffle=False))
    # linear warm-up over 200 steps, then linear decay to 1 % of the peak at the last step
    total_steps, warmup = args.epochs * batches_per_epoch, 200
    scheduler = optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min((step + 1) / warmup, max(0.01, 1 - step / total_steps)))
    criterion = nn.CrossEntropyLoss(ignore_index=PAD)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: Transformer d_model={args.d_model}, {args.layers}+{args.layers} layers, "
          f"{args.heads} heads, {n_params:,} parameters")

    start_epoch = 0
    if os.path.exists(ckpt_path) and not args.fresh:
        state = ct.load(ckpt_path)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        ct.set_rng_state(state["rng"])
        start_epoch = int(state["epoch"])
        print(f"resumed from {ckpt_path} after epoch {start_epoch}")

    progress = None if args.no_progress else _tqdm()
    for epoch in range(start_epoch, args.epochs):
        model.train()
        order = bucket_batches([len(s) for s in src_ids], args.batch_size, shuffle=True,
                               seed=args.seed * 1000 + epoch)
        bar = progress(order, desc=f"epoch {epoch + 1}/{args.epochs}", leave=False) if progress else order
        total, count = 0.0, 0
        for idx in bar:
            src = ct.from_numpy(pad_batch([src_ids[i] for i in idx], PAD))
            tgt = pad_batch([tgt_ids[i] for i in idx], PAD)
            tgt_in, tgt_out = ct.from_numpy(tgt[:, :-1].copy()), ct.from_numpy(tgt[:, 1:].copy())
            logits = model(src, tgt_in)
            loss = criterion(logits.reshape(-1, logits.shape[-1]), tgt_out.reshape(-1))
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            total += loss.item()
            count += 1
            if progress:
                bar.set_postfix(loss=f"{loss.item():.3f}")
        valid = evaluate(model, src_tok, tgt_tok, corpus["valid"])
        print(f"epoch {epoch + 1:2d}: train loss {total / max(count, 1):.3f}, "
              f"valid exact match {100 * valid['exact_match']:.1f}%  ({time.time() - started:.0f} s)")
        ct.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                 "scheduler": scheduler.state_dict(), "rng": ct.get_rng_state(), "epoch": epoch + 1,
                 "src_vocab": src_tok.itos, "tgt_vocab": tgt_tok.itos}, ckpt_path)

    test = evaluate(model, src_tok, tgt_tok, corpus["test"])
    print(f"\nheld-out test: exact match {100 * test['exact_match']:.1f}%, BLEU {test['bleu']:.1f} "
          f"({len(corpus['test'])} sentences never seen in training)")
    samples = [zh for zh, _ in corpus["test"][:6]]
    greedy = translate(model, src_tok, tgt_tok, samples)
    beam = translate(model, src_tok, tgt_tok, samples, beam_size=args.beam_size)
    print(f"\n{'source':<24} greedy  |  beam (k={args.beam_size})")
    for (zh, ref), g, b in zip(corpus["test"][:6], greedy, beam):
        print(f"{zh}\n    greedy: {g}\n    beam:   {b}\n    ref:    {ref}")
    heatmap = os.path.join(args.output_dir, "attention.png")
    save_heatmap(model, src_tok, tgt_tok, samples[0], heatmap)
    print(f"\ncheckpoint: {ckpt_path}\nattention heatmap: {heatmap}\ntotal time {time.time() - started:.0f} s")
    return 0


def _tqdm():
    try:
        from tqdm.auto import tqdm
        return tqdm
    except ImportError:
        return None


if __name__ == "__main__":
    sys.exit(main())
