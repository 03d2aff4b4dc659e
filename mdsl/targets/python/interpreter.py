"""The reference interpreter: runs a graph node by node with each op's bound implementation.

It is the living definition of what a graph computes; every backend and every pass is
tested against it. Feeds are validated against the declared inputs first, and every
node's result is checked against its inferred type, so a wrong shape rule or a wrong
reference is caught at the node that has it. Which implementation a node runs is
decided by `mdsl.targets.python.kernels.choose_binding`.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from mdsl.ir.errors import ExecutionError, MdslError
from mdsl.ir.graph import CONST, INPUT, OUTPUT, Graph, Node
from mdsl.ir.tracebacks import api_boundary
from mdsl.ir.verify import check_nesting
from mdsl.ops.dynamic import dynamic_symbols
from mdsl.targets.feeds import bind_feeds, concrete_shape
from mdsl.targets.python.control_flow import run_control_flow, run_data_dependent
from mdsl.targets.python.kernels import IMPLS, input_names, node_kernel


@api_boundary
def interpret(
    g: Graph, feeds: Mapping[str, np.ndarray], capture: bool = False, impl: str = "auto"
) -> dict[str, np.ndarray]:
    """Run `g` on `feeds` (input name -> array) and return its outputs by name.

    With `capture=True` the result holds every tensor by name (inputs, constants and each
    node's outputs; a second output of node `n` is `n:1`), plus the graph outputs under
    their output names where no tensor has that name; tensors of control-flow subgraphs
    that ran are there too, under their own names (from the last time each ran, in a
    loop). Only the taken branch of an If/Case runs, and a While's body only as
    often as its condition holds (`mdsl.targets.python.control_flow`). `impl` picks each op's
    implementation: "auto" (the op's most recently registered "python" or "expr"
    binding), "python" (numpy first) or "expr" (expression first); see
    `mdsl.targets.python.kernels`.

    >>> import numpy as np, mdsl
    >>> with mdsl.Graph() as g:
    ...     x = g.input("x", ("N",))
    ...     g.output(x * 2.0, "y")
    >>> mdsl.interpret(g, {"x": np.arange(3, dtype=np.float32)})["y"]
    array([0., 2., 4.], dtype=float32)
    >>> sorted(mdsl.interpret(g, {"x": np.ones(2, np.float32)}, capture=True))
    ['Const', 'Mul', 'x', 'y']
    """
    if impl not in IMPLS:
        raise ExecutionError(f"impl must be one of {', '.join(IMPLS)}, got {impl!r}")
    check_nesting(g)
    env, symbols = bind_feeds(g, feeds)
    interpreter = Interpreter(impl)
    outputs = interpreter.run_graph(g, env, symbols)
    if not capture:
        return outputs
    captured = {t.name: v for t, v in interpreter.record.items()}
    for name, value in outputs.items():
        captured.setdefault(name, value)
    return captured


class Interpreter:
    """Runs graphs node by node with implementation choice `impl`; every tensor computed,
    inside control-flow subgraphs too, is put in `record`. Subclasses override `run_node`
    to watch each node (the python target's profiler times them)."""

    def __init__(self, impl: str = "auto", record: dict | None = None):
        self.impl = impl
        self.record = {} if record is None else record

    def run_graph(self, g: Graph, env: dict, symbols: dict) -> dict:
        """Run `g` (Input arrays by name in `env`) and return its outputs by name."""
        values: dict = {}
        outputs: dict[str, np.ndarray] = {}
        for node in g:
            if node.op_type == OUTPUT:
                outputs[node.attrs["name"]] = values[node.inputs[0]]
                continue
            results = self.run_node(node, values, env, symbols)
            for tensor, value in zip(node.outputs, results):
                values[tensor] = value
        self.record.update(values)
        return outputs

    def run_node(self, node: Node, values: dict, env: dict, symbols: dict) -> list:
        """The output arrays of `node`, its inputs' arrays in `values` (by tensor)."""
        return _run_node(node, values, env, self.impl, symbols, self.record)


def subgraph_runner(impl: str = "auto", record: dict | None = None):
    """A function `(subgraph, Input arrays by name, symbols) -> outputs by name` running
    control-flow subgraphs with this interpreter; what they compute goes in `record`."""
    return Interpreter(impl, record).run_graph


def bind_value_dims(g: Graph, env: Mapping[str, np.ndarray], symbols: Mapping[str, int]) -> dict:
    """The symbols the ValueDims nodes of `g` bind, for feeds `env` (symbols: the feeds'):
    the nodes their values depend on run here, before a compiled run plans its memory
    (those are shape computations: a few small integer tensors)."""
    from mdsl.ops.runtime_sizes import is_value_binder

    binders = [n for n in g if is_value_binder(n)]
    needed = _ancestors(binders)
    bound = dict(symbols)
    values: dict = {}
    for node in g:
        if id(node) in needed:
            for tensor, value in zip(node.outputs, _run_node(node, values, env, "auto", bound, {})):
                values[tensor] = value
    return {s: v for s, v in bound.items() if s not in symbols}


def _ancestors(nodes: list[Node]) -> set[int]:
    seen: set[int] = set()
    stack = list(nodes)
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.extend(t.producer for t in node.inputs if t is not None)
    return seen


def _run_node(
    node: Node, values: dict, env: Mapping[str, np.ndarray], impl: str, symbols: dict, record
) -> list:
    if node.op_type == INPUT:
        return [env[node.name]]
    if node.op_type == CONST:
        return [node.const_value()]
    args = [None if t is None else values[t] for t in node.inputs]
    if node.subgraphs:  # If, Case, While: only the taken subgraphs run (runtime.control_flow)
        return run_control_flow(node, args, symbols, subgraph_runner(impl, record))
    binding, kernel = node_kernel(node, impl, symbols)
    if dynamic_symbols(node):  # sizes only its result decides (docs/dynamic-shapes.md)
        return _run_data_dependent(node, binding.backend, kernel, args, symbols)
    try:
        out_specs = [  # storage shape: a tensor the layout pass stored as NHWC is held so
            (concrete_shape(t.type.storage_shape, symbols), t.type.dtype.np) for t in node.outputs
        ]
    except MdslError as e:  # an output dim no feed binds
        raise _node_error(node, binding.backend, e.message, args, type(e)) from None
    try:
        results = kernel(args, out_specs)
    except MdslError as e:
        raise _node_error(node, binding.backend, e.message, args, type(e)) from None
    except Exception as e:
        message = f"implementation raised {type(e).__name__}: {e}"
        raise _node_error(node, binding.backend, message, args) from e
    if len(results) != len(node.outputs):
        message = f"implementation returned {len(results)} values for {len(node.outputs)} outputs"
        raise _node_error(node, binding.backend, message, args)
    return [
        _checked_result(node, binding.backend, value, spec, args)
        for value, spec in zip(results, out_specs)
    ]


def _run_data_dependent(node: Node, backend: str, kernel, args: list, symbols: dict) -> list:
    """Run a node whose output sizes depend on its input values: its dynamic symbols
    are bound from the result arrays, checked against their ranges and bounds."""
    try:
        results = run_data_dependent(node, kernel, args, symbols)
    except MdslError as e:
        raise _node_error(node, backend, e.message, args, type(e)) from None
    except Exception as e:
        message = f"implementation raised {type(e).__name__}: {e}"
        raise _node_error(node, backend, message, args) from e
    return results


def _checked_result(node: Node, backend: str, value, spec: tuple, args: list) -> np.ndarray:
    shape, dtype = spec
    if not isinstance(value, np.ndarray):
        value = np.asarray(value)
    if value.dtype != dtype or tuple(value.shape) != shape:
        message = (
            f"implementation returned {value.dtype}{list(value.shape)}, "
            f"the graph declares {dtype}{list(shape)}"
        )
        raise _node_error(node, backend, message, args)
    return value


def _node_error(
    node: Node, backend: str, message: str, args: list, kind: type[MdslError] = ExecutionError
) -> MdslError:
    """`message` about `node`, with its layer, the binding that ran and its inputs."""
    layer = f"layer {node.layer!r}, " if node.layer else ""
    context = f"{layer}{backend} binding; inputs: {_describe_inputs(node, args)}"
    return kind(f"{message} ({context})", node=node.name, op_type=node.op_type, source=node.source)


def _describe_inputs(node: Node, args: list) -> str:
    pairs = zip(input_names(node), args)
    return ", ".join(f"{name}={_describe_array(a)}" for name, a in pairs) or "none"


def _describe_array(a) -> str:
    if a is None:
        return "None"
    if isinstance(a, np.ndarray):
        return f"{a.dtype}[{','.join(map(str, a.shape))}]"
    return type(a).__name__
