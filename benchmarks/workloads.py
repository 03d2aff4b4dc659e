"""The benchmark workloads W1-W7: one model written for every contender.

Each workload holds its feeds (float32, fixed seed) and, for each implementation, a
builder: the mdsl graph, a numpy function, a PyTorch function, an ONNX model and, for the
pointwise and row workloads, the hand-written C loop. Weights are drawn once and shared,
so every implementation computes the same function and the outputs are compared.
"""

from __future__ import annotations

import math
import sys
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # for examples/

import onnx_graphs  # noqa: E402

import mdsl  # noqa: E402
from mdsl import ops  # noqa: E402

A, B = 1.1, 0.1  # W1: gelu(x * A + B) * sigmoid(x) + x
LN_EPS = 1e-5
BERT_EPS = 1e-12


@dataclass
class Workload:
    key: str
    title: str
    feeds: dict[str, np.ndarray]
    graph: Callable[[], mdsl.Graph]
    numpy: Callable[[dict], np.ndarray]
    torch: Callable[[dict], object]  # takes torch tensors, returns a tensor
    onnx: Callable[[], object]
    hand: Callable[[object, dict], tuple[Callable, np.ndarray]] | None = None
    bytes_moved: int | None = None  # compulsory DRAM traffic, for the bandwidth floor
    flops: float | None = None
    tol: float = 1e-4
    notes: list[str] = field(default_factory=list)


# -- shared numpy helpers (eager numpy has no erf: the rational approximation of XLA/Eigen) ---------
_ERF_P = (
    -2.72614225801306e-10,
    2.77068142495902e-08,
    -2.10102402082508e-06,
    -5.69250639462346e-05,
    -7.34990630326855e-04,
    -2.95459980854025e-03,
    -1.60960333262415e-02,
)
_ERF_Q = (
    -1.45660718464996e-05,
    -2.13374055278905e-04,
    -1.68282697438203e-03,
    -7.37332916720468e-03,
    -1.42647390514189e-02,
)


def np_erf(x: np.ndarray) -> np.ndarray:
    x = np.clip(x, np.float32(-4), np.float32(4))
    x2 = x * x
    p = np.full_like(x, _ERF_P[0])
    for c in _ERF_P[1:]:
        p = p * x2 + np.float32(c)
    q = np.full_like(x, _ERF_Q[0])
    for c in _ERF_Q[1:]:
        q = q * x2 + np.float32(c)
    return x * p / q


def np_gelu(x):
    return np.float32(0.5) * x * (np.float32(1) + np_erf(x * np.float32(1 / math.sqrt(2))))


def np_sigmoid(x):
    return np.float32(1) / (np.float32(1) + np.exp(-x))


def np_layer_norm(x, gamma, beta, eps):
    mean = x.mean(-1, keepdims=True)
    centered = x - mean
    var = (centered * centered).mean(-1, keepdims=True)
    return centered / np.sqrt(var + np.float32(eps)) * gamma + beta


def np_softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def np_conv3x3(x, w):
    """NCHW 3x3 convolution, stride 1, padding 1, as im2col + one matrix product."""
    n, c, h, wd = x.shape
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))
    cols = windows.transpose(0, 2, 3, 1, 4, 5).reshape(n * h * wd, c * 9)
    out = cols @ w.reshape(w.shape[0], -1).T
    return out.reshape(n, h, wd, -1).transpose(0, 3, 1, 2)


def np_batch_norm(x, gamma, beta, mean, var, eps=1e-5):
    scale = gamma / np.sqrt(var + np.float32(eps))
    return x * scale[:, None, None] + (beta - mean * scale)[:, None, None]


# -- weights ----------------------------------------------------------------------------------------
def random_param(name: str, shape) -> np.ndarray:
    """A deterministic value for parameter `name`, plausible for its role."""
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    leaf = name.rsplit("/", 1)[-1]
    if leaf == "gamma":
        return (1 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
    if leaf == "var":
        return rng.uniform(0.5, 1.5, shape).astype(np.float32)
    if leaf == "weight" and len(shape) == 4:  # convolution: He initialization
        fan_in = int(np.prod(shape[1:]))
        return (rng.standard_normal(shape) * math.sqrt(2 / fan_in)).astype(np.float32)
    scale = 0.02 if leaf.endswith("weight") else 0.1
    return (scale * rng.standard_normal(shape)).astype(np.float32)


def randomize_params(g: mdsl.Graph, prefix: str) -> dict[str, np.ndarray]:
    """Give every parameter of `g` a random non-trivial value (mdsl.optimize would delete
    an all-zero bias); returns them by name relative to `prefix`."""
    weights = {}
    for node in g.constants:
        leaf = node.name.rsplit("/", 1)[-1]
        if not leaf.endswith(("weight", "bias", "gamma", "beta", "mean", "var")):
            continue  # e.g. the attention scale
        value = random_param(node.name, tuple(node.outputs[0].shape))
        value.setflags(write=False)
        node.attrs["value"] = value
        weights[node.name.removeprefix(prefix)] = value
    return weights


def feed(shape, seed: int, scale: float = 1.0) -> np.ndarray:
    return (scale * np.random.default_rng(seed).standard_normal(shape)).astype(np.float32)


def _torch():
    import torch
    import torch.nn.functional as F

    return torch, F


# -- W1 pointwise chain --------------------------------------------------------------------------------
def w1(n: int) -> Workload:
    def graph():
        with mdsl.Graph("w1_pointwise") as g:
            x = g.input("x", (n,))
            g.output(ops.gelu(x * A + B, approximate="none") * ops.sigmoid(x) + x, "y")
        return g

    def torch_fn(t):
        torch, F = _torch()
        x = t["x"]
        return F.gelu(x * A + B) * torch.sigmoid(x) + x

    def hand(lib, feeds):
        from hand_c import ptr

        x, y = feeds["x"], np.empty_like(feeds["x"])
        px, py = ptr(x), ptr(y)
        return (lambda: lib.hc_w1(px, py, n, A, B)), y

    label = f"{n // 2**20}M" if n >= 2**20 else f"{n // 1024}K"
    return Workload(
        key=f"W1-{label}",
        title=f"pointwise chain gelu(x*a+b)*sigmoid(x)+x, exact erf GELU, {n:,} elements",
        feeds={"x": feed((n,), 1, 2.0)},
        graph=graph,
        numpy=lambda f: (
            np_gelu(f["x"] * np.float32(A) + np.float32(B)) * np_sigmoid(f["x"]) + f["x"]
        ),
        torch=torch_fn,
        onnx=lambda: onnx_graphs.pointwise_chain(n, A, B),
        hand=hand,
        bytes_moved=8 * n,
        tol=2e-5,
        notes=["a = 1.1 and b = 0.1 are constants; x ~ N(0, 2^2)"],
    )


def w1_libm_hand(lib, feeds):
    """W1 by the hand loop calling libm erff/expf (vectorized by libmvec)."""
    from hand_c import ptr

    x, y = feeds["x"], np.empty_like(feeds["x"])
    px, py = ptr(x), ptr(y)
    return (lambda: lib.hc_w1_libm(px, py, x.size, A, B)), y


# -- W2 layer norm, W3 softmax -----------------------------------------------------------------------
def w2() -> Workload:
    shape = (4096, 768)
    gamma, beta = random_param("gamma", (768,)), random_param("beta", (768,))

    def graph():
        with mdsl.Graph("w2_layer_norm") as g:
            x = g.input("x", shape)
            gm = mdsl.param("gamma", (768,), init=gamma)
            bt = mdsl.param("beta", (768,), init=beta)
            g.output(ops.layer_norm(x, gm, bt, axis=-1, epsilon=LN_EPS), "y")
        return g

    def torch_fn(t):
        torch, F = _torch()
        return F.layer_norm(t["x"], (768,), torch.from_numpy(gamma), torch.from_numpy(beta), LN_EPS)

    def hand(lib, feeds):
        from hand_c import ptr

        x, y = feeds["x"], np.empty_like(feeds["x"])
        args = (ptr(x), ptr(gamma), ptr(beta), ptr(y), shape[0], shape[1], LN_EPS)
        return (lambda: lib.hc_layer_norm(*args)), y

    return Workload(
        key="W2",
        title="layer norm over the last axis of [4096, 768]",
        feeds={"x": feed(shape, 2)},
        graph=graph,
        numpy=lambda f: np_layer_norm(f["x"], gamma, beta, LN_EPS),
        torch=torch_fn,
        onnx=lambda: onnx_graphs.layer_norm(shape, gamma, beta, LN_EPS),
        hand=hand,
        bytes_moved=8 * math.prod(shape),
        tol=1e-4,
    )


def w3() -> Workload:
    shape = (64, 12, 128, 128)

    def graph():
        with mdsl.Graph("w3_softmax") as g:
            g.output(ops.softmax(g.input("x", shape), axis=-1), "y")
        return g

    def torch_fn(t):
        torch, _ = _torch()
        return torch.softmax(t["x"], dim=-1)

    def hand(lib, feeds):
        from hand_c import ptr

        x, y = feeds["x"], np.empty_like(feeds["x"])
        rows = math.prod(shape[:-1])
        return (lambda: lib.hc_softmax(ptr(x), ptr(y), rows, shape[-1])), y

    return Workload(
        key="W3",
        title="softmax over the last axis of [64, 12, 128, 128]",
        feeds={"x": feed(shape, 3, 3.0)},
        graph=graph,
        numpy=lambda f: np_softmax(f["x"]),
        torch=torch_fn,
        onnx=lambda: onnx_graphs.softmax(shape),
        hand=hand,
        bytes_moved=8 * math.prod(shape),
        tol=1e-5,
    )


# -- W4 MLP ------------------------------------------------------------------------------------------
def w4() -> Workload:
    rows, hidden, inner = 128, 768, 3072
    w1_, b1 = random_param("fc1/weight", (hidden, inner)), random_param("fc1/bias", (inner,))
    w2_, b2 = random_param("fc2/weight", (inner, hidden)), random_param("fc2/bias", (hidden,))

    def graph():
        with mdsl.Graph("w4_mlp") as g:
            x = g.input("x", (rows, hidden))
            h = ops.linear(
                x,
                mdsl.param("fc1_weight", w1_.shape, init=w1_),
                mdsl.param("fc1_bias", b1.shape, init=b1),
            )
            h = ops.gelu(h, approximate="none")
            y = ops.linear(
                h,
                mdsl.param("fc2_weight", w2_.shape, init=w2_),
                mdsl.param("fc2_bias", b2.shape, init=b2),
            )
            g.output(y, "y")
        return g

    def torch_fn(t):
        torch, F = _torch()
        h = F.gelu(torch.addmm(tb1, t["x"], tw1))
        return torch.addmm(tb2, h, tw2)

    torch, _ = _torch()
    tw1, tb1, tw2, tb2 = (torch.from_numpy(a) for a in (w1_, b1, w2_, b2))
    return Workload(
        key="W4",
        title="MLP [128, 768] -> 3072 (bias, exact GELU) -> 768 (bias)",
        feeds={"x": feed((rows, hidden), 4)},
        graph=graph,
        numpy=lambda f: np_gelu(f["x"] @ w1_ + b1) @ w2_ + b2,
        torch=torch_fn,
        onnx=lambda: onnx_graphs.mlp((rows, hidden), w1_, b1, w2_, b2),
        flops=2.0 * rows * hidden * inner * 2,
        tol=1e-4,
    )


# -- W5 BERT-base encoder layer ---------------------------------------------------------------------
BERT_PREFIX = "EncoderBlock/"


def w5(batch: int, seq: int = 128, hidden: int = 768, heads: int = 12) -> Workload:
    from examples.bert import bert

    g = bert(1, hidden, heads, seq=seq, batch=batch)
    w = randomize_params(g, BERT_PREFIX)
    head = hidden // heads

    def numpy_fn(f):
        x = f["x"]

        def heads_of(name):
            t = x @ w[f"SelfAttention/{name}_weight"] + w[f"SelfAttention/{name}_bias"]
            return t.reshape(batch, seq, heads, head).transpose(0, 2, 1, 3)

        q, k, v = heads_of("query"), heads_of("key"), heads_of("value")
        probs = np_softmax((q @ k.transpose(0, 1, 3, 2)) * np.float32(1 / math.sqrt(head)))
        ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(batch, seq, hidden)
        attn = ctx @ w["SelfAttention/output_weight"] + w["SelfAttention/output_bias"]
        h = np_layer_norm(attn + x, w["AddNorm/gamma"], w["AddNorm/beta"], BERT_EPS)
        ff = np_gelu(h @ w["FFN/intermediate_weight"] + w["FFN/intermediate_bias"])
        ff = ff @ w["FFN/output_weight"] + w["FFN/output_bias"]
        return np_layer_norm(ff + h, w["AddNorm_1/gamma"], w["AddNorm_1/beta"], BERT_EPS)

    torch, F = _torch()
    tw = {k: torch.from_numpy(v.copy()) for k, v in w.items()}

    def torch_fn(t):
        x = t["x"]

        def heads_of(name):
            y = (
                torch.matmul(x, tw[f"SelfAttention/{name}_weight"])
                + tw[f"SelfAttention/{name}_bias"]
            )
            return y.view(batch, seq, heads, head).transpose(1, 2)

        q, k, v = heads_of("query"), heads_of("key"), heads_of("value")
        probs = torch.softmax(torch.matmul(q, k.transpose(2, 3)) * (1 / math.sqrt(head)), -1)
        ctx = torch.matmul(probs, v).transpose(1, 2).reshape(batch, seq, hidden)
        attn = (
            torch.matmul(ctx, tw["SelfAttention/output_weight"]) + tw["SelfAttention/output_bias"]
        )
        h = F.layer_norm(attn + x, (hidden,), tw["AddNorm/gamma"], tw["AddNorm/beta"], BERT_EPS)
        ff = F.gelu(torch.matmul(h, tw["FFN/intermediate_weight"]) + tw["FFN/intermediate_bias"])
        ff = torch.matmul(ff, tw["FFN/output_weight"]) + tw["FFN/output_bias"]
        return F.layer_norm(
            ff + h, (hidden,), tw["AddNorm_1/gamma"], tw["AddNorm_1/beta"], BERT_EPS
        )

    tokens = batch * seq
    flops = (
        2.0 * tokens * (4 * hidden * hidden + 2 * hidden * 4 * hidden)
        + 4.0 * batch * heads * seq * seq * head
    )
    return Workload(
        key=f"W5-b{batch}",
        title=f"one BERT-base encoder layer (examples/bert.py), seq {seq}, batch {batch}",
        feeds={"x": feed((batch, seq, hidden), 5)},
        graph=lambda: g,
        numpy=numpy_fn,
        torch=torch_fn,
        onnx=lambda: onnx_graphs.bert_layer(batch, seq, hidden, heads, w),
        flops=flops,
        tol=2e-3,
        notes=["random non-zero biases and LayerNorm parameters, set before compiling"],
    )


# -- W6 ResNet basic block ----------------------------------------------------------------------------
def w6(batch: int, channels: int = 64, size: int = 56) -> Workload:
    from examples.resnet_block import build

    g = build(batch=batch, channels=channels, size=size)
    w = randomize_params(g, "")

    def numpy_fn(f):
        def conv_bn_relu(t, layer):
            y = np_conv3x3(t, w[f"{layer}/weight"])
            stats = (w[f"{layer}/{p}"] for p in ("gamma", "beta", "mean", "var"))
            return np.maximum(np_batch_norm(y, *stats), 0)

        y = conv_bn_relu(conv_bn_relu(f["x"], "Block/conv_bn_relu"), "Block/conv_bn_relu_1")
        return np.maximum(y + f["x"], 0)

    torch, F = _torch()
    tw = {k: torch.from_numpy(v.copy()) for k, v in w.items()}

    def torch_fn(t):
        def conv_bn_relu(x, layer):
            y = F.conv2d(x, tw[f"{layer}/weight"], padding=1)
            y = F.batch_norm(
                y,
                tw[f"{layer}/mean"],
                tw[f"{layer}/var"],
                tw[f"{layer}/gamma"],
                tw[f"{layer}/beta"],
                training=False,
                eps=1e-5,
            )
            return torch.relu(y)

        y = conv_bn_relu(conv_bn_relu(t["x"], "Block/conv_bn_relu"), "Block/conv_bn_relu_1")
        return torch.relu(y + t["x"])

    return Workload(
        key=f"W6-b{batch}",
        title=f"ResNet basic block (examples/resnet_block.py), 64 channels, 56x56, batch {batch}",
        feeds={"x": feed((batch, channels, size, size), 6)},
        graph=lambda: g,
        numpy=numpy_fn,
        torch=torch_fn,
        onnx=lambda: onnx_graphs.resnet_block(batch, channels, size, w),
        flops=2 * 2.0 * batch * size * size * channels * channels * 9,
        tol=2e-3,
    )


# -- W7 per-call overhead ------------------------------------------------------------------------------
CHAIN = [
    ("add", 0.5),
    ("mul", 0.9),
    ("tanh", None),
    ("add_x", None),
    ("sigmoid", None),
    ("sub", 0.25),
    ("relu", None),
    ("mul_x", None),
    ("abs", None),
    ("neg", None),
] * 5


def w7(n: int = 16) -> Workload:
    def graph():
        with mdsl.Graph("w7_chain") as g:
            x = h = g.input("x", (n,))
            for kind, value in CHAIN:
                h = _mdsl_step(h, x, kind, value)
            g.output(h, "y")
        return g

    numpy_steps = [_numpy_step(kind, value) for kind, value in CHAIN]
    torch_steps = [_torch_step(kind, value) for kind, value in CHAIN]

    def run_steps(steps, x):
        h = x
        for step in steps:
            h = step(h, x)
        return h

    return Workload(
        key="W7",
        title=f"a chain of {len(CHAIN)} small pointwise ops on [{n}] (per-call overhead)",
        feeds={"x": feed((n,), 7)},
        graph=graph,
        numpy=lambda f: run_steps(numpy_steps, f["x"]),
        torch=lambda t: run_steps(torch_steps, t["x"]),
        onnx=lambda: onnx_graphs.op_chain(n, CHAIN),
        tol=1e-5,
    )


def _mdsl_step(h, x, kind, value):
    binary = {"add": ops.add, "mul": ops.mul, "sub": ops.sub}
    if kind in binary:
        return binary[kind](h, value)
    if kind == "add_x":
        return ops.add(h, x)
    if kind == "mul_x":
        return ops.mul(h, x)
    return getattr(ops, kind)(h)


def _numpy_step(kind, value):
    """One chain step as a function (h, x) -> array, chosen once so the loop is bare."""
    c = np.float32(value) if value is not None else None
    zero = np.float32(0)
    return {
        "add": lambda h, x: h + c,
        "mul": lambda h, x: h * c,
        "sub": lambda h, x: h - c,
        "add_x": lambda h, x: h + x,
        "mul_x": lambda h, x: h * x,
        "tanh": lambda h, x: np.tanh(h),
        "sigmoid": lambda h, x: np_sigmoid(h),
        "relu": lambda h, x: np.maximum(h, zero),
        "abs": lambda h, x: np.abs(h),
        "neg": lambda h, x: np.negative(h),
    }[kind]


def _torch_step(kind, value):
    torch, _ = _torch()
    return {
        "add": lambda h, x: h + value,
        "mul": lambda h, x: h * value,
        "sub": lambda h, x: h - value,
        "add_x": lambda h, x: h + x,
        "mul_x": lambda h, x: h * x,
        "tanh": lambda h, x: torch.tanh(h),
        "sigmoid": lambda h, x: torch.sigmoid(h),
        "relu": lambda h, x: torch.relu(h),
        "abs": lambda h, x: torch.abs(h),
        "neg": lambda h, x: torch.neg(h),
    }[kind]


WORKLOADS: dict[str, Callable[[], Workload]] = {
    "W1-4M": lambda: w1(4 * 2**20),
    "W1-64K": lambda: w1(64 * 2**10),
    "W2": w2,
    "W3": w3,
    "W4": w4,
    "W5-b1": lambda: w5(1),
    "W5-b8": lambda: w5(8),
    "W6-b1": lambda: w6(1),
    "W6-b8": lambda: w6(8),
    "W7": w7,
}
