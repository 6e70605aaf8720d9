"""Write docs/torch_coverage.md: which of torch's public names ctransformer has.

    python tests/make_torch_coverage.py                 # regenerate the table (no torch needed)
    python tests/make_torch_coverage.py --record-names  # with torch installed: refresh the name snapshot
                                                        # ctransformer/torch_public_names.json first

The snapshot lists torch's public names in the namespaces ctransformer
mirrors (torch, torch.nn, torch.nn.functional, torch.optim,
torch.optim.lr_scheduler, torch.utils.data, Tensor methods); the table
marks each as supported (the name exists here) or not, with the reason and
the nearest supported path (ctransformer/_coverage.py holds the reasons;
the same text is the AttributeError a script gets).  tests/test_torch_coverage.py
checks that the committed table is current.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
DOC = os.path.join(ROOT, "docs", "torch_coverage.md")


def record_names() -> None:
    """Snapshot torch's public names (needs torch)."""
    import torch
    import torch.nn.functional
    import torch.optim.lr_scheduler
    import torch.utils.data

    def public(mod):
        names = getattr(mod, "__all__", None) or [n for n in dir(mod) if not n.startswith("_")]
        return sorted({n for n in names if not n.startswith("_")})

    functional = sorted(n for n in dir(torch.nn.functional) if not n.startswith("_")
                        and callable(getattr(torch.nn.functional, n))
                        and getattr(getattr(torch.nn.functional, n), "__module__", "") in
                        ("torch.nn.functional", "torch._C._nn", None, "torch"))
    names = {"torch_version": torch.__version__.split("+")[0],
             "torch": public(torch), "torch.nn": public(torch.nn), "torch.nn.functional": functional,
             "torch.optim": public(torch.optim), "torch.optim.lr_scheduler": public(torch.optim.lr_scheduler),
             "torch.utils.data": public(torch.utils.data),
             "Tensor": sorted(n for n in dir(torch.Tensor) if not n.startswith("_"))}
    from ctransformer import _coverage
    with open(_coverage.SNAPSHOT, "w", encoding="utf-8") as f:
        json.dump(names, f, indent=0, sort_keys=True)
        f.write("\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--record-names", action="store_true", help="refresh the snapshot from the installed torch")
    args = parser.parse_args()
    if args.record_names:
        record_names()
    from ctransformer import _coverage
    os.makedirs(os.path.dirname(DOC), exist_ok=True)
    with open(DOC, "w", encoding="utf-8") as f:
        f.write(_coverage.render_markdown())
    print(f"wrote {os.path.relpath(DOC, ROOT)}")


if __name__ == "__main__":
    main()
