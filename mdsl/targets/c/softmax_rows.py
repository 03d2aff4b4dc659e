"""Softmax and log-softmax row kernels as calls of the runtime's row helpers.

The row program of a softmax (`mdsl.codegen.lower_rows`) is `m = max(a); s = sum(exp(a -
m)); y = exp(a - m) * (1 / s)`, of a log-softmax `m = max(a); s = sum(exp(a - m)); y = a -
(m + log(s))`, where `a` is the row's input expression (the Softmax input, or a fused
`x * scale + mask`). Over contiguous float32 rows the C target renders those phases as
one call of `mdsl_softmax_row_f32` / `mdsl_log_softmax_row_f32`
(`csrc/templates/c/softmax_rows.h.j2`: hand-vectorized with AVX-512, a polynomial `exp`);
an `a` that is not a plain load of a contiguous row is first written into the output
row, and the helper then runs in place. Every other row kernel keeps the generic loops.
"""

from __future__ import annotations

from dataclasses import dataclass

from mdsl import expr as E
from mdsl.codegen import kir
from mdsl.ir.dtype import DType


@dataclass(frozen=True)
class SoftmaxRows:
    """A row kernel that is a softmax (`kind` "softmax") or log-softmax of `value`
    over each row, written to `out`."""

    kind: str
    value: E.Expr
    out: kir.Access

    @property
    def helper(self) -> str:
        return f"mdsl_{self.kind}_row_f32"


def softmax_form(k: kir.Rowwise) -> SoftmaxRows | None:
    """The softmax `k` computes, when its phases are exactly one (see the module doc)."""
    phases = k.phases
    if len(phases) not in (3, 4) or not _is_reduce(phases[0], "max"):
        return None
    top, total = phases[0], phases[1]
    if not _is_reduce(total, "sum") or not _is_exp_of_shifted(total.value, top):
        return None
    store = phases[-1]
    if not isinstance(store, kir.RowStore) or store.lets or store.access.dtype != DType.float32:
        return None
    if len(phases) == 4:
        scale = phases[2]
        if not (isinstance(scale, kir.Let) and scale.dtype == DType.float32):
            return None
        if not _is_op(scale.value, "div", "const", "var") or scale.value.args[0].value != 1.0:
            return None
        if scale.value.args[1].value != total.var or not _is_scaled(
            store.value, total.value, scale.var
        ):
            return None
        return SoftmaxRows("softmax", top.value, store.access)
    if not _is_log_softmax(store.value, top, total):
        return None
    return SoftmaxRows("log_softmax", top.value, store.access)


def _is_reduce(phase, op: str) -> bool:
    return (
        isinstance(phase, kir.Reduce)
        and phase.op == op
        and not phase.lets
        and phase.dtype == DType.float32
    )


def _is_op(e: E.Expr, op: str, *arg_ops: str) -> bool:
    return (
        e.op == op
        and len(e.args) == len(arg_ops)
        and all(a.op == want for a, want in zip(e.args, arg_ops))
    )


def _same(a: E.Expr, b: E.Expr) -> bool:
    return a is b or str(a) == str(b)


def _is_var(e: E.Expr, name: str) -> bool:
    return e.op == "var" and e.value == name


def _is_exp_of_shifted(e: E.Expr, top: kir.Reduce) -> bool:
    """`e` is exp(a - m), `a` the max phase's value and `m` its result."""
    if e.op != "exp" or e.args[0].op != "sub":
        return False
    a, m = e.args[0].args
    return _same(a, top.value) and _is_var(m, top.var)


def _is_scaled(e: E.Expr, exp: E.Expr, scale: str) -> bool:
    """`e` is exp(a - m) * scale (either order)."""
    if e.op != "mul":
        return False
    x, y = e.args
    return (_same(x, exp) and _is_var(y, scale)) or (_same(y, exp) and _is_var(x, scale))


def _is_log_softmax(e: E.Expr, top: kir.Reduce, total: kir.Reduce) -> bool:
    """`e` is a - (m + log(s))."""
    if e.op != "sub" or not _same(e.args[0], top.value):
        return False
    shift = e.args[1]
    if shift.op != "add":
        return False
    m, log = shift.args
    return _is_var(m, top.var) and log.op == "log" and _is_var(log.args[0], total.var)


def plain_row_load(k: kir.Rowwise, form: SoftmaxRows, row_stride: dict) -> kir.Access | None:
    """The access of `form.value` when it is a float32 load with unit row stride (the
    helper then reads the input row itself)."""
    if form.value.op != "var" or form.value.value not in k.loads:
        return None
    access = k.loads[form.value.value]
    if access.dtype != DType.float32 or row_stride.get(id(access)) != 1:
        return None
    return access


def usable(k: kir.Rowwise, form: SoftmaxRows, row_stride: dict) -> bool:
    """Whether the helper applies: contiguous output rows, and no load of the output
    buffer but through the output's own elements (in place)."""
    if row_stride.get(id(form.out)) != 1:
        return False
    for a in k.loads.values():
        if a.buffer == form.out.buffer and (a.offset, a.strides) != (
            form.out.offset,
            form.out.strides,
        ):
            return False
    return True
