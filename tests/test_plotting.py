"""ctransformer.plotting: the bundled CJK font subset covers every character
the corpus and the notebooks can show, and the attention heatmap has labelled
axes, the tokens as tick labels, a title inside the figure and a colour bar,
with no missing-glyph warning, whether or not a CJK font is installed."""
import random
import warnings
from pathlib import Path

import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib")  # a dependency; absent only in a broken install
matplotlib.use("Agg")

from fontTools.ttLib import TTFont  # noqa: E402  (matplotlib's own dependency)

from ctransformer import plotting  # noqa: E402
from ctransformer.data import translation  # noqa: E402
from ctransformer.data.translation import SENTENCE_KINDS, make_translation_corpus, sample_pair  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = Path(translation.__file__).resolve().parent


def _cmap():
    return TTFont(str(plotting.FONT_FILE)).getBestCmap()


def _is_cjk(ch):
    return (0x3000 <= ord(ch) <= 0x303F or 0x4E00 <= ord(ch) <= 0x9FFF or 0xFF00 <= ord(ch) <= 0xFFEF)


def test_font_subset_is_small_and_licensed():
    assert plotting.FONT_FILE.is_file()
    assert plotting.FONT_FILE.stat().st_size < 400_000
    font = TTFont(str(plotting.FONT_FILE))
    assert font["name"].getDebugName(1) == plotting.FONT_FAMILY
    assert "glyf" in font  # TrueType outlines: every matplotlib backend embeds them
    license_text = (plotting.FONT_FILE.parent / "OFL.txt").read_text(encoding="utf-8")
    assert "SIL OPEN FONT LICENSE Version 1.1" in license_text and "Noto Sans CJK SC" in license_text


def test_font_covers_every_character_of_the_corpus():
    cmap = _cmap()
    # every string the grammar is built from (its source literals) ...
    literal_chars = {ch for f in DATA_DIR.glob("*.py") for ch in f.read_text(encoding="utf-8") if ord(ch) > 0x7F}
    # ... and what it actually generates, every sentence kind
    rng = random.Random(0)
    generated = {ch for kind in SENTENCE_KINDS for _ in range(300) for ch in sample_pair(rng, kind=kind)[0]}
    corpus = make_translation_corpus(n_train=3000, n_valid=100, n_test=100, seed=1)
    generated |= {ch for split in corpus.values() for zh, en in split for ch in zh + en}
    assert any(_is_cjk(ch) for ch in generated)
    missing = sorted(ch for ch in generated | {c for c in literal_chars if _is_cjk(c)} if ord(ch) not in cmap)
    assert not missing, f"not in {plotting.FONT_FILE.name}: {''.join(missing)} (run ctransformer/fonts/make_subset.py)"
    assert all(ord(ch) in cmap for ch in map(chr, range(0x20, 0x7F)))


def test_font_covers_the_notebooks_chinese():
    cmap = _cmap()
    chars = {ch for f in (ROOT / "notebooks").glob("*.py") for ch in f.read_text(encoding="utf-8") if _is_cjk(ch)}
    missing = sorted(ch for ch in chars if ord(ch) not in cmap)
    assert not missing, f"not in {plotting.FONT_FILE.name}: {''.join(missing)} (run ctransformer/fonts/make_subset.py)"


def test_attention_heatmap_labels_tokens_and_saves_a_png(tmp_path):
    src = list("三个女人正在游泳。")
    tgt = ["<sos>", "three", "women", "are", "swimming", "."]
    weights = np.random.default_rng(0).dirichlet(np.ones(len(src)), size=len(tgt))
    path = tmp_path / "attention.png"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "Glyph ... missing from font(s)" would fail here
        fig = plotting.attention_heatmap(
            weights, src, tgt, title="decoder cross-attention (last layer, mean over heads), a long title "
                                     "that has to wrap to fit the figure", path=str(path))
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        canvas = FigureCanvasAgg(fig)  # the figure is closed after saving: draw it again to measure
        canvas.draw()
    assert path.read_bytes().startswith(b"\x89PNG")
    assert [p.name for p in tmp_path.iterdir()] == ["attention.png"]  # no temporary file left behind
    ax, colorbar = fig.axes
    assert [t.get_text() for t in ax.get_xticklabels()] == src
    assert [t.get_text() for t in ax.get_yticklabels()] == tgt
    assert ax.get_xlabel() and ax.get_ylabel() and colorbar.get_ylabel() == "attention weight"
    renderer = canvas.get_renderer()
    figure_box = fig.bbox
    title_box = ax.title.get_window_extent(renderer)
    assert figure_box.x0 <= title_box.x0 and title_box.x1 <= figure_box.x1 and title_box.y1 <= figure_box.y1
    # the Chinese tick labels resolve to a font that has the glyph
    from matplotlib.font_manager import FontProperties, fontManager
    label = ax.get_xticklabels()[0]
    for family in plotting.font_families():
        found = fontManager.findfont(FontProperties(family=family), fallback_to_default=False)
        if ord(label.get_text()) in TTFont(found, fontNumber=0).getBestCmap():
            break
    else:
        pytest.fail("no font in the fallback chain has 三")


def test_attention_heatmap_into_given_axes_and_bad_shapes():
    import matplotlib.pyplot as plt
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    out = plotting.attention_heatmap(np.eye(3), ["a", "b", "c"], ["x", "y", "z"], ax=right, title="identity")
    assert out is fig and right.get_title() == "identity" and len(fig.axes) == 3
    with pytest.raises(ValueError, match="3 target and 2 source tokens"):
        plotting.attention_heatmap(np.eye(3), ["a", "b"], ["x", "y", "z"])
    with pytest.raises(ValueError, match="must be 2-D"):
        plotting.attention_heatmap(np.ones((1, 3, 3)), ["a", "b", "c"], ["x", "y", "z"])
    plt.close("all")


def test_use_cjk_font_puts_latin_first_then_chinese():
    families = plotting.use_cjk_font()
    assert families[0] == "DejaVu Sans" and families[-1] == plotting.FONT_FAMILY
    assert matplotlib.rcParams["font.sans-serif"][:len(families)] == families


def test_save_figure_is_atomic_and_sweeps_killed_writers_temporaries(tmp_path, monkeypatch):
    """save_figure goes through the same atomic write as a checkpoint
    (ctransformer/_atomic.py): a failed or interrupted savefig leaves the old
    image whole and no temporary file; a killed writer's temporary is swept."""
    import os
    import subprocess
    import sys

    import matplotlib.pyplot as plt
    path = tmp_path / "heat.png"
    fig = plt.figure(figsize=(2, 2))
    assert plotting.save_figure(fig, str(path)) == str(path)
    first = path.read_bytes()
    assert first.startswith(b"\x89PNG")

    def interrupted(*args, **kwargs):
        args[0].write(b"half an image")
        raise KeyboardInterrupt
    monkeypatch.setattr(fig, "savefig", interrupted)
    with pytest.raises(KeyboardInterrupt):
        plotting.save_figure(fig, str(path))
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["heat.png"] and path.read_bytes() == first

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()
    stale = tmp_path / f".heat.png.{dead}.x.tmp"
    stale.write_bytes(b"partial")
    plotting.save_figure(fig, str(path))
    plt.close(fig)
    assert not stale.exists() and os.listdir(tmp_path) == ["heat.png"]
