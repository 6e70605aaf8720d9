"""``torch.nn.modules.rnn``'s path: the recurrent layers (defined in ``ctransformer.nn.rnn``).

Checkpoints and ``safe_globals`` lists name classes by this path."""
from ..rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNBase, RNNCell, RNNCellBase

__all__ = ["RNNBase", "RNN", "LSTM", "GRU", "RNNCellBase", "RNNCell", "LSTMCell", "GRUCell"]
