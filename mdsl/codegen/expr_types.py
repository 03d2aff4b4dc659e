"""The dtype every expression node computes in: the one typing walk all targets share,
so their renderers are tables of text that never decide a type of their own.

The rules are the interpreter's (numpy's, with constants as weak Python scalars); each
expression op names its rule in `mdsl.expr.OPS` (`OpInfo.result`):

- half floats compute in float32 (`compute_type`); a variable has the compute type it is
  declared with (loads widen half floats before any expression reads them);
- a constant is untyped (None) and adapts to what it meets; a bool constant is bool;
- an op computes its operands in the widest typed operand's type (`promote`); an integer
  meeting a float constant computes in float64 (numpy: int32 array * 0.5 is float64);
  an op of untyped constants only takes the type its context wants (else float32);
- a float function (exp, log, sin, ...) of an integer computes in float64; comparisons
  and logic are bool; a cast is its target's compute type.

>>> from mdsl import expr as E
>>> from mdsl.ir.dtype import DType
>>> types = ExprTypes({"i": DType.int32, "x": DType.float32})
>>> types.of(E.var("i") * 0.5), types.of(E.var("i") + 2), types.of(E.var("x") * 2.0)
(mdsl.float64, mdsl.int32, mdsl.float32)
>>> types.of(E.exp(E.var("i"))), types.of(E.var("i") < 1.5), types.of(E.select(E.var("i") > 0, 1, 0), DType.int8)
(mdsl.float64, mdsl.bool_, mdsl.int8)
>>> compute_type(DType.float16), promote(DType.int32, DType.float32), promote(None, DType.int8)
(mdsl.float32, mdsl.float32, mdsl.int8)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from mdsl.expr import OPS, Expr
from mdsl.ir.dtype import DType

_RANK = {
    DType.bool_: 0,
    DType.int8: 1,
    DType.uint8: 1,
    DType.int16: 2,
    DType.int32: 3,
    DType.uint16: 2,
    DType.uint32: 3,
    DType.int64: 4,
    DType.uint64: 4,
    DType.float32: 5,
    DType.float64: 6,
}


def compute_type(dtype: DType) -> DType:
    return DType.float32 if dtype in (DType.float16, DType.bfloat16) else dtype


def promote(a: DType | None, b: DType | None) -> DType:
    """The type of a binary op of typed operands (None: a constant that adapts)."""
    if a is None:
        return b or DType.float32
    if b is None:
        return a
    return a if _RANK[a] >= _RANK[b] else b


def float_constant(e: Expr) -> bool:
    return e.op == "const" and isinstance(e.value, float)


class ExprTypes:
    """The compute dtype of expressions over variables of `var_types`."""

    def __init__(self, var_types: Mapping[str, DType]):
        self.var_types = var_types

    def of(self, e: Expr, want: DType | None = None) -> DType | None:
        """The type `e` computes in where its context wants `want` (None for an untyped
        constant, which takes the type of what it combines with)."""
        if e.op == "var":
            return self.var_types[e.value]
        if e.op == "const":
            return DType.bool_ if isinstance(e.value, bool) else None
        rule = OPS[e.op].result
        if rule == "cast":
            return compute_type(e.value)
        if rule == "bool":
            return DType.bool_
        if rule == "select":
            return self.operands(e.args[1:], want)
        t = self.operands(e.args, want)
        return DType.float64 if rule == "float" and not t.is_float else t

    def operands(self, args: Sequence[Expr], want: DType | None = None) -> DType:
        """The type an op computes its operands `args` in (see the module doc)."""
        typed = [t for t in (self.of(a) for a in args) if t is not None]
        if not typed:
            return want or DType.float32
        result = typed[0]
        for t in typed[1:]:
            result = promote(result, t)
        if not result.is_float and any(float_constant(a) for a in args):
            return DType.float64
        return result
