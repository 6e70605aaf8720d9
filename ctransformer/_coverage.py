"""Which of torch's public names ctransformer has, and why the others are missing.

``torch_public_names.json`` is a snapshot of torch's public names in the
namespaces ctransformer mirrors (recorded by ``tests/make_torch_coverage.py
--record-names``).  Each missing name gets a reason and the nearest
supported path; :func:`install` makes those the message of the
AttributeError a script meets (never a bare miss), and
:func:`render_markdown` writes ``docs/torch_coverage.md``.
"""
from __future__ import annotations

import difflib
import json
import os
import re
import sys
from typing import Any, Callable, Dict, List, Optional, Tuple

SNAPSHOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_public_names.json")
DOC_NAME = "docs/torch_coverage.md"

# torch namespace -> ctransformer module path (Tensor: the class)
NAMESPACES: Dict[str, str] = {
    "torch": "ctransformer",
    "torch.nn": "ctransformer.nn",
    "torch.nn.functional": "ctransformer.nn.functional",
    "torch.optim": "ctransformer.optim",
    "torch.optim.lr_scheduler": "ctransformer.optim.lr_scheduler",
    "torch.utils.data": "ctransformer.utils.data",
    "Tensor": "ctransformer.Tensor",
}

# Names a sequence-model tutorial or program uses (the official tutorials, pytorch/examples'
# word_language_model, nanoGPT, the Annotated Transformer, classic seq2seq notebooks), including
# every name the issue about running them listed.  The test requires each to be supported or to
# have an explicit reason below.
TUTORIAL_NAMES: Dict[str, List[str]] = {
    "torch": """tensor zeros ones empty full arange linspace eye randn rand randint randperm zeros_like ones_like
        full_like empty_like cat stack split chunk where matmul bmm mm exp log sqrt tanh sigmoid softmax
        log_softmax sum mean max min argmax argmin topk sort argsort multinomial manual_seed seed
        initial_seed get_rng_state set_rng_state Generator no_grad enable_grad set_grad_enabled is_grad_enabled
        inference_mode save load device float32 float64 float16 bfloat16 int64 int32 long bool float
        double int uint8 Size Tensor from_numpy as_tensor is_tensor cuda set_num_threads get_num_threads
        set_default_dtype get_default_dtype narrow einsum logsumexp roll scatter_add nan_to_num
        set_printoptions compile set_default_device get_default_device backends distributed clamp
        tril triu ones_like numel allclose isclose equal cumsum masked_fill abs pow maximum minimum
        squeeze unsqueeze flatten transpose permute gather index_select autograd triu_indices""".split(),
    "torch.nn": """Module Parameter Linear Embedding LSTM GRU RNN LSTMCell GRUCell RNNCell Dropout LayerNorm
        Transformer TransformerEncoder TransformerEncoderLayer TransformerDecoder TransformerDecoderLayer
        MultiheadAttention Sequential ModuleList ModuleDict CrossEntropyLoss NLLLoss MSELoss KLDivLoss
        ReLU GELU Tanh Sigmoid Softmax LogSoftmax SiLU Identity RMSNorm Flatten Unflatten functional init
        utils parallel""".split(),
    "torch.nn.functional": """relu gelu silu tanh sigmoid softmax log_softmax linear layer_norm rms_norm
        embedding dropout cross_entropy nll_loss mse_loss kl_div pad one_hot normalize cosine_similarity
        scaled_dot_product_attention multi_head_attention_forward""".split(),
    "torch.optim": "Optimizer SGD Adam AdamW RMSprop lr_scheduler".split(),
    "torch.optim.lr_scheduler": """LRScheduler LambdaLR StepLR ExponentialLR CosineAnnealingLR OneCycleLR
        LinearLR SequentialLR""".split(),
    "torch.utils.data": """Dataset IterableDataset TensorDataset Subset ConcatDataset random_split DataLoader
        Sampler SequentialSampler RandomSampler BatchSampler default_collate dataset dataloader
        sampler""".split(),
    "Tensor": """size shape dim view reshape contiguous transpose permute unsqueeze squeeze expand repeat
        narrow index_fill_ index_fill scatter_add scatter_add_ stride item tolist numpy detach clone
        requires_grad_ backward grad to cpu cuda float double long int bool half type_as masked_fill
        masked_fill_ fill_ zero_ copy_ uniform_ normal_ sum mean max min argmax topk softmax log_softmax
        exp log tanh sigmoid relu pow sqrt matmul bmm t chunk split data_ptr numel nelement logsumexp
        roll nan_to_num new_zeros new_ones new_full new_tensor eq ne gt lt ge le any all add sub mul div
        add_ sub_ mul_ div_ clamp clamp_ flatten gather index_select""".split(),
}

# Explicit reasons (name -> (why, what to use instead)); names not listed fall to _RULES.
_CPU_ONLY = "ctransformer runs on the CPU only"
EXPLICIT: Dict[str, Tuple[str, str]] = {
    "torch.jit": ("there is no TorchScript compiler", "the Python module itself (torch.compile returns it)"),
    "torch.onnx": ("ONNX export needs torch's tracer", "ctransformer.save(model.state_dict()) and export from PyTorch"),
    "torch.fx": ("no graph tracing", "the Python module itself"),
    "torch.func": ("no functorch transforms", "explicit loops / autograd.grad"),
    "torch.vmap": ("no functorch transforms", "explicit loops or batched ops"),
    "torch.distributions": ("no distributions package", "ctransformer.multinomial / numpy.random"),
    "torch.sparse": ("no sparse tensors", "dense tensors"),
    "torch.fft": ("no FFT", "numpy.fft on .numpy()"),
    "torch.linalg": ("no linear algebra beyond matmul", "numpy.linalg on .numpy()"),
    "torch.autocast": ("no reduced-precision compute", "ctransformer.amp.autocast (a no-op context)"),
    "torch.accelerator": (_CPU_ONLY, "ctransformer.device('cpu')"),
    "torch.nn.DataParallel": ("no multi-device training", "ctransformer.nn.parallel.DataParallel raises with advice"),
    "torch.nn.Conv1d": ("convolutions are not implemented (sequence models: recurrent and attention layers)",
                        "ctransformer.nn.Linear over unfolded windows, or PyTorch"),
    "torch.nn.BatchNorm1d": ("batch norm is not implemented", "ctransformer.nn.LayerNorm"),
    "torch.nn.EmbeddingBag": ("not implemented", "ctransformer.nn.Embedding followed by .sum(dim) / .mean(dim)"),
    "torch.nn.CTCLoss": ("not implemented", "ctransformer.nn.CrossEntropyLoss on aligned targets"),
    "Tensor.bfloat16": ("NumPy has no bfloat16", "Tensor.float()"),
}

_RULES: List[Tuple[str, str, str]] = [
    (r"(?i)conv|pool|fold|pixel_|upsampl|interpolate|grid_sample|affine_grid|channel_shuffle|Dropout[123]d"
     r"|dropout[123]d|feature_alpha|Norm[123]d|norm[123]d|instance_norm|group_norm|GroupNorm|local_response"
     r"|LocalResponse|ZeroPad|ReflectionPad|ReplicationPad|ConstantPad|CircularPad|Upsample|PixelShuffle"
     r"|PixelUnshuffle|ChannelShuffle|Fold|Unfold|batch_norm|BatchNorm|SyncBatchNorm|lp_pool|LPPool|Lazy",
     "image / convolution layers are not implemented (ctransformer covers sequence models)",
     "ctransformer.nn.Linear, LayerNorm, or PyTorch"),
    (r"(?i)quant|qint|quint|fbgemm|per_channel|per_tensor|int_repr|q_scale|q_zero|q_per",
     "no quantization", "float32 / float64 tensors"),
    (r"(?i)sparse|_coo|_csr|_csc|_bsr|_bsc|to_dense|^indices$|^_indices|crow_|ccol_|row_indices|col_indices",
     "no sparse tensors", "dense tensors"),
    (r"(?i)cuda|mps|xpu|hip|pin_memory|is_pinned|share_memory|ipu|mtia|nested|storage|untyped|data_ptr"
     r"|is_shared|record_stream|device_mesh|DTensor|_cudnn|cudnn_|miopen|mkldnn|vulkan|metal|hpu",
     f"{_CPU_ONLY} (no devices, storages or memory sharing)", "ctransformer.device('cpu')"),
    (r"(?i)fft|stft|istft|window$", "no FFT", "numpy.fft on .numpy()"),
    (r"(?i)^linalg|^cholesky|^svd|^qr$|^eig|^lu$|^lu_|^inverse$|^det$|^logdet$|^slogdet$|^pinverse$|_solve$"
     r"|^solve|^triangular|^lstsq$|^matrix_exp|^matrix_power$|^orgqr$|^ormqr$|^geqrf$|^lobpcg$|^pca_"
     r"|^svd_lowrank$", "no linear algebra beyond matmul",
     "numpy.linalg on .numpy()"),
    (r"(?i)complex|^real$|^imag$|angle|conj|polar|view_as_real|view_as_complex|resolve_neg|is_neg",
     "no complex tensors", "pairs of real tensors"),
    (r"(?i)float8|int1$|int[2-7]$|uint[1-7]$|uint16|uint32|uint64|bits|float4|cfloat|cdouble|chalf|qint"
     r"|complex32|e4m3|e5m2|e8m0", "dtype not supported (NumPy-backed: float16/32/64, int8-64, uint8, bool)",
     "ctransformer.float32"),
    (r"(?i)^is_|^has_|^use_|^are_|^get_|^set_|_enabled$|_mode$|^compiler|^export|^library|^ops$|^profiler"
     r"|^testing|^hub$|^package|^overrides|^return_types|^masked|^monitor|^signal|^special|^futures"
     r"|^multiprocessing|^random$|^types$|^utils$|^version|^config|^backends$|^fx|^jit|^onnx|^func"
     r"|^distributed|^nn$|^amp$|^autograd$|^cpu$|^xpu$|^mps$|^hub|^sym|^Sym|^guard|^_", 
     "a torch runtime / framework facility with no counterpart here", "ctransformer's documented API"),
]


def _rule_for(namespace: str, name: str) -> Tuple[str, str]:
    full = f"{namespace}.{name}"
    if full in EXPLICIT:
        return EXPLICIT[full]
    for pattern, why, instead in _RULES:
        if re.search(pattern, name):
            return why, instead
    if name.endswith("_") and not name.endswith("__"):
        return ("this in-place variant is not provided", f"the out-of-place {name[:-1]}() (x = x.{name[:-1]}(...))")
    return "not implemented yet", ""


_snapshot_cache: Optional[Dict[str, Any]] = None


def snapshot() -> Dict[str, Any]:
    global _snapshot_cache
    if _snapshot_cache is None:
        with open(SNAPSHOT, encoding="utf-8") as f:
            _snapshot_cache = json.load(f)
    return _snapshot_cache


def _ours(namespace: str) -> Any:
    path = NAMESPACES[namespace]
    if path == "ctransformer.Tensor":
        from .tensor import Tensor
        return Tensor
    import importlib
    return importlib.import_module(path)


def _has(obj: Any, name: str) -> bool:
    """Whether ``name`` exists on our module (or on a Tensor instance),
    without going through the AttributeError hooks."""
    if isinstance(obj, type):
        probe = _tensor_probe()
        try:
            object.__getattribute__(probe, name)
        except AttributeError:
            return False
        except Exception:  # noqa: BLE001  (a property that exists but objects to this probe)
            return True
        return True
    return name in obj.__dict__


def _tensor_probe() -> Any:
    from .tensor import zeros
    return zeros(2, 2)


def _our_names(obj: Any) -> List[str]:
    if isinstance(obj, type):
        names = set(_tensor_probe().__dict__) if hasattr(_tensor_probe(), "__dict__") else set()
        for klass in obj.__mro__:
            names.update(klass.__dict__)
        return sorted(n for n in names if not n.startswith("_"))
    return sorted(n for n in obj.__dict__ if not n.startswith("_"))


def nearest(namespace: str, name: str) -> str:
    """The closest name we have in ``namespace`` (for the error message)."""
    close = difflib.get_close_matches(name, _our_names(_ours(namespace)), n=1, cutoff=0.6)
    if not close:
        return ""
    prefix = NAMESPACES[namespace]
    return f"{prefix}.{close[0]}"


def status(namespace: str, name: str) -> Tuple[bool, str, str]:
    """(supported, reason, instead) for one torch name."""
    if _has(_ours(namespace), name):
        return True, "", ""
    why, instead = _rule_for(namespace, name)
    return False, why, instead


def missing_message(namespace: str, name: str) -> str:
    """The AttributeError text for a torch name (or a typo) we do not have."""
    ours = NAMESPACES[namespace]
    owner = "type object 'Tensor'" if namespace == "Tensor" else f"module '{ours}'"
    known = name in snapshot().get(namespace, [])
    guess = nearest(namespace, name)
    if known:
        why, instead = _rule_for(namespace, name)
        text = f"{owner} has no attribute '{name}': {namespace}.{name} is not supported by ctransformer: {why}"
        if instead:
            text += f"; use {instead}"
        elif guess:
            text += f"; nearest supported: {guess}"
        else:
            text += f"; {DOC_NAME} lists what is supported"
        return text + f" (see {DOC_NAME})" if instead or guess else text
    text = f"{owner} has no attribute '{name}'"
    if guess:
        text += f"; did you mean {guess}?"
    return text


def _module_getattr(namespace: str) -> Callable[[str], Any]:
    def __getattr__(name: str) -> Any:
        if name.startswith("__") or name in ("_fields", "_asdict"):
            raise AttributeError(f"module '{NAMESPACES[namespace]}' has no attribute '{name}'")
        raise AttributeError(missing_message(namespace, name))
    return __getattr__


def _tensor_getattr(self: Any, name: str) -> Any:
    if name.startswith("_"):
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")
    raise AttributeError(missing_message("Tensor", name).replace("type object 'Tensor'",
                                                                 f"'{type(self).__name__}' object"))


def install() -> None:
    """Make every miss in the mirrored namespaces an AttributeError that says
    whether torch has the name, why we do not, and what to use instead."""
    for namespace, path in NAMESPACES.items():
        if namespace == "Tensor":
            from .tensor import Tensor
            Tensor.__getattr__ = _tensor_getattr  # only consulted when normal lookup fails
            continue
        module = sys.modules.get(path)
        if module is not None and "__getattr__" not in module.__dict__:
            module.__getattr__ = _module_getattr(namespace)  # type: ignore[attr-defined]


def render_markdown() -> str:
    """The committed coverage table (docs/torch_coverage.md)."""
    snap = snapshot()
    lines = [
        "# PyTorch API coverage",
        "",
        "<!-- generated by tests/make_torch_coverage.py; do not edit (tests/test_torch_coverage.py checks it) -->",
        "",
        f"Public names of torch {snap['torch_version']} in the namespaces ctransformer mirrors, and whether "
        "`import ctransformer as torch` has each.  A missing name raises `AttributeError` with the reason "
        "and the nearest supported path given here.",
        "",
        "| namespace | torch names | supported | not supported |",
        "|---|---:|---:|---:|",
    ]
    body: List[str] = []
    for namespace in NAMESPACES:
        names = snap[namespace]
        rows = [(n,) + status(namespace, n) for n in names]
        ok = [r for r in rows if r[1]]
        lines.append(f"| `{namespace}` | {len(names)} | {len(ok)} | {len(names) - len(ok)} |")
        body += ["", f"## `{namespace}`", ""]
        tutorial = TUTORIAL_NAMES.get(namespace, [])
        body += ["Names sequence-model tutorials and programs use:", "",
                 "| name | status |", "|---|---|"]
        for n in tutorial:
            if n not in names:
                continue
            sup, why, instead = status(namespace, n)
            body.append(f"| `{n}` | {'yes' if sup else 'no: ' + why + ('; use ' + instead if instead else '')} |")
        body += ["", "Supported: " + ", ".join(f"`{r[0]}`" for r in ok if r[0] not in tutorial) + ".", ""]
        by_reason: Dict[Tuple[str, str], List[str]] = {}
        for n, sup, why, instead in rows:
            if not sup:
                by_reason.setdefault((why, instead), []).append(n)
        body += ["Not supported, by reason:", ""]
        for (why, instead), group in sorted(by_reason.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            hint = f" (use {instead})" if instead else ""
            body.append(f"- {why}{hint}: " + ", ".join(f"`{n}`" for n in group))
    return "\n".join(lines + body) + "\n"
