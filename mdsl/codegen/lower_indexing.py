"""Indexing, scans and selections as kernels: no Python callback for the ops real models
export around their convolutions and matmuls.

Two kinds of lowering:

- affine copies (`kir.Pointwise`, every target renders them): Split (one copy per
  piece), Tile (a broadcast over the tiled view of the output), DepthToSpace and
  SpaceToDepth (a permuted copy: reshape, transpose, reshape);
- `kir.Indexed` kernels for targets that render them (C): Gather, GatherElements,
  ScatterElements, CumSum, CumProd, TopK, ArgMax/ArgMin, OneHot, Pad in every mode and nearest
  Resize as an *index map* (per axis, the source index of each output index, -1 for the
  constant), linear and cubic Resize as an *interpolation* (per resized axis, each output
  index's taps: source indices and weights, summed in double as the reference does).

Indexed kernels have static shapes (a symbolic dim raises ShapeError: the planner then
specializes the graph per shape), but for Gather and OneHot, whose sizes may be symbolic.
Over symbolic dims, a constant Pad is a fill and a strided copy, and a Pad in another mode
(and Resize) a call of a C function computing its indices when it runs, so one build
serves every size (and sizes known only at run time need no callback). An index outside [-n, n) stops the run with the
kernel's `error`, naming the axis and its size, as the interpreter does.

>>> import numpy as np, mdsl
>>> with mdsl.Graph("emb") as g:
...     table = g.input("table", (4, 2))
...     g.output(mdsl.ops.gather(table, g.input("ids", (3,), "int64")), "y")
>>> exe = mdsl.compile(g, backend="c")
>>> exe.plan.fallbacks
[]
>>> exe(table=np.arange(8, dtype=np.float32).reshape(4, 2), ids=np.array([3, -4, 1]))["y"]
array([[6., 7.],
       [0., 1.],
       [2., 3.]], dtype=float32)
"""

from __future__ import annotations

import math

from mdsl import expr as E
from mdsl.codegen import kir
from mdsl.codegen.access import contiguous_strides
from mdsl.codegen.lower import Context, Unsupported, kernel_name, node_ref
from mdsl.ir.dim import Dim
from mdsl.ir.dtype import DType
from mdsl.ir.errors import ShapeError
from mdsl.ir.graph import Node, Tensor
from mdsl.ops.resizing import axis_taps, resized_axes

ARITHMETIC = (DType.float32, DType.float64, DType.int32, DType.int64)
INDEXED_OPS = (
    "Gather",
    "GatherElements",
    "ScatterElements",
    "CumSum",
    "CumProd",
    "TopK",
    "ArgMax",
    "ArgMin",
    "Pad",
    "OneHot",
    "Resize",
    "Shape",
    "Size",
)
AFFINE_OPS = ("Split", "Tile", "DepthToSpace", "SpaceToDepth", "ValueDims")
# sizes may be symbolic (B x T ids, N labels); Resize checks its own
SYMBOLIC_OPS = ("Gather", "OneHot", "Resize", "Shape", "Size")


def lower_indexing(ctx: Context, node: Node, indexed: bool) -> list:
    """The kernels computing `node`; Unsupported when it has no such form (or, with
    `indexed` False, needs a `kir.Indexed` kernel the target does not render)."""
    op = node.op_type
    if op in AFFINE_OPS:
        return _AFFINE[op](ctx, node)
    if op == "Pad" and _symbolic_constant_pad(node):
        return _fill_and_copy(ctx, node)
    if op == "Pad" and _symbolic_border_pad(ctx, node):
        return [_border_pad_call(ctx, node)]
    if op in INDEXED_OPS and indexed:
        for t in (*node.inputs, *node.outputs):
            if t is not None and op not in SYMBOLIC_OPS:
                _static(t)
        return [_INDEXED[op](ctx, node)]
    raise Unsupported(f"no generated form for {op}")


def _static(t: Tensor) -> tuple[int, ...]:
    if any(isinstance(d, Dim) for d in t.shape):
        raise ShapeError(f"{t.name}: indexing over symbolic dims {t.type.describe()}")
    return tuple(int(d) for d in t.shape)


def _split3(shape: tuple[int, ...], axis: int) -> tuple[int, int, int]:
    """(outer, axis size, inner) of a row-major `shape` around `axis`."""
    return math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1 :])


def _indexed(ctx, node, op, inputs, outputs, params, error=None) -> kir.Indexed:
    return kir.Indexed(
        kernel_name(ctx, [node]),
        [node_ref(node)],
        op,
        [ctx.buffer_of(t) for t in inputs],
        [ctx.buffer_of(t) for t in outputs],
        [t.dtype for t in (*inputs, *outputs)],
        params,
        error,
    )


def _range_error(op: str, axis: int, size: int) -> str:
    return f"{op}: an index is out of range for axis {axis} of size {size} (valid: {-size}..{size - 1})"


# -- affine copies ------------------------------------------------------------------------------
def _copy(ctx, node, load: kir.Access, store: kir.Access, space) -> kir.Pointwise:
    return kir.Pointwise(
        kernel_name(ctx, [node]),
        [node_ref(node)],
        tuple(space),
        {"src": load},
        [],
        [kir.Store(store, E.var("src"))],
    )


def _split(ctx: Context, node: Node) -> list[kir.Pointwise]:
    x = node.inputs[0]
    axis = node.attrs["axis"] % len(x.shape)
    strides = contiguous_strides(tuple(x.shape))
    kernels, start = [], 0
    for out in node.outputs:
        space = tuple(out.shape)
        load = kir.Access(ctx.buffer_of(x), x.dtype, start * strides[axis], strides)
        store = kir.Access(ctx.buffer_of(out), out.dtype, 0, contiguous_strides(space))
        kernels.append(_copy(ctx, node, load, store, space))
        start += out.shape[axis]
    return kernels


def _value_dims(ctx: Context, node: Node) -> list[kir.Pointwise]:
    """ValueDims passes its tensor through (its symbols are bound before the run)."""
    x, out = node.inputs[0], node.outputs[0]
    space = tuple(x.shape)
    load = kir.Access(ctx.buffer_of(x), x.dtype, 0, contiguous_strides(space))
    store = kir.Access(ctx.buffer_of(out), out.dtype, 0, contiguous_strides(space))
    return [_copy(ctx, node, load, store, space)]


def _symbolic_constant_pad(node: Node) -> bool:
    """A constant Pad over symbolic dims or by symbolic pads (value dims: never negative)
    with no negative int pad: a fill and a strided copy, whatever the sizes."""
    x, out = node.inputs[0], node.outputs[0]
    symbolic = any(isinstance(d, Dim) for d in (*x.shape, *out.shape, *node.attrs["pads"]))
    pads_ok = all(isinstance(p, Dim) or p >= 0 for p in node.attrs["pads"])
    return symbolic and pads_ok and node.attrs["mode"] == "constant"


def _symbolic_border_pad(ctx: Context, node: Node) -> bool:
    """A Pad in mode edge, reflect or wrap over symbolic dims (its pads are static then),
    on a C target: a C function mapping indices when it runs."""
    x, out = node.inputs[0], node.outputs[0]
    symbolic = any(isinstance(d, Dim) for d in (*x.shape, *out.shape))
    return symbolic and ctx.c_target and node.attrs["mode"] != "constant" and len(x.shape) > 0


def _border_pad_call(ctx: Context, node: Node) -> kir.CustomCall:
    """Pad as a call of `runtime_sizes_pad` (its attrs: see mdsl/ops/runtime_sizes.c)."""
    from mdsl.codegen.lower_custom import lower_source_call
    from mdsl.ops.padding import PAD_MODES
    from mdsl.ops.runtime_sizes import C_SOURCE

    rank = len(node.inputs[0].shape)
    axes = node.attrs["axes"]
    axes = range(rank) if axes is None else [a % rank for a in axes]
    pads = node.attrs["pads"]
    widths = dict.fromkeys(range(rank), (0, 0))
    widths.update(zip(axes, zip(pads[: len(pads) // 2], pads[len(pads) // 2 :])))
    attrs = [PAD_MODES.index(node.attrs["mode"])]
    for a in range(rank):
        attrs += widths[a]
    return lower_source_call(ctx, node, C_SOURCE, "runtime_sizes_pad", tuple(map(float, attrs)))


def _fill_and_copy(ctx: Context, node: Node) -> list[kir.Pointwise]:
    """out = constant_value everywhere, then x copied into out at its begin pads."""
    x, out = node.inputs[0], node.outputs[0]
    rank = len(x.shape)
    axes = node.attrs["axes"]
    axes = range(rank) if axes is None else [a % rank for a in axes]
    pads = node.attrs["pads"]
    begins = dict.fromkeys(range(rank), 0)
    begins.update(zip(axes, pads[: len(pads) // 2]))
    space, out_space = tuple(x.shape), tuple(out.shape)
    out_strides = contiguous_strides(out_space)
    value = E.const(float(node.attrs["constant_value"]))
    fill = kir.Pointwise(
        kernel_name(ctx, [node]),
        [node_ref(node)],
        out_space,
        {},
        [],
        [kir.Store(kir.Access(ctx.buffer_of(out), out.dtype, 0, out_strides), value)],
    )
    offset = sum(begins[a] * out_strides[a] for a in range(rank))
    load = kir.Access(ctx.buffer_of(x), x.dtype, 0, contiguous_strides(space))
    store = kir.Access(ctx.buffer_of(out), out.dtype, offset, out_strides)
    return [fill, _copy(ctx, node, load, store, space)]


def _tile(ctx: Context, node: Node) -> list[kir.Pointwise]:
    """out viewed as [r0, d0, r1, d1, ...]: the input repeats along every r (stride 0)."""
    x, out = node.inputs[0], node.outputs[0]
    repeats = node.attrs["repeats"]
    own, out_strides = contiguous_strides(tuple(x.shape)), contiguous_strides(tuple(out.shape))
    space, loads, stores = [], [], []
    for r, d, s_in, s_out in zip(repeats, x.shape, own, out_strides):
        space += [r, d]
        loads += [0, s_in]
        stores += [d * s_out, s_out]
    load = kir.Access(ctx.buffer_of(x), x.dtype, 0, tuple(loads))
    store = kir.Access(ctx.buffer_of(out), out.dtype, 0, tuple(stores))
    return [_copy(ctx, node, load, store, space)]


def _permuted_copy(ctx: Context, node: Node, view: tuple, perm: tuple) -> list[kir.Pointwise]:
    """out = x.reshape(view).transpose(perm), contiguous: a copy over the output's view."""
    x, out = node.inputs[0], node.outputs[0]
    space = tuple(view[p] for p in perm)
    view_strides = contiguous_strides(view)
    load = kir.Access(ctx.buffer_of(x), x.dtype, 0, tuple(view_strides[p] for p in perm))
    store = kir.Access(ctx.buffer_of(out), out.dtype, 0, contiguous_strides(space))
    return [_copy(ctx, node, load, store, space)]


def _blocks(node: Node) -> tuple:
    """(n, c, h, w, blocksize); batch and spatial dims may be symbolic, channels not."""
    n, c, h, w = node.inputs[0].shape
    if isinstance(c, Dim):
        raise Unsupported(f"{node.op_type} over symbolic channels")
    return n, c, h, w, node.attrs["blocksize"]


def _depth_to_space(ctx: Context, node: Node) -> list[kir.Pointwise]:
    n, c, h, w, b = _blocks(node)
    if node.attrs["mode"] == "DCR":
        return _permuted_copy(ctx, node, (n, b, b, c // (b * b), h, w), (0, 3, 4, 1, 5, 2))
    return _permuted_copy(ctx, node, (n, c // (b * b), b, b, h, w), (0, 1, 4, 2, 5, 3))


def _space_to_depth(ctx: Context, node: Node) -> list[kir.Pointwise]:
    n, c, h, w, b = _blocks(node)
    return _permuted_copy(ctx, node, (n, c, h // b, b, w // b, b), (0, 3, 5, 1, 2, 4))


_AFFINE = {
    "Split": _split,
    "Tile": _tile,
    "DepthToSpace": _depth_to_space,
    "SpaceToDepth": _space_to_depth,
    "ValueDims": _value_dims,
}


# -- indexed kernels -----------------------------------------------------------------------------
def _gather(ctx: Context, node: Node) -> kir.Indexed:
    data, indices = node.inputs
    shape = tuple(data.shape)
    axis = node.attrs["axis"] % len(shape)
    outer, size, inner = _split3(shape, axis)
    params = {"outer": outer, "size": size, "inner": inner, "count": math.prod(indices.shape)}
    return _indexed(
        ctx,
        node,
        "gather",
        [data, indices],
        node.outputs,
        params,
        _range_error("Gather", axis, size),
    )


def _elementwise_params(node: Node, data: Tensor, indices: Tensor) -> dict:
    shape = _static(data)
    axis = node.attrs["axis"] % len(shape)
    return {
        "axis": axis,
        "index_shape": _static(indices),
        "data_strides": contiguous_strides(shape),
        "size": shape[axis],
    }


def _gather_elements(ctx: Context, node: Node) -> kir.Indexed:
    data, indices = node.inputs
    params = _elementwise_params(node, data, indices)
    error = _range_error("GatherElements", params["axis"], params["size"])
    return _indexed(ctx, node, "gather_elements", [data, indices], node.outputs, params, error)


def _scatter_elements(ctx: Context, node: Node) -> kir.Indexed:
    data, indices, updates = node.inputs
    reduction = node.attrs["reduction"]
    if reduction != "none" and data.dtype not in ARITHMETIC:
        raise Unsupported(f"ScatterElements {reduction} in {data.dtype}")
    params = _elementwise_params(node, data, indices)
    params["reduction"] = reduction
    params["total"] = math.prod(_static(data))
    error = _range_error("ScatterElements", params["axis"], params["size"])
    return _indexed(
        ctx, node, "scatter_elements", [data, indices, updates], node.outputs, params, error
    )


def _cumsum(ctx: Context, node: Node) -> kir.Indexed:
    """CumSum, and CumProd as the same scan multiplying (params["product"])."""
    x = node.inputs[0]
    if x.dtype not in ARITHMETIC:
        raise Unsupported(f"{node.op_type} in {x.dtype}")
    shape = _static(x)
    outer, size, inner = _split3(shape, node.attrs["axis"] % len(shape))
    params = {"outer": outer, "size": size, "inner": inner}
    params.update(exclusive=bool(node.attrs["exclusive"]), reverse=bool(node.attrs["reverse"]))
    if node.op_type == "CumProd":
        params["product"] = True
    return _indexed(ctx, node, "cumsum", [x], node.outputs, params)


def _topk(ctx: Context, node: Node) -> kir.Indexed:
    x = node.inputs[0]
    if x.dtype not in ARITHMETIC:
        raise Unsupported(f"TopK in {x.dtype}")
    shape = _static(x)
    outer, size, inner = _split3(shape, node.attrs["axis"] % len(shape))
    params = {"outer": outer, "size": size, "inner": inner, "k": int(node.attrs["k"])}
    params["largest"] = bool(node.attrs["largest"])
    return _indexed(ctx, node, "topk", [x], node.outputs, params)


def _arg_reduce(ctx: Context, node: Node) -> kir.Indexed:
    x = node.inputs[0]
    if x.dtype not in ARITHMETIC:
        raise Unsupported(f"{node.op_type} in {x.dtype}")
    shape = _static(x)
    outer, size, inner = _split3(shape, node.attrs["axis"] % len(shape))
    params = {"outer": outer, "size": size, "inner": inner, "max": node.op_type == "ArgMax"}
    params["last"] = bool(node.attrs["select_last_index"])
    return _indexed(ctx, node, "arg_reduce", [x], node.outputs, params)


def _pad(ctx: Context, node: Node) -> kir.Indexed:
    """Every mode as per-axis source tables (-1: the constant). As in the reference,
    negative pads crop first and the mode then pads the cropped tensor."""
    x, out = node.inputs[0], node.outputs[0]
    shape, out_shape = _static(x), _static(out)
    axes = node.attrs["axes"]
    axes = range(len(shape)) if axes is None else [a % len(shape) for a in axes]
    pads = node.attrs["pads"]
    widths = dict.fromkeys(range(len(shape)), (0, 0))
    for a, begin, end in zip(axes, pads[: len(pads) // 2], pads[len(pads) // 2 :]):
        widths[a] = (begin, end)
    mode = node.attrs["mode"]
    tables = []
    for a, n in enumerate(shape):
        begin, end = widths[a]
        lo = max(-begin, 0)
        kept = n - lo - max(-end, 0)
        if mode != "constant" and kept == 0 and out_shape[a]:
            raise Unsupported(f"{mode} padding of an empty axis")
        pad = max(begin, 0)
        tables.append(
            tuple(_at(lo, _source_index(o - pad, kept, mode)) for o in range(out_shape[a]))
        )
    params = {"shape": out_shape, "strides": contiguous_strides(shape), "tables": tuple(tables)}
    params["value"] = float(node.attrs["constant_value"])
    return _indexed(ctx, node, "index_map", [x], [out], params)


def _one_hot(ctx: Context, node: Node) -> kir.Indexed:
    """out[o, j, i] = on if indices[o, i] (negative: + depth) == j else off, the new axis
    of size depth between the index dims before and after `axis`."""
    indices, values = node.inputs
    axis = node.attrs["axis"] % (len(indices.shape) + 1)
    params = {"outer": math.prod(indices.shape[:axis]), "depth": int(node.attrs["depth"])}
    params["inner"] = math.prod(indices.shape[axis:])
    return _indexed(ctx, node, "one_hot", [indices, values], node.outputs, params)


def _resize(ctx: Context, node: Node) -> kir.Indexed | kir.CustomCall:
    """Taps are tabled from static sizes. Over symbolic dims Resize calls a C function
    computing them when it runs (`mdsl/ops/resizing.c`), so that one symbolic build
    serves every image size (a specialized build per size would compile on each new
    size)."""
    x, out = node.inputs[0], node.outputs[0]
    if any(isinstance(d, Dim) for d in (*x.shape, *out.shape)):
        return _symbolic_resize(ctx, node)
    shape, out_shape = _static(x), _static(out)
    a = node.attrs
    taps = {
        axis: axis_taps(a, shape[axis], n, scale)
        for axis, n, scale in resized_axes(
            shape, scales=a["scales"], sizes=a["sizes"], axes=a["axes"]
        )
    }
    params = {"shape": out_shape, "strides": contiguous_strides(shape)}
    if a["mode"] == "nearest":
        params["tables"] = tuple(
            tuple(int(i) for i in taps[d][0][0]) if d in taps else tuple(range(n))
            for d, n in enumerate(shape)
        )
        params["value"] = 0.0  # no table holds -1
        return _indexed(ctx, node, "index_map", [x], [out], params)
    if x.dtype not in (DType.float32, DType.float64):
        raise Unsupported(f"{a['mode']} Resize in {x.dtype}")
    params["taps"] = {
        d: (tuple(map(tuple, idx.tolist())), tuple(map(tuple, w.tolist())))
        for d, (idx, w) in sorted(taps.items())
    }
    return _indexed(ctx, node, "interpolate", [x], [out], params)


def _symbolic_resize(ctx: Context, node: Node) -> kir.CustomCall:
    """Resize as a call of `resize_symbolic` (its attrs: see mdsl/ops/resizing.c)."""
    from mdsl.codegen.lower_custom import lower_source_call
    from mdsl.ops.resizing import C_SOURCE, COORDINATE_MODES, MODES, NEAREST_MODES

    x, a = node.inputs[0], node.attrs
    if not ctx.c_target:
        raise Unsupported("Resize over symbolic dims is generated for C only")
    if a["mode"] != "nearest" and x.dtype not in (DType.float32, DType.float64):
        raise Unsupported(f"{a['mode']} Resize in {x.dtype}")
    rank = len(x.shape)
    axes = range(rank) if a["axes"] is None else [d % rank for d in a["axes"]]
    scales = a["scales"] or [0.0] * len(axes)  # 0: output length / input length (sizes)
    attrs = [
        MODES.index(a["mode"]),
        COORDINATE_MODES.index(a["coordinate_transformation_mode"]),
        NEAREST_MODES.index(a["nearest_mode"]),
        float(a["cubic_coeff_a"]),
        float(a["exclude_outside"]),
        len(axes),
    ]
    for axis, scale in zip(axes, scales):
        attrs += [axis, float(scale)]
    return lower_source_call(ctx, node, C_SOURCE, "resize_symbolic", tuple(map(float, attrs)))


def _at(start: int, i: int) -> int:
    return -1 if i < 0 else start + i


def _source_index(i: int, n: int, mode: str) -> int:
    """The input index output position `i` (relative to the input's start) reads."""
    if 0 <= i < n:
        return i
    if mode == "constant":
        return -1
    if mode == "edge":
        return min(max(i, 0), n - 1)
    if mode == "wrap":
        return i % n
    period = 2 * (n - 1)  # reflect: ... 2 1 | 0 1 2 ... n-1 | n-2 ...
    if period == 0:
        return 0
    i %= period
    return i if i < n else period - i


def _shape_values(ctx: Context, node: Node) -> kir.Indexed:
    """Shape and Size of a tensor of symbolic dims: its dims (their product) written from
    the run's symbol values; the tensor's data is not read. (Static ones are folded.)"""
    dims = tuple(node.inputs[0].shape)
    if node.op_type == "Shape":
        values = dims[node.attrs["start"] : node.attrs["end"]]
    else:
        values = (math.prod(dims, start=1),)
    return _indexed(ctx, node, "dim_values", [], node.outputs, {"values": values})


_INDEXED = {
    "Gather": _gather,
    "GatherElements": _gather_elements,
    "ScatterElements": _scatter_elements,
    "CumSum": _cumsum,
    "CumProd": _cumsum,
    "TopK": _topk,
    "ArgMax": _arg_reduce,
    "ArgMin": _arg_reduce,
    "Pad": _pad,
    "OneHot": _one_hot,
    "Resize": _resize,
    "Shape": _shape_values,
    "Size": _shape_values,
}
