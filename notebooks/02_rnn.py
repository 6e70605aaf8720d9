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
# # 02 · Recurrent neural networks (循环神经网络, RNN)
#
# An RNN reads a sequence one step at a time and carries a **hidden state** (隐藏状态) `h_t` from step
# to step: a summary of everything read so far.
#
# $$h_t = \tanh(x_t W_{xh}^\top + b_{xh} + h_{t-1} W_{hh}^\top + b_{hh}),\qquad y_t = h_t W_{hy}^\top + b_{hy}$$
#
# `h_0` is zeros. The same weights are used at every step, which is what lets one network handle any
# length. We write the cell by hand from `nn.Linear` and `tanh` (as the classic tutorials do), check that
# the library's fused `nn.RNN` computes exactly the same thing, read the C that does it, train a small character model, and
# finally look at why plain RNNs forget: **vanishing gradients** (梯度消失).

# %%
import time
import warnings

import matplotlib.pyplot as plt
import numpy as np

warnings.filterwarnings("ignore", message="IProgress not found")   # without ipywidgets tqdm draws text bars
from tqdm.auto import tqdm

import ctransformer as torch
import ctransformer.nn as nn

torch.manual_seed(0)
torch.set_num_threads(1)   # tiny matrices: one thread beats two, and a busy machine cannot stall it
plt.rcParams["figure.dpi"] = 90

# %% [markdown]
# ## 1. A hand-written RNN
# Three linear maps: input → hidden (`U`, here `W_xh`), hidden → hidden (`W`, `W_hh`), hidden → output
# (`V`, `W_hy`). The loop over time is plain Python.

# %%
class RNN(nn.Module):
    def __init__(self, input_size, hidden_size, output_size):
        super().__init__()
        self.hidden_size = hidden_size
        self.W_xh = nn.Linear(input_size, hidden_size)    # U
        self.W_hh = nn.Linear(hidden_size, hidden_size)   # W
        self.W_hy = nn.Linear(hidden_size, output_size)   # V

    def forward(self, x, hidden=None):
        """x: (batch, seq_len, input_size) -> outputs (batch, seq_len, output_size), hidden (batch, hidden_size)"""
        batch_size, seq_len = x.size(0), x.size(1)
        if hidden is None:
            hidden = torch.zeros(batch_size, self.hidden_size)
        outputs, states = [], []
        for t in range(seq_len):
            x_t = x[:, t, :]                                          # (batch, input_size)
            hidden = torch.tanh(self.W_xh(x_t) + self.W_hh(hidden))   # (batch, hidden_size)
            states.append(hidden.unsqueeze(1))
            outputs.append(self.W_hy(hidden).unsqueeze(1))            # (batch, 1, output_size)
        self.states = torch.cat(states, dim=1)                        # kept for plotting: (batch, seq_len, hidden)
        return torch.cat(outputs, dim=1), hidden

rnn = RNN(input_size=4, hidden_size=16, output_size=3)
x = torch.randn(2, 12, 4)                                             # 2 sequences, 12 steps, 4 features
y, h_last = rnn(x)
print("x", tuple(x.shape), "-> outputs", tuple(y.shape), " last hidden", tuple(h_last.shape))

# %% [markdown]
# The hidden state of one sequence over time: each column is `h_t`, a 16-number summary of the prefix
# `x_1 … x_t`. The values live in (-1, 1) because of the `tanh`.

# %%
plt.figure(figsize=(8, 3))
plt.imshow(rnn.states[0].detach().numpy().T, cmap="RdBu", vmin=-1, vmax=1, aspect="auto")
plt.colorbar(label="h value")
plt.xlabel("time step t")
plt.ylabel("hidden unit")
plt.title("hidden state h_t of the hand-written RNN (sequence 0)")
plt.show()

# %% [markdown]
# ## 2. `nn.RNN` gives the same numbers from the same weights
#
# `nn.RNN` runs the whole time loop inside one C kernel (and its backward too). It stores the two
# recurrences' weights as `weight_ih_l0` (= `W_xh.weight`), `weight_hh_l0` (= `W_hh.weight`) and one
# bias for each. It returns the hidden states of every step — the output projection `W_hy` is not
# part of it — and the last hidden state `h_n` of shape `(num_layers, batch, hidden)`.

# %%
fused = nn.RNN(input_size=4, hidden_size=16, batch_first=True)
with torch.no_grad():
    fused.weight_ih_l0.copy_(rnn.W_xh.weight)
    fused.weight_hh_l0.copy_(rnn.W_hh.weight)
    fused.bias_ih_l0.copy_(rnn.W_xh.bias)
    fused.bias_hh_l0.copy_(rnn.W_hh.bias)

states, h_n = fused(x)                                 # (2, 12, 16), (1, 2, 16)
np.testing.assert_allclose(states.detach().numpy(), rnn.states.detach().numpy(), rtol=1e-5, atol=1e-6)
np.testing.assert_allclose(h_n[0].detach().numpy(), h_last.detach().numpy(), rtol=1e-5, atol=1e-6)
np.testing.assert_allclose(rnn.W_hy(states).detach().numpy(), y.detach().numpy(), rtol=1e-5, atol=1e-6)
print("hidden states, h_n and outputs match ✓")

# %% [markdown]
# The gradients match too: backpropagation through time (BPTT, 随时间反向传播) in the C kernel gives the
# same weight gradients as autograd through our Python loop.

# %%
target = torch.randn(2, 12, 16)
rnn.zero_grad()
fused.zero_grad()
((rnn.states - target) ** 2).mean().backward()
((states - target) ** 2).mean().backward()
np.testing.assert_allclose(fused.weight_hh_l0.grad.numpy(), rnn.W_hh.weight.grad.numpy(), rtol=1e-4, atol=1e-6)
np.testing.assert_allclose(fused.weight_ih_l0.grad.numpy(), rnn.W_xh.weight.grad.numpy(), rtol=1e-4, atol=1e-6)
np.testing.assert_allclose(fused.bias_hh_l0.grad.numpy(), rnn.W_hh.bias.grad.numpy(), rtol=1e-4, atol=1e-6)
print("BPTT gradients match ✓")

# %% [markdown]
# ### The C that ran
# `kernels.source(name)` shows a kernel's C exactly as it was compiled into ctransformer (comment
# first; one template serves float32 and float64: `FN(rnn_forward)` is `rnn_forward_f32` / `_f64`,
# `real` is `float` / `double`). `rnn_forward` computes the input projection `x W_ihᵀ + b_ih` of
# **all** steps as one matrix product up front — it does not depend on `h` — and then runs the time
# loop (`forward_sweep`: each thread takes a block of batch rows through every step). A step computes
# `h W_hhᵀ + b_hh` and calls `row_forward`, the gate maths, whose `CT_RNN_TANH` case is the `tanh` of
# our hand-written cell. (The same kernel serves LSTM and GRU: notebook 03 reads its backward.)

# %%
from IPython.display import display

from ctransformer import kernels

display(kernels.source("rnn_forward"), kernels.source("recurrent.c:row_forward"))

# %% [markdown]
# Stacking: with `num_layers=2` the second RNN reads the first one's hidden states. The output is
# the top layer's states; `h_n` holds the last state of every layer.

# %%
stacked = nn.RNN(input_size=4, hidden_size=16, num_layers=2, batch_first=True)
out2, h2 = stacked(x)
print("output", tuple(out2.shape), " h_n", tuple(h2.shape))
np.testing.assert_allclose(out2[:, -1].detach().numpy(), h2[-1].detach().numpy(), rtol=1e-6)

# %% [markdown]
# ## 3. Training a character-level RNN (字符级语言模型)
#
# The classic first use: read text one character at a time and predict the next character. The model
# is `Embedding → nn.RNN → Linear`, trained with cross-entropy on every position.

# %%
text = ("the cat sat on the mat. the dog sat on the log. the cat saw the dog. "
        "the dog saw the cat on the mat. a cat and a dog sat on a log. ") * 4
chars = sorted(set(text))
stoi = {c: i for i, c in enumerate(chars)}
data = np.array([stoi[c] for c in text], dtype=np.int64)
print(f"{len(text)} characters, vocabulary of {len(chars)}: {''.join(chars)!r}")


class CharRNN(nn.Module):
    def __init__(self, vocab, emb=16, hidden=96):
        super().__init__()
        self.embed = nn.Embedding(vocab, emb)
        self.rnn = nn.RNN(emb, hidden, batch_first=True)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, ids, h=None):                 # ids: (B, T)
        states, h = self.rnn(self.embed(ids), h)    # (B, T, hidden)
        return self.head(states), h                 # logits (B, T, vocab)


def sample(model, prompt="the ", n=60, temperature=0.6, seed=0):
    rng = np.random.default_rng(seed)
    model.eval()
    out, h = prompt, None
    ids = torch.tensor([[stoi[c] for c in prompt]])
    with torch.no_grad():
        for _ in range(n):
            logits, h = model(ids, h)
            p = (logits[0, -1] / temperature).softmax(-1).numpy().astype(np.float64)
            nxt = int(rng.choice(len(p), p=p / p.sum()))
            out += chars[nxt]
            ids = torch.tensor([[nxt]])
    model.train()
    return out


model = CharRNN(len(chars))
print("untrained:", repr(sample(model)))

# %%
seq_len, batch, steps = 24, 32, 300
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
criterion = nn.CrossEntropyLoss()
rng = np.random.default_rng(0)
losses = []
t0 = time.time()
for step in tqdm(range(steps), desc="char-RNN", mininterval=1):
    starts = rng.integers(0, len(data) - seq_len - 1, size=batch)
    xb = torch.tensor(np.stack([data[s:s + seq_len] for s in starts]))
    yb = torch.tensor(np.stack([data[s + 1:s + seq_len + 1] for s in starts]))
    logits, _ = model(xb)
    loss = criterion(logits.reshape(-1, len(chars)), yb.reshape(-1))
    optimizer.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    losses.append(loss.item())
print(f"{time.time() - t0:.1f} s; loss {losses[0]:.2f} -> {np.mean(losses[-20:]):.2f}")
print("trained:  ", repr(sample(model)))
assert np.mean(losses[-20:]) < 0.5 * losses[0]

plt.figure(figsize=(6, 3))
plt.plot(losses)
plt.xlabel("step")
plt.ylabel("cross-entropy")
plt.title("char-RNN training loss")
plt.show()

# %% [markdown]
# ## 4. Why plain RNNs forget: vanishing gradients
#
# How much does the last hidden state `h_T` depend on the input at step `t`? Backpropagation answers:
# the gradient `∂h_T/∂x_t` is a product of `T - t` Jacobians `diag(1 - h²) W_hh`. When those factors are
# smaller than one (tanh saturates, or `W_hh` is small) the product shrinks **exponentially** with the
# distance; when they are larger it explodes (梯度爆炸) — which is why the training loop above clips the
# gradient norm. Below: the gradient norm reaching each input step of a 60-step sequence, for three
# scales of `W_hh`.

# %%
T = 60
xs = torch.randn(1, T, 8)
plt.figure(figsize=(7, 3.5))
for scale in (0.5, 1.0, 2.0):
    torch.manual_seed(1)
    r = nn.RNN(8, 32, batch_first=True)
    with torch.no_grad():
        w = np.random.default_rng(1).standard_normal((32, 32)).astype(np.float32)
        w *= scale / np.abs(np.linalg.eigvals(w)).max()          # spectral radius = scale
        r.weight_hh_l0.copy_(torch.tensor(w))
    inp = xs.clone().requires_grad_(True)
    _, h_T = r(inp)
    h_T.sum().backward()
    g = np.linalg.norm(inp.grad.numpy()[0], axis=-1)               # ||∂ sum(h_T) / ∂x_t||
    plt.semilogy(np.arange(T), g + 1e-30, label=f"spectral radius of W_hh = {scale}")
plt.xlabel("input step t (the loss is at step T = 59)")
plt.ylabel("gradient norm (log scale)")
plt.title("how far back the gradient reaches")
plt.legend()
plt.show()

# %% [markdown]
# With a small recurrent matrix the signal from 20 steps back is many orders of magnitude weaker than
# from the last step; only a large recurrent matrix keeps it alive (here the saturating `tanh` stops it
# from exploding, but then the hidden state is pinned at ±1 and hardly listens to new input). With a
# small matrix the network cannot learn long-range dependencies because it never receives a
# gradient that tells it to. Notebook 03's LSTM adds a **cell state** with an additive update that
# lets the gradient pass through almost unchanged.
