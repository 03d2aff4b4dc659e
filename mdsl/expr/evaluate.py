"""Evaluating scalar expressions over numpy arrays (elementwise, with broadcasting)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from mdsl.expr.node import Expr, as_expr, to_text, walk
from mdsl.expr.numpy_ops import NUMPY_OPS
from mdsl.ir.errors import ExecutionError


def evaluate(expr, env: Mapping[str, np.ndarray]):
    """The value of `expr` with each variable bound to `env[name]` (arrays broadcast like
    numpy). A sequence of expressions gives a tuple, sharing common subexpressions.

    Floating-point exceptions follow IEEE (overflow gives inf, 0/0 gives nan) without
    warnings, as compiled targets do. An expression of constants only gives a 0-d array.

    >>> import numpy as np, mdsl
    >>> x = mdsl.expr.var("x")
    >>> mdsl.expr.evaluate(mdsl.expr.max(x, 0) * 2, {"x": np.array([-1.0, 3.0])})
    array([0., 6.])
    """
    many = isinstance(expr, Sequence) and not isinstance(expr, (str, Expr))
    roots = [as_expr(e) for e in expr] if many else [as_expr(expr)]
    values: dict[int, object] = {}
    with np.errstate(all="ignore"):
        for node in walk(*roots):
            values[id(node)] = _value_of(node, values, env)
    results = tuple(np.asarray(values[id(r)]) for r in roots)
    return results if many else results[0]


def _value_of(node: Expr, values: dict, env: Mapping):
    if node.op == "var":
        if node.value not in env:
            known = ", ".join(sorted(map(str, env))) or "none"
            raise ExecutionError(
                f"expression variable {node.value!r} has no value (bound: {known})"
            )
        return env[node.value]
    if node.op == "const":
        return node.value
    fn = NUMPY_OPS.get(node.op)
    if fn is None:
        raise ExecutionError(f"expression op {node.op!r} has no numpy implementation")
    args = [values[id(a)] for a in node.args]
    if node.value is not None:
        args.append(node.value)
    try:
        return fn(*args)
    except Exception as e:
        shapes = ", ".join(_describe(a) for a in args[: len(node.args)])
        raise ExecutionError(
            f"evaluating {to_text(node)[:80]} failed: {type(e).__name__}: {e} (arguments: {shapes})"
        ) from e


def _describe(value) -> str:
    if isinstance(value, np.ndarray):
        return f"{value.dtype}[{','.join(map(str, value.shape))}]"
    return repr(value)
