"""Running If, Case and While nodes in the interpreter: only what is taken runs.

The interpreter hands each control-flow node here with its input arrays and a callback
that runs a subgraph node by node (`RunSubgraph`); this module picks the subgraph, binds
its parameters and runs it: the selected branch once, or the loop's cond and body
until cond is false. It is the reference semantics of the layout documented in
`mdsl.ops.control_flow`, which compiled backends reproduce.

Symbols: a subgraph is entered with the symbols of the graph around it, minus the node's
`dynamic` ones, then binds its parameters' dims against the arrays passed in (so a
loop's symbols are rebound at each iteration, and sizes are checked against their
declared ranges). After the node ran, its dynamic symbols are bound from its outputs
for the nodes that follow.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping

import numpy as np

from mdsl.ir.dim import Dim
from mdsl.ir.errors import ExecutionError, ShapeError
from mdsl.ir.graph import Graph, Node, Tensor
from mdsl.ops.control_flow import (
    CASE,
    WHILE,
    ControlFlow,
    control_flow,
    subgraph_params,
    subgraph_results,
)

# (subgraph, Input name -> array, symbols) -> Output name -> array
RunSubgraph = Callable[[Graph, dict, dict], Mapping[str, np.ndarray]]


def run_control_flow(
    node: Node, args: list, symbols: dict[str, int], run: RunSubgraph
) -> list[np.ndarray]:
    """The output arrays of control-flow `node` given its input arrays `args`; binds the
    node's dynamic symbols in `symbols` (the caller's, updated in place)."""
    cf = control_flow(node)
    if cf.kind == WHILE:
        results = _run_loop(cf, args, symbols, run)
    else:
        results = _run_branch(cf, args, symbols, run)
    bind_output_symbols(node, results, symbols, cf.dynamic)
    return results


def control_flow_kernel(
    node: Node, impl: str = "auto", known: Mapping[str, int] | None = None
) -> Callable[[list, list], list]:
    """A kernel `(input arrays, output specs) -> output arrays` running control-flow
    `node`, its subgraphs in the interpreter: how a compiled executable runs If, Case and
    While through its Python callback (where its code generator does not emit them).
    Symbols are `known` (the run's, a subgraph may use them in attributes) but the
    node's dynamic ones, and those bound from the input arrays."""
    from mdsl.targets.python.interpreter import subgraph_runner  # it imports this module

    dynamic = control_flow(node).dynamic

    def run(args: list, out_specs: list) -> list:
        symbols = {s: v for s, v in (known or {}).items() if s not in dynamic}
        for t, array in zip(node.inputs, args):
            for axis, (dim, size) in enumerate(zip(t.shape, np.shape(array))):
                if isinstance(dim, Dim) and dim.name is not None:
                    _bind(node, f"input {t.name!r} dim {axis}", dim, size, symbols)
        return run_control_flow(node, args, symbols, subgraph_runner(impl))

    return run


def _run_branch(cf: ControlFlow, args: list, symbols: dict, run: RunSubgraph) -> list:
    index = selected_branch(cf, args[0])
    return call_subgraph(cf.node, cf.branches[index], args[1:], symbols, cf.dynamic, run)


def selected_branch(cf: ControlFlow, selector: np.ndarray) -> int:
    """Which of `cf.branches` runs: 0 (then) when If's cond is true, else 1; Case's index."""
    value = np.asarray(selector).reshape(-1)
    if value.size != 1:
        raise _error(cf.node, f"the selector holds {value.size} elements, not one")
    if cf.kind != CASE:
        return 0 if bool(value[0]) else 1
    index, count = int(value[0]), len(cf.branches)
    if not 0 <= index < count:
        raise _error(cf.node, f"index {index} is outside [0, {count - 1}] ({count} branches)")
    return index


def _run_loop(cf: ControlFlow, args: list, symbols: dict, run: RunSubgraph) -> list:
    n = len(cf.loop_inputs)
    values, captures = list(args[:n]), list(args[n:])
    for done in itertools.count():
        _check_loop_bounds(cf, values, symbols)
        (go,) = call_subgraph(cf.node, cf.cond, values + captures, symbols, cf.dynamic, run)
        if not bool(np.asarray(go).reshape(-1)[0]):
            return values
        if cf.max_iterations is not None and done >= cf.max_iterations:
            raise _error(
                cf.node, f"the loop is still running after max_iterations={cf.max_iterations}"
            )
        values = call_subgraph(cf.node, cf.body, values + captures, symbols, cf.dynamic, run)
    raise AssertionError("unreachable")


def _check_loop_bounds(cf: ControlFlow, values: list, symbols: dict) -> None:
    """The loop-carried dims with a bound (attr `bounds`) lie within it: what compiled
    backends sized the loop's buffers by."""
    if not cf.bounds:
        return
    for t, array in zip(cf.node.outputs, values):
        for axis, (dim, size) in enumerate(zip(t.shape, np.shape(array))):
            bound = cf.bounds.get(dim.name) if isinstance(dim, Dim) else None
            if bound is None:
                continue
            hi = bound.evaluate(symbols) if isinstance(bound, Dim) else int(bound)
            if size > hi:
                raise _error(
                    cf.node,
                    f"loop var {t.index} dim {axis}: {dim.name} = {size} exceeds its "
                    f"bound {bound} = {hi}",
                )


def call_subgraph(
    node: Node, sub: Graph, arrays: list, symbols: dict, dynamic, run: RunSubgraph
) -> list[np.ndarray]:
    """Run `sub` on `arrays` (its parameters, in order) and return its results in order."""
    inner = {s: v for s, v in symbols.items() if s not in dynamic}
    params = subgraph_params(sub)
    if len(params) != len(arrays):
        raise _error(node, f"subgraph {sub.name!r} takes {len(params)} values, got {len(arrays)}")
    for t, array in zip(params, arrays):
        bind_param(node, t, array, inner)
    outputs = run(sub, {t.producer.name: a for t, a in zip(params, arrays)}, inner)
    return [outputs[t_name] for t_name in _result_names(sub)]


def _result_names(sub: Graph) -> list[str]:
    return [str(i) for i in range(len(subgraph_results(sub)))]


def bind_param(node: Node, param: Tensor, array: np.ndarray, symbols: dict) -> None:
    """Check `array` against subgraph parameter `param`'s type, binding its symbols."""
    where = f"subgraph input {param.name!r}"
    _check_array(node, where, param, array)
    pending = []
    for axis, (dim, size) in enumerate(zip(param.shape, array.shape)):
        if isinstance(dim, Dim) and dim.name is not None:
            _bind(node, f"{where} dim {axis}", dim, size, symbols)
        elif isinstance(dim, Dim):
            pending.append((axis, dim, size))
        elif dim != size:
            raise _error(node, f"{where} dim {axis}: size {size}, declared {dim}")
    for axis, dim, size in pending:
        _check_expression(node, f"{where} dim {axis}", dim, size, symbols)


def bind_output_symbols(node: Node, results: list, symbols: dict, dynamic) -> None:
    """Bind the node's dynamic symbols from its output arrays (checking their ranges and
    that outputs sharing a symbol agree), then check every output's dtype and shape."""
    fresh: dict[str, int] = {}
    for t, array in zip(node.outputs, results):
        _check_array(node, f"output {t.index}", t, array)
        for axis, (dim, size) in enumerate(zip(t.shape, array.shape)):
            if isinstance(dim, Dim) and dim.name in dynamic:
                _bind(node, f"output {t.index} dim {axis}", dim, size, fresh)
    symbols.update(fresh)
    for t, array in zip(node.outputs, results):
        for axis, (dim, size) in enumerate(zip(t.shape, array.shape)):
            if isinstance(dim, Dim):
                _check_expression(node, f"output {t.index} dim {axis}", dim, size, symbols)
            elif dim != size:
                raise _error(node, f"output {t.index} dim {axis}: size {size}, declared {dim}")


def run_data_dependent(node: Node, kernel, args: list, symbols: dict) -> list[np.ndarray]:
    """Run `kernel` of a node whose output sizes its input values decide (NonZero, ...):
    its dynamic symbols are bound into `symbols` from the result arrays, checked against
    their ranges and their registered bounds (what compiled backends sized buffers by)."""
    from mdsl.ops.dynamic import dynamic_symbols

    results = [np.asarray(r) for r in kernel(args, None)]
    if len(results) != len(node.outputs):
        raise ExecutionError(
            f"implementation returned {len(results)} values for {len(node.outputs)} outputs"
        )
    bind_output_symbols(node, results, symbols, dynamic_symbols(node))
    check_dynamic_bounds(node, symbols)
    bind_value_symbols(node, args[0] if args else None, symbols)
    return results


def bind_value_symbols(node: Node, array, symbols: dict) -> None:
    """Bind the symbols a ValueDims node reads off its input's values (checked to be
    valid sizes, and equal to what a compiled run bound before it started)."""
    from mdsl.ops.runtime_sizes import bound_values, value_symbols

    if not value_symbols(node):
        return
    try:
        values = bound_values(node, array)
    except ShapeError as e:
        raise _error(node, e.message) from None
    for name, value in values.items():
        _bind(node, f"value dim {name}", Dim(name), value, symbols)


def check_dynamic_bounds(node: Node, symbols: dict) -> None:
    """A data-dependent node's bound symbols lie within their registered upper bounds
    (what compiled backends sized the buffers by)."""
    from mdsl.ops.dynamic import dynamic_bounds

    for name, bound in dynamic_bounds(node).items():
        if bound is None or name not in symbols:
            continue
        try:
            hi = bound.evaluate(symbols) if isinstance(bound, Dim) else int(bound)
        except ShapeError:
            continue
        if symbols[name] > hi:
            raise _error(node, f"{name} = {symbols[name]} exceeds its bound {bound} = {hi}")


def _check_array(node: Node, where: str, t: Tensor, array) -> None:
    if not isinstance(array, np.ndarray) or array.dtype != t.dtype.np:
        got = f"{array.dtype}" if isinstance(array, np.ndarray) else type(array).__name__
        raise _error(node, f"{where}: got {got}, declared {t.type.describe()}")
    if array.ndim != t.ndim:
        raise _error(node, f"{where}: rank {array.ndim}, declared {t.type.describe()}")


def _bind(node: Node, where: str, dim: Dim, size: int, symbols: dict) -> None:
    name = dim.name
    if name in symbols and symbols[name] != size:
        raise _error(node, f"{where}: {name} = {size}, but {name} = {symbols[name]} already")
    if size < dim.min or (dim.max is not None and size > dim.max):
        hi = "inf" if dim.max is None else dim.max
        raise _error(node, f"{where}: {name} = {size} is outside its range [{dim.min}, {hi}]")
    symbols[name] = size


def _check_expression(node: Node, where: str, dim: Dim, size: int, symbols: dict) -> None:
    try:
        expected = dim.evaluate(symbols)
    except ShapeError as e:
        raise _error(node, f"{where}: {e.message}") from None
    if expected != size:
        raise _error(node, f"{where}: size {size}, declared {dim} = {expected}")


def _error(node: Node, message: str) -> ExecutionError:
    return ExecutionError(message, node=node.name, op_type=node.op_type, source=node.source)
