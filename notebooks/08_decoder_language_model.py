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
# # 08 · A decoder-only language model (仅解码器语言模型)
#
# Drop the encoder and the cross-attention, keep the masked self-attention: what remains is a
# **decoder-only Transformer**, the architecture of GPT. It is trained on plain text to predict the
# **next token** (下一个词预测) at every position. A classic tutorial builds one with causal masks, AdamW
# and gradient clipping; we do the same on a corpus that ships with Python itself — the English prose of
# the standard library's docstrings — at the character level, then sample from it before and after
# training.

# %%
import math
import re
import time
import warnings

import matplotlib.pyplot as plt
import numpy as np

warnings.filterwarnings("ignore", message="IProgress not found")   # without ipywidgets tqdm draws text bars
from tqdm.auto import tqdm

import ctransformer as torch
import ctransformer.nn as nn
import ctransformer.nn.functional as F
from ctransformer import masks
from ctransformer.data import load_text_corpus
from ctransformer.decoding import generate
from ctransformer.models import DecoderLM
from ctransformer.tokenizers import CharTokenizer

torch.manual_seed(0)
torch.set_num_threads(1)   # small matrices: one thread beats two, and a busy machine cannot stall it
plt.rcParams["figure.dpi"] = 90

# %% [markdown]
# ## 1. Why one pass trains every position: the causal mask
#
# To learn the sequence `<bos> I like you <eos>` the model must predict `I` from `<bos>`, `like` from
# `<bos> I`, and so on. Run one by one that is a slow loop. Instead the whole sequence goes in at once
# and the **causal mask** (因果掩码) hides, for query position `t`, every key after `t` — row `t` of the
# lower-triangular mask is exactly the prefix that step may use. The classic tutorial writes it as an
# additive matrix, `0` on and below the diagonal and `-inf` above, added to the scores before the
# softmax:

# %%
T = 6
additive = masks.to_additive(masks.subsequent_mask(T))[0, 0]          # (T, T): 0 / -inf
print(additive.numpy())

# %% [markdown]
# Here is the classic tutorial's causal multi-head attention, ported (its mask registered as a buffer and
# cut to the sequence length), next to `nn.MultiheadAttention` given the same weights and
# `ctransformer.masks.causal_mask` (PyTorch's polarity: True = blocked).

# %%
class CausalSelfAttention(nn.Module):
    def __init__(self, dim, n_heads, max_seq_len):
        super().__init__()
        self.n_heads, self.head_dim = n_heads, dim // n_heads
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, dim, bias=False)
        self.wv = nn.Linear(dim, dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)
        self.register_buffer("mask", masks.to_additive(masks.subsequent_mask(max_seq_len)))   # (1, 1, L, L)

    def forward(self, x):                                               # x: (B, T, dim)
        bsz, seqlen, _ = x.shape
        split = lambda t: t.view(bsz, seqlen, self.n_heads, self.head_dim).transpose(1, 2)
        xq, xk, xv = split(self.wq(x)), split(self.wk(x)), split(self.wv(x))      # (B, h, T, hd)
        scores = xq @ xk.transpose(2, 3) / math.sqrt(self.head_dim)
        scores = scores + self.mask[:, :, :seqlen, :seqlen]            # -inf above the diagonal
        out = F.softmax(scores, dim=-1) @ xv
        return self.wo(out.transpose(1, 2).contiguous().view(bsz, seqlen, -1))

dim, heads = 32, 4
hand = CausalSelfAttention(dim, heads, max_seq_len=16)
lib = nn.MultiheadAttention(dim, heads, bias=False, batch_first=True)
with torch.no_grad():
    lib.in_proj_weight.copy_(torch.cat([hand.wq.weight, hand.wk.weight, hand.wv.weight]))
    lib.out_proj.weight.copy_(hand.wo.weight)
x = torch.randn(2, 10, dim)
y_lib, _ = lib(x, x, x, attn_mask=masks.causal_mask(10), need_weights=False)
np.testing.assert_allclose(y_lib.detach().numpy(), hand(x).detach().numpy(), rtol=1e-5, atol=1e-6)
print("hand-written causal attention == nn.MultiheadAttention with causal_mask ✓")

# %% [markdown]
# ### The C that ran: the mask inside the kernel
# The fused attention applies the mask one score row at a time; `kernels.source(name)` shows the C
# exactly as compiled into ctransformer (comment first; one template serves float32 and float64:
# `FN(name)` is `name_f32` / `_f64`, `real` is `float` / `double`). `mask_scores_row` sets every hidden
# key's score to `-inf` (for `is_causal`, every `j > i`), `softmax_row` turns those into exact zeros (and
# a row with nothing visible into zeros, not NaN). The backward needs no mask at all:
# `softmax_backward_rows` multiplies by `P`, which is 0 for every hidden key, so no gradient reaches the
# future.

# %%
from IPython.display import display

from ctransformer import kernels

display(kernels.source("mask_scores_row"), kernels.source("softmax_row"), kernels.source("softmax_backward_rows"))

# %% [markdown]
# ## 2. The corpus and the model
#
# `ctransformer.data.load_text_corpus()` collects the docstrings of a fixed list of standard-library
# modules (no download). We take the first 200,000 characters and hold the last 10% out.
# `CharTokenizer` maps each character to an id, with `<pad>, <sos>, <eos>, <unk>` first.

# %%
text = load_text_corpus(max_chars=200_000)
tok = CharTokenizer().build_vocab([text])
data = np.array(tok.encode(text), dtype=np.int64)
split = int(0.9 * len(data))
train_data, valid_data = data[:split], data[split:]
print(f"{len(text):,} characters, {len(tok)} token ids")
print(text[:300])

# %% [markdown]
# `ctransformer.models.DecoderLM` is the stack the classic tutorial builds: token embedding × √d_model +
# sinusoidal positions, `num_layers` pre-norm blocks of causal self-attention and feed-forward
# (`nn.TransformerEncoderLayer(norm_first=True)` with a causal mask), a final LayerNorm and a linear
# `lm_head` back to the vocabulary. A small one:

# %%
BLOCK = 96                                   # context length in characters
model = DecoderLM(len(tok), d_model=64, nhead=4, num_layers=2, dim_feedforward=256, max_len=BLOCK,
                  dropout=0.0)
print(f"{sum(p.numel() for p in model.parameters()):,} parameters")

# %% [markdown]
# The causal mask is built in: changing a later character cannot change the predictions at earlier
# positions (in eval mode, without dropout).

# %%
model.eval()
ids = torch.tensor(train_data[None, :20])
changed = ids.clone()
changed[0, 15] = (int(changed[0, 15]) + 1) % len(tok)
with torch.no_grad():
    a, b = model(ids), model(changed)
np.testing.assert_allclose(a[0, :15].numpy(), b[0, :15].numpy(), rtol=1e-5, atol=1e-6)
assert not np.allclose(a[0, 15:].numpy(), b[0, 15:].numpy())
model.train()
print("positions 0..14 ignore a change at position 15 ✓")

# %% [markdown]
# ## 3. Before training
#
# `ctransformer.decoding.generate` continues a prompt one token at a time (with a key/value cache, so
# each step costs one position, not the whole prefix), sampling from `softmax(logits / temperature)`
# restricted to the `top_k` most likely tokens.

# %%
PROMPT = "Return the "

def sample(n=BLOCK - len(PROMPT), temperature=0.8, seed=0):
    torch.manual_seed(seed)
    prompt = torch.tensor([tok.encode(PROMPT)])
    out = generate(model, prompt, max_new_tokens=n, temperature=temperature, top_k=20)
    return tok.decode(out[0].tolist())

# Two plain measures of "looks like the corpus", computed on the generated continuation:
# the share of its words of 3+ letters that occur in the corpus, and how likely its character pairs are
# under the corpus's own character-bigram statistics (mean log-probability per character).
vocabulary = set(re.findall(r"[a-z]{3,}", text.lower()))
counts = np.ones((len(tok), len(tok)))                           # add-one smoothed bigram counts
np.add.at(counts, (data[:-1], data[1:]), 1)
bigram_logp = np.log(counts / counts.sum(1, keepdims=True))

def real_word_fraction(s):
    words = re.findall(r"[a-z]{3,}", s[len(PROMPT):].lower())
    return sum(w in vocabulary for w in words) / max(len(words), 1)

def bigram_score(s):
    ids = np.array(tok.encode(s[len(PROMPT) - 1:]))
    return float(bigram_logp[ids[:-1], ids[1:]].mean())

before = sample()
print(before)
print(f"\nreal words: {real_word_fraction(before):.0%}, bigram log-prob per char: {bigram_score(before):.2f}")

# %% [markdown]
# ## 4. Training
#
# As in the classic tutorial: **AdamW** (Adam with decoupled weight decay), gradient clipping at norm 1, and
# cross-entropy between the logits at every position and the next character. Random windows of 96
# characters, 16 per batch.

# %%
optimizer = torch.optim.AdamW(model.parameters(), lr=4e-3, weight_decay=0.01)
STEPS, BATCH = 400, 16
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 50) * max(0.1, 1 - s / STEPS))
rng = np.random.default_rng(0)

def batch_from(arr, size):
    starts = rng.integers(0, len(arr) - BLOCK - 1, size=size)
    x = np.stack([arr[s:s + BLOCK] for s in starts])
    y = np.stack([arr[s + 1:s + BLOCK + 1] for s in starts])          # the next character at every position
    return torch.tensor(x), torch.tensor(y)

def valid_loss():
    model.eval()
    with torch.no_grad():
        x, y = batch_from(valid_data, 64)
        loss = F.cross_entropy(model(x).reshape(-1, len(tok)), y.reshape(-1))
    model.train()
    return loss.item()

losses, valid_curve = [], []
t0 = time.time()
for step in tqdm(range(STEPS), desc="DecoderLM", mininterval=1):
    x, y = batch_from(train_data, BATCH)
    logits = model(x)                                                  # (B, T, vocab)
    loss = F.cross_entropy(logits.reshape(-1, len(tok)), y.reshape(-1))
    optimizer.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
    losses.append(loss.item())
    if step % 50 == 0 or step == STEPS - 1:
        valid_curve.append((step, valid_loss()))
print(f"{time.time() - t0:.0f} s; train loss {np.mean(losses[:10]):.2f} -> {np.mean(losses[-20:]):.2f}, "
      f"held-out {valid_curve[0][1]:.2f} -> {valid_curve[-1][1]:.2f}")

plt.figure(figsize=(7, 3.5))
plt.plot(losses, alpha=0.6, label="train (batch)")
plt.plot(*zip(*valid_curve), "o-", label="held-out")
plt.axhline(math.log(len(tok)), color="gray", ls=":", label="uniform guess: ln(vocab)")
plt.xlabel("step")
plt.ylabel("cross-entropy per character (nats)")
plt.title("character-level decoder LM")
plt.legend()
plt.show()

# %% [markdown]
# ## 5. After training

# %%
after = sample()
print(after)
print(f"\nreal words: before {real_word_fraction(before):.0%}, after {real_word_fraction(after):.0%}")
print(f"bigram log-prob per char: before {bigram_score(before):.2f}, after {bigram_score(after):.2f} "
      f"(the corpus itself: {bigram_score(text[:2000]):.2f})")
assert valid_curve[-1][1] < valid_curve[0][1] - 1.5
assert bigram_score(after) > bigram_score(before) + 1.0
assert real_word_fraction(after) > real_word_fraction(before)

# %% [markdown]
# The temperature trades safety for variety: near 0 the model repeats its favourite phrases, at 1.0 and
# above it invents more (and misspells more).

# %%
for temperature in (0.3, 1.2):
    print(f"--- temperature {temperature}")
    print(sample(temperature=temperature, seed=1))

# %% [markdown]
# Less than a minute of CPU and 0.1 M parameters turn uniform noise into text with the corpus's
# letters, spacing, common short words and punctuation habits — the samples score far higher under the
# corpus's own character statistics. Longer training makes the words real and then the phrases;
# everything that separates this from a large language model is scale: more data, a longer context,
# wider and deeper stacks. The pieces are the ones built in notebooks 01–06.
