"""GEMM and convolution groups (an extern anchor plus its pointwise epilogue), and pooling.

The anchor's result element is the variable `acc` in the epilogue; the epilogue runs over
each block of output rows right after the BLAS call that produced them, while they are in
cache. Only float32 and float64 go through BLAS; anything else falls back.
"""

from __future__ import annotations

from mdsl import expr as E
from mdsl.codegen import kir
from mdsl.codegen.access import broadcast_strides, contiguous_strides
from mdsl.codegen.gemm_fold import fold_batch_into_rows, fold_scale_into_alpha
from mdsl.codegen.lower import (
    Context,
    Unsupported,
    ValueTable,
    kernel_name,
    node_exprs,
    node_ref,
)
from mdsl.codegen.onednn_matmul import with_onednn_batched, with_onednn_matmul
from mdsl.codegen.packing import (
    chained_to_conv,
    onednn_post_ops,
    with_onednn,
    with_packed_conv_weights,
    with_packed_weights,
)
from mdsl.codegen.strided_operands import transpose_view
from mdsl.ir.dim import Dim
from mdsl.ir.dtype import DType
from mdsl.ir.errors import ShapeError
from mdsl.ir.graph import Node, Tensor
from mdsl.ops.windows import concrete_padding, window_of

BLAS_DTYPES = (DType.float32, DType.float64)


def _epilogue(
    ctx: Context,
    anchor_value: E.Expr,
    members: list[Node],
    anchor: Node,
    outputs: list[Tensor],
    space: tuple[int, ...],
    extra_loads=None,
):
    """Epilogue over `space` with `acc` standing for the anchor's result; it stores every
    group output (the anchor's own output included when it is kept)."""
    table = ValueTable(ctx, space)
    table.loads.update(extra_loads or {})
    table.values[anchor.outputs[0]] = anchor_value
    lets = []
    for node in members:
        for t, e in zip(node.outputs, node_exprs(node, table.args_of(node))):
            name = ctx.fresh("v")
            lets.append(kir.Let(name, e, t.dtype))
            table.values[t] = E.var(name)
    stores = [
        kir.Store(
            kir.Access(ctx.buffer_of(t), t.dtype, 0, contiguous_strides(space)), table.values[t]
        )
        for t in outputs
    ]
    return kir.Epilogue(table.loads, lets, stores, [node_ref(n) for n in members])


def _result_buffer(ctx: Context, anchor: Node, outputs: list[Tensor]) -> str:
    """Where BLAS writes: the anchor's own output if it is kept, else the group's output
    of the anchor's shape and dtype (the epilogue then rewrites it in place)."""
    target = anchor.outputs[0]
    if target in outputs:
        return ctx.buffer_of(target)
    for t in outputs:
        if tuple(t.shape) == tuple(target.shape) and t.dtype == target.dtype:
            return ctx.buffer_of(t)
    raise Unsupported("no output of the GEMM's shape and dtype to accumulate into")


def lower_gemm(ctx: Context, nodes: list[Node], outputs: list[Tensor]) -> kir.Gemm:
    anchor, members = nodes[0], nodes[1:]
    if anchor.op_type == "MatMul":
        a, b = anchor.inputs
        trans_a = trans_b = False
        alpha, bias = 1.0, None
    elif anchor.op_type == "Gemm":
        a, b = anchor.inputs[:2]
        trans_a, trans_b = anchor.attrs["transA"], anchor.attrs["transB"]
        alpha = anchor.attrs["alpha"]
        bias = anchor.inputs[2] if len(anchor.inputs) > 2 else None
    else:
        raise Unsupported(f"{anchor.op_type} is not a GEMM")
    out = anchor.outputs[0]
    dtype = out.dtype
    if dtype not in BLAS_DTYPES or a.dtype != dtype or b.dtype != dtype:
        raise Unsupported(f"GEMM in {dtype}")
    a_shape = (1, *a.shape) if len(a.shape) == 1 else tuple(a.shape)
    b_shape = (*b.shape, 1) if len(b.shape) == 1 else tuple(b.shape)
    m = a_shape[-1] if trans_a else a_shape[-2]
    k = a_shape[-2] if trans_a else a_shape[-1]
    n = b_shape[-2] if trans_b else b_shape[-1]
    batch = _batch_shape(a_shape, b_shape)
    a_access, lda = _batch_access(ctx, a, a_shape, batch), a_shape[-1]
    b_access, ldb = _batch_access(ctx, b, b_shape, batch), b_shape[-1]
    if anchor.op_type == "MatMul" and ctx.c_target:  # Transpose outputs read in place
        a_view = transpose_view(a) if len(a.shape) >= 2 and len(b.shape) >= 2 else None
        b_view = transpose_view(b) if len(a.shape) >= 2 and len(b.shape) >= 2 else None
        if a_view is not None:
            a_access, trans_a, lda = _view_access(ctx, a_view, batch), a_view.transposed, a_view.ld
        if b_view is not None:
            b_access, trans_b, ldb = _view_access(ctx, b_view, batch), b_view.transposed, b_view.ld
    space = (*batch, m, n)
    acc = E.var("acc")
    anchor_value = acc
    extra = {}
    if bias is not None:
        extra["bias"] = kir.Access(
            ctx.buffer_of(bias), bias.dtype, 0, broadcast_strides(tuple(bias.shape), space)
        )
        beta = float(anchor.attrs["beta"])
        anchor_value = acc + (E.var("bias") if beta == 1.0 else E.const(beta) * E.var("bias"))
    epilogue = _epilogue(ctx, anchor_value, members, anchor, outputs, space, extra)
    target = _result_buffer(ctx, anchor, outputs)
    out_strides = tuple(s * m * n for s in contiguous_strides(batch))
    gemm = kir.Gemm(
        kernel_name(ctx, nodes),
        [node_ref(x) for x in nodes],
        dtype,
        batch,
        a_access,
        b_access,
        kir.Access(target, dtype, 0, out_strides),
        m,
        n,
        k,
        trans_a,
        trans_b,
        lda,
        ldb,
        float(alpha),
        _unless_trivial(epilogue, target),
        space,
    )
    if not ctx.c_target:  # the other targets tile and name their GEMMs by the graph's shapes
        return gemm
    gemm = with_onednn_matmul(ctx, fold_batch_into_rows(gemm), b)
    gemm = gemm if gemm.onednn else with_packed_weights(ctx, gemm, b)
    if gemm.onednn or gemm.packed_b:
        return gemm
    return with_onednn_batched(fold_scale_into_alpha(gemm))  # a library scales as it stores


def _unless_trivial(epilogue: kir.Epilogue, target: str) -> kir.Epilogue | None:
    """None for an epilogue that would only store `acc` back where BLAS wrote it."""
    only_store = len(epilogue.stores) == 1 and epilogue.stores[0].access.buffer == target
    plain = only_store and not epilogue.lets and not epilogue.loads
    return None if plain and epilogue.stores[0].value.op == "var" else epilogue


def _batch_shape(a_shape, b_shape) -> tuple[int, ...]:
    from mdsl.ops.shape_rules import broadcast_shapes

    return tuple(broadcast_shapes(a_shape[:-2], b_shape[:-2]))


def _batch_access(ctx: Context, t: Tensor, shape, batch) -> kir.Access:
    matrix = shape[-1] * shape[-2]
    own = broadcast_strides(tuple(shape[:-2]), batch)
    return kir.Access(ctx.buffer_of(t), t.dtype, 0, tuple(s * matrix for s in own))


def _view_access(ctx: Context, view, batch) -> kir.Access:
    """Per-batch offsets of a transposed view: its leading strides broadcast to `batch`
    (dims of size 1 and missing leading dims repeat)."""
    lead = [0 if size == 1 else stride for size, stride in zip(view.shape[:-2], view.strides[:-2])]
    own = [0] * (len(batch) - len(lead)) + lead
    return kir.Access(ctx.buffer_of(view.tensor), view.tensor.dtype, 0, tuple(own))


def lower_conv(ctx: Context, nodes: list[Node], outputs: list[Tensor]) -> kir.Conv:
    """A 2-D convolution, or a 1-D one as 2-D over a height of 1 (the same memory)."""
    anchor, members = nodes[0], nodes[1:]
    x, w = anchor.inputs[:2]
    bias = anchor.inputs[2] if len(anchor.inputs) > 2 else None
    out = anchor.outputs[0]
    if len(x.shape) not in (3, 4) or out.dtype != DType.float32 or x.dtype != DType.float32:
        raise Unsupported("only 1-D and 2-D float32 convolution is generated")
    if any(t.type.storage_format not in (None,) for t in (x, out)):
        raise Unsupported("stored layouts")
    _static_but_batch(x, w, out)
    attrs = anchor.attrs
    window = window_of(attrs, tuple(w.shape[2:]))
    pad = concrete_padding(window, tuple(x.shape[2:]))
    strides, begins, dilations = tuple(window.strides), tuple(pad.begins), tuple(window.dilations)
    n, c, *in_spatial = x.shape
    cout, cg, *kernel = w.shape
    out_spatial = list(out.shape[2:])
    if len(in_spatial) == 1:  # 1-D: a row of height 1
        in_spatial, kernel, out_spatial = [1, *in_spatial], [1, *kernel], [1, *out_spatial]
        strides, begins, dilations = (1, *strides), (0, *begins), (1, *dilations)
    (h, wi), (kh, kw), (oh, ow) = in_spatial, kernel, out_spatial
    group = attrs["group"]
    space = tuple(out.shape)
    acc = E.var("acc")
    extra = {}
    anchor_value = acc
    if bias is not None:
        extra["bias"] = kir.Access(
            ctx.buffer_of(bias), bias.dtype, 0, (0, 1) + (0,) * (len(space) - 2)
        )
        anchor_value = acc + E.var("bias")
    epilogue = _epilogue(ctx, anchor_value, members, anchor, outputs, space, extra)
    target = _result_buffer(ctx, anchor, outputs)
    pointwise_1x1 = (kh, kw) == (1, 1) and strides == (1, 1) and not any(pad.begins + pad.ends)
    scratch_elems = 0 if pointwise_1x1 else cg * kh * kw * oh * ow
    conv = kir.Conv(
        kernel_name(ctx, nodes),
        [node_ref(x_) for x_ in nodes],
        DType.float32,
        ctx.buffer_of(x),
        ctx.buffer_of(w),
        target,
        n,
        c,
        h,
        wi,
        cout,
        kh,
        kw,
        oh,
        ow,
        strides,
        begins,
        dilations,
        group,
        "",
        scratch_elems,
        _unless_trivial(epilogue, target),
        space,
    )
    chained = anchor.name not in ctx.hand_written and chained_to_conv(anchor, outputs)
    fused = onednn_post_ops(anchor, members, outputs)
    if fused is not None:
        post_ops, residual = fused
        buffers = [ctx.buffer_of(t) if t is not None else "" for t in (residual, bias)]
        fused = (post_ops, *buffers)
    conv = with_onednn(ctx, conv, w, chained, fused)
    if not conv.onednn:
        conv = with_packed_conv_weights(ctx, conv, w)
    if conv.scratch_elems:
        conv.scratch = ctx.scratch(conv.scratch_elems, DType.float32)
    return conv


def _static_but_batch(*tensors: Tensor) -> None:
    """Windows are generated for static channels and spatial dims; the batch may be
    symbolic (ShapeError otherwise: the planner specializes the graph)."""
    for t in tensors:
        if any(isinstance(d, Dim) for d in t.shape[1:]):
            raise ShapeError(f"{t.name}: windows over symbolic dims {t.type.describe()}")


def lower_pool(ctx: Context, node: Node) -> kir.Pool:
    """2-D and 3-D pooling, and 1-D pooling as 2-D over rows of height 1 (the same NCL
    memory)."""
    x, out = node.inputs[0], node.outputs[0]
    if len(x.shape) not in (3, 4, 5) or x.dtype != DType.float32:
        raise Unsupported("only 1-D to 3-D float32 pooling is generated")
    if x.type.storage_format is not None:
        raise Unsupported("stored layouts")
    _static_but_batch(x, out)
    attrs = node.attrs
    window = window_of(attrs)
    pad = concrete_padding(window, tuple(x.shape[2:]))
    flat = max(0, 4 - len(x.shape))  # leading unit axes that make a 1-D window 2-D
    return kir.Pool(
        kernel_name(ctx, [node]),
        [node_ref(node)],
        x.dtype,
        "max" if node.op_type == "MaxPool" else "avg",
        ctx.buffer_of(x),
        ctx.buffer_of(out),
        x.shape[0],
        x.shape[1],
        (1,) * flat + tuple(x.shape[2:]),
        (1,) * flat + tuple(out.shape[2:]),
        (1,) * flat + tuple(window.kernel),
        (1,) * flat + tuple(window.strides),
        (0,) * flat + tuple(pad.begins),
        (1,) * flat + tuple(window.dilations),
        bool(attrs.get("count_include_pad", False)),
    )
