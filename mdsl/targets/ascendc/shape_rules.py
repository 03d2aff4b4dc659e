"""InferShape functions for CANN op packages, from the standard shape-rule families.

An op package's `SetInferShape` needs C++; mdsl writes it when the op's shapes follow one
of the families below, found from the op's example shapes (or named with `infer_shape=`):

    same       the output has the shape of the first input
    broadcast  numpy broadcasting of all inputs
    reduction  the first input without (or with size 1 at) `axes`
    matmul     (..., M, K) @ (..., K, N) -> (..., M, N)
    reshape    a fixed output shape
    concat     inputs joined along `axis`
    transpose  the first input's dims permuted by `perm`

Anything else is a CompileError saying how to supply the C++ InferShape by hand.

>>> detect([(4, 50), (50,)], (4, 50)).family
'broadcast'
>>> detect([(4, 5, 7)], (4, 7))
ShapeRule(family='reduction', params={'axes': (1,), 'keepdims': False})
>>> print(infer_shape_cpp(ShapeRule("same"), 0))
    *context->GetOutputShape(0) = *context->GetInputShape(0);
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from mdsl.ir.errors import CompileError

FAMILIES = ("same", "broadcast", "reduction", "matmul", "reshape", "concat", "transpose")
IND = "    "


@dataclass(frozen=True)
class ShapeRule:
    family: str
    params: dict = field(default_factory=dict)


def _broadcast(shapes) -> tuple[int, ...] | None:
    rank = max(len(s) for s in shapes)
    out = []
    for dims in itertools.zip_longest(*(reversed(s) for s in shapes), fillvalue=1):
        sizes = {d for d in dims if d != 1}
        if len(sizes) > 1:
            return None
        out.append(sizes.pop() if sizes else 1)
    return tuple(reversed(out))[-rank:] if rank else ()


def _reductions(shape, out) -> list[dict]:
    found = []
    rank = len(shape)
    for keep in (True, False):
        for r in range(1, rank + 1):
            for axes in itertools.combinations(range(rank), r):
                made = tuple(
                    (1 if i in axes else d) for i, d in enumerate(shape) if keep or i not in axes
                )
                if made == tuple(out) and any(shape[a] != 1 for a in axes):
                    found.append({"axes": axes, "keepdims": keep})
    return found


def detect(inputs: list[tuple[int, ...]], out: tuple[int, ...]) -> ShapeRule | None:
    """The family whose rule maps `inputs` to `out`, when exactly one reading fits."""
    out = tuple(out)
    if inputs and all(tuple(s) == tuple(inputs[0]) for s in inputs) and out == tuple(inputs[0]):
        return ShapeRule("same")
    if inputs and _broadcast(inputs) == out:
        return ShapeRule("broadcast")
    if len(inputs) >= 2 and min(len(inputs[0]), len(inputs[1])) >= 2:
        a, b = inputs[0], inputs[1]
        if a[-1] == b[-2] and out == (*a[:-1], b[-1]):
            return ShapeRule("matmul")
    if inputs:
        options = _reductions(inputs[0], out)
        if len(options) == 1:
            return ShapeRule("reduction", options[0])
    return None


def choose(op_type: str, inputs, out, requested, where: str) -> ShapeRule:
    """The shape rule of op `op_type`: `requested` (a family name or ShapeRule), else
    detected from the shapes; a CompileError saying what to do otherwise."""
    if isinstance(requested, ShapeRule):
        rule = requested
    elif isinstance(requested, str):
        rule = ShapeRule(requested)
    elif requested is None:
        rule = detect(inputs, out)
    else:
        raise CompileError(f"infer_shape= takes a family name or a ShapeRule, got {requested!r}")
    if rule is None or rule.family not in FAMILIES:
        shown = ", ".join(str(tuple(s)) for s in inputs)
        raise CompileError(
            f"op {op_type}: mdsl cannot write its InferShape: the shapes ({shown}) -> "
            f"{tuple(out)} follow none of the standard families ({', '.join(FAMILIES)}) "
            "unambiguously. Pass infer_shape=ShapeRule(family, params) (e.g. "
            "ShapeRule('reduction', {'axes': (1,), 'keepdims': False})), or write it in C++: "
            f"`static ge::graphStatus InferShape(gert::InferShapeContext *context)` in {where} "
            "and register it with this->SetInferShape(ge::InferShape)"
        )
    if rule.family == "reshape" and "shape" not in rule.params:
        rule = ShapeRule("reshape", {"shape": tuple(out)})
    return rule


def infer_shape_cpp(rule: ShapeRule, output: int) -> str:
    """C++ statements filling output `output`'s shape in an InferShape function."""
    out = f"context->GetOutputShape({output})"
    f, p = rule.family, rule.params
    if f == "same":
        return f"{IND}*{out} = *context->GetInputShape(0);"
    lines = [f"{IND}gert::Shape *y = {out};"]
    if f == "broadcast":
        lines += [
            f"{IND}size_t rank = 0;",
            f"{IND}for (size_t i = 0; i < context->GetComputeNodeInputNum(); ++i) {{",
            f"{IND}    rank = std::max(rank, context->GetInputShape(i)->GetDimNum());",
            f"{IND}}}",
            f"{IND}y->SetDimNum(rank);",
            f"{IND}for (size_t d = 0; d < rank; ++d) {{",
            f"{IND}    int64_t size = 1;",
            f"{IND}    for (size_t i = 0; i < context->GetComputeNodeInputNum(); ++i) {{",
            f"{IND}        const gert::Shape *x = context->GetInputShape(i);",
            f"{IND}        const size_t n = x->GetDimNum();",
            f"{IND}        const int64_t dim = d + n >= rank ? x->GetDim(d + n - rank) : 1;",
            f"{IND}        if (dim != 1 && size != 1 && dim != size) {{",
            f"{IND}            return ge::GRAPH_FAILED;  // not broadcastable",
            f"{IND}        }}",
            f"{IND}        size = dim != 1 ? dim : size;",
            f"{IND}    }}",
            f"{IND}    y->SetDim(d, size);",
            f"{IND}}}",
        ]
    elif f == "reduction":
        axes = ", ".join(str(a) for a in p["axes"])
        keep = "true" if p.get("keepdims") else "false"
        lines += [
            f"{IND}const gert::Shape *x = context->GetInputShape(0);",
            f"{IND}const size_t axes[] = {{{axes}}};",
            f"{IND}const bool keepdims = {keep};",
            f"{IND}size_t kept = 0;",
            f"{IND}y->SetDimNum(x->GetDimNum());",
            f"{IND}for (size_t d = 0; d < x->GetDimNum(); ++d) {{",
            f"{IND}    const bool reduced = std::find(std::begin(axes), std::end(axes), d) != std::end(axes);",
            f"{IND}    if (!reduced || keepdims) {{",
            f"{IND}        y->SetDim(kept++, reduced ? 1 : x->GetDim(d));",
            f"{IND}    }}",
            f"{IND}}}",
            f"{IND}y->SetDimNum(kept);",
        ]
    elif f == "matmul":
        lines += [
            f"{IND}const gert::Shape *a = context->GetInputShape(0);",
            f"{IND}const gert::Shape *b = context->GetInputShape(1);",
            f"{IND}if (a->GetDimNum() < 2 || b->GetDimNum() < 2 || a->GetDim(a->GetDimNum() - 1) != b->GetDim(b->GetDimNum() - 2)) {{",
            f"{IND}    return ge::GRAPH_FAILED;  // K of a differs from K of b",
            f"{IND}}}",
            f"{IND}*y = *a;",
            f"{IND}y->SetDim(a->GetDimNum() - 1, b->GetDim(b->GetDimNum() - 1));",
        ]
    elif f == "reshape":
        dims = list(p["shape"])
        lines.append(f"{IND}y->SetDimNum({len(dims)});")
        lines += [f"{IND}y->SetDim({i}, {d});" for i, d in enumerate(dims)]
    elif f == "concat":
        axis = int(p.get("axis", 0))
        lines += [
            f"{IND}*y = *context->GetInputShape(0);",
            f"{IND}int64_t total = 0;",
            f"{IND}for (size_t i = 0; i < context->GetComputeNodeInputNum(); ++i) {{",
            f"{IND}    total += context->GetInputShape(i)->GetDim({axis});",
            f"{IND}}}",
            f"{IND}y->SetDim({axis}, total);",
        ]
    elif f == "transpose":
        perm = list(p["perm"])
        lines += [f"{IND}const gert::Shape *x = context->GetInputShape(0);"]
        lines.append(f"{IND}y->SetDimNum({len(perm)});")
        lines += [f"{IND}y->SetDim({i}, x->GetDim({q}));" for i, q in enumerate(perm)]
    return "\n".join(lines)
