"""Implementation bindings: a table keyed by (op_type, backend), separate from prototypes.

Rebinding an op changes no graph, and changing a graph needs no rebinding. Backends:
"python" (numpy arrays in, numpy arrays out), "expr" (a scalar expression over
`mdsl.expr` values, fusable), "c" (source + symbol, or a prebuilt library).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from mdsl.ir.errors import GraphError

BACKENDS = ("python", "expr", "c")


@dataclass(frozen=True, slots=True)
class Binding:
    op_type: str
    backend: str
    fn: Callable | None
    options: dict = field(default_factory=dict)


_TABLE: dict[tuple[str, str], Binding] = {}
_LOCK = threading.Lock()


def register_op_impl(op_type: str, fn=None, *, backend: str = "python", **options):
    """Bind an implementation of `op_type` for `backend` (decorator or plain call).

    A later registration for the same (op_type, backend) replaces the earlier one.

    >>> import numpy as np, mdsl
    >>> @mdsl.register_op_impl("Double")
    ... def double_ref(x):
    ...     return x * 2
    >>> mdsl.ops.bindings.get_binding("Double", "python").fn(np.ones(2))
    array([2., 2.])
    """
    if backend not in BACKENDS:
        raise GraphError(f"unknown backend {backend!r} for {op_type}; expected {BACKENDS}")

    def bind(f):
        if backend == "c" and f is None and not options:
            raise GraphError(f"a 'c' binding of {op_type} needs source= and symbol=, or library=")
        with _LOCK:
            _TABLE[(op_type, backend)] = Binding(op_type, backend, f, dict(options))
        return f

    if fn is None and backend != "c":
        return bind
    return bind(fn)


def get_binding(op_type: str, backend: str) -> Binding | None:
    return _TABLE.get((op_type, backend))


def bindings_of(op_type: str) -> dict[str, Binding]:
    with _LOCK:
        return {b: v for (o, b), v in _TABLE.items() if o == op_type}
