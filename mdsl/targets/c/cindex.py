"""C for typed element access and flat-index arithmetic, shared by the kernel renderers.

>>> from mdsl.codegen.kir import Access
>>> from mdsl.ir.dtype import DType
>>> load(Access("in0", DType.bfloat16, 0, (1,)), "i")
'mdsl_bf16_load(in0[i])'
>>> store(Access("out0", DType.float32, 0, (1,)), "i", "v")
'out0[i] = (float)(v);'
>>> decompose("o", "o", (4, 3))
['int64_t rem_o = o;', 'const int64_t o1 = rem_o % 3; rem_o /= 3;', 'const int64_t o0 = rem_o % 4; rem_o /= 4;']
"""

from __future__ import annotations

from mdsl.codegen import kir
from mdsl.codegen.dims import render_dim
from mdsl.ir.dtype import DType
from mdsl.targets.c.expr import C_TYPES, compute_type


def load(access: kir.Access, index: str) -> str:
    """The element of `access` at flat `index`, in its compute type."""
    element = f"{access.buffer}[{index}]"
    if access.dtype == DType.bfloat16:
        return f"mdsl_bf16_load({element})"
    if access.dtype == DType.float16:
        return f"(float){element}"
    return element


def store(access: kir.Access, index: str, value: str) -> str:
    """A statement writing `value` to the element of `access` at flat `index`."""
    element = f"{access.buffer}[{index}]"
    if access.dtype == DType.bfloat16:
        return f"{element} = mdsl_bf16_store({value});"
    if access.dtype == DType.float16:
        return f"{element} = (_Float16)({value});"
    if access.dtype == DType.bool_:
        return f"{element} = (uint8_t)(({value}) != 0);"
    return f"{element} = ({C_TYPES[access.dtype]})({value});"


def ctype(dtype: DType) -> str:
    """The C type `dtype` is computed in."""
    return C_TYPES[compute_type(dtype)]


def decompose(flat: str, prefix: str, shape: tuple[int, ...]) -> list[str]:
    """Lines splitting flat index `flat` into `prefix0..` over `shape` (row-major)."""
    if not shape:
        return []
    lines = [f"int64_t rem_{prefix} = {flat};"]
    for d in reversed(range(len(shape))):
        lines.append(
            f"const int64_t {prefix}{d} = rem_{prefix} % {render_dim(shape[d])}; "
            f"rem_{prefix} /= {render_dim(shape[d])};"
        )
    return lines
