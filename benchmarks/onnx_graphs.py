"""The benchmark models as ONNX graphs, written with `onnx.helper` (independent of mdsl's
own exporter), and ONNX Runtime sessions for them.

>>> b = OnnxBuilder()
>>> y = b.op("Relu", b.input("x", (4,)))
>>> session(b.model(y), threads=1).run(None, {"x": np.array([-1, 0, 1, 2], np.float32)})[0]
array([0., 0., 1., 2.], dtype=float32)
"""

from __future__ import annotations

import math

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

OPSET = 17  # LayerNormalization is in opset 17
IR_VERSION = 8


class OnnxBuilder:
    """Collects nodes, initializers and inputs; every op gets one fresh output name."""

    def __init__(self):
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self._count = 0

    def _fresh(self, stem: str) -> str:
        self._count += 1
        return f"{stem}_{self._count}"

    def input(self, name: str, shape) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape)))
        return name

    def const(self, value, dtype=np.float32) -> str:
        name = self._fresh("c")
        self.initializers.append(numpy_helper.from_array(np.asarray(value, dtype), name))
        return name

    def op(self, op_type: str, *inputs: str, **attrs) -> str:
        out = self._fresh(op_type.lower())
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], **attrs))
        return out

    def model(self, output: str) -> onnx.ModelProto:
        """The model computing `output`, which has the shape of the (first) input, as
        every benchmark model's does."""
        shape = self.inputs[0].type.tensor_type.shape
        out = helper.make_tensor_value_info(output, TensorProto.FLOAT, None)
        out.type.tensor_type.shape.CopyFrom(shape)
        graph = helper.make_graph(
            self.nodes,
            "bench",
            self.inputs,
            [out],
            initializer=self.initializers,
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
        model.ir_version = IR_VERSION
        onnx.checker.check_model(model)
        return model

    # -- composite layers ---------------------------------------------------------------------------
    def gelu(self, x: str) -> str:
        """Exact GELU in the Erf form (ORT fuses it into its Gelu kernel)."""
        erf = self.op("Erf", self.op("Div", x, self.const(math.sqrt(2.0))))
        return self.op(
            "Mul", self.op("Mul", x, self.op("Add", erf, self.const(1.0))), self.const(0.5)
        )

    def linear(self, x: str, weight: np.ndarray, bias: np.ndarray) -> str:
        return self.op("Add", self.op("MatMul", x, self.const(weight)), self.const(bias))

    def layer_norm(self, x: str, gamma, beta, eps: float) -> str:
        return self.op(
            "LayerNormalization", x, self.const(gamma), self.const(beta), axis=-1, epsilon=eps
        )


def session(model: onnx.ModelProto, threads: int) -> ort.InferenceSession:
    """A CPU session with all graph optimizations and `threads` intra-op threads."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )


# -- the workloads ------------------------------------------------------------------------------------
def pointwise_chain(n: int, a: float, b: float) -> onnx.ModelProto:
    g = OnnxBuilder()
    x = g.input("x", (n,))
    v = g.op("Add", g.op("Mul", x, g.const(a)), g.const(b))
    y = g.op("Add", g.op("Mul", g.gelu(v), g.op("Sigmoid", x)), x)
    return g.model(y)


def layer_norm(shape, gamma, beta, eps: float) -> onnx.ModelProto:
    g = OnnxBuilder()
    return g.model(g.layer_norm(g.input("x", shape), gamma, beta, eps))


def softmax(shape) -> onnx.ModelProto:
    g = OnnxBuilder()
    return g.model(g.op("Softmax", g.input("x", shape), axis=-1))


def mlp(shape, w1, b1, w2, b2) -> onnx.ModelProto:
    g = OnnxBuilder()
    h = g.gelu(g.linear(g.input("x", shape), w1, b1))
    return g.model(g.linear(h, w2, b2))


def bert_layer(batch: int, seq: int, hidden: int, heads: int, w: dict) -> onnx.ModelProto:
    """One post-LN BERT encoder layer; `w` maps examples/bert.py parameter names (relative
    to `EncoderBlock/`) to arrays."""
    g = OnnxBuilder()
    x = g.input("x", (batch, seq, hidden))
    split = g.const([batch, seq, heads, hidden // heads], np.int64)

    def heads_of(name: str, perm) -> str:
        t = g.linear(x, w[f"SelfAttention/{name}_weight"], w[f"SelfAttention/{name}_bias"])
        return g.op("Transpose", g.op("Reshape", t, split), perm=perm)

    q = heads_of("query", (0, 2, 1, 3))
    k_t = heads_of("key", (0, 2, 3, 1))
    v = heads_of("value", (0, 2, 1, 3))
    scores = g.op("Mul", g.op("MatMul", q, k_t), g.const(1.0 / math.sqrt(hidden // heads)))
    context = g.op("MatMul", g.op("Softmax", scores, axis=-1), v)
    merged = g.op(
        "Reshape",
        g.op("Transpose", context, perm=(0, 2, 1, 3)),
        g.const([batch, seq, hidden], np.int64),
    )
    attn = g.linear(merged, w["SelfAttention/output_weight"], w["SelfAttention/output_bias"])
    h = g.layer_norm(g.op("Add", attn, x), w["AddNorm/gamma"], w["AddNorm/beta"], 1e-12)
    f = g.gelu(g.linear(h, w["FFN/intermediate_weight"], w["FFN/intermediate_bias"]))
    f = g.linear(f, w["FFN/output_weight"], w["FFN/output_bias"])
    return g.model(
        g.layer_norm(g.op("Add", f, h), w["AddNorm_1/gamma"], w["AddNorm_1/beta"], 1e-12)
    )


def resnet_block(batch: int, channels: int, size: int, w: dict) -> onnx.ModelProto:
    """conv-BN-ReLU, conv-BN-ReLU, residual add, ReLU (examples/resnet_block.py)."""
    g = OnnxBuilder()
    x = g.input("x", (batch, channels, size, size))

    def conv_bn_relu(t: str, layer: str) -> str:
        conv = g.op("Conv", t, g.const(w[f"{layer}/weight"]), pads=(1, 1, 1, 1))
        stats = [g.const(w[f"{layer}/{p}"]) for p in ("gamma", "beta", "mean", "var")]
        return g.op("Relu", g.op("BatchNormalization", conv, *stats, epsilon=1e-5))

    y = conv_bn_relu(conv_bn_relu(x, "Block/conv_bn_relu"), "Block/conv_bn_relu_1")
    return g.model(g.op("Relu", g.op("Add", y, x)))


_CHAIN_OPS = {
    "add": "Add",
    "mul": "Mul",
    "sub": "Sub",
    "add_x": "Add",
    "mul_x": "Mul",
    "tanh": "Tanh",
    "sigmoid": "Sigmoid",
    "relu": "Relu",
    "abs": "Abs",
    "neg": "Neg",
}


def op_chain(n: int, chain) -> onnx.ModelProto:
    """W7: `chain` is a list of (kind, constant) steps applied to a running value."""
    g = OnnxBuilder()
    x = h = g.input("x", (n,))
    for kind, value in chain:
        if kind in ("add", "mul", "sub"):
            h = g.op(_CHAIN_OPS[kind], h, g.const(value))
        elif kind in ("add_x", "mul_x"):
            h = g.op(_CHAIN_OPS[kind], h, x)
        else:
            h = g.op(_CHAIN_OPS[kind], h)
    return g.model(h)
