# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 07 · Training a Transformer to translate Chinese → English (机器翻译)
#
# The classic Transformer tutorial trains a 3+3-layer model on translation2019zh (1.2 GB, a data-centre
# GPU). We keep its recipe — sentence pairs with `<sos>`/`<eos>`, padding and masks, teacher-forced training with
# shifted targets, Adam, gradient clipping, autoregressive (自回归) decoding — and shrink the problem so
# it trains on a laptop CPU in about two minutes: ctransformer ships a **synthetic corpus** generated from
# a small Chinese/English grammar (numbers, dates, tenses, plurals, classifiers, word order). Then we
# decode held-out sentences greedily and with beam search, score them with exact match and **BLEU**,
# read the C that runs each decoding step, and look at the cross-attention to see which characters each
# English word was read from.

# %%
import math
import time
import warnings

import matplotlib.pyplot as plt
import numpy as np

warnings.filterwarnings("ignore", message="IProgress not found")   # without ipywidgets tqdm draws text bars
from tqdm.auto import tqdm

import ctransformer as torch
import ctransformer.nn as nn
import ctransformer.optim as optim
from ctransformer import masks
from ctransformer.data import bucket_batches, make_translation_corpus, pad_batch
from ctransformer.decoding import beam_search, greedy_decode
from ctransformer.metrics import corpus_bleu, exact_match, sentence_bleu
from ctransformer.models import TranslationTransformer
from ctransformer.plotting import attention_heatmap
from ctransformer.tokenizers import CharTokenizer, WordTokenizer

torch.manual_seed(0)
torch.set_num_threads(1)   # small matrices: one thread beats two, and a busy machine cannot stall it
plt.rcParams["figure.dpi"] = 90
# (Chinese labels need no font on your machine: ctransformer.plotting brings a small one along.)

# %% [markdown]
# ## 1. The corpus
#
# `make_translation_corpus` draws distinct sentence pairs from the grammar; the test split never shares a
# Chinese sentence with the training split, so held-out scores measure generalisation, not memory.

# %%
N_TRAIN = 24000
corpus = make_translation_corpus(n_train=N_TRAIN, n_valid=200, n_test=300, seed=0)
print({k: len(v) for k, v in corpus.items()})
for zh, en in corpus["train"][:8]:
    print(f"{zh:<18} {en}")

# %% [markdown]
# ## 2. Tokens and ids
#
# Chinese is split into characters (`CharTokenizer`, 字符级), English into words and punctuation
# (`WordTokenizer`). Both vocabularies begin with the special tokens `<pad>` = 0, `<sos>` = 1,
# `<eos>` = 2, `<unk>` = 3. The source gets no special tokens; the target is wrapped in `<sos> … <eos>`.

# %%
src_tok = CharTokenizer().build_vocab(zh for zh, _ in corpus["train"])
tgt_tok = WordTokenizer().build_vocab(en for _, en in corpus["train"])
PAD, SOS, EOS = tgt_tok.pad_id, tgt_tok.sos_id, tgt_tok.eos_id
print(f"{len(src_tok)} Chinese characters, {len(tgt_tok)} English words")
zh, en = corpus["train"][0]
print(zh, "->", src_tok.encode(zh))
print(en, "->", tgt_tok.encode(en, add_sos=True, add_eos=True))

src_ids = [src_tok.encode(zh) for zh, _ in corpus["train"]]
tgt_ids = [tgt_tok.encode(en, add_sos=True, add_eos=True) for _, en in corpus["train"]]

# %% [markdown]
# ## 3. Batches, shifted targets and masks
#
# Sentences of similar length are grouped (`bucket_batches`) so little padding is needed, then padded
# with `<pad>` (`pad_batch`). As in the classic tutorial, the decoder input is the target without its last
# token and the label is the target without its first:
#
# ```
# target      <sos> she has five rabbits . <eos>
# tgt_in      <sos> she has five rabbits .          (what the decoder reads)
# tgt_out           she has five rabbits . <eos>    (what it must predict at each position)
# ```
#
# Inside `TranslationTransformer` the source padding becomes a key-padding mask (for encoder
# self-attention and for cross-attention) and the decoder gets the causal mask; here they are for one
# batch.

# %%
BATCH = 64
batch_idx = bucket_batches([len(s) for s in src_ids], BATCH, shuffle=True, seed=0)[0][:6]
src_b = pad_batch([src_ids[i] for i in batch_idx], PAD)
tgt_b = pad_batch([tgt_ids[i] for i in batch_idx], PAD)
tgt_in, tgt_out = tgt_b[:, :-1], tgt_b[:, 1:]
print("src", src_b.shape, " tgt_in", tgt_in.shape, " tgt_out", tgt_out.shape)

fig, axes = plt.subplots(1, 2, figsize=(10, 3))
axes[0].imshow(masks.key_padding_mask(src_b, PAD).numpy(), cmap="Reds", vmin=0, vmax=1, aspect="auto")
axes[0].set(title="source key-padding mask (True = pad, hidden)", xlabel="source position", ylabel="sentence")
axes[1].imshow(masks.causal_mask(tgt_in.shape[1]).numpy(), cmap="Reds", vmin=0, vmax=1)
axes[1].set(title="decoder causal mask (True = hidden)", xlabel="key position", ylabel="query position")
plt.tight_layout()
plt.show()

# %% [markdown]
# ## 4. The model
#
# `TranslationTransformer` is notebooks 01–06 assembled: embeddings × √d_model + positional encoding,
# a stack of post-norm `nn.TransformerEncoderLayer`s, a stack of `nn.TransformerDecoderLayer`s, and a
# linear `generator` to the English vocabulary. Ours is small: `d_model = 64`, 4 heads, 2 + 2 layers.
# Dropout is off: the grammar produces endless fresh sentences, so there is little to overfit and
# dropout would only slow the two-minute budget down.

# %%
model = TranslationTransformer(len(src_tok), len(tgt_tok), d_model=64, nhead=4, num_encoder_layers=2,
                               num_decoder_layers=2, dim_feedforward=256, dropout=0.0, pad_id=PAD)
print(f"{sum(p.numel() for p in model.parameters()):,} parameters")

# %% [markdown]
# ## 5. Training
#
# The classic tutorials' optimiser settings (Adam, β = (0.9, 0.98), ε = 1e-9), a learning rate that warms up
# linearly (the original paper's remedy for post-norm stacks, notebook 06) and then decays linearly to
# almost zero by the last step — the small final steps are what turn "nearly right" into exactly right
# numbers and dates — cross-entropy that ignores `<pad>` labels, and gradient clipping at norm 1.

# %%
EPOCHS = 6
criterion = nn.CrossEntropyLoss(ignore_index=PAD)
optimizer = optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.98), eps=1e-9)
lengths = [len(s) for s in src_ids]
total_steps = EPOCHS * len(bucket_batches(lengths, BATCH, shuffle=False))
warmup = 200
scheduler = optim.lr_scheduler.LambdaLR(optimizer, lambda s: min((s + 1) / warmup, max(0.01, 1 - s / total_steps)))


def translate(sentences, beam_size=1, max_len=24):
    """Chinese sentences -> English strings (greedy when beam_size == 1)."""
    src = torch.from_numpy(pad_batch([src_tok.encode(s) for s in sentences], PAD))
    with torch.no_grad():
        if beam_size == 1:
            out = greedy_decode(model, src, max_len=max_len, sos_id=SOS, eos_id=EOS)
        else:
            out, scores = beam_search(model, src, beam_size=beam_size, max_len=max_len, sos_id=SOS, eos_id=EOS)
    return [tgt_tok.decode(row, skip_special=True, stop_at_eos=True) for row in out.tolist()]


def evaluate(pairs, beam_size=1):
    hyps = []
    for i in range(0, len(pairs), 100):
        hyps += translate([zh for zh, _ in pairs[i:i + 100]], beam_size)
    refs = [en for _, en in pairs]
    return hyps, exact_match(hyps, refs), corpus_bleu(hyps, refs)


losses, valid_em = [], []
t0 = time.time()
for epoch in range(EPOCHS):
    model.train()
    order = bucket_batches(lengths, BATCH, shuffle=True, seed=epoch)
    bar = tqdm(order, desc=f"epoch {epoch + 1}/{EPOCHS}", mininterval=2)
    for idx in bar:
        src = torch.from_numpy(pad_batch([src_ids[i] for i in idx], PAD))
        tgt = pad_batch([tgt_ids[i] for i in idx], PAD)
        logits = model(src, torch.from_numpy(tgt[:, :-1].copy()))                # (B, T, vocab)
        loss = criterion(logits.reshape(-1, logits.shape[-1]), torch.from_numpy(tgt[:, 1:].copy()).reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
        bar.set_postfix(loss=f"{loss.item():.3f}", refresh=False)
    model.eval()
    valid_em.append(evaluate(corpus["valid"])[1])
    print(f"epoch {epoch + 1}: train loss {np.mean(losses[-len(order):]):.3f}, "
          f"valid exact match {valid_em[-1]:.1%}  ({time.time() - t0:.0f} s)")

fig, axes = plt.subplots(1, 2, figsize=(11, 3.5))
axes[0].semilogy(losses)
axes[0].set(xlabel="step", ylabel="cross-entropy (log)", title="training loss")
axes[1].plot(range(1, EPOCHS + 1), valid_em, "o-")
axes[1].set(xlabel="epoch", ylabel="exact match", title="validation sentences translated exactly", ylim=(0, 1))
plt.tight_layout()
plt.show()

# %% [markdown]
# ## 6. Held-out evaluation
#
# **Exact match**: the share of test sentences translated word for word like the reference. **BLEU**
# (corpus-level, sacrebleu's `13a` tokenisation): the geometric mean of 1- to 4-gram precisions times a
# brevity penalty, 0–100.

# %%
model.eval()
greedy_hyps, em, bleu = evaluate(corpus["test"])
print(f"greedy decoding on {len(corpus['test'])} held-out sentences: exact match {em:.1%}, BLEU {bleu:.1f}")
assert em >= 0.90, f"held-out exact match {em:.1%} < 90%"

# %% [markdown]
# ## 7. Greedy and beam search
#
# **Greedy decoding** (贪心解码) takes the single most likely word at each step — the classic tutorial's
# `translate_sentence`. **Beam search** (束搜索) keeps the `k` most likely partial translations at every
# step and returns the best complete one; it can recover when the locally best word leads to a worse
# sentence. Both use the model's key/value cache, so each step costs one new position.

# %%
samples = corpus["test"][:8]
beam = translate([zh for zh, _ in samples], beam_size=4)
for (zh, ref), g, b in zip(samples, greedy_hyps[:8], beam):
    print(f"{zh}\n   greedy: {g}\n   beam 4: {b}\n   ref:    {ref}   (sentence BLEU {sentence_bleu(b, ref):.0f})")
_, em_beam, bleu_beam = evaluate(corpus["test"], beam_size=4)
print(f"\nbeam search (k=4) on the test set: exact match {em_beam:.1%}, BLEU {bleu_beam:.1f}")

# %% [markdown]
# ### The C that ran at each decoding step
# With the cache, a decoding step does not re-run attention over the whole prefix: the new position's
# key and value are appended to the cache (`kv_cache_append`), and its query attends over the cached
# slots (`attend_step`: the scores `q · k / √d_k`, the softmax, the weighted sum of values — for one
# query per sequence and head). `kernels.source(name)` shows both exactly as compiled into ctransformer
# (comment first; one template serves float32 and float64: `FN(name)` is `name_f32` / `_f64`, `real` is
# `float` / `double`); `step_scores` and `step_mix` are the two halves `attend_step` calls.

# %%
from IPython.display import display

from ctransformer import kernels

display(kernels.source("kv_cache_append"), kernels.source("attend_step"), kernels.source("step_scores"),
        kernels.source("step_mix"))

# %% [markdown]
# And the mistakes, if any — the hardest cases are usually long numbers and dates, where one digit
# read from the wrong position changes the whole number.

# %%
wrong = [(zh, h, en) for (zh, en), h in zip(corpus["test"], greedy_hyps) if h != en]
print(f"{len(wrong)} of {len(corpus['test'])} wrong")
for zh, h, en in wrong[:6]:
    print(f"{zh}\n   model: {h}\n   ref:   {en}")

# %% [markdown]
# ## 8. Where the decoder looks: cross-attention
#
# `nn.TransformerDecoderLayer` does not return its attention weights, so we run the last decoder layer
# by hand — exactly the post-norm formula of notebook 06 — and ask its cross-attention module
# (`multihead_attn`) for the weights: one row per English token being produced (query), one column per
# Chinese character (key), averaged over the heads.

# %%
def cross_attention(zh, en):
    src = torch.tensor([src_tok.encode(zh)])
    tgt_in = torch.tensor([[SOS] + tgt_tok.encode(en)])
    T = tgt_in.shape[1]
    with torch.no_grad():
        memory, src_pad = model.encode(src)
        x = model.pos_encoder(model.tgt_embed(tgt_in) * math.sqrt(model.d_model))
        *lower, last = model.decoder.layers
        for layer in lower:
            x = layer(x, memory, tgt_mask=masks.causal_mask(T), memory_key_padding_mask=src_pad)
        sa = last.self_attn(x, x, x, attn_mask=masks.causal_mask(T), need_weights=False)[0]
        x = last.norm1(x + sa)                                          # post-norm self-attention block
        _, weights = last.multihead_attn(x, memory, memory, key_padding_mask=src_pad)   # (1, T, S), head mean
    return weights[0].numpy()

zh, _ = next(p for p, h in zip(corpus["test"], greedy_hyps)           # a correctly translated date
              if h == p[1] and any(c.isdigit() for c in p[0]) and len(p[0]) >= 10)
en = translate([zh])[0]
w = cross_attention(zh, en)
attention_heatmap(w, list(zh), ["<sos>"] + en.split(), title="last decoder layer: cross-attention (mean over heads)",
                  xlabel="Chinese character (key)", ylabel="decoder input token (query)")
plt.show()

# %% [markdown]
# Each row is the decoder at the moment it produces the *next* English word (the row labelled `<sos>`
# produces the first word). Bright cells show where it reads from: numbers attend to their digits or
# numeral characters, nouns to their Chinese nouns — often one step ahead, because the row's query is
# the previous word. The model learned this alignment (对齐) from sentence pairs alone: nobody told it
# which character translates to which word.
