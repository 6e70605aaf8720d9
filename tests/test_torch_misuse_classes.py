"""Misuse that torch refuses is refused here with torch's exception class
(tests and notebooks catch the class torch raises): layers given the wrong
shape or dtype, losses given bad targets, optimizers and loaders given bad
settings, tensor factories and indexing out of range.  Compared with torch
2.13 live, or with its recorded classes (tests/golden) without torch."""


import ctransformer as ct
from misuse import assert_torchs_classes

CASES = {  # name: case(lib) -> raises
    "lstm_input_width": lambda lib: lib.nn.LSTM(3, 4)(lib.ones(5, 1, 2)),
    "lstm_input_4d": lambda lib: lib.nn.LSTM(3, 4)(lib.ones(5, 1, 3, 1)),
    "lstm_h0_shape": lambda lib: lib.nn.LSTM(3, 4)(lib.ones(5, 1, 3), (lib.zeros(1, 2, 4), lib.zeros(1, 2, 4))),
    "lstm_dtype": lambda lib: lib.nn.LSTM(3, 4)(lib.ones(5, 1, 3, dtype=lib.float64)),
    "lstm_int": lambda lib: lib.nn.LSTM(3, 4)(lib.ones(5, 1, 3, dtype=lib.long)),
    "gru_h0_batch": lambda lib: lib.nn.GRU(3, 4, batch_first=True)(lib.ones(2, 5, 3), lib.zeros(1, 3, 4)),
    "rnn_nonlinearity": lambda lib: lib.nn.RNN(3, 4, nonlinearity="gelu"),
    "lstm_dropout": lambda lib: lib.nn.LSTM(3, 4, num_layers=2, dropout=1.5),
    "lstmcell_batch": lambda lib: lib.nn.LSTMCell(3, 4)(lib.ones(2, 3), (lib.zeros(3, 4), lib.zeros(3, 4))),
    "embedding_float_ids": lambda lib: lib.nn.Embedding(5, 2)(lib.tensor([1.0])),
    "embedding_id_range": lambda lib: lib.nn.Embedding(5, 2)(lib.tensor([5])),
    "embedding_padding_idx": lambda lib: lib.nn.Embedding(5, 2, padding_idx=7),
    "linear_width": lambda lib: lib.nn.Linear(3, 2)(lib.ones(2, 4)),
    "linear_dtype": lambda lib: lib.nn.Linear(3, 2)(lib.ones(2, 3, dtype=lib.float64)),
    "linear_int": lambda lib: lib.nn.Linear(3, 2)(lib.ones(2, 3, dtype=lib.long)),
    "layernorm_width": lambda lib: lib.nn.LayerNorm(3)(lib.ones(2, 4)),
    "layernorm_int": lambda lib: lib.nn.LayerNorm(3)(lib.ones(2, 3, dtype=lib.long)),
    "f_layer_norm_int": lambda lib: lib.nn.functional.layer_norm(lib.ones(2, 3, dtype=lib.long), (3,)),
    "gelu_int": lambda lib: lib.nn.functional.gelu(lib.ones(2, dtype=lib.long)),
    "ce_target_range": lambda lib: lib.nn.functional.cross_entropy(lib.ones(2, 3), lib.tensor([0, 3])),
    "ce_batch": lambda lib: lib.nn.functional.cross_entropy(lib.ones(2, 3), lib.tensor([0, 1, 2])),
    "ce_float_target_1d": lambda lib: lib.nn.functional.cross_entropy(lib.ones(2, 3), lib.tensor([1.0, 2.0])),
    "ce_int_input": lambda lib: lib.nn.functional.cross_entropy(lib.ones(2, 3, dtype=lib.long), lib.tensor([0, 1])),
    "ce_reduction": lambda lib: lib.nn.functional.cross_entropy(lib.ones(2, 3), lib.tensor([0, 1]), reduction="avg"),
    "ce_spatial_target": lambda lib: lib.nn.functional.cross_entropy(lib.ones(2, 3, 4), lib.zeros(2, 3, dtype=lib.long)),
    "ce_label_smoothing": lambda lib: lib.nn.functional.cross_entropy(lib.ones(2, 3), lib.tensor([0, 1]),
                                                                       label_smoothing=1.5),
    "nll_target_range": lambda lib: lib.nn.functional.nll_loss(lib.ones(2, 3), lib.tensor([0, 3])),
    "mse_broadcast": lambda lib: lib.nn.functional.mse_loss(lib.ones(2, 3), lib.ones(4)),
    "mse_int": lambda lib: lib.nn.functional.mse_loss(lib.ones(2, dtype=lib.long), lib.ones(2, dtype=lib.long)),
    "softmax_int": lambda lib: lib.nn.functional.softmax(lib.ones(3, dtype=lib.long), dim=0),
    "softmax_dim": lambda lib: lib.nn.functional.softmax(lib.ones(3), dim=2),
    "dropout_p": lambda lib: lib.nn.functional.dropout(lib.ones(3), p=1.5),
    "dropout_module_p": lambda lib: lib.nn.Dropout(1.5),
    "adam_lr": lambda lib: lib.optim.Adam(lib.nn.Linear(3, 2).parameters(), lr=-1),
    "adam_betas": lambda lib: lib.optim.Adam(lib.nn.Linear(3, 2).parameters(), betas=(1.5, 0.9)),
    "sgd_nesterov": lambda lib: lib.optim.SGD(lib.nn.Linear(3, 2).parameters(), lr=0.1, nesterov=True),
    "optimizer_empty": lambda lib: lib.optim.SGD([], lr=0.1),
    "optimizer_tensor": lambda lib: lib.optim.SGD(lib.nn.Linear(3, 2).weight, lr=0.1),
    "optimizer_non_leaf": lambda lib: lib.optim.SGD([lib.nn.Linear(3, 2).weight * 2], lr=0.1),
    "loader_batch_size": lambda lib: lib.utils.data.DataLoader([1, 2], batch_size=0),
    "loader_shuffle_sampler": lambda lib: lib.utils.data.DataLoader(
        [1, 2], shuffle=True, sampler=lib.utils.data.SequentialSampler([1, 2])),
    "loader_ragged_batch": lambda lib: list(lib.utils.data.DataLoader([lib.ones(2), lib.ones(3)], batch_size=2)),
    "random_split_lengths": lambda lib: lib.utils.data.random_split(range(10), [7, 4]),
    "load_state_dict_missing": lambda lib: lib.nn.Linear(3, 2).load_state_dict({"weight": lib.zeros(2, 3)}),
    "load_state_dict_shape": lambda lib: lib.nn.Linear(3, 2).load_state_dict(
        {"weight": lib.zeros(3, 3), "bias": lib.zeros(2)}),
    "module_without_forward": lambda lib: lib.nn.Module()(lib.ones(1)),
    "modulelist_call": lambda lib: lib.nn.ModuleList([lib.nn.Linear(3, 2)])(lib.ones(1, 3)),
    "parameter_int": lambda lib: lib.nn.Parameter(lib.ones(2, dtype=lib.long)),
    "buffer_name": lambda lib: lib.nn.Module().register_buffer("a.b", lib.ones(1)),
    "stack_shapes": lambda lib: lib.stack([lib.ones(2), lib.ones(3)]),
    "cat_empty": lambda lib: lib.cat([]),
    "reshape_size": lambda lib: lib.ones(6).reshape(4, -1),
    "transpose_dim": lambda lib: lib.ones(2, 3).transpose(0, 2),
    "index_range": lambda lib: lib.ones(2, 3)[2],
    "bool_index_shape": lambda lib: lib.ones(2, 3)[lib.tensor([True, False, True])],
    "gather_range": lambda lib: lib.ones(2, 3).gather(1, lib.tensor([[3]])),
    "gather_float_index": lambda lib: lib.ones(2, 3).gather(1, lib.tensor([[1.0]])),
    "expand_size": lambda lib: lib.ones(2, 3).expand(3, 3),
    "squeeze_dim": lambda lib: lib.ones(2, 3).squeeze(3),
    "arange_step": lambda lib: lib.arange(0, 5, 0),
    "randn_negative": lambda lib: lib.randn(-1),
    "rand_negative": lambda lib: lib.rand(2, -1),
    "zeros_float_size": lambda lib: lib.zeros(2.5),
    "tensor_ragged": lambda lib: lib.tensor([[1, 2], [3]]),
    "matmul_1d": lambda lib: lib.ones(3) @ lib.ones(4),
    "bmm_2d": lambda lib: lib.bmm(lib.ones(2, 3), lib.ones(3, 2)),
    "topk_k": lambda lib: lib.ones(3).topk(4),
    "multinomial_negative": lambda lib: lib.multinomial(lib.tensor([-1.0, 2.0]), 1),
    "one_hot_negative": lambda lib: lib.nn.functional.one_hot(lib.tensor([-1])),
    "one_hot_range": lambda lib: lib.nn.functional.one_hot(lib.tensor([3]), num_classes=3),
    "one_hot_float": lambda lib: lib.nn.functional.one_hot(lib.tensor([1.0])),
    "pad_odd": lambda lib: lib.nn.functional.pad(lib.ones(2, 3), (1,)),
    "item_two": lambda lib: lib.ones(2).item(),
    "float_two": lambda lib: float(lib.ones(2)),
    "bool_two": lambda lib: bool(lib.ones(2)),
}


def test_misuse_raises_torchs_exception_classes(torch_ref):
    assert_torchs_classes(torch_ref, CASES, ct)