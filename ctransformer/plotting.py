"""Plots for the demo and the notebooks (matplotlib).

:func:`attention_heatmap` draws an attention matrix with the source tokens on
the x axis, the target tokens on the y axis, a title that fits the figure and
a colour bar.  Chinese tokens render everywhere: the package ships a small
subset of Noto Sans CJK SC (``fonts/ctransformer-cjk.ttf``, SIL Open Font
License 1.1, see ``fonts/OFL.txt``) holding the characters of the built-in
corpus and of the notebooks, registered with matplotlib on first use.  A CJK
font installed on the machine is preferred when present (it covers every
character, not only the corpus's).
"""
from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, List, Optional, Sequence

import numpy as np

from ._atomic import write_atomically

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

FONT_FILE = Path(__file__).resolve().parent / "fonts" / "ctransformer-cjk.ttf"
FONT_FAMILY = "ctransformer CJK"  # the family name inside FONT_FILE

# Installed fonts with (nearly) all Chinese characters, preferred over the subset when present.
_SYSTEM_CJK = ("Noto Sans CJK SC", "Noto Sans SC", "Source Han Sans SC", "Source Han Sans CN", "WenQuanYi Zen Hei",
               "WenQuanYi Micro Hei", "Microsoft YaHei", "PingFang SC", "Heiti SC", "SimHei", "Droid Sans Fallback")

_families: Optional[List[str]] = None


def font_families() -> List[str]:
    """Font families for text that mixes Latin and Chinese, in matplotlib's
    per-glyph fallback order: DejaVu Sans (matplotlib's own) for Latin, an
    installed CJK font if any, then the bundled subset.  Registers the subset
    with matplotlib's font manager on first call."""
    global _families
    if _families is None:
        from matplotlib import font_manager

        if FONT_FAMILY not in {f.name for f in font_manager.fontManager.ttflist}:
            font_manager.fontManager.addfont(str(FONT_FILE))
        installed = {f.name for f in font_manager.fontManager.ttflist}
        system = [name for name in _SYSTEM_CJK if name in installed][:1]
        _families = ["DejaVu Sans", *system, FONT_FAMILY]
    return list(_families)


def use_cjk_font() -> List[str]:
    """Make every later matplotlib text able to show Chinese (for notebooks:
    call once, then plot as usual).  Returns the fallback chain set."""
    import matplotlib

    families = font_families()
    rest = [f for f in matplotlib.rcParams["font.sans-serif"] if f not in families]
    matplotlib.rcParams["font.sans-serif"] = families + rest
    matplotlib.rcParams["font.family"] = ["sans-serif"]
    matplotlib.rcParams["axes.unicode_minus"] = True  # DejaVu Sans comes first: it has U+2212
    return families


def _as_matrix(weights) -> np.ndarray:
    if hasattr(weights, "detach"):
        weights = weights.detach()
    if hasattr(weights, "numpy"):
        weights = weights.numpy()
    matrix = np.asarray(weights, dtype=np.float64)
    if matrix.ndim != 2:
        raise ValueError(f"attention_heatmap: weights must be 2-D (target, source), got shape {matrix.shape}")
    return matrix


def attention_heatmap(weights, source_tokens: Sequence[str], target_tokens: Sequence[str], *,
                      title: str = "attention", xlabel: str = "source tokens", ylabel: str = "target tokens",
                      colorbar_label: str = "attention weight", cmap: str = "viridis", vmin: Optional[float] = 0.0,
                      vmax: Optional[float] = None, ax: "Optional[Axes]" = None, path: Optional[str] = None,
                      dpi: int = 120) -> "Figure":
    """Heatmap of ``weights`` (target x source: row ``i`` is how target token
    ``i`` attends over the source tokens; a Tensor or array).

    Source tokens label the columns (x axis, at the top, read left to right
    like the sentence), target tokens the rows; a colour bar gives the scale
    (``vmin`` 0 by default, ``vmax`` the largest weight unless given).  With
    ``ax`` the map is drawn into that Axes (its figure is returned), otherwise
    a new figure sized to the matrix.  With ``path`` the figure is saved as a
    PNG (written aside and renamed, so an interrupted save leaves no broken
    file) and closed.
    """
    import matplotlib.pyplot as plt

    matrix = _as_matrix(weights)
    source, target = [str(t) for t in source_tokens], [str(t) for t in target_tokens]
    if matrix.shape != (len(target), len(source)):
        raise ValueError(f"attention_heatmap: weights have shape {matrix.shape}, but there are "
                         f"{len(target)} target and {len(source)} source tokens")
    families = font_families()
    longest_source = max((len(t) for t in source), default=1)
    if ax is None:
        longest_target = max((len(t) for t in target), default=1)
        width = min(16.0, max(5.0, 1.6 + 0.1 * longest_target + 0.42 * len(source) + 1.2))
        height = min(14.0, max(3.6, 1.6 + 0.1 * longest_source + 0.36 * len(target)))
        fig, ax = plt.subplots(figsize=(width, height), layout="constrained")
    else:
        fig = ax.figure
    image = ax.imshow(matrix, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto", interpolation="nearest")
    ax.set_xticks(range(len(source)))
    ax.set_xticklabels(source, fontfamily=families, fontsize=11,
                       rotation=0 if longest_source <= 2 else 60, ha="center" if longest_source <= 2 else "left",
                       rotation_mode="anchor")
    ax.set_yticks(range(len(target)))
    ax.set_yticklabels(target, fontfamily=families, fontsize=10)
    ax.xaxis.tick_top()
    ax.xaxis.set_label_position("top")
    ax.set_xlabel(xlabel, fontfamily=families)
    ax.set_ylabel(ylabel, fontfamily=families)
    ax.tick_params(length=0)
    bar = fig.colorbar(image, ax=ax, fraction=0.05, pad=0.03)
    bar.set_label(colorbar_label, fontfamily=families)
    # wrap the title to the figure's width (DejaVu Sans: about 0.6 em per character, 12 pt)
    share = ax.get_position().width / 0.775 if len(fig.axes) > 2 else 1.0  # a panel among others
    per_line = max(16, int(0.92 * share * fig.get_figwidth() * 72 / (0.6 * 12)))
    ax.set_title("\n".join(textwrap.wrap(title, per_line)), fontfamily=families, fontsize=12, pad=10)
    if path is not None:
        save_figure(fig, path, dpi=dpi)
        plt.close(fig)
    return fig


def save_figure(fig: "Figure", path: str, dpi: int = 120) -> str:
    """``fig.savefig(path)``, atomically: the image is written next to
    ``path`` and renamed over it, so Ctrl-C never leaves half a file."""
    image_format = os.path.splitext(os.fspath(path))[1].lstrip(".") or "png"
    return write_atomically(path, lambda out: fig.savefig(out, dpi=dpi, format=image_format))
