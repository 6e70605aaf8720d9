"""The main job (python -m ctransformer demo) end to end at a small size:
it trains, evaluates, saves a checkpoint and a heatmap, then resumes."""
import os
import subprocess
import sys

import ctransformer


def _run(args, cwd):
    env = dict(os.environ)
    parent = os.path.dirname(os.path.dirname(os.path.abspath(ctransformer.__file__)))
    env["PYTHONPATH"] = parent + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "ctransformer", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def test_demo_trains_saves_and_resumes(tmp_path):
    out = tmp_path / "run"
    small = ["demo", "--train-size", "600", "--test-size", "40", "--batch-size", "32", "--d-model", "32",
             "--layers", "1", "--heads", "2", "--no-progress", "--output-dir", str(out)]
    first = _run(small + ["--epochs", "1"], tmp_path)
    assert first.returncode == 0, first.stderr
    assert "epoch  1: train loss" in first.stdout
    assert "held-out test: exact match" in first.stdout and "BLEU" in first.stdout
    assert "greedy:" in first.stdout and "beam:" in first.stdout
    assert (out / "checkpoint.npz").stat().st_size > 0
    png = (out / "attention.png").read_bytes()
    assert png.startswith(b"\x89PNG")

    second = _run(small + ["--epochs", "2"], tmp_path)
    assert second.returncode == 0, second.stderr
    assert "resumed from" in second.stdout and "after epoch 1" in second.stdout
    assert "epoch  2: train loss" in second.stdout and "epoch  1:" not in second.stdout

    third = _run(small + ["--epochs", "2"], tmp_path)  # finished: only evaluates and translates
    assert third.returncode == 0, third.stderr
    assert "train loss" not in third.stdout and "held-out test" in third.stdout


def test_demo_help_lists_options(tmp_path):
    r = _run(["demo", "--help"], tmp_path)
    assert r.returncode == 0
    for option in ("--epochs", "--threads", "--output-dir"):
        assert option in r.stdout


def test_translate_handles_empty_and_unknown_input():
    """An empty sentence translates to empty output; unseen characters map to <unk>."""
    from ctransformer.demo import translate
    from ctransformer.models import TranslationTransformer
    from ctransformer.tokenizers import CharTokenizer, WordTokenizer

    src_tok, tgt_tok = CharTokenizer(), WordTokenizer()
    src_tok.build_vocab(["我爱猫。", "他吃鱼。"])
    tgt_tok.build_vocab(["i love cats .", "he eats fish ."])
    assert src_tok.encode("龙") == [3]  # <unk>
    ctransformer.manual_seed(0)
    model = TranslationTransformer(len(src_tok), len(tgt_tok), d_model=16, nhead=2, num_encoder_layers=1,
                                   num_decoder_layers=1, dim_feedforward=32, dropout=0.0)
    out = translate(model, src_tok, tgt_tok, ["", "龙吃鱼。", "   "], beam_size=1, max_len=5)
    assert out[0] == "" and out[2] == ""
    assert isinstance(out[1], str)
    assert translate(model, src_tok, tgt_tok, []) == []
    beam = translate(model, src_tok, tgt_tok, ["", "我爱猫。"], beam_size=2, max_len=5)
    assert beam[0] == "" and isinstance(beam[1], str)


def test_fallback_png_writer(tmp_path):
    """Without matplotlib the demo writes its heatmap with a small PNG encoder."""
    import struct
    import zlib

    import numpy as np

    from ctransformer._png import write_heatmap_png

    path = tmp_path / "h.png"
    write_heatmap_png(str(path), np.array([[0.0, 1.0], [0.5, 0.25]]), cell=3)
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (6, 6)
    idat_len = struct.unpack(">I", data[33:37])[0]
    raw = zlib.decompress(data[41:41 + idat_len])
    assert len(raw) == height * (1 + 3 * width)
    rows = np.frombuffer(raw, np.uint8).reshape(height, 1 + 3 * width)[:, 1:].reshape(height, width, 3)
    assert (rows[0, 0] != rows[0, 3]).any()  # min and max cells differ in colour
