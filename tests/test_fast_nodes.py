"""The hot path's Node subclasses (built by hand at the places listed at
autograd.Node, not by Node.__init__) set every slot Node has, as a Node built
by __init__ does, and their edges follow autograd.edge_of."""
import numpy as np
import pytest

import ctransformer as ct
from ctransformer.autograd import Node, apply_op, edge_of


def _pos(shape=(2, 3)):
    return ct.tensor(np.random.default_rng(0).uniform(0.5, 2.0, shape).astype(np.float32), requires_grad=True)


# (node class name, op making it from two positive leaves requiring grad)
CASES = [
    ("_AddNode", lambda x, y: x + y),
    ("_SubNode", lambda x, y: x - y),
    ("_MulNode", lambda x, y: x * y),
    ("_DivNode", lambda x, y: x / y),
    ("_PowNode", lambda x, y: x ** y),
    ("_AddScalarNode", lambda x, y: x + 1.5),
    ("_RSubScalarNode", lambda x, y: 1.5 - x),
    ("_MulScalarNode", lambda x, y: x * 1.5),
    ("_DivScalarNode", lambda x, y: x / 1.5),
    ("_RDivScalarNode", lambda x, y: 1.5 / x),
    ("_PowScalarNode", lambda x, y: x ** 3),
    ("_RPowScalarNode", lambda x, y: 1.5 ** x),
    ("_ActivationNode", lambda x, y: x.tanh()),
]


def _subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def _unset_slots(node) -> list:
    return [s for s in Node.__slots__ if not hasattr(node, s)]


def test_every_fast_node_class_has_a_case():
    fast = {c.__name__ for c in _subclasses(Node)
            if c.__module__ in ("ctransformer.tensor._arith", "ctransformer.ops.activation")
            and "backward" in c.__dict__}
    assert fast == {name for name, _ in CASES}


@pytest.mark.parametrize("name,op", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("grads", ["both", "first", "second"])
def test_fast_node_sets_every_node_slot(name, op, grads):
    x, y = _pos(), _pos()
    if grads == "first":
        y.requires_grad_(False)
    if grads == "second":
        x.requires_grad_(False)
    out = op(x, y)
    node = out.grad_fn
    if node is None:  # a scalar op on x, with only y requiring grad: nothing recorded
        assert grads == "second" and not out.requires_grad
        return
    assert type(node).__name__ == name
    assert _unset_slots(node) == []
    assert node.deps == 0 and node.grad is None and node.mark is None and node.retained is None
    expected = tuple(None if not t.requires_grad else t for t in (x, y))[:len(node.edges)]
    assert node.edges == expected  # leaves: the edge is the Tensor itself
    assert node.edges == tuple(edge_of(t) for t in (x, y))[:len(node.edges)]
    out.sum().backward()
    for t in (x, y):
        assert (t.grad is not None) == (t.requires_grad and (len(node.edges) == 2 or t is x))


def test_fast_node_edges_point_at_the_parent_node():
    x = _pos()
    h = x * 2.0
    out = h + h
    assert out.grad_fn.edges == (h.grad_fn, h.grad_fn)
    x2 = x._data * 2
    a, b = apply_op((x2, x2 + 1), (x,), lambda g: (g[0] + g[1],), "Two")  # a two-output parent: (node, index)
    assert (a * 2.0).grad_fn.edges == ((a.grad_fn, 0),) and (b.tanh()).grad_fn.edges == ((b.grad_fn, 1),)
    assert (a + b).grad_fn.edges == (edge_of(a), edge_of(b)) == ((a.grad_fn, 0), (b.grad_fn, 1))


def test_init_built_node_sets_every_slot_too():
    out = _pos().exp()  # _unary: Node(...)
    assert type(out.grad_fn) is Node and _unset_slots(out.grad_fn) == []


def _encoder_grads(in_place: bool, monkeypatch):
    """A post-norm encoder layer (fused attention, feed-forward and residual
    norms) on a non-leaf input: the gradients of its parameters, of the leaf
    and of the input node (retained), with the engine's in-place sum into fresh
    gradients on or off; plus what a hook on the input saw."""
    from ctransformer import autograd as ag
    if not in_place:
        monkeypatch.setattr(ag, "_sum_into_fresh", lambda fresh, prev: None)
        monkeypatch.setattr(ag, "_stealable", lambda g, data: False)
    ct.manual_seed(0)
    layer = ct.nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.0)
    x = ct.tensor(np.random.default_rng(1).standard_normal((5, 3, 16)).astype(np.float32), requires_grad=True)
    h = x * 1.5  # a node: the layer's input gets the attention's and the residual's gradients
    h.retain_grad()
    seen = []
    h.register_hook(lambda g: seen.append(g.numpy().copy()))
    y = layer(layer(h))
    (y * y).sum().backward()
    params = list(layer.parameters())
    buffers = [p.grad._data for p in params]
    assert len({id(b) for b in buffers}) == len(buffers)  # every .grad its own array
    assert all(b.flags.owndata and b.flags.writeable and b.flags.c_contiguous for b in buffers)
    grads = {n: p.grad.numpy().copy() for n, p in layer.named_parameters()}
    return grads, x.grad.numpy().copy(), h.grad.numpy().copy(), seen[0]


def test_in_place_sum_into_fresh_gradients_changes_no_bit(monkeypatch):
    """The fused attention and feed-forward ops return their kernel's fresh
    arrays as autograd.FreshGrads, and the engine adds a residual's second
    gradient into them in place (autograd._sum_into_fresh) instead of
    allocating the sum, and makes a parameter's first gradient its .grad
    without a copy (autograd._stealable): every gradient, the retained one and
    what a hook saw have the same bits as with the allocating sum and the
    copies, and every parameter's .grad is its own C-contiguous array."""
    from ctransformer import autograd as ag
    summed = []
    real = ag._sum_into_fresh

    def spy(fresh, prev):
        result = real(fresh, prev)
        summed.append(result is not None)
        return result

    monkeypatch.setattr(ag, "_sum_into_fresh", spy)
    on = _encoder_grads(True, monkeypatch)
    assert any(summed), "no residual gradient was summed in place"
    off = _encoder_grads(False, monkeypatch)
    for n in on[0]:
        np.testing.assert_array_equal(on[0][n], off[0][n], err_msg=n)
    for a, b in zip(on[1:], off[1:]):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(on[2], on[3])  # the hook saw the whole sum


def test_sum_into_fresh_refuses_what_it_cannot_hold():
    """_sum_into_fresh adds in place only into an array of its own memory with
    the sum's shape and dtype; otherwise it returns None (the engine then
    allocates the sum)."""
    from ctransformer.autograd import _sum_into_fresh
    prev = np.ones((2, 3), np.float32)
    fresh = np.full((2, 3), 2.0, np.float32)
    assert _sum_into_fresh(fresh, prev) is fresh and (fresh == 3).all() and (prev == 1).all()
    base = np.zeros((4, 3), np.float32)
    assert _sum_into_fresh(base[:2], prev) is None and (base == 0).all()  # a view
    assert _sum_into_fresh(np.zeros((1, 3), np.float32), prev) is None  # would broadcast
    assert _sum_into_fresh(np.zeros((2, 3), np.float64), prev) is None  # another dtype
    ro = np.zeros((2, 3), np.float32)
    ro.flags.writeable = False
    assert _sum_into_fresh(ro, prev) is None and (ro == 0).all()


def test_stolen_gradients_accumulate_across_backward_calls():
    """A parameter's first gradient taken without a copy is then added to in
    place by the next backward, as a copied one: two backward calls without
    zero_grad give twice one call's gradients (the same bits: x + x is 2x)."""
    ct.manual_seed(0)
    layer = ct.nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.0)
    x = ct.tensor(np.random.default_rng(1).standard_normal((5, 3, 16)).astype(np.float32))
    layer(x).sum().backward()
    once = {n: p.grad.numpy().copy() for n, p in layer.named_parameters()}
    layer(x).sum().backward()
    for n, p in layer.named_parameters():
        np.testing.assert_array_equal(p.grad.numpy(), 2 * once[n], err_msg=n)
