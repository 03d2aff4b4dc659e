"""Rendering `mdsl.expr` expressions as numba-compilable Python, one entry per op.

numba types scalars its own way: integers narrower than 64 bits widen to int64 in
arithmetic, int32 * float32 is float64, and a bare literal `1.5` is float64. The C target
gets C's promotions for free; here every operand is converted to the operation's type
first and every narrow integer result is converted back, so that the text's numba type is
exactly the mdsl type the shared typing walk gives (`mdsl.codegen.expr_types`: float32
arithmetic stays float32, int8 wraps, an integer meeting a float constant is float64).
Half floats never appear: kernels compute them in float32 (`compute_type`).

>>> from mdsl import expr as E
>>> from mdsl.ir.dtype import DType
>>> r = NumbaExprRenderer({"x": DType.float32, "n": DType.int32})
>>> r.render(E.var("x") * 1.5 + 1.0, DType.float32)
'((x * np.float32(1.5)) + np.float32(1.0))'
>>> r.render(E.var("n") / 2, DType.int32)
'np.int32(rt.idiv(n, np.int32(2)))'
"""

from __future__ import annotations

import math

import numpy as np

from mdsl.codegen.expr_types import ExprTypes, compute_type
from mdsl.expr import Expr
from mdsl.expr.numpy_ops import saturating_astype
from mdsl.ir.dtype import DType

CTORS = {
    DType.bool_: "np.bool_",
    DType.int8: "np.int8",
    DType.uint8: "np.uint8",
    DType.int16: "np.int16",
    DType.int32: "np.int32",
    DType.int64: "np.int64",
    DType.uint16: "np.uint16",
    DType.uint32: "np.uint32",
    DType.uint64: "np.uint64",
    DType.float32: "np.float32",
    DType.float64: "np.float64",
}
# numba keeps these types through + - * /; every other result is converted back
NATIVE = (DType.float32, DType.float64, DType.int64)
SATURATION = {  # the float range each integer type saturates to (C target's mdsl_sat_*)
    DType.int8: (-128.0, 127.0),
    DType.uint8: (0.0, 255.0),
    DType.int16: (-32768.0, 32767.0),
    DType.int32: (-2147483648.0, 2147483647.0),
    DType.int64: (-9223372036854775808.0, 9223372036854774784.0),
    DType.uint16: (0.0, 65535.0),
    DType.uint32: (0.0, 4294967295.0),
    DType.uint64: (0.0, 18446744073709549568.0),
}

_INFIX = {"add": "+", "sub": "-", "mul": "*", "div": "/"}
_COMPARE = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
_LOGIC = {"and": "&", "or": "|", "xor": "!="}
_FLOAT_FUNCS = {
    "exp": "np.exp",
    "log": "np.log",
    "tanh": "np.tanh",
    "sqrt": "np.sqrt",
    "erf": "math.erf",
    "sin": "np.sin",
    "cos": "np.cos",
    "asin": "np.arcsin",
    "acos": "np.arccos",
    "atan": "np.arctan",
    "asinh": "np.arcsinh",
    "acosh": "np.arccosh",
    "atanh": "np.arctanh",
    "floor": "np.floor",
    "ceil": "np.ceil",
    "round": "np.rint",
    "abs": "np.abs",
}
_INT_IDENTITY = ("floor", "ceil", "round")
_BITS = {"bitand": "&", "bitor": "|", "bitxor": "^"}
_FLOAT_BINARY = {"min": "np.minimum", "max": "np.maximum", "pow": "np.power"}
_FLOAT_BINARY |= {"fmod": "np.fmod", "mod": "np.mod"}
_INT_BINARY = {"min": "np.minimum", "max": "np.maximum", "pow": "rt.ipow"}
_INT_BINARY |= {"fmod": "rt.ifmod", "mod": "rt.imod"}


def ctor(dtype: DType) -> str:
    """The numba-callable constructor of values of `dtype` (half floats compute in float32)."""
    return CTORS[compute_type(dtype)]


def convert(text: str, source: DType | None, target: DType) -> str:
    """`text` (of numba type `source`; None: an untyped literal) as a `target` value."""
    if source == target:
        return text
    if target == DType.bool_:
        return f"({text} != 0)"
    if source is not None and source.is_float and not target.is_float:
        lo, hi = SATURATION[target]
        return f"{CTORS[target]}(rt.saturate({text}, {lo!r}, {hi!r}))"
    return f"{CTORS[target]}({text})"


def literal(value, dtype: DType | None) -> str:
    """A constant as a `dtype` value (None: a plain Python literal)."""
    if isinstance(value, bool) or dtype == DType.bool_:
        return "True" if value else "False"
    if dtype is None:
        return _float_text(value) if isinstance(value, float) else repr(value)
    if not dtype.is_float and float(value).is_integer():
        return f"{CTORS[dtype]}({int(value)})"
    if not dtype.is_float:  # a fraction in integer arithmetic: computed in float64
        return _float_text(float(value))
    return f"{CTORS[dtype]}({_float_text(float(value))})"


def _float_text(value: float) -> str:
    if math.isnan(value):
        return "np.nan"
    if math.isinf(value):
        return "np.inf" if value > 0 else "(-np.inf)"
    return repr(value)


class NumbaExprRenderer:
    """Renders expressions given the (compute) dtype of every variable."""

    def __init__(self, var_types: dict[str, DType]):
        self.var_types = var_types
        self.types = ExprTypes(var_types)

    def render(self, e: Expr, want: DType | None = None) -> str:
        """numba text of `e`, converted to `want` when given."""
        text, t = self._render(e, want)
        return text if want is None else convert(text, t, compute_type(want))

    def type_of(self, e: Expr) -> DType | None:
        return self.types.of(e)

    def _render(self, e: Expr, want: DType | None) -> tuple[str, DType | None]:
        op = e.op
        if op == "var":
            return e.value, self.var_types[e.value]
        if op == "const":
            t = DType.bool_ if isinstance(e.value, bool) else want
            return literal(e.value, t), t
        if op == "cast":
            return self._cast(e.args[0], compute_type(e.value))
        if op in _INFIX:
            return self._arith(op, e.args, want)
        if op in _COMPARE:
            t = self.types.operands(e.args)
            a, b = (self._as(x, t) for x in e.args)
            return f"({a} {_COMPARE[op]} {b})", DType.bool_
        if op in _LOGIC:
            a, b = (self._as(x, DType.bool_) for x in e.args)
            return f"({a} {_LOGIC[op]} {b})", DType.bool_
        if op == "not":
            return f"(not {self._as(e.args[0], DType.bool_)})", DType.bool_
        if op == "neg":
            t = self.types.operands(e.args, want)
            return _narrowed(f"(-{self._as(e.args[0], t)})", t), t
        if op == "select":
            cond = self._as(e.args[0], DType.bool_)
            t = self.types.operands(e.args[1:], want)
            a, b = (self._as(x, t) for x in e.args[1:])
            return f"({a} if {cond} else {b})", t
        return self._call(op, e.args, want)

    def _as(self, e: Expr, t: DType) -> str:
        """`e` rendered as a `t` value."""
        text, source = self._render(e, t)
        return convert(text, source, t)

    def _arith(self, op: str, args, want):
        t = self.types.operands(args, want)
        a, b = (self._as(x, t) for x in args)
        if op == "div" and not t.is_float:
            return _narrowed(f"rt.idiv({a}, {b})", t), t
        return _narrowed(f"({a} {_INFIX[op]} {b})", t), t

    def _bits(self, op: str, args, want):
        """Integer bit operations; shifts out of range as numpy_ops.shift_left / right."""
        t = self.types.operands(args, want)
        texts = [self._as(a, t) for a in args]
        if op == "bitnot":
            return _narrowed(f"(~{texts[0]})", t), t
        if op in _BITS:
            return _narrowed(f"({texts[0]} {_BITS[op]} {texts[1]})", t), t
        x, y, bits = texts[0], texts[1], t.itemsize * 8
        inside = f"(0 <= {y} < {bits})"
        if op == "shl":
            return _narrowed(f"(({x} << {y}) if {inside} else 0)", t), t
        if t.is_unsigned:
            return _narrowed(f"(({x} >> {y}) if {inside} else 0)", t), t
        return _narrowed(f"({x} >> ({y} if {inside} else {bits - 1}))", t), t

    def _call(self, op: str, args, want):
        if op in _BITS or op in ("bitnot", "shl", "shr"):
            return self._bits(op, args, want)
        t = self.types.operands(args, want)
        if len(args) == 2:
            a, b = (self._as(x, t) for x in args)
            table = _FLOAT_BINARY if t.is_float else _INT_BINARY
            if op not in table:
                raise NotImplementedError(f"no numba rendering for expression op {op!r}")
            return _narrowed(f"{table[op]}({a}, {b})", t), t
        if not t.is_float and op in _INT_IDENTITY:
            return self._as(args[0], t), t
        if not t.is_float and op in ("abs", "sign"):
            fn = "abs" if op == "abs" else "np.sign"
            return _narrowed(f"{fn}({self._as(args[0], t)})", t), t
        if not t.is_float:  # a float function of an integer: computed in float64
            t = DType.float64
        x = self._as(args[0], t)
        one = literal(1.0, t)
        if op in _FLOAT_FUNCS:
            return f"{_FLOAT_FUNCS[op]}({x})", t
        if op == "sigmoid":
            return f"({one} / ({one} + np.exp(-{x})))", t
        if op == "rsqrt":
            return f"({one} / np.sqrt({x}))", t
        if op == "sign":  # numba's np.sign(-0.0) is -0.0; adding +0.0 makes it 0.0 like numpy's
            return f"(np.sign({x}) + {literal(0.0, t)})", t
        raise NotImplementedError(f"no numba rendering for expression op {op!r}")

    def _cast(self, arg: Expr, target: DType):
        if arg.op == "const":  # converted now, with the interpreter's saturation
            value = saturating_astype(np.asarray(arg.value), target.np).item()
            return literal(value, target), target
        text, source = self._render(arg, None)
        return convert(text, source, target), target


def _narrowed(text: str, t: DType) -> str:
    """numba computes narrow integers (and bools) in int64: convert the result back."""
    return text if t in NATIVE else f"{CTORS[t]}({text})"
