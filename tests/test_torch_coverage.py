"""The PyTorch coverage table: generated, current, and honest.

* docs/torch_coverage.md is what tests/make_torch_coverage.py writes now;
* every name the issue about real programs listed, and every name in the
  table's tutorial lists, is supported;
* every torch name we lack raises AttributeError saying so, with the
  reason and (where there is one) the nearest supported path: never a bare miss;
* with torch installed, the committed name snapshot is torch's.
"""
import os
import subprocess
import sys

import pytest

import ctransformer as ct
from ctransformer import _coverage

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The names the issue lists in its "Why" (dotted from the torch root; "Tensor." for methods).
ISSUE_NAMES = """Tensor.narrow torch.save torch.load torch.serialization.safe_globals
torch.serialization.add_safe_globals torch.nn.modules.rnn.LSTM torch.nn.modules.activation.MultiheadAttention
torch.nn.modules.linear.NonDynamicallyQuantizableLinear torch.nn.modules.transformer.TransformerEncoder
torch.nn.modules.transformer.TransformerEncoderLayer torch.backends.cudnn.deterministic
torch.backends.cudnn.allow_tf32 torch.backends.cuda.matmul.allow_tf32 torch.nn.KLDivLoss Tensor.index_fill_
torch.utils.data.dataloader torch.utils.data.dataset torch.utils.data.sampler torch.bfloat16
torch.cuda.amp.GradScaler torch.amp.GradScaler torch.set_default_device torch.get_default_device
torch.Generator torch.distributed torch.nn.parallel.DistributedDataParallel torch.compile
torch.utils.data.RandomSampler torch.einsum torch.inference_mode torch.logsumexp torch.roll torch.scatter_add
Tensor.scatter_add Tensor.scatter_add_ torch.nan_to_num Tensor.stride torch.set_printoptions
torch.nn.functional.silu torch.nn.SiLU torch.nn.functional.normalize torch.nn.functional.cosine_similarity
torch.nn.Identity torch.nn.Flatten torch.optim.RMSprop torch.optim.lr_scheduler.CosineAnnealingLR
torch.optim.lr_scheduler.OneCycleLR torch.optim.lr_scheduler.LinearLR torch.optim.lr_scheduler.SequentialLR
torch.nn.RMSNorm Tensor.half torch.nn.Module.half torch.nn.Module.bfloat16 torch.cuda.is_available""".split()


def _resolve(dotted: str):
    if dotted.startswith("Tensor."):
        return getattr(ct.zeros(2, 2), dotted.split(".", 1)[1])
    obj = ct
    for part in dotted.split(".")[1:]:
        obj = getattr(obj, part)
    return obj


@pytest.mark.parametrize("dotted", ISSUE_NAMES)
def test_every_name_the_issue_lists_exists(dotted):
    _resolve(dotted)


def test_committed_table_is_current():
    with open(os.path.join(ROOT, "docs", "torch_coverage.md"), encoding="utf-8") as f:
        committed = f.read()
    assert committed == _coverage.render_markdown(), \
        "docs/torch_coverage.md is stale: run `python tests/make_torch_coverage.py`"


def test_generator_script_runs(tmp_path):
    out = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "make_torch_coverage.py"), "--help"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "docs/torch_coverage.md" in out.stdout


@pytest.mark.parametrize("namespace", list(_coverage.NAMESPACES))
def test_tutorial_names_are_supported(namespace):
    names = set(_coverage.snapshot()[namespace])
    missing = [n for n in _coverage.TUTORIAL_NAMES[namespace]
               if n in names and not _coverage.status(namespace, n)[0]]
    assert missing == []


@pytest.mark.parametrize("namespace", list(_coverage.NAMESPACES))
def test_every_missing_torch_name_raises_a_helpful_attribute_error(namespace):
    owner = _coverage._ours(namespace)
    probe = ct.zeros(2, 2) if namespace == "Tensor" else owner
    missing = [n for n in _coverage.snapshot()[namespace] if not _coverage.status(namespace, n)[0]]
    assert missing, "a namespace with nothing missing would make this test vacuous"
    for name in missing:
        with pytest.raises(AttributeError) as info:
            getattr(probe, name)
        text = str(info.value)
        assert f"has no attribute '{name}'" in text and f"{namespace}.{name} is not supported by ctransformer" in text
        assert "docs/torch_coverage.md" in text
    assert not hasattr(probe, missing[0])  # hasattr still answers False


def test_messages_carry_reason_and_nearest_path():
    with pytest.raises(AttributeError, match=r"torch\.nn\.Conv1d is not supported.*convolutions.*use "
                                             r"ctransformer\.nn\.Linear"):
        ct.nn.Conv1d
    with pytest.raises(AttributeError, match=r"nearest supported: ctransformer\.optim\.lr_scheduler\.OneCycleLR"):
        ct.optim.lr_scheduler.CyclicLR
    with pytest.raises(AttributeError, match=r"in-place variant.*out-of-place"):
        ct.zeros(2).logical_not_
    with pytest.raises(AttributeError, match=r"did you mean ctransformer\.tensor\?"):
        ct.tensr
    with pytest.raises(AttributeError, match=r"^module 'ctransformer' has no attribute '__wrapped__'$"):
        ct.__wrapped__


def test_snapshot_is_torchs(torch_ref):
    """With torch installed, the committed snapshot equals torch's public names (else the fixture's)."""
    import json

    def torch_side(torch):
        import torch.nn.functional  # noqa: F401
        return dict(version=torch.__version__.split("+")[0],
                    n_torch=len({n for n in torch.__all__ if not n.startswith("_")}),
                    n_tensor=len([n for n in dir(torch.Tensor) if not n.startswith("_")]))

    ref = torch_ref(torch_side)
    with open(_coverage.SNAPSHOT, encoding="utf-8") as f:
        snap = json.load(f)
    assert snap["torch_version"] == str(ref["version"])
    assert len(snap["torch"]) == int(ref["n_torch"]) and len(snap["Tensor"]) == int(ref["n_tensor"])
