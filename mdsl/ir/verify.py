"""The verifier: checks a graph's invariants, separate from every pass that must keep them.

Structure (unique names, topological order, no dangling edges or cycles, outputs wired)
is checked here; each node's types are re-inferred through the op registry, which
installs its rule with `set_type_rule` (the IR itself knows no op).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from mdsl.ir.errors import GraphError, MdslError
from mdsl.ir.format import storage_shape
from mdsl.ir.graph import CONST, INPUT, OUTPUT, Graph, Node
from mdsl.ir.initializer import ParamInit

_type_rule: Callable[[Node], list] | None = None
MAX_REPORTED = 10
MAX_SUBGRAPH_DEPTH = 32  # control flow nested deeper is refused (interpret and compile recurse)


def set_type_rule(rule: Callable[[Node], list]) -> None:
    """Install the function that re-infers a node's output types (the op registry's)."""
    global _type_rule
    _type_rule = rule


_format_rule: Callable[[Node], list[str]] | None = None


def set_format_rule(rule: Callable[[Node], list[str]]) -> None:
    """Install the function listing a node's storage-format problems (an op reading a
    tensor stored in a format it does not accept); `mdsl.ops.storage` installs it."""
    global _format_rule
    _format_rule = rule


def verify(g: Graph, *, check_types: bool = True) -> None:
    """Raise GraphError listing every broken invariant of `g` (and its subgraphs).

    Each problem names the node, its op type and the user's line that built it; a single
    problem makes a one-line message.
    """
    check_nesting(g)
    problems = list(_problems(g, check_types, visible=set()))
    if len(problems) == 1:
        raise GraphError(f"graph {g.name!r} is invalid: {problems[0]}")
    if problems:
        shown = problems[:MAX_REPORTED]
        more = (
            f"\n  ... and {len(problems) - MAX_REPORTED} more"
            if len(problems) > MAX_REPORTED
            else ""
        )
        raise GraphError(f"graph {g.name!r} is invalid:\n  " + "\n  ".join(shown) + more)


def check_nesting(g: Graph) -> None:
    """Raise GraphError when control-flow subgraphs nest deeper than MAX_SUBGRAPH_DEPTH
    (checked without recursion, so any depth gets the error, never a RecursionError)."""
    stack = [(g, 0, "")]
    while stack:
        graph, depth, where = stack.pop()
        if depth > MAX_SUBGRAPH_DEPTH:
            raise GraphError(
                f"graph {g.name!r}: subgraphs nest {depth} deep (at {where}); "
                f"the limit is {MAX_SUBGRAPH_DEPTH}"
            )
        for node in graph:
            for key, sub in node.subgraphs.items():
                stack.append((sub, depth + 1, f"{node.name} subgraph {key}"))


def _problems(g: Graph, check_types: bool, visible: set):
    seen_names: set[str] = set()
    available = set(visible)  # tensors defined so far (outer graphs' tensors included)
    for node in g:
        where = f"{node.name} ({node.op_type})" + (f" at {node.source}" if node.source else "")
        if node.name in seen_names:
            yield f"{where}: duplicate node name"
        if ":" in node.name:
            yield f"{where}: ':' in a node name is reserved for output indices (Split:1)"
        seen_names.add(node.name)
        if node.graph is not g:
            yield f"{where}: node's graph is not {g.name!r}"
        for i, t in enumerate(node.inputs):
            if t is not None and t not in available:
                known = t.producer.graph is g and g.has_node(t.producer.name)
                why = "appears later (cycle or wrong order)" if known else "is not in this graph"
                yield f"{where}: input {i} ({t.name}) {why}"
        for i, t in enumerate(node.outputs):
            if t.producer is not node or t.index != i:
                yield f"{where}: output {i} is not wired to its producer"
            available.add(t)
        yield from _structural_problems(node, where)
        if check_types and node.op_type not in (INPUT, CONST, OUTPUT):
            yield from _type_problems(node, where)
        if _format_rule is not None:
            yield from (f"{where}: {p}" for p in _format_rule(node))
        for key, sub in node.subgraphs.items():
            for p in _problems(sub, check_types, available):
                yield f"{where} subgraph {key}: {p}"


def _structural_problems(node: Node, where: str):
    if node.op_type == INPUT and (node.inputs or len(node.outputs) != 1):
        yield f"{where}: an Input node has no inputs and one output"
    if node.op_type == OUTPUT:
        if len(node.inputs) != 1 or node.outputs:
            yield f"{where}: an Output node has one input and no outputs"
        elif node.name != f"Output_{node.attrs.get('name')}":
            yield f"{where}: Output node must be named Output_<name>"
    if node.op_type == CONST:
        yield from _const_problems(node, where)
    for t in node.outputs:
        if t.type.storage_format is not None:
            try:
                storage_shape(t.type.shape, t.type.format, t.type.storage_format)
            except MdslError as e:
                yield f"{where}: storage format {t.type.storage_format}: {e.message}"


def _const_problems(node: Node, where: str):
    value = node.attrs.get("value")
    t = node.outputs[0].type if len(node.outputs) == 1 else None
    if t is None or not isinstance(value, (np.ndarray, ParamInit)):
        yield f"{where}: a Const node holds an ndarray value and has one output"
        return
    dtype = value.dtype if isinstance(value, ParamInit) else value.dtype.name
    if tuple(value.shape) != t.shape or str(dtype) != t.dtype.value:
        got = f"{dtype}{list(value.shape)}"
        yield f"{where}: value is {got}, type says {t.describe()}"


def _type_problems(node: Node, where: str):
    if _type_rule is None:
        return
    try:
        expected = _type_rule(node)
    except MdslError as e:
        yield f"{where}: {e.message}"
        return
    actual = [t.type for t in node.outputs]
    if len(expected) != len(actual):
        yield f"{where}: has {len(actual)} outputs, its op infers {len(expected)}"
        return
    for i, (want, have) in enumerate(zip(expected, actual)):
        if want.shape != have.shape or want.dtype != have.dtype:
            yield f"{where}: output {i} is {have.describe()}, its op infers {want.describe()}"
