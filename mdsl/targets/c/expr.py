"""Rendering `mdsl.expr` expressions as C, one table entry per op (tinygrad's code_for_op).

Types follow the expression: every variable has a known dtype; constants take the type of
what they combine with (a float constant in float32 arithmetic is `1.5f`). Half floats
never appear here: loads widen them to float and stores narrow them.
"""

from __future__ import annotations

from mdsl.codegen.expr_types import compute_type, promote
from mdsl.expr import Expr
from mdsl.ir.dtype import DType

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
}
_FLOAT_FUNCS = {
    "exp": "exp",
    "log": "log",
    "tanh": "tanh",
    "sqrt": "sqrt",
    "erf": "erf",
    "sin": "sin",
    "cos": "cos",
    "floor": "floor",
    "ceil": "ceil",
    "abs": "fabs",
    "round": "rint",
}
# float32 functions as vectorizable arithmetic (runtime.h.j2), not scalar libm calls
_VECTOR_FLOAT32 = {"erf": "mdsl_erf_f32", "tanh": "mdsl_tanh_f32"}
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
# int and wider: arithmetic in the unsigned type wraps where signed overflow is undefined
# (narrower types are promoted to int by C, which cannot overflow for them, except a
# product of two uint16 values, which can)
WRAPPING = {DType.int32: "uint32_t", DType.int64: "uint64_t", DType.uint16: "uint32_t"}


def _fraction(e: Expr) -> bool:
    """A constant that stays a float literal in integer arithmetic (a mean's 1/n)."""
    return e.op == "const" and isinstance(e.value, float) and not e.value.is_integer()


def _wrapped(t: DType, unsigned_expr: str) -> str:
    return f"(({C_TYPES[t]})({unsigned_expr}))"


class CExprRenderer:
    """Renders expressions given the dtype of every variable."""

    def __init__(self, var_types: dict[str, DType]):
        self.var_types = var_types

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
        return self._render(e, None)[1]

    def _render(self, e: Expr, want: DType | None) -> tuple[str, DType | None]:
        op = e.op
        if op == "var":
            return e.value, self.var_types[e.value]
        if op == "const":
            return self._const(e.value, want), None if not isinstance(
                e.value, bool
            ) else DType.bool_
        if op == "cast":
            return self._cast(e.args[0], e.value)
        if op in _INFIX:
            return self._infix(op, e.args, want)
        if op in _LOGIC:
            a, _ = self._render(e.args[0], DType.bool_)
            b, _ = self._render(e.args[1], DType.bool_)
            return f"((_Bool)({a}) {_LOGIC[op]} (_Bool)({b}))", DType.bool_
        if op == "not":
            return f"(!({self._render(e.args[0], DType.bool_)[0]}))", DType.bool_
        if op == "neg":
            text, t = self._render(e.args[0], want)
            if t in WRAPPING:
                return _wrapped(t, f"({WRAPPING[t]})0 - ({WRAPPING[t]})({text})"), t
            return f"(-{text})", t
        if op == "select":
            cond, _ = self._render(e.args[0], DType.bool_)
            t = (
                promote(self.type_of(e.args[1]), self.type_of(e.args[2]))
                if want is None
                else promote(promote(self.type_of(e.args[1]), self.type_of(e.args[2])), None)
            )
            a, _ = self._render(e.args[1], t)
            b, _ = self._render(e.args[2], t)
            return f"(({cond}) ? ({a}) : ({b}))", t
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

    def _infix(self, op, args, want):
        ta, tb = self.type_of(args[0]), self.type_of(args[1])
        t = promote(ta, tb) if (ta or tb) else (want or DType.float32)
        a, _ = self._render(args[0], t)
        b, _ = self._render(args[1], t)
        result = DType.bool_ if op in ("lt", "le", "gt", "ge", "eq", "ne") else t
        if op == "div" and not t.is_float and t != DType.bool_:
            return f"mdsl_div_{C_TYPES[t]}({a}, {b})", t  # no trap on / 0 or INT_MIN / -1
        if not t.is_float and result != DType.bool_ and any(map(_fraction, args)):
            return f"({a} {_INFIX[op]} {b})", DType.float32  # C computes it in float
        if op in ("add", "sub", "mul") and t in WRAPPING:
            return _wrapped(t, f"({WRAPPING[t]})({a}) {_INFIX[op]} ({WRAPPING[t]})({b})"), t
        return f"({a} {_INFIX[op]} {b})", result

    def _call(self, op, args, want):
        types = [self.type_of(a) for a in args]
        t = types[0] if len(types) == 1 else promote(types[0], types[1])
        t = t or want or DType.float32
        texts = [self._render(a, t)[0] for a in args]
        suffix = "f" if t == DType.float32 else ""
        if op in _VECTOR_FLOAT32 and t == DType.float32:
            return f"{_VECTOR_FLOAT32[op]}({texts[0]})", t
        if op in _FLOAT_FUNCS and t.is_float:
            return f"{_FLOAT_FUNCS[op]}{suffix}({texts[0]})", t
        if op == "abs":
            return f"mdsl_abs_{C_TYPES[t]}({texts[0]})", t
        if op in ("floor", "ceil", "round"):
            return texts[0], t
        if op == "sigmoid":
            return f"mdsl_sigmoid{suffix}({texts[0]})", t
        if op == "rsqrt":
            one = "1.0f" if t == DType.float32 else "1.0"
            return f"({one} / sqrt{suffix}({texts[0]}))", t
        if op == "sign" and t.is_float:
            return f"mdsl_sign{suffix}({texts[0]})", t  # NaN stays NaN
        if op == "sign":
            return f"(({texts[0]} > 0) - ({texts[0]} < 0))", t
        if op in ("min", "max"):
            return f"mdsl_{op}_{C_TYPES[t]}({texts[0]}, {texts[1]})", t
        if op == "pow":
            return (
                (f"pow{suffix}({texts[0]}, {texts[1]})", t)
                if t.is_float
                else (f"mdsl_ipow({texts[0]}, {texts[1]})", t)
            )
        if op == "fmod":
            return (
                (f"fmod{suffix}({texts[0]}, {texts[1]})", t)
                if t.is_float
                else (f"mdsl_rem_{C_TYPES[t]}({texts[0]}, {texts[1]})", t)
            )
        if op == "mod":
            kind = "f" if t.is_float else ("u" if t.is_unsigned else "i")
            return f"mdsl_pymod_{kind}{suffix if t.is_float else ''}({texts[0]}, {texts[1]})", t
        if op in _FLOAT_FUNCS:  # an integer argument to a float function
            return f"{_FLOAT_FUNCS[op]}((double){texts[0]})", DType.float64
        raise NotImplementedError(f"no C rendering for expression op {op!r}")

    def _cast(self, arg: Expr, target: DType):
        text, source = self._render(arg, None)
        target_c = compute_type(target)
        if target_c == DType.bool_:
            return f"((uint8_t)(({text}) != 0))", DType.bool_
        if source is not None and source.is_float and not target_c.is_float:
            return f"mdsl_sat_{C_TYPES[target_c]}({text})", target_c
        return f"(({C_TYPES[target_c]})({text}))", target_c
