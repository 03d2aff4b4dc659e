"""C body of a GEMM computed by oneDNN's matmul (`mdsl.codegen.onednn_matmul`,
`csrc/templates/c/onednn_matmul.h.j2`): one primitive call over the whole product, then
the epilogue over C in place."""

from __future__ import annotations

from mdsl.codegen import kir
from mdsl.codegen.access import flat_index
from mdsl.targets.c.conv import team_state_lines, weights_layout_line

INDENT = "    "


def uses_onednn_matmul(plan) -> bool:
    """Whether a GEMM of `plan` is computed by oneDNN."""
    return any(isinstance(k, kir.Gemm) and k.onednn for k in plan.all_kernels())


def onednn_matmul_body(k: kir.Gemm, epilogue_lines, parallel: str) -> str:
    """The kernel body of `k` on oneDNN; `epilogue_lines` is the C target's renderer of
    an epilogue, `parallel` its pragma for the epilogue's loop over rows."""
    state = f"mdsl_dnnl_{k.name}"
    a = f"{k.a.buffer} + {flat_index(k.a, [])}"
    oc = flat_index(k.out, [])
    sizes = (
        f"{k.m}, {k.k}, {k.n}, sizeof(float) * {k.onednn_b_elems}, "
        f"w_layout, {len(k.onednn_b_layout)}"
    )
    lines = [
        f"/* oneDNN {k.onednn}: [{k.m}, {k.k}] @ [{k.k}, {k.n}], B reordered at plan time */",
        *team_state_lines("mdsl_dnnl_matmul", state),
        weights_layout_line(k.onednn_b_layout),
        f"if (!mdsl_dnnl_matmul_ready(s, {sizes}))",
        f"{INDENT}return 1;",
        f"if (mdsl_dnnl_matmul_run(s, {a}, {k.packed_b}, {k.out.buffer} + {oc}))",
        f"{INDENT}return 1;",
    ]
    if k.epilogue is not None:
        acc = f"{k.out.buffer}[{oc} + i * {k.n} + jn]"
        inner = epilogue_lines(k.epilogue, k.out_shape, ["i", "jn"], acc, k.dtype)
        lines += [
            parallel,
            f"for (int64_t i = 0; i < {k.m}; i++) {{",
            f"{INDENT}#pragma omp simd",
            f"{INDENT}for (int64_t jn = 0; jn < {k.n}; jn++) {{",
            *(INDENT * 2 + x for x in inner),
            f"{INDENT}}}",
            "}",
        ]
    return "\n".join(INDENT + x for x in lines)
