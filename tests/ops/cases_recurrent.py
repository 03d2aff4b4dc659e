"""Cases for LSTM, GRU and RNN against torch.nn.LSTM/GRU/RNN holding the same weights
(float32: rtol/atol 1e-5). Torch orders the gates differently (see
`mdsl.frontends.torch_recurrent`); the cases draw ONNX-ordered weights and give torch
the same numbers regrouped."""

from __future__ import annotations

import numpy as np
import torch

import mdsl
from mdsl import ops
from mdsl.frontends.torch_recurrent import _TORCH_TO_ONNX_GATES
from tests.ops.op_table import OpCase, rand

S, B, N_IN, H = 4, 3, 5, 6
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
BUILDERS = {"LSTM": ops.lstm, "GRU": ops.gru, "RNN": ops.rnn}
TOL = {"rtol": 1e-5, "atol": 1e-5}


def _torch_gates(kind: str, onnx_rows: torch.Tensor) -> torch.Tensor:
    """ONNX-ordered gate rows back in torch's order."""
    order = _TORCH_TO_ONNX_GATES[kind]
    chunks = onnx_rows.reshape(len(order), -1, *onnx_rows.shape[1:])
    back = [order.index(k) for k in range(len(order))]
    return chunks[back].reshape(onnx_rows.shape)


def _torch_module(kind, w, r, bias, bidirectional, batch_first):
    m = getattr(torch.nn, kind)(N_IN, H, bidirectional=bidirectional, batch_first=batch_first)
    with torch.no_grad():
        for d, suffix in enumerate(["", "_reverse"][: w.shape[0]]):
            getattr(m, f"weight_ih_l0{suffix}").copy_(_torch_gates(kind, w[d]))
            getattr(m, f"weight_hh_l0{suffix}").copy_(_torch_gates(kind, r[d]))
            n = GATES[kind] * H
            getattr(m, f"bias_ih_l0{suffix}").copy_(_torch_gates(kind, bias[d, :n]))
            getattr(m, f"bias_hh_l0{suffix}").copy_(_torch_gates(kind, bias[d, n:]))
    return m.eval()


def _torch_ref(kind, bidirectional, batch_first, with_state):
    dirs = 2 if bidirectional else 1

    def ref(x, w, r, bias, *states):
        m = _torch_module(kind, w, r, bias, bidirectional, batch_first)
        hx = None
        if batch_first:  # torch's states are [D, B, H] whatever batch_first says
            states = tuple(s.transpose(0, 1) for s in states)
        if with_state:
            hx = tuple(states) if kind == "LSTM" else states[0]
        with torch.no_grad():
            y, state = m(x, hx)
        seq_first = y.transpose(0, 1) if batch_first else y
        y = seq_first.reshape(S, B, dirs, H).permute(0, 2, 1, 3)  # ONNX's [S, D, B, H]
        if batch_first:
            y = y.permute(2, 0, 1, 3)  # layout 1: [B, S, D, H]
        states_out = state if kind == "LSTM" else (state,)
        if batch_first:
            states_out = tuple(s.transpose(0, 1) for s in states_out)
        return (y, *states_out)

    return ref


def _case(kind, *, bidirectional=False, batch_first=False, with_state=False, **attrs):
    dirs = 2 if bidirectional else 1
    g = GATES[kind] * H
    x_shape = (B, S, N_IN) if batch_first else (S, B, N_IN)
    state_shape = (B, dirs, H) if batch_first else (dirs, B, H)
    inputs = {
        "x": rand(*x_shape, seed=1),
        "w": rand(dirs, g, N_IN, seed=2, lo=-0.5, hi=0.5),
        "r": rand(dirs, g, H, seed=3, lo=-0.5, hi=0.5),
        "b": rand(dirs, 2 * g, seed=4, lo=-0.5, hi=0.5),
    }
    n_states = 2 if kind == "LSTM" and with_state else int(with_state)
    for k in range(n_states):
        inputs[f"s{k}"] = rand(*state_shape, seed=5 + k)
    if kind == "GRU":
        attrs["linear_before_reset"] = True  # torch's GRU

    def build(x, w, r, b, *states):
        padded = [None, states[0] if states else None]  # sequence_lens, initial_h
        if kind == "LSTM":
            padded.append(states[1] if len(states) > 1 else None)
        return BUILDERS[kind](
            x,
            w,
            r,
            b,
            *padded,
            hidden_size=H,
            direction="bidirectional" if bidirectional else "forward",
            layout=int(batch_first),
            **attrs,
        )

    case_id = (
        "-".join(
            name
            for name, on in (
                ("bidirectional", bidirectional),
                ("batch-first", batch_first),
                ("initial-state", with_state),
            )
            if on
        )
        or "forward"
    )
    return OpCase(
        kind,
        build,
        inputs,
        _torch_ref(kind, bidirectional, batch_first, with_state),
        id=case_id,
        **TOL,
    )


def _reverse_numpy_ref(kind):
    """Reverse direction = the forward op on the time-reversed input, Y flipped back."""

    def ref(x, w, r, b):
        with mdsl.Graph() as g:
            y = BUILDERS[kind](
                g.input("x", x.shape),
                g.const("w", w),
                g.const("r", r),
                g.const("b", b),
                hidden_size=H,
            )
            g.output(y[0], "y")
            g.output(y[1], "h")
        got = mdsl.interpret(g, {"x": np.ascontiguousarray(x[::-1])})
        return got["y"][::-1], got["h"]

    return ref


def _reverse_case(kind):
    g = GATES[kind] * H
    inputs = {
        "x": rand(S, B, N_IN, seed=1),
        "w": rand(1, g, N_IN, seed=2, lo=-0.5, hi=0.5),
        "r": rand(1, g, H, seed=3, lo=-0.5, hi=0.5),
        "b": rand(1, 2 * g, seed=4),
    }
    return OpCase(
        kind,
        lambda x, w, r, b: BUILDERS[kind](x, w, r, b, hidden_size=H, direction="reverse")[:2],
        inputs,
        numpy_ref=_reverse_numpy_ref(kind),
        id="reverse",
        **TOL,
    )


CASES = [
    *(_case(k) for k in GATES),
    *(_case(k, bidirectional=True) for k in GATES),
    *(_case(k, batch_first=True, with_state=True) for k in GATES),
    *(_case(k, bidirectional=True, with_state=True) for k in GATES),
    *(_reverse_case(k) for k in GATES),
    OpCase(
        "LSTM",
        lambda x, w, r: ops.lstm(x, w, r, hidden_size=H),
        {"x": rand(S, B, N_IN), "w": rand(1, 4 * H, N_IN + 1), "r": rand(1, 4 * H, H)},
        raises=mdsl.ShapeError,
        id="input-size-mismatch",
    ),
    OpCase(
        "GRU",
        lambda x, w, r: ops.gru(x, w, r, hidden_size=H, direction="bidirectional"),
        {"x": rand(S, B, N_IN), "w": rand(1, 3 * H, N_IN), "r": rand(1, 3 * H, H)},
        raises=mdsl.ShapeError,
        id="directions-mismatch",
    ),
    OpCase(
        "RNN",
        lambda x, w, r: ops.rnn(x, w, r, hidden_size=H, activation="Softsign"),
        {"x": rand(S, B, N_IN), "w": rand(1, H, N_IN), "r": rand(1, H, H)},
        raises=mdsl.GraphError,
        id="unknown-activation",
    ),
]
