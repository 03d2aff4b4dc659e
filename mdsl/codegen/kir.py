"""Kernel IR: what one generated kernel computes, independent of the target language.

Lowering (`mdsl.codegen.lower`) turns each fusion group of a graph into one of these
records; every target (C, numba, AscendC) renders from them and never looks at the graph
again. Sizes, strides and offsets are ints, or in a symbolic plan `mdsl.ir.dim.Dim`
expressions over the plan's slot identifiers (`dim0`, ...; see `mdsl.codegen.plan`),
rendered by `mdsl.codegen.dims.render_dim`. Control flow is `Branch` and `Loop` kernels
holding `Block`s of kernels (`walk_kernels` lists them all). Each kernel class names
its kind (`KIND`, e.g. "row reduction") for READMEs, kernel tables and profiles.

Addressing is affine: an `Access` reads or writes buffer elements at
`offset + sum(index[d] * strides[d])` over the kernel's iteration space, which covers
contiguous tensors, broadcasting (stride 0), transposes and strided slices alike.
Values are `mdsl.expr` expressions whose variables name loads (`Access`es), earlier
temporaries, row reductions, or `acc` (a GEMM/conv result element).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

from mdsl.expr import Expr
from mdsl.ir.dtype import DType


@dataclass(frozen=True, slots=True)
class Access:
    """Elements of `buffer` (of `dtype`) at offset + index . strides."""

    buffer: str
    dtype: DType
    offset: int
    strides: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class NodeRef:
    """A graph node a kernel computes, for the comment heading the generated code."""

    name: str
    op_type: str
    source: str | None


@dataclass(slots=True)
class Let:
    """A temporary: `var = value`, computed in `dtype` (float32 for half floats)."""

    var: str
    value: Expr
    dtype: DType


@dataclass(slots=True)
class Store:
    """Write `value` (a variable name or expression) to `access`."""

    access: Access
    value: Expr


@dataclass(slots=True)
class Pointwise:
    """for index in shape: lets...; stores...  (loads are the `loads` variables)."""

    KIND: ClassVar[str] = "pointwise"  # what tables and profiles call it

    name: str
    nodes: list[NodeRef]
    shape: tuple[int, ...]
    loads: dict[str, Access]
    lets: list[Let]
    stores: list[Store]

    @property
    def size(self) -> int:
        return math.prod(self.shape)


@dataclass(slots=True)
class Reduce:
    """`var = op over the row of value` (op: sum, max, min, prod); `dtype` accumulates."""

    var: str
    op: str
    value: Expr
    dtype: DType
    lets: list[Let] = field(default_factory=list)  # per-element temporaries of `value`


@dataclass(slots=True)
class RowStore:
    """Write `value` for every element of the row (a full-shape result)."""

    access: Access
    value: Expr
    lets: list[Let] = field(default_factory=list)


ROW_SIZE_VAR = "rown"


@dataclass(slots=True)
class Rowwise:
    """for each outer index: phases in order over one row (the reduced axes).

    The iteration space is `outer_shape + row_shape`; accesses have strides over it (a
    reduced-shape access has stride 0 on the row dims). Phases are `Reduce` (row ->
    scalar), `Let` (scalar from earlier scalars), `RowStore` (full-shape output) and
    `Store` (reduced-shape output, row index 0).
    """

    KIND: ClassVar[str] = "row reduction"  # what tables and profiles call it

    name: str
    nodes: list[NodeRef]
    outer_shape: tuple[int, ...]
    row_shape: tuple[int, ...]
    loads: dict[str, Access]
    phases: list
    # a symbolic row size is also the int64 variable ROW_SIZE_VAR in expressions (a mean)

    @property
    def row_size(self) -> int:
        return math.prod(self.row_shape)

    @property
    def outer_size(self) -> int:
        return math.prod(self.outer_shape)


@dataclass(slots=True)
class Epilogue:
    """Pointwise work on each result element of a GEMM or convolution, while it is hot:
    `acc` names the element; `loads` are accesses over the output's iteration space."""

    loads: dict[str, Access]
    lets: list[Let]
    stores: list[Store]
    nodes: list[NodeRef] = field(default_factory=list)


@dataclass(slots=True)
class Gemm:
    """out[b] = alpha * op(a[b]) @ op(b[b]) (+ epilogue), for each batch index b.

    a, b, out: buffers with per-batch element offsets given by the strides over
    `batch_shape`; matrices are row-major with leading dims lda/ldb/ldc.
    """

    KIND: ClassVar[str] = "GEMM + epilogue"  # what tables and profiles call it

    name: str
    nodes: list[NodeRef]
    dtype: DType
    batch_shape: tuple[int, ...]
    a: Access  # strides over batch_shape
    b: Access
    out: Access
    m: int
    n: int
    k: int
    trans_a: bool
    trans_b: bool
    lda: int
    ldb: int
    alpha: float
    epilogue: Epilogue | None
    out_shape: tuple[int, ...] = ()
    packed_b: str = ""  # a constant b packed for the C target (`mdsl.codegen.packing`)
    # computed by oneDNN's matmul (`mdsl.codegen.onednn_matmul`): its kernel's name, and
    # the floats of `packed_b` (B in the primitive's blocked layout)
    onednn: str = ""
    onednn_b_elems: int = 0
    onednn_b_layout: tuple[int, ...] = ()  # its layout's words, which the generated code checks


@dataclass(frozen=True, slots=True)
class DnnlWeights:
    """A convolution's weights reordered at plan time for oneDNN primitives made at
    `threads`: the constant buffer, its floats, and its layout's words (which the
    generated code compares with the layout its primitive asks for)."""

    buffer: str
    elems: int
    layout: tuple[int, ...]
    threads: int


@dataclass(slots=True)
class Conv:
    """2-D convolution (NCHW, OIHW weights, groups) plus epilogue: on oneDNN, directly on
    packed weights, or as im2col + GEMM."""

    name: str
    nodes: list[NodeRef]
    dtype: DType
    x: str
    w: str
    out: str
    n: int
    c: int
    h: int
    w_in: int
    cout: int
    kh: int
    kw: int
    oh: int
    ow: int
    stride: tuple[int, int]
    pad: tuple[int, int]  # top, left (bottom/right follow from the output size)
    dilation: tuple[int, int]
    group: int
    scratch: str  # im2col buffer (the padded input for a direct convolution)
    scratch_elems: int
    epilogue: Epilogue | None
    out_shape: tuple[int, ...] = ()
    # the C target's convolution on packed weights (`mdsl.codegen.packing`): the weight
    # panels, the offset of each tap in the source, the width of the output grid
    packed_w: str = ""
    offsets: str = ""
    grid_width: int = 0
    # computed by oneDNN (`mdsl.codegen.onednn`): its kernel's name, and the floats of the
    # scratch that hold the blocked source (the blocked destination follows)
    onednn: str = ""
    onednn_act_tag: str = ""  # the layout its source and destination are asked in ("": any)
    onednn_src_elems: int = 0
    onednn_dst_elems: int = 0
    # its weights in the layout of each team size's primitive (`onednn.reordered_weights`:
    # oneDNN blocks some convolutions' weights by team size), the whole team's first
    # (`packed_w`)
    onednn_weights: tuple[DnnlWeights, ...] = ()
    # its epilogue as oneDNN post-ops (`mdsl.codegen.packing.onednn_post_ops`: ("relu",),
    # ("clip", lo, hi), ("sum",) adding `residual`) and oneDNN's bias
    post_ops: tuple = ()
    bias: str = ""
    residual: str = ""
    # SiLU (x * sigmoid(x)) after the primitive, over its result, by mdsl's vector helper
    # (`silu.h.j2`) rather than as oneDNN's swish post-op, which cost 2-4x as much
    silu: bool = False
    # oneDNN's layouts (its string tags: "acdb" NHWC, "aBcd16b" nChw16c; "" NCHW): those
    # the primitive chose at plan time for its source and destination, and those the
    # buffers x, residual and out hold (`mdsl.codegen.blocked`)
    src_layout: str = ""
    dst_layout: str = ""
    same_layouts: bool = False  # at every team size (`onednn.ConvProbe.same_layouts`)
    x_layout: str = ""
    residual_layout: str = ""
    out_layout: str = ""
    # an NCHW source other convolutions read too, reordered once (`mdsl.codegen.blocked`):
    # the buffer that keeps it in `x_copy_layout` for them, and whether the destination is
    # the residual's buffer (in the primitive's layout, read last here: no copy into a
    # scratch destination before the sum post-op)
    x_copy: str = ""
    x_copy_layout: str = ""
    dst_in_residual: bool = False
    # computed as Winograd F(2x2, 3x3) by mdsl instead of oneDNN's kernel, in the same
    # layouts (`mdsl.codegen.winograd`): its transformed weights
    winograd: str = ""
    # the destination (NHWC) lies inside a Concat's output (`mdsl.codegen.concat_in_place`):
    # the floats from one of its pixels to the next (0: dense, `cout`)
    out_pixel_stride: int = 0

    @property
    def KIND(self) -> str:
        """What tables and profiles call it: how this convolution is computed."""
        if self.winograd:
            return "convolution (Winograd) + epilogue"
        if self.onednn:
            return "convolution (oneDNN) + epilogue"
        if self.packed_w:
            return "convolution (packed weights) + epilogue"
        if self.group == self.c == self.cout and self.group > 1:
            return "depthwise convolution + epilogue"
        return "convolution (im2col + GEMM) + epilogue"


@dataclass(slots=True)
class Pool:
    """Max or average pooling over the spatial dims of NCHW."""

    KIND: ClassVar[str] = "pooling"  # what tables and profiles call it

    name: str
    nodes: list[NodeRef]
    dtype: DType
    kind: str  # "max" | "avg"
    x: str
    out: str
    n: int
    c: int
    in_spatial: tuple[int, ...]
    out_spatial: tuple[int, ...]
    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    pads: tuple[int, ...]  # begins only
    dilations: tuple[int, ...]
    count_include_pad: bool
    # its input and output left in this oneDNN layout (`mdsl.codegen.blocked`): oneDNN's
    # pooling computes it; "": NCHW, mdsl's loops
    layout: str = ""


@dataclass(slots=True)
class Callback:
    """A node without generated code: the compiled graph calls back into Python."""

    KIND: ClassVar[str] = "Python callback"  # what tables and profiles call it

    name: str
    nodes: list[NodeRef]
    index: int  # position in the executable's callback table
    inputs: list[str | None]  # buffers
    outputs: list[str]


@dataclass(frozen=True, slots=True)
class DataSize:
    """A size a C function decides (a data-dependent op's output count): the function
    writes it into `outputs[output].shape[axis]`, whose buffer holds `bound` along that
    axis; the generated code checks 0 <= size <= bound (else plan failure `failure`) and
    binds `symbol` (a bare Dim over a slot identifier) to it."""

    symbol: object  # Dim
    output: int
    axis: int
    bound: object  # int or Dim
    failure: int


@dataclass(slots=True)
class CustomCall:
    """A node bound to a user C function (`register_op_impl(op, backend="c", ...)`).

    `function` is the C name the generated unit calls (the user's symbol, prefixed when
    its source is compiled into the unit); `source`/`library` say where it comes from.
    Types are (dtype, shape) per tensor, None for an absent optional input; `attrs` are
    the op's attrs as doubles in prototype order (NaN for non-numeric ones).
    """

    KIND: ClassVar[str] = "custom C op"  # what tables and profiles call it

    name: str
    nodes: list[NodeRef]
    function: str
    symbol: str
    source: str | None
    library: str | None
    inputs: list[str | None]  # buffers
    outputs: list[str]
    input_types: list[tuple[DType, tuple] | None]  # shapes: ints, or Dims in a symbolic plan
    output_types: list[tuple[DType, tuple]]  # a data-dependent size at its bound
    attrs: tuple[float, ...]
    sizes: tuple[DataSize, ...] = ()  # the sizes the function decides (data-dependent ops)


@dataclass(slots=True)
class Indexed:
    """Data-dependent indexing, scans and selections with a fixed loop structure
    (`mdsl.codegen.lower_indexing`): `op` names the form (gather, gather_elements,
    scatter_elements, cumsum, topk, arg_reduce, index_map, one_hot,
    interpolate, dim_values: Shape and Size over symbolic dims), `params` its sizes.
    Inputs and outputs are contiguous buffers of `dtypes` (inputs first); `error` is
    what a run stopped by a bad index reports."""

    KIND: ClassVar[str] = "indexing"

    name: str
    nodes: list[NodeRef]
    op: str
    inputs: list[str]
    outputs: list[str]
    dtypes: list[DType]
    params: dict
    error: str | None = None


Kernel = Pointwise | Rowwise | Gemm | Conv | Pool | Callback | CustomCall | Indexed


# -- control flow ---------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Copy:
    """`elements` elements of `dtype` from buffer `src` to buffer `dst` (both contiguous)."""

    src: str
    dst: str
    dtype: DType
    elements: object  # int | Dim


@dataclass(frozen=True, slots=True)
class DimBinding:
    """After a block: the control-flow node's dynamic symbol `symbol` (a bare Dim) takes
    `value`, a dim expression of the block's result shapes, and must lie in [lo, hi]
    (`failure`: index into `Plan.failures`). A later binding of an already bound symbol
    checks equality instead (two outputs sharing one dynamic dim)."""

    symbol: object  # Dim
    value: object  # int | Dim
    lo: int
    hi: object  # int | Dim (of symbols bound before the run) | None
    failure: int
    # the capacity (a symbol) the dim's buffers are planned at, and the failure telling
    # the executable to grow it and run again when the value exceeds it
    capacity: object = None
    grow: int = -1


@dataclass(slots=True)
class Block:
    """A subgraph planned like a graph: `kernels` in order, then `copies` of the results
    that were not computed in the buffers the node expects them in. Its parameters are
    no buffers of their own: kernels read the node's input buffers (or a loop's current
    state) directly. `results` are the buffers holding each result after the block."""

    name: str
    kernels: list
    copies: list[Copy]
    results: list[str]


@dataclass(slots=True)
class Branch:
    """If (`kind` "If": block 0 when the bool `selector` is true, else block 1) or Case
    (block `selector`, an int32/int64 index; another index fails with `failure`). Only the
    chosen block runs; its results land in `outputs`, then `bindings[block]` bind the
    node's dynamic dims."""

    KIND: ClassVar[str] = "control flow: branch"  # what tables and profiles call it

    name: str
    nodes: list[NodeRef]
    kind: str
    selector: str
    selector_dtype: DType
    blocks: list[Block]
    reads: list[str]  # the node's input buffers (selector and captures)
    outputs: list[str]
    bindings: list[list[DimBinding]]
    failure: int | None = None


@dataclass(frozen=True, slots=True)
class LoopVar:
    """One loop-carried value, double-buffered: `current` and `next` are pointers the
    subgraphs read and the body writes, swapped after each iteration between the arena
    buffers `first` and `second`."""

    current: str
    next: str
    first: str
    second: str
    dtype: DType


@dataclass(slots=True)
class Loop:
    """While: `init` copies the initial values into the first state buffers; then
    `while (cond) { body; swap }`, the cond block's bool result in `pred`; `final` copies
    the current state into `outputs`. More than `max_iterations` runs of the body fail
    with `failure`. `init_bindings` / `bindings` bind the loop's dynamic dims from the
    initial values / the body's results."""

    KIND: ClassVar[str] = "control flow: loop"  # what tables and profiles call it

    name: str
    nodes: list[NodeRef]
    cond: Block
    body: Block
    pred: str
    state: list[LoopVar]
    init: list[Copy]
    final: list[Copy]
    reads: list[str]  # the node's input buffers (initial values and captures)
    outputs: list[str]
    init_bindings: list[DimBinding]
    bindings: list[DimBinding]
    max_iterations: int | None
    failure: int


ControlKernel = Branch | Loop


def blocks_of(k) -> list[Block]:
    """The blocks a control-flow kernel holds, in order ([] for other kernels)."""
    if isinstance(k, Branch):
        return list(k.blocks)
    if isinstance(k, Loop):
        return [k.cond, k.body]
    return []


def same_place_copy(k) -> tuple[str, str] | None:
    """(source, destination) buffers of a kernel that only copies elements to the same
    positions of another buffer (a Reshape, Squeeze, Flatten, Identity): when the memory
    plan puts the destination in place of the source, the copy has nothing to do."""
    if not isinstance(k, Pointwise) or k.lets or len(k.stores) != 1 or len(k.loads) != 1:
        return None
    (var, load), store = next(iter(k.loads.items())), k.stores[0]
    if store.value.op != "var" or store.value.value != var:
        return None
    out = store.access
    same = (load.dtype, load.offset, load.strides) == (out.dtype, out.offset, out.strides)
    return (load.buffer, out.buffer) if same and load.buffer != out.buffer else None


def walk_kernels(kernels: list) -> list:
    """Every kernel of `kernels` and of the blocks inside them, in preorder (a
    control-flow kernel before the kernels of its blocks)."""
    out = []
    for k in kernels:
        out.append(k)
        for block in blocks_of(k):
            out.extend(walk_kernels(block.kernels))
    return out
