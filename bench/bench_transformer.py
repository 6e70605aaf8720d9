"""Benchmark: the Transformer of the PyTorch translation tutorial, ours vs torch.

    python bench/bench_transformer.py            # the full table (< 10 min on 2 cores)
    python bench/bench_transformer.py --quick    # a small smoke run

The model is the tutorials' Seq2SeqTransformer (token embeddings * sqrt(d),
sinusoidal positional encoding, nn.Transformer with batch_first=False, a
generator Linear), its source pasted once and run twice: with torch, and with
``import ctransformer as torch``; our copy gets torch's weights by state_dict.

(a) one training step (forward, CrossEntropyLoss(ignore_index=PAD), backward,
    Adam) of d_model=512, nhead=8, 3+3 layers, dim_feedforward=2048,
    dropout=0.1, vocab 8000, batch 32, source/target length 32.  Also: the
    step's GEMM FLOPs and the GFLOP/s that raw OpenBLAS sgemm reaches on the
    same GEMM shapes (ctypes on ctransformer/_libs/libscipy_openblas.so,
    scipy_cblas_sgemm, the library our kernels call), and our step's share of it.
(b) the same with d_model=128, nhead=4, 2+2 layers, dim_feedforward=512, vocab 1000.
(s) the same at the size `python -m ctransformer demo` trains: d_model=64,
    nhead=4, 2+2 layers, dim_feedforward=256, vocab 300, batch 64, lengths 12.
(c) greedy decoding of 50 tokens, batch 1, d_model=512 model: ours is
    ctransformer.decoding.greedy_decode (KV cache) on a TranslationTransformer
    holding the same weights; torch's is the tutorial's loop that re-runs the
    decoder over the whole prefix each step (model.eval(), torch.no_grad()).
    Both must produce the same tokens.  The streaming floor (one GEMV over as
    many bytes as a token's weights, per token, read in the model's own weight
    memory: see weight_stream) is timed in the same rounds.
    Also beam search (k=4, batch 1) per generated token against greedy
    decoding of batch 4 (the same rows per step).  Both ratios are medians of
    the rounds' own ratios (round_ratio), over DECODE_ROUNDS rounds.
(d) peak resident memory (ru_maxrss) of training step (a), ours vs torch,
    each in a fresh subprocess; also the RSS just before the first step and
    the difference (what the steps themselves added).

Timings: median of REPS steps after WARMUP (ours/torch: the median of the
rounds' own ratios, round_ratio), ours and torch interleaved step by
step (the machine is shared: the load average is printed with the table), at
1 and 2 threads (ctransformer.set_num_threads, torch.set_num_threads), each
timed call after SETTLE_S of quiet: both libraries keep threads of their own
in this one process, and torch's OpenMP worker spins for 7-9 ms after its
step (read from /proc/self/task), taking a core from whatever runs next,
and our pool's load-aware split suffers most (load-blind, as with
use_deterministic_algorithms(True), our step back to back took 47-48 ms).
Back to back, our d128 step at 2 threads took 48-62 ms, with the pause
45-47 ms; torch's 98-108 ms, with it 95-98 ms.
"""
from __future__ import annotations

import argparse
import importlib.util
import math
import os
import resource
import statistics
import subprocess
import sys
import time

import numpy as np

# run from a checkout (python bench/bench_transformer.py): use the in-place build
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import ctransformer  # noqa: E402

PAD, BOS, EOS = 1, 2, 3

# The PyTorch translation tutorial's model (Seq2SeqTransformer, TokenEmbedding,
# PositionalEncoding, create_mask), run under either library.
TUTORIAL = '''
class PositionalEncoding(nn.Module):
    def __init__(self, emb_size, dropout, maxlen=5000):
        super(PositionalEncoding, self).__init__()
        den = torch.exp(- torch.arange(0, emb_size, 2) * math.log(10000) / emb_size)
        pos = torch.arange(0, maxlen).reshape(maxlen, 1)
        pos_embedding = torch.zeros((maxlen, emb_size))
        pos_embedding[:, 0::2] = torch.sin(pos * den)
        pos_embedding[:, 1::2] = torch.cos(pos * den)
        pos_embedding = pos_embedding.unsqueeze(-2)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer('pos_embedding', pos_embedding)

    def forward(self, token_embedding):
        return self.dropout(token_embedding + self.pos_embedding[:token_embedding.size(0), :])


class TokenEmbedding(nn.Module):
    def __init__(self, vocab_size, emb_size):
        super(TokenEmbedding, self).__init__()
        self.embedding = nn.Embedding(vocab_size, emb_size)
        self.emb_size = emb_size

    def forward(self, tokens):
        return self.embedding(tokens.long()) * math.sqrt(self.emb_size)


class Seq2SeqTransformer(nn.Module):
    def __init__(self, num_encoder_layers, num_decoder_layers, emb_size, nhead, src_vocab_size,
                 tgt_vocab_size, dim_feedforward=512, dropout=0.1):
        super(Seq2SeqTransformer, self).__init__()
        self.transformer = nn.Transformer(d_model=emb_size, nhead=nhead,
                                          num_encoder_layers=num_encoder_layers,
                                          num_decoder_layers=num_decoder_layers,
                                          dim_feedforward=dim_feedforward, dropout=dropout)
        self.generator = nn.Linear(emb_size, tgt_vocab_size)
        self.src_tok_emb = TokenEmbedding(src_vocab_size, emb_size)
        self.tgt_tok_emb = TokenEmbedding(tgt_vocab_size, emb_size)
        self.positional_encoding = PositionalEncoding(emb_size, dropout=dropout)

    def forward(self, src, trg, src_mask, tgt_mask, src_padding_mask, tgt_padding_mask,
                memory_key_padding_mask):
        src_emb = self.positional_encoding(self.src_tok_emb(src))
        tgt_emb = self.positional_encoding(self.tgt_tok_emb(trg))
        outs = self.transformer(src_emb, tgt_emb, src_mask, tgt_mask, None,
                                src_padding_mask, tgt_padding_mask, memory_key_padding_mask)
        return self.generator(outs)

    def encode(self, src, src_mask):
        return self.transformer.encoder(self.positional_encoding(self.src_tok_emb(src)), src_mask)

    def decode(self, tgt, memory, tgt_mask):
        return self.transformer.decoder(self.positional_encoding(self.tgt_tok_emb(tgt)), memory, tgt_mask)


def generate_square_subsequent_mask(sz):
    mask = (torch.triu(torch.ones((sz, sz))) == 1).transpose(0, 1)
    mask = mask.float().masked_fill(mask == 0, float('-inf')).masked_fill(mask == 1, float(0.0))
    return mask


def create_mask(src, tgt):
    src_seq_len = src.shape[0]
    tgt_seq_len = tgt.shape[0]
    tgt_mask = generate_square_subsequent_mask(tgt_seq_len)
    src_mask = torch.zeros((src_seq_len, src_seq_len)).type(torch.bool)
    src_padding_mask = (src == PAD_IDX).transpose(0, 1)
    tgt_padding_mask = (tgt == PAD_IDX).transpose(0, 1)
    return src_mask, tgt_mask, src_padding_mask, tgt_padding_mask


def train_step(model, optimizer, loss_fn, src, tgt):
    tgt_input = tgt[:-1, :]
    src_mask, tgt_mask, src_padding_mask, tgt_padding_mask = create_mask(src, tgt_input)
    logits = model(src, tgt_input, src_mask, tgt_mask, src_padding_mask, tgt_padding_mask,
                   src_padding_mask)
    optimizer.zero_grad()
    tgt_out = tgt[1:, :]
    loss = loss_fn(logits.reshape(-1, logits.shape[-1]), tgt_out.reshape(-1))
    loss.backward()
    optimizer.step()
    return loss.item()


def greedy_decode(model, src, src_mask, max_len, start_symbol):
    memory = model.encode(src, src_mask)
    ys = torch.ones(1, 1).fill_(start_symbol).type(torch.long)
    for i in range(max_len - 1):
        tgt_mask = (generate_square_subsequent_mask(ys.size(0)).type(torch.bool))
        out = model.decode(ys, memory, tgt_mask)
        out = out.transpose(0, 1)
        prob = model.generator(out[:, -1])
        _, next_word = torch.max(prob, dim=1)
        next_word = next_word.item()
        ys = torch.cat([ys, torch.ones(1, 1).type_as(src.data).fill_(next_word)], dim=0)
        if next_word == EOS_IDX:
            break
    return ys
'''

CONFIGS = {
    "a": dict(d_model=512, nhead=8, layers=3, ff=2048, vocab=8000),
    "b": dict(d_model=128, nhead=4, layers=2, ff=512, vocab=1000),
    "s": dict(d_model=64, nhead=4, layers=2, ff=256, vocab=300),  # the size `ctransformer demo` trains
}
BATCH, SEQ = 32, 32
SHAPES = {"s": (64, 12)}  # (batch, length) where not (BATCH, SEQ): the demo's batches
TARGETS = {"a": 0.8, "b": 0.5, "s": 0.5}


def tutorial(lib):
    """The tutorial's namespace, run against `lib` (torch or ctransformer)."""
    ns = dict(torch=lib, nn=lib.nn, math=math, PAD_IDX=PAD, EOS_IDX=EOS)
    exec(compile(TUTORIAL, "<tutorial>", "exec"), ns)
    return ns


def make_batch(vocab: int, seed: int = 0):
    """src (SEQ, BATCH), tgt (SEQ + 1, BATCH) int64 ids, sequence first,
    BOS ... EOS then PAD to the right (lengths from SEQ // 2 to full)."""
    rng = np.random.default_rng(seed)

    def ids(T):
        x = np.full((T, BATCH), PAD, np.int64)
        for b in range(BATCH):
            n = int(rng.integers(T // 2, T + 1))
            x[0, b] = BOS
            x[1:n - 1, b] = rng.integers(4, vocab, n - 2)
            x[n - 1, b] = EOS
        return x

    return ids(SEQ), ids(SEQ + 1)


def have_torch() -> bool:
    """torch is optional: without it only our columns are measured.  (Not
    imported at module level: bench_memory must run before the first import.)"""
    return importlib.util.find_spec("torch") is not None


def build_pair(cfg: dict):
    """(ours, torch) tutorial models with the same weights, dropout 0.1, train
    mode; torch's pair is (None, None) without torch (ours then initialised by
    ctransformer with the tutorial's xavier_uniform_)."""
    args = (cfg["layers"], cfg["layers"], cfg["d_model"], cfg["nhead"], cfg["vocab"], cfg["vocab"], cfg["ff"], 0.1)
    ct = tutorial(ctransformer)
    m_c = ct["Seq2SeqTransformer"](*args)
    if not have_torch():
        ctransformer.manual_seed(0)
        for p in m_c.parameters():
            if p.dim() > 1:
                ctransformer.nn.init.xavier_uniform_(p)
        return (m_c, ct), (None, None)
    import torch
    tt = tutorial(torch)
    torch.manual_seed(0)
    m_t = tt["Seq2SeqTransformer"](*args)
    for p in m_t.parameters():
        if p.dim() > 1:
            torch.nn.init.xavier_uniform_(p)
    m_c.load_state_dict({k: v.detach().numpy().copy() for k, v in m_t.state_dict().items()})
    return (m_c, ct), (m_t, tt)


def trainer(model, ns, lib, src, tgt):
    """A closure running one tutorial training step on fixed data."""
    opt = lib.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    loss_fn = lib.nn.CrossEntropyLoss(ignore_index=PAD)
    s, t = lib.tensor(src), lib.tensor(tgt)
    model.train()
    return lambda: ns["train_step"](model, opt, loss_fn, s, t)


def set_threads(n: int) -> None:
    ctransformer.set_num_threads(n)
    if have_torch():
        import torch
        torch.set_num_threads(n)


SETTLE_S = 0.02  # quiet before each timed call: the other library's spinning threads stop (see the top)


def interleaved_rounds(fns: dict, warmup: int, reps: int) -> dict:
    """Seconds of each closure in each of `reps` rounds (after `warmup`), run
    in turns (one of each per round), each call after SETTLE_S of sleep."""
    times = {k: [] for k in fns}
    for r in range(warmup + reps):
        for k, fn in fns.items():
            time.sleep(SETTLE_S)
            t0 = time.perf_counter()
            fn()
            dt = time.perf_counter() - t0
            if r >= warmup:
                times[k].append(dt)
    return times


def round_ratio(times: dict, a: str, b: str) -> float:
    """Median over the rounds of a's time / b's time in the same round.  The
    machine's memory bandwidth flips between two states within a run (the
    floor of (c) at 2 threads: 0.74-0.85 ms in some rounds, 1.4-1.5 ms in
    others, minutes apart), so a ratio of two medians can pair a fast
    median with a slow one; a round's two calls are seconds apart."""
    return statistics.median(x / y for x, y in zip(times[a], times[b]))


# ---------------------------------------------------------------- raw sgemm on the step's shapes

CBLAS_ROW_MAJOR, NT, TR = 101, 111, 112


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_linear import load_openblas  # noqa: E402  (one loader of the bundled OpenBLAS for every bench)


def linear_gemms(M: int, K: int, N: int, count: int, need_dinp: bool = True) -> list:
    """A Linear (M, K) -> (M, N): forward out = x W^T, backward dx = dy W, dW = dy^T x."""
    g = [(NT, TR, M, N, K, count), (TR, NT, N, K, M, count)]
    if need_dinp:
        g.append((NT, NT, M, K, N, count))
    return g


def attention_gemms(Tq: int, Tk: int, Dh: int, count: int) -> list:
    """Per (batch, head): S = Q K^T, O = P V; dV = P^T dO, dP = dO V^T, dQ = dS K, dK = dS^T Q."""
    return [(NT, TR, Tq, Tk, Dh, count), (NT, NT, Tq, Dh, Tk, count), (TR, NT, Tk, Dh, Tq, count),
            (NT, TR, Tq, Tk, Dh, count), (NT, NT, Tq, Dh, Tk, count), (TR, NT, Tk, Dh, Tq, count)]


def step_gemms(cfg: dict) -> list:
    """Every GEMM of one training step: (transA, transB, M, N, K, count)."""
    d, H, L, F, V = cfg["d_model"], cfg["nhead"], cfg["layers"], cfg["ff"], cfg["vocab"]
    M = BATCH * SEQ
    n_attn = 2 * L + L  # encoder self, decoder self + cross
    g = []
    g += linear_gemms(M, d, d, 4 * n_attn)               # q, k, v and out projections
    g += linear_gemms(M, d, F, 2 * L)                    # feed-forward linear1
    g += linear_gemms(M, F, d, 2 * L)                    # feed-forward linear2
    g += linear_gemms(M, d, V, 1)                        # generator
    g += attention_gemms(SEQ, SEQ, d // H, BATCH * H * n_attn)
    return g


def gemm_flops(gemms: list) -> float:
    return sum(2.0 * m * n * k * c for _, _, m, n, k, c in gemms)


def raw_sgemm_seconds(lib, gemms: list, reps: int) -> float:
    """Seconds raw sgemm needs for all `gemms`: per shape the median of `reps`
    timings, times its count.  Large shapes: scipy_cblas_sgemm through ctypes.
    The small per-(batch, head) attention shapes (microseconds each, no more
    than the ctypes call itself): a C loop of the same sgemm calls
    (ctransformer.kernels.bmm_forward, linear.c), timed as non-transposed
    products of the same sizes."""
    import ctransformer.kernels as K
    rng = np.random.default_rng(0)
    fn = lib.scipy_cblas_sgemm
    total = 0.0
    for ta, tb, m, n, k, count in gemms:
        if m * n * k < 2 ** 18 and count >= 64:
            batch = min(count, 256)
            a = rng.standard_normal((batch, m, k)).astype(np.float32)
            b = rng.standard_normal((batch, k, n)).astype(np.float32)
            K.bmm_forward(a, b)
            samples = []
            for _ in range(reps):
                t0 = time.perf_counter()
                K.bmm_forward(a, b)
                samples.append((time.perf_counter() - t0) / batch)
            total += statistics.median(samples) * count
            continue
        a = rng.standard_normal((k, m) if ta == TR else (m, k)).astype(np.float32)
        b = rng.standard_normal((n, k) if tb == TR else (k, n)).astype(np.float32)
        c = np.zeros((m, n), np.float32)
        args = (CBLAS_ROW_MAJOR, ta, tb, m, n, k, 1.0, a.ctypes.data, a.shape[1], b.ctypes.data, b.shape[1], 0.0,
                c.ctypes.data, n)
        fn(*args)
        samples = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn(*args)
            samples.append(time.perf_counter() - t0)
        total += statistics.median(samples) * count
    return total


# ---------------------------------------------------------------- (c) decoding

def translation_twin(tutorial_model, cfg: dict):
    """A TranslationTransformer holding the tutorial model's weights (either library's)."""
    from ctransformer.models import TranslationTransformer
    ours = TranslationTransformer(cfg["vocab"], cfg["vocab"], cfg["d_model"], cfg["nhead"], cfg["layers"],
                                  cfg["layers"], cfg["ff"], dropout=0.1, pad_id=PAD)
    sd = {}
    for k, v in tutorial_model.state_dict().items():
        a = v.detach().numpy().copy()
        if k.startswith("transformer."):
            sd[k[len("transformer."):]] = a
        elif k == "src_tok_emb.embedding.weight":
            sd["src_embed.weight"] = a
        elif k == "tgt_tok_emb.embedding.weight":
            sd["tgt_embed.weight"] = a
        elif k.startswith("generator."):
            sd[k] = a
    ours.load_state_dict(sd)
    return ours


def bench_decode(n_tokens: int, reps: int, threads_list) -> list:
    from ctransformer.decoding import greedy_decode
    cfg = CONFIGS["a"]
    (m_c, _), (m_t, tt) = build_pair(cfg)
    ours = translation_twin(m_c, cfg)
    # batch 1, a full-length source (S, 1): the tutorial's encode takes no padding mask
    rng = np.random.default_rng(1)
    src = np.concatenate([[BOS], rng.integers(4, cfg["vocab"], SEQ - 2), [EOS]])[:, None].astype(np.int64)
    eos_never = -1  # decode exactly n_tokens tokens

    def run_ours():
        return greedy_decode(ours, src.T.copy(), n_tokens, BOS, eos_never).numpy()[0]

    fns = {"ours": run_ours}
    same = None
    if m_t is not None:
        import torch
        m_t.eval()
        src_t = torch.tensor(src)
        src_mask = torch.zeros((src.shape[0], src.shape[0])).type(torch.bool)

        def run_torch():
            with torch.no_grad():
                return tt["greedy_decode"](m_t, src_t, src_mask, n_tokens + 1, BOS).numpy()[:, 0]

        tt["EOS_IDX"] = eos_never
        fns["torch"] = run_torch
        a, b = run_ours(), run_torch()
        same = a.shape == b.shape and bool((a == b).all())
    ntok = len(run_ours()) - 1
    beams = beam_vs_greedy_fns(ours, src.T.copy(), n_tokens, eos_never)
    nbytes, stream = weight_stream(ours, ntok)
    fns["floor"] = stream  # in the same rounds: the machine's bandwidth drifts over minutes
    rows = []
    for n in threads_list:
        set_threads(n)
        t = interleaved_rounds(fns, 1, reps)
        b = interleaved_rounds(beams, 1, reps)
        med = {k: statistics.median(v) for k, v in {**t, **b}.items()}
        ours_torch = round_ratio(t, "ours", "torch") if "torch" in t else None
        rows.append((n, med["ours"], med.get("torch"), ours_torch, same, ntok, (nbytes, med["floor"] / ntok),
                     round_ratio(t, "ours", "floor"), med["beam"] / n_tokens, med["greedy"] / n_tokens,
                     round_ratio(b, "beam", "greedy")))
    return rows


BEAM = 4
DECODE_ROUNDS = 7  # (c)'s rounds (torch's prefix loop is ~0.8 s of each)


def beam_vs_greedy_fns(model, src, n_tokens: int, eos: int) -> dict:
    """beam_search(k=BEAM) of one source and greedy_decode of BEAM copies of
    it: both run BEAM rows through the model per step, n_tokens steps."""
    from ctransformer.decoding import beam_search, greedy_decode
    batch = np.repeat(src, BEAM, axis=0)
    return {"beam": lambda: beam_search(model, src, BEAM, n_tokens, BOS, eos),
            "greedy": lambda: greedy_decode(model, batch, n_tokens, BOS, eos)}


def decode_weight_bytes(model) -> int:
    """Bytes of weights one cached decoding step must read: every parameter
    of the decoder (its final norm included) and of the generator, less
    cross-attention's key/value projections (applied once per source).  A
    batch-1 step is a GEMV per weight: each element is used once."""
    total = 0
    for name, p in model.named_parameters():
        if name.startswith(("decoder.", "generator.")):
            total += p.numel() * 4
            if "multihead_attn.in_proj_weight" in name or "multihead_attn.in_proj_bias" in name:
                total -= p.numel() * 4 * 2 // 3  # the k, v rows: memory projected once
    return total


def weight_stream(model, ntok: int) -> tuple:
    """(bytes per step, closure): the closure streams those bytes ntok times,
    one GEMV (our decode_linear, batch 1) over a float32 matrix of the same
    size as the step's weights each time - the floor of ntok batch-1 steps
    that read each weight once.  Timed in the same interleaved rounds as the
    decoders, so both see the same memory bandwidth.  The matrix is a view of
    the model's own weight memory (decode_breakdown.own_weight_rows: on this
    VM a fresh matrix's pages streamed up to 1.2x faster or slower than the
    weights' own, from one process to the next)."""
    import ctransformer.kernels as K
    from decode_breakdown import own_weight_rows
    nbytes = decode_weight_bytes(model)
    w = own_weight_rows(model, nbytes)
    x = np.ones((1, 512), np.float32)

    def stream():
        for _ in range(ntok):
            K.decode_linear(x, w, None)

    return nbytes, stream


# ---------------------------------------------------------------- (d) memory

MEMORY_CHILD = r'''
import os, resource, sys
sys.path.insert(0, {root!r})
sys.argv = ["bench", "--memory-child", {which!r}]
import bench_transformer as B
B.memory_child({which!r}, {steps})
'''


def current_rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def vm_hwm_mb() -> float:
    """Peak RSS of this process's own address space (VmHWM, reset by exec)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def memory_child(which: str, steps: int) -> None:
    """Run `steps` training steps of config (a) with one library only (the other
    is never imported); print 'rss_before ru_maxrss vm_hwm' in MiB."""
    cfg = CONFIGS["a"]
    if which == "torch":
        import torch as lib
    else:
        lib = ctransformer
    lib.set_num_threads(1)
    ns = tutorial(lib)
    lib.manual_seed(0)
    args = (cfg["layers"], cfg["layers"], cfg["d_model"], cfg["nhead"], cfg["vocab"], cfg["vocab"], cfg["ff"], 0.1)
    model = ns["Seq2SeqTransformer"](*args)
    src, tgt = make_batch(cfg["vocab"])
    step = trainer(model, ns, lib, src, tgt)
    before = current_rss_mb()
    for _ in range(steps):
        step()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{before:.1f} {peak:.1f} {vm_hwm_mb():.1f}")


def bench_memory(steps: int) -> dict:
    """Each library in a fresh subprocess.  Run before this process imports
    torch or builds a model: a child's ru_maxrss starts from the RSS of the
    process that forked it, so the parent must be smaller than the children."""
    out = {}
    for which in ("ours", "torch") if have_torch() else ("ours",):
        code = MEMORY_CHILD.format(root=os.path.dirname(os.path.abspath(__file__)), which=which, steps=steps)
        env = dict(os.environ, PYTHONPATH=ROOT)
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
        out[which] = tuple(map(float, r.stdout.split()[-3:]))
    return out


# ---------------------------------------------------------------- main

def bench_training(name: str, warmup: int, reps: int, threads_list, lib_blas) -> list:
    """Rows (threads, ours s, torch s, ours/torch, GEMM FLOPs, raw sgemm s) of
    config `name`'s training step, at its batch shape (SHAPES)."""
    global BATCH, SEQ
    saved = BATCH, SEQ
    BATCH, SEQ = SHAPES.get(name, saved)
    try:
        return _bench_training(name, warmup, reps, threads_list, lib_blas)
    finally:
        BATCH, SEQ = saved


def _bench_training(name: str, warmup: int, reps: int, threads_list, lib_blas) -> list:
    cfg = CONFIGS[name]
    (m_c, ct), (m_t, tt) = build_pair(cfg)
    src, tgt = make_batch(cfg["vocab"])
    fns = {"ours": trainer(m_c, ct, ctransformer, src, tgt)}
    if m_t is not None:
        import torch
        fns["torch"] = trainer(m_t, tt, torch, src, tgt)
    gemms = step_gemms(cfg)
    flops = gemm_flops(gemms)
    rows = []
    for n in threads_list:
        set_threads(n)
        times = interleaved_rounds(fns, warmup, reps)
        t = {k: statistics.median(v) for k, v in times.items()}
        vs_torch = round_ratio(times, "ours", "torch") if "torch" in times else None
        # raw sgemm on OpenBLAS's own threads (ctransformer keeps them at one and splits GEMMs itself)
        lib_blas.scipy_openblas_set_num_threads(n)
        raw = raw_sgemm_seconds(lib_blas, gemms, 3)
        lib_blas.scipy_openblas_set_num_threads(1)
        rows.append((n, t["ours"], t.get("torch"), vs_torch, flops, raw))
    return rows


def ms(seconds) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.1f}"


def ratio(value) -> str:
    return "-" if value is None else f"{value:.3f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small smoke run (config b, 10 tokens, few steps)")
    ap.add_argument("--only", default="abscd", help="which parts to run, e.g. 'ac'")
    args = ap.parse_args()
    quick = args.quick
    parts = "bcd" if quick else args.only
    warmup, reps = (1, 2) if quick else (2, 5)
    threads_list = (1, 2)
    load_before = os.getloadavg()
    mem = bench_memory(1 if quick else 3) if "d" in parts else None  # first: see bench_memory
    torch_version = "not installed: torch columns show '-'"
    if have_torch():
        import torch
        torch_version = torch.__version__
    lib_blas = load_openblas()
    print(f"ctransformer {ctransformer.__version__} ({ctransformer.kernels.blas_config()}), "
          f"torch {torch_version}; batch {BATCH}, lengths {SEQ} (25% padding on average); median of {reps} "
          f"after {warmup} warm-up, ours and torch interleaved; load average before: "
          f"{' '.join(f'{x:.2f}' for x in load_before)}")
    hdr = f"{'part':<28} {'thr':>3} {'ours ms':>9} {'torch ms':>9} {'ours/torch':>10}  notes"
    print(hdr)
    print("-" * len(hdr), flush=True)
    for name in "abs":
        if name not in parts:
            continue
        cfg = CONFIGS[name]
        label = f"({name}) train d{cfg['d_model']} L{cfg['layers']}+{cfg['layers']} V{cfg['vocab']}"
        if name in SHAPES:
            label += " B{}xT{}".format(*SHAPES[name])
        target = TARGETS[name]
        for n, ours, tor, vs_torch, flops, raw in bench_training(name, warmup, reps, threads_list, lib_blas):
            gf_ours, gf_raw = flops / ours / 1e9, flops / raw / 1e9
            print(f"{label:<28} {n:>3} {ours * 1e3:>9.1f} {ms(tor):>9} {ratio(vs_torch):>10}  "
                  f"target <= {target}; GEMM {flops / 1e9:.1f} GFLOP: ours {gf_ours:.1f} GFLOP/s, raw sgemm "
                  f"{gf_raw:.1f} GFLOP/s ({raw * 1e3:.0f} ms) -> {100 * gf_ours / gf_raw:.0f}%"
                  f"{' (target >= 70%)' if name != 's' else ''}",
                  flush=True)
    if "c" in parts:
        n_tok = 10 if quick else 50
        rounds = 1 if quick else DECODE_ROUNDS
        for n, ours, tor, ours_torch, same, ntok, (nbytes, t_stream), vs_floor, beam, greedy4, vs_greedy in \
                bench_decode(n_tok, rounds, threads_list):
            floor = ntok * t_stream
            vs_torch = "" if tor is None else (f"speed-up {tor / ours:.1f}x (at the streaming floor it would be "
                                               f"{tor / floor:.1f}x); same tokens: {same}; ")
            print(f"{'(c) greedy ' + str(ntok) + ' tok, batch 1':<28} {n:>3} {ours * 1e3:>9.1f} {ms(tor):>9} "
                  f"{ratio(ours_torch):>10}  {vs_torch}"
                  f"weights read per token {nbytes / 2**20:.1f} MiB, one GEMV over them (in place) {t_stream * 1e3:.2f} ms "
                  f"({nbytes / t_stream / 1e9:.1f} GB/s) -> streaming floor for {ntok} tokens "
                  f"{floor * 1e3:.0f} ms; ours = {vs_floor:.2f} x floor (median of {rounds} rounds' ratios)",
                  flush=True)
            print(f"{'(c) beam ' + str(BEAM) + ', ms per token':<28} {n:>3} {beam * 1e3:>9.2f} {'-':>9} {'-':>10}  "
                  f"beam_search(k={BEAM}, batch 1) per token vs greedy_decode of batch {BEAM} "
                  f"{greedy4 * 1e3:.2f} ms per token: {vs_greedy:.2f}x (target <= 1.1)", flush=True)
    if mem is not None and "torch" not in mem:
        ob, op, oh = mem["ours"]
        print(f"{'(d) peak RSS train (a), MiB':<28} {1:>3} {op:>9.0f} {'-':>9} {'-':>10}  "
              f"(ru_maxrss; VmHWM {oh:.0f}); before the first step {ob:.0f}, added by the steps {op - ob:.0f}")
    elif mem is not None:
        (ob, op, oh), (tb, tp, th) = mem["ours"], mem["torch"]
        print(f"{'(d) peak RSS train (a), MiB':<28} {1:>3} {op:>9.0f} {tp:>9.0f} {op / tp:>10.3f}  "
              f"target <= 1 (ru_maxrss; VmHWM ours {oh:.0f} / torch {th:.0f}); before the first step ours "
              f"{ob:.0f} / torch {tb:.0f}, added by the steps ours {op - ob:.0f} / torch {tp - tb:.0f}")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
