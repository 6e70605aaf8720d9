"""The command line: ``ctransformer demo`` (console script) or ``python -m ctransformer demo``.

    ctransformer --version
    ctransformer demo --help
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Optional, Sequence


class ArgumentParser(argparse.ArgumentParser):
    """argparse with one-line errors (``prog: error: message``, exit status 2 as
    argparse's own), without the usage block in front."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")


def prog_name() -> str:
    """The program as the user invoked it: ``ctransformer`` for the console
    script, ``python -m ctransformer`` (with the interpreter's own name) for -m."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    argv0 = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    if (spec is not None and spec.name in ("ctransformer.__main__", "ctransformer")) or argv0 == "__main__.py":
        python = os.path.basename(sys.executable or "") or "python"
        return f"{python} -m ctransformer"
    if argv0 and argv0 not in ("-c", "-m"):
        return os.path.splitext(argv0)[0] if argv0.endswith((".exe", ".py")) else argv0
    return "ctransformer"


def build_parser(prog: Optional[str] = None) -> ArgumentParser:
    from . import __version__
    from .demo import DESCRIPTION, add_arguments

    parser = ArgumentParser(
        prog=prog or prog_name(),
        description="ctransformer: Transformers, RNNs and LSTMs whose every forward and backward kernel is "
                    "readable C, behind PyTorch's API.",
        epilog="Each command has its own options: %(prog)s demo --help")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="<command>", title="commands")
    demo = commands.add_parser(
        "demo", description=DESCRIPTION,
        help="train a small Chinese->English Transformer on the built-in corpus, report held-out exact "
             "match and BLEU, print translations, save a checkpoint and an attention heatmap")
    add_arguments(demo)
    demo.set_defaults(command_parser=demo)  # range errors after parsing speak as `prog demo`
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    from .demo import run
    return run(args, args.command_parser)


if __name__ == "__main__":
    sys.exit(main())
