"""ONNX ops defined by a function body, expanded where mdsl has no rule of its own.

ONNX defines many ops (NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss, Attention,
RotaryEmbedding, the window functions, ...) as a *function*: a body of simpler ops,
fixed (`schema.function_body`) or built for the node's attributes and input types (a
context-dependent function). A node of such an op that mdsl cannot import directly is
replaced by its body, op by op, before import, the way ONNX Runtime runs ops it has no
kernel for. Bodies may use other function ops (SoftmaxCrossEntropyLoss uses
NegativeLogLikelihoodLoss): expansion repeats until none is left.

>>> import onnx.helper as oh
>>> node = oh.make_node("Softsign", ["x"], ["y"])
>>> [n.op_type for n in function_body(node, 22, {})]
['Constant', 'CastLike', 'Abs', 'Add', 'Div']
"""

from __future__ import annotations

from collections.abc import Callable

from mdsl.ir.errors import GraphError

ONNX_DOMAINS = ("", "ai.onnx")
_MAX_DEPTH = 8  # bodies nest a few levels at most; a cycle would be a broken schema


def function_schema(op_type: str, opset: int):
    """The ONNX schema of `op_type` at `opset` when it is defined by a function."""
    import onnx

    try:
        schema = onnx.defs.get_schema(op_type, opset, "")
    except onnx.defs.SchemaError:
        return None
    if schema.function_opset_versions or schema.context_dependent_function_opset_versions:
        return schema
    return None


def is_expandable(op_type: str, opset: int) -> bool:
    """Whether `op_type` at `opset` has a function body the importer can expand."""
    return function_schema(op_type, opset) is not None


def expand_function_ops(model, opset: int, keep: Callable[[str], bool]):
    """`model` (a ModelProto) with every ONNX node whose op `keep` refuses and that has
    a function body replaced by that body (main graph only; nested graphs keep theirs)."""
    import onnx

    for _ in range(_MAX_DEPTH):
        pending = [
            n
            for n in model.graph.node
            if (n.domain or "") in ONNX_DOMAINS
            and not keep(n.op_type)
            and is_expandable(n.op_type, opset)
        ]
        if not pending:
            return model
        expanded = onnx.ModelProto()
        expanded.CopyFrom(model)
        types = _value_types(expanded)
        nodes = []
        for k, node in enumerate(expanded.graph.node):
            if node in pending:
                layer = node.name or f"{node.op_type}_{k}"
                nodes.extend(function_body(node, opset, types, prefix=f"{layer}/"))
            else:
                nodes.append(node)
        del expanded.graph.node[:]
        expanded.graph.node.extend(nodes)
        model = expanded
    raise GraphError(f"function ops still left after {_MAX_DEPTH} rounds of expansion")


def function_body(node, opset: int, types: dict, prefix: str = "fn/") -> list:
    """The nodes of `node`'s function body with names made unique by `prefix` (the
    node's name and a '/': its body becomes a layer named after it), the function's
    inputs and outputs renamed to the node's, attribute references resolved."""
    schema = function_schema(node.op_type, opset)
    if schema is None:
        raise GraphError(f"{node.op_type} has no function body at opset {opset}")
    function = _function_proto(schema, node, opset, types)
    attrs = {a.name: a for a in node.attribute}
    for name, spec in schema.attributes.items():
        if name not in attrs and spec.default_value and spec.default_value.type:
            attrs[name] = spec.default_value
    names = {formal: actual for formal, actual in zip(function.input, node.input)}
    for formal in function.input[len(node.input) :]:
        names[formal] = ""
    names.update({f: a for f, a in zip(function.output, node.output) if a})

    def rename(name: str) -> str:
        return names.get(name, prefix + name if name else "")

    return [_renamed(inner, rename, attrs, prefix) for inner in function.node]


def _function_proto(schema, node, opset: int, types: dict):
    from onnx import FunctionProto

    function = FunctionProto()
    fixed = [v for v in schema.function_opset_versions if v <= opset]
    dependent = [v for v in schema.context_dependent_function_opset_versions if v <= opset]
    if dependent and (not fixed or max(dependent) >= max(fixed)):
        missing = [i for i in node.input if i and i not in types]
        if missing:
            raise GraphError(
                f"{node.op_type} {node.name!r}: its function body depends on the types of "
                f"its inputs, and {missing[0]!r} has none ONNX's shape inference can tell"
            )
        data = schema.get_context_dependent_function_with_opset_version(
            max(dependent),
            node.SerializeToString(),
            [types[i].SerializeToString() if i else b"" for i in node.input],
        )
    elif fixed:
        data = schema.get_function_with_opset_version(max(fixed))
    else:
        raise GraphError(f"{node.op_type} has no function body at opset {opset} or before")
    function.ParseFromString(data)
    return function


def _renamed(inner, rename, attrs: dict, prefix: str):
    from onnx import NodeProto

    out = NodeProto()
    out.CopyFrom(inner)
    out.name = prefix + (inner.name or inner.op_type)
    out.input[:] = [rename(i) for i in inner.input]
    out.output[:] = [rename(o) for o in inner.output]
    del out.attribute[:]
    for attr in inner.attribute:
        if attr.ref_attr_name:
            given = attrs.get(attr.ref_attr_name)
            if given is None:
                continue  # an optional attribute the node does not set
            resolved = type(given)()
            resolved.CopyFrom(given)
            resolved.name = attr.name
            out.attribute.append(resolved)
        else:
            copied = type(attr)()
            copied.CopyFrom(attr)
            for g in [copied.g] if copied.HasField("g") else list(copied.graphs):
                _rename_graph(g, rename)
            out.attribute.append(copied)
    return out


def _rename_graph(graph, rename) -> None:
    """Rename the outer-scope names a function's nested graph reads (its own names get
    the prefix too: consistent everywhere, so still unique)."""
    for vi in list(graph.input) + list(graph.output):
        vi.name = rename(vi.name)
    for init in graph.initializer:
        init.name = rename(init.name)
    for n in graph.node:
        n.input[:] = [rename(i) for i in n.input]
        n.output[:] = [rename(o) for o in n.output]
        for attr in n.attribute:
            for g in [attr.g] if attr.HasField("g") else list(attr.graphs):
                _rename_graph(g, rename)


def _value_types(model) -> dict:
    """name -> TypeProto of every value ONNX's shape inference can type."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # inference refuses broken models; the importer will say why
        inferred = model
    graph = inferred.graph
    types = {vi.name: vi.type for vi in [*graph.input, *graph.value_info, *graph.output]}
    for init in graph.initializer:
        if init.name not in types:
            types[init.name] = onnx.helper.make_tensor_type_proto(init.data_type, init.dims)
    return types
