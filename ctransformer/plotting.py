"""Small helpers for plots of Chinese tokens (matplotlib is optional)."""
from __future__ import annotations

from typing import List, Optional, Sequence

_CJK_CANDIDATES = ("Noto Sans CJK SC", "Noto Sans SC", "Source Han Sans SC", "WenQuanYi Zen Hei",
                   "WenQuanYi Micro Hei", "SimHei", "Microsoft YaHei", "PingFang SC", "Heiti SC",
                   "AR PL UMing CN", "Droid Sans Fallback")


def cjk_font() -> Optional[str]:
    """The first installed font family that has Chinese glyphs, or None."""
    try:
        from matplotlib import font_manager
    except ImportError:
        return None
    installed = {f.name for f in font_manager.fontManager.ttflist}
    for name in _CJK_CANDIDATES:
        if name in installed:
            return name
    return None


def token_labels(tokens: Sequence[str]) -> List[str]:
    """Tick labels for tokens: the tokens themselves when a CJK font is
    installed (or the tokens are ASCII), otherwise their positions with
    the Unicode code point, so a plot never shows empty boxes."""
    if cjk_font() is not None or all(t.isascii() for t in tokens):
        return list(tokens)
    return [t if t.isascii() else f"{i}:U+{ord(t[0]):04X}" for i, t in enumerate(tokens)]


def use_cjk_font() -> Optional[str]:
    """Make matplotlib draw Chinese labels when a suitable font exists.
    Returns the family chosen (or None)."""
    name = cjk_font()
    if name is not None:
        import logging

        import matplotlib

        logging.getLogger("matplotlib.font_manager").setLevel(logging.ERROR)
        matplotlib.rcParams["font.sans-serif"] = [name] + list(matplotlib.rcParams["font.sans-serif"])
        matplotlib.rcParams["axes.unicode_minus"] = False
    return name
