"""The Plan's Kernel IR seen as AscendC kernels.

Every kernel of the AscendC target walks *rows*: an outer index space and, inside it, one
contiguous run of elements (the row) that is cut into Unified Buffer tiles. Loads and
stores become `Stream`s: a base offset affine in the outer indices plus a stride along the
row (1: contiguous, copied with DataCopy/DataCopyPad; 0: one scalar per row; otherwise
gathered element by element).

- `Pointwise` -> `VectorKernel` (dims merged as far as every access allows, the last
  merged dim is the row);
- `Rowwise` -> `RowKernel` (the reduced axes, merged into one, are the row);
- `Gemm` -> `MatmulKernel` (cube unit through the Matmul API; the epilogue is a
  `VectorKernel` over the output whose `acc` is the result: a row of a result block in the
  UB on SoCs with separate cube and vector cores, else read back from GM);
- `Conv` -> `Im2colKernel` + `MatmulKernel` (columns in the kernel workspace);
- `Pool`, `Callback` and whatever the vector templates cannot express -> `HostKernel`,
  run on the host between launches.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mdsl import expr as E
from mdsl.codegen import kir
from mdsl.ir.dtype import DType
from mdsl.targets.ascendc.program import NotVectorizable

WORKSPACE = "workspace"  # pseudo-buffer: the user workspace of the kernel (im2col columns)


@dataclass(frozen=True, slots=True)
class Stream:
    """Elements of `buffer` at offset + sum(outer index * outer stride) + j * inner."""

    name: str
    buffer: str
    dtype: DType
    offset: int
    outer: tuple[int, ...]
    inner: int

    @property
    def is_tile(self) -> bool:
        return self.inner != 0


@dataclass(slots=True)
class VectorKernel:
    """for each outer index, for each tile of the row: lets; stores."""

    name: str
    nodes: list[kir.NodeRef]
    outer_shape: tuple[int, ...]
    row_length: int
    loads: dict[str, Stream]
    lets: list[kir.Let]
    stores: list[tuple[Stream, E.Expr]]
    prescale: float = 1.0  # a GEMM epilogue's alpha, applied to `acc` first

    @property
    def rows(self) -> int:
        return math.prod(self.outer_shape)

    @property
    def is_copy(self) -> bool:
        """One load copied unchanged to one store (movement ops): any dtype, no compute."""
        if self.lets or len(self.stores) != 1 or len(self.loads) != 1:
            return False
        (stream, value), (name, load) = self.stores[0], next(iter(self.loads.items()))
        return value.op == "var" and value.value == name and load.dtype == stream.dtype


@dataclass(slots=True)
class RowKernel:
    """for each outer index: phases over the row (`kir.Reduce`, `kir.Let`, and stores).

    `resident`: the whole row stays in the Unified Buffer across the phases (read from GM
    once); otherwise every phase streams it through UB tiles again. The planner sets it
    when the row fits."""

    name: str
    nodes: list[kir.NodeRef]
    outer_shape: tuple[int, ...]
    row_length: int
    loads: dict[str, Stream]
    phases: list  # kir.Reduce | kir.Let | RowStorePhase | ScalarStorePhase
    resident: bool = False

    @property
    def rows(self) -> int:
        return math.prod(self.outer_shape)


@dataclass(slots=True)
class RowStorePhase:
    stream: Stream
    value: E.Expr


@dataclass(slots=True)
class ScalarStorePhase:
    stream: Stream
    value: E.Expr


@dataclass(slots=True)
class MatmulKernel:
    """out[b] = op(a[b]) @ op(b[b]) on the cube unit, then the epilogue on the vector unit."""

    name: str
    nodes: list[kir.NodeRef]
    dtype: DType  # of A and B
    out_dtype: DType
    batch_shape: tuple[int, ...]
    a: kir.Access
    b: kir.Access
    out: kir.Access
    m: int
    n: int
    k: int
    trans_a: bool
    trans_b: bool
    lda: int
    ldb: int
    epilogue: VectorKernel | None
    # the epilogue runs on the result blocks in the UB (GetTensorC), C never reaches GM;
    # the planner sets it where the SoC has the Matmul client (MIX mode)
    result_in_ub: bool = False

    @property
    def batch(self) -> int:
        return math.prod(self.batch_shape)


@dataclass(slots=True)
class Im2colKernel:
    """Convolution input columns: col[n, g, (c, ki, kj), (oy, ox)] in the workspace."""

    name: str
    nodes: list[kir.NodeRef]
    x: str
    n: int
    channels: int
    height: int
    width: int
    group: int
    kernel: tuple[int, int]
    out_hw: tuple[int, int]
    stride: tuple[int, int]
    pad: tuple[int, int]
    dilation: tuple[int, int]

    @property
    def rows_per_image(self) -> int:  # K = (C / group) * kh * kw per group
        return self.channels // self.group * self.kernel[0] * self.kernel[1]

    @property
    def units(self) -> int:  # one unit: one output row (oy) of one column row
        return self.n * self.group * self.rows_per_image * self.out_hw[0]

    @property
    def col_elements(self) -> int:
        return self.n * self.group * self.rows_per_image * self.out_hw[0] * self.out_hw[1]


@dataclass(slots=True)
class HostKernel:
    """Runs on the host between launches (a callback into the embedding application)."""

    name: str
    nodes: list[kir.NodeRef]
    reason: str
    reads: list[str]
    writes: list[str]
    source: object = None  # the Kernel IR record


AscendcKernel = VectorKernel | RowKernel | MatmulKernel | Im2colKernel | HostKernel


# -- addressing ---------------------------------------------------------------------------------
def merge_dims(shape: tuple[int, ...], strides: list[tuple[int, ...]]):
    """(size, [stride per access]) dims: size-1 dims dropped, adjacent dims merged where
    every access walks them contiguously. Never empty (a scalar space is one dim of 1)."""
    dims = [(d, [s[i] for s in strides]) for i, d in enumerate(shape) if d != 1]
    merged: list[tuple[int, list[int]]] = []
    for size, inner in dims:
        if merged:
            prev_size, prev = merged[-1]
            if all(p == s * size for p, s in zip(prev, inner)):
                merged[-1] = (prev_size * size, inner)
                continue
        merged.append((size, inner))
    return merged or [(1, [0] * len(strides))]


def _streams(named: list[tuple[str, kir.Access]], shape: tuple[int, ...]):
    """Streams over `shape` collapsed to (outer dims, row): outer shape, row length, streams."""
    dims = merge_dims(shape, [a.strides for _, a in named])
    outer_shape = tuple(size for size, _ in dims[:-1])
    row_length, inner = dims[-1]
    streams = {}
    for j, (name, a) in enumerate(named):
        outer = tuple(s[j] for _, s in dims[:-1])
        streams[name] = Stream(name, a.buffer, a.dtype, a.offset, outer, inner[j])
    return outer_shape, row_length, streams


# -- Pointwise --------------------------------------------------------------------------------------
def adapt_pointwise(k: kir.Pointwise) -> VectorKernel:
    named = list(k.loads.items()) + [(f"st{i}", s.access) for i, s in enumerate(k.stores)]
    outer_shape, row, streams = _streams(named, k.shape)
    stores = [(streams[f"st{i}"], s.value) for i, s in enumerate(k.stores)]
    loads = {name: streams[name] for name in k.loads}
    return VectorKernel(k.name, list(k.nodes), outer_shape, row, loads, list(k.lets), stores)


# -- Rowwise ----------------------------------------------------------------------------------------
def adapt_rowwise(k: kir.Rowwise) -> RowKernel:
    n_outer = len(k.outer_shape)
    stored = [p for p in k.phases if isinstance(p, (kir.RowStore, kir.Store))]
    stores = [(f"st{i}", p.access) for i, p in enumerate(stored)]
    named = list(k.loads.items()) + stores
    row_dims = merge_dims(k.row_shape, [a.strides[n_outer:] for _, a in named])
    if len(row_dims) != 1:
        raise NotVectorizable("the reduced axes are not one strided run of memory")
    row_length, inner = row_dims[0]
    streams = {
        name: Stream(name, a.buffer, a.dtype, a.offset, a.strides[:n_outer], inner[j])
        for j, (name, a) in enumerate(named)
    }
    phases, index = [], 0
    for p in k.phases:
        if isinstance(p, (kir.Reduce, kir.RowStore)) and p.lets:
            raise NotVectorizable("per-element temporaries inside a row phase")
        if isinstance(p, kir.RowStore):
            phases.append(RowStorePhase(streams[f"st{index}"], p.value))
            index += 1
        elif isinstance(p, kir.Store):
            phases.append(ScalarStorePhase(streams[f"st{index}"], p.value))
            index += 1
        else:
            phases.append(p)
    loads = {name: streams[name] for name in k.loads}
    return RowKernel(k.name, list(k.nodes), tuple(k.outer_shape), row_length, loads, phases)


# -- GEMM ---------------------------------------------------------------------------------------------
def epilogue_kernel(
    name: str,
    ep: kir.Epilogue | None,
    out: kir.Access,
    out_shape: tuple[int, ...],
    n: int,
    alpha: float,
) -> VectorKernel | None:
    """The epilogue as a vector kernel over the output: outer dims (*batch, m), row n;
    `acc` reads the matmul result back."""
    if ep is None and alpha == 1.0:
        return None
    if ep is None:
        ep = kir.Epilogue({}, [], [kir.Store(_result_access(out, n), E.var("acc"))])
    acc = Stream("acc", out.buffer, out.dtype, out.offset, (*out.strides, n), 1)
    loads = {"acc": acc}
    for var, a in ep.loads.items():
        loads[var] = Stream(var, a.buffer, a.dtype, a.offset, a.strides[:-1], a.strides[-1])
    stores = [
        (
            Stream(
                f"st{i}",
                s.access.buffer,
                s.access.dtype,
                s.access.offset,
                s.access.strides[:-1],
                s.access.strides[-1],
            ),
            s.value,
        )
        for i, s in enumerate(ep.stores)
    ]
    outer_shape = out_shape[:-1]
    return VectorKernel(name, list(ep.nodes), outer_shape, n, loads, list(ep.lets), stores, alpha)


def _result_access(out: kir.Access, n: int) -> kir.Access:
    """The result matrix as an access over (*batch, m, n)."""
    return kir.Access(out.buffer, out.dtype, out.offset, (*out.strides, n, 1))


def adapt_gemm(k: kir.Gemm) -> MatmulKernel:
    epilogue = epilogue_kernel(k.name, k.epilogue, k.out, tuple(k.out_shape), k.n, k.alpha)
    return MatmulKernel(
        k.name,
        list(k.nodes),
        k.dtype,
        k.out.dtype,
        tuple(k.batch_shape),
        k.a,
        k.b,
        k.out,
        k.m,
        k.n,
        k.k,
        k.trans_a,
        k.trans_b,
        k.lda,
        k.ldb,
        epilogue,
    )


# -- convolution ------------------------------------------------------------------------------------
def adapt_conv(k: kir.Conv) -> list:
    """im2col into the workspace (unless the conv is 1x1, stride 1, no padding) and a
    batched matmul over (image, group) with the epilogue."""
    cg, coutg = k.c // k.group, k.cout // k.group
    kdim, ohw = cg * k.kh * k.kw, k.oh * k.ow
    direct = not k.scratch  # the planner's own test for "no im2col needed"
    if direct:
        b = kir.Access(k.x, DType.float32, 0, (k.c * k.h * k.w_in, cg * k.h * k.w_in))
        kernels = []
    else:
        b = kir.Access(WORKSPACE, DType.float32, 0, (k.group * kdim * ohw, kdim * ohw))
        im2col = Im2colKernel(
            f"{k.name}_im2col",
            list(k.nodes[:1]),
            k.x,
            k.n,
            k.c,
            k.h,
            k.w_in,
            k.group,
            (k.kh, k.kw),
            (k.oh, k.ow),
            tuple(k.stride),
            tuple(k.pad),
            tuple(k.dilation),
        )
        kernels = [im2col]
    a = kir.Access(k.w, DType.float32, 0, (0, coutg * kdim))
    out = kir.Access(k.out, DType.float32, 0, (k.cout * ohw, coutg * ohw))
    epilogue = None
    if k.epilogue is not None:
        epilogue = _conv_epilogue(k, out, coutg, ohw)
    kernels.append(
        MatmulKernel(
            k.name,
            list(k.nodes),
            DType.float32,
            DType.float32,
            (k.n, k.group),
            a,
            b,
            out,
            coutg,
            ohw,
            kdim,
            False,
            False,
            kdim,
            ohw,
            epilogue,
        )
    )
    return kernels


def _conv_epilogue(k: kir.Conv, out: kir.Access, coutg: int, ohw: int) -> VectorKernel:
    """The epilogue's NCHW accesses re-indexed over (n, group, channel in group, pixel)."""

    def regroup(a: kir.Access) -> kir.Access:
        sn, sc, sy, sx = a.strides
        if k.oh > 1 and k.ow > 1 and sy != sx * k.ow:
            raise NotVectorizable("an epilogue operand whose pixels are not one strided run")
        pixel = sx if k.ow > 1 else sy
        return kir.Access(a.buffer, a.dtype, a.offset, (sn, sc * coutg, sc, pixel))

    ep = k.epilogue
    regrouped = kir.Epilogue(
        {v: regroup(a) for v, a in ep.loads.items()},
        ep.lets,
        [kir.Store(regroup(s.access), s.value) for s in ep.stores],
        ep.nodes,
    )
    shape = (k.n, k.group, coutg, ohw)
    return epilogue_kernel(k.name, regrouped, out, shape, ohw, 1.0)


# -- expressions --------------------------------------------------------------------------------------
def inline_lets(lets: list[kir.Let], roots: list[E.Expr]) -> list[E.Expr]:
    """`roots` with every Let variable replaced by its expression (shared, not copied:
    a Let used twice is one DAG node, computed once)."""
    table: dict[str, E.Expr] = {}
    memo: dict[int, E.Expr] = {}

    def rebuild(e: E.Expr) -> E.Expr:
        for node in E.walk(e):
            if id(node) in memo:
                continue
            if node.op == "var":
                memo[id(node)] = table.get(node.value, node)
            elif not node.args:
                memo[id(node)] = node
            else:
                args = tuple(memo[id(a)] for a in node.args)
                same = all(x is y for x, y in zip(args, node.args))
                memo[id(node)] = node if same else E.Expr(node.op, args, node.value)
        return memo[id(e)]

    for let in lets:
        table[let.var] = rebuild(let.value)
    return [rebuild(r) for r in roots]
