"""The command line (``ctransformer`` / ``python -m ctransformer``) and the demo
at a tiny size: it trains, evaluates, saves a checkpoint and a heatmap,
continues, refuses a checkpoint made with other options, reports a finished
run, rejects bad options with one argparse line, and stops cleanly on Ctrl-C."""
import os
import signal
import subprocess
import sys
import time

import pytest

import ctransformer
from ctransformer import demo
from ctransformer.__main__ import build_parser, main

SMALL = ["--train-size", "600", "--test-size", "40", "--batch-size", "32", "--d-model", "32",
         "--layers", "1", "--heads", "2", "--no-progress"]


def _env():
    env = dict(os.environ)
    parent = os.path.dirname(os.path.dirname(os.path.abspath(ctransformer.__file__)))
    env["PYTHONPATH"] = parent + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _run(args, cwd, module=True):
    command = [sys.executable, "-m", "ctransformer", *args]
    return subprocess.run(command, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=600)


def _run_console_script(args, cwd):
    """As the installed console script runs: sys.argv[0] is .../bin/ctransformer."""
    code = ("import sys; sys.argv[0] = '/venv/bin/ctransformer'; "
            "from ctransformer.__main__ import main; sys.exit(main())")
    return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, env=_env(), capture_output=True, text=True,
                          timeout=600)


def test_demo_trains_saves_continues_and_reports_a_finished_run(tmp_path):
    out = tmp_path / "run"
    small = ["demo", *SMALL, "--output-dir", str(out)]
    first = _run(small + ["--epochs", "1"], tmp_path)
    assert first.returncode == 0, first.stderr
    assert "epoch  1: train loss" in first.stdout
    assert "held-out test: exact match" in first.stdout and "BLEU" in first.stdout
    assert "greedy" in first.stdout and "beam (k=4)" in first.stdout
    assert (out / "checkpoint.pt").stat().st_size > 0
    assert (out / "attention.png").read_bytes().startswith(b"\x89PNG")
    assert "\r" not in first.stdout + first.stderr  # no progress bar into a pipe
    assert first.stderr == ""

    second = _run(small + ["--epochs", "2"], tmp_path)
    assert second.returncode == 0, second.stderr
    assert "resumed from" in second.stdout and "after epoch 1" in second.stdout
    assert "epoch  2: train loss" in second.stdout and "epoch  1:" not in second.stdout

    third = _run(small + ["--epochs", "2"], tmp_path)  # finished: says so, then only evaluates and translates
    assert third.returncode == 0, third.stderr
    assert "already trained for 2 epochs; --fresh retrains, --epochs N continues" in third.stdout
    assert "train loss" not in third.stdout and "held-out test" in third.stdout

    evaluated = _run(small + ["--epochs", "5", "--eval-only"], tmp_path)
    assert evaluated.returncode == 0, evaluated.stderr
    assert "evaluating" in evaluated.stdout and "after epoch 2" in evaluated.stdout
    assert "train loss" not in evaluated.stdout and "held-out test" in evaluated.stdout

    # other options beside this checkpoint: one sentence naming them and --fresh, no state_dict dump
    other = _run(["demo", *SMALL[:6], "--d-model", "16", "--layers", "1", "--heads", "4", "--no-progress",
                  "--output-dir", str(out), "--epochs", "3"], tmp_path)
    assert other.returncode == 2
    lines = other.stderr.strip().splitlines()
    assert len(lines) == 1, other.stderr
    assert "--d-model 32 --heads 2, not --d-model 16 --heads 4" in lines[0] and "--fresh" in lines[0]
    assert "size mismatch" not in other.stderr and "Traceback" not in other.stderr
    assert other.stdout == ""

    fresh = _run(["demo", *SMALL[:6], "--d-model", "16", "--layers", "1", "--heads", "4", "--no-progress",
                  "--output-dir", str(out), "--epochs", "1", "--fresh"], tmp_path)
    assert fresh.returncode == 0, fresh.stderr
    assert "epoch  1: train loss" in fresh.stdout and "resumed" not in fresh.stdout
    assert ctransformer.load(str(out / "checkpoint.pt"))["config"]["d_model"] == 16


def test_help_names_the_program_as_invoked(tmp_path):
    by_module = _run(["--help"], tmp_path)
    assert by_module.returncode == 0
    assert by_module.stdout.startswith("usage: ") and "-m ctransformer [-h] [--version]" in by_module.stdout
    assert "demo" in by_module.stdout

    by_script = _run_console_script(["demo", "--help"], tmp_path)
    assert by_script.returncode == 0
    assert by_script.stdout.startswith("usage: ctransformer demo [-h]")
    for option in ("--epochs", "--eval-only", "--threads", "--output-dir", "--heads", "--fresh"):
        assert option in by_script.stdout


def test_version(tmp_path):
    for result in (_run(["--version"], tmp_path), _run_console_script(["--version"], tmp_path)):
        assert result.returncode == 0
        assert result.stdout.strip().endswith("ctransformer " + ctransformer.__version__)


def test_no_command_prints_help_and_unknown_command_is_an_argparse_error(tmp_path, capsys):
    assert main([]) == 0
    assert "demo" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:
        build_parser(prog="ctransformer").parse_args(["trian"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ctransformer: error: ") and "invalid choice: 'trian'" in err


BAD_OPTIONS = [
    (["--epochs", "0"], "--epochs: must be at least 1, got 0; to evaluate a saved model without training, "
                        "use --eval-only"),
    (["--epochs", "-1"], "--epochs: must be at least 1, got -1"),
    (["--epochs", "two"], "--epochs: expected a whole number, got 'two'"),
    (["--threads", "0"], "--threads: must be at least 1, got 0"),
    (["--heads", "5"], "--heads 5 does not divide --d-model 64"),
    (["--d-model", "0"], "--d-model: must be at least 1, got 0"),
    (["--layers", "0"], "--layers: must be at least 1, got 0"),
    (["--train-size", "0"], "--train-size: must be at least 1, got 0"),
    (["--test-size", "-5"], "--test-size: must be at least 1, got -5"),
    (["--batch-size", "0"], "--batch-size: must be at least 1, got 0"),
    (["--lr", "0"], "--lr: must be greater than 0, got 0"),
    (["--lr=-1e-3"], "--lr: must be greater than 0, got -1e-3"),
    (["--lr", "-0.5"], "--lr: must be greater than 0, got -0.5"),
    (["--lr", "nan"], "--lr: expected a finite number, got 'nan'"),
    (["--lr", "inf"], "--lr: expected a finite number, got 'inf'"),
    (["--dropout", "1"], "--dropout: must be in [0, 1), got 1"),
    (["--dropout", "-0.1"], "--dropout: must be in [0, 1), got -0.1"),
    (["--label-smoothing", "1"], "--label-smoothing: must be in [0, 1), got 1"),
    (["--label-smoothing", "nan"], "--label-smoothing: expected a finite number, got 'nan'"),
    (["--beam-size", "0"], "--beam-size: must be at least 1, got 0"),
    (["--seed", "-1"], "--seed: must be at least 0, got -1"),
    (["--eval-only"], "--eval-only needs a checkpoint"),
    (["--eval-only", "--fresh"], "--eval-only and --fresh contradict each other"),
]


@pytest.mark.parametrize("options, message", BAD_OPTIONS, ids=lambda x: " ".join(x) if isinstance(x, list) else "")
def test_bad_option_is_one_argparse_line(options, message, tmp_path, capsys):
    parser = build_parser(prog="ctransformer")
    with pytest.raises(SystemExit) as exit_info:
        args = parser.parse_args(["demo", "--output-dir", str(tmp_path / "out"), *options])
        demo.run(args, args.command_parser)
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1, captured.err
    assert captured.err.startswith("ctransformer demo: error: ") and message in captured.err, captured.err
    assert not (tmp_path / "out").exists()  # nothing created for a refused command


def test_output_dir_that_is_a_file(tmp_path, capsys):
    target = tmp_path / "a_file"
    target.write_text("x")
    parser = build_parser(prog="ctransformer")
    args = parser.parse_args(["demo", "--output-dir", str(target)])
    with pytest.raises(SystemExit) as exit_info:
        demo.run(args, args.command_parser)
    assert exit_info.value.code == 2
    assert "is a file, not a directory" in capsys.readouterr().err


def test_bad_option_from_the_shell_has_no_traceback(tmp_path):
    r = _run(["demo", "--epochs", "0"], tmp_path)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert r.stderr.startswith(os.path.basename(sys.executable) + " -m ctransformer demo: error: argument --epochs")


def test_keyboard_interrupt_anywhere_is_one_line_and_status_130(tmp_path, capsys, monkeypatch):
    """In-process: Ctrl-C during the first evaluation (nothing saved yet)."""
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(demo, "evaluate", interrupted)
    parser = build_parser(prog="ctransformer")
    args = parser.parse_args(["demo", *SMALL, "--epochs", "1", "--output-dir", str(tmp_path / "out")])
    assert demo.run(args, args.command_parser) == 130
    err = capsys.readouterr().err
    assert err.strip() == "interrupted: nothing was saved"
    assert os.listdir(tmp_path / "out") == []  # no checkpoint, no temporary file


def test_ctrl_c_during_training_keeps_the_last_finished_epoch(tmp_path):
    """A real SIGINT while epoch 2 trains (in the C kernels most of the time):
    status 130, one line on stderr, the checkpoint of epoch 1 intact, no
    temporary file left, and the same command continues from it."""
    out = tmp_path / "run"
    # 12000 pairs: an epoch of about a second on this small model, so the
    # SIGINT sent 0.3 s after epoch 1's line lands inside epoch 2 (with 3000
    # pairs an epoch took 0.26-0.30 s and epoch 2 could finish first)
    command = [sys.executable, "-m", "ctransformer", "demo", *SMALL, "--train-size", "12000", "--epochs", "50",
               "--output-dir", str(out)]
    # A shell that starts a job in the background (`cmd &` without job
    # control) ignores SIGINT for it, and an ignored SIGINT is inherited and
    # kept by Python: give the demo the disposition of a terminal's process.
    proc = subprocess.Popen(command, cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.time() + 300
        for line in proc.stdout:
            if line.startswith("epoch  1:") or time.time() > deadline:
                break
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert stderr.strip().splitlines() == [
        f"interrupted: {out / 'checkpoint.pt'} holds epoch 1; the same command continues from there"]
    assert sorted(os.listdir(out)) == ["checkpoint.pt"]
    assert int(ctransformer.load(str(out / "checkpoint.pt"))["epoch"]) == 1


def test_progress_bar_only_on_a_terminal(monkeypatch):
    args = build_parser(prog="ctransformer").parse_args(["demo"])

    class Terminal:
        def isatty(self):
            return True

        def write(self, text):
            return len(text)

        def flush(self):
            pass

    monkeypatch.setattr(sys, "stderr", Terminal())
    try:
        import tqdm
    except ImportError:
        assert demo._progress_bar(args) is None  # no tqdm: plain lines even on a terminal
    else:
        assert demo._progress_bar(args) is tqdm.tqdm
    args.no_progress = True
    assert demo._progress_bar(args) is None
    args.no_progress = False
    with open(os.devnull, "w") as devnull:   # closed: -X dev -W error turns a leaked handle into an error
        monkeypatch.setattr(sys, "stderr", devnull)
        assert demo._progress_bar(args) is None


def test_sample_table_aligns_wide_characters():
    rows = [("三个女人正在游泳。", "three women are swimming .", "✓", "three women swim ."),
            ("明天是12月11日吗？", "is tomorrow december 11 ?", "is tomorrow december 12 ?", "✓"),
            ("ab", "c", "d", "e")]
    lines = demo.format_table(("source", "reference", "greedy", "beam (k=4)"), rows)
    assert len(lines) == 2 + len(rows)
    header_bars = [demo.display_width(lines[0][:i]) for i, ch in enumerate(lines[0]) if ch == "|"]
    assert len(header_bars) == 3
    rule_crosses = [demo.display_width(lines[1][:i]) for i, ch in enumerate(lines[1]) if ch == "+"]
    assert rule_crosses == header_bars
    for line in lines[2:]:
        assert [demo.display_width(line[:i]) for i, ch in enumerate(line) if ch == "|"] == header_bars, line
    assert demo.display_width("三个。") == 6 and demo.display_width("ab？") == 4
    assert demo.display_width("e\u0301") == 1  # a combining accent takes no column
    assert demo.truncate("one two three four", 10) == "one two t…" and demo.display_width("one two t…") == 10
    assert demo.truncate("三个女人正在游泳", 7) == "三个女…"
    assert demo.truncate("short", 10) == "short"


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


def test_an_earlier_versions_checkpoint_is_converted_once(tmp_path, capsys):
    """checkpoint.npz (the format before PyTorch's) beside no checkpoint.pt:
    rewritten once in PyTorch's format, the old file removed, said in one line."""
    import shutil
    import zipfile

    import numpy as np

    legacy = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "legacy_npz_checkpoint.pt")
    out = tmp_path / "run"
    out.mkdir()
    shutil.copy(legacy, out / demo.LEGACY_CHECKPOINT)
    before = ctransformer.load(str(out / demo.LEGACY_CHECKPOINT))
    demo._convert_legacy_checkpoint(str(out), str(out / demo.CHECKPOINT))
    assert sorted(os.listdir(out)) == [demo.CHECKPOINT]
    assert "converted" in capsys.readouterr().out
    with zipfile.ZipFile(out / demo.CHECKPOINT) as zf:
        assert any(name.endswith("/data.pkl") for name in zf.namelist())
    after = ctransformer.load(str(out / demo.CHECKPOINT))
    assert after["epoch"] == before["epoch"]
    np.testing.assert_array_equal(after["model"]["weight"].numpy(), before["model"]["weight"].numpy())
    demo._convert_legacy_checkpoint(str(out), str(out / demo.CHECKPOINT))  # nothing left to convert
    assert sorted(os.listdir(out)) == [demo.CHECKPOINT]
