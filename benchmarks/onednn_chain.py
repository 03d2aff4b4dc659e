"""oneDNN as a benchmark contender: an ONNX chain of Conv (+ Relu / Clip / Add) run as
oneDNN convolution primitives through its C API (cffi, ABI mode).

Each Conv is one `forward_inference` primitive: source and destination NCHW (plain
strides), weights in the layout the primitive prefers (`format_tag_any`, reordered once
when the chain is built), bias as the primitive's bias, a following Relu / Clip as an
eltwise post-op and an Add of an earlier value as a binary-add post-op. Nothing is
converted per call. Used by `benchmarks/conv_gemm.py --onednn`.
"""

from __future__ import annotations

import cffi
import numpy as np

from mdsl.codegen import onednn as D

_FFI = cffi.FFI()
_FFI.cdef(D.DECLARATIONS)


class OneDnnError(RuntimeError):
    pass


def _check(status: int, what: str) -> None:
    if status != 0:
        raise OneDnnError(f"{what} failed: dnnl status {status}")


class _Lib:
    def __init__(self):
        path = D.library_path()
        if path is None:
            raise OneDnnError("oneDNN 3.x (onednn-cpu-gomp) is not installed")
        self.lib = _FFI.dlopen(str(path))
        eng = _FFI.new("dnnl_engine_t *")
        _check(self.lib.dnnl_engine_create(eng, D.CPU, 0), "engine")
        self.engine = eng[0]
        st = _FFI.new("dnnl_stream_t *")
        _check(self.lib.dnnl_stream_create(st, self.engine, D.STREAM_DEFAULT), "stream")
        self.stream = st[0]

    def plain_md(self, shape):
        strides = np.cumprod((1, *shape[::-1][:-1]))[::-1]
        md = _FFI.new("dnnl_memory_desc_t *")
        dims = _FFI.new("int64_t[12]", list(shape))
        st = _FFI.new("int64_t[12]", [int(s) for s in strides])
        _check(self.lib.dnnl_memory_desc_create_with_strides(md, len(shape), dims, D.F32, st), "md")
        return md[0]

    def any_md(self, shape):
        md = _FFI.new("dnnl_memory_desc_t *")
        dims = _FFI.new("int64_t[12]", list(shape))
        _check(
            self.lib.dnnl_memory_desc_create_with_tag(
                md, len(shape), dims, D.F32, D.FORMAT_TAG_ANY
            ),
            "md any",
        )
        return md[0]

    def memory(self, md, array=None):
        m = _FFI.new("dnnl_memory_t *")
        handle = (
            _FFI.cast("void *", -1) if array is None else _FFI.cast("void *", array.ctypes.data)
        )
        _check(self.lib.dnnl_memory_create(m, md, self.engine, handle), "memory")
        return m[0]


_LIB: list[_Lib] = []


def lib() -> _Lib:
    if not _LIB:
        _LIB.append(_Lib())
    return _LIB[0]


def _strides(shape, layout):
    """Element strides of an activation of `shape` (N, C, H, W) laid out as `layout`."""
    if layout == "nhwc" and len(shape) == 4:
        _, c, h, w = shape
        return (h * w * c, 1, w * c, c)
    return tuple(int(s) for s in np.cumprod((1, *shape[::-1][:-1]))[::-1])


class Reorder:
    def __init__(self, src_md, dst_md):
        L = self.L = lib()
        rpd = _FFI.new("dnnl_primitive_desc_t *")
        _check(
            L.lib.dnnl_reorder_primitive_desc_create(
                rpd, src_md, L.engine, dst_md, L.engine, _FFI.NULL
            ),
            "reorder",
        )
        rp = _FFI.new("dnnl_primitive_t *")
        _check(L.lib.dnnl_primitive_create(rp, rpd[0]), "reorder primitive")
        self.prim = rp[0]
        self.src, self.dst = L.memory(src_md, _DUMMY), L.memory(dst_md, _DUMMY)
        self.args = _FFI.new("dnnl_exec_arg_t[2]", [(D.ARG_FROM, self.src), (D.ARG_TO, self.dst)])

    def __call__(self, src, dst):
        lb = self.L.lib
        lb.dnnl_memory_set_data_handle(self.src, _FFI.cast("void *", src.ctypes.data))
        lb.dnnl_memory_set_data_handle(self.dst, _FFI.cast("void *", dst.ctypes.data))
        _check(lb.dnnl_primitive_execute(self.prim, self.L.stream, 2, self.args), "reorder run")


_DUMMY = np.zeros(16, np.float32)


class ConvPrimitive:
    """One convolution with bias and post-ops; weights reordered once. `src_md` is the
    source's layout; the destination's is `dst_md` (None: the primitive's choice)."""

    def __init__(self, src_md, x_shape, w, b, *, strides, pads, dilations, group, post, dst_md):
        L = self.L = lib()
        n, _, h, wi = x_shape
        cout, cg, kh, kw = w.shape
        oh = (h + pads[0] + pads[2] - ((kh - 1) * dilations[0] + 1)) // strides[0] + 1
        ow = (wi + pads[1] + pads[3] - ((kw - 1) * dilations[1] + 1)) // strides[1] + 1
        self.out_shape = (n, cout, oh, ow)
        wshape = (group, cout // group, cg, kh, kw) if group > 1 else (cout, cg, kh, kw)
        dst_md = dst_md or L.any_md(self.out_shape)
        bias_md = L.plain_md((cout,))
        ops = _FFI.new("dnnl_post_ops_t *")
        _check(L.lib.dnnl_post_ops_create(ops), "post ops")
        for kind, *args in post:
            if kind == "relu":
                _check(L.lib.dnnl_post_ops_append_eltwise(ops[0], D.ELTWISE_RELU, 0.0, 0.0), "relu")
            elif kind == "clip":
                _check(L.lib.dnnl_post_ops_append_eltwise(ops[0], D.ELTWISE_CLIP, *args), "clip")
            elif kind == "add":  # the residual is in dst already: dst = conv + dst
                _check(L.lib.dnnl_post_ops_append_sum(ops[0], 1.0, 0, D.F32), "sum")
        attr = _FFI.new("dnnl_primitive_attr_t *")
        _check(L.lib.dnnl_primitive_attr_create(attr), "attr")
        _check(L.lib.dnnl_primitive_attr_set_post_ops(attr[0], ops[0]), "attr post ops")
        pd = _FFI.new("dnnl_primitive_desc_t *")
        dims = lambda v: _FFI.new("int64_t[12]", list(v))  # noqa: E731
        _check(
            L.lib.dnnl_convolution_forward_primitive_desc_create(
                pd,
                L.engine,
                D.FORWARD_INFERENCE,
                D.CONVOLUTION_DIRECT,
                src_md,
                L.any_md(wshape),
                bias_md,
                dst_md,
                dims(strides),
                dims([d - 1 for d in dilations]),
                dims(pads[:2]),
                dims(pads[2:]),
                attr[0],
            ),
            "convolution primitive descriptor",
        )
        impl = _FFI.new("char **")
        L.lib.dnnl_primitive_desc_query(pd[0], D.QUERY_IMPL_INFO_STR, 0, impl)
        self.impl = _FFI.string(impl[0]).decode()
        prim = _FFI.new("dnnl_primitive_t *")
        _check(L.lib.dnnl_primitive_create(prim, pd[0]), "primitive")
        self.prim = prim[0]
        self.src_md = L.lib.dnnl_primitive_desc_query_md(pd[0], D.QUERY_SRC_MD, 0)
        self.dst_md = L.lib.dnnl_primitive_desc_query_md(pd[0], D.QUERY_DST_MD, 0)
        self.dst_size = L.lib.dnnl_memory_desc_get_size(self.dst_md) // 4
        # weights: plain -> the primitive's layout, once
        w_md = L.lib.dnnl_primitive_desc_query_md(pd[0], D.QUERY_WEIGHTS_MD, 0)
        self.w_packed = np.empty(L.lib.dnnl_memory_desc_get_size(w_md) // 4 + 16, np.float32)
        self.w_mem = L.memory(w_md, self.w_packed)
        Reorder(L.plain_md(wshape), w_md)(
            np.ascontiguousarray(w.reshape(wshape), np.float32), self.w_packed
        )
        L.lib.dnnl_stream_wait(L.stream)
        self.bias = np.ascontiguousarray(
            b if b is not None else np.zeros(cout, np.float32), np.float32
        )
        self.b_mem = L.memory(bias_md, self.bias)
        self.src_mem = L.memory(self.src_md, _DUMMY)
        self.dst_mem = L.memory(self.dst_md, _DUMMY)
        fixed = [
            (D.ARG_SRC, self.src_mem),
            (D.ARG_WEIGHTS, self.w_mem),
            (D.ARG_BIAS, self.b_mem),
            (D.ARG_DST, self.dst_mem),
        ]
        self.nargs = len(fixed)
        self.args = _FFI.new("dnnl_exec_arg_t[]", self.nargs)
        for i, (arg, mem) in enumerate(fixed):
            self.args[i].arg = arg
            self.args[i].memory = mem

    def __call__(self, x: np.ndarray, out: np.ndarray):
        lb = self.L.lib
        lb.dnnl_memory_set_data_handle(self.src_mem, _FFI.cast("void *", x.ctypes.data))
        lb.dnnl_memory_set_data_handle(self.dst_mem, _FFI.cast("void *", out.ctypes.data))
        _check(lb.dnnl_primitive_execute(self.prim, self.L.stream, self.nargs, self.args), "conv")


class OneDnnChain:
    """The Conv / Relu / Clip / Add nodes of an ONNX model as fused oneDNN convolutions.

    `layout` is the activations' layout between convolutions: "nchw" (what mdsl's
    tensors are), "nhwc", "blocked" (each primitive's choice, nChw16c on AVX-512), or
    "per-conv" (blocked inside each convolution, NCHW between them: what a drop-in
    replacement of one NCHW kernel costs); the graph's input and output stay NCHW,
    reordered at the ends when they differ."""

    def __init__(self, model, feeds: dict[str, np.ndarray], layout: str = "nchw"):
        from onnx import numpy_helper

        L = lib()
        g = model.graph
        consts = {t.name: numpy_helper.to_array(t) for t in g.initializer}
        nodes = [n for n in g.node if n.op_type != "Constant"]
        for n in g.node:
            if n.op_type == "Constant":
                consts[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
        self.steps = []  # callables on the dict of values
        self.impls = []
        self.conv_steps = []  # the convolutions alone, without any reorder
        shapes = {k: v.shape for k, v in feeds.items()}
        mds = {k: L.plain_md(v.shape) for k, v in feeds.items()}
        self.buffers: dict[str, np.ndarray] = {}
        alias: dict[str, str] = {}
        i = 0
        while i < len(nodes):
            node = nodes[i]
            if node.op_type != "Conv":
                raise OneDnnError(f"oneDNN chain: {node.op_type} is not fused into a Conv")
            at = {a.name: a for a in node.attribute}
            w = consts[node.input[1]]
            b = consts[node.input[2]] if len(node.input) > 2 else None
            k = len(w.shape) - 2
            ints = lambda n, d, at=at: list(at[n].ints) if n in at else d  # noqa: E731
            post, residuals, out = [], [], node.output[0]
            i += 1
            while i < len(nodes) and out in nodes[i].input:
                nxt = nodes[i]
                if nxt.op_type == "Relu":
                    post.append(("relu",))
                elif nxt.op_type == "Clip":
                    post.append(("clip", float(consts[nxt.input[1]]), float(consts[nxt.input[2]])))
                elif nxt.op_type == "Add":
                    other = nxt.input[1] if nxt.input[0] == out else nxt.input[0]
                    other = alias.get(other, other)
                    post.append(("add",))
                    residuals.append(other)
                else:
                    break
                alias[nxt.output[0]] = out
                out = nxt.output[0]
                i += 1
            src = alias.get(node.input[0], node.input[0])
            src_shape = shapes[src]
            blocked = layout in ("blocked", "per-conv")
            want = L.any_md(src_shape) if blocked else self._md(src_shape, layout)
            dst_md = None
            if not blocked:
                dst_md = self._md(_conv_out(src_shape, w.shape, at, k), layout)
            prim = ConvPrimitive(
                want,
                src_shape,
                w,
                b,
                strides=ints("strides", [1] * k),
                pads=ints("pads", [0] * 2 * k),
                dilations=ints("dilations", [1] * k),
                group=at["group"].i if "group" in at else 1,
                post=post,
                dst_md=dst_md,
            )
            if not L.lib.dnnl_memory_desc_equal(prim.src_md, mds[src]):
                moved = f"{src}@{len(self.steps)}"
                self.buffers[moved] = np.empty(
                    L.lib.dnnl_memory_desc_get_size(prim.src_md) // 4, np.float32
                )
                r = Reorder(mds[src], prim.src_md)
                self.steps.append(lambda v, r=r, a=src, b=moved: r(v[a], v[b]))
                src = moved
            shapes[out], mds[out] = prim.out_shape, prim.dst_md
            self.buffers[out] = np.empty(prim.dst_size, np.float32)
            for r in residuals:  # sum post-op: the residual is reordered into dst first
                move = Reorder(mds[r], prim.dst_md)
                self.steps.append(lambda v, m=move, a=r, o=out: m(v[a], v[o]))
            self.steps.append(lambda v, p=prim, a=src, o=out: p(v[a], v[o]))
            self.conv_steps.append(self.steps[-1])
            alias.pop(out, None)
            if layout == "per-conv":  # every convolution's output back to NCHW
                plain = L.plain_md(prim.out_shape)
                if not L.lib.dnnl_memory_desc_equal(plain, prim.dst_md):
                    back, moved = Reorder(prim.dst_md, plain), f"{out}@nchw"
                    self.buffers[moved] = np.empty(prim.out_shape, np.float32)
                    self.steps.append(lambda v, m=back, a=out, b=moved: m(v[a], v[b]))
                    alias[out] = moved
                    shapes[moved], mds[moved] = prim.out_shape, plain
            self.impls.append(prim.impl)
        self.output = alias.get(g.output[0].name, g.output[0].name)
        self.out_shape = shapes[self.output]
        plain = L.plain_md(self.out_shape)
        if not L.lib.dnnl_memory_desc_equal(plain, mds[self.output]):
            move = Reorder(mds[self.output], plain)
            self.buffers["@out"] = np.empty(self.out_shape, np.float32)
            self.steps.append(lambda v, m=move, a=self.output: m(v[a], v["@out"]))
            self.output = "@out"

    impls: list[str]

    def _md(self, shape, layout):
        md = _FFI.new("dnnl_memory_desc_t *")
        dims = _FFI.new("int64_t[12]", list(shape))
        st = _FFI.new("int64_t[12]", list(_strides(shape, layout)))
        _check(
            lib().lib.dnnl_memory_desc_create_with_strides(md, len(shape), dims, D.F32, st), "md"
        )
        return md[0]

    def convolutions_only(self, **feeds) -> None:
        """Only the convolution primitives (their inputs already in the primitives'
        layouts; the result is not the model's): what the chain would cost in a graph
        whose activations all stay blocked."""
        values = dict(feeds)
        values.update(self.buffers)
        for step in self.conv_steps:
            step(values)
        lib().lib.dnnl_stream_wait(lib().stream)

    def __call__(self, **feeds) -> np.ndarray:
        values = dict(feeds)
        values.update(self.buffers)
        for step in self.steps:
            step(values)
        lib().lib.dnnl_stream_wait(lib().stream)
        return values[self.output].reshape(self.out_shape)


def _conv_out(x_shape, w_shape, at, k):
    ints = lambda n, d: list(at[n].ints) if n in at else d  # noqa: E731
    s, p, d = ints("strides", [1] * k), ints("pads", [0] * 2 * k), ints("dilations", [1] * k)
    spatial = [
        (x_shape[2 + j] + p[j] + p[k + j] - ((w_shape[2 + j] - 1) * d[j] + 1)) // s[j] + 1
        for j in range(k)
    ]
    return (x_shape[0], w_shape[0], *spatial)
