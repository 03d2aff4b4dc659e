"""C bodies of `kir.Indexed` kernels: gathers, scatters, scans, selections, index maps.

Each renderer returns the body of one kernel function (the caller wraps it, see
`mdsl.targets.c.render`). Sizes are the kernel's static ints; a bad index makes the function return
1 before it writes anything that depends on it, and the run reports the kernel's error.
"""

from __future__ import annotations

from mdsl.codegen import kir
from mdsl.codegen.dims import render_dim
from mdsl.ir.dim import Dim
from mdsl.ir.dtype import DType
from mdsl.targets.c.expr import C_TYPES

INDENT = "    "
PARALLEL_MIN = 32768  # as in mdsl.targets.c.render: smaller loops stay on one thread
_ACCUMULATOR = {
    DType.float32: "double",  # the reference sums floats in float64
    DType.float64: "double",
    DType.int32: "uint64_t",  # unsigned: wraps like numpy, no signed overflow
    DType.int64: "uint64_t",
}


def render_indexed_body(plan, k: kir.Indexed) -> str:
    lines = _RENDER[k.op](k, [C_TYPES[d] for d in k.dtypes])
    return "\n".join(INDENT + line for line in lines)


def _omp(work) -> list[str]:
    if isinstance(work, Dim):
        return [f"#pragma omp parallel for if({render_dim(work)} > {PARALLEL_MIN})"]
    return ["#pragma omp parallel for"] if work > PARALLEL_MIN else []


def _indented(lines: list[str], depth: int = 1) -> list[str]:
    return [INDENT * depth + line for line in lines]


def _checked_index(var: str, source: str, size: int) -> list[str]:
    """`var` = the index read from `source`, wrapped if negative; return 1 if outside."""
    return [
        f"int64_t {var} = (int64_t){source};",
        f"if ({var} < -{size} || {var} >= {size}) return 1;",
        f"if ({var} < 0) {var} += {size};",
    ]


def _gather(k: kir.Indexed, types: list[str]) -> list[str]:
    p = k.params
    data, idx = k.inputs
    out = k.outputs[0]
    outer, size, inner, count = (render_dim(p[n]) for n in ("outer", "size", "inner", "count"))
    rows = render_dim(p["outer"] * p["count"])
    lines = [
        f"/* {outer} x {count} rows of {inner} element(s), picked from {size} rows */",
        f"for (int64_t i = 0; i < {count}; i++) {{",
        f"{INDENT}if ({idx}[i] < -{size} || {idx}[i] >= {size}) return 1;",
        "}",
        *_omp(p["outer"] * p["count"] * p["inner"]),
        f"for (int64_t r = 0; r < {rows}; r++) {{",
        f"{INDENT}int64_t v = (int64_t){idx}[r % {count}];",
        f"{INDENT}if (v < 0) v += {size};",
        f"{INDENT}const {types[0]} *src = {data} + ((r / {count}) * {size} + v) * {inner};",
        f"{INDENT}{types[2]} *dst = {out} + r * {inner};",
    ]
    if p["inner"] == 1:
        lines.append(f"{INDENT}dst[0] = src[0];")
    else:
        lines.append(f"{INDENT}memcpy(dst, src, sizeof({types[0]}) * {inner});")
    return [*lines, "}"]


def _element_offset(p: dict) -> list[str]:
    """Lines computing `off` (the data offset of flat index position `f` over the index
    shape, the axis left out) and the coordinates `pos<d>` (not `c<d>`: constants are named so)."""
    shape, strides, axis = p["index_shape"], p["data_strides"], p["axis"]
    lines = ["int64_t rem = f, off = 0;"]
    for d in reversed(range(len(shape))):
        lines.append(f"const int64_t pos{d} = rem % {shape[d]}; rem /= {shape[d]};")
        if d != axis:
            lines.append(f"off += pos{d} * {strides[d]};")
    lines.append(f"(void)pos{axis};")
    return lines


def _count(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _gather_elements(k: kir.Indexed, types: list[str]) -> list[str]:
    p = k.params
    data, idx = k.inputs
    step = p["data_strides"][p["axis"]]
    body = [
        *_element_offset(p),
        *_checked_index("v", f"{idx}[f]", p["size"]),
        f"{k.outputs[0]}[f] = {data}[off + v * {step}];",
    ]
    return [f"for (int64_t f = 0; f < {_count(p['index_shape'])}; f++) {{", *_indented(body), "}"]


_COMBINE = {
    "none": "{dst} = {src};",
    "add": "{dst} += {src};",
    "mul": "{dst} *= {src};",
    "max": "{dst} = mdsl_max_{t}({dst}, {src});",
    "min": "{dst} = mdsl_min_{t}({dst}, {src});",
}


def _scatter_elements(k: kir.Indexed, types: list[str]) -> list[str]:
    """A copy of the data, then the updates in index order (the last repeat wins)."""
    p = k.params
    data, idx, updates = k.inputs
    out = k.outputs[0]
    step = p["data_strides"][p["axis"]]
    combine = _COMBINE[p["reduction"]].format(
        dst=f"{out}[off + v * {step}]", src=f"{updates}[f]", t=types[0]
    )
    body = [*_element_offset(p), *_checked_index("v", f"{idx}[f]", p["size"]), combine]
    return [
        f"memcpy({out}, {data}, sizeof({types[0]}) * {p['total']});",
        f"for (int64_t f = 0; f < {_count(p['index_shape'])}; f++) {{",
        *_indented(body),
        "}",
    ]


def _rows(p: dict) -> list[str]:
    """The loop over rows (outer x inner) along the axis, with `base` = the offset of
    the row's first element and `step` = the distance between its elements."""
    outer, size, inner = p["outer"], p["size"], p["inner"]
    return [
        *_omp(outer * size * inner),
        f"for (int64_t row = 0; row < {outer * inner}; row++) {{",
        f"{INDENT}const int64_t base = (row / {inner}) * {size * inner} + row % {inner};",
        f"{INDENT}const int64_t step = {inner}; (void)step;",
    ]


def _cumsum(k: kir.Indexed, types: list[str]) -> list[str]:
    p = k.params
    x, y = k.inputs[0], k.outputs[0]
    acc_t = _ACCUMULATOR[k.dtypes[0]]
    size = p["size"]
    j = f"({size - 1} - j)" if p["reverse"] else "j"
    read = f"({acc_t}){x}[at]"
    step, start = ("*=", 1) if p.get("product") else ("+=", 0)  # CumProd, CumSum
    if p["exclusive"]:
        update = [f"{y}[at] = ({types[1]})acc;", f"acc {step} {read};"]
    else:
        update = [f"acc {step} {read};", f"{y}[at] = ({types[1]})acc;"]
    inner = [f"const int64_t at = base + {j} * step;", *update]
    return [
        *_rows(p),
        f"{INDENT}{acc_t} acc = {start};",
        f"{INDENT}for (int64_t j = 0; j < {size}; j++) {{",
        *_indented(inner, 2),
        f"{INDENT}}}",
        "}",
    ]


def _better(a: str, b: str, largest: bool, is_float: bool) -> str:
    """C test: `a` comes strictly before `b` (NaN is the largest value, as in numpy)."""
    if not is_float:
        return f"({a} > {b})" if largest else f"({a} < {b})"
    if largest:
        return f"(({a} != {a} && {b} == {b}) || {a} > {b})"
    return f"(({a} == {a} && {b} != {b}) || {a} < {b})"


def _topk(k: kir.Indexed, types: list[str]) -> list[str]:
    """Insertion into the output row, which stays sorted: a later equal element goes
    after the earlier ones (ties keep the lower index first)."""
    p = k.params
    x = k.inputs[0]
    vals, idxs = k.outputs
    size, inner, kk = p["size"], p["inner"], p["k"]
    if kk == 0:
        return ["/* k = 0: empty outputs */"]
    is_float = k.dtypes[0].is_float
    t = types[0]
    at = f"obase + (q) * {inner}"
    better_last = _better(
        "v", f"{vals}[{at.replace('(q)', f'({kk - 1})')}]", p["largest"], is_float
    )
    better_prev = _better("v", f"{vals}[{at.replace('(q)', '(q - 1)')}]", p["largest"], is_float)
    body = [
        f"const int64_t obase = (row / {inner}) * {kk * inner} + row % {inner};",
        "int64_t filled = 0;",
        f"for (int64_t j = 0; j < {size}; j++) {{",
        f"{INDENT}const {t} v = {x}[base + j * step];",
        f"{INDENT}if (filled == {kk} && !{better_last}) continue;",
        f"{INDENT}int64_t q = filled < {kk} ? filled : {kk - 1};",
        f"{INDENT}while (q > 0 && {better_prev}) {{",
        f"{INDENT * 2}{vals}[{at}] = {vals}[{at.replace('(q)', '(q - 1)')}];",
        f"{INDENT * 2}{idxs}[{at}] = {idxs}[{at.replace('(q)', '(q - 1)')}];",
        f"{INDENT * 2}q--;",
        f"{INDENT}}}",
        f"{INDENT}{vals}[{at}] = v;",
        f"{INDENT}{idxs}[{at}] = j;",
        f"{INDENT}if (filled < {kk}) filled++;",
        "}",
    ]
    return [*_rows(p), *_indented(body), "}"]


def _arg_reduce(k: kir.Indexed, types: list[str]) -> list[str]:
    """The first extreme (the last with select_last_index); a NaN wins, as in numpy."""
    p = k.params
    x, out = k.inputs[0], k.outputs[0]
    cmp = ">" if p["max"] else "<"
    is_float = k.dtypes[0].is_float
    replace = f"v {cmp} best" + (" || v == best" if p["last"] else "")
    body = [
        f"{types[0]} best = {x}[base];",
        "int64_t at = 0;",
        f"for (int64_t j = 1; j < {p['size']}; j++) {{",
        f"{INDENT}const {types[0]} v = {x}[base + j * step];",
    ]
    if is_float:
        nan_update = "if (v != v) at = j; " if p["last"] else ""
        body += [
            f"{INDENT}if (best != best) {{ {nan_update}continue; }}",
            f"{INDENT}if (v != v) {{ best = v; at = j; continue; }}",
        ]
    body += [f"{INDENT}if ({replace}) {{ best = v; at = j; }}", "}"]
    body.append(f"{out}[(row / {p['inner']}) * {p['inner']} + row % {p['inner']}] = at;")
    return [*_rows(p), *_indented(body), "}"]


def _fill_value(dtype: DType, value: float) -> str:
    if dtype == DType.bfloat16:
        return f"mdsl_bf16_store((float){_float_literal(value)})"
    if dtype.is_float:
        return f"({C_TYPES[dtype]}){_float_literal(value)}"
    return f"({C_TYPES[dtype]}){int(value)}"


def _float_literal(value: float) -> str:
    """A C double literal; inf and NaN are the macros (`repr` would write `inf`)."""
    value = float(value)
    if value != value:
        return "NAN"
    if value in (float("inf"), float("-inf")):
        return "INFINITY" if value > 0 else "(-INFINITY)"
    return repr(value)


def _index_map(k: kir.Indexed, types: list[str]) -> list[str]:
    """out[i0, i1, ...] = x[tab0[i0], tab1[i1], ...], or the constant where a table
    holds -1 (Pad in every mode)."""
    p = k.params
    x, out = k.inputs[0], k.outputs[0]
    shape, strides, tables = p["shape"], p["strides"], p["tables"]
    if _count(shape) == 0:
        return ["/* empty output */"]
    lines = []
    for d, table in enumerate(tables):
        values = ", ".join(map(str, table))
        lines.append(f"static const int64_t tab{d}[{len(table)}] = {{{values}}};")
    out_strides = []
    step = 1
    for n in reversed(shape):
        out_strides.append(step)
        step *= n
    out_strides.reverse()
    fill = _fill_value(k.dtypes[1], p["value"])
    lines += _omp(_count(shape))
    rank = len(shape)
    for d in range(rank):
        pad = INDENT * d
        lines.append(f"{pad}for (int64_t i{d} = 0; i{d} < {shape[d]}; i{d}++) {{")
        lines.append(f"{pad}{INDENT}const int64_t s{d} = tab{d}[i{d}];")
    pad = INDENT * rank
    valid = " && ".join(f"s{d} >= 0" for d in range(rank))
    source = " + ".join(f"s{d} * {strides[d]}" for d in range(rank))
    target = " + ".join(f"i{d} * {out_strides[d]}" for d in range(rank))
    lines.append(f"{pad}{out}[{target}] = ({valid}) ? {x}[{source}] : {fill};")
    for d in reversed(range(rank)):
        lines.append(INDENT * d + "}")
    return lines


def _interpolate(k: kir.Indexed, types: list[str]) -> list[str]:
    """out[i0, ...] = sum over the taps of each resized axis d of the product of their
    weights w<d> times x at their source indices idx<d> (linear and cubic Resize); the
    other axes read x at i<d>. Summed in double, as the reference."""
    p = k.params
    x, out = k.inputs[0], k.outputs[0]
    shape, strides, taps = p["shape"], p["strides"], p["taps"]
    if _count(shape) == 0:
        return ["/* empty output */"]
    lines = []
    for d, (idx, w) in taps.items():  # tap-major: [t * shape[d] + i]
        flat_idx = ", ".join(str(v) for row in idx for v in row)
        flat_w = ", ".join(repr(float(v)) for row in w for v in row)
        lines.append(f"static const int64_t idx{d}[{len(idx) * shape[d]}] = {{{flat_idx}}};")
        lines.append(f"static const double w{d}[{len(w) * shape[d]}] = {{{flat_w}}};")
    lines += _omp(_count(shape))
    rank = len(shape)
    for d in range(rank):
        lines.append(f"{INDENT * d}for (int64_t i{d} = 0; i{d} < {shape[d]}; i{d}++) {{")
    depth = rank
    fixed = " + ".join([f"i{d} * {strides[d]}" for d in range(rank) if d not in taps] or ["0"])
    lines += [
        f"{INDENT * depth}const int64_t base = {fixed};",
        f"{INDENT * depth}double acc = 0.0;",
    ]
    weight, offset = "1.0", "base"
    for d, (idx, _) in taps.items():
        at = f"t{d} * {shape[d]} + i{d}"
        lines += [
            f"{INDENT * depth}for (int64_t t{d} = 0; t{d} < {len(idx)}; t{d}++) {{",
            f"{INDENT * (depth + 1)}const double wt{d} = {weight} * w{d}[{at}];",
            f"{INDENT * (depth + 1)}const int64_t at{d} = {offset} + idx{d}[{at}] * {strides[d]};",
        ]
        weight, offset, depth = f"wt{d}", f"at{d}", depth + 1
    lines.append(f"{INDENT * depth}acc += {weight} * (double){x}[{offset}];")
    for _ in taps:
        depth -= 1
        lines.append(INDENT * depth + "}")
    target = " + ".join(f"i{d} * {s}" for d, s in enumerate(_contiguous(shape)))
    lines.append(f"{INDENT * rank}{out}[{target}] = ({types[1]})acc;")
    for d in reversed(range(rank)):
        lines.append(INDENT * d + "}")
    return lines


def _contiguous(shape) -> list[int]:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return strides[::-1]


def _one_hot(k: kir.Indexed, types: list[str]) -> list[str]:
    p = k.params
    idx, values = k.inputs
    outer, depth, inner = (render_dim(p[n]) for n in ("outer", "depth", "inner"))
    return [
        f"/* {outer} x {depth} x {inner}: values[1] where the index is the position */",
        *_omp(p["outer"] * p["depth"] * p["inner"]),
        f"for (int64_t o = 0; o < {outer}; o++) {{",
        f"{INDENT}for (int64_t j = 0; j < {depth}; j++) {{",
        f"{INDENT * 2}for (int64_t i = 0; i < {inner}; i++) {{",
        f"{INDENT * 3}int64_t v = (int64_t){idx}[o * {inner} + i];",
        f"{INDENT * 3}if (v < 0) v += {depth};",
        f"{INDENT * 3}{k.outputs[0]}[(o * {depth} + j) * {inner} + i] = {values}[v == j];",
        f"{INDENT * 2}}}",
        f"{INDENT}}}",
        "}",
    ]


def _dim_values(k: kir.Indexed, types: list[str]) -> list[str]:
    """Shape / Size: each value a dim of the run (symbol slots passed to the kernel)."""
    out = k.outputs[0]
    return [
        f"{out}[{i}] = ({types[0]})({render_dim(v)});" for i, v in enumerate(k.params["values"])
    ]


_RENDER = {
    "gather": _gather,
    "gather_elements": _gather_elements,
    "scatter_elements": _scatter_elements,
    "cumsum": _cumsum,
    "topk": _topk,
    "arg_reduce": _arg_reduce,
    "index_map": _index_map,
    "one_hot": _one_hot,
    "interpolate": _interpolate,
    "dim_values": _dim_values,
}
