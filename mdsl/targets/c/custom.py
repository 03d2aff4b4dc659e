"""Custom ops written in C: `mdsl.register_op_impl(op, backend="c", ...)`.

A node whose op has a "c" binding becomes one `kir.CustomCall` kernel in the compiled
graph (the binding wins over the op's expression lowering, library templates and Python
callbacks). `source=` text is compiled into the graph's own translation unit; `library=`
names a prebuilt shared library the graph's library is linked against.

The calling convention (also in `register_op_impl`'s docstring and `header_text()`):

    typedef struct mdsl_tensor {
        void *data;            /* contiguous row-major elements; NULL: absent input */
        const int64_t *shape;  /* ndim sizes (NULL when ndim is 0) */
        int64_t size;          /* number of elements */
        int32_t ndim;
        int32_t dtype;         /* MDSL_DTYPE_FLOAT32, ...; -1: absent input */
    } mdsl_tensor;
    int64_t mdsl_dtype_bytes(int32_t dtype);  /* an element's size */

    int symbol(const mdsl_tensor *inputs, int n_inputs,
               mdsl_tensor *outputs, int n_outputs,
               const double *attrs, int n_attrs);

It returns 0 on success; anything else stops the run with an ExecutionError naming the
node. A data-dependent op (`mdsl.ops.dynamic.data_dependent`) gets each output at its
sizes' bounds and reports the sizes it produced: it writes each one into its output's
shape entry (`((int64_t *)outputs[j].shape)[axis]`, the first output axis holding the
size), and writes the elements contiguously at those sizes; the generated code checks each
size against its bound (an ExecutionError naming the node) and binds it for what follows. Outputs are preallocated with the shapes the op's InferShape gave, and never
overlap the inputs. `attrs` holds the op's attrs in prototype order as doubles (bools
as 0/1; attrs that are not a bool, int or float are passed as NaN), then each list attr
of numbers (`[int]`, `[float]`) in prototype order as its length and its elements (an
absent list: length -1, no elements); `n_attrs` counts them all. float16 data is
`_Float16`, bfloat16 data is the upper 16 bits of a float32 (`uint16_t`).

Names: the entry point of a `source=` is renamed (`mdsl_cop_<hash>_<symbol>`) and given
internal linkage, so two ops may use the same symbol and two graphs using one op do not
clash; other functions of the source should be `static` (two sources in one graph
defining the same non-static helper do not link).

>>> import numpy as np, mdsl
>>> @mdsl.op_proto("Twice", inputs={"x": "float32"}, outputs={"y": "float32"})
... def twice(x):
...     return x
>>> _ = mdsl.register_op_impl("Twice", backend="c", symbol="twice", source='''
... int twice(const mdsl_tensor *in, int n_in, mdsl_tensor *out, int n_out,
...           const double *attrs, int n_attrs) {
...     const float *x = (const float *)in[0].data;
...     float *y = (float *)out[0].data;
...     for (int64_t i = 0; i < in[0].size; i++) y[i] = 2.0f * x[i];
...     return 0;
... }''')
>>> with mdsl.Graph("g") as g:
...     g.output(twice(g.input("x", (3,))), "y")
>>> mdsl.compile(g, backend="c")(x=np.arange(3, dtype=np.float32))["y"]
array([0., 2., 4.], dtype=float32)
"""

from __future__ import annotations

import math
import os

from mdsl.codegen import kir
from mdsl.codegen.dims import render_dim
from mdsl.ir.dtype import DType
from mdsl.ir.naming import c_comment

DTYPE_CODES = {
    DType.bool_: 0,
    DType.int8: 1,
    DType.uint8: 2,
    DType.int16: 3,
    DType.int32: 4,
    DType.int64: 5,
    DType.float16: 6,
    DType.bfloat16: 7,
    DType.float32: 8,
    DType.float64: 9,
    DType.uint16: 10,
    DType.uint32: 11,
    DType.uint64: 12,
}
SIGNATURE = (
    "(const mdsl_tensor *inputs, int n_inputs, mdsl_tensor *outputs, int n_outputs, "
    "const double *attrs, int n_attrs)"
)
HEADER_FILE = "mdsl_custom_op.h"


def _dtype_macro(dtype: DType) -> str:
    return f"MDSL_DTYPE_{dtype.name.rstrip('_').upper()}"


def header_text() -> str:
    """The C declarations a custom op needs (the `mdsl_custom_op.h` header); a `source=`
    gets them from the generated unit, a `library=` is built against this header."""
    codes = "\n".join(f"#define {_dtype_macro(d)} {c}" for d, c in DTYPE_CODES.items())
    sizes = "\n".join(
        f"    case {_dtype_macro(d)}: return {d.itemsize};" for d in DTYPE_CODES if d.itemsize != 1
    )
    return f"""/* mdsl custom C op calling convention (see mdsl.register_op_impl). */
#ifndef MDSL_CUSTOM_OP_H
#define MDSL_CUSTOM_OP_H
#include <stdint.h>

{codes}

typedef struct mdsl_tensor {{
    void *data;            /* contiguous row-major elements; NULL: absent optional input */
    const int64_t *shape;  /* ndim sizes (NULL when ndim is 0) */
    int64_t size;          /* number of elements */
    int32_t ndim;
    int32_t dtype;         /* MDSL_DTYPE_*; -1 for an absent optional input */
}} mdsl_tensor;

/* bytes of one element of `dtype` (MDSL_DTYPE_*) */
static inline int64_t mdsl_dtype_bytes(int32_t dtype) {{
    switch (dtype) {{
{sizes}
    default: return 1;
    }}
}}

/* int symbol{SIGNATURE};
   returns 0 on success, anything else fails the run. */
typedef int (*mdsl_custom_op_fn){SIGNATURE};

#endif
"""


# -- rendering ---------------------------------------------------------------------------------
def custom_calls(plan) -> list[kir.CustomCall]:
    """The plan's calls of user C functions (inside control-flow blocks too)."""
    return [k for k in kir.walk_kernels(plan.kernels) if isinstance(k, kir.CustomCall)]


def render_preamble(plan) -> str:
    """The header, each distinct `source=` once (entry points renamed, made static) and
    an extern declaration per `library=` symbol; empty when the plan calls no C op."""
    calls = custom_calls(plan)
    if not calls:
        return ""
    parts = [
        '/* ---- custom C ops: mdsl.register_op_impl(..., backend="c") ---- */',
        _header_body(),
    ]
    by_source: dict[str, dict[str, kir.CustomCall]] = {}
    externs: dict[str, kir.CustomCall] = {}
    for k in calls:
        if k.source is None:
            externs.setdefault(k.symbol, k)
        else:
            by_source.setdefault(k.source, {}).setdefault(k.symbol, k)
    for source, symbols in by_source.items():
        parts.append(_source_block(source, symbols))
    for symbol, k in externs.items():
        parts.append(f"/* {_comment(k)} from {c_comment(k.library)} */")
        parts.append(f"extern int {symbol}{SIGNATURE};")
    return "\n".join(parts) + "\n"


def _header_body() -> str:
    lines = header_text().splitlines()
    return "\n".join(line for line in lines[1:] if line)  # drop the title comment


def _source_block(source: str, symbols: dict[str, kir.CustomCall]) -> str:
    ops = ", ".join(sorted({k.nodes[0].op_type for k in symbols.values()}))
    lines = [f"/* source of {c_comment(ops)} */"]
    for symbol, k in symbols.items():
        lines.append(f"#define {symbol} {k.function}")
        lines.append(f"static int {symbol}{SIGNATURE};")
    lines.append(source.rstrip("\n"))
    lines += [f"#undef {symbol}" for symbol in symbols]
    return "\n".join(lines)


def _comment(k: kir.CustomCall) -> str:
    return c_comment(f"{k.nodes[0].op_type} (symbol {k.symbol})")


def render_call_body(plan, k: kir.CustomCall) -> str:
    """The body of the kernel wrapping one call: shape tables (static ones `static
    const`), tensor records, and the checks binding the sizes the function reports."""
    pad = "    "
    lines = []
    reported = {size.output for size in k.sizes}
    ins = [
        _tensor_record(lines, f"in{i}", b, t)
        for i, (b, t) in enumerate(zip(k.inputs, k.input_types))
    ]
    outs = [
        _tensor_record(lines, f"out{i}", b, t, writable=i in reported)
        for i, (b, t) in enumerate(zip(k.outputs, k.output_types))
    ]
    lines.append(_record_array("const mdsl_tensor", "inputs", ins))
    lines.append(_record_array("mdsl_tensor", "outputs", outs))
    if k.attrs:
        values = ", ".join(_double_literal(v) for v in k.attrs)
        lines.append(f"static const double attrs[{len(k.attrs)}] = {{{values}}};")
    attrs = "attrs" if k.attrs else "NULL"
    in_arg = "inputs" if ins else "NULL"
    out_arg = "outputs" if outs else "NULL"
    lines.append(
        f"if ({k.function}({in_arg}, {len(ins)}, {out_arg}, {len(outs)}, {attrs}, "
        f"{len(k.attrs)}) != 0) return 1;"
    )
    lines += _size_checks(plan, k)
    return "\n".join(pad + line for line in lines)


def _size_checks(plan, k: kir.CustomCall) -> list[str]:
    """Each reported size checked against its bound (a failure stores it in the `dims`
    slot after the symbols' and returns the failure's status) and bound to its slot."""
    lines = []
    detail = len(plan.symbols)
    base = len(plan.all_kernels()) + 1
    for size in k.sizes:
        value = f"out{size.output}_shape[{size.axis}]"
        lines.append(
            f"if ({value} < 0 || {value} > {render_dim(size.bound)}) "
            f"{{ dims[{detail}] = {value}; return {base + size.failure}; }}"
        )
        lines.append(f"dims[{int(size.symbol.name.removeprefix('dim'))}] = {value};")
    return lines


def call_status(k, step: int, call: str) -> str:
    """The schedule's line for kernel `k` at `step`: a failure returns step + 1, a failed
    size check of a custom call its own status (`_size_checks`)."""
    if isinstance(k, kir.CustomCall) and k.sizes:
        return f"{{ int status = {call}; if (status) return status == 1 ? {step + 1} : status; }}"
    return f"if ({call}) return {step + 1};"


def _tensor_record(lines: list[str], name: str, buffer: str | None, typ, writable=False) -> str:
    if buffer is None or typ is None:
        return "{NULL, NULL, 0, 0, -1}"
    dtype, shape = typ
    static = not writable and all(isinstance(d, int) for d in shape)
    if shape:
        sizes = ", ".join(render_dim(d) for d in shape)
        qualifier = "static const " if static else ""
        lines.append(f"{qualifier}int64_t {name}_shape[{len(shape)}] = {{{sizes}}};")
    shape_ref = f"{name}_shape" if shape else "NULL"
    size = " * ".join(render_dim(d) for d in shape) if shape else "1"
    if static:
        size = str(math.prod(shape))
    return f"{{(void *){buffer}, {shape_ref}, {size}, {len(shape)}, {DTYPE_CODES[dtype]}}}"


def _record_array(ctype: str, name: str, records: list[str]) -> str:
    if not records:
        return f"/* no {name} */"
    return f"{ctype} {name}[{len(records)}] = {{{', '.join(records)}}};"


def _double_literal(v: float) -> str:
    if math.isnan(v):
        return "NAN"
    if math.isinf(v):
        return "INFINITY" if v > 0 else "-INFINITY"
    return repr(float(v))


def link_args(plan) -> tuple[str, ...]:
    """Linker arguments for the `library=` bindings the plan calls (path + rpath)."""
    args: list[str] = []
    for library in dict.fromkeys(k.library for k in custom_calls(plan) if k.library):
        args += [library, f"-Wl,-rpath,{os.path.dirname(library)}"]
    return tuple(args)


def libraries(plan) -> list[str]:
    """The prebuilt libraries (`library=`) the plan's kernels call, in first-use order."""
    return list(dict.fromkeys(k.library for k in custom_calls(plan) if k.library))
