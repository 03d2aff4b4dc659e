"""Rendering `mdsl.expr` expressions as C, one table entry per op (tinygrad's code_for_op).

Types are the shared typing walk's (`mdsl.codegen.expr_types`): every variable has a known
dtype; constants take the type of what they combine with (a float constant in float32
arithmetic is `1.5f`); an integer meeting a float constant computes in double, as the
interpreter does. Half floats never appear here: loads widen them to float and stores
narrow them.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from mdsl.codegen.expr_types import ExprTypes, compute_type
from mdsl.expr import Expr, same
from mdsl.ir.dtype import STORAGE, DType

C_TYPES = {
    DType.bool_: "uint8_t",
    DType.int8: "int8_t",
    DType.uint8: "uint8_t",
    DType.int16: "int16_t",
    DType.int32: "int32_t",
    DType.int64: "int64_t",
    DType.uint16: "uint16_t",
    DType.uint32: "uint32_t",
    DType.uint64: "uint64_t",
    DType.float16: "_Float16",
    DType.bfloat16: "uint16_t",
    DType.float32: "float",
    DType.float64: "double",
    # storage types (float8, int4, ...) are one byte each, which only callbacks read
    **{d: "uint8_t" for d in STORAGE},
}


class CFunction(NamedTuple):
    """A float function as C calls it: `name` is libm's double function (float32 adds
    "f"); `libmvec`: glibc has vector variants, which runtime.h.j2 declares `omp declare
    simd` so simd loops call them; `float32`: the runtime.h.j2 helper computing it in
    float32 as vectorizable arithmetic instead of a scalar libm call."""

    name: str
    libmvec: bool = False
    float32: str | None = None


FLOAT_FUNCTIONS = {
    "exp": CFunction("exp", libmvec=True),
    "log": CFunction("log", libmvec=True),
    "tanh": CFunction("tanh", libmvec=True, float32="mdsl_tanh_f32"),
    "sqrt": CFunction("sqrt"),
    "erf": CFunction("erf", libmvec=True, float32="mdsl_erf_f32"),
    "sin": CFunction("sin", libmvec=True),
    "cos": CFunction("cos", libmvec=True),
    "asin": CFunction("asin"),
    "acos": CFunction("acos"),
    "atan": CFunction("atan"),
    "asinh": CFunction("asinh"),
    "acosh": CFunction("acosh"),
    "atanh": CFunction("atanh"),
    "floor": CFunction("floor"),
    "ceil": CFunction("ceil"),
    "abs": CFunction("fabs"),
    "round": CFunction("rint"),
}
# what runtime.h.j2 declares as vectorizable
LIBMVEC = tuple(f.name for f in FLOAT_FUNCTIONS.values() if f.libmvec)
_INFIX = {
    "add": "+",
    "sub": "-",
    "mul": "*",
    "div": "/",
    "lt": "<",
    "le": "<=",
    "gt": ">",
    "ge": ">=",
    "eq": "==",
    "ne": "!=",
}
_LOGIC = {"and": "&&", "or": "||", "xor": "!="}
_BITS = {"bitand": "&", "bitor": "|", "bitxor": "^"}
# int and wider: arithmetic in the unsigned type wraps where signed overflow is undefined
# (narrower types are promoted to int by C, which cannot overflow for them, except a
# product of two uint16 values, which can)
WRAPPING = {DType.int32: "uint32_t", DType.int64: "uint64_t", DType.uint16: "uint32_t"}


def _wrapped(t: DType, unsigned_expr: str) -> str:
    return f"(({C_TYPES[t]})({unsigned_expr}))"


def _is_const(e: Expr, value: float) -> bool:
    return e.op == "const" and not isinstance(e.value, bool) and e.value == value


def _other_operand(e: Expr, op: str, value: float) -> Expr | None:
    """y when `e` is `op(value, y)` or `op(y, value)` for the constant `value`."""
    if e.op == op:
        for const, other in (e.args, e.args[::-1]):
            if _is_const(const, value):
                return other
    return None


def _over_sqrt2(e: Expr) -> Expr | None:
    """x when `e` is `x / sqrt(2)` or `x * (1 / sqrt(2))`."""
    if e.op == "div" and _is_const(e.args[1], math.sqrt(2.0)):
        return e.args[0]
    return _other_operand(e, "mul", 1.0 / math.sqrt(2.0))


def _exact_gelu_input(e: Expr) -> Expr | None:
    """x when `e` is the exact GELU `0.5 * x * (1.0 + erf(x / sqrt(2)))` (ONNX Gelu's
    expression form, mdsl.ops.expr_lowering, factors in any order), which float32 renders
    as one `mdsl_gelu_f32` call; else None."""
    if e.op != "mul":
        return None
    for half, rest in (e.args, e.args[::-1]):
        x = _other_operand(half, "mul", 0.5)
        erf = _other_operand(rest, "add", 1.0)
        if x is not None and erf is not None and erf.op == "erf":
            scaled = _over_sqrt2(erf.args[0])
            if scaled is not None and same(scaled, x):
                return x
    return None


def _small_power(exponent: Expr) -> bool:
    """x ** 2 and x ** 3 (GELU-tanh's cube, a variance's square) are products: powf is a
    scalar libm call that no simd loop vectorizes (GPT-2's GELU ran 5x slower than ORT's)."""
    return (
        exponent.op == "const" and not isinstance(exponent.value, bool) and exponent.value in (2, 3)
    )


class CExprRenderer:
    """Renders expressions given the dtype of every variable."""

    def __init__(self, var_types: dict[str, DType]):
        self.var_types = var_types
        self.types = ExprTypes(var_types)

    def render(self, e: Expr, want: DType | None = None) -> str:
        """C text of `e`; `want` is the type the context expects (for constants)."""
        return self._render(e, want)[0]

    def render_as(self, e: Expr, dtype: DType) -> str:
        """C text of `e` converted for a slot of `dtype` (a Let or a store): a float value
        becoming an integer saturates and NaN becomes 0, a value becoming bool tests != 0,
        as the interpreter's `saturating_astype` does (C leaves float->int out of range
        undefined)."""
        target = compute_type(dtype)
        text = self.render(e, target)
        source = self.type_of(e)
        if source is None or not source.is_float or target.is_float:
            return text
        if target == DType.bool_:
            return f"((uint8_t)(({text}) != 0))"
        return f"mdsl_sat_{C_TYPES[target]}({text})"

    def type_of(self, e: Expr) -> DType | None:
        return self.types.of(e)

    def _render(self, e: Expr, want: DType | None) -> tuple[str, DType | None]:
        """(C text of `e`, its type)."""
        return self._text(e, want), self.types.of(e, want)

    def _text(self, e: Expr, want: DType | None) -> str:
        op = e.op
        if op == "var":
            return e.value
        if op == "const":
            return self._const(e.value, want)
        if op == "cast":
            return self._cast(e.args[0], e.value)
        if op == "mul" and self.types.of(e, want) == DType.float32:
            x = _exact_gelu_input(e)
            if x is not None:
                return f"mdsl_gelu_f32({self._text(x, DType.float32)})"
        if op in _INFIX:
            return self._infix(op, e.args, want)
        if op in _LOGIC:
            a = self._text(e.args[0], DType.bool_)
            b = self._text(e.args[1], DType.bool_)
            return f"((_Bool)({a}) {_LOGIC[op]} (_Bool)({b}))"
        if op == "not":
            return f"(!({self._text(e.args[0], DType.bool_)}))"
        if op in _BITS or op in ("bitnot", "shl", "shr"):
            return self._bits(op, e.args, want)
        if op == "neg":
            text, t = self._render(e.args[0], want)
            if t in WRAPPING:
                return _wrapped(t, f"({WRAPPING[t]})0 - ({WRAPPING[t]})({text})")
            return f"(-{text})"
        if op == "select":
            cond = self._text(e.args[0], DType.bool_)
            t = self.types.operands(e.args[1:], want)
            return f"(({cond}) ? ({self._text(e.args[1], t)}) : ({self._text(e.args[2], t)}))"
        return self._call(op, e.args, want)

    def _const(self, value, want: DType | None) -> str:
        if isinstance(value, bool):
            return "1" if value else "0"
        if want is not None and not want.is_float and isinstance(value, int):
            return f"INT64_C({value})" if want == DType.int64 else str(value)
        if (
            want is not None
            and not want.is_float
            and want != DType.bool_
            and float(value).is_integer()
        ):
            return str(int(value))
        value = float(value)
        if value != value:
            return "NAN"
        if value in (float("inf"), float("-inf")):
            return "INFINITY" if value > 0 else "(-INFINITY)"
        text = repr(value)
        return text if want == DType.float64 else f"{text}f"

    def _infix(self, op, args, want) -> str:
        compare = op in ("lt", "le", "gt", "ge", "eq", "ne")
        t = self.types.operands(args, None if compare else want)
        a, b = (self._text(x, t) for x in args)
        if op == "div" and not t.is_float and t != DType.bool_:
            return f"mdsl_div_{C_TYPES[t]}({a}, {b})"  # no trap on / 0 or INT_MIN / -1
        if op in ("add", "sub", "mul") and t in WRAPPING:
            return _wrapped(t, f"({WRAPPING[t]})({a}) {_INFIX[op]} ({WRAPPING[t]})({b})")
        return f"({a} {_INFIX[op]} {b})"

    def _bits(self, op, args, want) -> str:
        """Integer bit operations, converted back to the operands' type (C promotes
        narrow ones to int); shifts by the type's width or more, or by a negative count,
        are undefined in C: they give numpy_ops.shift_left / shift_right's results."""
        t = self.types.operands(args, want)
        c_type, texts = C_TYPES[t], [self._text(a, t) for a in args]
        if op == "bitnot":
            return f"(({c_type})~({texts[0]}))"
        if op in _BITS:
            return f"(({c_type})(({texts[0]}) {_BITS[op]} ({texts[1]})))"
        x, y, bits = texts[0], texts[1], t.itemsize * 8
        inside = f"(({y}) >= 0 && ({y}) < {bits})"
        if op == "shl":  # in the unsigned type: shifting into the sign bit is undefined
            unsigned = f"u{c_type}" if not t.is_unsigned else c_type
            return f"({inside} ? ({c_type})(({unsigned})({x}) << ({y})) : ({c_type})0)"
        if t.is_unsigned:
            return f"({inside} ? ({c_type})(({x}) >> ({y})) : ({c_type})0)"
        return f"(({c_type})(({x}) >> ({inside} ? ({y}) : {bits - 1})))"

    def _call(self, op, args, want) -> str:
        t = self.types.operands(args, want)
        texts = [self._text(a, t) for a in args]
        suffix = "f" if t == DType.float32 else ""
        function = FLOAT_FUNCTIONS.get(op)
        if function and function.float32 and t == DType.float32:
            return f"{function.float32}({texts[0]})"
        if function and t.is_float:
            return f"{function.name}{suffix}({texts[0]})"
        if op == "abs":
            return f"mdsl_abs_{C_TYPES[t]}({texts[0]})"
        if op in ("floor", "ceil", "round"):
            return texts[0]
        if op == "sigmoid":
            return f"mdsl_sigmoid{suffix}({texts[0]})"
        if op == "rsqrt":
            one = "1.0f" if t == DType.float32 else "1.0"
            return f"({one} / sqrt{suffix}({texts[0]}))"
        if op == "sign" and t.is_float:
            return f"mdsl_sign{suffix}({texts[0]})"  # NaN stays NaN
        if op == "sign":
            return f"(({texts[0]} > 0) - ({texts[0]} < 0))"
        if op in ("min", "max"):
            return f"mdsl_{op}_{C_TYPES[t]}({texts[0]}, {texts[1]})"
        if op == "pow" and t.is_float and _small_power(args[1]):
            return f"mdsl_pow{int(args[1].value)}{suffix}({texts[0]})"
        if op == "pow":
            return (
                f"pow{suffix}({texts[0]}, {texts[1]})"
                if t.is_float
                else f"mdsl_ipow({texts[0]}, {texts[1]})"
            )
        if op == "fmod":
            return (
                f"fmod{suffix}({texts[0]}, {texts[1]})"
                if t.is_float
                else f"mdsl_rem_{C_TYPES[t]}({texts[0]}, {texts[1]})"
            )
        if op == "mod":
            kind = "f" if t.is_float else ("u" if t.is_unsigned else "i")
            return f"mdsl_pymod_{kind}{suffix if t.is_float else ''}({texts[0]}, {texts[1]})"
        if function:  # an integer argument to a float function: in double
            return f"{function.name}((double){texts[0]})"
        raise NotImplementedError(f"no C rendering for expression op {op!r}")

    def _cast(self, arg: Expr, target: DType) -> str:
        text, source = self._render(arg, None)
        target_c = compute_type(target)
        if target_c == DType.bool_:
            return f"((uint8_t)(({text}) != 0))"
        if source is not None and source.is_float and not target_c.is_float:
            return f"mdsl_sat_{C_TYPES[target_c]}({text})"
        return f"(({C_TYPES[target_c]})({text}))"
