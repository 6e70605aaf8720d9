"""The seed tutorial's hand-written RNN and LSTM (seeds/000_*, "简易实现 RNN"
and "简易实现 LSTM"), pasted verbatim and run twice: once with torch, once
with ``import ctransformer as torch; import ctransformer.nn as nn``.  From
the same weights they must give torch's outputs, parameter gradients and
Adam steps (rtol 2e-4, atol 2e-5)."""
import numpy as np
import pytest

import ctransformer
import ctransformer.nn

real_torch = pytest.importorskip("torch")

TOL = dict(rtol=2e-4, atol=2e-5)

# ---- pasted from the seed (comments translated, code unchanged) ----
SEED_SOURCE = '''
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


def seed_classes(torch, nn):
    """exec the pasted seed code with ``torch`` / ``nn`` bound as given."""
    namespace = {"torch": torch, "nn": nn}
    exec(compile(SEED_SOURCE, "seeds/000 (RNN, LSTM)", "exec"), namespace)
    return namespace["RNN"], namespace["LSTM"]


T_RNN, T_LSTM = seed_classes(real_torch, real_torch.nn)
C_RNN, C_LSTM = seed_classes(ctransformer, ctransformer.nn)


def randomise(torch_model, seed):
    """Non-zero values everywhere (the seed's gate biases start at zero)."""
    rng = np.random.default_rng(seed)
    with real_torch.no_grad():
        for p in torch_model.parameters():
            p.copy_(real_torch.from_numpy(rng.uniform(-0.5, 0.5, tuple(p.shape)).astype(np.float32)))


def same_weights(torch_model, our_model):
    our_model.load_state_dict({k: ctransformer.from_numpy(v.detach().numpy().copy())
                               for k, v in torch_model.state_dict().items()})


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


@pytest.mark.parametrize("kind", ["RNN", "LSTM"])
@pytest.mark.parametrize("initial_state", [False, True])
def test_seed_model_matches_torch(kind, initial_state):
    T_cls, C_cls = (T_RNN, C_RNN) if kind == "RNN" else (T_LSTM, C_LSTM)
    batch, seq_len, input_size, hidden_size, output_size = 3, 6, 4, 5, 3
    real_torch.manual_seed(0)
    tm = T_cls(input_size, hidden_size, output_size)
    randomise(tm, 1)
    cm = C_cls(input_size, hidden_size, output_size)
    same_weights(tm, cm)
    assert [n for n, _ in cm.named_parameters()] == [n for n, _ in tm.named_parameters()]

    rng = np.random.default_rng(2)
    x = rng.standard_normal((batch, seq_len, input_size)).astype(np.float32)
    state_arrays = [rng.standard_normal((batch, hidden_size)).astype(np.float32)
                    for _ in range(1 if kind == "RNN" else 2)]

    def state(lib):
        if not initial_state:
            return None
        ts = [lib.tensor(a) for a in state_arrays]
        return ts[0] if kind == "RNN" else tuple(ts)

    t_opt = real_torch.optim.Adam(tm.parameters(), lr=0.01)
    c_opt = ctransformer.optim.Adam(cm.parameters(), lr=0.01)
    for step in range(3):
        t_parts = flatten_outputs(tm(real_torch.tensor(x), state(real_torch)))
        c_parts = flatten_outputs(cm(ctransformer.tensor(x), state(ctransformer)))
        for i, (t, c) in enumerate(zip(t_parts, c_parts)):
            assert tuple(c.shape) == tuple(t.shape)
            np.testing.assert_allclose(c.detach().numpy(), t.detach().numpy(), **TOL,
                                       err_msg=f"{kind} output {i} at step {step}")
        weights = [rng.standard_normal(tuple(t.shape)).astype(np.float32) for t in t_parts]
        t_opt.zero_grad()
        c_opt.zero_grad()
        loss_of(t_parts, real_torch, weights).backward()
        loss_of(c_parts, ctransformer, weights).backward()
        t_grads = dict(tm.named_parameters())
        for name, p in cm.named_parameters():
            np.testing.assert_allclose(p.grad.numpy(), t_grads[name].grad.numpy(), **TOL,
                                       err_msg=f"{kind} grad of {name} at step {step}")
        t_opt.step()
        c_opt.step()
        t_params = dict(tm.named_parameters())
        for name, p in cm.named_parameters():
            np.testing.assert_allclose(p.detach().numpy(), t_params[name].detach().numpy(), **TOL,
                                       err_msg=f"{kind} {name} after Adam step {step}")


def test_seed_models_train_on_a_toy_task():
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
