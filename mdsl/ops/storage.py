"""Storage layouts: the TransData op, which storage formats each op reads, and array conversion.

A tensor keeps the shape and format the user declared (its origin); its
`TensorType.storage_format` says how its data is laid out at run time (None: as declared).
Only the layout pass changes storage formats, and it does so explicitly: a `TransData`
node (Ascend's name) converts the storage layout of a tensor without changing its origin
shape, and every other op reads and writes the layouts it declares:

- `FormatRule` in `OpDef.extra["formats"]` (or the built-in table below for the library's
  ops): which inputs may be stored in which formats. All such inputs must agree; the
  op's rank-4 outputs are then stored the same way, everything else in origin layout.
  Conv, MaxPool/AveragePool, GlobalAveragePool/GlobalMaxPool and BatchNormalization accept
  NHWC data at input 0; pointwise ops accept NHWC when every input that is not a single
  element (a scalar broadcasts in any layout) is stored NHWC.
- Every other op, and every graph output, reads origin layout only; Input and Const
  nodes produce origin layout.

`format_problems(node)` states those rules; it is installed in `mdsl.ir.verify`, so a
graph where an op reads a format it does not accept is rejected. The interpreter holds
tensors in their storage layout: `storage_kernel` wraps an op's reference so it sees its
inputs converted back to origin layout and its results are stored as the node declares.

>>> import mdsl
>>> with mdsl.Graph() as g:
...     x = g.input("x", (1, 3, 4, 5), format="NCHW")
...     y = mdsl.ops.trans_data(x, src_format="NCHW", dst_format="NHWC")
...     g.output(mdsl.ops.trans_data(y, src_format="NHWC", dst_format="NCHW"), "y")
>>> y.type.storage_shape
(1, 4, 5, 3)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mdsl.ir.errors import ExecutionError, MdslError, ShapeError
from mdsl.ir.format import C0, FRACTAL, Format, storage_shape
from mdsl.ir.graph import CONST, INPUT, OUTPUT, Node
from mdsl.ir.tensor_type import TensorType
from mdsl.ir.verify import set_format_rule
from mdsl.ops.bindings import register_op_impl
from mdsl.ops.proto import op_proto
from mdsl.ops.registry import Attr, get_op, has_op

FORMAT_NAMES = tuple(f.value for f in Format)


# -- layouts of a tensor --------------------------------------------------------------------
def same_layout(t: TensorType, fmt: Format) -> bool:
    """Whether data of `t` stored as `fmt` is laid out as declared (ND and NCHW are one
    layout for a rank-4 tensor)."""
    if fmt == t.format:
        return True
    return t.rank == 4 and {fmt, t.format} == {Format.ND, Format.NCHW}


def stored_as(t: TensorType) -> Format | None:
    """The storage format of `t` if it differs from its origin layout, else None."""
    fmt = t.storage_format
    return None if fmt is None or same_layout(t, fmt) else fmt


def with_layout(t: TensorType, fmt: Format | None) -> TensorType:
    """`t` stored as `fmt` (None or the origin layout: as declared)."""
    return TensorType(
        t.shape, t.dtype, t.format, None if fmt is None or same_layout(t, fmt) else fmt
    )


def layout_name(t: TensorType) -> str:
    """How `t` is stored, for messages: "NHWC", or "origin NCHW"."""
    fmt = stored_as(t)
    return str(fmt) if fmt is not None else f"origin {t.format}"


# -- the conversion op ----------------------------------------------------------------------
@op_proto(
    "TransData",
    inputs={"x": "any"},
    outputs={"y": "any"},
    attrs={
        "src_format": Attr(str, choices=FORMAT_NAMES),
        "dst_format": Attr(str, choices=FORMAT_NAMES),
    },
    category="data_movement",
)
def trans_data(x, *, src_format, dst_format):
    """Convert the storage layout of `x` from `src_format` to `dst_format`; the origin
    shape and format stay what they were (Ascend TransData). Naming the origin format
    means "as declared".

    >>> import mdsl
    >>> with mdsl.Graph() as g:
    ...     x = g.input("x", ("N", 32, 7, 7), format="NCHW")
    ...     y = mdsl.ops.trans_data(x, src_format="NCHW", dst_format="NC1HWC0")
    ...     g.output(mdsl.ops.trans_data(y, src_format="NC1HWC0", dst_format="NCHW"), "y")
    >>> y.shape, y.type.storage_shape
    ((Dim('N'), 32, 7, 7), (Dim('N'), 2, 7, 7, 16))
    """
    Format.of(src_format)
    dst = Format.of(dst_format)
    if not same_layout(x, dst):
        storage_shape(x.shape, x.format, dst)  # ShapeError if x cannot be stored so
    return with_layout(x, dst)


register_op_impl("TransData", lambda x, *, src_format, dst_format: x)  # see storage_kernel


# -- which formats each op reads ------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class FormatRule:
    """The storage formats an op reads besides origin layout.

    `formats`: the accepted non-origin formats. `inputs`: the input positions that may be
    stored so (None: every input that is not a single element). The chosen inputs must
    agree on one layout; the op's rank-4 outputs are stored in it, the others as declared.
    """

    formats: frozenset
    inputs: tuple[int, ...] | None = None

    def layout_inputs(self, node: Node) -> list[int]:
        positions = range(len(node.inputs)) if self.inputs is None else self.inputs
        return [
            i
            for i in positions
            if i < len(node.inputs)
            and node.inputs[i] is not None
            and (self.inputs is not None or not _is_single_element(node.inputs[i].type))
        ]


NHWC_AT_INPUT_0 = FormatRule(frozenset({Format.NHWC}), (0,))
NHWC_WHEN_ALL_AGREE = FormatRule(frozenset({Format.NHWC}))
_BUILTIN_RULES = {
    op: NHWC_AT_INPUT_0
    for op in (
        "Conv",
        "MaxPool",
        "AveragePool",
        "GlobalAveragePool",
        "GlobalMaxPool",
        "BatchNormalization",
    )
}


def format_rule(op_type: str) -> FormatRule | None:
    """The FormatRule of `op_type`: its `OpDef.extra["formats"]`, else the built-in one,
    else the pointwise rule for pointwise ops; None: origin layout only."""
    if not has_op(op_type):
        return None
    opdef = get_op(op_type)
    if "formats" in opdef.extra:
        return opdef.extra["formats"]
    if op_type in _BUILTIN_RULES:
        return _BUILTIN_RULES[op_type]
    return NHWC_WHEN_ALL_AGREE if opdef.category == "pointwise" else None


def _is_single_element(t: TensorType) -> bool:
    return all(isinstance(d, int) and d == 1 for d in t.shape)


def read_layout(node: Node) -> Format | None:
    """The non-origin layout `node` reads its layout inputs in (None: origin)."""
    rule = format_rule(node.op_type)
    if rule is None:
        return None
    layouts = {stored_as(node.inputs[i].type) for i in rule.layout_inputs(node)}
    return next(iter(layouts)) if len(layouts) == 1 else None


def written_type(node: Node, index: int, layout: Format | None) -> TensorType:
    """The type output `index` of `node` has when the node reads `layout`."""
    t = node.outputs[index].type
    if layout is not None and t.rank == 4 and t.format in (Format.NCHW, Format.ND):
        return with_layout(t, layout)
    return with_layout(t, None)


def format_problems(node: Node) -> list[str]:
    """Why `node` reads or writes a storage format its op does not allow (empty: fine)."""
    if node.op_type in (INPUT, CONST):
        return [
            f"output {i} is stored as {t.type.storage_format}; Input and Const nodes "
            "produce origin layout"
            for i, t in enumerate(node.outputs)
            if stored_as(t.type) is not None
        ]
    if node.op_type == OUTPUT:
        t = node.inputs[0] if node.inputs else None
        if t is not None and stored_as(t.type) is not None:
            return [
                f"returns {t.name} stored as {stored_as(t.type)}; graph outputs are "
                "returned in origin layout (convert with TransData)"
            ]
        return []
    if node.op_type == "TransData":
        return _trans_data_problems(node)
    return _op_format_problems(node)


def _op_format_problems(node: Node) -> list[str]:
    rule = format_rule(node.op_type)
    allowed = set(rule.layout_inputs(node)) if rule is not None else set()
    problems = []
    for i, t in enumerate(node.inputs):
        fmt = None if t is None else stored_as(t.type)
        if fmt is None:
            continue
        if i not in allowed or fmt not in rule.formats:
            accepts = _accepts(rule)
            problems.append(
                f"input {i} ({t.name}) is stored as {fmt}, but {node.op_type} reads {accepts} there"
            )
    if problems:
        return problems
    layouts = {i: stored_as(node.inputs[i].type) for i in allowed}
    if len(set(layouts.values())) > 1:
        seen = ", ".join(f"input {i} {layout_name(node.inputs[i].type)}" for i in layouts)
        return [f"inputs are stored in different layouts ({seen}); convert them to agree"]
    layout = next(iter(layouts.values()), None)
    return [
        f"output {i} is stored as {layout_name(t.type)}, but {node.op_type} writes "
        f"{layout_name(written_type(node, i, layout))}"
        for i, t in enumerate(node.outputs)
        if stored_as(t.type) != stored_as(written_type(node, i, layout))
    ]


def _accepts(rule: FormatRule | None) -> str:
    if rule is None:
        return "origin layout only"
    formats = ", ".join(sorted(str(f) for f in rule.formats))
    where = "when all its inputs agree" if rule.inputs is None else f"at inputs {rule.inputs}"
    return f"origin layout, or {formats} {where}"


def _trans_data_problems(node: Node) -> list[str]:
    t = node.inputs[0] if node.inputs else None
    src, dst = node.attrs.get("src_format"), node.attrs.get("dst_format")
    if t is None or src not in FORMAT_NAMES or dst not in FORMAT_NAMES:
        return []  # the type rule reports malformed TransData nodes
    problems = []
    if stored_as(t.type) != stored_as(with_layout(t.type, Format.of(src))):
        problems.append(f"converts from {src}, but its input is stored as {layout_name(t.type)}")
    out = node.outputs[0].type if node.outputs else None
    if out is not None and stored_as(out) != stored_as(with_layout(out, Format.of(dst))):
        problems.append(f"converts to {dst}, but its output is stored as {layout_name(out)}")
    return problems


def _install_format_rule() -> None:
    set_format_rule(format_problems)


_install_format_rule()


# -- arrays in storage layout (the interpreter) ---------------------------------------------
def to_storage(array: np.ndarray, t: TensorType) -> np.ndarray:
    """`array` (in origin layout, of type `t`) laid out as `t`'s storage format."""
    fmt = stored_as(t)
    if fmt is None:
        return array
    if fmt == Format.FRACTAL_NZ:
        return _to_fractal_nz(array)
    nchw = _origin_to_nchw(array, t.format)
    if fmt == Format.NCHW:
        return nchw
    if fmt == Format.NHWC:
        return np.ascontiguousarray(nchw.transpose(0, 2, 3, 1))
    if fmt == Format.NC1HWC0:
        n, c, h, w = nchw.shape
        padded = _pad_axis(nchw, 1, math.ceil(c / C0) * C0)
        return np.ascontiguousarray(padded.reshape(n, -1, C0, h, w).transpose(0, 1, 3, 4, 2))
    raise ExecutionError(f"no array conversion to storage format {fmt}")


def from_storage(array: np.ndarray, t: TensorType) -> np.ndarray:
    """`array` stored as `t`'s storage format, back in `t`'s origin layout."""
    fmt = stored_as(t)
    if fmt is None:
        return array
    if fmt == Format.FRACTAL_NZ:
        return _from_fractal_nz(array, t)
    if fmt == Format.NCHW:
        nchw = array
    elif fmt == Format.NHWC:
        nchw = array.transpose(0, 3, 1, 2)
    elif fmt == Format.NC1HWC0:
        n, c1, h, w, c0 = array.shape
        channels = _static_dim(t, _channel_axis(t), array.shape[1] * array.shape[4])
        nchw = array.transpose(0, 1, 4, 2, 3).reshape(n, c1 * c0, h, w)[:, :channels]
    else:
        raise ExecutionError(f"no array conversion from storage format {fmt}")
    return np.ascontiguousarray(_nchw_to_origin(nchw, t.format))


def origin_shape(stored_shape: tuple, t: TensorType) -> tuple:
    """The concrete origin shape of a tensor of type `t` whose storage has `stored_shape`."""
    fmt = stored_as(t)
    if fmt is None:
        return tuple(stored_shape)
    if fmt == Format.FRACTAL_NZ:
        *batch, n1, m1, m0, n0 = stored_shape
        m = _static_dim(t, t.rank - 2, m1 * m0)
        return (*batch, m, _static_dim(t, t.rank - 1, n1 * n0))
    if fmt == Format.NHWC:
        n, h, w, c = stored_shape
    elif fmt == Format.NC1HWC0:
        n, c1, h, w, c0 = stored_shape
        c = _static_dim(t, _channel_axis(t), c1 * c0)
    else:  # NCHW storage of an NHWC tensor
        n, c, h, w = stored_shape
    return (n, h, w, c) if t.format == Format.NHWC else (n, c, h, w)


def _channel_axis(t: TensorType) -> int:
    return 3 if t.format == Format.NHWC else 1


def _static_dim(t: TensorType, axis: int, fallback: int) -> int:
    d = t.shape[axis]
    if isinstance(d, int):
        return d
    raise ExecutionError(
        f"converting {t.describe()} from {t.storage_format} needs a static dim {axis}, got {d}"
        f" (padded size {fallback})"
    )


def _origin_to_nchw(array: np.ndarray, origin: Format) -> np.ndarray:
    return array.transpose(0, 3, 1, 2) if origin == Format.NHWC else array


def _nchw_to_origin(array: np.ndarray, origin: Format) -> np.ndarray:
    return array.transpose(0, 2, 3, 1) if origin == Format.NHWC else array


def _pad_axis(array: np.ndarray, axis: int, size: int) -> np.ndarray:
    if array.shape[axis] == size:
        return array
    widths = [(0, 0)] * array.ndim
    widths[axis] = (0, size - array.shape[axis])
    return np.pad(array, widths)


def _to_fractal_nz(array: np.ndarray) -> np.ndarray:
    *batch, m, n = array.shape
    m1, n1 = math.ceil(m / FRACTAL), math.ceil(n / FRACTAL)
    padded = _pad_axis(_pad_axis(array, -2, m1 * FRACTAL), -1, n1 * FRACTAL)
    tiles = padded.reshape(*batch, m1, FRACTAL, n1, FRACTAL)
    b = len(batch)
    perm = (*range(b), b + 2, b, b + 1, b + 3)  # (..., N1, M1, M0, N0)
    return np.ascontiguousarray(tiles.transpose(perm))


def _from_fractal_nz(array: np.ndarray, t: TensorType) -> np.ndarray:
    *batch, n1, m1, m0, n0 = array.shape
    b = len(batch)
    perm = (*range(b), b + 1, b + 2, b, b + 3)  # back to (..., M1, M0, N1, N0)
    full = array.transpose(perm).reshape(*batch, m1 * m0, n1 * n0)
    m = _static_dim(t, t.rank - 2, m1 * m0)
    n = _static_dim(t, t.rank - 1, n1 * n0)
    return full[..., :m, :n]


def storage_kernel(node: Node, kernel):
    """Wrap an interpreter kernel `kernel(args, out_specs) -> results` of `node` so that it
    reads and writes arrays in storage layout: inputs are converted back to origin layout,
    the kernel runs on them, and each result is stored as its output type says."""
    if not any(
        t is not None and stored_as(t.type) is not None for t in (*node.inputs, *node.outputs)
    ):
        return kernel

    def run(args: list, out_specs: list) -> list:
        origin_args = [
            None if a is None else from_storage(a, t.type) for a, t in zip(args, node.inputs)
        ]
        origin_specs = [
            (origin_shape(shape, t.type), dtype)
            for (shape, dtype), t in zip(out_specs, node.outputs)
        ]
        results = kernel(origin_args, origin_specs)
        return [_stored_result(np.asarray(r), t.type) for r, t in zip(results, node.outputs)]

    return run


def _stored_result(value: np.ndarray, t: TensorType) -> np.ndarray:
    try:
        return to_storage(value, t)
    except (MdslError, ValueError) as e:
        raise ShapeError(
            f"cannot store a result of shape {list(value.shape)} as {t}: {e}"
        ) from None
