"""nn.LSTM, nn.GRU and nn.RNN (and the `torch._VF` calls they make) onto mdsl's
recurrent ops, one LSTM/GRU/RNN node per layer.

PyTorch and ONNX order the gates differently (LSTM: torch i, f, g, o -> ONNX i, o, f, c;
GRU: torch r, z, n -> ONNX z, r, h) and PyTorch's GRU applies the reset gate after the
recurrent product (ONNX `linear_before_reset=1`); the weights are reordered into
constants at import. Layers are stacked in the graph: layer k's Y, with the directions
side by side, is layer k+1's input. Inference only: inter-layer dropout is off, and
projections (`proj_size`) and packed sequences are refused.
"""

from __future__ import annotations

import numpy as np

from mdsl.frontends.torch_ops import handles, module_handler
from mdsl.ir.errors import GraphError

_TORCH_TO_ONNX_GATES = {"LSTM": (0, 3, 1, 2), "GRU": (1, 0, 2), "RNN": (0,)}


def _onnx_gates(kind: str, array: np.ndarray) -> np.ndarray:
    """Rows of a torch weight (or bias) regrouped in ONNX's gate order."""
    order = _TORCH_TO_ONNX_GATES[kind]
    chunks = array.reshape(len(order), -1, *array.shape[1:])
    return np.ascontiguousarray(chunks[list(order)].reshape(array.shape))


def _layer_weights(b, kind: str, params: list, layer: int, dirs: int, has_biases: bool):
    """(W, R, B) constants of one layer, all directions stacked as ONNX lays them."""
    from mdsl.frontends.torch_fx import to_numpy

    per_dir = 4 if has_biases else 2
    w, r, bias = [], [], []
    for d in range(dirs):
        group = params[(layer * dirs + d) * per_dir : (layer * dirs + d + 1) * per_dir]
        arrays = [_onnx_gates(kind, to_numpy(t)) for t in group]
        w.append(arrays[0])
        r.append(arrays[1])
        if has_biases:
            bias.append(np.concatenate([arrays[2], arrays[3]]))
    suffix = f"l{layer}"
    return (
        b.const_array(np.stack(w), f"W_{suffix}"),
        b.const_array(np.stack(r), f"R_{suffix}"),
        b.const_array(np.stack(bias), f"B_{suffix}") if has_biases else None,
    )


def _state_rows(b, state, layer: int, dirs: int):
    """Rows layer*dirs .. of a [layers*dirs, batch, hidden] initial state."""
    if state is None:
        return None
    start = layer * dirs
    return b.op("Slice", b.v(state), starts=(start,), ends=(start + dirs,), axes=(0,), steps=(1,))


def run_recurrent(
    b,
    kind,
    input,
    hx,
    params,
    has_biases,
    num_layers,
    bidirectional,
    batch_first,
    activation="Tanh",
):
    """The stacked layers; returns (output, h_n) or, for LSTM, (output, (h_n, c_n))."""
    x = b.v(input)
    if x.ndim != 3:
        raise GraphError(f"{kind} on an unbatched ({x.ndim}-D) input is not supported")
    if batch_first:
        x = b.op("Transpose", x, perm=(1, 0, 2))
    dirs = 2 if bidirectional else 1
    h0, c0 = (hx if kind == "LSTM" else (hx, None)) if hx is not None else (None, None)
    hidden = int(params[1].shape[1])
    if int(params[0].shape[0]) != len(_TORCH_TO_ONNX_GATES[kind]) * hidden:
        raise GraphError(f"nn.{kind} with proj_size is not supported")
    last_h, last_c = [], []
    for layer in range(num_layers):
        w, r, bias = _layer_weights(b, kind, params, layer, dirs, has_biases)
        attrs = {
            "hidden_size": hidden,
            "direction": "bidirectional" if bidirectional else "forward",
        }
        inputs = [x, w, r, bias, None, _state_rows(b, h0, layer, dirs)]
        if kind == "LSTM":
            inputs += [_state_rows(b, c0, layer, dirs), None]
        elif kind == "GRU":
            attrs["linear_before_reset"] = True
        else:
            attrs["activation"] = activation
        outs = b.op(kind, *inputs, **attrs)
        seq, _, batch, _ = outs[0].shape
        # Y [seq, dirs, batch, hidden] -> [seq, batch, dirs * hidden]
        y = b.op("Transpose", outs[0], perm=(0, 2, 1, 3))
        x = b.op("Reshape", y, shape=(seq, batch, dirs * hidden))
        last_h.append(outs[1])
        if kind == "LSTM":
            last_c.append(outs[2])
    output = b.op("Transpose", x, perm=(1, 0, 2)) if batch_first else x
    h_n = _joined(b, last_h)
    return (output, (h_n, _joined(b, last_c))) if kind == "LSTM" else (output, h_n)


def _joined(b, states: list):
    return states[0] if len(states) == 1 else b.op("Concat", states, axis=0)


@module_handler("LSTM", "GRU", "RNN")
def _recurrent_module(b, m, input, hx=None):
    kind = type(m).__name__ if type(m).__name__ in _TORCH_TO_ONNX_GATES else _base_kind(m)
    if getattr(m, "proj_size", 0):
        raise GraphError("nn.LSTM with proj_size is not supported")
    if not b.is_tensor(input):
        raise GraphError(f"nn.{kind} on a PackedSequence is not supported")
    activation = "Relu" if getattr(m, "nonlinearity", "tanh") == "relu" else "Tanh"
    b.current_key = kind.lower()
    return run_recurrent(
        b,
        kind,
        input,
        hx,
        list(m._flat_weights),
        m.bias,
        m.num_layers,
        m.bidirectional,
        m.batch_first,
        activation,
    )


def _base_kind(m) -> str:
    for cls in type(m).__mro__:
        if cls.__name__ in _TORCH_TO_ONNX_GATES:
            return cls.__name__
    raise GraphError(f"{type(m).__name__} is not a recurrent module")


# `torch._VF` calls, as the concrete tracer sees them inside nn.LSTM/GRU/RNN.forward
@handles("lstm")
def _lstm_call(
    b, input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first
):
    return _vf(
        "LSTM", b, input, tuple(hx), params, has_biases, num_layers, bidirectional, batch_first
    )


@handles("gru", "rnn_tanh", "rnn_relu")
def _gru_rnn_call(
    b, input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first
):
    kind = "GRU" if b.current_key == "gru" else "RNN"
    activation = "Relu" if b.current_key == "rnn_relu" else "Tanh"
    return _vf(
        kind, b, input, hx, params, has_biases, num_layers, bidirectional, batch_first, activation
    )


def _vf(
    kind,
    b,
    input,
    hx,
    params,
    has_biases,
    num_layers,
    bidirectional,
    batch_first,
    activation="Tanh",
):
    output, state = run_recurrent(
        b,
        kind,
        input,
        hx,
        list(params),
        has_biases,
        num_layers,
        bidirectional,
        batch_first,
        activation,
    )
    return (output, *state) if kind == "LSTM" else (output, state)
