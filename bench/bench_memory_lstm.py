"""Peak resident memory of an LSTM language-model training step.

    python bench/bench_memory_lstm.py [--steps 3]

Embedding(1000, 256) -> 2-layer LSTM, hidden 512 -> Linear(512, 1000),
batch 64, length 50 (bench_rnn.py's case (b)): forward, cross-entropy,
backward, Adam, ``--steps`` times, in a fresh subprocess; prints the RSS
before the first step, ru_maxrss after the steps and their difference, in
MiB.  The loss of a step stays referenced while the next step runs forward
(as in a plain ``for`` loop), so a graph kept after backward shows here."""
from __future__ import annotations

import argparse
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = r'''
import resource, sys
sys.path.insert(0, {root!r})
import ctransformer as torch
import ctransformer.nn as nn

def rss():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024

torch.set_num_threads(1)
torch.manual_seed(0)
V, E, H, B, T = 1000, 256, 512, 64, 50

class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, E)
        self.rnn = nn.LSTM(E, H, num_layers=2, batch_first=True)
        self.out = nn.Linear(H, V)

    def forward(self, x):
        h, _ = self.rnn(self.emb(x))
        return self.out(h)

model = LM()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
crit = nn.CrossEntropyLoss()
x = torch.randint(0, V, (B, T))
y = torch.randint(0, V, (B, T))
before = rss()
for _ in range({steps}):
    opt.zero_grad()
    loss = crit(model(x).reshape(-1, V), y.reshape(-1))
    loss.backward()
    opt.step()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(f"{{before:.1f}} {{peak:.1f}}")
'''


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args()
    code = CHILD.format(root=ROOT, steps=args.steps)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    before, peak = map(float, r.stdout.split()[-2:])
    print(f"LSTM LM training step x{args.steps}: RSS before {before:.0f} MiB, peak (ru_maxrss) {peak:.0f} MiB, "
          f"added by the steps {peak - before:.0f} MiB")


if __name__ == "__main__":
    main()
