"""``python -m ctransformer demo``: the main job (see ctransformer.demo)."""
from __future__ import annotations

import sys
from typing import Optional, Sequence

USAGE = """usage: python -m ctransformer demo [options]

commands:
  demo    train a small translation Transformer on the built-in corpus, report
          held-out accuracy and BLEU, print translations (python -m ctransformer demo --help)
"""


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    if args[0] == "demo":
        from .demo import main as demo_main
        return demo_main(args[1:])
    print(f"unknown command {args[0]!r}\n\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
