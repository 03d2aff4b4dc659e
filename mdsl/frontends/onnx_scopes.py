"""Layer paths for ONNX graphs whose node names carry no scope.

Exporters that keep module scopes in node names (`/encoder/layer.0/attention/MatMul`) give
layers directly. PyTorch's newer exporter (`dynamo=True`) names nodes `node_linear_3` but
records each node's module scopes in its metadata (`scope_metadata_layers`). Others name nodes `n14` or nothing (Caffe2's ResNet-50 in ONNX's model
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

import ast
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


# torch.onnx.export(dynamo=True) records each node's module scopes here: a list of dotted
# module paths, outermost first, starting with the root module ('') and ending with the
# node's own name: ['', 'encoder', 'encoder.layer.0', 'encoder.layer.0.attention', 'linear']
TORCH_NAME_SCOPES = "pkg.torch.onnx.name_scopes"


def scope_metadata_layers(graph_proto) -> InferredLayers | None:
    """Layers from the torch exporter's name-scope metadata (None: no node has it). A module
    path `encoder.layer.0.attention` becomes the layer `encoder/layer.0/attention` (the
    levels TorchScript-exported node names have); a weight goes to the module it belongs
    to (`encoder.layer.0.attention.query.weight`), else the top level.

    >>> from onnx import helper
    >>> node = helper.make_node("Relu", ["x"], ["y"], name="node_relu")
    >>> helper.set_metadata_props(node, {TORCH_NAME_SCOPES: "['', 'block', 'block.act', 'relu']"})
    >>> g = helper.make_graph([node], "g", [], [])
    >>> scope_metadata_layers(g).nodes
    ['block/act']
    """
    scopes = [_metadata(node).get(TORCH_NAME_SCOPES) for node in graph_proto.node]
    if not any(scopes):
        return None
    found = InferredLayers()
    modules: dict[str, str] = {}  # dotted module path -> layer path
    layer_of_value: dict[str, str] = {}
    for node, text in zip(graph_proto.node, scopes):
        paths = [p for p in _literal_list(text)[:-1] if p]  # the node's own name is last
        if text:
            layer = "/".join(_levels(paths))
        else:  # a node the exporter's optimizer made: where its inputs are
            layer = _join([layer_of_value[i] for i in node.input if i in layer_of_value])
        found.nodes.append(layer)
        layer_of_value.update(dict.fromkeys(node.output, layer))
        if paths:
            modules.setdefault(paths[-1], layer)
    for init in graph_proto.initializer:
        owner = init.name.rpartition(".")[0]
        if owner in modules:
            found.weights[init.name] = modules[owner]
    return found


def _metadata(node) -> dict[str, str]:
    return {p.key: p.value for p in node.metadata_props}


def _literal_list(text: str | None) -> list[str]:
    """`"['', 'block', 'block.lin']"` -> its strings; [] for anything else."""
    if not text:
        return []
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return []
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        return []
    return list(value)


def _levels(paths: list[str]) -> list[str]:
    """Nested module paths -> one level each: each path minus its parent's prefix."""
    levels, parent = [], ""
    for path in paths:
        level = path[len(parent) + 1 :] if parent and path.startswith(parent + ".") else path
        levels.append(_printable_level(level))
        parent = path
    return levels


def _printable_level(level: str) -> str:
    return re.sub(r"[^\w.\-]", "_", level)[:64] or "_"


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
