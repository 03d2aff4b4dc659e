"""Choosing a node's implementation for the interpreter from the binding table."""

from __future__ import annotations

from collections.abc import Callable

from mdsl.ir.errors import ExecutionError
from mdsl.ir.graph import Node
from mdsl.ops.bindings import get_binding


def python_kernel(node: Node, impl: str = "auto") -> Callable:
    """A numpy callable for `node`: its "python" binding (impl="python"/"auto")."""
    binding = get_binding(node.op_type, "python") if impl in ("python", "auto") else None
    if binding is None:
        raise ExecutionError(
            f"no {impl!r} implementation bound for op {node.op_type!r}; "
            f"register one with mdsl.register_op_impl({node.op_type!r}, fn)",
            node=node.name,
            op_type=node.op_type,
            source=node.source,
        )
    return binding.fn
