"""Control flow: the If, Case and While ops, and the layout of their nodes.

The builders are `mdsl.cond`, `mdsl.switch` and `mdsl.while_loop` (`mdsl.builder.
control_flow`); the interpreter runs these nodes in `mdsl.targets.python.control_flow`. This
module owns what every stage relies on: how a node holds its bodies, and the type rules.

Representation
--------------
A control-flow node keeps its bodies in `node.subgraphs`, and every subgraph is
**self-contained**: none of its nodes reads a tensor of an enclosing graph. What a body
reads from outside (a closure's captured tensors) is passed explicitly: the captured
tensor is an input of the node, and the subgraph sees it through one of its own Input
nodes. A subgraph is therefore a function:

- its **parameters** are its Input nodes, in node order (`subgraph_params`);
- its **results** are its Output nodes, named "0", "1", ... and ordered by that name,
  never by position (`subgraph_results`).

All subgraphs of one node take the same parameters (a capture one body does not use is
still its parameter), so a code generator calls any of them the same way.

======  =================================  =========================================
op      node inputs                        subgraphs (parameters -> results)
======  =================================  =========================================
If      [cond, *captures]                  then_branch, else_branch:
                                           captures -> one result per node output
Case    [index, *captures]                 branch_0 ... branch_{k-1}: as If's
While   [*initial values (n), *captures]   cond: (*loop vars, *captures) -> one bool
                                           body: (*loop vars, *captures) -> n values
======  =================================  =========================================

- **If** follows ONNX If: `cond` is a bool tensor holding one element; when it is true
  then_branch runs, otherwise else_branch; the node's outputs are the results of the
  branch that ran. Only that branch runs.
- **Case** (`mdsl.switch`) runs `branch_<index>`; an index outside [0, k) is an
  ExecutionError at run time. ONNX has no Case: an exporter writes nested Ifs.
- **While** runs `v = initial; while cond(v, c): v = body(v, c)` and outputs the final
  `v` (attr `num_loop_vars` = n). With attr `max_iterations` = m (None: no limit),
  `cond` being true after m runs of `body` is an ExecutionError. Zero iterations output
  the initial values.

Why While and not ONNX Loop: `mdsl.while_loop` has a separate condition function, as
have StableHLO/XLA While and tf.while_loop, and two subgraphs map to it one to one (and
to a C `while (cond(...)) { ...body... }`). ONNX Loop computes the next condition inside
its body and adds a trip count and scan outputs; an exporter builds it from While by
appending the cond subgraph to the body (and evaluating cond once before the loop).

Types
-----
- A subgraph's parameters have exactly the types of what the node passes in: the
  captured tensors, and for While the loop-carried types (the node's output types).
- The branches of an If/Case give results of equal dtype and rank. Their shapes agree,
  except in dims the node's attr `dynamic` names: there the node's output dim is a bare
  symbol (declared with `shapes=` by the user) that each branch may fill differently.
- A While's initial values and body results fit the loop-carried types the same way:
  a loop-carried dim may be a symbol named in `dynamic`, which changes between
  iterations (a sequence growing by one each time). A While's attr `bounds` may give
  each such symbol an upper bound, an int or a dim expression of symbols known before
  the loop runs (`loop_bounds`); compiled backends size the loop's buffers by it (else
  by the Dim's declared max; a large or run-time one at most at a capacity they grow
  when a run needs more), and a value above it is an ExecutionError.
- Symbols named in `dynamic` are new: no feed binds them. At run time they are bound
  from the arrays: for a subgraph, from its parameters each time it is entered (so each
  iteration rebinds the loop's symbols); after the node, from its outputs. Code
  generators do the same (`ControlFlow.dynamic`).
- A symbol a node inside a subgraph binds (a ValueDims or data-dependent node, a nested
  control-flow node) is local to one run of that subgraph: it is bound afresh each time
  the subgraph runs and reaches the enclosing graph only through the node's `dynamic`
  dims (docs/dynamic-shapes.md, section 2c).

The type rules are node-level (they read the subgraphs), installed as the OpDef's
`extra["infer_node"]`; the verifier uses them through `infer_node_types`.

For code generators
-------------------
`control_flow(node)` splits a node into its parts; `mdsl.targets.python.control_flow` is the
reference semantics, step by step. A backend plans each subgraph like a graph of its
own (its parameters arrive as pointers to the node's input buffers; its results are
written to, or copied into, the node's output buffers), then emits: If as
`if (cond) then(...) else(...)`; Case as a `switch` whose default returns an error
status; While as `while (cond(v, c)) { if (k++ == max) error; v = body(v, c); }` with
the loop-carried values double-buffered (a body result may be one of its own
parameters). Symbols in `dynamic` are not known before the node runs: the buffers
holding them are sized at run time (or by the symbol's declared max). The "c" and
"numba" backends do all this (`mdsl.codegen.lower_control`, `mdsl.targets.c.control`,
`mdsl.targets.numba.control`); for other code, `mdsl.targets.python.kernels.node_kernel`
gives control-flow nodes a kernel that runs their subgraphs in the interpreter
(`control_flow_kernel`), which a compiled executable can call back into.

>>> import mdsl
>>> with mdsl.Graph("demo") as g:
...     x = g.input("x", ("N", 4))
...     big = x.sum() > 10.0
...     g.output(mdsl.cond(big, lambda: x * 0.5, lambda: x + 1.0), "y")
>>> cf = control_flow(g.node("cond/If"))
>>> cf.kind, [t.name for t in cf.captures], [s.name for s in cf.branches]
('If', ['x'], ['cond/then', 'cond/else'])
>>> [t.name for t in subgraph_params(cf.branches[0])]
['cond/then/captured/x']
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from mdsl.ir.dim import Dim, as_dim, dims_equal
from mdsl.ir.dtype import DType
from mdsl.ir.errors import DTypeError, GraphError, MdslError, ShapeError
from mdsl.ir.format import Format
from mdsl.ir.graph import INPUT, OUTPUT, Graph, Node, Tensor
from mdsl.ir.tensor_type import TensorType
from mdsl.ops.registry import Attr, In, OpDef, make_slots, register

IF, CASE, WHILE = "If", "Case", "While"
CONTROL_FLOW_OPS = frozenset({IF, CASE, WHILE})
THEN_BRANCH, ELSE_BRANCH, COND, BODY = "then_branch", "else_branch", "cond", "body"
INDEX_DTYPES = frozenset({DType.int32, DType.int64})


def case_branch_key(index: int) -> str:
    """The subgraph key of branch `index` of a Case node: `branch_<index>`."""
    return f"branch_{index}"


# -- the parts of a node -----------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ControlFlow:
    """A control-flow node split into its parts (see the module doc).

    `selector`: If's cond or Case's index (None for While). `branches`: If's
    (then, else) or Case's branches in index order; empty for While, which has `cond`
    and `body` instead. `loop_inputs`: While's initial values. `captures`: the node
    inputs that every subgraph receives as its trailing parameters. `dynamic`: symbols
    bound from arrays at run time rather than by the feeds.
    """

    node: Node
    kind: str
    selector: Tensor | None
    branches: tuple[Graph, ...]
    cond: Graph | None
    body: Graph | None
    loop_inputs: tuple[Tensor, ...]
    captures: tuple[Tensor, ...]
    max_iterations: int | None
    dynamic: frozenset[str]
    bounds: Mapping[str, object] = field(default_factory=dict)

    @property
    def subgraphs(self) -> tuple[Graph, ...]:
        """Every subgraph, in key order: branches, or (cond, body)."""
        return self.branches if self.kind != WHILE else (self.cond, self.body)

    @property
    def param_offset(self) -> int:
        """Index of the node input passed as each subgraph's first parameter."""
        return 0 if self.kind == WHILE else 1


def is_control_flow(node: Node) -> bool:
    return node.op_type in CONTROL_FLOW_OPS


def subgraph_keys(node: Node) -> list[str]:
    """The keys `node.subgraphs` must have, in order (GraphError for other op types)."""
    if node.op_type == IF:
        return [THEN_BRANCH, ELSE_BRANCH]
    if node.op_type == WHILE:
        return [COND, BODY]
    if node.op_type == CASE:
        return [case_branch_key(i) for i in range(max(len(node.subgraphs), 1))]
    raise GraphError(f"{node.name} ({node.op_type}) is not a control-flow node")


def control_flow(node: Node) -> ControlFlow:
    """`node`'s parts; GraphError naming what is missing or malformed."""
    keys = subgraph_keys(node)
    if sorted(node.subgraphs) != sorted(keys):
        raise GraphError(
            f"{node.op_type} holds subgraphs {sorted(node.subgraphs)}, expected {keys}"
        )
    subs = tuple(node.subgraphs[k] for k in keys)
    dynamic = frozenset(node.attrs.get("dynamic") or ())
    if node.op_type != WHILE:
        if not node.inputs or node.inputs[0] is None:
            raise GraphError(f"{node.op_type} needs its selector as input 0")
        return ControlFlow(
            node,
            node.op_type,
            selector=node.inputs[0],
            branches=subs,
            cond=None,
            body=None,
            loop_inputs=(),
            captures=tuple(node.inputs[1:]),
            max_iterations=None,
            dynamic=dynamic,
        )
    n = node.attrs.get("num_loop_vars")
    if not isinstance(n, int) or not 0 < n <= len(node.inputs):
        raise GraphError(f"num_loop_vars {n!r} does not fit the node's {len(node.inputs)} inputs")
    if any(t is None for t in node.inputs):
        raise GraphError("While inputs must all be present")
    return ControlFlow(
        node,
        WHILE,
        selector=None,
        branches=(),
        cond=subs[0],
        body=subs[1],
        loop_inputs=tuple(node.inputs[:n]),
        captures=tuple(node.inputs[n:]),
        max_iterations=node.attrs.get("max_iterations"),
        dynamic=dynamic,
        bounds=loop_bounds(node),
    )


def loop_bounds(node: Node) -> dict[str, object]:
    """symbol -> upper bound of a While's dynamic dims given by its attr `bounds` (one
    entry per name in `dynamic`, -1 where none is given): an int, or a dim expression of
    symbols known before the loop runs (the feeds', value dims: a trip count computed at
    run time bounds the rows a loop stacks)."""
    given = node.attrs.get("bounds")
    if not given:
        return {}
    names = node.attrs.get("dynamic") or ()
    return {s: b for s, b in zip(names, given) if isinstance(b, Dim) or b >= 0}


def bounds_attr(dynamic, bounds: Mapping[str, object]) -> tuple | None:
    """Attr `bounds` for symbols `dynamic` (in attr order) from symbol -> bound."""
    if not any(s in bounds for s in dynamic):
        return None
    return tuple(bounds.get(s, -1) for s in dynamic)


def subgraph_params(sub: Graph) -> list[Tensor]:
    """A subgraph's parameters: the outputs of its Input nodes, in node order."""
    return [n.outputs[0] for n in sub if n.op_type == INPUT]


def subgraph_results(sub: Graph) -> list[Tensor]:
    """A subgraph's results: what its Output nodes "0", "1", ... read, in that order."""
    by_name = {n.attrs.get("name"): n.inputs[0] for n in sub if n.op_type == OUTPUT}
    expected = [str(i) for i in range(len(by_name))]
    if sorted(by_name, key=str) != sorted(expected):
        raise GraphError(
            f"subgraph {sub.name!r}: outputs must be named 0..{len(by_name) - 1}, "
            f"got {sorted(map(str, by_name))}"
        )
    return [by_name[name] for name in expected]


def add_params(
    sub: Graph, params: list[tuple[str, TensorType]], *, captured: bool = True, source=None
) -> list[Tensor]:
    """Append parameters to `sub`, given as (name, type): Input nodes named
    `<sub path>/captured/<name>` (a captured tensor's name), or `<sub path>/<name>` with
    `captured=False` (a loop var). Returns the new parameters."""
    holders = []
    for name, ttype in params:
        leaf = name.removeprefix(sub.name + "/").replace(":", "_")
        base = f"{sub.name}/captured/{leaf}" if captured else f"{sub.name}/{leaf}"
        holder = Node(sub.node_names.unique(base), INPUT, [], {}, layer=sub.name, source=source)
        holder.outputs = [Tensor(TensorType(ttype.shape, ttype.dtype, ttype.format), holder, 0)]
        holder.graph = sub
        holders.append(holder)
    inputs = [n for n in sub if n.op_type == INPUT]
    sub.replace_nodes(inputs + holders + [n for n in sub if n.op_type != INPUT])
    return [h.outputs[0] for h in holders]


# -- type rules ---------------------------------------------------------------------------------
def has_one_element(ttype: TensorType) -> bool:
    """Whether every tensor of this type holds exactly one element (shape (), (1,), ...)."""
    return ttype.is_static and ttype.numel == 1


def shape_misfit(value: tuple, declared: tuple, dynamic) -> str | None:
    """Why a value of shape `value` cannot flow where shape `declared` is expected (None
    if it can): dims must be equal, except declared dims that are symbols in `dynamic`
    (which take any size within their range)."""
    if len(value) != len(declared):
        return f"rank {len(value)} is not {len(declared)}"
    for axis, (v, d) in enumerate(zip(value, declared)):
        if dims_equal(v, d):
            continue
        if isinstance(d, Dim) and d.name in dynamic:
            if isinstance(v, int) and not _in_range(v, d):
                hi = "inf" if d.max is None else d.max
                return f"dim {axis} ({v}) is outside the range [{d.min}, {hi}] of {d.name}"
            continue
        known = (
            " (a symbol in use already: it cannot vary)" if isinstance(d, Dim) and d.name else ""
        )
        return f"dim {axis} is {v}, not {d}{known}"
    return None


def _in_range(size: int, d: Dim) -> bool:
    return size >= d.min and (d.max is None or size <= d.max)


def type_misfit(value: TensorType, declared: TensorType, dynamic) -> MdslError | None:
    """A DTypeError or ShapeError saying why `value` does not fit `declared`, or None."""
    if value.dtype != declared.dtype:
        return DTypeError(f"dtype {value.dtype} is not {declared.dtype}")
    why = shape_misfit(value.shape, declared.shape, dynamic)
    return None if why is None else ShapeError(why)


def branch_result_types(
    branches: Sequence[tuple[str, Sequence[TensorType]]],
    declared: Sequence[tuple | None],
    dynamic,
) -> list[TensorType]:
    """The output types of an If/Case from its branches' result types.

    `branches`: (label, result types) per branch; labels name branches in messages. `declared`: per result, the shape the
    node declares (None: the branches must agree exactly and give it). Errors name the
    result index and the branches that disagree.

    >>> f = TensorType(("N", 4))
    >>> branch_result_types([("then", [f]), ("else", [TensorType((3, 4))])], [("S", 4)], "S")
    [TensorType((S, 4), float32)]
    """
    check_result_counts(branches)
    out = []
    for i, shape in enumerate(declared):
        types = [(label, ts[i]) for label, ts in branches]
        first_label, first = types[0]
        for label, t in types[1:]:
            if t.dtype != first.dtype:
                raise DTypeError(
                    f"result {i}: {label} gives {t.describe()}, {first_label} "
                    f"gives {first.describe()}; branches must agree in dtype"
                )
        if shape is None:
            shape = first.shape
            _check_same_shapes(i, types)
        else:
            shape = tuple(as_dim(d) for d in shape)
            _check_declared_shape(i, types, shape, dynamic)
        same_format = all(t.format == first.format for _, t in types)
        out.append(TensorType(shape, first.dtype, first.format if same_format else Format.ND))
    return out


def _check_same_shapes(index: int, types: list) -> None:
    first_label, first = types[0]
    for label, t in types[1:]:
        if shape_misfit(t.shape, first.shape, ()) is not None:
            raise ShapeError(
                f"result {index}: {label} gives {t.describe()}, "
                f"{first_label} gives {first.describe()}; declare the dims that may differ "
                "with shapes= (a new symbol there, e.g. shapes=('S', 4))"
            )


def _check_declared_shape(index: int, types: list, shape: tuple, dynamic) -> None:
    for label, t in types:
        why = shape_misfit(t.shape, shape, dynamic)
        if why is not None:
            raise ShapeError(
                f"result {index}: {label} gives {t.describe()}, which does not fit "
                f"the declared shape [{','.join(map(str, shape))}]: {why}"
            )


def check_params(key: str, sub: Graph, expected: Sequence[TensorType]) -> None:
    """The parameters of subgraph `key` have exactly the `expected` types."""
    params = subgraph_params(sub)
    if len(params) != len(expected):
        raise GraphError(
            f"subgraph {key} has {len(params)} parameters, the node passes {len(expected)}"
        )
    for i, (p, want) in enumerate(zip(params, expected)):
        if p.shape != want.shape or p.dtype != want.dtype:
            raise GraphError(
                f"subgraph {key}: parameter {i} ({p.name}) is {p.type.describe()}, the node "
                f"passes {want.describe()}"
            )


def check_self_contained(key: str, sub: Graph) -> None:
    """No node of subgraph `key` reads a tensor of another graph (captures are explicit)."""
    for node in sub:
        for t in node.inputs:
            if t is not None and t.producer.graph is not sub:
                raise GraphError(
                    f"subgraph {key}: {node.name} reads {t.name} of an enclosing graph; an "
                    "outer tensor must be passed in as a node input and a subgraph Input"
                )


def check_selector(kind: str, ttype: TensorType, what: str | None = None) -> None:
    """If's cond is a bool, Case's index an int32/int64, holding one element."""
    what = what or ("cond" if kind == IF else "index")
    if kind == IF and ttype.dtype != DType.bool_:
        raise DTypeError(f"{what} must be bool (compare it, e.g. x > 0), got {ttype.describe()}")
    if kind == CASE and ttype.dtype not in INDEX_DTYPES:
        raise DTypeError(f"{what} must be int32 or int64, got {ttype.describe()}")
    if not has_one_element(ttype):
        raise ShapeError(f"{what} must hold one element, got {ttype.describe()}")


def check_result_counts(branches: Sequence[tuple[str, Sequence]]) -> None:
    """Every branch returns as many values."""
    counts = {label: len(types) for label, types in branches}
    if len(set(counts.values())) != 1:
        listing = ", ".join(f"{label} {n}" for label, n in counts.items())
        raise GraphError(f"branches return different numbers of values: {listing}")


def _infer_branching(node: Node, attrs: dict) -> list[TensorType]:
    cf = control_flow(node)
    check_selector(cf.kind, cf.selector.type)
    capture_types = [t.type for t in cf.captures]
    results = []
    for key, sub in zip(subgraph_keys(node), cf.branches):
        check_params(key, sub, capture_types)
        check_self_contained(key, sub)
        types = [t.type for t in subgraph_results(sub)]
        if len(types) != len(node.outputs):
            raise GraphError(
                f"subgraph {key} has {len(types)} results, the node {len(node.outputs)} outputs"
            )
        results.append((f"subgraph {key}", types))
    declared = [t.shape for t in node.outputs]
    return branch_result_types(results, declared, set(attrs["dynamic"]))


def _infer_while(node: Node, attrs: dict) -> list[TensorType]:
    cf = control_flow(node)
    params = subgraph_params(cf.body)
    n = attrs["num_loop_vars"]
    if len(params) != len(node.inputs):
        raise GraphError(
            f"subgraph body has {len(params)} parameters, the node passes {len(node.inputs)}"
        )
    carried = [t.type for t in params[:n]]
    signature = carried + [t.type for t in cf.captures]
    for key, sub in ((COND, cf.cond), (BODY, cf.body)):
        check_params(key, sub, signature)
        check_self_contained(key, sub)
    if attrs["max_iterations"] is not None and attrs["max_iterations"] < 0:
        raise GraphError(f"max_iterations must be >= 0, got {attrs['max_iterations']}")
    dynamic = set(attrs["dynamic"])
    bounds = attrs.get("bounds")
    if bounds is not None and len(bounds) != len(attrs["dynamic"]):
        raise GraphError(f"{len(bounds)} bounds for {len(attrs['dynamic'])} dynamic symbols")
    for k, (init, want) in enumerate(zip(cf.loop_inputs, carried)):
        _raise_misfit(type_misfit(init.type, want, dynamic), f"initial value of loop var {k}")
    check_loop_condition(subgraph_results(cf.cond))
    body = subgraph_results(cf.body)
    if len(body) != n:
        raise GraphError(f"subgraph body has {len(body)} results for {n} loop vars")
    for k, (t, want) in enumerate(zip(body, carried)):
        _raise_misfit(type_misfit(t.type, want, dynamic), f"body result {k}")
    return carried


def check_loop_condition(results: list[Tensor]) -> None:
    """A While's cond subgraph gives one bool holding one element."""
    if len(results) != 1:
        raise GraphError(f"the loop condition must give one value, got {len(results)}")
    t = results[0].type
    if t.dtype != DType.bool_:
        raise DTypeError(f"the loop condition must be bool, got {t.describe()}")
    if not has_one_element(t):
        raise ShapeError(f"the loop condition must hold one element, got {t.describe()}")


def _raise_misfit(error: MdslError | None, what: str) -> None:
    if error is not None:
        raise type(error)(f"{what}: {error.message}")


# -- registration ---------------------------------------------------------------------------------
def _built_by(builder: str):
    def infer(*_types, **_attrs):
        raise GraphError(f"this op holds subgraphs; build it with {builder}")

    return infer


_DYNAMIC = Attr([str], default=(), doc="symbols bound from arrays at run time")
_CAPTURES = In("any", optional=True, variadic=True)
_OUTPUTS = {"outputs": In("any", variadic=True)}

register(
    OpDef(
        IF,
        make_slots({"cond": "bool", "captures": _CAPTURES}),
        make_slots(_OUTPUTS),
        {"dynamic": _DYNAMIC},
        _built_by("mdsl.cond"),
        doc="Run then_branch if cond else else_branch (ONNX If); see mdsl.cond.",
        extra={"infer_node": _infer_branching, "control_flow": True},
    )
)
register(
    OpDef(
        CASE,
        make_slots({"index": ["int32", "int64"], "captures": _CAPTURES}),
        make_slots(_OUTPUTS),
        {"dynamic": _DYNAMIC},
        _built_by("mdsl.switch"),
        doc="Run branch_<index>; see mdsl.switch.",
        extra={"infer_node": _infer_branching, "control_flow": True},
    )
)
register(
    OpDef(
        WHILE,
        make_slots({"inputs": In("any", variadic=True)}),
        make_slots(_OUTPUTS),
        {
            "num_loop_vars": Attr(int, required=True),
            "max_iterations": Attr(int, default=None),
            "dynamic": _DYNAMIC,
            "bounds": Attr(
                [int],
                default=None,
                doc="per dynamic symbol, its upper bound (int or dim expression; -1: none)",
            ),
        },
        _built_by("mdsl.while_loop"),
        doc="Run body while cond holds; see mdsl.while_loop.",
        extra={"infer_node": _infer_while, "control_flow": True},
    )
)

__all__ = [
    "BODY",
    "CASE",
    "COND",
    "CONTROL_FLOW_OPS",
    "ELSE_BRANCH",
    "IF",
    "THEN_BRANCH",
    "WHILE",
    "ControlFlow",
    "add_params",
    "branch_result_types",
    "case_branch_key",
    "check_loop_condition",
    "check_params",
    "check_result_counts",
    "check_selector",
    "check_self_contained",
    "control_flow",
    "has_one_element",
    "is_control_flow",
    "shape_misfit",
    "subgraph_keys",
    "subgraph_params",
    "subgraph_results",
    "type_misfit",
]
