"""The reference interpreter: runs a graph node by node with each op's numpy binding.

It is the living definition of what a graph computes; every backend and every pass is
tested against it. Feeds are validated against the declared inputs first, and every
node's result is checked against its inferred type, so a wrong shape rule or a wrong
reference is caught at the node that has it.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from mdsl.ir.errors import ExecutionError, MdslError
from mdsl.ir.graph import CONST, INPUT, OUTPUT, Graph, Node
from mdsl.ir.tensor_type import TensorType
from mdsl.runtime.feeds import bind_feeds, concrete_shape
from mdsl.runtime.kernels import python_kernel


def interpret(
    g: Graph, feeds: Mapping[str, np.ndarray], capture: bool = False, impl: str = "auto"
) -> dict[str, np.ndarray]:
    """Run `g` on `feeds` (input name -> array) and return its outputs by name.

    With `capture=True` the result holds every tensor by name (outputs included under
    their graph-output names). `impl` picks each op's implementation: "python" (the
    numpy binding), "expr" (the scalar-expression binding) or "auto" (python, else expr).

    >>> import numpy as np, mdsl
    >>> with mdsl.Graph() as g:
    ...     x = g.input("x", ("N",))
    ...     g.output(x * 2.0, "y")
    >>> mdsl.interpret(g, {"x": np.arange(3, dtype=np.float32)})["y"]
    array([0., 2., 4.], dtype=float32)
    """
    env, symbols = bind_feeds(g, feeds)
    values: dict = {}
    outputs: dict[str, np.ndarray] = {}
    for node in g:
        if node.op_type == OUTPUT:
            outputs[node.attrs["name"]] = values[node.inputs[0]]
            continue
        results = _run_node(node, values, env, impl)
        for tensor, value in zip(node.outputs, results):
            _check_result(node, tensor.type, value, symbols)
            values[tensor] = value
    if capture:
        captured = {t.name: v for t, v in values.items()}
        captured.update(outputs)
        return captured
    return outputs


def _run_node(node: Node, values: dict, env: dict, impl: str) -> list[np.ndarray]:
    if node.op_type == INPUT:
        return [env[node.name]]
    if node.op_type == CONST:
        return [node.const_value()]
    args = [None if t is None else values[t] for t in node.inputs]
    kernel = python_kernel(node, impl)
    try:
        result = kernel(*args, **node.attrs)
    except MdslError as e:
        raise e.with_context(node=node.name, op_type=node.op_type, source=node.source) from None
    except Exception as e:
        shapes = ", ".join("None" if a is None else f"{a.dtype}{list(a.shape)}" for a in args)
        raise ExecutionError(
            f"implementation raised {type(e).__name__}: {e} (inputs: {shapes})",
            node=node.name,
            op_type=node.op_type,
            source=node.source,
        ) from e
    return list(result) if isinstance(result, (tuple, list)) else [result]


def _check_result(node: Node, ttype: TensorType, value, symbols: dict) -> None:
    if not isinstance(value, np.ndarray):
        value = np.asarray(value)
    expected = concrete_shape(ttype.shape, symbols)
    if value.dtype != ttype.dtype.np or tuple(value.shape) != expected:
        raise ExecutionError(
            f"implementation returned {value.dtype}{list(value.shape)}, "
            f"the graph declares {ttype.dtype}{list(expected)}",
            node=node.name,
            op_type=node.op_type,
            source=node.source,
        )
