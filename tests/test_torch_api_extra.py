"""Names real PyTorch scripts use around their models (issue: the scripts,
not the models, stopped on missing names): parity with torch (live or
golden fixtures), float64 gradchecks, bad inputs, and the CPU-only
behaviour of the GPU / cluster names."""
import itertools
import warnings

import numpy as np
import pytest
from tensor_check import assert_parity, check_gradients

import ctransformer as ct
import ctransformer.nn as nn


@pytest.fixture
def x34():
    return np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)


def test_narrow_parity_and_grad(x34):
    assert_parity(lambda lib, x: (x.narrow(1, 1, 2) * 2, lib.narrow(x, 0, -2, 2)), x34)
    check_gradients(lambda lib, x: x.narrow(1, 1, 2), x34)


def test_narrow_bad_inputs(x34):
    x = ct.tensor(x34)
    with pytest.raises(IndexError, match=r"start out of range \(expected to be in range of \[-4, 4\], but got 5\)"):
        x.narrow(1, 5, 1)
    with pytest.raises(RuntimeError, match=r"start \(3\) \+ length \(2\) exceeds dimension size \(4\)"):
        x.narrow(1, 3, 2)
    with pytest.raises(IndexError):
        x.narrow(2, 0, 1)
    with pytest.raises(RuntimeError, match="0-dim"):
        ct.tensor(1.0).narrow(0, 0, 1)


def test_logsumexp_roll_nan_to_num_parity(x34):
    assert_parity(lambda lib, x: (lib.logsumexp(x, 1), x.logsumexp(0, keepdim=True), lib.logsumexp(x, (0, 1))), x34)
    assert_parity(lambda lib, x: (x.roll(1, 1), lib.roll(x, (-1, 2), (0, 1)), x.roll(5)), x34)
    special = np.array([np.nan, np.inf, -np.inf, 1.5], np.float32)
    assert_parity(lambda lib, x: (lib.nan_to_num(x), x.nan_to_num(nan=1.0, posinf=2.0, neginf=-2.0)), special,
                  grad=[])


def test_gradchecks(x34):
    check_gradients(lambda lib, x: lib.logsumexp(x, 1), x34)
    check_gradients(lambda lib, x: x.roll((1, -1), (0, 1)), x34)
    check_gradients(lambda lib, x: lib.einsum("ij,kj->ik", x, x * 2), x34)
    check_gradients(lambda lib, x, s: x.scatter_add(0, lib.tensor([[0, 1, 2, 0]]), s), x34, x34[:1] * 3)
    check_gradients(lambda lib, x: x.index_fill(1, lib.tensor([0, 2]), -1.0), x34)


def test_einsum_scatter_add_index_fill_parity(x34):
    y = np.random.default_rng(1).standard_normal((4, 5)).astype(np.float32)
    assert_parity(lambda lib, a, b: (lib.einsum("ij,jk->ik", a, b), lib.einsum("ij->j", a),
                                     lib.einsum("ij,ij->", a, a)), x34, y)
    idx = np.array([[0, 1, 2, 0], [2, 2, 1, 0]])
    assert_parity(lambda lib, a, s, i: a.scatter_add(0, lib.tensor(i), s), x34, x34[:2] * 3, idx)
    assert_parity(lambda lib, a: (a * 1).index_fill_(1, lib.tensor([0, 3]), 7.0), x34)


def test_stride_and_bad_index_inputs(x34):
    x = ct.tensor(x34)
    assert x.stride() == (4, 1) and x.stride(0) == 4 and ct.zeros(2, 3, 5).stride() == (15, 5, 1)
    with pytest.raises(IndexError, match="index 4 is out of bounds for dimension 1 with size 4"):
        x.index_fill(1, ct.tensor([4]), 0.0)
    with pytest.raises(IndexError, match="Expected a long tensor"):
        x.index_fill(1, ct.tensor([0.0]), 0.0)
    with pytest.raises(RuntimeError, match="out of bounds"):
        x.scatter_add(0, ct.tensor([[3, 0, 0, 0]]), x)
    with pytest.raises(RuntimeError, match="Index tensor must have the same number of dimensions"):
        x.scatter_add(0, ct.tensor([0, 1]), x)
    with pytest.raises(ValueError, match="operands"):
        ct.einsum("ij,jk->ik", x)


def test_inference_mode_compile_default_device_printoptions():
    x = ct.ones(2, requires_grad=True)
    with ct.inference_mode():
        assert not (x * 2).requires_grad
    with ct.inference_mode(False):
        assert (x * 2).requires_grad

    @ct.inference_mode()
    def f(t):
        return t * 3
    assert not f(x).requires_grad
    model = nn.Linear(2, 2)
    assert ct.compile(model) is model and ct.compile()(len) is len  # documented: no compiler, same model
    ct.set_default_device("cpu")
    assert ct.get_default_device() == ct.device("cpu")
    ct.set_default_device("cuda")  # accepted, as torch's CPU build; the factories refuse it
    try:
        with pytest.raises(AssertionError, match="CPU only"):
            ct.zeros(2)
    finally:
        ct.set_default_device(None)
    assert ct.zeros(2).shape == (2,) and ct.get_default_device() == ct.device("cpu")
    assert ct.Generator(device="cpu").device == ct.device("cpu")
    with pytest.raises(AssertionError, match="CPU only"):
        ct.Generator(device="cuda")
    try:
        ct.set_printoptions(precision=2)
        assert "1.23" in repr(ct.tensor([1.23456])) and "1.235" not in repr(ct.tensor([1.23456]))
    finally:
        ct.set_printoptions(profile="default")


def test_backends_flags_are_settable():
    import ctransformer.backends as backends
    backends.cudnn.deterministic = True
    ct.backends.cudnn.allow_tf32 = False
    ct.backends.cuda.matmul.allow_tf32 = True
    assert ct.backends.cudnn.deterministic and not backends.cudnn.is_available()
    assert not ct.backends.mps.is_available()


def test_bfloat16_and_half():
    assert repr(ct.bfloat16) == "torch.bfloat16" and ct.bfloat16 != ct.float32
    with pytest.raises(TypeError, match="bfloat16 tensors are not supported.*float32"):
        ct.zeros(2, dtype=ct.bfloat16)
    m = nn.Linear(2, 2).half()
    assert m.weight.dtype == np.float16
    with pytest.raises(TypeError, match="bfloat16"):
        nn.Linear(2, 2).bfloat16()


def test_grad_scaler_disables_itself_on_cpu():
    model = nn.Linear(2, 1)
    opt = ct.optim.SGD(model.parameters(), lr=0.1)
    with pytest.warns(UserWarning, match="CUDA is not available.  Disabling"):
        scaler = ct.cuda.amp.GradScaler()
    assert not scaler.is_enabled() and ct.amp.GradScaler(enabled=False).get_scale() == 1.0
    loss = model(ct.ones(1, 2)).sum()
    assert scaler.scale(loss) is loss
    before = model.weight.detach().clone()
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    scaler.step(opt)
    scaler.update()
    assert not np.array_equal(model.weight.detach().numpy(), before.numpy())
    with ct.amp.autocast(device_type="cpu", dtype=ct.bfloat16):
        assert model(ct.ones(1, 2)).dtype == np.float32


def test_distributed_is_importable_and_refuses_clearly():
    import ctransformer.distributed as dist
    from ctransformer.nn.parallel import DistributedDataParallel as DDP
    assert not dist.is_available() and not dist.is_initialized()
    with pytest.raises(RuntimeError, match="export the model's state_dict.*PyTorch"):
        dist.init_process_group(backend="gloo")
    with pytest.raises(RuntimeError, match="state_dict"):
        DDP(nn.Linear(2, 2))


def test_utils_data_is_a_package_with_torchs_submodules():
    from ctransformer.utils.data.dataloader import DataLoader, default_collate
    from ctransformer.utils.data.dataset import Dataset, TensorDataset
    from ctransformer.utils.data.sampler import BatchSampler, RandomSampler
    import ctransformer.utils.data as data
    assert DataLoader is data.DataLoader and Dataset is data.Dataset and RandomSampler is data.RandomSampler
    assert TensorDataset is data.TensorDataset and BatchSampler is data.BatchSampler
    assert default_collate is data.default_collate


def test_random_sampler_draws_lazily():
    s = ct.utils.data.RandomSampler(range(5), replacement=True, num_samples=10 ** 10)  # 74.5 GiB if eager
    assert len(s) == 10 ** 10
    first = list(itertools.islice(iter(s), 100))
    assert len(first) == 100 and set(first) <= set(range(5))
    long = list(ct.utils.data.RandomSampler(range(3), num_samples=7))
    assert len(long) == 7 and sorted(long[:3]) == [0, 1, 2] and sorted(long[3:6]) == [0, 1, 2]
    with pytest.raises(ValueError, match="num_samples should be a non-negative integer"):
        ct.utils.data.RandomSampler(range(3), num_samples=-1)


def test_deprecated_alpha_first_add_like_torch(torch_ref):
    """Older tutorials update parameters with ``p.data.add_(-lr, p.grad.data)``:
    torch still accepts (Number alpha, Tensor other), with a warning."""
    g = np.array([1.0, -2.0, 0.5], dtype=np.float32)

    def torch_side(torch):
        p = torch.zeros(3)
        p.add_(-0.5, torch.tensor(g))
        q = torch.ones(3).sub(2, torch.tensor(g))
        return dict(p=p, q=q)

    ref = torch_ref(torch_side, inputs=dict(g=g))
    p = ct.zeros(3)
    with pytest.warns(UserWarning, match=r"This overload of add_ is deprecated"):
        p.add_(-0.5, ct.tensor(g))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        q = ct.ones(3).sub(2, ct.tensor(g))
    np.testing.assert_array_equal(p.numpy(), ref["p"])
    np.testing.assert_array_equal(q.numpy(), ref["q"])
    np.testing.assert_array_equal(ct.zeros(3).add(ct.tensor(g), alpha=2).numpy(), 2 * g)  # the current form


def test_multinomial_refuses_invalid_distributions_like_torch():
    with pytest.raises(RuntimeError, match=r"invalid multinomial distribution \(sum of probabilities <= 0\)"):
        ct.multinomial(ct.zeros(2, 3), 1)
    with pytest.raises(RuntimeError, match="probability tensor contains either `inf`, `nan` or element < 0"):
        ct.multinomial(ct.tensor([0.5, -0.1, 0.6]), 1)
    with pytest.raises(RuntimeError, match="probability tensor contains either"):
        ct.multinomial(ct.tensor([0.5, float("nan")]), 1)
    assert ct.multinomial(ct.tensor([0.0, 1.0, 0.0]), 2, replacement=True).tolist() == [1, 1]
