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
# # 06 · Transformer blocks: LayerNorm, feed-forward, encoder and decoder layers
#
# A Transformer layer is attention plus three small pieces: a **position-wise feed-forward network**
# (前馈网络), **residual connections** (残差连接) and **layer normalisation** (层归一化). This notebook
# writes each by hand, fixes a LayerNorm bug several classic tutorials share, reads the C of the
# library's LayerNorm, builds the encoder layer (编码器层) and decoder layer (解码器层) in both
# arrangements — **post-norm** (the original paper) and **pre-norm** (most of the classic tutorials) —
# checks each against `nn.TransformerEncoderLayer` / `nn.TransformerDecoderLayer`, follows the tensor
# shapes through a whole model, and looks at what the two arrangements do to a deep stack.

# %%
import math

import matplotlib.pyplot as plt
import numpy as np

import ctransformer as torch
import ctransformer.nn as nn
import ctransformer.nn.functional as F
from ctransformer import masks

torch.manual_seed(0)
torch.set_num_threads(1)   # tiny matrices: one thread beats two, and a busy machine cannot stall it
plt.rcParams["figure.dpi"] = 90

# %% [markdown]
# ## 1. Layer normalisation
#
# For each token vector `x = (x_1, …, x_d)` separately, subtract its mean and divide by its standard
# deviation, then scale and shift with learned `γ`, `β`:
#
# $$y_i = \gamma_i\,\frac{x_i - \mu}{\sqrt{\sigma^2 + \epsilon}} + \beta_i,\qquad
#   \mu = \tfrac1d\sum_i x_i,\quad \sigma^2 = \tfrac1d\sum_i (x_i-\mu)^2$$
#
# (Batch normalisation averages each feature over the *batch*; layer normalisation averages over the
# *features of one token*, so it does not care about batch size or sequence length.) The `ε` sits
# **inside** the square root, and the variance is the plain (biased, `1/d`) one.

# %%
class LayerNorm(nn.Module):
    def __init__(self, features: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.gamma = nn.Parameter(torch.ones(features))
        self.beta = nn.Parameter(torch.zeros(features))

    def forward(self, x):                                            # x: (..., features)
        mean = x.mean(dim=-1, keepdim=True)
        var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)           # biased variance
        return self.gamma * (x - mean) / torch.sqrt(var + self.eps) + self.beta


class StdPlusEpsNorm(nn.Module):
    """The classic tutorials' version, kept to show the difference: unbiased std, eps outside the root."""

    def __init__(self, features: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.alpha = nn.Parameter(torch.ones(features))
        self.bias = nn.Parameter(torch.zeros(features))

    def forward(self, x):
        return self.alpha * (x - x.mean(dim=-1, keepdim=True)) / (x.std(dim=-1, keepdim=True) + self.eps) + self.bias

d = 16
x = torch.randn(4, 7, d) * 3 + 1
ours, lib, tutorial = LayerNorm(d), nn.LayerNorm(d), StdPlusEpsNorm(d)
np.testing.assert_allclose(ours(x).detach().numpy(), lib(x).detach().numpy(), rtol=1e-5, atol=1e-5)
print("hand-written LayerNorm == nn.LayerNorm ✓")
print("per-token std of the output: ours %.4f, the tutorials' %.4f" %
      (ours(x).detach().numpy().std(-1).mean(), tutorial(x).detach().numpy().std(-1).mean()))

# %% [markdown]
# Two differences, one small and one not:
#
# * `x.std()` is the *unbiased* estimate (divides by `d − 1`), so every output is scaled by
#   `√((d−1)/d)` — 0.968 for `d = 16`; the learned `γ` can absorb this, but the layer is no longer the
#   LayerNorm of the paper or of `nn.LayerNorm`, so weights do not transfer between them;
# * with `ε` outside the root, the layer's behaviour for **nearly constant** vectors changes. `√(σ²+ε)`
#   never goes below `√ε`, so a vector with tiny spread is mapped to something tiny (its noise is not
#   amplified); `σ + ε` goes down to `ε`, so the same vector is blown up to unit variance — noise
#   amplified by up to `1/ε`. The curve below is the output's standard deviation as the input's spread
#   shrinks, both layers with `ε = 1e-5`.

# %%
spreads = np.logspace(-6, 1, 50)
base = np.random.default_rng(0).standard_normal(d)
base = (base - base.mean()) / base.std()
ours_std, tutorial_std = [], []
ours_eps, tutorial_eps = LayerNorm(d, eps=1e-5), StdPlusEpsNorm(d, eps=1e-5)
for s in spreads:
    v = torch.tensor((5.0 + s * base).astype(np.float32))
    ours_std.append(ours_eps(v).detach().numpy().std())
    tutorial_std.append(tutorial_eps(v).detach().numpy().std())
plt.figure(figsize=(6.5, 3.5))
plt.loglog(spreads, ours_std, label="√(σ² + ε)  (nn.LayerNorm)")
plt.loglog(spreads, tutorial_std, "--", label="σ_unbiased + ε  (classic tutorials)")
plt.axvline(math.sqrt(1e-5), color="gray", ls=":", lw=1)
plt.xlabel("input spread σ (mean 5)")
plt.ylabel("output std")
plt.title("LayerNorm on nearly constant vectors")
plt.legend()
plt.show()

# %% [markdown]
# ### The C that ran
# `nn.LayerNorm` is two C kernels, `layernorm_forward` and `layernorm_backward`. Each is the
# Transformer's fused add + norm (`add_layernorm_forward` / `add_layernorm_backward`, which normalise
# `h = x + residual`) called with no residual, so `h = x`: those two are shown. `kernels.source(name)`
# shows them exactly as compiled into ctransformer (comment first; one template serves float32 and
# float64: `FN(name)` is `name_f32` / `_f64`, `real` is `float` / `double`). The forward computes the
# biased variance, puts `eps` inside the root (`1 / sqrt(var + eps)`) and keeps `mean` and `rstd` for
# the backward. The backward's comment gives the whole derivation in one line:
# `dx = rstd · (g − mean(g) − x̂ · mean(g · x̂))` with `g = dout · γ` (`hhat` there is `x̂`) — the two
# means are there because every `x_i` of the row moves `μ` and `σ`.

# %%
from IPython.display import display

from ctransformer import kernels

display(kernels.source("add_layernorm_forward"), kernels.source("add_layernorm_backward"))

# %% [markdown]
# ## 2. Position-wise feed-forward network
#
# The same two-layer MLP applied to every position independently: widen from `d_model` to `d_ff`
# (usually `4·d_model`), ReLU, narrow back.
#
# $$\mathrm{FFN}(x) = \max(0,\; xW_1 + b_1)\,W_2 + b_2$$

# %%
class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.linear_1 = nn.Linear(d_model, d_ff)
        self.dropout = nn.Dropout(dropout)
        self.linear_2 = nn.Linear(d_ff, d_model)

    def forward(self, x):                                       # (..., d_model) -> (..., d_model)
        return self.linear_2(self.dropout(F.relu(self.linear_1(x))))

# %% [markdown]
# ## 3. Multi-head attention with biases (a classic tutorial's layout)

# %%
class MultiHeadAttention(nn.Module):
    def __init__(self, heads, d_model):
        super().__init__()
        self.h, self.d_model, self.d_k = heads, d_model, d_model // heads
        self.q_linear, self.k_linear, self.v_linear = (nn.Linear(d_model, d_model) for _ in range(3))
        self.out = nn.Linear(d_model, d_model)

    def forward(self, q, k, v, mask=None):                      # mask: True = may attend, (B|1, 1, L, S)
        bs = q.size(0)
        q = self.q_linear(q).view(bs, -1, self.h, self.d_k).transpose(1, 2)     # (B, h, L, d_k)
        k = self.k_linear(k).view(bs, -1, self.h, self.d_k).transpose(1, 2)     # (B, h, S, d_k)
        v = self.v_linear(v).view(bs, -1, self.h, self.d_k).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        out = scores.softmax(-1) @ v                                            # (B, h, L, d_k)
        return self.out(out.transpose(1, 2).contiguous().view(bs, -1, self.d_model))


def copy_attention(lib: nn.MultiheadAttention, hand: MultiHeadAttention):
    with torch.no_grad():
        lib.in_proj_weight.copy_(torch.cat([hand.q_linear.weight, hand.k_linear.weight, hand.v_linear.weight]))
        lib.in_proj_bias.copy_(torch.cat([hand.q_linear.bias, hand.k_linear.bias, hand.v_linear.bias]))
        lib.out_proj.weight.copy_(hand.out.weight)
        lib.out_proj.bias.copy_(hand.out.bias)


def copy_linear_norm(lib_mod, hand_mod):
    with torch.no_grad():
        for name in ("weight", "bias"):
            getattr(lib_mod, name).copy_(getattr(hand_mod, name) if hasattr(hand_mod, name)
                                         else getattr(hand_mod, {"weight": "gamma", "bias": "beta"}[name]))

# %% [markdown]
# ## 4. The encoder layer, post-norm and pre-norm
#
# Both arrangements have the same two sub-layers; they differ in where the normalisation sits:
#
# | post-norm (the paper) | pre-norm (most classic tutorials) |
# |---|---|
# | `x = Norm(x + Attn(x))` | `x = x + Attn(Norm(x))` |
# | `x = Norm(x + FFN(x))` | `x = x + FFN(Norm(x))` |
#
# Pre-norm leaves an un-normalised "residual stream" running straight from input to output (a stack
# then ends with one final Norm); post-norm normalises after every sub-layer.

# %%
class EncoderLayer(nn.Module):
    def __init__(self, d_model, heads, d_ff, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.attn = MultiHeadAttention(heads, d_model)
        self.ff = FeedForward(d_model, d_ff)
        self.norm_1, self.norm_2 = LayerNorm(d_model), LayerNorm(d_model)

    def forward(self, x, mask=None):                            # x: (B, S, d_model)
        if self.norm_first:
            x2 = self.norm_1(x)
            x = x + self.attn(x2, x2, x2, mask)
            return x + self.ff(self.norm_2(x))
        x = self.norm_1(x + self.attn(x, x, x, mask))
        return self.norm_2(x + self.ff(x))


def lib_encoder_layer(hand: EncoderLayer, d_model, heads, d_ff):
    lib = nn.TransformerEncoderLayer(d_model, heads, d_ff, dropout=0.0, batch_first=True, norm_first=hand.norm_first)
    copy_attention(lib.self_attn, hand.attn)
    copy_linear_norm(lib.linear1, hand.ff.linear_1)
    copy_linear_norm(lib.linear2, hand.ff.linear_2)
    copy_linear_norm(lib.norm1, hand.norm_1)
    copy_linear_norm(lib.norm2, hand.norm_2)
    return lib

d_model, heads, d_ff, PAD = 32, 4, 64, 0
src_ids = torch.tensor([[5, 6, 7, 8, 9], [5, 6, 7, 0, 0]])                  # second sentence padded
x = torch.randn(2, 5, d_model)
for norm_first in (False, True):
    hand = EncoderLayer(d_model, heads, d_ff, norm_first)
    lib = lib_encoder_layer(hand, d_model, heads, d_ff)
    y_hand = hand(x, masks.padding_mask(src_ids, PAD))                     # keep polarity (B, 1, 1, S)
    y_lib = lib(x, src_key_padding_mask=masks.key_padding_mask(src_ids, PAD))   # blocked polarity (B, S)
    np.testing.assert_allclose(y_lib.detach().numpy(), y_hand.detach().numpy(), rtol=1e-4, atol=1e-5)
    print(f"{'pre' if norm_first else 'post'}-norm encoder layer == nn.TransformerEncoderLayer"
          f"(norm_first={norm_first}) ✓")

# %% [markdown]
# ## 5. The decoder layer
#
# Three sub-layers: **masked self-attention** over the target prefix (the causal mask of notebook 05),
# **cross-attention** (交叉注意力) whose queries come from the decoder and whose keys and values are the
# encoder's output (the "memory"), and the feed-forward network.

# %%
class DecoderLayer(nn.Module):
    def __init__(self, d_model, heads, d_ff):
        super().__init__()
        self.self_attn = MultiHeadAttention(heads, d_model)
        self.cross_attn = MultiHeadAttention(heads, d_model)
        self.ff = FeedForward(d_model, d_ff)
        self.norm_1, self.norm_2, self.norm_3 = LayerNorm(d_model), LayerNorm(d_model), LayerNorm(d_model)

    def forward(self, x, memory, src_mask, tgt_mask):          # post-norm, like the paper
        x = self.norm_1(x + self.self_attn(x, x, x, tgt_mask))
        x = self.norm_2(x + self.cross_attn(x, memory, memory, src_mask))
        return self.norm_3(x + self.ff(x))

hand_dec = DecoderLayer(d_model, heads, d_ff)
lib_dec = nn.TransformerDecoderLayer(d_model, heads, d_ff, dropout=0.0, batch_first=True)
copy_attention(lib_dec.self_attn, hand_dec.self_attn)
copy_attention(lib_dec.multihead_attn, hand_dec.cross_attn)
for lib_name, hand_mod in (("linear1", hand_dec.ff.linear_1), ("linear2", hand_dec.ff.linear_2),
                           ("norm1", hand_dec.norm_1), ("norm2", hand_dec.norm_2), ("norm3", hand_dec.norm_3)):
    copy_linear_norm(getattr(lib_dec, lib_name), hand_mod)

tgt = torch.randn(2, 4, d_model)
memory = torch.randn(2, 5, d_model)
y_hand = hand_dec(tgt, memory, masks.padding_mask(src_ids, PAD), masks.subsequent_mask(4))
y_lib = lib_dec(tgt, memory, tgt_mask=masks.causal_mask(4),
                memory_key_padding_mask=masks.key_padding_mask(src_ids, PAD))
np.testing.assert_allclose(y_lib.detach().numpy(), y_hand.detach().numpy(), rtol=1e-4, atol=1e-5)
print("decoder layer == nn.TransformerDecoderLayer ✓")

# gradients through the whole layer, for every weight
hand_dec.zero_grad()
lib_dec.zero_grad()
(y_hand ** 2).mean().backward()
(y_lib ** 2).mean().backward()
np.testing.assert_allclose(lib_dec.linear1.weight.grad.numpy(), hand_dec.ff.linear_1.weight.grad.numpy(),
                           rtol=1e-3, atol=1e-6)
np.testing.assert_allclose(lib_dec.norm1.weight.grad.numpy(), hand_dec.norm_1.gamma.grad.numpy(), rtol=1e-3, atol=1e-6)
hand_in = np.concatenate([m.weight.grad.numpy() for m in (hand_dec.cross_attn.q_linear, hand_dec.cross_attn.k_linear,
                                                           hand_dec.cross_attn.v_linear)])
np.testing.assert_allclose(lib_dec.multihead_attn.in_proj_weight.grad.numpy(), hand_in, rtol=1e-3, atol=1e-6)
print("gradients match ✓")

# %% [markdown]
# ## 6. Shapes through a whole model
#
# A classic tutorial follows "猫吃鱼 → Cats eat fish" through the model. With `B = 1`, source
# `<s> 猫 吃 鱼 </s>` (S = 5) and decoder input `<s> Cats eat fish` (T = 4):

# %%
src_vocab, tgt_vocab = 8, 10
src = torch.tensor([[1, 3, 4, 5, 2]])                        # <s> 猫 吃 鱼 </s>
tgt_in = torch.tensor([[1, 6, 7, 8]])                        # <s> Cats eat fish
embed_src, embed_tgt = nn.Embedding(src_vocab, d_model), nn.Embedding(tgt_vocab, d_model)
pe = nn.PositionalEncoding(d_model, dropout=0.0, batch_first=True)
encoder = nn.ModuleList([EncoderLayer(d_model, heads, d_ff) for _ in range(2)])
decoder = nn.ModuleList([DecoderLayer(d_model, heads, d_ff) for _ in range(2)])
generator = nn.Linear(d_model, tgt_vocab)

show = lambda name, t: print(f"{name:<40} {tuple(t.shape)}")
show("source ids (B, S)", src)
h = pe(embed_src(src) * math.sqrt(d_model))
show("embedding * sqrt(d_model) + PE (B, S, d)", h)
for i, layer in enumerate(encoder):
    h = layer(h)
    show(f"encoder layer {i} (B, S, d)", h)
memory = h
y = pe(embed_tgt(tgt_in) * math.sqrt(d_model))
show("target embedding + PE (B, T, d)", y)
for i, layer in enumerate(decoder):
    y = layer(y, memory, None, masks.subsequent_mask(tgt_in.shape[1]))
    show(f"decoder layer {i} (B, T, d)", y)
logits = generator(y)
show("logits over the target vocabulary (B, T, V)", logits)

# %% [markdown]
# ## 7. Post-norm vs pre-norm in a deep stack
#
# Stack 12 freshly initialised encoder layers of each kind, push a batch through, and measure two
# things at every depth: the size of the activations, and the size of the gradient that reaches each
# layer's weights from a loss at the top.

# %%
def depth_profile(norm_first, depth=12, seed=0):
    torch.manual_seed(seed)
    layers = [nn.TransformerEncoderLayer(d_model, heads, d_ff, dropout=0.0, batch_first=True, norm_first=norm_first)
              for _ in range(depth)]
    h = torch.randn(8, 10, d_model)
    probe = torch.randn(8, 10, d_model)             # loss = <h, probe>: a random direction to read out
    norms = []
    for layer in layers:
        h = layer(h)
        norms.append(float(np.linalg.norm(h.detach().numpy(), axis=-1).mean()))
    (h * probe).mean().backward()
    grads = [float(np.linalg.norm(layer.linear1.weight.grad.numpy())) for layer in layers]
    return norms, grads

fig, axes = plt.subplots(1, 2, figsize=(11, 3.5))
for norm_first, label in ((False, "post-norm"), (True, "pre-norm")):
    norms, grads = depth_profile(norm_first)
    axes[0].plot(range(1, 13), norms, "o-", label=label)
    axes[1].semilogy(range(1, 13), grads, "o-", label=label)
axes[0].set(xlabel="layer", ylabel="mean token-vector norm", title="activations by depth")
axes[1].set(xlabel="layer", ylabel="‖∂loss/∂W₁‖ (log)", title="gradient reaching each layer")
for ax in axes:
    ax.legend()
plt.tight_layout()
plt.show()

# %% [markdown]
# Post-norm keeps every layer's output at the same scale (each ends with a LayerNorm), and the gradient
# has to pass back through all those normalisations: the lower layers receive less of it than the top
# ones (here a mild drop over 12 layers; in deeper, trained stacks it becomes the reason post-norm needs
# learning-rate warm-up and careful initialisation). Pre-norm's residual stream grows with depth, while
# the identity paths deliver the gradient to the bottom layers undiminished — here they even get a
# little more than the top — which is why pre-norm trains more easily and most modern models use it.
