"""Recurrent nets end to end: nn.LSTM / nn.GRU / nn.RNN through the torch frontend and
through PyTorch's ONNX exporter, and ONNX LSTM/GRU/RNN nodes with the attributes torch
never writes (clip, input_forget, sequence_lens, GRU's default reset), each on the
interpreter and the C backend against PyTorch or ONNX Runtime.

The C backend runs the layers as compiled loops (the "c" bindings of
mdsl.ops.recurrent), never a Python callback: `_assert_compiled` checks the kernels.
Tolerances: float32 through 6-7 steps of sigmoid/tanh, rtol/atol 1e-5 (observed ~1e-7).
"""

from __future__ import annotations

import io
import warnings

import numpy as np
import onnx
import onnx.helper as oh
import pytest
import torch

import mdsl
from mdsl.frontends import onnx as mo
from mdsl.frontends.torch import from_module
from tests.frontends.onnx_models import ort_run

TOL = {"rtol": 1e-5, "atol": 1e-5}


class Tagger(torch.nn.Module):
    """Embedding -> recurrent layers -> per-step classifier, the shape of a sequence tagger."""

    def __init__(self, kind: str, **kwargs):
        super().__init__()
        self.embed = torch.nn.Embedding(20, 8)
        self.rnn = getattr(torch.nn, kind)(8, 6, batch_first=True, **kwargs)
        width = 12 if kwargs.get("bidirectional") else 6
        self.head = torch.nn.Linear(width, 3)

    def forward(self, ids):
        y, _ = self.rnn(self.embed(ids))
        return self.head(y)


class DataDependent(torch.nn.Module):
    """torch.fx cannot trace this (a branch on a value): the concrete tracer takes it."""

    def __init__(self):
        super().__init__()
        self.rnn = torch.nn.GRU(4, 5, num_layers=2)

    def forward(self, x):
        if x.abs().sum() > 0:
            x = x * 2
        y, h = self.rnn(x)
        return y, h


MODELS = {
    "lstm": lambda: Tagger("LSTM"),
    "gru": lambda: Tagger("GRU"),
    "bidirectional-lstm": lambda: Tagger("LSTM", bidirectional=True, num_layers=2),
    "rnn-relu": lambda: Tagger("RNN", nonlinearity="relu"),
}


def _assert_compiled(exe, g) -> None:
    """Every recurrent node runs as compiled C (a custom C op kernel), not a callback."""
    recurrent = {n.name for n in g.nodes if n.op_type in ("LSTM", "GRU", "RNN")}
    kinds = {node: k.kind for k in exe.kernels for node in k.nodes if node in recurrent}
    assert set(kinds) == recurrent
    assert set(kinds.values()) == {"custom C op"}, kinds


@pytest.mark.parametrize("name", MODELS)
def test_torch_recurrent_tagger_matches_torch(name):
    torch.manual_seed(0)
    model = MODELS[name]().eval()
    ids = torch.randint(0, 20, (3, 7))
    g = from_module(model, (ids,))
    assert any(n.op_type in ("LSTM", "GRU", "RNN") for n in g.nodes)
    with torch.no_grad():
        want = model(ids).numpy()
    np.testing.assert_allclose(mdsl.interpret(g, {"ids": ids.numpy()})["output"], want, **TOL)
    exe = mdsl.compile(g, backend="c")
    np.testing.assert_allclose(exe(ids=ids.numpy())["output"], want, **TOL)
    _assert_compiled(exe, g)


def test_concrete_tracer_takes_recurrent_layers():
    torch.manual_seed(0)
    model = DataDependent().eval()
    x = torch.randn(6, 2, 4)
    with pytest.warns(mdsl.frontends.torch.StaticTraceWarning):
        g = from_module(model, (x,))
    with torch.no_grad():
        want_y, want_h = model(x)
    got = mdsl.compile(g, backend="c")(x=x.numpy())
    np.testing.assert_allclose(got["output_0"], want_y.numpy(), **TOL)
    np.testing.assert_allclose(got["output_1"], want_h.numpy(), **TOL)


def test_initial_states_are_inputs():
    torch.manual_seed(0)

    class WithState(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = torch.nn.LSTM(4, 5, num_layers=2)

        def forward(self, x, h, c):
            y, (h_n, c_n) = self.rnn(x, (h, c))
            return y, h_n, c_n

    model = WithState().eval()
    args = (torch.randn(5, 2, 4), torch.randn(2, 2, 5), torch.randn(2, 2, 5))
    g = from_module(model, args)
    with torch.no_grad():
        want = model(*args)
    feeds = {n: a.numpy() for n, a in zip(("x", "h", "c"), args)}
    for got in (mdsl.interpret(g, feeds), mdsl.compile(g, backend="c")(**feeds)):
        for i, w in enumerate(want):
            np.testing.assert_allclose(got[f"output_{i}"], w.numpy(), **TOL)


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_torch_onnx_export_matches_onnxruntime(kind):
    torch.manual_seed(0)
    model = getattr(torch.nn, kind)(4, 5, num_layers=2, bidirectional=True).eval()
    x = torch.randn(6, 3, 4)
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), buffer, input_names=["x"], dynamo=False, opset_version=17)
    data = buffer.getvalue()
    want = ort_run(onnx.load_from_string(data), {"x": x.numpy()})
    g = mo.load(data)
    assert kind in {n.op_type for n in g.nodes}
    names = list(g.outputs)
    for got in (mdsl.interpret(g, {"x": x.numpy()}), mdsl.compile(g, backend="c")(x=x.numpy())):
        for name, w in zip(names, want):
            np.testing.assert_allclose(got[name], w, **TOL)


def _onnx_model(op_type, inputs, attrs, n_outputs):
    """A one-node ONNX model; `inputs` name -> array, None for an absent input."""
    names = [n if a is not None else "" for n, a in inputs.items()]
    outs = ["Y", "Y_h", "Y_c"][:n_outputs]
    feeds = {n: a for n, a in inputs.items() if a is not None}
    node = oh.make_node(op_type, names, outs, **attrs)
    graph = oh.make_graph(
        [node], "rec",
        [oh.make_tensor_value_info(n, onnx.helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
         for n, a in feeds.items()],
        [oh.make_tensor_value_info(o, onnx.TensorProto.FLOAT, None) for o in outs],
    )  # fmt: skip
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 14)])
    return model.SerializeToString(), feeds


def _recurrent_inputs(op_type, dirs=1, lens=None, layout=0, peepholes=False):
    rng = np.random.default_rng(3)
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op_type]
    seq, batch, size, hidden = 5, 3, 4, 6

    def r(*s):
        return rng.uniform(-1, 1, s).astype(np.float32)

    state = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
    inputs = {
        "X": r(batch, seq, size) if layout else r(seq, batch, size),
        "W": r(dirs, gates * hidden, size),
        "R": r(dirs, gates * hidden, hidden),
        "B": r(dirs, 2 * gates * hidden),
        "sequence_lens": None if lens is None else np.array(lens, np.int32),
        "initial_h": r(*state),
    }
    if op_type == "LSTM":
        inputs["initial_c"] = r(*state)
        inputs["P"] = r(dirs, 3 * hidden) if peepholes else None
    return inputs, hidden


ORT_CASES = {
    "lstm-clip-peepholes": ("LSTM", {"clip": 0.7}, {"peepholes": True}),
    "lstm-input-forget": ("LSTM", {"input_forget": 1}, {}),
    "lstm-seq-lens-bidirectional": (
        "LSTM", {"direction": "bidirectional"}, {"dirs": 2, "lens": [5, 2, 0]},
    ),
    "gru-reset-after-product": ("GRU", {"linear_before_reset": 0}, {"lens": [3, 5, 1]}),
    "gru-reverse": ("GRU", {"direction": "reverse"}, {}),  # ORT has no layout=1
    "rnn-relu-seq-lens": ("RNN", {"activations": ["Relu"]}, {"lens": [1, 4, 5]}),
}  # fmt: skip


@pytest.mark.parametrize("case", ORT_CASES)
def test_onnx_node_matches_onnxruntime(case):
    op_type, attrs, input_options = ORT_CASES[case]
    inputs, hidden = _recurrent_inputs(op_type, **input_options)
    n_outputs = 3 if op_type == "LSTM" else 2
    data, feeds = _onnx_model(op_type, inputs, {"hidden_size": hidden, **attrs}, n_outputs)
    want = ort_run(onnx.load_from_string(data), feeds)
    g = mo.load(data)
    for got in (mdsl.interpret(g, feeds), mdsl.compile(g, backend="c")(**feeds)):
        for name, w in zip(("Y", "Y_h", "Y_c"), want):
            np.testing.assert_allclose(got[name], w, **TOL)


def test_unsupported_activations_are_refused():
    inputs, hidden = _recurrent_inputs("LSTM")
    data, _ = _onnx_model(
        "LSTM", inputs, {"hidden_size": hidden, "activations": ["Relu", "Tanh", "Tanh"]}, 3
    )
    with pytest.raises(mdsl.GraphError, match="activations"):
        mo.load(data)


def test_lstm_with_projection_is_refused():
    model = torch.nn.LSTM(4, 6, proj_size=3).eval()
    with pytest.raises(mdsl.GraphError, match="proj_size"):
        from_module(model, (torch.randn(5, 2, 4),))
