"""Recurrent layers: LSTM, GRU and RNN, with ONNX's inputs, attributes and semantics.

Every op takes X (`[seq, batch, input]`, or `[batch, seq, input]` with `layout=1`), the
input weights W (`[dirs, gates*hidden, input]`), the recurrent weights R
(`[dirs, gates*hidden, hidden]`), and optionally the biases B (`[dirs, 2*gates*hidden]`,
input biases then recurrent ones), per-batch `sequence_lens`, `initial_h` (and for LSTM
`initial_c` and the peepholes P). They return Y (`[seq, dirs, batch, hidden]`; with
`layout=1` `[batch, seq, dirs, hidden]`) and the last states Y_h (and Y_c). Gates follow
ONNX's order: LSTM i, o, f, c; GRU z, r, h. Positions past a sequence's length are zero
in Y and leave the state alone (a sequence of length 0 ends in zero states, as in ONNX
Runtime). `clip` (0: none) bounds every gate's pre-activation.

The numpy references below are the semantics; the compiled C backend runs the loops of
`recurrent.c` (one "c" binding per op), never a Python loop.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mdsl.expr.numpy_ops import sigmoid
from mdsl.ir.graph import Tensor
from mdsl.ir.tensor_type import TensorType
from mdsl.ops.bindings import register_op_impl
from mdsl.ops.proto import op_proto
from mdsl.ops.registry import Attr, In, check
from mdsl.ops.shape_rules import unify_dims

DIRECTIONS = ("forward", "reverse", "bidirectional")
RNN_ACTIVATIONS = ("Tanh", "Relu", "Sigmoid")
FLOATS = ["float32", "float64"]
_LENGTHS = ["int32", "int64"]
_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def _common_attrs() -> dict:
    return {
        "hidden_size": Attr(int, required=True),
        "direction": Attr(str, default="forward", choices=DIRECTIONS),
        "layout": Attr(int, default=0, choices=(0, 1)),
        "clip": Attr(float, default=0.0, doc="bound of every gate's pre-activation; 0: none"),
    }


def _common_inputs() -> dict:
    return {
        "x": FLOATS,
        "w": FLOATS,
        "r": FLOATS,
        "b": In(FLOATS, optional=True),
        "sequence_lens": In(_LENGTHS, optional=True),
        "initial_h": In(FLOATS, optional=True),
    }


def _infer(op_type, x, w, r, b, lens, states, *, hidden_size, direction, layout, n_states):
    """Y and the `n_states` final states, after checking every input's shape."""
    gates, dirs = _GATES[op_type], 2 if direction == "bidirectional" else 1
    check(x.rank == 3, f"{op_type} X must be rank 3, got {x.shape}")
    check(hidden_size > 0, f"{op_type} hidden_size must be positive, got {hidden_size}")
    seq, batch = (x.shape[1], x.shape[0]) if layout else (x.shape[0], x.shape[1])
    size = x.shape[2]
    _check_shape(op_type, "W", w, (dirs, gates * hidden_size, size))
    _check_shape(op_type, "R", r, (dirs, gates * hidden_size, hidden_size))
    if b is not None:
        _check_shape(op_type, "B", b, (dirs, 2 * gates * hidden_size))
    if lens is not None:
        _check_shape(op_type, "sequence_lens", lens, (batch,))
    state_shape = (batch, dirs, hidden_size) if layout else (dirs, batch, hidden_size)
    for name, s in states.items():
        if s is not None:
            _check_shape(op_type, name, s, state_shape)
    for name, t in (("W", w), ("R", r), ("B", b), *states.items()):
        check(
            t is None or t.dtype == x.dtype,
            f"{op_type} {name} must be {x.dtype}, not {t and t.dtype}",
        )
    y_shape = (batch, seq, dirs, hidden_size) if layout else (seq, dirs, batch, hidden_size)
    return (TensorType(y_shape, x.dtype), *[TensorType(state_shape, x.dtype)] * n_states)


def _check_shape(op_type: str, name: str, t, want: tuple) -> None:
    check(t.rank == len(want), f"{op_type} {name} must have shape {want}, got {t.shape}")
    for axis, (got, expected) in enumerate(zip(t.shape, want)):
        unify_dims(got, expected, f"{op_type} {name} dim {axis} (shape {t.shape}, want {want})")


@op_proto(
    "LSTM",
    inputs={
        **_common_inputs(),
        "initial_c": In(FLOATS, optional=True),
        "p": In(FLOATS, optional=True),
    },
    outputs={"y": FLOATS, "y_h": FLOATS, "y_c": FLOATS},
    attrs={**_common_attrs(), "input_forget": Attr(bool, default=False)},
)
def _lstm(x, w, r, b, sequence_lens, initial_h, initial_c, p, **attrs):
    """Long short-term memory (ONNX LSTM, sigmoid/tanh/tanh activations)."""
    hidden = attrs["hidden_size"]
    if p is not None:
        dirs = 2 if attrs["direction"] == "bidirectional" else 1
        _check_shape("LSTM", "P", p, (dirs, 3 * hidden))
    states = {"initial_h": initial_h, "initial_c": initial_c}
    return _infer("LSTM", x, w, r, b, sequence_lens, states, **_shape_attrs(attrs), n_states=2)


@op_proto(
    "GRU",
    inputs=_common_inputs(),
    outputs={"y": FLOATS, "y_h": FLOATS},
    attrs={**_common_attrs(), "linear_before_reset": Attr(bool, default=False)},
)
def _gru(x, w, r, b, sequence_lens, initial_h, **attrs):
    """Gated recurrent unit (ONNX GRU, sigmoid/tanh activations)."""
    states = {"initial_h": initial_h}
    return _infer("GRU", x, w, r, b, sequence_lens, states, **_shape_attrs(attrs), n_states=1)


@op_proto(
    "RNN",
    inputs=_common_inputs(),
    outputs={"y": FLOATS, "y_h": FLOATS},
    attrs={**_common_attrs(), "activation": Attr(str, default="Tanh", choices=RNN_ACTIVATIONS)},
)
def _rnn(x, w, r, b, sequence_lens, initial_h, **attrs):
    """Elman RNN (ONNX RNN with one activation)."""
    states = {"initial_h": initial_h}
    return _infer("RNN", x, w, r, b, sequence_lens, states, **_shape_attrs(attrs), n_states=1)


def _shape_attrs(attrs: dict) -> dict:
    return {k: attrs[k] for k in ("hidden_size", "direction", "layout")}


def lstm(
    x,
    w,
    r,
    b=None,
    sequence_lens=None,
    initial_h=None,
    initial_c=None,
    p=None,
    *,
    hidden_size: int,
    direction: str = "forward",
    layout: int = 0,
    clip: float = 0.0,
    input_forget: bool = False,
    name=None,
) -> tuple[Tensor, ...]:
    """An LSTM over `x` (ONNX LSTM): returns (Y, Y_h, Y_c).

    >>> import numpy as np, mdsl
    >>> with mdsl.Graph() as g:
    ...     x = g.input("x", (5, 2, 3))
    ...     w, r = mdsl.param("w", (1, 16, 3)), mdsl.param("r", (1, 16, 4))
    ...     y, y_h, y_c = mdsl.ops.lstm(x, w, r, hidden_size=4)
    ...     g.output(y_h, "h")
    >>> y.shape, y_h.shape
    ((5, 1, 2, 4), (1, 2, 4))
    """
    return _lstm(
        x,
        w,
        r,
        b,
        sequence_lens,
        initial_h,
        initial_c,
        p,
        hidden_size=hidden_size,
        direction=direction,
        layout=layout,
        clip=clip,
        input_forget=input_forget,
        name=name,
    )


def gru(
    x,
    w,
    r,
    b=None,
    sequence_lens=None,
    initial_h=None,
    *,
    hidden_size: int,
    direction: str = "forward",
    layout: int = 0,
    clip: float = 0.0,
    linear_before_reset: bool = False,
    name=None,
) -> tuple[Tensor, ...]:
    """A GRU over `x` (ONNX GRU): returns (Y, Y_h). PyTorch's nn.GRU is
    `linear_before_reset=True`.

    >>> import mdsl
    >>> with mdsl.Graph() as g:
    ...     x = g.input("x", (2, 5, 3))
    ...     y, y_h = mdsl.ops.gru(x, mdsl.param("w", (2, 12, 3)), mdsl.param("r", (2, 12, 4)),
    ...                           hidden_size=4, direction="bidirectional", layout=1)
    ...     g.output(y, "y")
    >>> y.shape
    (2, 5, 2, 4)
    """
    return _gru(
        x,
        w,
        r,
        b,
        sequence_lens,
        initial_h,
        hidden_size=hidden_size,
        direction=direction,
        layout=layout,
        clip=clip,
        linear_before_reset=linear_before_reset,
        name=name,
    )


def rnn(
    x,
    w,
    r,
    b=None,
    sequence_lens=None,
    initial_h=None,
    *,
    hidden_size: int,
    direction: str = "forward",
    layout: int = 0,
    clip: float = 0.0,
    activation: str = "Tanh",
    name=None,
) -> tuple[Tensor, ...]:
    """An Elman RNN over `x` (ONNX RNN; `activation` Tanh, Relu or Sigmoid): (Y, Y_h).

    >>> import mdsl
    >>> with mdsl.Graph() as g:
    ...     x = g.input("x", (5, 2, 3))
    ...     y, y_h = mdsl.ops.rnn(x, mdsl.param("w", (1, 4, 3)), mdsl.param("r", (1, 4, 4)),
    ...                           hidden_size=4, activation="Relu")
    ...     g.output(y_h, "h")
    >>> y_h.shape
    (1, 2, 4)
    """
    return _rnn(
        x,
        w,
        r,
        b,
        sequence_lens,
        initial_h,
        hidden_size=hidden_size,
        direction=direction,
        layout=layout,
        clip=clip,
        activation=activation,
        name=name,
    )


# -- references ------------------------------------------------------------------------------
_ACTIVATIONS = {"Tanh": np.tanh, "Relu": lambda v: np.maximum(v, 0), "Sigmoid": sigmoid}


def _lstm_cell(gx, h, c, r, rb, p, clip, input_forget):
    hid = h.shape[-1]
    g = gx + h @ r.T + rb
    gi, go, gf, gc = (g[:, k * hid : (k + 1) * hid] for k in range(4))
    pi, po, pf = (0, 0, 0) if p is None else (p[:hid], p[hid : 2 * hid], p[2 * hid :])
    i = sigmoid(_clipped(gi + pi * c, clip))
    f = 1 - i if input_forget else sigmoid(_clipped(gf + pf * c, clip))
    c = f * c + i * np.tanh(_clipped(gc, clip))
    o = sigmoid(_clipped(go + po * c, clip))
    return o * np.tanh(c), c


def _gru_cell(gx, h, r, rb, clip, linear_before_reset):
    hid = h.shape[-1]
    gh = h @ r[: 2 * hid].T + rb[: 2 * hid]
    z = sigmoid(_clipped(gx[:, :hid] + gh[:, :hid], clip))
    reset = sigmoid(_clipped(gx[:, hid : 2 * hid] + gh[:, hid:], clip))
    r_h, rb_h = r[2 * hid :], rb[2 * hid :]
    if linear_before_reset:
        recurrent = reset * (h @ r_h.T + rb_h)
    else:
        recurrent = (reset * h) @ r_h.T + rb_h
    cand = np.tanh(_clipped(gx[:, 2 * hid :] + recurrent, clip))
    return (1 - z) * cand + z * h


def _clipped(v, clip):
    return np.clip(v, -clip, clip) if clip > 0 else v


def _run(op_type, x, w, r, b, lens, h0, c0, p, attrs):
    """Y and the final states of `op_type`, one direction after the other."""
    layout, hid = attrs["layout"], attrs["hidden_size"]
    gates, dtype = _GATES[op_type], x.dtype
    if layout:
        x = x.transpose(1, 0, 2)
        h0, c0 = (None if s is None else s.transpose(1, 0, 2) for s in (h0, c0))
    seq, batch, _ = x.shape
    dirs = w.shape[0]
    lengths = np.full(batch, seq) if lens is None else np.clip(lens.astype(np.int64), 0, seq)
    y = np.zeros((seq, dirs, batch, hid), np.float64)
    y_h = np.zeros((dirs, batch, hid), np.float64)
    y_c = np.zeros((dirs, batch, hid), np.float64)
    for d in range(dirs):
        reverse = attrs["direction"] == "reverse" or d == 1
        bias = np.zeros(2 * gates * hid) if b is None else b[d].astype(np.float64)
        h = np.zeros((batch, hid)) if h0 is None else h0[d].astype(np.float64)
        c = np.zeros((batch, hid)) if c0 is None else c0[d].astype(np.float64)
        wd, rd = w[d].astype(np.float64), r[d].astype(np.float64)
        for step in range(seq):
            active = step < lengths
            t = np.where(reverse, lengths - 1 - step, step).clip(0, seq - 1)
            xt = x[t, np.arange(batch)].astype(np.float64)
            gx = xt @ wd.T + bias[: gates * hid]
            rb = bias[gates * hid :]
            if op_type == "LSTM":
                pd = None if p is None else p[d].astype(np.float64)
                h_new, c_new = _lstm_cell(
                    gx, h, c, rd, rb, pd, attrs["clip"], attrs["input_forget"]
                )
                c = np.where(active[:, None], c_new, c)
            elif op_type == "GRU":
                h_new = _gru_cell(gx, h, rd, rb, attrs["clip"], attrs["linear_before_reset"])
            else:
                h_new = _ACTIVATIONS[attrs["activation"]](
                    _clipped(gx + h @ rd.T + rb, attrs["clip"])
                )
            h = np.where(active[:, None], h_new, h)
            rows = np.nonzero(active)[0]
            y[t[rows], d, rows] = h[rows]
        empty = (lengths == 0)[:, None]  # ONNX Runtime: a sequence of length 0 ends at 0
        y_h[d], y_c[d] = np.where(empty, 0, h), np.where(empty, 0, c)
    if layout:
        y, y_h, y_c = y.transpose(2, 0, 1, 3), y_h.transpose(1, 0, 2), y_c.transpose(1, 0, 2)
    outs = (y, y_h, y_c) if op_type == "LSTM" else (y, y_h)
    return tuple(np.ascontiguousarray(o).astype(dtype) for o in outs)


def _lstm_ref(x, w, r, b=None, sequence_lens=None, initial_h=None, initial_c=None, p=None, **attrs):
    return _run("LSTM", x, w, r, b, sequence_lens, initial_h, initial_c, p, attrs)


def _gru_ref(x, w, r, b=None, sequence_lens=None, initial_h=None, **attrs):
    return _run("GRU", x, w, r, b, sequence_lens, initial_h, None, None, attrs)


def _rnn_ref(x, w, r, b=None, sequence_lens=None, initial_h=None, **attrs):
    return _run("RNN", x, w, r, b, sequence_lens, initial_h, None, None, attrs)


register_op_impl("LSTM", _lstm_ref)
register_op_impl("GRU", _gru_ref)
register_op_impl("RNN", _rnn_ref)

C_SOURCE = (Path(__file__).with_name("recurrent.c")).read_text()
for _op, _symbol in (
    ("LSTM", "recurrent_lstm"),
    ("GRU", "recurrent_gru"),
    ("RNN", "recurrent_rnn"),
):
    register_op_impl(_op, backend="c", source=C_SOURCE, symbol=_symbol)
