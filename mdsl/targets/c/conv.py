"""C bodies of convolutions on packed weights (`mdsl.codegen.packing`): dense ones, and
grouped ones group after group.

Per image: the source is staged once (a zero-padded copy of the input for stride 1,
an im2col matrix otherwise), then strips of 32 output-grid positions run in parallel;
each strip computes every panel of output channels in registers
(`csrc/templates/c/packed_conv.h.j2`) and applies the epilogue as it stores it: in one
loop over the strip where the grid is the output plane (`_whole_strip`), else to each
output row segment. Measured against im2col + OpenBLAS (thread CPU time, 2-core
AVX-512 Xeon, 3x3 stride 1): 64ch 56x56 0.48x, 128ch 28x28 0.77x, 256ch 14x14 0.9x,
512ch 7x7 0.95x, 32ch 112x112 0.26x.
"""

from __future__ import annotations

from mdsl.codegen import kir, onednn
from mdsl.codegen.blocked import pool_pad_end
from mdsl.codegen.dims import render_dim
from mdsl.codegen.packing import (
    CONV_PANEL,
    CONV_STRIP,
    conv_source_grid,
    group_source_floats,
    onednn_geometry,
    padded_extent,
)
from mdsl.ir.dtype import DType

INDENT = "    "
PARALLEL_MIN = 32768  # as the C target's: smaller loops stay on one thread


def conv_index(k: kir.Conv) -> list[str]:
    """The loop variables naming an output element of `k` (a 1-D convolution has no oy)."""
    return ["n", "co", "oy", "ox"] if len(k.out_shape) == 4 else ["n", "co", "ox"]


def _parallel(work: int) -> str:
    return "#pragma omp parallel for schedule(static)" if work > PARALLEL_MIN else ""


def packed_conv_body(k: kir.Conv, epilogue_lines, im2col_lines) -> str:
    """The kernel body of the packed convolution `k`; `epilogue_lines` and
    `im2col_lines` are the C target's renderers of an epilogue and of im2col rows."""
    direct, gw, _, _ = conv_source_grid(k)
    kdim = k.c // k.group * k.kh * k.kw
    strips = -(-k.oh * gw // CONV_STRIP)
    lines = [
        f"for (int64_t n = 0; n < {render_dim(k.n)}; n++) {{",
        f"{INDENT}const float *xn = {k.x} + n * {k.c * k.h * k.w_in};",
    ]
    stage = _padded_copy_lines(k, "xn") if direct else im2col_lines(k, "xn", k.c)
    lines += [INDENT + x for x in stage]
    lines += [
        f"{INDENT}memset({k.scratch} + {k.scratch_elems - _slack(k)}, 0, sizeof(float) * {_slack(k)});",
        f"{INDENT}{_parallel(k.cout * kdim * k.oh * gw) or '/* small: one thread */'}",
        f"{INDENT}for (int64_t strip = 0; strip < {strips}; strip++) {{",
        f"{INDENT * 2}const int64_t p0 = strip * {CONV_STRIP};",
        f"{INDENT * 2}float tile[{CONV_PANEL * CONV_STRIP}];",
        *(INDENT * 2 + x for x in _strip_lines(k, gw, epilogue_lines)),
        f"{INDENT}}}",
        "}",
    ]
    return "\n".join(INDENT + x for x in lines)


def _strip_lines(k: kir.Conv, gw: int, epilogue_lines) -> list[str]:
    """One strip of grid positions from p0: each panel of output channels summed into
    `tile` and stored. A grouped convolution runs each group's panels on its part of the
    source, its weights packed group after group."""
    coutg, kdim = k.cout // k.group, k.c // k.group * k.kh * k.kw
    panels = -(-coutg // CONV_PANEL)
    grouped = k.group > 1
    g_w = f"g * {panels * kdim * CONV_PANEL} + " if grouped else ""
    g_src = f" + g * {group_source_floats(k)}" if grouped else ""
    g_co = f"g * {coutg} + " if grouped else ""
    lines = [
        f"for (int64_t b = 0; b < {panels}; b++) {{",
        f"{INDENT}const int rows = (int)({coutg} - b * {CONV_PANEL} < {CONV_PANEL} "
        f"? {coutg} - b * {CONV_PANEL} : {CONV_PANEL});",
        f"{INDENT}mdsl_pc_panel(rows, {kdim}, {k.packed_w} + {g_w}b * {kdim * CONV_PANEL}, "
        f"{k.offsets}, {k.scratch}{g_src} + p0, tile);",
        f"{INDENT}for (int r = 0; r < rows; r++) {{",
        f"{INDENT * 2}const int64_t co = {g_co}b * {CONV_PANEL} + r;",
        *(INDENT * 2 + x for x in _strip_store_lines(k, gw, epilogue_lines)),
        f"{INDENT}}}",
        "}",
    ]
    if not grouped:
        return lines
    return [f"for (int64_t g = 0; g < {k.group}; g++) {{", *(INDENT + x for x in lines), "}"]


def _strip_store_lines(k: kir.Conv, gw: int, epilogue_lines) -> list[str]:
    """Channel `co`'s row of the tile stored from grid position p0 on: in one loop over
    the strip when its positions are the output's in order (`_whole_strip`), else one
    output row segment at a time (a strip may span output rows and, for a direct
    convolution, the padding columns between them)."""
    grid = k.oh * gw
    if _whole_strip(k, gw):
        return [
            "const int64_t oy = 0, ox0 = p0;  /* the grid is the output plane: ox runs across rows */",
            f"const int64_t len = p0 + {CONV_STRIP} < {grid} ? {CONV_STRIP} : {grid} - p0;",
            f"const float *t = tile + r * {CONV_STRIP} - p0;",
            *_store_lines(k, epilogue_lines),
        ]
    return [
        f"for (int64_t p = p0; p < p0 + {CONV_STRIP} && p < {grid};) {{",
        f"{INDENT}const int64_t oy = p / {gw}, ox0 = p % {gw};",
        f"{INDENT}if (ox0 >= {k.ow}) {{ p = (oy + 1) * {gw}; continue; }}",
        f"{INDENT}const int64_t len = {k.ow} - ox0 < p0 + {CONV_STRIP} - p "
        f"? {k.ow} - ox0 : p0 + {CONV_STRIP} - p;",
        f"{INDENT}const float *t = tile + r * {CONV_STRIP} + (p - p0) - ox0;",
        *(INDENT + x for x in _store_lines(k, epilogue_lines)),
        f"{INDENT}p += len;",
        "}",
    ]


def _whole_strip(k: kir.Conv, gw: int) -> bool:
    """Whether a strip stores as one loop: the grid has no padding columns (an im2col
    grid, or a direct one without left and right padding), so its positions are the
    output plane's in order, and every output and epilogue operand walks that plane
    contiguously (row stride = width x column stride), so `oy = 0, ox = p` indexes it.
    Output rows shorter than a vector otherwise left the epilogue's loop scalar: a 1x1
    512 -> 512 on 14x14 spent 18% of its time there."""
    if gw != k.ow or len(k.out_shape) != 4:
        return False
    ep = k.epilogue
    accesses = [] if ep is None else [*ep.loads.values(), *(s.access for s in ep.stores)]
    return all(a.strides[2] == k.ow * a.strides[3] for a in accesses)


def _slack(k: kir.Conv) -> int:
    direct, _, source, _ = conv_source_grid(k)
    if direct:
        hp, wp = padded_extent(k)
        return source - k.c * hp * wp
    return source - k.c * k.kh * k.kw * k.oh * k.ow


def _padded_copy_lines(k: kir.Conv, xn: str) -> list[str]:
    """The image copied into the zero-padded source of a direct (stride 1) convolution."""
    ph, pw = k.pad
    hp, wp = padded_extent(k)
    rows, cols = min(k.h, hp - ph), min(k.w_in, wp - pw)
    return [
        f"{_parallel(k.c * hp * wp) or '/* small: one thread */'}",
        f"for (int64_t c = 0; c < {k.c}; c++) {{",
        f"{INDENT}float *plane = {k.scratch} + c * {hp * wp};  /* {hp} x {wp} */",
        f"{INDENT}memset(plane, 0, sizeof(float) * {hp * wp});",
        f"{INDENT}for (int64_t iy = 0; iy < {rows}; iy++)",
        f"{INDENT * 2}memcpy(plane + (iy + {ph}) * {wp} + {pw}, {xn} + (c * {k.h} + iy) * "
        f"{k.w_in}, sizeof(float) * {cols});",
        "}",
    ]


def _store_lines(k: kir.Conv, epilogue_lines) -> list[str]:
    """Output row segment (n, co, oy, [ox0, ox0 + len)) from the tile `t` (indexed by ox)."""
    if k.epilogue is None:
        row = f"{k.out} + ((n * {k.cout} + co) * {k.oh} + oy) * {k.ow}"
        return [f"memcpy({row} + ox0, t + ox0, sizeof(float) * len);"]
    inner = epilogue_lines(k.epilogue, k.out_shape, conv_index(k), "t[ox]", DType.float32)
    return [
        "#pragma omp simd",
        "for (int64_t ox = ox0; ox < ox0 + len; ox++) {",
        *(INDENT + x for x in inner),
        "}",
    ]


def uses_onednn(plan) -> bool:
    """Whether a convolution, GEMM or pooling of `plan` is computed by oneDNN (the
    library links it)."""
    return any(
        (isinstance(k, (kir.Conv, kir.Gemm)) and k.onednn) or (isinstance(k, kir.Pool) and k.layout)
        for k in plan.all_kernels()
    )


def onednn_link_args(plan) -> tuple[str, ...]:
    """Linker arguments for oneDNN when the plan calls it (path + rpath), else none."""
    path = onednn.library_path()
    if path is None or not uses_onednn(plan):
        return ()
    return (str(path), f"-Wl,-rpath,{path.parent}")


_POST_OPS = {
    "relu": "MDSL_DNNL_RELU",
    "clip": "MDSL_DNNL_CLIP",
    "sum": "MDSL_DNNL_SUM",
    "swish": "MDSL_DNNL_SWISH",
    "logistic": "MDSL_DNNL_LOGISTIC",
}


def _post_op(op: tuple) -> str:
    _, lo, hi = onednn.eltwise(op) if op[0] != "sum" else (0, 0.0, 0.0)
    return f"{{{_POST_OPS[op[0]]}, {_c_float(lo)}, {_c_float(hi)}}}"


def _c_float(v: float) -> str:
    return "INFINITY" if v == float("inf") else "-INFINITY" if v == float("-inf") else f"{v!r}f"


def _layout(tag: str) -> str:
    return onednn.LAYOUTS[tag] if tag else "NCHW"


def _c_tag(tag: str) -> str:
    return f'"{tag}"' if tag else "0"


def _ints(values) -> str:
    return ", ".join(str(int(v)) for v in values)


def weights_layout_line(words: tuple[int, ...], name: str = "w_layout") -> str:
    """The C array `name` of the layout words of weights reordered at plan time, which
    the primitive's own choice must equal (`mdsl_dnnl_same_layout`)."""
    return (
        f"static const int64_t {name}[{len(words)}] = {{{_ints(words)}}};"
        "  /* kind, ndims, padded dims, strides, blocks */"
    )


def team_state_lines(state_type: str, name: str) -> list[str]:
    """A kernel's two oneDNN primitive states and `s`, this call's: a primitive runs on
    the team size it was made at, and the team choice runs calls on one thread or on the
    whole team (made at the first call, one thread, a single primitive would pin every
    later call to one thread)."""
    return [
        "/* a primitive runs on the team size it was made at: one for calls on one thread,",
        "   one for calls on the whole team */",
        f"static {state_type} {name}[2];",
        f"{state_type} *const s = MDSL_DNNL_TEAM_STATE({name});",
    ]


def _weights_lines(k: kir.Conv) -> list[str]:
    """The weights reordered at plan time (one per layout the primitives of the team
    sizes chose): their layouts, `weights` as the spec takes them, `w` their buffers."""
    if not k.onednn_weights:  # a Winograd convolution: the primitive's weights are not kept
        return [
            "static const mdsl_dnnl_weights *const weights = 0;",
            "const float *const *const w = 0;",
        ]
    lines = [weights_layout_line(w.layout, f"w_layout{i}") for i, w in enumerate(k.onednn_weights)]
    specs = [
        f"{{{w.elems}, w_layout{i}, {len(w.layout)}, {w.threads}}}"
        for i, w in enumerate(k.onednn_weights)
    ]
    buffers = ", ".join(w.buffer for w in k.onednn_weights)
    return [
        *lines,
        f"static const mdsl_dnnl_weights weights[{len(specs)}] = {{{', '.join(specs)}}};"
        "  /* floats, layout, team size */",
        f"const float *const w[{len(specs)}] = {{{buffers}}};",
    ]


def _winograd_lines(k: kir.Conv) -> list[str]:
    if not k.winograd:
        return []
    lines = [
        "/* computed as Winograd F(2x2, 3x3) by mdsl_wino_run on NHWC tensors (weights",
        f"   transformed at plan time: {k.winograd}); oneDNN's primitive is not made, its",
        "   descriptor at one thread only gives the layouts the tensors are moved between */",
    ]
    if k.out_pixel_stride:
        lines.append(
            f"/* {k.out} lies inside a Concat's output: its pixels {k.out_pixel_stride} floats apart */"
        )
    return lines


def onednn_conv_body(k: kir.Conv, epilogue_lines) -> str:
    """The kernel body of `k` computed by oneDNN (`csrc/templates/c/onednn_conv.h.j2`);
    an epilogue oneDNN's post-ops do not express is applied to the NCHW result in place."""
    shape = onednn_geometry(k)
    geometry = [
        v for pair in (shape.strides, shape.dilates, shape.pad_l, shape.pad_r) for v in pair
    ]
    post = [_post_op(op) for op in k.post_ops] or ["{0, 0.0f, 0.0f}"]
    fused = ", ".join((["bias"] if k.bias else []) + [op[0] for op in k.post_ops])
    silu = "; SiLU after it (mdsl_silu_f32)" if k.silu else ""
    residual = f", residual {_layout(k.residual_layout)}" if k.residual else ""
    residual += " (the destination)" if k.dst_in_residual else ""
    copy = f" (kept in {_layout(k.x_copy_layout)} for other kernels)" if k.x_copy else ""
    if k.onednn_act_tag:  # see mdsl.codegen.packing.activation_tag
        copy += f"; asked in {_layout(k.onednn_act_tag)}, not oneDNN's choice"
    lines = [
        f"/* oneDNN {k.onednn}: x {_layout(k.x_layout)}{copy}{residual} -> "
        f"{_layout(k.out_layout)}"
        + (f"; {fused} fused" if fused else "")
        + silu
        + ("" if k.winograd else "; weights reordered at plan time")
        + " */",
        *_winograd_lines(k),
        *team_state_lines("mdsl_dnnl_conv", "state"),
        f"static const int64_t x_dims[4] = {{{_ints(shape.x)}}}, y_dims[4] = {{{_ints(shape.y)}}};",
        f"static const int64_t w_dims[{len(shape.w)}] = {{{_ints(shape.w)}}};",
        f"static const int64_t geometry[8] = {{{_ints(geometry)}}};  /* strides, dilates - 1, pads */",
        f"static const mdsl_dnnl_post_op post[{len(post)}] = {{{', '.join(post)}}};",
        *_weights_lines(k),
        "static const mdsl_dnnl_conv_spec spec = {",
        f"{INDENT}x_dims, w_dims, y_dims, {len(shape.w)}, geometry, {int(bool(k.bias))}, "
        f"{len(k.post_ops)}, post,",
        f"{INDENT}{_c_tag(k.x_layout)}, {_c_tag(k.residual_layout)}, {_c_tag(k.out_layout)}, "
        f"{k.onednn_src_elems}, {k.onednn_dst_elems}, weights, {len(k.onednn_weights)}, "
        f"{_c_tag(k.x_copy_layout)}, {int(k.dst_in_residual)}, {_c_tag(k.onednn_act_tag)}, "
        f"{int(bool(k.winograd))}, {k.out_pixel_stride}}};",
        "if (!mdsl_dnnl_conv_ready(s, &spec))",
        f"{INDENT}return 1;",
        f"if (mdsl_dnnl_conv_run(s, &spec, {k.x}, w, {k.winograd or '0'}, {k.bias or '0'}, "
        f"{k.residual or '0'}, {k.out}, {k.scratch or '0'}, {k.x_copy or '0'}))",
        f"{INDENT}return 1;",
    ]
    if k.silu:  # over the result in its layout (padding channels too: silu(0) = 0)
        lines.append(f"mdsl_silu_f32({k.out}, (int64_t)(dnnl_memory_desc_get_size(s->y_md) / 4));")
    if k.epilogue is not None:
        acc = f"{k.out}[((n * {k.cout} + co) * {k.oh} + oy) * {k.ow} + ox]"
        inner = epilogue_lines(k.epilogue, k.out_shape, conv_index(k), acc, DType.float32)
        lines += [
            _parallel(k.n * k.cout * k.oh * k.ow) or "/* small: one thread */",
            f"for (int64_t nco = 0; nco < {k.n * k.cout}; nco++) {{",
            f"{INDENT}const int64_t n = nco / {k.cout}, co = nco % {k.cout};",
            f"{INDENT}for (int64_t oy = 0; oy < {k.oh}; oy++) {{",
            f"{INDENT * 2}#pragma omp simd",
            f"{INDENT * 2}for (int64_t ox = 0; ox < {k.ow}; ox++) {{",
            *(INDENT * 3 + x for x in inner),
            f"{INDENT * 2}}}",
            f"{INDENT}}}",
            "}",
        ]
    return "\n".join(INDENT + x for x in lines)


POOL_AVG_EXCLUDE_PAD = 0x3FF  # dnnl_pooling_avg_exclude_padding


def onednn_pool_body(k: kir.Pool) -> str:
    """The kernel body of the 2-D pooling `k` of a blocked tensor: a max pooling by hand
    (`blocked_max_pool_body`), an average one by oneDNN's pooling primitive (blocked in
    and out)."""
    if k.kind == "max":
        return blocked_max_pool_body(k)
    pad_r = pool_pad_end(k) or ()
    window = [*k.strides, *k.kernel, *(d - 1 for d in k.dilations), *k.pads, *pad_r]
    lines = [
        f"/* oneDNN {k.kind} pooling: {_layout(k.layout)} -> {_layout(k.layout)} */",
        *team_state_lines("mdsl_dnnl_pool", "state"),
        f"static const int64_t x_dims[4] = {{{_ints((k.n, k.c, *k.in_spatial))}}};",
        f"static const int64_t y_dims[4] = {{{_ints((k.n, k.c, *k.out_spatial))}}};",
        f"static const int64_t window[10] = {{{_ints(window)}}};  "
        "/* strides, kernel, dilates - 1, pads */",
        f"static const mdsl_dnnl_pool_spec spec = {{x_dims, y_dims, window, {POOL_AVG_EXCLUDE_PAD:#x}, "
        f"{_c_tag(k.layout)}}};",
        f"return mdsl_dnnl_pool_run(s, &spec, {k.x}, {k.out});",
    ]
    return "\n".join(INDENT + x for x in lines)


def blocked_max_pool_body(k: kir.Pool) -> str:
    """The 2-D max pooling `k` in a kept layout, by hand: [n][c / block][h][w][block]
    (NHWC: one block of every channel), a row of outputs per task, each output the
    element-wise max of its taps' runs of channels (a vector of 16 in nChw16c). oneDNN's
    `jit` pooling took 0.26-0.31 ms for the 3x3 stride-2 pool after ResNet-50's and
    SqueezeNet's stems (64 channels 112x112 in nChw16c; ORT 0.11-0.13 ms). NaN wins, as
    in the interpreter; taps in the padding are skipped, so the padding channels of a
    last block stay the zeros they were."""
    tag = k.layout
    block = k.c if onednn.channel_block(tag) == 1 else onednn.channel_block(tag)
    lanes = max(d for d in range(1, min(block, 64) + 1) if block % d == 0)
    (h, w), (oh, ow) = k.in_spatial, k.out_spatial
    (kh, kw), (sh, sw), (dh, dw), (ph, pw) = k.kernel, k.strides, k.dilations, k.pads
    rows = k.n * -(-k.c // block) * oh
    lines = [
        f"/* max pooling by hand: {_layout(tag)} -> {_layout(tag)}, runs of {lanes} channels */",
        _parallel(rows * ow * block * kh * kw) or "/* small: one thread */",
        f"for (int64_t row = 0; row < {rows}; row++) {{",
        f"{INDENT}const int64_t plane = row / {oh}, oy = row % {oh};",
        f"{INDENT}const float *xp = {k.x} + plane * {h * w * block};",
        f"{INDENT}float *yp = {k.out} + row * {ow * block};",
        *(INDENT + x for x in _tap_range("y", "oy", sh, ph, dh, kh, h)),
        f"{INDENT}for (int64_t ox = 0; ox < {ow}; ox++) {{",
        *(INDENT * 2 + x for x in _tap_range("x", "ox", sw, pw, dw, kw, w)),
        f"{INDENT * 2}for (int64_t l0 = 0; l0 < {block}; l0 += {lanes}) {{",
        f"{INDENT * 3}float m[{lanes}];",
        f"{INDENT * 3}int32_t nan[{lanes}];",
        f"{INDENT * 3}for (int l = 0; l < {lanes}; l++) m[l] = -INFINITY, nan[l] = 0;",
        f"{INDENT * 3}for (int64_t ky = ky0; ky < ky1; ky++)",
        f"{INDENT * 4}for (int64_t kx = kx0; kx < kx1; kx++) {{",
        f"{INDENT * 5}const float *v = xp + ((y0 + ky * {dh}) * {w} + x0 + kx * {dw}) "
        f"* {block} + l0;",
        f"{INDENT * 5}#pragma omp simd",
        f"{INDENT * 5}for (int l = 0; l < {lanes}; l++) {{",
        f"{INDENT * 6}m[l] = v[l] > m[l] ? v[l] : m[l];  /* vmaxps: m never NaN */",
        f"{INDENT * 6}nan[l] |= v[l] != v[l];",
        f"{INDENT * 5}}}",
        f"{INDENT * 4}}}",
        f"{INDENT * 3}#pragma omp simd",
        f"{INDENT * 3}for (int l = 0; l < {lanes}; l++) m[l] = nan[l] ? NAN : m[l];",
        f"{INDENT * 3}memcpy(yp + ox * {block} + l0, m, sizeof(m));",
        f"{INDENT * 2}}}",
        f"{INDENT}}}",
        "}",
    ]
    return "\n".join(INDENT + x for x in lines)


def _tap_range(axis: str, out: str, stride: int, pad: int, dilation: int, taps: int, size: int):
    """C lines setting {axis}0 (the window's first input index) and k{axis}0, k{axis}1
    (its taps inside the input, [k0, k1))."""
    first, span = f"{axis}0", (taps - 1) * dilation
    lines = [f"const int64_t {first} = {out} * {stride}" + (f" - {pad};" if pad else ";")]
    if not pad:
        lines.append(f"const int64_t k{axis}0 = 0;")
    elif dilation == 1:
        lines.append(f"const int64_t k{axis}0 = {first} >= 0 ? 0 : -{first};")
    else:
        lines.append(
            f"const int64_t k{axis}0 = {first} >= 0 ? 0 : (-{first} + {dilation - 1}) / {dilation};"
        )
    last = f"{size} - {first}" if dilation == 1 else f"({size} - 1 - {first}) / {dilation} + 1"
    lines.append(f"const int64_t k{axis}1 = {first} + {span} < {size} ? {taps} : {last};")
    return lines
