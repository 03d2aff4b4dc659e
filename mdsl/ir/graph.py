"""The IR: Graph, Node, Tensor, Layer.

Nodes are plain records (op type, inputs, attrs, outputs); the rules of each op live in the
op registry (`mdsl.ops.registry`), never on the node. The graph keeps its nodes in
topological order, which the builder gets for free (a node can only use tensors that exist)
and passes must preserve (`mdsl.ir.verify` checks it).
"""

from __future__ import annotations

import contextvars
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from mdsl.ir import context
from mdsl.ir.errors import GraphError
from mdsl.ir.initializer import ParamInit
from mdsl.ir.naming import Namespace
from mdsl.ir.pass_log import PassLog
from mdsl.ir.source import user_source
from mdsl.ir.tensor_type import TensorType
from mdsl.ir.tracebacks import api_boundary

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence
    from typing import TypeAlias

    # what a Tensor operator takes on its other side: a tensor, a Python or numpy scalar, an array
    Operand: TypeAlias = "Tensor | int | float | bool | np.ndarray | np.generic"

# Structural op types: the graph's boundary, known to every stage.
INPUT, CONST, OUTPUT = "Input", "Const", "Output"


class Tensor:
    """A value flowing on an edge: output `index` of node `producer`, of type `type`.

    At build time a Tensor describes data, it never holds it. Operator overloads
    (`+ - * / @`, slicing, `.reshape`, ...) are installed by `mdsl.builder` and record
    nodes in the graph being built.
    """

    __slots__ = ("index", "producer", "type")

    if TYPE_CHECKING:  # installed by mdsl.ops.tensor_methods (the IR cannot import the ops)

        def __add__(self, other: Operand) -> Tensor: ...
        def __radd__(self, other: Operand) -> Tensor: ...
        def __sub__(self, other: Operand) -> Tensor: ...
        def __rsub__(self, other: Operand) -> Tensor: ...
        def __mul__(self, other: Operand) -> Tensor: ...
        def __rmul__(self, other: Operand) -> Tensor: ...
        def __truediv__(self, other: Operand) -> Tensor: ...
        def __rtruediv__(self, other: Operand) -> Tensor: ...
        def __pow__(self, other: Operand) -> Tensor: ...
        def __rpow__(self, other: Operand) -> Tensor: ...
        def __matmul__(self, other: Operand) -> Tensor: ...
        def __rmatmul__(self, other: Operand) -> Tensor: ...
        def __lt__(self, other: Operand) -> Tensor: ...
        def __le__(self, other: Operand) -> Tensor: ...
        def __gt__(self, other: Operand) -> Tensor: ...
        def __ge__(self, other: Operand) -> Tensor: ...
        def __neg__(self) -> Tensor: ...
        def __getitem__(self, index: Any) -> Tensor: ...
        def reshape(self, *shape: Any) -> Tensor: ...
        def transpose(self, *perm: Any) -> Tensor: ...
        @property
        def T(self) -> Tensor: ...
        def astype(self, dtype: Any) -> Tensor: ...
        def sum(
            self, axis: int | Sequence[int] | None = None, keepdims: bool = False
        ) -> Tensor: ...
        def mean(
            self, axis: int | Sequence[int] | None = None, keepdims: bool = False
        ) -> Tensor: ...
        def max(
            self, axis: int | Sequence[int] | None = None, keepdims: bool = False
        ) -> Tensor: ...
        def min(
            self, axis: int | Sequence[int] | None = None, keepdims: bool = False
        ) -> Tensor: ...

    _repr_html_: ClassVar[Callable[..., str]]  # installed by mdsl.tools.notebook

    def __init__(self, type: TensorType, producer: Node, index: int = 0):
        self.type = type
        self.producer = producer
        self.index = index

    @property
    def name(self) -> str:
        """The producer's name, with `:i` for outputs after the first of multi-output ops."""
        return self.producer.name if self.index == 0 else f"{self.producer.name}:{self.index}"

    @property
    def shape(self) -> tuple:
        return self.type.shape

    @property
    def dtype(self):
        return self.type.dtype

    @property
    def format(self):
        return self.type.format

    @property
    def ndim(self) -> int:
        return len(self.type.shape)

    @property
    def graph(self) -> Graph | None:
        return self.producer.graph

    def __repr__(self) -> str:
        return f"Tensor({self.name!r}, {self.type.describe()})"

    def __bool__(self):
        raise GraphError(
            f"the truth value of tensor {self.name} is not known at build time; "
            "use mdsl.cond for data-dependent branches",
            source=user_source(),
        )

    __hash__ = object.__hash__


@dataclass(eq=False, slots=True)
class Node:
    """One op instance. `layer` is the path of the innermost layer the node was built in."""

    name: str
    op_type: str
    inputs: list[Tensor | None]
    attrs: dict
    outputs: list[Tensor] = field(default_factory=list)
    layer: str = ""
    source: str | None = None
    device: str | None = None
    fusion_group: str | None = None
    subgraphs: dict[str, Graph] = field(default_factory=dict)
    _repr_html_: ClassVar[Callable[..., str]]  # installed by mdsl.tools.notebook
    graph: Graph | None = None

    @property
    def output(self) -> Tensor:
        """The single output (an error for multi-output nodes)."""
        if len(self.outputs) != 1:
            raise GraphError(f"node {self.name} ({self.op_type}) has {len(self.outputs)} outputs")
        return self.outputs[0]

    def const_value(self) -> np.ndarray:
        """The value of a Const node, generating a deferred parameter on first use."""
        if self.op_type != CONST:
            raise GraphError(f"node {self.name} ({self.op_type}) is not a constant")
        value = self.attrs["value"]
        if isinstance(value, ParamInit):  # the recipe stays: it keeps the drawn value, and
            return value.materialize()  # CSE and the compile cache key read the recipe
        return value

    def __repr__(self) -> str:
        ins = ", ".join("None" if t is None else t.name for t in self.inputs)
        return f"Node({self.name!r}, {self.op_type}, inputs=[{ins}])"


@dataclass(slots=True)
class Layer:
    """A named group of nodes recorded by an `@mdsl.layer` call or `mdsl.scope`."""

    path: str
    function: str
    node_names: list[str] = field(default_factory=list)

    @property
    def parent(self) -> str:
        return self.path.rpartition("/")[0]

    @property
    def depth(self) -> int:
        return self.path.count("/") + 1


class Graph:
    """The top container: nodes in topological order, inputs, outputs, layers.

    Build one with `with mdsl.Graph("name") as g:`; inside the block, `g.input`,
    `g.const`, `mdsl.param`, op builders and Tensor operators record nodes.

    >>> import mdsl
    >>> with mdsl.Graph("tiny") as g:
    ...     x = g.input("x", ("N", 4))
    ...     g.output(x * 2.0 + 1.0, "y")
    >>> [n.name for n in g.nodes]
    ['x', 'Const', 'Mul', 'Const_1', 'Add', 'Output_y']
    >>> g.outputs["y"].shape
    (Dim('N'), 4)
    """

    _repr_html_: ClassVar[Callable[..., str]]  # installed by mdsl.tools.notebook

    def __init__(self, name: str = "graph"):
        if not isinstance(name, str) or not name:
            raise GraphError(f"a graph name must be a non-empty string, got {name!r}")
        self.name = name
        self._nodes: list[Node] = []
        self._by_name: dict[str, Node] = {}
        self.layers: dict[str, Layer] = {}
        self.pass_log: PassLog = PassLog()
        self.parent: Graph | None = None
        self.node_names = Namespace()
        self.layer_names = Namespace()
        self._saved_scope: contextvars.Token | None = None
        self._token: contextvars.Token | None = None
        self._version = 0
        self._use_cache: tuple[int, dict] | None = None
        self._source: str | None = None  # where the `with` block opened, for its errors

    # -- building context --------------------------------------------------------------------
    def __enter__(self) -> Graph:
        self._source = user_source()
        self._saved_scope = context.scope_path.set(())
        self._token = context.graph_stack.set((*context.graph_stack.get(), self))
        return self

    def __exit__(self, exc_type, exc, tb):
        if self._token is None or self._saved_scope is None:
            raise GraphError(f"graph {self.name!r} left a `with` block it never entered")
        context.graph_stack.reset(self._token)
        context.scope_path.reset(self._saved_scope)
        if exc_type is None and not self.outputs:
            raise GraphError(
                f"graph {self.name!r} has no outputs; call g.output(tensor, name)",
                source=self._source,
            )
        return False

    # -- queries -------------------------------------------------------------------------
    @property
    def nodes(self) -> list[Node]:
        """All nodes in topological order (a copy: mutate through the graph's methods)."""
        return list(self._nodes)

    def __iter__(self) -> Iterator[Node]:
        return iter(self._nodes)

    def __len__(self) -> int:
        return len(self._nodes)

    def node(self, name: str) -> Node:
        try:
            return self._by_name[name]
        except KeyError:
            close = [n for n in self._by_name if name in n][:3]
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise GraphError(f"graph {self.name!r} has no node {name!r}{hint}") from None

    def has_node(self, name: str) -> bool:
        return name in self._by_name

    @property
    def inputs(self) -> dict[str, Tensor]:
        """Graph inputs by name, in declaration order."""
        return {n.name: n.outputs[0] for n in self._nodes if n.op_type == INPUT}

    @property
    def outputs(self) -> dict[str, Tensor]:
        """Graph outputs by name: the tensor each `Output_<name>` node consumes."""
        return {
            n.attrs["name"]: t
            for n in self._nodes
            if n.op_type == OUTPUT and (t := n.inputs[0]) is not None
        }

    @property
    def output_nodes(self) -> list[Node]:
        return [n for n in self._nodes if n.op_type == OUTPUT]

    @property
    def constants(self) -> list[Node]:
        return [n for n in self._nodes if n.op_type == CONST]

    def consumers(self, tensor: Tensor) -> list[tuple[Node, int]]:
        """Every (node, input index) that reads `tensor`."""
        return self._uses().get(tensor, [])

    def _uses(self) -> dict[Tensor, list[tuple[Node, int]]]:
        if self._use_cache is None or self._use_cache[0] != self._version:
            uses: dict[Tensor, list[tuple[Node, int]]] = {}
            for node in self._nodes:
                for i, t in enumerate(node.inputs):
                    if t is not None:
                        uses.setdefault(t, []).append((node, i))
            self._use_cache = (self._version, uses)
        return self._use_cache[1]

    # -- structural nodes (pinned builder API) ---------------------------------------------
    @api_boundary
    def input(self, name: str, shape, dtype="float32", format="ND") -> Tensor:
        """Declare a graph input. String dims are symbolic (`("N", 3, 224, 224)`)."""
        self._check_building("input")
        if not isinstance(name, str) or not name or name in self.inputs:
            raise GraphError(
                f"input name {name!r} is empty, not a string, or declared twice",
                source=user_source(),
            )
        ttype = _checked_type(shape, dtype, format, node=name, op_type=INPUT)
        node = self._new_node(INPUT, [], {}, name=name, types=[ttype], exact_name=True)
        return node.outputs[0]

    @api_boundary
    def const(self, name: str, value) -> Tensor:
        """A constant tensor holding `value` (a copy, read-only), named in the current layer."""
        self._check_building("const")
        if not isinstance(name, str) or not name:
            swapped = " (arguments swapped? it is g.const(name, value))" * isinstance(value, str)
            raise GraphError(
                f"constant name must be a non-empty string, got {type(name).__name__}{swapped}",
                source=user_source(),
            )
        try:
            array = np.array(value)
        except (ValueError, TypeError) as e:
            raise GraphError(
                f"cannot make an array of {value!r:.60} ({e})",
                node=name,
                op_type=CONST,
                source=user_source(),
            ) from None
        if array.dtype == np.float64 and not isinstance(value, (np.ndarray, np.generic)):
            array = array.astype(np.float32)  # Python floats default to float32 like torch
        array.setflags(write=False)
        ttype = _checked_type(array.shape, array.dtype, "ND", node=name, op_type=CONST)
        node = self._new_node(CONST, [], {"value": array}, name=name, types=[ttype])
        return node.outputs[0]

    @api_boundary
    def output(self, tensor: Tensor, name: str) -> None:
        """Mark `tensor` as the graph output `name` (records node `Output_<name>`)."""
        self._check_building("output")
        if not isinstance(tensor, Tensor):
            problem = f"output {name!r} must be a Tensor, got {type(tensor).__name__}"
        elif not isinstance(name, str) or not name:
            problem = f"output name must be a non-empty string, got {name!r}"
        elif name in self.outputs:
            problem = f"output {name!r} is set twice"
        else:
            problem = None
        if problem:
            raise GraphError(problem, source=user_source())
        self.check_owns(tensor, f"output {name!r}")
        self._new_node(
            OUTPUT, [tensor], {"name": name}, name=f"Output_{name}", types=[], exact_name=True
        )

    def _check_building(self, what: str) -> None:
        if context.current_graph() is not self:
            raise GraphError(
                f"g.{what}() called outside `with` block of graph {self.name!r}",
                source=user_source(),
            )

    def check_owns(self, tensor: Tensor, where: str) -> None:
        """Raise if `tensor` belongs to another graph (subgraphs may read their parents')."""
        owner = tensor.producer.graph
        g: Graph | None = self
        while g is not None:
            if owner is g:
                return
            g = g.parent
        other = owner.name if owner is not None else "no graph"
        raise GraphError(
            f"{where}: tensor {tensor.name} belongs to graph {other!r}, not {self.name!r}",
            source=user_source(),
        )

    # -- low-level mutation (builder and passes) -------------------------------------------
    def _new_node(
        self,
        op_type: str,
        inputs: list,
        attrs: dict,
        *,
        name: str | None,
        types: list[TensorType],
        exact_name: bool = False,
        source: str | None = None,
        layer_path: str | None = None,
    ) -> Node:
        """Create, name and append a node whose output types are already known."""
        layer = context.current_scope() if layer_path is None else layer_path
        leaf = name or op_type
        full = leaf if exact_name or not layer else f"{layer}/{leaf}"
        if ":" in leaf:  # "<node>:<i>" names output i of a node: a node name must not look so
            raise GraphError(
                f"node name {leaf!r} must not contain ':' (it names outputs, as in Split:1)",
                node=full,
                op_type=op_type,
                source=source or user_source(),
            )
        if exact_name:
            if not self.node_names.reserve(full):
                raise GraphError(f"a node named {full!r} already exists in graph {self.name!r}")
        else:
            full = self.node_names.unique(full)
        node = Node(
            full,
            op_type,
            list(inputs),
            attrs,
            layer=layer,
            source=source or user_source(),
            device=context.current_device(),
            graph=self,
        )
        node.outputs = [Tensor(t, node, i) for i, t in enumerate(types)]
        self.append(node)
        return node

    def append(self, node: Node) -> None:
        """Append a fully formed node (its inputs must already be in the graph)."""
        if node.name in self._by_name:
            raise GraphError(f"a node named {node.name!r} already exists in graph {self.name!r}")
        self.node_names.reserve(node.name)
        node.graph = self
        self._nodes.append(node)
        self._by_name[node.name] = node
        if node.layer:
            self._record_layer_membership(node)
        self._version += 1

    def _record_layer_membership(self, node: Node) -> None:
        layer = self.layers.get(node.layer)
        if layer is None:  # a layer path from a file, a pass or an explicit layer_path
            layer = self.layers[node.layer] = Layer(node.layer, "")
        layer.node_names.append(node.name)

    def replace_nodes(self, nodes: list[Node]) -> None:
        """Replace the whole node list (passes); names and layers are re-indexed."""
        self._nodes = []
        self._by_name = {}
        for layer in self.layers.values():
            layer.node_names.clear()
        self.node_names = Namespace()
        for node in nodes:
            self.append(node)

    # -- reporting -----------------------------------------------------------------------
    def parameter_count(self) -> tuple[int, int]:
        """(number of values, bytes) held by constant tensors of rank >= 1.

        0-d constants (the 2.0 in `x * 2.0`, a 1/sqrt(d) scale) are not parameters.
        """
        count = nbytes = 0
        for node in self.constants:
            t = node.outputs[0].type
            if t.is_static and t.rank >= 1:
                count += math.prod(t.shape)
                nbytes += t.nbytes
        return count, nbytes

    def summary(self) -> str:
        """A readable table: inputs/outputs, nodes per op type and per top-level layer,
        parameter count and bytes."""
        from mdsl.ir.summary import graph_summary

        return graph_summary(self)

    def __repr__(self) -> str:
        return f"Graph({self.name!r}, {len(self._nodes)} nodes)"

    # -- serialization ---------------------------------------------------------------------
    def to_json(self) -> str:
        """The graph as a versioned JSON document (constants inline, base64)."""
        from mdsl.ir.serialize import graph_to_json

        return graph_to_json(self)

    @staticmethod
    def from_json(text: str | bytes) -> Graph:
        from mdsl.ir.serialize import graph_from_json

        return graph_from_json(text)


def _checked_type(shape, dtype, format, *, node: str, op_type: str) -> TensorType:
    from mdsl.ir.errors import MdslError

    try:
        return TensorType(shape, dtype, format)
    except MdslError as e:
        raise e.with_context(node=node, op_type=op_type, source=user_source()) from None
