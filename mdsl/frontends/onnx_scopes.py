"""Layer paths for ONNX graphs whose node names carry no scope.

Exporters that keep module scopes in node names (`/encoder/layer.0/attention/MatMul`) give
layers directly. Others name nodes `n14` or nothing (Caffe2's ResNet-50 in ONNX's model
zoo), but their weights still say where a node belongs: `gpu_0/res2_0_branch2a_w_0` is the
weight of layer `res2/0/branch2a` (stage res2, block 0, branch 2a). `inferred_layers(graph_proto)` gives such nodes, and
the weights, a layer: the one read from the weights a node takes (their role suffix such as `_w_0`,
`_bn_s_0` or `.weight` dropped, a device scope such as `gpu_0/` too; a number part is a
level of its own), else the layer their input comes from; a node joining several layers (a
residual Add) goes into the block holding the deepest of them.

>>> from onnx import helper, TensorProto, numpy_helper
>>> import numpy as np
>>> w = lambda n: numpy_helper.from_array(np.ones((1, 1, 1, 1), np.float32), n)
>>> nodes = [helper.make_node("Conv", ["x", "gpu_0/res2_0_branch2a_w_0"], ["a"], name="n0"),
...          helper.make_node("Relu", ["a"], ["b"], name="n1"),
...          helper.make_node("Conv", ["x", "gpu_0/res2_0_branch1_w_0"], ["c"], name="n2"),
...          helper.make_node("Add", ["b", "c"], ["y"], name="n3")]
>>> vi = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 1, 1, 1])
>>> g = helper.make_graph(nodes, "g", [vi("x")], [vi("y")],
...     [w("gpu_0/res2_0_branch2a_w_0"), w("gpu_0/res2_0_branch1_w_0")])
>>> layers = inferred_layers(g)
>>> layers.nodes
['res2/0/branch2a', 'res2/0/branch2a', 'res2/0/branch1', 'res2/0']
>>> layers.weights["gpu_0/res2_0_branch1_w_0"]
'res2/0/branch1'

"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# trailing name parts that say what a weight is for, not where it is
ROLE_PARTS = frozenset(
    [
        "w",
        "b",
        "s",
        "bn",
        "weight",
        "bias",
        "scale",
        "gamma",
        "beta",
        "rm",
        "riv",
        "mean",
        "var",
        "running_mean",
        "running_var",
        "kernel",
        "moving_mean",
        "moving_variance",
    ]
)
_DEVICE_SCOPE = re.compile(r"^(gpu|cpu|cuda|npu|device)_?\d*$", re.IGNORECASE)
_NUMBER = re.compile(r"^\d+$")


def has_scoped_names(graph_proto) -> bool:
    """Whether some node name carries a scope (`/block/MatMul`): then names give layers."""
    return any("/" in node.name for node in graph_proto.node)


@dataclass
class InferredLayers:
    """Layer paths read from weight names: per node (in the graph's order; "" when there is
    none to tell) and per weight."""

    nodes: list[str] = field(default_factory=list)
    weights: dict[str, str] = field(default_factory=dict)


def inferred_layers(graph_proto) -> InferredLayers:
    """The layer of each node (and weight) of a graph whose node names carry no scope, read
    from the weights' names; a node or weight with no layer to tell is left out."""
    params = {i.name for i in graph_proto.initializer}
    for node in graph_proto.node:
        if node.op_type in ("Constant", "ConstantOfShape"):
            params.update(node.output)
    found = InferredLayers()
    layer_of_value: dict[str, str] = {}
    for node in graph_proto.node:
        if node.op_type in ("Constant", "ConstantOfShape"):
            found.nodes.append("")  # weights made at run time: in a layer, they would
            continue  # stretch its cluster up to the graph's first rank
        weights = [w for w in (weight_layer(i) for i in node.input if i in params) if w]
        if weights:
            layer = _shared(weights)
        else:
            layer = _join([layer_of_value[i] for i in node.input if i in layer_of_value])
        found.nodes.append(layer)
        for out in node.output:
            layer_of_value[out] = layer
    found.weights = {name: layer for name in params if (layer := weight_layer(name))}
    return found


def weight_layer(name: str) -> str:
    """The layer path a weight's name points at (a number part is a level of its own); ""
    unless the name ends with what the weight is for (`_w_0`, `.bias`, ...): `scales` or
    `shape` name no layer.

    >>> weight_layer("gpu_0/res2_0_branch2a_bn_s_0"), weight_layer("gpu_0/conv1_w_0")
    ('res2/0/branch2a', 'conv1')
    >>> weight_layer("layers.1.fc.bias"), weight_layer("w"), weight_layer("roi_scales")
    ('layers/1/fc', '', '')
    """
    scopes = [s for s in name.split("/") if s and not _DEVICE_SCOPE.match(s)]
    parts = [p for p in re.split(r"[._]", "_".join(scopes)) if p]
    while parts and _NUMBER.match(parts[-1]):
        parts.pop()
    if not parts or parts[-1].lower() not in ROLE_PARTS:
        return ""
    while parts and (parts[-1].lower() in ROLE_PARTS or _NUMBER.match(parts[-1])):
        parts.pop()
    levels: list[list[str]] = [[]]
    for part in parts:
        if _NUMBER.match(part):
            levels += [[part], []]
        else:
            levels[-1].append(part)
    return "/".join("_".join(level) for level in levels if level)


def _shared(layers: list[str]) -> str:
    """The leading levels every one of `layers` shares."""
    split = [layer.split("/") for layer in layers]
    shared = []
    for parts in zip(*split):
        if len(set(parts)) != 1:
            break
        shared.append(parts[0])
    return "/".join(shared)


def _join(layers: list[str]) -> str:
    """The layer of a node reading values of `layers`: theirs when they agree, else the
    block holding the deepest (a residual Add belongs to its branch's block)."""
    distinct = sorted(set(layers), key=lambda layer: layer.count("/"))
    if len(distinct) <= 1:
        return distinct[0] if distinct else ""
    deepest = distinct[-1]
    return deepest.rpartition("/")[0] or _shared(distinct)
