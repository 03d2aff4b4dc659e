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

    int symbol(const mdsl_tensor *inputs, int n_inputs,
               mdsl_tensor *outputs, int n_outputs,
               const double *attrs, int n_attrs);

It returns 0 on success; anything else stops the run with an ExecutionError naming the
node. Outputs are preallocated with the shapes the op's InferShape gave, and never
overlap the inputs. `attrs` holds the op's attrs in prototype order as doubles (bools
as 0/1; a str attr declared with `choices` as the index of its value among them;
other attrs that are not a bool, int or float are passed as NaN). float16 data is
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

import hashlib
import math
import os
import re
from pathlib import Path

from mdsl.codegen import kir
from mdsl.ir.dtype import DType
from mdsl.ir.errors import GraphError
from mdsl.ir.graph import Node

C_OPTIONS = ("source", "symbol", "library")
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
}
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_RESERVED = re.compile(r"(mdsl_|k[0-9]+_|main$)")  # generated names, and main
SIGNATURE = (
    "(const mdsl_tensor *inputs, int n_inputs, mdsl_tensor *outputs, int n_outputs, "
    "const double *attrs, int n_attrs)"
)
HEADER_FILE = "mdsl_custom_op.h"


def header_text() -> str:
    """The C declarations a custom op needs (the `mdsl_custom_op.h` header); a `source=`
    gets them from the generated unit, a `library=` is built against this header."""
    codes = "\n".join(
        f"#define MDSL_DTYPE_{d.name.rstrip('_').upper()} {c}" for d, c in DTYPE_CODES.items()
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

/* int symbol{SIGNATURE};
   returns 0 on success, anything else fails the run. */
typedef int (*mdsl_custom_op_fn){SIGNATURE};

#endif
"""


# -- registration ------------------------------------------------------------------------------
def checked_c_options(op_type: str, fn, options: dict) -> dict:
    """The options of a "c" binding, checked: `symbol` plus exactly one of `source` (C
    text) or `library` (a shared library path, made absolute)."""
    if fn is not None:
        raise GraphError(
            f"a 'c' binding of {op_type!r} takes source= and symbol= (or library= and "
            f"symbol=), not a Python function"
        )
    if not options:
        raise GraphError(
            f"a 'c' binding of {op_type} needs source= and symbol=, or library= and symbol="
        )
    unknown = sorted(set(options) - set(C_OPTIONS))
    if unknown:
        raise GraphError(
            f"unknown option {', '.join(unknown)} for the c binding of {op_type!r} "
            f"(known: {', '.join(C_OPTIONS)})"
        )
    symbol = options.get("symbol")
    if not isinstance(symbol, str) or not _IDENTIFIER.fullmatch(symbol):
        raise GraphError(
            f"the c binding of {op_type!r} needs symbol= a C identifier, got {symbol!r}"
        )
    if _RESERVED.match(symbol):
        raise GraphError(
            f"symbol {symbol!r} of the c binding of {op_type!r} is reserved for generated "
            "code (names starting with mdsl_ or k<digits>_, and main)"
        )
    has_source, has_library = "source" in options, "library" in options
    if has_source == has_library:
        raise GraphError(f"the c binding of {op_type!r} needs exactly one of source= or library=")
    if has_source:
        if not isinstance(options["source"], str) or not options["source"].strip():
            raise GraphError(f"source= of the c binding of {op_type!r} must be C source text")
        return {"source": options["source"], "symbol": symbol}
    return {"library": _checked_library(op_type, options["library"]), "symbol": symbol}


def _checked_library(op_type: str, library) -> str:
    text = os.fspath(library) if isinstance(library, (str, os.PathLike)) else None
    if not isinstance(text, str):
        raise GraphError(
            f"library= of the c binding of {op_type!r} must be a path, got {library!r}"
        )
    if any(c in text for c in "\n\r\0,"):  # "," would split -Wl,-rpath,dir
        raise GraphError(
            f"library path {text!r} of the c binding of {op_type!r} has a comma or a "
            "control character"
        )
    path = Path(text).expanduser().resolve()
    if not path.is_file():
        raise GraphError(f"library {str(path)!r} of the c binding of {op_type!r} does not exist")
    return str(path)


# -- lowering --------------------------------------------------------------------------------
def c_binding(node: Node):
    """The node's "c" binding, or None."""
    from mdsl.ops.bindings import get_binding

    return get_binding(node.op_type, "c")


def lower_custom_call(ctx, node: Node) -> kir.CustomCall:
    """The kernel calling the node's C function on its buffers."""
    binding = c_binding(node)
    options = binding.options
    symbol, source = options["symbol"], options.get("source")
    function = symbol if source is None else _renamed(symbol, source)
    return kir.CustomCall(
        ctx.fresh("k") + "_c_" + symbol.lower()[:20],
        [kir.NodeRef(node.name, node.op_type, node.source)],
        function,
        symbol,
        source,
        options.get("library"),
        [None if t is None else ctx.buffer_of(t) for t in node.inputs],
        [ctx.buffer_of(t) for t in node.outputs],
        [None if t is None else (t.dtype, _static_shape(t)) for t in node.inputs],
        [(t.dtype, _static_shape(t)) for t in node.outputs],
        tuple(_attr_value(v, choices) for v, choices in _ordered_attrs(node)),
    )


def _renamed(symbol: str, source: str) -> str:
    digest = hashlib.sha256(source.encode()).hexdigest()[:10]
    return f"mdsl_cop_{digest}_{symbol}"


def _static_shape(t) -> tuple[int, ...]:
    return tuple(int(d) for d in t.type.storage_shape)


def _ordered_attrs(node: Node) -> list[tuple]:
    """(value, choices or None) of each attr, in prototype order."""
    from mdsl.ops.registry import get_op, has_op

    if not has_op(node.op_type):
        return [(node.attrs.get(n), None) for n in sorted(node.attrs)]
    specs = get_op(node.op_type).attrs
    return [(node.attrs.get(n), spec.choices) for n, spec in specs.items()]


def _attr_value(value, choices=None) -> float:
    if isinstance(value, (bool, int, float)):
        return float(value)
    if isinstance(value, str) and choices and value in choices:
        return float(choices.index(value))  # a str attr with choices: its choice index
    return math.nan


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
        parts.append(f"/* {_comment(k)} from {_comment_text(k.library)} */")
        parts.append(f"extern int {symbol}{SIGNATURE};")
    return "\n".join(parts) + "\n"


def _header_body() -> str:
    lines = header_text().splitlines()
    return "\n".join(line for line in lines[1:] if line)  # drop the title comment


def _source_block(source: str, symbols: dict[str, kir.CustomCall]) -> str:
    ops = ", ".join(sorted({k.nodes[0].op_type for k in symbols.values()}))
    lines = [f"/* source of {_comment_text(ops)} */"]
    for symbol, k in symbols.items():
        lines.append(f"#define {symbol} {k.function}")
        lines.append(f"static int {symbol}{SIGNATURE};")
    lines.append(source.rstrip("\n"))
    lines += [f"#undef {symbol}" for symbol in symbols]
    return "\n".join(lines)


def _comment(k: kir.CustomCall) -> str:
    return _comment_text(f"{k.nodes[0].op_type} (symbol {k.symbol})")


def _comment_text(text: str) -> str:
    from mdsl.targets.c.render import comment_text

    return comment_text(text)


def render_call_body(plan, k: kir.CustomCall) -> str:
    """The body of the kernel wrapping one call: static shape tables, tensor records."""
    pad = "    "
    lines = []
    ins = [
        _tensor_record(lines, f"in{i}", b, t)
        for i, (b, t) in enumerate(zip(k.inputs, k.input_types))
    ]
    outs = [
        _tensor_record(lines, f"out{i}", b, t)
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
    return "\n".join(pad + line for line in lines)


def _tensor_record(lines: list[str], name: str, buffer: str | None, typ) -> str:
    if buffer is None or typ is None:
        return "{NULL, NULL, 0, 0, -1}"
    dtype, shape = typ
    if shape:
        sizes = ", ".join(str(d) for d in shape)
        lines.append(f"static const int64_t {name}_shape[{len(shape)}] = {{{sizes}}};")
    shape_ref = f"{name}_shape" if shape else "NULL"
    size = math.prod(shape)
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
