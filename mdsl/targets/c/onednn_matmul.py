"""C body of a GEMM computed by oneDNN's matmul (`mdsl.codegen.onednn_matmul`,
`csrc/templates/c/onednn_matmul.h.j2`): one primitive call over the whole product (and
batch), then the epilogue over C in place."""

from __future__ import annotations

import math

from mdsl.codegen import kir
from mdsl.codegen.access import flat_index
from mdsl.codegen.onednn_matmul import strided_layout
from mdsl.targets.c.conv import team_state_lines, weights_layout_line

INDENT = "    "


def uses_onednn_matmul(plan) -> bool:
    """Whether a GEMM of `plan` is computed by oneDNN."""
    return any(isinstance(k, kir.Gemm) and k.onednn for k in plan.all_kernels())


def onednn_matmul_body(k: kir.Gemm, epilogue_lines, parallel: str) -> str:
    """The kernel body of `k` on oneDNN; `epilogue_lines` is the C target's renderer of
    an epilogue, `parallel` its pragma for the epilogue's loop over rows."""
    state = f"mdsl_dnnl_{k.name}"
    a, oc = f"{k.a.buffer} + {flat_index(k.a, [])}", flat_index(k.out, [])
    lines = [
        _summary(k),
        *team_state_lines("mdsl_dnnl_matmul", state),
    ]
    if k.packed_b:  # a constant B in the primitive's layout
        lines.append(weights_layout_line(k.onednn_b_layout))
        spec = _spec(
            ((k.m, k.k), (k.k, 1)),
            ((k.k, k.n), (k.n, 1)),
            ((k.m, k.n), (k.n, 1)),
            k.alpha,
            f"sizeof(float) * {k.onednn_b_elems}, w_layout, {len(k.onednn_b_layout)}",
        )
        b = k.packed_b
    else:
        spec = _spec(*strided_layout(k), k.alpha, "0, 0, 0")
        b = f"{k.b.buffer} + {flat_index(k.b, [])}"
    lines += [
        f"static const mdsl_dnnl_matmul_spec spec = {spec};",
        "if (!mdsl_dnnl_matmul_ready(s, &spec))",
        f"{INDENT}return 1;",
        f"if (mdsl_dnnl_matmul_run(s, {a}, {b}, {k.out.buffer} + {oc}))",
        f"{INDENT}return 1;",
    ]
    if k.epilogue is not None:
        lines += _epilogue_loop(k, epilogue_lines, parallel)
    return "\n".join(INDENT + x for x in lines)


def _epilogue_loop(k: kir.Gemm, epilogue_lines, parallel: str) -> list[str]:
    """The epilogue over C in place after the product, row by row over every batch
    entry's rows (`parallel`: the pragma for that loop)."""
    bvars = [f"bi{d}" for d in range(len(k.batch_shape))]
    split = []  # row r -> batch indices and i, innermost batch dim first
    if bvars:
        split.append(f"int64_t rem = r / {k.m};")
        for var, size in reversed(list(zip(bvars, k.batch_shape))):
            split.append(f"const int64_t {var} = rem % {size}; rem /= {size};")
        split.append(f"const int64_t i = r % {k.m};")
    row = "r" if not bvars else "i"
    acc = f"{k.out.buffer}[{flat_index(k.out, bvars)} + {row} * {k.n} + jn]"
    inner = epilogue_lines(k.epilogue, k.out_shape, [*bvars, row, "jn"], acc, k.dtype)
    return [
        parallel,
        f"for (int64_t r = 0; r < {math.prod(k.batch_shape) * k.m}; r++) {{",
        *(INDENT + x for x in split),
        f"{INDENT}#pragma omp simd",
        f"{INDENT}for (int64_t jn = 0; jn < {k.n}; jn++) {{",
        *(INDENT * 2 + x for x in inner),
        f"{INDENT}}}",
        "}",
    ]


def _summary(k: kir.Gemm) -> str:
    batch = "".join(f"{b} x " for b in k.batch_shape)
    how = "B reordered at plan time" if k.packed_b else "operands read in place by strides"
    scale = f", alpha {k.alpha!r}" if k.alpha != 1.0 else ""
    return f"/* oneDNN {k.onednn}: {batch}[{k.m}, {k.k}] @ [{k.k}, {k.n}]{scale}, {how} */"


def _spec(a, b, c, alpha: float, weights: str) -> str:
    """The C initializer of an `mdsl_dnnl_matmul_spec`: (dims, strides) of A, B and C."""

    def ints(values) -> str:
        return "{" + ", ".join(str(v) for v in values) + "}"

    dims = ", ".join(ints(t[0]) for t in (a, b, c))
    strides = ", ".join(ints(t[1]) for t in (a, b, c))
    return f"{{{len(a[0])}, {{{dims}}}, {{{strides}}}, {float(alpha)!r}f, {weights}}}"
