"""Implementation bindings: a table keyed by (op_type, backend), separate from prototypes.

Rebinding an op changes no graph, and changing a graph needs no rebinding. Backends:
"python" (numpy arrays in, numpy arrays out), "expr" (a scalar expression over
`mdsl.expr` values, fusable), "c" (source + symbol, or a prebuilt library).

Every binding carries a registration serial, so a consumer can tell which of an op's
bindings is the newest (the interpreter's "auto" choice uses it). The library's own
expression lowerings of built-in ops are registered with `register_builtin_impl` and
count as older than any other registration.
"""

from __future__ import annotations

import inspect
import itertools
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from mdsl import expr
from mdsl.ir.errors import GraphError, MdslError
from mdsl.ops import registry

BACKENDS = ("python", "expr", "c")


@dataclass(frozen=True, slots=True)
class Binding:
    op_type: str
    backend: str
    fn: Callable | None
    options: dict = field(default_factory=dict)
    serial: int = 0  # registration order; negative for the library's built-in lowerings
    origin: str = "mdsl"  # the module that registered it

    @property
    def builtin(self) -> bool:
        return self.serial < 0

    @property
    def from_mdsl(self) -> bool:
        """Registered by mdsl's own code (not by a user's module)."""
        return self.origin == "mdsl" or self.origin.startswith("mdsl.")


_TABLE: dict[tuple[str, str], Binding] = {}
_LOCK = threading.Lock()
_SERIALS = itertools.count(1)
_BUILTIN_SERIALS = itertools.count(-(2**62))


def register_op_impl(op_type: str, fn=None, *, backend: str = "python", **options):
    """Bind an implementation of `op_type` for `backend` (decorator or plain call).

    A later registration for the same (op_type, backend) replaces the earlier one.
    An "expr" implementation takes one `mdsl.expr` variable per op input (named after
    the prototype's inputs) and the attrs as keywords, and returns an expression (a tuple
    for several outputs); when the op's prototype is known it is checked here.

    A "c" implementation is C code the compiled backend calls (it wins over the op's
    expression lowering, library kernels and Python callbacks): `source=` C text compiled
    into the graph's translation unit, or `library=` a prebuilt shared library linked
    into the graph's library; `symbol=` names the function, which has the signature::

        int symbol(const mdsl_tensor *inputs, int n_inputs,
                   mdsl_tensor *outputs, int n_outputs,
                   const double *attrs, int n_attrs);

    with `typedef struct { void *data; const int64_t *shape; int64_t size; int32_t ndim;
    int32_t dtype; } mdsl_tensor;` (contiguous row-major data; dtype codes
    MDSL_DTYPE_FLOAT32 etc., `mdsl_dtype_bytes(dtype)` an element's size; an absent
    optional input has data NULL and dtype -1).
    Outputs arrive allocated with their inferred shapes; attrs are the prototype's attrs
    in order as doubles (a str attr with `choices` as its choice index, NaN for other
    non-numeric ones), then each list-of-numbers attr in order as its length and its
    elements (length -1: absent). Return 0 on success; anything else
    fails the run with an ExecutionError naming the node. A `source=` gets these
    declarations from the generated code; a `library=` includes the header
    `mdsl.targets.c.custom.header_text()`. The interpreter cannot run a "c" binding: bind
    a "python" one too for `mdsl.interpret` and `mdsl.compare`.

    >>> import numpy as np, mdsl
    >>> @mdsl.register_op_impl("Double")
    ... def double_ref(x):
    ...     return x * 2
    >>> mdsl.ops.bindings.get_binding("Double", "python").fn(np.ones(2))
    array([2., 2.])
    >>> _ = mdsl.register_op_impl("Double", lambda x: x + x, backend="expr")
    """
    if backend not in BACKENDS:
        raise GraphError(f"unknown backend {backend!r} for {op_type}; expected {BACKENDS}")
    origin = sys._getframe(1).f_globals.get("__name__", "")  # the registering module

    def bind(f):
        checked = _check_impl(op_type, backend, f, options)
        _store(Binding(op_type, backend, f, checked, next(_SERIALS), origin))
        return f

    if fn is None and backend != "c":
        return bind
    return bind(fn)


def register_builtin_impl(op_type: str, fn: Callable, *, backend: str = "expr", **options):
    """Bind a library default: it never wins over a user's registration by recency."""
    checked = _check_impl(op_type, backend, fn, options)
    _store(Binding(op_type, backend, fn, checked, next(_BUILTIN_SERIALS)))


def _store(binding: Binding) -> None:
    with _LOCK:
        _TABLE[(binding.op_type, binding.backend)] = binding


def get_binding(op_type: str, backend: str) -> Binding | None:
    return _TABLE.get((op_type, backend))


def all_bindings() -> list[Binding]:
    with _LOCK:
        return list(_TABLE.values())


def bindings_of(op_type: str) -> dict[str, Binding]:
    with _LOCK:
        return {b: v for (o, b), v in _TABLE.items() if o == op_type}


# -- checking implementations ------------------------------------------------------------------
def _check_impl(op_type: str, backend: str, fn, options: dict) -> dict:
    """`options` checked (and normalized: a c binding's library path made absolute)."""
    if backend == "c":
        from mdsl.ops.c_options import checked_c_options

        return checked_c_options(op_type, fn, options)
    if not callable(fn):
        raise GraphError(
            f"the {backend} implementation of {op_type!r} must be callable, got {type(fn).__name__}"
        )
    if backend == "expr":
        _check_expr_options(op_type, options)
        if registry.has_op(op_type):
            _check_expr_impl(registry.get_op(op_type), fn, options)
    return dict(options)


EXPR_OPTIONS = ("axis_inputs", "axis")


def _check_expr_options(op_type: str, options: dict) -> None:
    """Options of an expr binding: `axis_inputs` names 1-D inputs laid along one axis of
    the output (per-channel parameters), `axis` that axis (an int, or the name of the
    attr holding it)."""
    unknown = sorted(set(options) - set(EXPR_OPTIONS))
    if unknown:
        raise GraphError(
            f"unknown option {', '.join(unknown)} for the expr binding of {op_type!r} "
            f"(known: {', '.join(EXPR_OPTIONS)})"
        )
    if "axis_inputs" in options and not isinstance(options.get("axis"), (int, str)):
        raise GraphError(
            f"the expr binding of {op_type!r} gives axis_inputs without an axis= "
            "(an int, or the name of the attr holding it)"
        )


def _check_expr_impl(opdef: registry.OpDef, fn: Callable, options: dict) -> None:
    """Check `fn` accepts the op's inputs and attrs; when every attr has a default and no
    input is variadic, call it once to check what it returns."""
    names = [s.name for s in opdef.inputs]
    _check_option_names(opdef, names, options)
    try:
        inspect.signature(fn).bind(*names, **dict.fromkeys(opdef.attrs))
    except TypeError as e:
        raise GraphError(
            f"expr implementation of {opdef.op_type!r} must accept "
            f"{_call_form(names, opdef.attrs)}: {e}"
        ) from None
    except ValueError:
        return  # no signature to inspect (a builtin): checked at use time
    variadic = any(s.variadic for s in (*opdef.inputs, *opdef.outputs))
    if variadic or any(a.required for a in opdef.attrs.values()):
        return
    defaults = {k: a.default for k, a in opdef.attrs.items()}
    expr_outputs(opdef.op_type, fn, names, defaults, len(opdef.outputs))


def _check_option_names(opdef: registry.OpDef, names: list[str], options: dict) -> None:
    strangers = [n for n in options.get("axis_inputs", ()) if n not in names]
    axis = options.get("axis")
    if isinstance(axis, str) and axis not in opdef.attrs:
        strangers.append(f"attr {axis}")
    if strangers:
        raise GraphError(
            f"the expr binding of {opdef.op_type!r} names {', '.join(strangers)}, which "
            f"{opdef.op_type} does not have"
        )


def _call_form(names: list[str], attrs: dict) -> str:
    kw = f", *, {', '.join(attrs)}" if attrs else ""
    return f"fn({', '.join(names)}{kw})"


def expr_outputs(
    op_type: str,
    fn: Callable,
    input_names: Sequence[str | None],
    attrs: dict,
    n_outputs: int,
    error: type[MdslError] = GraphError,
) -> list[expr.Expr]:
    """Call an expr implementation with one variable per input (None for an absent
    optional input) and return its output expressions, or raise `error` saying what is
    wrong with it."""
    args = [None if n is None else expr.var(n) for n in input_names]
    where = f"expr implementation of {op_type!r}"
    try:
        result = fn(*args, **attrs)
    except MdslError as e:
        raise error(f"{where} raised: {e.message}") from None
    except Exception as e:
        raise error(f"{where} raised {type(e).__name__}: {e}") from e
    outs = list(result) if isinstance(result, (tuple, list)) else [result]
    if len(outs) != n_outputs:
        raise error(f"{where} returned {len(outs)} expressions for {n_outputs} outputs")
    exprs = [_as_output_expr(where, i, o, error) for i, o in enumerate(outs)]
    unknown = [v for v in expr.variables(*exprs) if v not in input_names]
    if unknown:
        raise error(
            f"{where} uses variables {', '.join(unknown)}, which are not inputs of {op_type} "
            f"(inputs: {', '.join(n for n in input_names if n)})"
        )
    return exprs


def _as_output_expr(where: str, index: int, value, error) -> expr.Expr:
    if isinstance(value, expr.Expr):
        return value
    if isinstance(value, (bool, int, float)):
        return expr.const(value)
    raise error(
        f"{where} returned {type(value).__name__} for output {index}, not an mdsl.expr "
        "expression; an implementation on numpy arrays is registered with backend='python'"
    )
