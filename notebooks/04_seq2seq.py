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
# # 04 · Sequence to sequence (序列到序列, Seq2Seq) with LSTMs
#
# An RNN emits one output per input step, so the output is as long as the input. Translation needs
# something else: read a whole sentence, then write a sentence of another length. The
# **encoder–decoder** (编码器–解码器) architecture does that with two LSTMs:
#
# * the **encoder** reads the source and keeps only its final `(h, c)` — the **context vector**
#   (中间向量 / 语义向量) that must summarise the whole input;
# * the **decoder** starts from that state, is fed a start token, and generates one token per step,
#   feeding each prediction back in as the next input.
#
# We reproduce the classic tutorial's toy task: eight character-level word pairs (`man → woman`,
# `black → white`, ...), with its Encoder / Decoder / Seq2Seq classes ported to ctransformer — and with
# two of its bugs fixed (the target layout and a one-step misalignment in the loss, see below).

# %%
import random
import time
import warnings

import matplotlib.pyplot as plt
import numpy as np

warnings.filterwarnings("ignore", message="IProgress not found")   # without ipywidgets tqdm draws text bars
from tqdm.auto import tqdm

import ctransformer as torch
import ctransformer.nn as nn
import ctransformer.optim as optim
from ctransformer.data import (ANTONYM_CHARS, ANTONYM_PAIRS, ANTONYM_VOCAB, decode_antonym, make_antonym_batch,
                               make_antonym_test_batch)

torch.manual_seed(0)
torch.set_num_threads(1)   # tiny matrices: one thread beats two, and a busy machine cannot stall it
random.seed(0)
plt.rcParams["figure.dpi"] = 90

# %% [markdown]
# ## 1. The data
#
# The vocabulary is `S` (start), `E` (end), `P` (padding) and `a`–`z`. Every word is padded with `P` to
# `n_step = 8` characters. For each pair the batch holds three rows, in the classic tutorial's time-major
# layout `(seq_len, batch)`:
#
# | tensor | content for `man → woman` | length |
# |---|---|---|
# | encoder input | `manPPPPP` | 8 |
# | decoder input | `SwomanPPP` | 9 |
# | decoder target | `womanEPPP` | 9 |
#
# The decoder reads `S w o m a n` and must answer `w o m a n E`: at every step the target is the *next*
# character. (The classic tutorial pads the target *before* appending `E`, giving `womanPPPE`; since the
# loss ignores `P`, its model is never taught to stop right after the word.)

# %%
src, dec_in, dec_tgt = (torch.tensor(a) for a in make_antonym_batch(ANTONYM_PAIRS, n_step=8))
print("encoder input ", tuple(src.shape), " decoder input", tuple(dec_in.shape), " target", tuple(dec_tgt.shape))
show = lambda ids: "".join(ANTONYM_CHARS[i] for i in ids)
for b in range(3):
    print(f"{show(src[:, b].tolist())}   {show(dec_in[:, b].tolist())}   {show(dec_tgt[:, b].tolist())}")
PAD, START, END = ANTONYM_VOCAB["P"], ANTONYM_VOCAB["S"], ANTONYM_VOCAB["E"]
n_class = len(ANTONYM_CHARS)

# %% [markdown]
# ## 2. Encoder, decoder, and the model that drives them
#
# The classes follow the classic tutorial line by line (`nn.LSTM` without `batch_first`, so tensors are
# `(seq_len, batch, features)`).

# %%
class Encoder(nn.Module):
    def __init__(self, input_dim, emb_dim, hid_dim, n_layers, dropout):
        super().__init__()
        self.hid_dim, self.n_layers = hid_dim, n_layers
        self.embedding = nn.Embedding(input_dim, emb_dim)
        self.rnn = nn.LSTM(emb_dim, hid_dim, n_layers, dropout=dropout)
        self.dropout = nn.Dropout(dropout)

    def forward(self, src):                                  # src: (src_len, batch)
        embedded = self.dropout(self.embedding(src))         # (src_len, batch, emb_dim)
        outputs, (hidden, cell) = self.rnn(embedded)         # hidden, cell: (n_layers, batch, hid_dim)
        return hidden, cell


class Decoder(nn.Module):
    def __init__(self, output_dim, emb_dim, hid_dim, n_layers, dropout):
        super().__init__()
        self.output_dim, self.hid_dim, self.n_layers = output_dim, hid_dim, n_layers
        self.embedding = nn.Embedding(output_dim, emb_dim)
        self.rnn = nn.LSTM(emb_dim, hid_dim, n_layers, dropout=dropout)
        self.fc_out = nn.Linear(hid_dim, output_dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, input, hidden, cell):                 # input: (batch,) one token per sequence
        embedded = self.dropout(self.embedding(input.unsqueeze(0)))      # (1, batch, emb_dim)
        output, (hidden, cell) = self.rnn(embedded, (hidden, cell))      # output: (1, batch, hid_dim)
        prediction = self.fc_out(output.squeeze(0))                       # (batch, output_dim)
        return prediction, hidden, cell

# %% [markdown]
# **Teacher forcing** (教师强制): during training, the decoder's next input is the true previous
# character with probability `teacher_forcing_ratio`, and its own prediction otherwise. Pure teacher
# forcing trains fast but the model never practises recovering from its own mistakes; mixing the two
# is the classic tutorial's compromise.
#
# Our `forward` returns one prediction per **decoder input** position, `outputs[t]` being the
# prediction after reading `dec_input[t]`, so it lines up with `dec_target[t]`. (The classic tutorial fills
# `outputs[0]` with zeros, starts predicting at `t = 1`, then compares `outputs[1:]` with
# `target[1:]` — shifted by one: the prediction made after `S` is scored against the *second* letter.)

# %%
class Seq2Seq(nn.Module):
    def __init__(self, encoder, decoder):
        super().__init__()
        assert encoder.hid_dim == decoder.hid_dim and encoder.n_layers == decoder.n_layers
        self.encoder, self.decoder = encoder, decoder

    def forward(self, src, trg, teacher_forcing_ratio=0.5):
        """src (src_len, batch), trg = decoder input (trg_len, batch) starting with S
        -> logits (trg_len, batch, vocab): outputs[t] predicts the character after trg[t]."""
        hidden, cell = self.encoder(src)                      # the context: final (h, c) of the encoder
        input = trg[0]                                        # the start token S for every sequence
        outputs = []
        for t in range(trg.shape[0]):
            output, hidden, cell = self.decoder(input, hidden, cell)
            outputs.append(output)
            if t + 1 < trg.shape[0]:
                teacher_force = random.random() < teacher_forcing_ratio
                input = trg[t + 1] if teacher_force else output.argmax(1)
        return torch.stack(outputs)                           # (trg_len, batch, vocab)

# %% [markdown]
# ## 3. Training
#
# The classic tutorial's sizes (embedding 32, hidden 128, one layer) and loss (cross-entropy that ignores
# `P`). It runs 5000 epochs at learning rate 0.001; a larger rate, 0.005, gets there in a few hundred.

# %%
hidden_dim, emb_dim = 128, 32
model = Seq2Seq(Encoder(n_class, emb_dim, hidden_dim, n_layers=1, dropout=0.0),
                Decoder(n_class, emb_dim, hidden_dim, n_layers=1, dropout=0.0))
criterion = nn.CrossEntropyLoss(ignore_index=PAD)
optimizer = optim.Adam(model.parameters(), lr=5e-3)

losses = []
t0 = time.time()
for epoch in tqdm(range(400), desc="seq2seq", mininterval=1):
    optimizer.zero_grad()
    outputs = model(src, dec_in, teacher_forcing_ratio=0.5)         # (9, 8, vocab)
    loss = criterion(outputs.reshape(-1, n_class), dec_tgt.reshape(-1))
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
print(f"{time.time() - t0:.1f} s, final loss {losses[-1]:.4f}")

plt.figure(figsize=(6, 3))
plt.semilogy(losses)
plt.xlabel("epoch (one batch of the 8 pairs)")
plt.ylabel("cross-entropy (log)")
plt.title("Seq2Seq training loss")
plt.show()

# %% [markdown]
# ### The C that ran: the loss
# The encoder and decoder are the LSTM kernel of notebook 03; what this notebook adds is the loss.
# `kernels.source(name)` shows its C exactly as compiled into ctransformer (comment first; one template
# serves float32 and float64: `FN(name)` is `name_f32` / `_f64`, `real` is `float` / `double`). The
# forward keeps each row's log-sum-exp for the backward, skips rows whose target is `ignore_index` (our
# `P`) and divides by the number of rows it kept; the backward gives `softmax(z) - onehot(target)`
# (scaled) to the kept rows only (`row_backward`), so padding never pulls on the model.

# %%
from IPython.display import display

from ctransformer import kernels

display(kernels.source("cross_entropy_forward"), kernels.source("cross_entropy_backward"))

# %% [markdown]
# ## 4. Translating: greedy decoding
#
# At inference there is no target: the decoder gets `S`, and from then on only its own previous
# prediction (`teacher_forcing_ratio=0`), one step at a time, until it emits `E`. Taking the most
# likely character at each step is **greedy decoding** (贪心解码).

# %%
def translate(word, max_len=9):
    enc_input, _ = make_antonym_test_batch(word, n_step=8)         # (8, 1)
    model.eval()
    with torch.no_grad():
        hidden, cell = model.encoder(torch.tensor(enc_input))
        token, out, probs = torch.tensor([START]), [], []
        for _ in range(max_len):
            logits, hidden, cell = model.decoder(token, hidden, cell)
            probs.append(logits.softmax(-1)[0].numpy())
            token = logits.argmax(1)
            if int(token.item()) == END:
                break
            out.append(int(token.item()))
    model.train()
    return decode_antonym(out), np.array(probs)

results = {src_word: translate(src_word)[0] for src_word, _ in ANTONYM_PAIRS}
for (src_word, tgt_word) in ANTONYM_PAIRS:
    print(f"{src_word:>6} -> {results[src_word]:<6} {'✓' if results[src_word] == tgt_word else '✗ expected ' + tgt_word}")
assert all(results[s] == t for s, t in ANTONYM_PAIRS), "every training pair must decode correctly"

# %% [markdown]
# Words it never saw: with eight examples and a character-level model there is nothing to generalise
# from, so the answers are guesses shaped like the training words (the classic tutorial observes the same).

# %%
for word in ("mans", "ups", "kings", "hi"):
    print(f"{word:>6} -> {translate(word)[0]}")

# %% [markdown]
# What the decoder believes at each step while writing `woman`: the probability of every character
# (rows) at every decoding step (columns).

# %%
word, probs = translate("man")
steps = list(word) + ["E"]
plt.figure(figsize=(5, 6))
plt.imshow(probs.T, cmap="Blues", aspect="auto", vmin=0, vmax=1)
plt.yticks(range(n_class), ANTONYM_CHARS)
plt.xticks(range(len(steps)), [f"{i}:{c}" for i, c in enumerate(steps)])
plt.xlabel("decoding step : emitted character")
plt.title("decoder output distribution for 'man'")
plt.colorbar(label="probability")
plt.show()

# %% [markdown]
# ## 5. The bottleneck: one vector per word
#
# Everything the decoder knows about the source is the encoder's final `(h, c)`. Projected to two
# dimensions (PCA), the eight training words' context vectors, and some unseen words, look like this:
# unseen words land near training words that share their first letters — which is why `mans` is
# translated like `man`.

# %%
words = [s for s, _ in ANTONYM_PAIRS] + ["mans", "ups", "kings", "hi"]
with torch.no_grad():
    ctx = np.stack([model.encoder(torch.tensor(make_antonym_test_batch(w, n_step=8)[0]))[0][0, 0].numpy()
                    for w in words])
ctx_c = ctx - ctx.mean(0)
_, _, vt = np.linalg.svd(ctx_c, full_matrices=False)
xy = ctx_c @ vt[:2].T
plt.figure(figsize=(5.5, 4.5))
for i, w in enumerate(words):
    seen = i < len(ANTONYM_PAIRS)
    plt.scatter(*xy[i], c="tab:blue" if seen else "tab:orange", s=40)
    plt.annotate(w, xy[i], textcoords="offset points", xytext=(4, 4))
plt.title("encoder context vectors h (PCA) — blue: training words")
plt.show()

# %% [markdown]
# ## 6. The encoder reads padding — packing avoids it
#
# `man` is fed as `manPPPPP`: the encoder's final state is taken *after five padding steps*, so the
# context depends on how much padding the batch happened to need. `nn.utils.rnn.pack_padded_sequence`
# tells the LSTM each sequence's true length; the fused kernel then stops updating a sequence at its
# end, and `h_n` is the state after the last real character — exactly what the word alone gives.

# %%
from ctransformer.nn.utils.rnn import pack_padded_sequence

lengths = [len(s) for s, _ in ANTONYM_PAIRS]
with torch.no_grad():
    embedded = model.encoder.embedding(src)                               # (8, batch, emb)
    packed = pack_padded_sequence(embedded, lengths, enforce_sorted=False)
    _, (h_packed, _) = model.encoder.rnn(packed)                          # (1, batch, hid)
    _, (h_padded, _) = model.encoder.rnn(embedded)
    alone = [model.encoder.rnn(model.encoder.embedding(torch.tensor([[ANTONYM_VOCAB[c]] for c in w])))[1][0]
             for w, _ in ANTONYM_PAIRS]
h_alone = np.concatenate([h.numpy() for h in alone], axis=1)              # (1, batch, hid)
np.testing.assert_allclose(h_packed.numpy(), h_alone, rtol=1e-5, atol=1e-6)
print("packed h_n == h_n of each word run alone ✓")
print("mean |h_padded - h_alone| =", float(np.abs(h_padded.numpy() - h_alone).mean()))

# %% [markdown]
# (The model above was trained on the padded form, so it expects those five extra steps; a model meant
# for variable-length input is trained with packing from the start.) The single context vector is the
# real limit of this architecture: the longer the input, the more has to be squeezed through it.
# Notebook 05 lets the decoder look back at *every* encoder state instead — **attention**.
