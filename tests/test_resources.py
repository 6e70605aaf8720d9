"""Resource tests (issue 16): no reference, tracemalloc or RSS growth over
10,000 calls of each kernel, on its success path and on its error paths
(every error path releases what the binding acquired)."""
from __future__ import annotations

import gc
import os
import sys
import tracemalloc
from typing import Callable, Dict, List

import numpy as np
import pytest

from ctransformer import kernels as K

CALLS = int(os.environ.get("CT_RESOURCE_CALLS", "10000"))
# Under AddressSanitizer (.ci/sanitize) freed memory sits in ASan's
# quarantine, so the RSS grows by design: only tracemalloc and reference
# counts are checked there.
UNDER_ASAN = "libasan" in os.environ.get("LD_PRELOAD", "")
F = np.float32


def _arrays() -> Dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    a = {name: rng.standard_normal(shape).astype(F) for name, shape in {
        "x": (3, 4), "w": (5, 4), "b": (5,), "g": (3, 5), "d": (4,), "q": (1, 2, 3, 4), "x3": (2, 3, 4),
        "b3": (2, 4, 5), "rnn_x": (2, 2, 3), "w_ih": (8, 3), "w_hh": (8, 2), "cache": (1, 2, 4, 4),
        "step": (1, 2, 4), "p": (4,),
    }.items()}
    a["ids"] = np.array([[0, 3], [4, 1]])
    a["t"] = np.array([0, 2, 4])
    return a


def _cases(a: Dict[str, np.ndarray]) -> Dict[str, Callable[[], object]]:
    """One cheap call per kernel (success path)."""
    x, w, b, g, q = a["x"], a["w"], a["b"], a["g"], a["q"]
    probs = K.sdpa_forward(q, q, q)[1]
    ln = K.layernorm_forward(x)
    lse = K.cross_entropy_forward(g, a["t"])[1]
    rnn = K.rnn_forward(a["rnn_x"], None, a["w_ih"], a["w_hh"], None, None, "lstm")
    y = K.softmax_forward(x)
    mask = K.dropout_forward(x, 0.5, 1)[1]
    m, v, param = np.zeros(4, F), np.zeros(4, F), a["p"].copy()
    ck, cv = np.zeros((1, 2, 4, 4), F), np.zeros((1, 2, 4, 4), F)
    return {
        "linear_forward": lambda: K.linear_forward(x, w, b),
        "linear_backward": lambda: K.linear_backward(g, x, w),
        "bmm": lambda: K.bmm_backward(K.bmm_forward(a["x3"], a["b3"]), a["x3"], a["b3"]),
        "matmul": lambda: K.matmul_backward(K.matmul_forward(a["x3"], a["b3"]), a["x3"], a["b3"]),
        "activation": lambda: K.activation_backward(x, x, "gelu", K.activation_forward(x, "gelu")),
        "softmax": lambda: K.softmax_backward(x, y),
        "log_softmax": lambda: K.log_softmax_backward(x, K.log_softmax_forward(x)),
        "layernorm": lambda: K.layernorm_backward(x, x, None, ln[1], ln[2]),
        "add_layernorm": lambda: K.add_layernorm_forward(x, x, a["d"], a["d"]),
        "bias_act": lambda: K.bias_act_backward(x, x, a["d"], "gelu"),
        "dropout": lambda: K.dropout_backward(x, mask, 0.5),
        "embedding": lambda: K.embedding_backward(K.embedding_forward(a["ids"], w), a["ids"], 5),
        "cross_entropy": lambda: K.cross_entropy_backward(np.array(1.0, F), g, a["t"], lse),
        "sdpa": lambda: K.sdpa_backward(q, q, q, q, probs),
        "rnn": lambda: K.rnn_backward(rnn[0], None, None, a["rnn_x"], a["w_ih"], a["w_hh"], rnn[3], "lstm",
                                      with_bias=False),
        "decode": lambda: (K.kv_cache_append(ck, cv, a["step"], a["step"], 1),
                           K.attend_step(a["step"], ck, cv, 2), K.decode_linear(x[:1], w)),
        "cache_reorder": lambda: K.cache_reorder(ck, np.array([0, 0])),
        "decode_layer_step": lambda: K.decode_layer_step(
            np.ones((1, 8), F), np.zeros((1, 2, 4, 4), F),
            np.zeros((1, 2, 4, 4), F), 1, np.ones((24, 8), F), None, np.ones((8, 8), F), None, np.ones((6, 8), F),
            None, np.ones((8, 6), F), None, None, None, None, None, w_cq=np.ones((8, 8), F), w_co=np.ones((8, 8), F),
            mem_k=ck, mem_v=cv, mem_pad=np.array([[False, True, False, False]]), act="gelu", norm_first=True),
        "optim": lambda: (K.sgd_step(param, a["d"], None, 0.0), K.adam_step(param, a["d"], m, v, 1, lr=0.0),
                          K.grad_norm([x, w]), K.clip_grad_norm([a["d"].copy()], 1e9)),
    }


def _error_cases(a: Dict[str, np.ndarray]) -> Dict[str, Callable[[], object]]:
    """Calls failing at different points of the argument handling (after
    some arrays were acquired), each expected to raise."""
    x, w, g = a["x"], a["w"], a["g"]
    x64 = x.astype(np.float64)
    big = x.astype(x.dtype.newbyteorder(">"))
    acc = np.zeros(4, F)
    return {
        "dtype": lambda: K.linear_forward(x, w.astype(np.float64)),
        "shape": lambda: K.linear_backward(g, x, w[:, :3]),
        "aliasing": lambda: K.linear_backward(g, x, w, dinp=x),
        "two_accumulators": lambda: K.layernorm_backward(x, x, a["d"], np.zeros(3, F), np.ones(3, F),
                                                         dweight=acc, dbias=acc),
        "big_endian_inplace": lambda: K.sgd_step(big, x, None, 0.1),
        "strided_inplace": lambda: K.softmax_backward(x, x, dinp=np.zeros((3, 8), F)[:, ::2]),
        "ids": lambda: K.embedding_forward(np.array([9]), w),
        "mixed": lambda: K.sdpa_forward(a["q"], a["q"].astype(np.float64), a["q"]),
        "kind": lambda: K.activation_forward(x64, "nope"),
        "blas_limit": lambda: K.linear_forward(np.broadcast_to(F(1), (1, 2 ** 31)), w),
        "decode_layer_cross": lambda: K.decode_layer_step(  # fails after acquiring the caches and weights
            np.ones((1, 8), F), np.zeros((1, 2, 4, 4), F), np.zeros((1, 2, 4, 4), F), 1, np.ones((24, 8), F), None,
            np.ones((8, 8), F), None, np.ones((6, 8), F), None, np.ones((8, 6), F), None, None, None, None, None,
            w_cq=np.ones((8, 8), F)),
    }


def _rss_kb() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def _measure(fn: Callable[[], object], calls: int, expect_error: bool) -> tuple:
    def run(n):
        for _ in range(n):
            if expect_error:
                try:
                    fn()
                except (TypeError, ValueError, IndexError):
                    pass
                else:
                    raise AssertionError("expected an error")
            else:
                fn()
    run(200)                       # warm-up: caches, interned strings, free lists
    gc.collect()
    tracemalloc.start()
    run(calls // 10)
    gc.collect()
    before, _ = tracemalloc.get_traced_memory()
    rss0 = _rss_kb()
    run(calls)
    gc.collect()
    after, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return after - before, _rss_kb() - rss0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
@pytest.mark.parametrize("path", ["success", "error"])
def test_no_growth_over_many_calls(path):
    a = _arrays()
    cases = _cases(a) if path == "success" else _error_cases(a)
    refs0 = {k: sys.getrefcount(v) for k, v in a.items()}
    failures: List[str] = []
    for name, fn in cases.items():
        traced, rss = _measure(fn, CALLS, path == "error")
        # a leak of one small array per call is >= 100 bytes x CALLS
        if traced > 64 * 1024 or (rss > 4 * 1024 and not UNDER_ASAN):
            failures.append(f"{name}: tracemalloc +{traced} B, RSS +{rss} kB over {CALLS} calls")
    refs1 = {k: sys.getrefcount(v) for k, v in a.items()}
    assert not failures, failures
    # the closures hold the arrays; their counts must not move with the calls
    assert refs1 == refs0
