"""Scalar expressions: immutable DAG nodes built with plain Python operators.

An `Expr` is an op name, its argument expressions and, for leaves and casts, a value
(a variable's name, a constant, a cast's target dtype). `OPS` describes every op for
printers and renderers; `mdsl.expr.numpy_ops.NUMPY_OPS` says what each op computes.

Why identity hashing: `==` and `!=` build expressions (like every other comparison), so
they cannot also answer "are these the same expression". Hashing by identity keeps Expr
usable as a dict key or set member (a lookup never needs `==`); `same(a, b)` answers the
structural question.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mdsl.expr.numpy_ops import NUMPY_OPS
from mdsl.ir.dtype import DType
from mdsl.ir.errors import GraphError

ATOM = 10  # precedence of names, constants and calls: never parenthesized


@dataclass(frozen=True, slots=True)
class OpInfo:
    """What printers and renderers need to know about an op.

    symbol: the Python operator in the printed form (None: printed as a call `op(...)`).
    precedence: Python's binding strength, higher binds tighter.
    result: the result dtype rule: "promote" (numpy promotion of the arguments),
    "float" (promoted, float64 for integer arguments: exp, log, ...), "bool" (comparisons,
    logic), "cast" (the node's dtype value), "select" (of args 1, 2). Every target types
    expressions by it (`mdsl.codegen.expr_types`).
    """

    arity: int
    symbol: str | None = None
    precedence: int = ATOM
    result: str = "promote"


def _infix(symbol, precedence, result="promote"):
    return OpInfo(2, symbol, precedence, result)


FLOAT_FUNCTIONS = ("exp", "log", "tanh", "sigmoid", "erf", "sqrt", "rsqrt", "sin", "cos")
FLOAT_FUNCTIONS += ("asin", "acos", "atan", "asinh", "acosh", "atanh")
UNARY_FUNCTIONS = (*FLOAT_FUNCTIONS, "abs", "floor", "ceil", "round", "sign", "bitnot")
# the bits of integers (`and`, `or`, `xor` and `not` are logic on bools); shl and shr
# follow mdsl.expr.numpy_ops.shift_left / shift_right where C is undefined
BIT_FUNCTIONS = ("bitand", "bitor", "bitxor", "shl", "shr")

OPS: dict[str, OpInfo] = {
    "var": OpInfo(0),
    "const": OpInfo(0),
    "neg": OpInfo(1, "-", 7),
    "not": OpInfo(1, "~", 7, "bool"),
    "pow": _infix("**", 8),
    "mul": _infix("*", 6),
    "div": _infix("/", 6),
    "mod": _infix("%", 6),
    "add": _infix("+", 5),
    "sub": _infix("-", 5),
    "and": _infix("&", 4, "bool"),
    "xor": _infix("^", 3, "bool"),
    "or": _infix("|", 2, "bool"),
    **{op: _infix(s, 1, "bool") for op, s in [("lt", "<"), ("le", "<="), ("gt", ">")]},
    **{op: _infix(s, 1, "bool") for op, s in [("ge", ">="), ("eq", "=="), ("ne", "!=")]},
    **{op: OpInfo(2) for op in ("min", "max", "fmod", *BIT_FUNCTIONS)},
    **{op: OpInfo(1, result="float") for op in FLOAT_FUNCTIONS},
    **{op: OpInfo(1) for op in UNARY_FUNCTIONS if op not in FLOAT_FUNCTIONS},
    "select": OpInfo(3, result="select"),
    "cast": OpInfo(1, result="cast"),
}

_NOT_FOLDED = frozenset({"cast"})  # a cast constant must keep its dtype: leave it a node
_TEXT_LIMIT = 4000  # a DAG with much sharing prints exponentially long: elide beyond this


@dataclass(frozen=True, slots=True, eq=False)
class Expr:
    """One node of a scalar expression; build them with `var`, `const`, operators and the
    functions of `mdsl.expr`, not by calling Expr directly.

    >>> import mdsl
    >>> x = mdsl.expr.var("x")
    >>> print(x * mdsl.expr.sigmoid(1.702 * x))
    x * sigmoid(1.702 * x)
    """

    op: str
    args: tuple[Expr, ...] = ()
    value: object = None  # var: its name; const: a Python scalar; cast: a DType

    __array_ufunc__ = None  # `np.float32(2) * x` defers to Expr.__rmul__

    def __hash__(self):
        return id(self)

    def __bool__(self):
        raise GraphError(
            f"the expression {_short(self)} has no truth value; use "
            "mdsl.expr.select(cond, a, b) for a choice and mdsl.expr.same(a, b) to compare "
            "expressions"
        )

    def __str__(self):
        return to_text(self)

    def __repr__(self):
        return f"Expr({to_text(self)!r})"

    # arithmetic ------------------------------------------------------------------------
    def __add__(self, other):
        return apply("add", self, other)

    def __radd__(self, other):
        return apply("add", other, self)

    def __sub__(self, other):
        return apply("sub", self, other)

    def __rsub__(self, other):
        return apply("sub", other, self)

    def __mul__(self, other):
        return apply("mul", self, other)

    def __rmul__(self, other):
        return apply("mul", other, self)

    def __truediv__(self, other):
        return apply("div", self, other)

    def __rtruediv__(self, other):
        return apply("div", other, self)

    def __pow__(self, other):
        return apply("pow", self, other)

    def __rpow__(self, other):
        return apply("pow", other, self)

    def __mod__(self, other):
        return apply("mod", self, other)

    def __rmod__(self, other):
        return apply("mod", other, self)

    def __floordiv__(self, other):
        raise GraphError("mdsl.expr has no //; write mdsl.expr.floor(a / b)")

    __rfloordiv__ = __floordiv__

    def __neg__(self):
        return apply("neg", self)

    def __pos__(self):
        return self

    def __abs__(self):
        return apply("abs", self)

    # comparisons and logic -----------------------------------------------------------------
    def __lt__(self, other):
        return apply("lt", self, other)

    def __le__(self, other):
        return apply("le", self, other)

    def __gt__(self, other):
        return apply("gt", self, other)

    def __ge__(self, other):
        return apply("ge", self, other)

    def __eq__(self, other):
        return apply("eq", self, other)

    def __ne__(self, other):
        return apply("ne", self, other)

    def __and__(self, other):
        return apply("and", self, other)

    def __rand__(self, other):
        return apply("and", other, self)

    def __or__(self, other):
        return apply("or", self, other)

    def __ror__(self, other):
        return apply("or", other, self)

    def __xor__(self, other):
        return apply("xor", self, other)

    def __rxor__(self, other):
        return apply("xor", other, self)

    def __invert__(self):
        return apply("not", self)


# -- construction --------------------------------------------------------------------------
def var(name: str) -> Expr:
    """A variable, bound to an array by name when the expression is evaluated.

    >>> import mdsl
    >>> str(mdsl.expr.var("x") + 1)
    'x + 1'
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise GraphError(f"an expression variable needs an identifier name, got {name!r}")
    return Expr("var", (), name)


def const(value) -> Expr:
    """A constant (bool, int or float). Like Python scalars in the graph builder, it takes
    the dtype of the values it meets (numpy's weak-scalar rule); `cast` it to fix one.

    >>> import mdsl
    >>> mdsl.expr.const(2) * 3
    Expr('6')
    """
    if isinstance(value, Expr):
        return value
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    if isinstance(value, (np.bool_, np.integer, np.floating)):
        value = value.item()
    if not isinstance(value, (bool, int, float)):
        raise GraphError(
            f"an expression constant must be a bool, int or float, got {type(value).__name__}"
        )
    return Expr("const", (), value)


def as_expr(value) -> Expr:
    """`value` as an expression: Exprs pass through, scalars become constants."""
    return value if isinstance(value, Expr) else const(value)


def apply(op: str, *args) -> Expr:
    """The expression `op(*args)`, folded to a constant when every argument is one."""
    info = OPS.get(op)
    if info is None or info.arity == 0:
        raise GraphError(f"unknown expression op {op!r}; known: {', '.join(_callable_ops())}")
    if len(args) != info.arity:
        raise GraphError(f"expression op {op!r} takes {info.arity} arguments, got {len(args)}")
    exprs = tuple(as_expr(a) for a in args)
    if op not in _NOT_FOLDED and all(a.op == "const" for a in exprs):
        folded = _fold(op, [a.value for a in exprs])
        if folded is not None:
            return folded
    return Expr(op, exprs)


def cast(x, dtype) -> Expr:
    """`x` converted to `dtype` (an mdsl dtype or its name).

    >>> import mdsl
    >>> str(mdsl.expr.cast(mdsl.expr.var("x"), "float16"))
    'cast(x, "float16")'
    """
    return Expr("cast", (as_expr(x),), DType.of(dtype))


def _fold(op: str, values: list) -> Expr | None:
    try:
        with np.errstate(all="ignore"):
            result = NUMPY_OPS[op](*values)
    except (ArithmeticError, ValueError, TypeError):
        return None  # left to evaluation time, which reports it with context
    result = np.asarray(result)
    if result.ndim != 0:
        return None
    return Expr("const", (), result.item())


def _callable_ops() -> list[str]:
    return [op for op, info in OPS.items() if info.arity]


# -- traversal -------------------------------------------------------------------------------
def walk(*roots: Expr) -> list[Expr]:
    """Every distinct node reachable from `roots`, each after its arguments (topological).

    Iterative, so deep expressions do not hit Python's recursion limit; a node shared by
    several parents appears once.
    """
    order: list[Expr] = []
    seen: set[int] = set()
    stack = [(r, False) for r in reversed(roots)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        stack.extend((a, False) for a in reversed(node.args) if id(a) not in seen)
    return order


def variables(*roots: Expr) -> tuple[str, ...]:
    """Names of the variables used by `roots`, in order of first use.

    >>> import mdsl
    >>> x, y = mdsl.expr.var("x"), mdsl.expr.var("y")
    >>> mdsl.expr.variables(y * x + y)
    ('y', 'x')
    """
    names = dict.fromkeys(n.value for n in walk(*roots) if n.op == "var")
    return tuple(names)


def same(a, b) -> bool:
    """Whether two expressions are structurally identical (`==` builds an expression).

    >>> import mdsl
    >>> x = mdsl.expr.var("x")
    >>> mdsl.expr.same(x * 2 + 1, x * 2 + 1), mdsl.expr.same(x * 2, 2 * x)
    (True, False)
    """
    a, b = as_expr(a), as_expr(b)
    table: dict = {}
    ids_a, ids_b = _structural_ids(a, table), _structural_ids(b, table)
    return ids_a[id(a)] == ids_b[id(b)]


def _structural_ids(root: Expr, table: dict) -> dict[int, int]:
    ids: dict[int, int] = {}
    for node in walk(root):
        key = (node.op, _value_key(node.value), tuple(ids[id(a)] for a in node.args))
        ids[id(node)] = table.setdefault(key, len(table))
    return ids


def _value_key(value):
    # type name first: 1, 1.0 and True are different constants; repr separates -0.0 and nan
    return (type(value).__name__, repr(value))


# -- printing ------------------------------------------------------------------------------
def to_text(root: Expr) -> str:
    """Python-like infix text of `root`, with only the parentheses Python needs."""
    text: dict[int, tuple[str, int]] = {}
    for node in walk(root):
        text[id(node)] = _render(node, [text[id(a)] for a in node.args])
    return text[id(root)][0]


def _render(node: Expr, args: list[tuple[str, int]]) -> tuple[str, int]:
    info = OPS.get(node.op, OpInfo(len(args)))
    if node.op == "var":
        return node.value, ATOM
    if node.op == "const":
        return _const_text(node.value)
    if node.op == "cast":
        return _clip(f'cast({args[0][0]}, "{node.value}")'), ATOM
    if info.symbol is None:
        return _clip(f"{node.op}({', '.join(a for a, _ in args)})"), ATOM
    if info.arity == 1:
        return _clip(info.symbol + _paren(args[0], info.precedence)), info.precedence
    return _clip(_infix_text(node.op, info, args)), info.precedence


def _infix_text(op: str, info: OpInfo, args) -> str:
    p = info.precedence
    right_assoc, chained = op == "pow", p == 1  # comparisons chain in Python: a < b < c
    left = _paren(args[0], p + (right_assoc or chained))
    right = _paren(args[1], p + (not right_assoc))
    return f"{left} {info.symbol} {right}"


def _paren(arg: tuple[str, int], needed: int) -> str:
    text, precedence = arg
    return text if precedence >= needed else f"({text})"


def _const_text(value) -> tuple[str, int]:
    text = repr(value)
    return text, (7 if text.startswith("-") else ATOM)


def _clip(text: str) -> str:
    return text if len(text) <= _TEXT_LIMIT else text[:_TEXT_LIMIT] + "…"


def _short(e: Expr) -> str:
    text = to_text(e)
    return text if len(text) <= 60 else text[:57] + "..."


__all__ = [
    "OPS",
    "Expr",
    "OpInfo",
    "apply",
    "as_expr",
    "cast",
    "const",
    "same",
    "to_text",
    "var",
    "variables",
    "walk",
]
