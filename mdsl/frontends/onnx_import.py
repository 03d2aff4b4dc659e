"""ONNX import: a ModelProto (file, bytes or object) becomes an mdsl Graph.

What the importer guarantees:

- Opsets 9 to the newest the installed `onnx` knows. Initializers and Constant nodes
  become `Const` nodes; `dim_param`s become symbolic dims (an unnamed unknown dim gets a
  fresh symbol); initializers listed as graph inputs (old IR versions) are constants.
- Node names keep their scope structure: `/encoder/layer.0/attention/MatMul` is node
  `MatMul` in layer `encoder/layer.0/attention`.
- Inputs ONNX passes as tensors but mdsl holds as attributes (Reshape's shape, Slice's
  starts, ...) must be compile-time values: initializers, Constant nodes, or anything
  computed from them and from the static or symbolic shapes of tensors (the
  Shape -> Gather -> Concat chains exporters write). Such values are computed at import
  time (with ONNX's reference implementation, or symbolically when they involve
  symbolic dims) and the nodes computing them only reach the graph if a run-time tensor
  needs them.
- Ops mdsl lacks are reported together: one `GraphError` listing every unsupported op
  type with its count (and any unsupported dtype or opset), never a partial graph.
- A malformed file gets an `MdslError`, never a crash.

Names: ONNX value and node names may contain ':'; mdsl names may not, so ':' becomes
'_' (`input:0` is fed as `input_0`); see `mdsl_name`.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import numpy as np

from mdsl.frontends import onnx_rules
from mdsl.frontends.onnx_budget import ImportBudget
from mdsl.frontends.onnx_functions import expand_function_ops
from mdsl.frontends.onnx_ops import (
    ANY,
    MAPPINGS,
    MDSL_DOMAIN,
    OLDEST_OPSET,
    ONNX_DOMAINS,
    OpMapping,
    dtype_from_onnx,
    onnx_type_name,
)
from mdsl.frontends.onnx_scopes import (
    has_scoped_names,
    inferred_layers,
    scope_metadata_layers,
)
from mdsl.frontends.onnx_sequences import (
    STRUCTURE_OPS,
    element_name,
    innermost_tensor_type,
    structured_input,
)
from mdsl.frontends.onnx_values import (
    EVALUATION_SIZE_CAP,
    array_from_tensor_proto,
    attr_from_array,
    attr_value,
    cast_value,
    evaluate_node,
    has_symbolic_rule,
    shape_value,
)
from mdsl.ir import context
from mdsl.ir.dim import Dim
from mdsl.ir.dtype import DType
from mdsl.ir.errors import GraphError, MdslError, ShapeError
from mdsl.ir.graph import CONST, Graph, Layer, Tensor
from mdsl.ir.tensor_type import TensorType
from mdsl.log import progress
from mdsl.ops.apply import apply_op
from mdsl.ops.registry import RANDOM_OPS, get_op, has_op
from mdsl.ops.runtime_sizes import MAX_VALUE_DIMS


def load(
    model,
    *,
    name: str | None = None,
    custom_ops: dict | None = None,
    structure: dict | None = None,
) -> Graph:
    """Import an ONNX model (a path, serialized bytes or a `onnx.ModelProto`) as a Graph.

    `custom_ops` maps a custom domain's op types to mdsl ops declared with
    `@mdsl.op_proto` (the builder, or its op type name):
    `load(path, custom_ops={"com.acme": {"FancyOp": fancy_op}})`; a node of such an op
    passes its inputs in order and its attributes as attrs.

    `structure` gives the graph inputs that are sequences or optionals their structure,
    which mdsl fixes at import (`mdsl.frontends.onnx_sequences`): a sequence's length
    (or its elements' shapes), None for an optional that is absent.

    >>> import onnx, onnx.helper as oh, mdsl
    >>> node = oh.make_node("Relu", ["x"], ["y"], name="/block/act/Relu")
    >>> graph = oh.make_graph([node], "tiny",
    ...     [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 4])],
    ...     [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["N", 4])])
    >>> g = mdsl.frontends.onnx.load(oh.make_model(graph))
    >>> [n.name for n in g.nodes], g.inputs["x"].shape
    (['x', 'block/act/Relu', 'Output_y'], (Dim('N'), 4))
    """
    proto, label = read_model(model)
    return import_model(proto, name=name, label=label, custom_ops=custom_ops, structure=structure)


def _unreadable(label: str, error: Exception) -> str:
    """Why protobuf refused a model, in words (its depth limit, about 32 nested subgraphs,
    is the one a deep but well-formed model meets)."""
    reason = f"{type(error).__name__}: {error}"
    if "MaxDepth" in str(error) or "recursion" in str(error).lower():
        return (
            f"{label}: its messages nest deeper than the ONNX parser allows (subgraphs of "
            f"If/Loop/Scan nest at most about 32 levels) ({reason})"
        )
    return f"{label}: not a valid ONNX model ({reason})"


def read_model(model):
    """(ModelProto, label for messages) from a path, bytes or ModelProto."""
    import onnx
    from google.protobuf.message import DecodeError

    if isinstance(model, onnx.ModelProto):
        return model, model.graph.name or "model"
    if isinstance(model, (bytes, bytearray)):
        try:
            return onnx.load_model_from_string(bytes(model)), "model"
        except (DecodeError, ValueError, RuntimeError) as e:
            raise GraphError(_unreadable("model", e)) from None
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if not os.path.isfile(path):
            raise GraphError(f"no ONNX file at {path!r}")
        try:
            proto = onnx.load(path, load_external_data=False)
        except (DecodeError, ValueError, RuntimeError, OSError) as e:
            raise GraphError(_unreadable(path, e)) from None
        load_external_data(proto, path)
        return proto, os.path.basename(path)
    raise GraphError(
        f"load() takes a path, bytes or an onnx.ModelProto, got {type(model).__name__}"
    )


def load_external_data(proto, path: str) -> None:
    """Read the tensors `proto` keeps in external files, only from the directory of the
    model at `path`: a location resolving outside it is a GraphError."""
    from onnx import external_data_helper

    base = os.path.realpath(os.path.dirname(os.path.abspath(path)))
    external = [
        t
        for t in external_data_helper._get_all_tensors(proto)
        if external_data_helper.uses_external_data(t)
    ]
    for tensor in external:
        info = {e.key: e.value for e in tensor.external_data}
        location = info.get("location", "")
        target = os.path.realpath(os.path.join(base, location))
        if not location or os.path.isabs(location) or os.path.commonpath([base, target]) != base:
            raise GraphError(
                f"{path}: tensor {tensor.name!r} keeps its data at {location!r}, outside the "
                "model's directory; external data is only read from next to the model"
            )
        if not os.path.isfile(target):
            raise GraphError(
                f"{path}: tensor {tensor.name!r}: external data {location!r} is missing"
            )
    if external:
        try:
            external_data_helper.load_external_data_for_model(proto, base)
        except (ValueError, OSError) as e:
            raise GraphError(
                f"{path}: unreadable external data ({type(e).__name__}: {e})"
            ) from None


def _infer_layers(graph_proto, nodes: list[OnnxNode]) -> dict[str, str]:
    """Give `nodes` layers from the torch exporter's scope metadata, else from weight names
    when no node name has a scope; returns the weights' layers (value name -> layer path)."""
    layers = scope_metadata_layers(graph_proto)
    if layers is None:
        if has_scoped_names(graph_proto):
            return {}
        layers = inferred_layers(graph_proto)
    for node, layer in zip(nodes, layers.nodes):
        node.layer = layer  # "" when nothing tells: the top level
    return layers.weights


def import_model(
    proto,
    *,
    name: str | None = None,
    label: str = "model",
    custom_ops: dict | None = None,
    structure: dict | None = None,
) -> Graph:
    """Import a ModelProto; every failure is an MdslError (see `load`)."""
    try:
        custom = custom_op_table(custom_ops)
        proto = _inline_functions(proto)
        proto = upgrade_old_opset(proto, label)
        opset = _check_opset(proto)
        proto = expand_function_ops(proto, opset[""], keep=has_import_rule)
        nodes = [OnnxNode.of(n, opset) for n in proto.graph.node]
        _preflight(proto, nodes, opset, custom)
        weight_layers = _infer_layers(proto.graph, nodes)
        importer = _Importer(proto, nodes, label, opsets=opset, custom_ops=custom)
        importer.weight_layers = weight_layers
        importer.structure = dict(structure or {})
        return importer.build(name or proto.graph.name or "onnx_model")
    except MdslError:
        raise
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError) as e:
        raise GraphError(f"{label}: malformed ONNX model ({type(e).__name__}: {e})") from e


def mdsl_name(onnx_name: str) -> str:
    """The mdsl name of an ONNX input/output/value name (':' is reserved in mdsl)."""
    return onnx_name.replace(":", "_")


# -- reading the model --------------------------------------------------------------------
@dataclass
class OnnxNode:
    """One ONNX node with decoded attributes and the opset of its domain."""

    proto: object
    op_type: str
    domain: str
    name: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict
    opset: int
    # inferred from weight names when no node name carries a scope ("" for the top level)
    layer: str | None = None

    @staticmethod
    def of(proto, opsets: dict[str, int]) -> OnnxNode:
        from onnx import helper

        domain = proto.domain or ""
        attrs = {a.name: helper.get_attribute_value(a) for a in proto.attribute}
        return OnnxNode(
            proto,
            proto.op_type,
            domain,
            proto.name,
            list(proto.input),
            list(proto.output),
            attrs,
            opsets.get("" if domain in ONNX_DOMAINS else domain, 1),
        )

    @property
    def is_onnx(self) -> bool:
        return self.domain in ONNX_DOMAINS

    @property
    def has_subgraph(self) -> bool:
        return bool(self.subgraphs())

    def subgraphs(self) -> list:
        """The GraphProtos of this node's attributes (If branches, Loop body, ...)."""
        found = []
        for value in self.attrs.values():
            if type(value).__name__ == "GraphProto":
                found.append(value)
            elif isinstance(value, (list, tuple)):
                found.extend(v for v in value if type(v).__name__ == "GraphProto")
        return found

    def describe(self) -> str:
        return f"{self.name or '(unnamed)'} ({self.op_type})"


def _inline_functions(proto):
    if not proto.functions:
        return proto
    from onnx import inliner

    try:
        return inliner.inline_local_functions(proto)
    except Exception as e:  # the C++ inliner reports malformed functions in its own types
        raise GraphError(f"cannot inline the model's local functions: {e}") from None


def _check_opset(proto) -> dict[str, int]:
    import onnx

    opsets = {
        ("" if o.domain in ONNX_DOMAINS else o.domain): int(o.version) for o in proto.opset_import
    }
    if "" not in opsets:
        if not proto.opset_import:
            raise GraphError("the model declares no opset_import; is it an ONNX model?")
        opsets[""] = OLDEST_OPSET
    newest = onnx.defs.onnx_opset_version()
    if not OLDEST_OPSET <= opsets[""] <= newest:
        raise GraphError(
            f"ONNX opset {opsets['']} is outside what mdsl imports ({OLDEST_OPSET} to "
            f"{newest}); this onnx package is too old for it"
        )
    return opsets


def has_import_rule(op_type: str) -> bool:
    """Whether the importer has a rule or a table mapping for ONNX op `op_type`."""
    return op_type in onnx_rules.RULES or op_type in MAPPINGS


def is_supported(node: OnnxNode, custom: dict | None = None) -> bool:
    """Whether the importer has a rule, a mapping or a user op for this node's op."""
    if node.op_type == "Constant" and node.is_onnx:
        return True
    if node.domain == MDSL_DOMAIN:
        return has_op(node.op_type)
    if custom and node.op_type in custom.get(node.domain, {}):
        return True
    if not node.is_onnx:
        return False
    return has_import_rule(node.op_type)


def custom_op_table(custom_ops: dict | None) -> dict[str, dict[str, str]]:
    """`custom_ops` as domain -> ONNX op type -> mdsl op type (GraphError for ops that
    are not registered)."""
    table: dict[str, dict[str, str]] = {}
    if custom_ops is None:
        return table
    if not isinstance(custom_ops, dict):
        raise GraphError(f"custom_ops must map domains to {{op: mdsl op}}, got {custom_ops!r:.60}")
    for domain, ops in custom_ops.items():
        if not isinstance(domain, str) or not isinstance(ops, dict):
            raise GraphError(f"custom_ops[{domain!r}] must map op types to mdsl ops")
        for onnx_op, op in ops.items():
            op_type = op if isinstance(op, str) else getattr(op, "op_type", None)
            if not isinstance(op_type, str) or not has_op(op_type):
                raise GraphError(
                    f"custom_ops[{domain!r}][{onnx_op!r}] = {op!r:.60} is not an mdsl op; "
                    "declare it with @mdsl.op_proto and pass the builder"
                )
            table.setdefault(domain, {})[str(onnx_op)] = op_type
    return table


def upgrade_old_opset(proto, label: str):
    """A model older than opset 9, converted with onnx.version_converter (with a
    warning); GraphError when the converter cannot."""
    import warnings

    from onnx import version_converter

    version = next((int(o.version) for o in proto.opset_import if o.domain in ONNX_DOMAINS), None)
    if version is None or version >= OLDEST_OPSET:
        return proto
    try:
        upgraded = version_converter.convert_version(proto, OLDEST_OPSET)
    except Exception as e:  # the converter reports in its own exception types
        raise GraphError(
            f"{label}: ONNX opset {version} is older than {OLDEST_OPSET} and "
            f"onnx.version_converter cannot upgrade it ({_short(str(e))})"
        ) from None
    warnings.warn(
        f"{label}: ONNX opset {version} upgraded to opset {OLDEST_OPSET} with "
        "onnx.version_converter before import",
        UserWarning,
        stacklevel=3,
    )
    return upgraded


_NAMED_NODES = 3  # an unsupported-op error names this many nodes of each op type


def _preflight(proto, nodes: list[OnnxNode], opsets, custom: dict) -> None:
    """One GraphError naming every unsupported op type (with counts and the first few
    nodes) and dtype, in the graph and in its subgraphs (If branches, Loop bodies)."""
    unsupported: dict[str, list[str]] = {}
    known = {i.name for i in proto.graph.initializer}
    _collect_unsupported(nodes, known, opsets, custom, unsupported)
    problems = []
    if unsupported:
        problems.append("unsupported op types: " + "; ".join(
            f"{op} ({len(names)}: {_first_names(names)})"
            for op, names in sorted(unsupported.items())
        ))  # fmt: skip
    bad_types = _unsupported_value_types(proto)
    if bad_types:
        problems.append(f"unsupported types: {', '.join(bad_types)}")
    if problems:
        how = (
            ". To add an op, declare it with @mdsl.op_proto (and register_op_impl for its "
            "numpy reference), then load(path, custom_ops={domain: {op_type: builder}})"
            if unsupported
            else ""
        )
        raise GraphError("cannot import the model: " + "; ".join(problems) + how)


def _first_names(names: list[str]) -> str:
    shown = ", ".join(names[:_NAMED_NODES])
    return shown + (", ..." if len(names) > _NAMED_NODES else "")


def _collect_unsupported(
    nodes: list[OnnxNode], compile_time: set, opsets, custom: dict, found: dict
) -> None:
    for node in nodes:
        if is_compile_time(node, compile_time):
            compile_time.update(o for o in node.outputs if o)
        if not is_supported(node, custom) and not (
            node.is_onnx and node.op_type not in RANDOM_OPS and _all_known(node, compile_time)
        ):
            op = node.op_type if node.is_onnx else f"{node.domain}.{node.op_type}"
            shown = repr(node.name) if node.name else f"unnamed -> {node.outputs[0]!r}"
            found.setdefault(op, []).append(shown)
        for body in node.subgraphs():
            inner = [OnnxNode.of(n, opsets) for n in body.node]
            known = compile_time | {i.name for i in body.initializer}
            _collect_unsupported(inner, known, opsets, custom, found)


def is_compile_time(node: OnnxNode, known: set[str]) -> bool:
    """Whether `node`'s outputs can be computed at import time given the `known` values."""
    if node.op_type in ("Constant", "Shape", "Size") and node.is_onnx:
        return True
    if node.op_type in STRUCTURE_OPS:
        return False
    if node.op_type == "CastLike" and node.is_onnx:  # only the type of input 1 matters
        return node.inputs[0] in known
    return (
        node.is_onnx
        and node.op_type not in RANDOM_OPS
        and not node.has_subgraph
        and _all_known(node, known)
    )


def _all_known(node: OnnxNode, known: set[str]) -> bool:
    present = [i for i in node.inputs if i]
    return bool(present) and all(i in known for i in present)


def _unsupported_value_types(proto) -> list[str]:
    found = []
    inits = {i.name for i in proto.graph.initializer}
    for vi in list(proto.graph.input) + list(proto.graph.output):
        if vi.name in inits:
            continue
        tt = innermost_tensor_type(vi.type)
        if tt is None:
            found.append(f"{vi.name}: {vi.type.WhichOneof('value') or 'no type'}")
        elif dtype_from_onnx(tt.elem_type) is None:
            found.append(f"{vi.name}: {onnx_type_name(tt.elem_type)}")
    for init in proto.graph.initializer:
        if dtype_from_onnx(init.data_type) is None:
            found.append(f"initializer {init.name}: {onnx_type_name(init.data_type)}")
    return found


# -- building -------------------------------------------------------------------------------
@dataclass
class _Value:
    """What the importer knows of one ONNX value."""

    tensor: Tensor | None = None
    const: np.ndarray | None = None  # a compile-time value (object dtype: holds Dims)
    producer: OnnxNode | None = None  # computes it at compile time, imported on demand
    constant_node: OnnxNode | None = None  # the Constant node, for its Const's name
    evaluated: bool = False
    sequence: list[Tensor] | None = None  # a sequence's tensors (mdsl.frontends.onnx_sequences)
    absent: bool = False  # an optional holding nothing


@dataclass
class _Importer:
    proto: object
    nodes: list[OnnxNode]
    label: str
    values: dict[str, _Value] = field(default_factory=dict)
    used: set[str] = field(default_factory=set)
    graph: Graph | None = None
    opsets: dict = field(default_factory=dict)
    _imported: dict[int, OnnxNode] = field(default_factory=dict)  # holds them: ids stay unique
    custom_ops: dict = field(default_factory=dict)  # domain -> ONNX op -> mdsl op type
    _symbols: dict[str, Dim] = field(default_factory=dict)
    _scope_base: tuple[str, ...] = ()  # the scope a subgraph is built in
    _producers: dict[str, OnnxNode] = field(default_factory=dict)  # run-time value -> node
    budget: ImportBudget = field(default_factory=ImportBudget)  # import-time evaluation
    weight_layers: dict[str, str] = field(default_factory=dict)  # see onnx_scopes
    structure: dict = field(default_factory=dict)  # sequence/optional inputs (see load)

    def __post_init__(self):
        self.used = _used_names(self.proto.graph)

    def build(self, name: str) -> Graph:
        graph_proto = self.proto.graph
        with Graph(name) as g:
            self.graph = g
            self._declare_inputs(graph_proto)
            for node in self._nodes_with_progress(name):
                self._visit(node)
            for out in graph_proto.output:
                self._declare_output(g, out.name)
        for node in _all_nodes(g):
            node.source = self.label  # errors after import point at the model file
        return g

    def _nodes_with_progress(self, name: str):
        if self._scope_base:  # a subgraph's nodes: the model's own bar covers them
            return self.nodes
        return progress(self.nodes, f"import {name}", total=len(self.nodes), delay=1.0)

    def _declare_inputs(self, graph_proto) -> None:
        for init in graph_proto.initializer:
            self.values[init.name] = _Value(const=array_from_tensor_proto(init))
        for vi in graph_proto.input:
            if vi.name in self.values:
                continue  # an initializer listed as an input (IR < 4): a constant
            if vi.type.WhichOneof("value") != "tensor_type":
                self.values[vi.name] = structured_input(self, vi)
                continue
            tt = vi.type.tensor_type
            shape = self.input_shape(vi.name, tt)
            dtype = dtype_from_onnx(tt.elem_type)
            tensor = self.graph.input(mdsl_name(vi.name), shape, dtype)
            self.values[vi.name] = _Value(tensor=tensor)

    def _declare_output(self, g: Graph, name: str) -> None:
        """A graph output: a tensor, each tensor of a sequence (`name.0`, ...: see
        `onnx_sequences`), or nothing for an optional that is absent."""
        v = self._entry(name)
        if v.absent:
            return
        if v.sequence is not None:
            for k, t in enumerate(v.sequence):
                g.output(t, element_name(mdsl_name(name), k))
            return
        g.output(self.tensor(name), mdsl_name(name))

    def input_shape(
        self, name: str, tt, symbol_suffix: str = "", shared: frozenset = frozenset()
    ) -> tuple:
        """The shape a graph input's tensor type declares; `symbol_suffix` makes its
        symbols its own (a sequence's elements: each has sizes of its own), but for the
        dim params in `shared`."""
        if not tt.HasField("shape"):
            raise GraphError(f"input {name!r} has no shape (not even a rank); mdsl needs one")
        dims = []
        for axis, d in enumerate(tt.shape.dim):
            if d.HasField("dim_value"):
                dims.append(int(d.dim_value))
                continue
            param = d.dim_param if d.HasField("dim_param") and d.dim_param else f"{name}_{axis}"
            dims.append(self.symbol(param if param in shared else param + symbol_suffix))
        return tuple(dims)

    def symbol(self, name: str) -> Dim:
        """The graph's symbol `name` (one Dim per name)."""
        symbol = _identifier(name)
        return self._symbols.setdefault(symbol, Dim(symbol))

    # -- values ---------------------------------------------------------------------------
    def _visit(self, node: OnnxNode) -> None:
        if node.op_type == "Constant" and node.is_onnx:
            value = onnx_rules.constant_value(node)
            self.values[node.outputs[0]] = _Value(const=value, constant_node=node)
        elif is_compile_time(node, self._known_names()):
            for out in node.outputs:
                if out:
                    self.values[out] = _Value(producer=node)
        else:
            self.import_node(node)

    def _known_names(self) -> _KnownNames:
        return _KnownNames(self.values)

    def value(self, name: str) -> np.ndarray | None:
        """The compile-time value of `name`, or None if only run time knows it."""
        v = self._entry(name)
        if v.const is None and v.producer is not None and not v.evaluated:
            self._evaluate(v.producer)
        return v.const

    def _evaluate(self, node: OnnxNode) -> None:
        if node.op_type in ("Shape", "Size"):
            results = [shape_value(node, self.type_of(node.inputs[0]))]
        elif node.op_type == "CastLike":
            value = self.value(node.inputs[0])
            target = self.type_of(node.inputs[1]).dtype
            results = None if value is None else [cast_value(value, target)]
        else:
            args = [self.value(i) if i else None for i in node.inputs]
            if any(a is None for a, i in zip(args, node.inputs) if i):
                results = None
            elif not self.budget.allows(node.op_type, args):
                results = None  # too much work now: the node runs at run time
            else:
                results = evaluate_node(node, args)
        for i, out in enumerate(node.outputs):
            if out and out in self.values:
                entry = self.values[out]
                entry.evaluated = True
                if results is not None and i < len(results):
                    entry.const = results[i]

    def tensor(self, name: str) -> Tensor:
        """The run-time tensor of `name` (a Const, or the import of its producer)."""
        v = self._entry(name)
        if v.tensor is not None:
            return v.tensor
        if v.sequence is not None:
            raise GraphError(
                f"value {name!r} is a sequence; mdsl holds sequences only while importing "
                "(their tensors), so a graph input or output, or a Loop value, cannot be one"
            )
        if v.producer is not None and not self._has_rule(v.producer):
            # an op mdsl lacks, over import-time values: its evaluated value is the tensor
            if self.value(name) is None:
                raise GraphError(
                    f"value {name!r}: {v.producer.describe()} is an op mdsl lacks and could "
                    f"not be evaluated at import time (inputs all known; results above "
                    f"{EVALUATION_SIZE_CAP} elements are not evaluated)"
                )
            v.tensor = self._const_node(name, v)
        elif v.producer is not None:
            self.import_node(v.producer)
            if v.tensor is None:
                raise GraphError(
                    f"value {name!r}: its producer {v.producer.describe()} gave no tensor"
                )
        else:
            v.tensor = self._const_node(name, v)
        return v.tensor

    def _has_rule(self, node: OnnxNode) -> bool:
        return node.op_type in ("Shape", "Size", "CastLike") or is_supported(node, self.custom_ops)

    def type_of(self, name: str) -> TensorType:
        v = self._entry(name)
        if v.tensor is not None:
            return v.tensor.type
        value = self.value(name)
        if value is not None:
            dtype = DType.int64 if value.dtype == object else DType.of(value.dtype)
            return TensorType(value.shape, dtype)
        return self.tensor(name).type

    def _entry(self, name: str) -> _Value:
        try:
            return self.values[name]
        except KeyError:
            raise GraphError(f"value {name!r} is used before any node produces it") from None

    def _const_node(self, name: str, v: _Value) -> Tensor:
        value = v.const
        if value.dtype == object:
            raise GraphError(f"value {name!r} holds symbolic dims and no run-time producer")
        try:
            dtype = DType.of(value.dtype)
        except MdslError:
            raise GraphError(
                f"constant {name!r} has dtype {value.dtype}, which mdsl lacks"
            ) from None
        owner = (
            v.constant_node.name if v.constant_node is not None and v.constant_node.name else name
        )
        layer, leaf = split_scope(owner)
        if owner in self.weight_layers:
            layer = tuple(self.weight_layers[owner].split("/"))
        layer = (*self._scope_base, *layer)
        self._ensure_layers(layer)
        node = context.current_graph()._new_node(
            CONST,
            [],
            {"value": value},
            name=leaf,
            types=[TensorType(value.shape, dtype)],
            source=self.label,
            layer_path="/".join(layer),
        )
        return node.outputs[0]

    # -- nodes --------------------------------------------------------------------------
    def import_node(self, node: OnnxNode) -> None:
        if id(node) in self._imported:
            return
        self._imported[id(node)] = node
        self._producers.update((out, node) for out in node.outputs if out)
        try:
            outputs = self._run_rule(node)
        except MdslError as e:
            raise e.with_context(node=node.name or None, op_type=node.op_type) from None
        except (ValueError, TypeError, KeyError, IndexError, AttributeError) as e:
            raise GraphError(
                f"could not import ({type(e).__name__}: {e})",
                node=node.name or None,
                op_type=node.op_type,
            ) from e
        self._bind_outputs(node, outputs)

    def _run_rule(self, node: OnnxNode) -> list:
        if node.domain == MDSL_DOMAIN:
            return onnx_rules.import_mdsl_op(self, node)
        if node.op_type in self.custom_ops.get(node.domain, {}):
            return onnx_rules.import_mdsl_op(self, node, self.custom_ops[node.domain][node.op_type])
        rule = onnx_rules.RULES.get(node.op_type)
        if rule is not None:
            return rule(self, node)
        if node.op_type not in MAPPINGS:
            raise GraphError("mdsl has no such op, and its value is not known at import time")
        return import_mapped(self, node, MAPPINGS[node.op_type])

    def _bind_outputs(self, node: OnnxNode, outputs) -> None:
        outputs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
        for i, out in enumerate(node.outputs):
            if not out:
                continue
            tensor = outputs[i] if i < len(outputs) else None
            if tensor is None:
                if out in self.used:
                    raise GraphError(
                        f"output {i} ({out!r}) is used, but mdsl's {node.op_type} does not "
                        "produce it (only inference outputs are supported)",
                        node=node.name or None,
                        op_type=node.op_type,
                    )
                continue
            if isinstance(tensor, _Value):  # an inlined subgraph's value, aliased
                self.values[out] = tensor
                continue
            entry = self.values.setdefault(out, _Value())
            entry.tensor = tensor

    def emit(self, op_type: str, inputs: list, attrs: dict, name: str | None = None) -> list:
        """Record an mdsl node of `op_type` (a variadic slot takes the remaining inputs)."""
        opdef = get_op(op_type)
        grouped: list = []
        for i, slot in enumerate(opdef.inputs):
            if slot.variadic:
                grouped.append([t for t in inputs[i:] if t is not None])
                break
            grouped.append(inputs[i] if i < len(inputs) else None)
        extra = [t for t in inputs[len(grouped) :] if t is not None]
        if extra and not opdef.inputs[-1].variadic:
            raise GraphError(f"{len(inputs)} inputs given, mdsl's {op_type} takes {len(grouped)}")
        try:
            out = apply_op(opdef, grouped, attrs, name)
        except MdslError as e:  # the user's line is the load() call: name the model instead
            raise type(e)(e.message, node=e.node, op_type=e.op_type, source=self.label) from None
        return list(out) if isinstance(out, tuple) else [out]

    @contextlib.contextmanager
    def scope_of(self, node: OnnxNode, *, composite: bool = False) -> Iterator[str | None]:
        """Build inside `node`'s layer; yields the leaf name for its (main) mdsl node.

        A `composite` node (one ONNX op spelled as several mdsl ops) gets its own layer
        named after it, holding all its nodes.
        """
        layer, leaf = split_scope(node.name or node.op_type)
        if node.layer is not None:  # a scope-less name ("n14") says nothing: use the weights'
            layer = tuple(node.layer.split("/")) if node.layer else ()
            leaf = node.op_type if composite else None
        layer = (*self._scope_base, *layer)
        if composite:
            path = context.current_graph().layer_names.unique("/".join((*layer, leaf)))
            layer, leaf = tuple(path.split("/")), None
        elif not node.name:
            leaf = None  # an unnamed node gets mdsl's default name: its op type
        with self.scope_at(layer):
            yield leaf

    @contextlib.contextmanager
    def control_flow_scope(self, node: OnnxNode, mdsl_op: str) -> Iterator[str]:
        """The scope and name for mdsl.cond / mdsl.while_loop, which make a layer of
        their own holding node `mdsl_op`: `/blk/cond/If` is the cond named "cond" in
        layer `blk` (so an exported graph reads back with its names)."""
        layer, leaf = split_scope(node.name or node.op_type)
        layer = (*self._scope_base, *layer)
        if leaf in (mdsl_op, node.op_type) and len(layer) > len(self._scope_base):
            layer, leaf = layer[:-1], layer[-1]
        with self.scope_at(layer):
            yield leaf

    @contextlib.contextmanager
    def scope_at(self, layer: tuple[str, ...]):
        self._ensure_layers(layer)
        token = context.scope_path.set(layer)
        try:
            yield
        finally:
            context.scope_path.reset(token)

    def _ensure_layers(self, layer: tuple[str, ...]) -> None:
        g = context.current_graph()
        for depth in range(1, len(layer) + 1):
            path = "/".join(layer[:depth])
            if path not in g.layers:
                g.layers[path] = Layer(path, "")
                g.layer_names.reserve(path)

    def inline_subgraph(self, graph_proto, layer: tuple[str, ...]) -> list[_Value]:
        """Import the nodes of an If branch chosen at import time into the graph being
        built, in `layer`; returns its outputs' values (compile-time values stay so).

        ONNX names are unique across a graph and its subgraphs, so the branch's values
        simply join the graph's."""
        for init in graph_proto.initializer:
            self.values[init.name] = _Value(const=array_from_tensor_proto(init))
        saved, self._scope_base = self._scope_base, layer
        try:
            for node in graph_proto.node:
                self._visit(OnnxNode.of(node, self.opsets))
        finally:
            self._scope_base = saved
        return [self._entry(out.name) for out in graph_proto.output]

    def import_subgraph(self, graph_proto, inputs: list[Tensor]) -> list[Tensor]:
        """Import an If branch or a Loop body into the graph being built (a subgraph
        traced by mdsl.cond / mdsl.while_loop); `inputs` bind its declared inputs.

        Values of the enclosing graphs stay readable (the builder captures them); what
        the subgraph defines or materializes stays in it.
        """
        return self._in_subgraph(graph_proto, [_Value(tensor=t) for t in inputs], self.tensor)

    def sequence_value(self, tensors: list[Tensor]) -> _Value:
        """A rule's result that is a sequence of `tensors` (import-time only)."""
        return _Value(sequence=list(tensors))

    def absent_value(self) -> _Value:
        """A rule's result that is an optional holding nothing."""
        return _Value(absent=True)

    def entry(self, name: str) -> _Value:
        """What the importer holds for value `name` ("": an absent optional input)."""
        if not name:
            return _Value(absent=True)
        return self._entry(name)

    def tensor_value(self, tensor: Tensor) -> _Value:
        return _Value(tensor=tensor)

    def import_values(self, graph_proto, inputs: list[_Value]) -> list[_Value]:
        """Import a subgraph's nodes into the graph being built with its declared inputs
        bound to `inputs` (tensors, sequences, optionals, import-time values): one
        iteration of a Loop or SequenceMap unrolled at import. Returns its outputs,
        import-time values kept as such."""
        return self._in_subgraph(graph_proto, inputs, self._settled)

    def _in_subgraph(self, graph_proto, inputs: list[_Value], read) -> list:
        """Import `graph_proto`'s nodes with its declared inputs bound to `inputs`, in a
        scope of its own (values of the enclosing graphs stay readable; what it defines
        stays in it); returns `read` of each of its outputs."""
        saved = (self.values, self._imported, self._scope_base)
        self.values = {k: replace(v) for k, v in self.values.items()}
        self._imported = dict(self._imported)
        self._scope_base = tuple(context.scope_path.get())
        try:
            for init in graph_proto.initializer:
                self.values[init.name] = _Value(const=array_from_tensor_proto(init))
            for vi, value in zip(graph_proto.input, inputs):
                self.values[vi.name] = replace(value)
            for node in graph_proto.node:
                self._visit(OnnxNode.of(node, self.opsets))
            return [read(out.name) for out in graph_proto.output]
        finally:
            self.values, self._imported, self._scope_base = saved

    def settled_tensor(self, v: _Value) -> Tensor:
        """The tensor of a value `import_values` gave (an import-time value: a Const)."""
        if v.tensor is not None:
            return v.tensor
        if v.sequence is not None or v.absent:
            raise GraphError("a sequence or optional where mdsl needs one tensor")
        name = context.current_graph().node_names.unique("unrolled_value")
        return self._const_node(name, v)

    def _settled(self, name: str) -> _Value:
        """Value `name` in a form that outlives the subgraph defining it."""
        v = self.entry(name)
        if v.sequence is not None or v.absent:
            return replace(v)
        if v.tensor is None:
            value = self.value(name)
            if value is not None and value.dtype != object:  # symbolic: computed at run time
                return _Value(const=value)
        return _Value(tensor=self.tensor(name))

    def constant_value(self, array: np.ndarray) -> _Value:
        """A rule's result known at import time (it becomes a Const where a tensor is needed)."""
        return _Value(const=array)

    def sequence_of(self, name: str) -> list[Tensor]:
        v = self.entry(name)
        if v.sequence is None:
            raise GraphError(f"value {name!r} is not a sequence")
        return v.sequence

    def bound_slice_ends(self, shape: tuple, attrs: dict) -> None:
        """A static dim sliced to an input's symbol (`position_table[:S]`) means the
        model takes S up to that size: the symbol's range says so, feeds are checked
        against it, and the slice's length is exactly S."""
        starts, ends = attrs.get("starts") or (), attrs.get("ends") or ()
        axes = attrs.get("axes") or tuple(range(len(starts)))
        for axis, start, end in zip(axes, starts, ends):
            dim = shape[axis] if -len(shape) <= axis < len(shape) else None
            name = end.name if isinstance(end, Dim) else None
            if not isinstance(dim, int) or name not in self._symbols or not isinstance(start, int):
                continue
            if not 0 <= start <= dim:
                continue
            for symbol in (self._symbols[name], end):
                symbol.max = dim if symbol.max is None else min(symbol.max, dim)

    # -- helpers for rules ---------------------------------------------------------------
    def current_graph(self) -> Graph:
        return context.current_graph()

    @property
    def scope_base(self) -> tuple[str, ...]:
        return self._scope_base

    def input_tensor(self, node: OnnxNode, index: int) -> Tensor | None:
        name = node.inputs[index] if index < len(node.inputs) else ""
        return self.tensor(name) if name else None

    def constant_input(
        self, node: OnnxNode, index: int, what: str, *, run_time: bool = False
    ) -> np.ndarray | None:
        """The compile-time value of input `index`, None if absent; GraphError if it is
        only known at run time, unless `run_time` (the op takes sizes known at run time):
        then the value's elements become value dims (`value_dims_of`)."""
        name = node.inputs[index] if index < len(node.inputs) else ""
        if not name:
            return None
        value = self.value(name)
        if value is None and run_time:
            return self.run_time_dims(name, node, what)
        if value is None:
            raise GraphError(
                f"input {index} ({what}) must be known at import time: mdsl holds it as an "
                f"attribute, but {name!r} is computed at run time"
            )
        return value

    def run_time_dims(self, name: str, node: OnnxNode, what: str) -> np.ndarray:
        """The run-time value `name` (read by `node` as its `what`) as an array of ints
        and symbolic dims. Traced back through the shape ops computing it (Split, Slice,
        Concat, ...) to the values they start from, which become value dims
        (`value_dims_of`), so two sizes taken from one tensor are the same symbol.
        Inside an If/Loop body the value itself becomes value dims, bound and checked
        each time the body runs (what it is computed from, an iteration counter, an
        offset, need not be a size)."""
        if self.current_graph() is not self.graph:
            return self.value_dims_of(name, node, what)
        traced = self._traced_dims(name, node, 0)
        return traced if traced is not None else self.value_dims_of(name, node, what)

    def _traced_dims(self, name: str, reader: OnnxNode, depth: int) -> np.ndarray | None:
        def root(value: str):
            return self.value_dims_of(value, reader, value.rsplit("/", 1)[-1])

        def keep(value: str, result: np.ndarray) -> None:
            self._entry(value).const = result

        return self._symbolic(name, root, keep, depth)

    def _symbolic(self, name: str, root, keep, depth: int = 0) -> np.ndarray | None:
        """The value of run-time integer tensor `name` as ints and Dims, computed through
        the shape ops producing it from the values `root(value name)` gives for the
        tensors those start from; `keep(value name, array)` is told every value found."""
        value = self.value(name)
        if value is not None:
            return value
        node = self._producers.get(name)
        tensor = self._entry(name).tensor
        if tensor is None or not tensor.dtype.is_int or tensor.dtype == DType.bool_:
            return None
        if node is None or not has_symbolic_rule(node.op_type) or depth > 32:
            if not tensor.type.is_static or tensor.type.numel > MAX_VALUE_DIMS:
                return None
            return root(name)
        args = [None if not i else self._symbolic(i, root, keep, depth + 1) for i in node.inputs]
        if any(a is None for a, i in zip(args, node.inputs) if i):
            return None
        results = evaluate_node(node, args)
        if results is None:
            return None
        found = dict(zip(node.outputs, results))
        for out, result in found.items():
            if out:
                keep(out, result)
        return found.get(name)

    def slice_lengths(self, starts: str, ends: str, steps) -> tuple[int, ...] | None:
        """Per sliced axis, ends - starts when the shape ops computing them prove it a
        constant >= 0 whatever the run-time values they start from are (`x[i:i + 1]`
        in a loop body), else -1; None when no axis is known. Step-1 axes only."""
        seen: dict[str, np.ndarray] = {}

        def root(value: str):  # stand-ins for the run-time values, never bound
            count = self._entry(value).tensor.type.numel
            out = np.empty(count, dtype=object)
            out[:] = [Dim(f"_{_identifier(value)}_{k}") for k in range(count)]
            return out.reshape(self._entry(value).tensor.shape)

        def keep(value: str, result: np.ndarray) -> None:
            seen[value] = result

        begin, end = (self._symbolic(n, root, keep) for n in (starts, ends))
        if begin is None or end is None or begin.shape != end.shape or begin.ndim != 1:
            return None
        lengths = []
        for k, (b, e) in enumerate(zip(begin.tolist(), end.tolist())):
            step = 1 if steps is None else steps[k]
            length = e - b
            lengths.append(length if step == 1 and isinstance(length, int) and length >= 0 else -1)
        return tuple(lengths) if any(n >= 0 for n in lengths) else None

    def value_dims_of(self, name: str, node: OnnxNode, what: str) -> np.ndarray:
        """The run-time value `name` as an array of symbolic dims, bound when a ValueDims
        node reads it (docs/dynamic-shapes.md); later readers of `name` see the same dims.
        Sizes: a non-integer value (OneHot's float depth) is cast to int64 first."""
        from mdsl.ops.runtime_sizes import value_dims

        tensor = self.tensor(name)
        if not tensor.type.is_static or tensor.type.numel > MAX_VALUE_DIMS:
            raise GraphError(
                f"{what} {name!r} is computed at run time and has shape "
                f"{tensor.type.describe()}; mdsl reads sizes at run time from a static "
                f"tensor of at most {MAX_VALUE_DIMS} elements"
            )
        with self.scope_of(node) as leaf:
            if not tensor.dtype.is_int or tensor.dtype == DType.bool_:
                tensor = self.emit("Cast", [tensor], {"to": DType.int64})[0]
            dims = value_dims(tensor, name=f"{leaf or node.op_type}_{what}")
        value = np.empty(len(dims), dtype=object)
        value[:] = dims
        value = value.reshape(tensor.shape)
        self._entry(name).const = value
        return value


class _KnownNames:
    """`name in known`: the value has a compile-time form (constant or deferred)."""

    def __init__(self, values: dict[str, _Value]):
        self._values = values

    def __contains__(self, name: str) -> bool:
        v = self._values.get(name)
        return v is not None and (v.const is not None or v.producer is not None)


def import_mapped(ctx: _Importer, node: OnnxNode, mapping: OpMapping) -> list:
    """Import a node through its table entry: attrs converted, constant inputs folded
    into attrs, the remaining inputs passed in order."""
    opdef = get_op(mapping.mdsl_type)
    attrs = convert_attrs(node, opdef, mapping)
    attr_inputs = mapping.attr_inputs_at(node.opset)
    if mapping.mdsl_type == "Reshape" and node.opset >= 5 and ctx.value(node.inputs[1]) is None:
        return dynamic_reshape(ctx, node)
    if mapping.mdsl_type == "Slice" and node.opset >= 10 and ctx.value(node.inputs[1]) is None:
        return dynamic_slice(ctx, node)
    if mapping.mdsl_type == "Slice" and node.opset >= 10 and _run_time(ctx, node, (3, 4)):
        return _dynamic_slice_axes(ctx, node)
    if mapping.mdsl_type == "Slice" and node.opset >= 10 and ctx.value(node.inputs[2]) is None:
        return dynamic_slice(ctx, node)
    crops = _run_time_pads(ctx, node, mapping, attrs)
    for index, spec in attr_inputs.items():
        if crops is not None and spec.attr == "pads":
            continue
        run_time = (mapping.mdsl_type, spec.attr) in RUN_TIME_ATTRS
        value = ctx.constant_input(node, index, spec.attr, run_time=run_time)
        if value is not None:
            attrs[spec.attr] = attr_from_array(value, opdef.attrs[spec.attr].kind, spec.attr)
    inputs = [ctx.input_tensor(node, i) for i in range(len(node.inputs)) if i not in attr_inputs]
    if mapping.mdsl_type == "Slice" and inputs and inputs[0] is not None:
        ctx.bound_slice_ends(inputs[0].shape, attrs)
    with ctx.scope_of(node) as leaf:
        try:
            out = ctx.emit(mapping.mdsl_type, inputs, attrs, name=leaf)
        except ShapeError:
            if mapping.mdsl_type != "Reshape" or ctx.value(node.inputs[1]).dtype != object:
                raise
            # symbolic sizes no rule proves to fit (value dims): checked when it runs,
            # each dim bounded by its value dim (tight buffers)
            return dynamic_reshape(ctx, node, sizes=list(ctx.value(node.inputs[1]).reshape(-1)))
        if crops is None:
            return out
        return ctx.emit("DynamicCrop", [out[0], crops], {}, name=f"{leaf or 'Pad'}_crop")


def _run_time_pads(ctx: _Importer, node: OnnxNode, mapping: OpMapping, attrs: dict):
    """For a Pad whose pads are computed at run time (no axes input):
    sets attrs["pads"] to value dims of max(pads, 0) and returns the crops max(-pads, 0)
    a DynamicCrop applies after it (ONNX's negative pads); None for other nodes."""
    from mdsl.ops.runtime_sizes import value_dims

    if mapping.mdsl_type != "Pad" or node.opset < 11:
        return None
    if len(node.inputs) < 2 or ctx.value(node.inputs[1]) is not None:
        return None
    if len(node.inputs) > 3 and node.inputs[3]:
        return None
    pads = ctx.tensor(node.inputs[1])
    with ctx.scope_of(node) as leaf:
        if pads.dtype != DType.int64:
            pads = ctx.emit("Cast", [pads], {"to": DType.int64})[0]
        grow = ctx.emit("Max", [pads, ctx.current_graph().const("zero", np.int64(0))], {})[0]
        attrs["pads"] = value_dims(grow, name=f"{leaf or 'Pad'}_pads")
        shrink = ctx.emit("Neg", [pads], {})[0]
        return ctx.emit("Max", [shrink, ctx.current_graph().const("zero", np.int64(0))], {})[0]


# (op, attr) whose ONNX input may be computed at run time: its values become value dims
# (sizes: a negative value is an ExecutionError when it is bound). A Slice whose starts or
# ends are computed at run time is a DynamicSlice (`dynamic_slice`), a Reshape whose
# shape is a DynamicReshape (`dynamic_reshape`: its -1 and 0 mean what no size can).
RUN_TIME_ATTRS = {
    ("Expand", "shape"),
    ("ConstantOfShape", "shape"),
    ("Tile", "repeats"),
    ("Pad", "pads"),
    ("OneHot", "depth"),
    ("TopK", "k"),
}


def dynamic_reshape(ctx: _Importer, node: OnnxNode, sizes: list | None = None) -> list:
    """A Reshape whose shape is computed at run time from data (not from Shape: those
    are import-time symbolic values): a DynamicReshape, its dims data-dependent (bounded
    by `sizes`, the shape's values as ints and value dims, when the importer knows them)."""
    shape = ctx.tensor(node.inputs[1])
    with ctx.scope_of(node) as leaf:
        if shape.dtype != DType.int64:
            shape = ctx.emit("Cast", [shape], {"to": DType.int64})[0]
        attrs = {"allowzero": bool(int(node.attrs.get("allowzero", 0)))}
        if sizes is not None:
            attrs["sizes"] = [s if isinstance(s, Dim) else int(s) for s in sizes]
        return ctx.emit("DynamicReshape", [ctx.input_tensor(node, 0), shape], attrs, name=leaf)


def dynamic_slice(ctx: _Importer, node: OnnxNode) -> list:
    """A Slice whose starts or ends are computed at run time: a DynamicSlice, its
    lengths data-dependent (axes and steps must be import-time values)."""
    if _run_time(ctx, node, (3, 4)):
        return _dynamic_slice_axes(ctx, node)
    axes, steps = (
        None if value is None else tuple(int(v) for v in np.asarray(value).reshape(-1))
        for value in (ctx.constant_input(node, i, what) for i, what in ((3, "axes"), (4, "steps")))
    )
    bounds = []
    for index in (1, 2):
        t = ctx.tensor(node.inputs[index])
        bounds.append(
            t if t.dtype == DType.int64 else ctx.emit("Cast", [t], {"to": DType.int64})[0]
        )
    lengths = ctx.slice_lengths(node.inputs[1], node.inputs[2], steps)
    with ctx.scope_of(node) as leaf:
        attrs = {"axes": axes, "steps": steps, "lengths": lengths}
        return ctx.emit("DynamicSlice", [ctx.input_tensor(node, 0), *bounds], attrs, name=leaf)


def _run_time(ctx: _Importer, node: OnnxNode, positions) -> bool:
    """Whether one of the inputs at `positions` is given and known only at run time."""
    return any(
        i < len(node.inputs) and node.inputs[i] and ctx.value(node.inputs[i]) is None
        for i in positions
    )


def _dynamic_slice_axes(ctx: _Importer, node: OnnxNode) -> list:
    """A Slice whose axes or steps are computed at run time: a DynamicSliceAxes (every
    dim data-dependent); absent axes are 0, 1, ..., absent steps 1."""
    x = ctx.input_tensor(node, 0)
    parts = []
    for index in (1, 2, 3, 4):
        name = node.inputs[index] if index < len(node.inputs) else ""
        if name:
            t = ctx.tensor(name)
        else:
            count = ctx.type_of(node.inputs[1]).shape[0]
            default = np.arange(count) if index == 3 else np.ones(count)
            t = ctx.current_graph().const(
                f"slice_{'axes' if index == 3 else 'steps'}", default.astype(np.int64)
            )
        parts.append(t if t.dtype == DType.int64 else ctx.emit("Cast", [t], {"to": DType.int64})[0])
    with ctx.scope_of(node) as leaf:
        return ctx.emit("DynamicSliceAxes", [x, *parts], {}, name=leaf)


def convert_attrs(node: OnnxNode, opdef, mapping: OpMapping | None) -> dict:
    """ONNX attributes as mdsl attrs (ints 0/1 -> bools, element types -> dtypes, ...)."""
    renames = mapping.attr_renames_at(node.opset) if mapping is not None else {}
    ignored = dict(mapping.ignored) if mapping is not None else {}
    out = {}
    for key, value in node.attrs.items():
        target = renames.get(key, key)
        if target in opdef.attrs:
            out[target] = attr_value(value, opdef.attrs[target].kind, key)
        elif key in ignored and (ignored[key] is ANY or _plain(value) == ignored[key]):
            continue
        else:
            raise GraphError(
                f"attribute {key}={_short(value)} is not supported by mdsl's {opdef.op_type}"
            )
    return out


def _plain(value):
    return value.decode() if isinstance(value, bytes) else value


def _short(value) -> str:
    text = repr(value.decode() if isinstance(value, bytes) else value)
    return text if len(text) < 60 else text[:57] + "..."


def split_scope(onnx_name: str) -> tuple[tuple[str, ...], str]:
    """`/encoder/layer.0/MatMul` -> (("encoder", "layer.0"), "MatMul")."""
    parts = [p for p in mdsl_name(onnx_name).split("/") if p]
    if not parts:
        return (), "node"
    return tuple(parts[:-1]), parts[-1]


def _identifier(text: str) -> str:
    ident = re.sub(r"\W", "_", text)
    return ident if re.match(r"[A-Za-z_]", ident) else f"d_{ident}"


def _used_names(graph_proto) -> set[str]:
    """Every value name some node (in any subgraph) reads, and the graph outputs."""
    used = {o.name for o in graph_proto.output}
    stack = [graph_proto]
    while stack:
        g = stack.pop()
        for node in g.node:
            used.update(i for i in node.input if i)
            for attr in node.attribute:
                stack.extend([attr.g] if attr.HasField("g") else list(attr.graphs))
    return used


def _all_nodes(g: Graph):
    for node in g:
        yield node
        for sub in node.subgraphs.values():
            yield from _all_nodes(sub)
