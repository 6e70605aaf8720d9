"""The classic tutorial's hand-written RNN and LSTM ("简易实现 RNN" and
"简易实现 LSTM"), pasted verbatim and run twice: once with torch, once with
``import ctransformer as torch; import ctransformer.nn as nn``.  From the same
weights they must give torch's outputs, parameter gradients and Adam steps
(rtol 2e-4, atol 2e-5).

torch's run is one ``torch_side(torch)`` function: live when torch is
installed, otherwise its golden fixture (tests/golden/test_tutorial_rnn_lstm.npz,
see tests/golden.py)."""
import numpy as np
import pytest

import ctransformer
import ctransformer.nn

TOL = dict(rtol=2e-4, atol=2e-5)

# ---- pasted from the classic tutorial (comments translated, code unchanged) ----
TUTORIAL_SOURCE = '''
class RNN(nn.Module):
    def __init__(self, input_size, hidden_size, output_size):
        """
        input_size: input dimension
        hidden_size: hidden state dimension
        output_size: output dimension
        """
        super().__init__()
        self.hidden_size = hidden_size
        # weight matrices
        self.W_xh = nn.Linear(input_size, hidden_size) # U
        self.W_hh = nn.Linear(hidden_size, hidden_size) # W
        self.W_hy = nn.Linear(hidden_size, output_size) # V

    def forward(self, x, hidden=None):
        """
        x: [batch_size, seq_len, embd_size]
        """
        batch_size = x.size(0)
        seq_len = x.size(1)
        # initial hidden state: zeros [batch_size, hidden_size]
        if hidden is None:
            hidden = torch.zeros(batch_size, self.hidden_size, device=x.device)
        # outputs of every time step
        outputs = []
        for t in range(seq_len):
            x_t = x[:, t, :] # input at this step [batch_size, embd_size]
            hidden_t = torch.tanh(
                self.W_xh(x_t) + # effect of the input [batch_size, hidden_size]
                self.W_hh(hidden) # effect of the history [batch_size, hidden_size]
            )
            y_t = self.W_hy(hidden_t) # output [batch_size, output_size]
            hidden = hidden_t # update the hidden state for the next step
            outputs.append(y_t.unsqueeze(1)) # add the time dim [batch_size, seq_len, output_size]
        # concatenate the outputs of all steps
        outputs = torch.cat(outputs, dim=1) # [batch_size, seq_len, output_size]
        return outputs, hidden


class LSTM(nn.Module):
    def __init__(self, input_size, hidden_size, output_size):
        """
        input_size: input dimension
        hidden_size: hidden state dimension
        output_size: output dimension
        """
        super().__init__()
        self.hidden_size = hidden_size
        self.W_xf = nn.Linear(input_size, hidden_size) # forget gate, input weights
        self.W_hf = nn.Linear(hidden_size, hidden_size) # forget gate, hidden weights
        self.b_f = nn.Parameter(torch.zeros(hidden_size)) # forget gate bias
        self.W_xi = nn.Linear(input_size, hidden_size) # input gate, input weights
        self.W_hi = nn.Linear(hidden_size, hidden_size) # input gate, hidden weights
        self.b_i = nn.Parameter(torch.zeros(hidden_size)) # input gate bias
        self.W_xo = nn.Linear(input_size, hidden_size) # output gate, input weights
        self.W_ho = nn.Linear(hidden_size, hidden_size) # output gate, hidden weights
        self.b_o = nn.Parameter(torch.zeros(hidden_size)) # output gate bias
        self.W_xc = nn.Linear(input_size, hidden_size) # candidate cell, input weights
        self.W_hc = nn.Linear(hidden_size, hidden_size) # candidate cell, hidden weights
        self.b_c = nn.Parameter(torch.zeros(hidden_size)) # candidate cell bias
        # output layer
        self.W_hy = nn.Linear(hidden_size, output_size)

    def forward(self, x, hidden_state=None):
        """
        x: [batch_size, seq_len, embd_size]
        hidden_state: tuple (hidden, cell_state)
        hidden: [batch_size, hidden_size] hidden state
        cell_state: [batch_size, hidden_size] cell state
        """
        batch_size = x.size(0)
        seq_len = x.size(1)
        # hidden and cell states start at zeros
        if hidden_state is None:
            hidden = torch.zeros(batch_size, self.hidden_size, device=x.device)
            cell_state = torch.zeros(batch_size, self.hidden_size, device=x.device)
        else:
            hidden, cell_state = hidden_state
        outputs = []
        for t in range(seq_len):
            x_t = x[:, t, :] # input at this step [batch_size, embd_size]
            # [batch_size, hidden_size]
            f_t = torch.sigmoid(self.W_xf(x_t) + self.W_hf(hidden) + self.b_f) # forget gate
            i_t = torch.sigmoid(self.W_xi(x_t) + self.W_hi(hidden) + self.b_i) # input gate
            o_t = torch.sigmoid(self.W_xo(x_t) + self.W_ho(hidden) + self.b_o) # output gate
            c_tilde = torch.tanh(self.W_xc(x_t) + self.W_hc(hidden) + self.b_c) # candidate cell
            cell_state = f_t * cell_state + i_t * c_tilde # cell state
            hidden = o_t * torch.tanh(cell_state) # hidden state
            y_t = self.W_hy(hidden) # [batch_size, output_size]
            outputs.append(y_t.unsqueeze(1))
        outputs = torch.cat(outputs, dim=1) # all steps: [batch_size, seq_len, output_size]
        return outputs, (hidden, cell_state)
'''


def tutorial_classes(torch, nn):
    """exec the pasted tutorial code with ``torch`` / ``nn`` bound as given."""
    namespace = {"torch": torch, "nn": nn}
    exec(compile(TUTORIAL_SOURCE, "<the classic tutorial: RNN, LSTM>", "exec"), namespace)
    return namespace["RNN"], namespace["LSTM"]


C_RNN, C_LSTM = tutorial_classes(ctransformer, ctransformer.nn)


def initial_weights(model, seed):
    """Non-zero values everywhere (the tutorial's gate biases start at zero), by parameter name."""
    rng = np.random.default_rng(seed)
    return {n: rng.uniform(-0.5, 0.5, tuple(p.shape)).astype(np.float32) for n, p in model.named_parameters()}


def flatten_outputs(out):
    outputs, state = out
    states = state if isinstance(state, tuple) else (state,)
    return [outputs] + list(states)


def loss_of(parts, lib, weights):
    total = None
    for p, w in zip(parts, weights):
        term = (p * lib.tensor(w)).sum()
        total = term if total is None else total + term
    return total


def packed(torch, tensors):
    """Tensors as one flat tensor: a fixture stores one array instead of many small ones."""
    return torch.cat([t.detach().reshape(-1) for t in tensors])


def packed_np(arrays):
    return np.concatenate([np.asarray(a).reshape(-1) for a in arrays])


def unpack(flat, shapes):
    """The arrays ``packed`` joined, given their shapes (ours, which must match torch's)."""
    shapes = [tuple(s) for s in shapes]
    sizes = [int(np.prod(s)) for s in shapes]
    assert flat.size == sum(sizes), f"torch's values hold {flat.size} numbers, ours {sum(sizes)} ({shapes})"
    return [part.reshape(s) for part, s in zip(np.split(flat, np.cumsum(sizes)[:-1]), shapes)]


@pytest.mark.parametrize("kind", ["RNN", "LSTM"])
@pytest.mark.parametrize("initial_state", [False, True])
def test_tutorial_model_matches_torch(kind, initial_state, torch_ref):
    batch, seq_len, input_size, hidden_size, output_size = 3, 6, 4, 5, 3
    steps = 3
    cm = (C_RNN if kind == "RNN" else C_LSTM)(input_size, hidden_size, output_size)
    init = initial_weights(cm, 1)
    cm.load_state_dict({n: ctransformer.from_numpy(w.copy()) for n, w in init.items()})

    rng = np.random.default_rng(2)
    x = rng.standard_normal((batch, seq_len, input_size)).astype(np.float32)
    state_arrays = [rng.standard_normal((batch, hidden_size)).astype(np.float32)
                    for _ in range(1 if kind == "RNN" else 2)]
    # the loss weights of each step's outputs (outputs, then the state tensors)
    part_shapes = [(batch, seq_len, output_size)] + [(batch, hidden_size)] * len(state_arrays)
    loss_weights = [[rng.standard_normal(s).astype(np.float32) for s in part_shapes] for _ in range(steps)]

    def state(lib):
        if not initial_state:
            return None
        ts = [lib.tensor(a) for a in state_arrays]
        return ts[0] if kind == "RNN" else tuple(ts)

    def torch_side(torch):
        T_RNN, T_LSTM = tutorial_classes(torch, torch.nn)
        tm = (T_RNN if kind == "RNN" else T_LSTM)(input_size, hidden_size, output_size)
        params = dict(tm.named_parameters())
        with torch.no_grad():
            for n, w in init.items():
                params[n].copy_(torch.from_numpy(w))
        opt = torch.optim.Adam(tm.parameters(), lr=0.01)
        record = []
        for step in range(steps):
            parts = flatten_outputs(tm(torch.tensor(x), state(torch)))
            opt.zero_grad()
            loss_of(parts, torch, loss_weights[step]).backward()
            grads = packed(torch, [p.grad for p in params.values()])
            opt.step()
            record.append(dict(outputs=list(parts), grads=grads, params=packed(torch, params.values())))
        return dict(names=list(params), steps=record)

    ref = torch_ref(torch_side, inputs=dict(x=x, state=np.stack(state_arrays), init=packed_np(init.values()),
                                            loss_weights=packed_np(w for ws in loss_weights for w in ws)))
    names = [str(n) for n in ref["names"]]
    assert [n for n, _ in cm.named_parameters()] == names
    shapes = [p.shape for p in cm.parameters()]
    c_opt = ctransformer.optim.Adam(cm.parameters(), lr=0.01)
    for step, t in enumerate(ref["steps"]):
        c_parts = flatten_outputs(cm(ctransformer.tensor(x), state(ctransformer)))
        for i, (tp, c) in enumerate(zip(t["outputs"], c_parts)):
            assert tuple(c.shape) == tp.shape
            np.testing.assert_allclose(c.detach().numpy(), tp, **TOL, err_msg=f"{kind} output {i} at step {step}")
        c_opt.zero_grad()
        loss_of(c_parts, ctransformer, loss_weights[step]).backward()
        t_grads = dict(zip(names, unpack(t["grads"], shapes)))
        for name, p in cm.named_parameters():
            np.testing.assert_allclose(p.grad.numpy(), t_grads[name], **TOL,
                                       err_msg=f"{kind} grad of {name} at step {step}")
        c_opt.step()
        t_params = dict(zip(names, unpack(t["params"], shapes)))
        for name, p in cm.named_parameters():
            np.testing.assert_allclose(p.detach().numpy(), t_params[name], **TOL,
                                       err_msg=f"{kind} {name} after Adam step {step}")


def test_tutorial_models_train_on_a_toy_task():
    """The pasted LSTM learns to output the running sum sign: loss drops."""
    ctransformer.manual_seed(0)
    model = C_LSTM(1, 8, 1)
    opt = ctransformer.optim.Adam(model.parameters(), lr=0.05)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 5, 1)).astype(np.float32)
    y = np.sign(np.cumsum(x, axis=1)).astype(np.float32)
    losses = []
    for _ in range(40):
        opt.zero_grad()
        out, _ = model(ctransformer.tensor(x))
        loss = ctransformer.nn.functional.mse_loss(out, ctransformer.tensor(y))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]
