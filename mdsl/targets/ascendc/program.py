"""Expressions as AscendC vector instructions over one tile.

A kernel's `mdsl.expr` values become a straight-line sequence of vector instructions
(`Add`, `Muls`, `Exp`, `CompareScalar`, `Select`, ...) on float32 tiles of the Unified
Buffer. Values are tiles (`LocalTensor<float>`), per-tile scalars (C++ `float`
expressions such as a row's maximum) or masks (one bit per element, from `Compare`).
Intermediate tiles live in a pool of `tmp<i>` slices of one `TBuf<VECCALC>`; a slice is
reused as soon as its last reader has run, and instructions write in place when an
operand dies, so the pool stays as small as the expression allows. The planner sizes the
Unified Buffer from `VectorCode.temps` and `VectorCode.masks`.

Arithmetic runs in float32 (the Kernel IR's compute dtype for float16/bfloat16); loads
and stores of other float dtypes are cast around it by the kernel templates.

>>> from mdsl import expr as E
>>> code = compile_tiles({"y": E.exp(E.var("x") - E.var("m")) * 0.5},
...                      tiles={"x": "x"}, scalars={"m": "m"}, destinations={"y": "out"})
>>> print("\\n".join(code.lines))
Adds(tmp0, x, -(m), calcLen);
Exp(tmp0, tmp0, calcLen);
Muls(out, tmp0, 0.5f, calcLen);
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from mdsl import expr as E
from mdsl.ir.dtype import DType


class NotVectorizable(Exception):
    """The expression uses something the AscendC vector templates do not generate."""


@dataclass(slots=True)
class Value:
    """A compiled expression: kind is "tile", "scalar" or "mask"."""

    kind: str
    text: str
    temp: int | None = None  # the pool slot it owns (tiles and masks)
    writable: bool = False  # its storage may be overwritten once nothing else reads it


@dataclass(slots=True)
class VectorCode:
    """Instructions plus the resources they need."""

    lines: list[str] = field(default_factory=list)
    temps: int = 0  # float32 tiles of the pool used at once (peak)
    masks: int = 0  # mask tiles used at once (peak)
    library: set[str] = field(default_factory=set)  # math-library instructions on tiles
    scalar_functions: set[str] = field(default_factory=set)  # Scalar<op> helpers to define
    results: dict[str, Value] = field(default_factory=dict)  # roots without a destination


# vector instruction per unary op (tile -> tile): basic ones, then the math library's
# (they need scratch space of their own in the UB)
BASIC_UNARY = {"exp": "Exp", "log": "Ln", "sqrt": "Sqrt", "rsqrt": "Rsqrt", "abs": "Abs"}
MATH_LIBRARY_UNARY = {
    "tanh": "Tanh",
    "erf": "Erf",
    "sigmoid": "Sigmoid",
    "sin": "Sin",
    "cos": "Cos",
    "floor": "Floor",
    "ceil": "Ceil",
    "sign": "Sign",
}
UNARY = {**BASIC_UNARY, **MATH_LIBRARY_UNARY}
LIBRARY = frozenset({*MATH_LIBRARY_UNARY.values(), "Power"})
BINARY = {"add": "Add", "sub": "Sub", "mul": "Mul", "div": "Div", "max": "Max", "min": "Min"}
COMPARE = {"lt": "LT", "le": "LE", "gt": "GT", "ge": "GE", "eq": "EQ", "ne": "NE"}
FLIPPED = {"LT": "GT", "GT": "LT", "LE": "GE", "GE": "LE", "EQ": "EQ", "NE": "NE"}
# (op, scalar) pairs that leave a tile unchanged
IDENTITIES = {("mul", "1.0f"), ("div", "1.0f"), ("add", "0.0f"), ("sub", "0.0f")}
SCALAR_INFIX = {"add": "+", "sub": "-", "mul": "*", "div": "/"}
SCALAR_COMPARE = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}


def float_literal(value) -> str:
    """A C++ float literal (infinities and NaN through the project's constants)."""
    value = float(value)
    if math.isnan(value):
        return "MDSL_NAN"
    if math.isinf(value):
        return "MDSL_INF" if value > 0 else "(-MDSL_INF)"
    text = repr(value)
    if "e" not in text and "." not in text:
        text += ".0"
    return f"{text}f"


def compile_tiles(
    roots: dict[str, E.Expr],
    *,
    tiles: dict[str, str],
    scalars: dict[str, str] | None = None,
    destinations: dict[str, str] | None = None,
    count: str = "calcLen",
    clobber: set[str] | frozenset = frozenset(),
) -> VectorCode:
    """Instructions computing each root.

    tiles: expression variable -> C++ name of a float32 tile holding it; scalars: variable
    -> C++ float expression; destinations: root name -> float32 tile the result must end
    in (roots without one are left in `VectorCode.results`); count: the C++ element count
    of every instruction; clobber: tile variables that may be overwritten at their last use.
    """
    compiler = _Compiler(tiles, scalars or {}, count, clobber)
    compiler.count_uses(list(roots.values()))
    code = compiler.code
    for name, root in roots.items():
        dest = (destinations or {}).get(name)
        value = compiler.value(root, dest)
        if dest is None:
            code.results[name] = value
        else:
            compiler.move(value, dest)
            compiler.release(root, value)
    return code


class _Compiler:
    """One pass over the expression DAG in evaluation order.

    Ownership: a tile or mask value may own a pool slot (`Value.temp`). After an
    instruction runs, each operand with no readers left frees its slot, unless the
    instruction wrote its result into that very slot (in-place reuse).
    """

    def __init__(self, tiles, scalars, count, clobber):
        self.tiles = tiles
        self.scalars = scalars
        self.count = count
        self.clobber = set(clobber)
        self.code = VectorCode()
        self.uses: Counter = Counter()  # Expr id or var name -> readers not yet compiled
        self.done: dict[int, Value] = {}
        self.free = {"tile": [], "mask": []}
        self.live = {"tile": 0, "mask": 0}

    # -- bookkeeping -----------------------------------------------------------------------
    def count_uses(self, roots: list[E.Expr]) -> None:
        for node in E.walk(*roots):
            for arg in node.args:
                self.uses[_key(arg)] += 1
        for root in roots:
            self.uses[_key(root)] += 1

    def emit(self, line: str) -> None:
        self.code.lines.append(line)

    def new_slot(self, kind: str = "tile") -> Value:
        if self.free[kind]:
            index = self.free[kind].pop()
        else:
            index = self.live[kind]
            self.live[kind] += 1
            if kind == "tile":
                self.code.temps = self.live[kind]
            else:
                self.code.masks = self.live[kind]
        return Value(kind, f"{'tmp' if kind == 'tile' else 'mask'}{index}", index, writable=True)

    def drop(self, value: Value) -> None:
        """Give back a slot used for scratch inside one instruction sequence."""
        if value.temp is not None:
            self.free[value.kind].append(value.temp)

    def release(self, node: E.Expr, value: Value, result: Value | None = None) -> None:
        """One reader of `node` has run; free its slot after the last reader unless the
        reader's `result` now lives in it."""
        key = _key(node)
        self.uses[key] -= 1
        if self.uses[key] > 0 or value.temp is None:
            return
        if result is not None and result.kind == value.kind and result.temp == value.temp:
            return
        self.free[value.kind].append(value.temp)

    def dst(self, dest: str | None, operands) -> Value:
        """Where a tile result goes: the destination, the slot of an operand read here for
        the last time, or a fresh slot."""
        if dest is not None:
            return Value("tile", dest)
        for node, value in operands:
            if self.uses[_key(node)] == 1 and value.kind == "tile" and value.writable:
                return Value("tile", value.text, value.temp, writable=True)
        return self.new_slot()

    def finish(self, operands, line: str | None, out: Value) -> Value:
        if line is not None:
            self.emit(line)
        for node, value in operands:
            self.release(node, value, out)
        return out

    # -- compilation ---------------------------------------------------------------------------
    def value(self, node: E.Expr, dest: str | None = None) -> Value:
        if id(node) not in self.done:
            self.done[id(node)] = self._compile(node, dest)
        return self.done[id(node)]

    def _compile(self, node: E.Expr, dest: str | None) -> Value:
        op = node.op
        if op == "var":
            return self._var(node.value)
        if op == "const":
            if isinstance(node.value, bool):
                return Value("scalar", "true" if node.value else "false")
            return Value("scalar", float_literal(node.value))
        args = [self.value(a) for a in node.args]
        operands = list(zip(node.args, args))
        if all(a.kind == "scalar" for a in args) and op != "cast":
            return self._scalar(op, operands)
        if op in UNARY:
            return self._unary(operands, UNARY[op], dest)
        if op in BINARY:
            return self._binary(op, operands, BINARY[op], dest)
        if op in COMPARE:
            return self._compare(operands, COMPARE[op])
        handler = getattr(self, f"_op_{op}", None)
        if handler is None:
            raise NotVectorizable(f"expression op {op!r} has no AscendC vector form")
        return handler(node, operands, dest)

    def _var(self, name: str) -> Value:
        if name in self.tiles:
            return Value("tile", self.tiles[name], writable=name in self.clobber)
        if name in self.scalars:
            return Value("scalar", self.scalars[name])
        raise NotVectorizable(f"variable {name!r} is neither a tile nor a scalar here")

    # -- tile instructions -------------------------------------------------------------------------
    def _unary(self, operands, instr: str, dest) -> Value:
        ((_, a),) = operands
        if a.kind != "tile":
            raise NotVectorizable(f"{instr} of a boolean mask")
        if instr in LIBRARY:
            self.code.library.add(instr)
        out = self.dst(dest, operands)
        return self.finish(operands, f"{instr}({out.text}, {a.text}, {self.count});", out)

    def _binary(self, op, operands, instr: str, dest) -> Value:
        (_, a), (_, b) = operands
        if a.kind == "mask" or b.kind == "mask":
            raise NotVectorizable(f"{instr} of a boolean mask")
        if a.kind == "tile" and b.kind == "tile":
            out = self.dst(dest, operands)
            return self.finish(
                operands, f"{instr}({out.text}, {a.text}, {b.text}, {self.count});", out
            )
        if a.kind == "tile":
            return self._tile_scalar(op, operands, a, b.text, dest)
        return self._scalar_tile(op, operands, a.text, b, dest)

    def _tile_scalar(self, op, operands, tile: Value, s: str, dest) -> Value:
        tile_operand = [p for p in operands if p[1] is tile]
        if dest is None and (op, s) in IDENTITIES and self.uses[_key(tile_operand[0][0])] == 1:
            return self.finish(operands, None, tile)  # x * 1, x + 0, ...: the tile itself
        out = self.dst(dest, tile_operand)
        n = self.count
        if op == "add":
            line = f"Adds({out.text}, {tile.text}, {s}, {n});"
        elif op == "sub":
            line = f"Adds({out.text}, {tile.text}, -({s}), {n});"
        elif op == "mul":
            line = f"Muls({out.text}, {tile.text}, {s}, {n});"
        elif op == "div":
            line = f"Muls({out.text}, {tile.text}, 1.0f / ({s}), {n});"
        elif op == "max" and s == "0.0f":
            line = f"Relu({out.text}, {tile.text}, {n});"
        elif op == "max":
            line = f"Maxs({out.text}, {tile.text}, {s}, {n});"
        else:
            line = f"Mins({out.text}, {tile.text}, {s}, {n});"
        return self.finish(operands, line, out)

    def _scalar_tile(self, op, operands, s: str, tile: Value, dest) -> Value:
        if op in ("add", "mul", "max", "min"):  # commutative
            return self._tile_scalar(op, operands, tile, s, dest)
        n = self.count
        out = self.dst(dest, operands[1:])
        if op == "sub":  # s - t = (-t) + s
            self.emit(f"Muls({out.text}, {tile.text}, -1.0f, {n});")
            return self.finish(operands, f"Adds({out.text}, {out.text}, {s}, {n});", out)
        # s / t: the scalar broadcast into a tile, then an exact Div
        spare = self.new_slot() if out.text == tile.text else out
        self.emit(f"Duplicate({spare.text}, {s}, {n});")
        result = self.finish(operands, f"Div({out.text}, {spare.text}, {tile.text}, {n});", out)
        if spare is not out:
            self.drop(spare)
        return result

    def _compare(self, operands, mode: str) -> Value:
        (_, a), (_, b) = operands
        if a.kind == "mask" or b.kind == "mask":
            raise NotVectorizable("a comparison of boolean masks")
        mask = self.new_slot("mask")
        n = self.count
        if a.kind == "tile" and b.kind == "tile":
            line = f"Compare({mask.text}, {a.text}, {b.text}, CMPMODE::{mode}, {n});"
        elif a.kind == "tile":
            line = f"CompareScalar({mask.text}, {a.text}, (float)({b.text}), CMPMODE::{mode}, {n});"
        else:
            line = f"CompareScalar({mask.text}, {b.text}, (float)({a.text}), CMPMODE::{FLIPPED[mode]}, {n});"
        return self.finish(operands, line, mask)

    def _op_neg(self, node, operands, dest) -> Value:
        ((_, a),) = operands
        out = self.dst(dest, operands)
        return self.finish(operands, f"Muls({out.text}, {a.text}, -1.0f, {self.count});", out)

    def _op_pow(self, node, operands, dest) -> Value:
        (_, base), (exp_node, exponent) = operands
        if base.kind != "tile" or exponent.kind == "mask":
            raise NotVectorizable("pow needs a tile base")
        n = self.count
        small = {0.5: "Sqrt", -0.5: "Rsqrt", -1.0: "Reciprocal"}
        p = float(exp_node.value) if exp_node.op == "const" else None
        if p in small:
            out = self.dst(dest, operands[:1])
            return self.finish(operands, f"{small[p]}({out.text}, {base.text}, {n});", out)
        if p == 2.0:
            out = self.dst(dest, operands[:1])
            return self.finish(operands, f"Mul({out.text}, {base.text}, {base.text}, {n});", out)
        if p == 3.0:  # the square needs its own tile while the base is still read
            square = self.new_slot()
            self.emit(f"Mul({square.text}, {base.text}, {base.text}, {n});")
            out = Value("tile", dest) if dest is not None else square
            result = self.finish(
                operands, f"Mul({out.text}, {square.text}, {base.text}, {n});", out
            )
            if out is not square:
                self.drop(square)
            return result
        self.code.library.add("Power")
        out = self.dst(dest, operands if exponent.kind == "tile" else operands[:1])
        return self.finish(operands, f"Power({out.text}, {base.text}, {exponent.text}, {n});", out)

    def _op_select(self, node, operands, dest) -> Value:
        (_, cond), (a_node, a), (b_node, b) = operands
        if cond.kind != "mask" or a.kind == "mask" or b.kind == "mask":
            raise NotVectorizable("select needs a tile condition and numeric branches")
        n = self.count
        spare = None
        if a.kind == "scalar":  # Select takes the tile first: broadcast the scalar
            spare = self.new_slot()
            self.emit(f"Duplicate({spare.text}, (float)({a.text}), {n});")
            a = spare
        tiles = [(a_node, a)] if spare is None else []
        if b.kind == "tile":
            tiles.append((b_node, b))
        out = self.dst(dest, tiles)
        if b.kind == "tile":
            mode, second = "VSEL_TENSOR_TENSOR_MODE", b.text
        else:
            mode, second = "VSEL_TENSOR_SCALAR_MODE", f"(float)({b.text})"
        line = f"Select({out.text}, {cond.text}, {a.text}, {second}, SELMODE::{mode}, {n});"
        result = self.finish(operands, line, out)
        if spare is not None and spare.temp != out.temp:
            self.drop(spare)
        return result

    def _op_cast(self, node, operands, dest) -> Value:
        ((arg, a),) = operands
        target = node.value
        if target == DType.float64:
            raise NotVectorizable("float64 arithmetic (the vector unit has none)")
        if target == DType.float32 or (target.is_float and a.kind == "scalar"):
            return self.finish(operands, None, a) if a.kind != "tile" else self._same(operands, a)
        if target == DType.bool_:
            if a.kind == "mask":
                return self._same(operands, a)
            return self._compare([(arg, a), (E.const(0.0), Value("scalar", "0.0f"))], "NE")
        if a.kind != "tile":
            raise NotVectorizable(f"a {a.kind} cast to {target}")
        return self._round_trip(operands, a, target, dest)

    def _same(self, operands, a: Value) -> Value:
        """The operand itself is the result (a no-op cast): its slot changes hands."""
        return self.finish(operands, None, a)

    def _round_trip(self, operands, a: Value, target: DType, dest) -> Value:
        """float32 -> target -> float32: the rounding the cast implies, in float32 again."""
        narrow = {
            DType.float16: ("half", "CAST_RINT"),
            DType.bfloat16: ("bfloat16_t", "CAST_RINT"),
            DType.int32: ("int32_t", "CAST_TRUNC"),
        }
        if target not in narrow:
            raise NotVectorizable(f"cast to {target} inside a vector kernel")
        ctype, mode = narrow[target]
        spare = self.new_slot()
        n = self.count
        self.emit(
            f"Cast({spare.text}.ReinterpretCast<{ctype}>(), {a.text}, RoundMode::{mode}, {n});"
        )
        out = self.dst(dest, operands)
        line = (
            f"Cast({out.text}, {spare.text}.ReinterpretCast<{ctype}>(), RoundMode::CAST_NONE, {n});"
        )
        result = self.finish(operands, line, out)
        self.drop(spare)
        return result

    # -- scalars -------------------------------------------------------------------------------------
    def _scalar(self, op, operands) -> Value:
        texts = [value.text for _, value in operands]
        self.finish(operands, None, Value("scalar", ""))
        if op in SCALAR_INFIX:
            return Value("scalar", f"({texts[0]} {SCALAR_INFIX[op]} {texts[1]})")
        if op in SCALAR_COMPARE:
            return Value("scalar", f"({texts[0]} {SCALAR_COMPARE[op]} {texts[1]})")
        if op == "neg":
            return Value("scalar", f"(-{texts[0]})")
        if op == "abs":
            return Value("scalar", f"MdslAbs({texts[0]})")
        if op in ("max", "min"):
            return Value("scalar", f"Mdsl{op.capitalize()}({texts[0]}, {texts[1]})")
        if op == "select":
            return Value("scalar", f"({texts[0]} ? {texts[1]} : {texts[2]})")
        if op == "pow":
            self.code.scalar_functions.add("Power")
            return Value("scalar", f"ScalarPower({texts[0]}, {texts[1]})")
        if op in UNARY:
            self.code.scalar_functions.add(UNARY[op])
            return Value("scalar", f"Scalar{UNARY[op]}({texts[0]})")
        raise NotVectorizable(f"scalar expression op {op!r}")

    # -- results ---------------------------------------------------------------------------------------
    def move(self, value: Value, dest: str) -> None:
        """Make sure `value` ends in tile `dest`."""
        n = self.count
        if value.kind == "tile" and value.text != dest:
            self.emit(f"Adds({dest}, {value.text}, 0.0f, {n});")
        elif value.kind == "scalar":
            self.emit(f"Duplicate({dest}, (float)({value.text}), {n});")
        elif value.kind == "mask":
            self.emit(f"Duplicate({dest}, 1.0f, {n});")
            self.emit(
                f"Select({dest}, {value.text}, {dest}, 0.0f, SELMODE::VSEL_TENSOR_SCALAR_MODE, {n});"
            )


def _key(node: E.Expr):
    """Variables count by name (each use may be a distinct Expr object); others by identity."""
    return ("var", node.value) if node.op == "var" else id(node)
