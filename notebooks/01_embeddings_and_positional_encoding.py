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
# # 01 · Embeddings and positional encoding
#
# A Transformer never sees words. It sees **token ids** (词元编号), looks each id up in a learnable
# table — the **word embedding** (词嵌入) — and adds a fixed **positional encoding** (位置编码) so that
# the order of the tokens is not lost. This notebook builds both by hand, the way the classic tutorials do,
# then checks that ctransformer's fused layers give the same numbers, and shows the C that computes them.
#
# Everything runs on `ctransformer`; we import it under the name `torch` because the point of the
# project is that tutorial code written for PyTorch runs unchanged.

# %%
import math

import matplotlib.pyplot as plt
import numpy as np

import ctransformer as torch
import ctransformer.nn as nn

torch.manual_seed(0)
torch.set_num_threads(1)   # small matrices: one thread beats two, and a busy machine cannot stall it
plt.rcParams["figure.dpi"] = 90

# %% [markdown]
# ## 1. From one-hot vectors to an embedding table
#
# The oldest way to feed a word to a network is a **one-hot vector** (独热编码): a vector as long as
# the vocabulary with a single 1. It says *which* word, but every pair of words is equally far apart,
# so it carries no meaning. An **embedding** is a learnable matrix `W` of shape
# `(vocab_size, d_model)`; token `i` is represented by row `W[i]`. Multiplying a one-hot vector by
# `W` picks exactly that row, so an embedding *is* a one-hot matmul — only far cheaper, because
# `nn.Embedding` indexes the row instead of multiplying by zeros.

# %%
vocab_size, d_model = 10, 6
embedding = nn.Embedding(vocab_size, d_model)

ids = torch.tensor([[1, 4, 4, 9]])              # (batch=1, seq_len=4)
looked_up = embedding(ids)                        # (1, 4, d_model)

one_hot = np.eye(vocab_size, dtype=np.float32)[ids.numpy()]       # (1, 4, vocab_size)
via_matmul = one_hot @ embedding.weight.detach().numpy()             # (1, 4, d_model)

print("ids", tuple(ids.shape), "-> embeddings", tuple(looked_up.shape))
np.testing.assert_allclose(looked_up.detach().numpy(), via_matmul, rtol=1e-6)
print("lookup == one-hot @ W  ✓")

# %% [markdown]
# Because the lookup is a matmul with a one-hot matrix, its gradient is the transposed matmul: only
# the rows of tokens that actually appeared receive a gradient, and a token seen twice collects both
# contributions.

# %%
embedding.zero_grad()
looked_up.sum().backward()
row_grad = embedding.weight.grad.numpy()[:, 0]
print("gradient reaching each row (column 0):", row_grad)
assert row_grad[4] == 2 and row_grad[1] == 1 and row_grad[9] == 1 and row_grad[0] == 0

# %% [markdown]
# ### Padding (填充)
# Sentences in a batch have different lengths, so short ones are filled with a padding token. With
# `padding_idx` the padding row is all zeros and never learns (a classic tutorial's example: 101 ids,
# 16 features, id 100 is padding).

# %%
emb = nn.Embedding(num_embeddings=101, embedding_dim=16, padding_idx=100)
print("weight", tuple(emb.weight.shape))
print("1-D ids ->", tuple(emb(torch.tensor([0, 1, 100])).shape))
out = emb(torch.tensor([[0, 1, 100], [1, 2, 3]]))
print("2-D ids ->", tuple(out.shape))
out.sum().backward()
assert float(np.abs(emb.weight.detach().numpy()[100]).sum()) == 0.0
assert float(np.abs(emb.weight.grad.numpy()[100]).sum()) == 0.0
print("padding row is zero and gets no gradient ✓")

# %% [markdown]
# ## 2. Why positions are needed
#
# Self-attention (notebook 05) mixes tokens with weights computed from dot products between them. If
# we shuffle the input tokens, every output is shuffled the same way and nothing else changes: the
# layer cannot tell "dog bites man" from "man bites dog". Below, a bare self-attention (no positional
# information) is applied to a sequence and to its reversal — the outputs are the same rows, reversed.

# %%
x = torch.randn(1, 5, d_model)
def bare_self_attention(x):
    scores = x @ x.transpose(-2, -1) / math.sqrt(x.shape[-1])
    return scores.softmax(dim=-1) @ x

perm = [4, 3, 2, 1, 0]
out_then_perm = bare_self_attention(x)[:, perm]
perm_then_out = bare_self_attention(x[:, perm])
np.testing.assert_allclose(out_then_perm.numpy(), perm_then_out.numpy(), rtol=1e-5, atol=1e-6)
print("attention(reversed x) == reversed attention(x): order is invisible without positions ✓")

# %% [markdown]
# ## 3. The sinusoidal positional encoding
#
# "Attention Is All You Need" adds a fixed matrix `PE` of shape `(max_len, d_model)` to the
# embeddings. Column pair `(2i, 2i+1)` is a sine and a cosine of the **same** frequency:
#
# $$PE(pos, 2i) = \sin\!\Big(\frac{pos}{10000^{2i/d_{model}}}\Big),\qquad
#   PE(pos, 2i+1) = \cos\!\Big(\frac{pos}{10000^{2i/d_{model}}}\Big)$$
#
# Low dimensions oscillate fast (wavelength $2\pi$), high dimensions slowly (wavelength up to
# $2\pi\cdot 10000$), so every position gets a distinct pattern — like the hands of a clock running at
# geometrically spaced speeds. The hand-written module below follows the classic tutorials: the
# frequencies are computed once as `div_term` (one entry per pair) and used for both the sine and the
# cosine column.

# %%
class PositionalEncoding(nn.Module):
    """Hand-written sinusoidal PE. x: (batch, seq_len, d_model) -> x + PE[:seq_len]."""

    def __init__(self, d_model: int, max_len: int = 512):
        super().__init__()
        pe = torch.zeros(max_len, d_model)                                        # (max_len, d_model)
        position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)       # (max_len, 1)
        # 1 / 10000^(2i/d_model) for 2i = 0, 2, 4, ...  -> (d_model/2,)
        div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * div_term)                              # even columns
        pe[:, 1::2] = torch.cos(position * div_term)                              # odd columns, same frequency
        self.register_buffer("pe", pe.unsqueeze(0))                               # (1, max_len, d_model)

    def forward(self, x):
        return x + self.pe[:, : x.shape[1]]

# %% [markdown]
# First a check against a small worked example often used to teach it ("I like to code", 4 positions,
# `d_model = 4`, base `n = 100` instead of 10000 so the numbers are easy to read): row 1 must be
# `[sin 1, cos 1, sin 0.1, cos 0.1] = [0.841, 0.540, 0.0998, 0.995]`.

# %%
def pe_table(seq_len, d_model, base=10000.0):
    position = torch.arange(0, seq_len, dtype=torch.float).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(base) / d_model))
    pe = torch.zeros(seq_len, d_model)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe

small = pe_table(4, 4, base=100.0).numpy()
print(np.round(small, 4))
np.testing.assert_allclose(small[1], [np.sin(1), np.cos(1), np.sin(0.1), np.cos(0.1)], rtol=1e-5)

# %% [markdown]
# ### What the matrix looks like
# Each row is one position, each column one feature. The left columns flicker, the right ones barely
# move. The curves on the right are dimensions 4–7 for the first 100 positions (a figure the classic
# tutorials draw).

# %%
d_model, max_len = 64, 100
pos_enc = PositionalEncoding(d_model, max_len=max_len)
PE = pos_enc.pe[0].numpy()                                       # (100, 64)

fig, axes = plt.subplots(1, 2, figsize=(12, 4))
im = axes[0].imshow(PE, cmap="RdBu", aspect="auto", vmin=-1, vmax=1)
axes[0].set(xlabel="feature dimension", ylabel="position", title="sinusoidal PE (100 positions × 64 dims)")
fig.colorbar(im, ax=axes[0])
for dim in range(4, 8):
    axes[1].plot(PE[:, dim], label=f"dim {dim} ({'sin' if dim % 2 == 0 else 'cos'})")
axes[1].set(xlabel="position", ylabel="value", title="PE columns 4–7")
axes[1].legend(loc="lower left")
plt.tight_layout()
plt.show()

# %% [markdown]
# ### Relative positions are a rotation
# Because each column pair is `(sin ωp, cos ωp)`, moving from position `p` to `p + k` rotates every
# pair by the angle `ωk`, whatever `p` is. So the dot product `PE[p] · PE[p+k]` depends only on the
# offset `k`: the similarity matrix `PE @ PE.T` is constant along its diagonals (a Toeplitz matrix).
# That is what lets attention learn "look two tokens back" once, for every position.

# %%
sim = PE @ PE.T
offsets_constant = all(np.allclose(np.diag(sim, k), np.diag(sim, k)[0], atol=1e-3) for k in range(0, 40))
print("PE[p]·PE[p+k] depends only on k:", offsets_constant)
assert offsets_constant

# %% [markdown]
# ## 4. A bug to avoid: the exponent applied twice
#
# One classic tutorial writes the table with two loops, stepping `i` over `0, 2, 4, ...` and then using
# `2 * i` in the exponent:
#
# ```python
# for i in range(0, d_model, 2):
#     pe[pos, i]     = math.sin(pos / (10000 ** ((2 * i) / d_model)))
#     pe[pos, i + 1] = math.cos(pos / (10000 ** ((2 * (i + 1)) / d_model)))
# ```
#
# `i` already *is* the even index `2i` of the formula, so the doubling is applied twice: column `i`
# gets the frequency meant for column `2i`. Two things break:
#
# 1. the frequencies run out twice as fast — the right half of the columns has wavelengths beyond
#    10 000 positions, i.e. they are constant for any real sentence and carry no information;
# 2. the cosine uses `i + 1`, a *different* frequency from its sine partner, so the pair is no longer
#    a rotation and `PE[p] · PE[p+k]` now depends on `p`, not only on `k`.

# %%
def pe_exponent_doubled(max_len, d_model):
    """The buggy double loop, kept only to show what goes wrong."""
    pe = np.zeros((max_len, d_model))
    for pos in range(max_len):
        for i in range(0, d_model, 2):
            pe[pos, i] = math.sin(pos / (10000 ** ((2 * i) / d_model)))
            pe[pos, i + 1] = math.cos(pos / (10000 ** ((2 * (i + 1)) / d_model)))
    return pe

PE_bug = pe_exponent_doubled(max_len, d_model)
spread_ok = PE.max(axis=0) - PE.min(axis=0)
spread_bug = PE_bug.max(axis=0) - PE_bug.min(axis=0)
print("columns that stay (almost) constant over 100 positions:",
      "correct", int((spread_ok < 0.05).sum()), "/ 64,  buggy", int((spread_bug < 0.05).sum()), "/ 64")

sim_bug = PE_bug @ PE_bug.T
fig, axes = plt.subplots(1, 3, figsize=(15, 4))
axes[0].imshow(PE_bug, cmap="RdBu", aspect="auto", vmin=-1, vmax=1)
axes[0].set(title="the double-loop table (exponent doubled)", xlabel="feature dimension", ylabel="position")
axes[1].imshow(sim, cmap="viridis")
axes[1].set(title="correct: PE·PEᵀ constant along diagonals", xlabel="position", ylabel="position")
axes[2].imshow(sim_bug, cmap="viridis")
axes[2].set(title="buggy: similarity depends on absolute position", xlabel="position", ylabel="position")
plt.tight_layout()
plt.show()
assert (spread_bug < 0.05).sum() > (spread_ok < 0.05).sum()

# %% [markdown]
# ## 5. The library's layer gives the same numbers
#
# `ctransformer.nn.PositionalEncoding(d_model, dropout, max_len, batch_first)` computes the table in C
# (exponent applied once) and adds it, followed by dropout. With `dropout=0.0` it must equal the
# hand-written module — up to float32 rounding: the angle `pos · ω` reaches 100 radians here, and a
# float32 angle that large is only known to about 1e-5, so we compare with `atol=2e-5`.

# %%
lib_pe = nn.PositionalEncoding(d_model, dropout=0.0, max_len=max_len, batch_first=True)
x = torch.randn(2, 30, d_model)
np.testing.assert_allclose(lib_pe(x).numpy(), pos_enc(x).numpy(), rtol=0, atol=2e-5)
np.testing.assert_allclose(lib_pe.pe.numpy(), PE, rtol=0, atol=2e-5)
print("nn.PositionalEncoding == hand-written PositionalEncoding ✓")

# %% [markdown]
# ### The C that ran
# Both layers are C kernels. `kernels.source(name)` returns a kernel's C text exactly as it was compiled
# into your ctransformer (comment first, then the whole function; each maths file is one template for
# float32 and float64, so `FN(embedding_forward)` is `embedding_forward_f32` / `_f64` and `real` is
# `float` / `double`). The forward lookup is a row copy; the backward is the transposed one-hot matmul
# from section 1 written as a scatter-add (`dweight[ids[m]] += dout[m]`), so a repeated token collects
# both gradients; `positional_encoding` fills the table of section 3 with one frequency per sine/cosine
# pair.

# %%
from IPython.display import display

from ctransformer import kernels

display(kernels.source("embedding_forward"), kernels.source("embedding_backward"),
        kernels.source("positional_encoding"))

# %% [markdown]
# ## 6. Why the embeddings are multiplied by √d_model
#
# The classic Transformer tutorials scale the embedding by `sqrt(d_model)` before adding the PE. Each PE entry is
# a sine or cosine, so a PE row has norm `sqrt(d_model / 2)`. A freshly initialised embedding row is
# much smaller when the table is initialised with Xavier (variance ≈ 1/d_model, as one of
# them does): without the scale the position signal would drown the word signal. Multiplying by
# `sqrt(d_model)` puts both on the same scale. (`nn.Embedding`'s own default, N(0, 1), is already at
# that scale: the factor matters together with the initialisation.)

# %%
d_model = 64
emb = nn.Embedding(1000, d_model)
nn.init.xavier_uniform_(emb.weight)
tokens = torch.randint(0, 1000, (1, 50))
e = emb(tokens).detach().numpy()[0]
pe_rows = PositionalEncoding(d_model, 50).pe[0].numpy()
print(f"mean row norm: PE {np.linalg.norm(pe_rows, axis=1).mean():.2f}, "
      f"Xavier embedding {np.linalg.norm(e, axis=1).mean():.2f}, "
      f"embedding * sqrt(d_model) {np.linalg.norm(e * math.sqrt(d_model), axis=1).mean():.2f}")

# %% [markdown]
# ## 7. Putting it together: the input block of a Transformer
#
# Token ids `(B, S)` → embedding `(B, S, d_model)` → `* sqrt(d_model)` → `+ PE` → dropout. This is the
# first thing both the encoder and the decoder do (a classic tutorial walks through the shapes with the
# sentence "<s>猫吃鱼</s>": 5 tokens, 512 features).

# %%
class InputBlock(nn.Module):
    def __init__(self, vocab_size, d_model, max_len=512, dropout=0.1):
        super().__init__()
        self.d_model = d_model
        self.embed = nn.Embedding(vocab_size, d_model)
        self.pe = nn.PositionalEncoding(d_model, dropout=dropout, max_len=max_len, batch_first=True)

    def forward(self, ids):                                  # ids: (B, S)
        return self.pe(self.embed(ids) * math.sqrt(self.d_model))   # (B, S, d_model)

block = InputBlock(vocab_size=8, d_model=512)
sentence = torch.tensor([[1, 5, 6, 7, 2]])                   # "<s> 猫 吃 鱼 </s>" as ids
print("ids", tuple(sentence.shape), "->", tuple(block(sentence).shape))

# %% [markdown]
# **Summary.** An embedding is a one-hot matmul done as a lookup; its gradient lands only on the rows
# that were used. The sinusoidal PE gives every position a unique, smoothly varying code whose pairwise
# similarity depends only on the distance — as long as each sine/cosine pair shares one frequency and
# the exponent is applied once. `nn.Embedding` and `nn.PositionalEncoding` reproduce the hand-written
# versions exactly.
