"""The character-level LSTM encoder-decoder that bench_rnn.py times in case
(a): the classic tutorial's model (embedding 32, hidden 128, one LSTM layer,
vocabulary of 29 characters, the eight antonym pairs padded to 8 steps,
teacher forcing 0.5), written once against a torch-like library so the same
code runs in ctransformer and in torch.

    ns = build(lib)     # lib: the module ctransformer or torch
    ns.train_epoch()    # forward, CrossEntropyLoss(ignore_index=PAD), backward, Adam
"""
from __future__ import annotations

import importlib
import random
from types import SimpleNamespace

N_STEP, HIDDEN, EMBED = 8, 128, 32
CHARS = "SEPabcdefghijklmnopqrstuvwxyz"   # S start, E end, P padding
INDEX = {c: i for i, c in enumerate(CHARS)}
PAIRS = [("man", "woman"), ("black", "white"), ("king", "queen"), ("girl", "boy"),
         ("up", "down"), ("high", "low"), ("men", "women"), ("you", "me")]


def _model_classes(nn):
    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = nn.Embedding(len(CHARS), EMBED)
            self.rnn = nn.LSTM(EMBED, HIDDEN, 1)

        def forward(self, src):                       # src [src_len, batch]
            _, (hidden, cell) = self.rnn(self.embedding(src))
            return hidden, cell                       # each [1, batch, HIDDEN]

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = nn.Embedding(len(CHARS), EMBED)
            self.rnn = nn.LSTM(EMBED, HIDDEN, 1)
            self.fc_out = nn.Linear(HIDDEN, len(CHARS))

        def forward(self, token, hidden, cell):       # token [batch]
            output, (hidden, cell) = self.rnn(self.embedding(token.unsqueeze(0)), (hidden, cell))
            return self.fc_out(output.squeeze(0)), hidden, cell

    return Encoder, Decoder


def build(lib) -> SimpleNamespace:
    """Model, loss, Adam(lr 1e-3) and the batch, in ``lib`` (ctransformer or torch)."""
    nn = importlib.import_module(lib.__name__ + ".nn")
    optim = importlib.import_module(lib.__name__ + ".optim")
    Encoder, Decoder = _model_classes(nn)
    encoder, decoder = Encoder(), Decoder()
    params = list(encoder.parameters()) + list(decoder.parameters())
    criterion = nn.CrossEntropyLoss(ignore_index=INDEX["P"])
    optimizer = optim.Adam(params, lr=1e-3)

    def ids(words):   # [len, batch]
        return lib.tensor([[INDEX[c] for c in w] for w in words]).t()

    src = ids(a + "P" * (N_STEP - len(a)) for a, _ in PAIRS)
    dec_in = ids("S" + b + "P" * (N_STEP - len(b)) for _, b in PAIRS)
    target = ids(b + "P" * (N_STEP - len(b)) + "E" for _, b in PAIRS)

    def forward():
        hidden, cell = encoder(src)
        token, steps = dec_in[0], []
        for t in range(1, dec_in.shape[0]):
            logits, hidden, cell = decoder(token, hidden, cell)
            steps.append(logits)
            token = dec_in[t] if random.random() < 0.5 else logits.argmax(1)
        return lib.stack(steps)                       # [trg_len - 1, batch, vocab]

    def train_epoch():
        optimizer.zero_grad()
        loss = criterion(forward().reshape(-1, len(CHARS)), target[1:].reshape(-1))
        loss.backward()
        optimizer.step()
        return loss

    return SimpleNamespace(encoder=encoder, decoder=decoder, train_epoch=train_epoch)
