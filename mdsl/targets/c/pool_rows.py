"""C bodies of 2-D max and average pooling done one axis at a time (separable).

A window's reduction over its kh x kw taps is the reduction over kh rows of each row's
reduction over kw taps. Per plane, every input row is first reduced along x into `rows`
(h x ow floats on the stack), once however many windows share it, all kw taps in one
vectorized loop (a stride-2 row's taps are loaded in pairs and shuffled apart); then each
output row reduces its window's rows of `rows`, contiguous vectors.

Measured on one Zen 3 core (C harness, medians of 201 calls), against the loop it
replaces (`render._pool_row_lines`: one vector loop per tap, each reading every other
float) and ORT's pooling in 8-channel blocks:

| pool | row loop | separable | ORT |
|---|---|---|---|
| ShuffleNet's max 3x3/2 of 24 x 112 x 112 | 146 us | 80 us | 42 us |
| ShuffleNet's average 3x3/2 of 272 x 14 x 14 | 29 us | 17 us | 12 us |

In ShuffleNet (`exe.profile`, 1 thread) its four average pools took 62 us against 122,
and its max pool 140-144 us against 155-158: there the pool's 1.2 MB input was written by
the stem convolution's reorder just before and is read back from memory, which at this
machine's 7 GB/s from DRAM for one core takes 170 us in a standalone call on a cold input.

Splitting a row into its stride phases first, so that every tap reads contiguously, was
slower (112 us for the average pool): each tap's vector load straddles the phase's
just-written stores, and the store-to-load forwarding fails.

A max propagates NaN through `mdsl_max_float(v, m)`, `(v > m || v != v) ? v : m`: the
tap replaces the maximum when it is larger or NaN, and a NaN maximum stays (no compare is
true against it).
"""

from __future__ import annotations

from mdsl.codegen import kir

INDENT = "    "
ROWS_MAX_BYTES = 64 * 1024  # the plane's row reductions live on the stack
TAPS_MAX = 16  # taps per axis written out in one expression; wider windows use the row loop


def separable_pool_lines(k: kir.Pool) -> list[str]:
    """The loop over planes `nc` of a 2-D pool `k` with static spatial sizes, its two
    passes per plane; [] when `k` is not such a pool (the caller's row loop runs)."""
    if len(k.in_spatial) != 2:
        return []
    (h, w), (oh, ow) = k.in_spatial, k.out_spatial
    sizes = (h, w, oh, ow, *k.kernel, *k.strides, *k.pads, *k.dilations)
    if not all(isinstance(v, int) for v in sizes):
        return []
    if h * ow * 4 > ROWS_MAX_BYTES or max(k.kernel) > TAPS_MAX or min(oh, ow) < 1:
        return []
    return [
        *_column_counts(k),
        f"float rows[{h * ow}];  /* each input row reduced along x: {h} x {ow} */",
        f"for (int64_t iy = 0; iy < {h}; iy++) {{",
        *(INDENT + x for x in _row_pass(k)),
        "}",
        f"for (int64_t oy = 0; oy < {oh}; oy++) {{",
        *(INDENT + x for x in _column_pass(k)),
        "}",
    ]


def _reduce(k: kir.Pool, acc: str, v: str) -> str:
    if k.kind == "max":
        return f"mdsl_max_float({v}, {acc})"
    return f"{acc} + {v}"


def _fold(k: kir.Pool, terms: list[str]) -> list[str]:
    """Statements leaving the reduction of `terms` (in order) in `m`."""
    lines = [f"float m = {terms[0]};"]
    lines += [f"m = {_reduce(k, 'm', t)};" for t in terms[1:]]
    return lines


def _init(k: kir.Pool) -> str:
    return "-INFINITY" if k.kind == "max" else "0.0f"


def window_interior(size: int, n: int, kk: int, s: int, p: int, d: int) -> tuple[int, int]:
    """The outputs [lo, hi) of an axis of `size` outputs whose every tap lies inside
    [0, n): o * s - p >= 0 and o * s - p + (kk - 1) * d <= n - 1."""
    lo = min(-(-p // s), size)
    last = n - 1 - (kk - 1) * d + p
    hi = min(size, last // s + 1) if last >= 0 else 0
    return lo, max(lo, hi)


def signed_offset(offset: int) -> str:
    """An index's offset as C text after the index: `ox` + " + 2", " - 1" or ""."""
    return f" + {offset}" if offset > 0 else f" - {-offset}" if offset < 0 else ""


def _column_counts(k: kir.Pool) -> list[str]:
    """An average's taps per output column along x (the divisor is rows x columns), as
    floats: the products are exact, and the column loops vectorize (AVX2 has no vector
    int64 -> float conversion)."""
    if k.kind != "avg":
        return []
    w, ow = k.in_spatial[1], k.out_spatial[1]
    kw, sw, pw, dw = k.kernel[1], k.strides[1], k.pads[1], k.dilations[1]
    if k.count_include_pad:
        count = f"mdsl_window_count(ox, {sw}, {dw}, {kw}, {w + 2 * pw})"
        return [
            f"float cols[{ow}];",
            f"for (int64_t ox = 0; ox < {ow}; ox++) cols[ox] = (float){count};",
        ]
    return [
        f"float cols[{ow}];",
        f"for (int64_t ox = 0; ox < {ow}; ox++) {{",
        f"{INDENT}int64_t x0, x1;",
        f"{INDENT}mdsl_window(ox, {sw}, {pw}, {dw}, {kw}, {w}, &x0, &x1);",
        f"{INDENT}cols[ox] = (float)(x1 - x0);",
        "}",
    ]


def _row_interior(k: kir.Pool) -> tuple[int, int]:
    """The outputs [lo, hi) along x whose every tap lies inside the row."""
    return window_interior(
        k.out_spatial[1], k.in_spatial[1], k.kernel[1], k.strides[1], k.pads[1], k.dilations[1]
    )


def _row_pass(k: kir.Pool) -> list[str]:
    """The body of the loop over input rows `iy`: `rows[iy]`, from the row `xrow`."""
    w, ow = k.in_spatial[1], k.out_spatial[1]
    kw, sw, pw, dw = k.kernel[1], k.strides[1], k.pads[1], k.dilations[1]
    lines = [
        f"const float *xrow = x + iy * {w};",
        f"float *hrow = rows + iy * {ow};",
    ]
    lo, hi = _row_interior(k)
    if hi > lo:
        stride = "ox" if sw == 1 else f"{sw} * ox"
        taps = [f"xrow[{stride}{signed_offset(t * dw - pw)}]" for t in range(kw)]
        lines += [
            "#pragma omp simd",
            f"for (int64_t ox = {lo}; ox < {hi}; ox++) {{",
            *(INDENT + x for x in _fold(k, taps)),
            f"{INDENT}hrow[ox] = m;",
            "}",
        ]
    for first, end in ((0, lo), (hi, ow)):  # windows cut by the row's ends
        if end > first:
            lines += [
                f"for (int64_t ox = {first}; ox < {end}; ox++) {{",
                f"{INDENT}int64_t x0, x1;",
                f"{INDENT}mdsl_window(ox, {sw}, {pw}, {dw}, {kw}, {w}, &x0, &x1);",
                f"{INDENT}float m = {_init(k)};",
                f"{INDENT}for (int64_t kj = x0; kj < x1; kj++) {{",
                f"{INDENT * 2}const float v = xrow[ox * {sw} - {pw} + kj * {dw}];",
                f"{INDENT * 2}m = {_reduce(k, 'm', 'v')};",
                f"{INDENT}}}",
                f"{INDENT}hrow[ox] = m;",
                "}",
            ]
    return lines


def _column_pass(k: kir.Pool) -> list[str]:
    """The body of the loop over output rows `oy`: the rows of its window reduced."""
    (h, _), (oh, ow) = k.in_spatial, k.out_spatial
    kh, sh, ph, dh = k.kernel[0], k.strides[0], k.pads[0], k.dilations[0]
    lines = [
        "int64_t y0, y1;",
        f"mdsl_window(oy, {sh}, {ph}, {dh}, {kh}, {h}, &y0, &y1);",
        f"const int64_t top = (oy * {sh} - {ph}) * {ow};  /* the window's first row in rows */",
        f"float *dst = {k.out} + (nc * {oh} + oy) * {ow};",
    ]
    taps = [f"rows[top{signed_offset(t * dh * ow)} + ox]" for t in range(kh)]
    lines += [
        f"if (y1 - y0 == {kh}) {{  /* the whole window inside the input */",
        f"{INDENT}#pragma omp simd",
        f"{INDENT}for (int64_t ox = 0; ox < {ow}; ox++) {{",
        *(INDENT * 2 + x for x in _fold(k, taps)),
        f"{INDENT * 2}dst[ox] = {_result(k, 'm', kh)};",
        f"{INDENT}}}",
        "} else {",
        f"{INDENT}#pragma omp simd",
        f"{INDENT}for (int64_t ox = 0; ox < {ow}; ox++) {{",
        f"{INDENT * 2}float m = {_init(k)};",
        f"{INDENT * 2}for (int64_t ki = y0; ki < y1; ki++) {{",
        f"{INDENT * 3}const float v = rows[top + ki * {dh * ow} + ox];",
        f"{INDENT * 3}m = {_reduce(k, 'm', 'v')};",
        f"{INDENT * 2}}}",
        f"{INDENT * 2}dst[ox] = {_result(k, 'm', _row_count(k))};",
        f"{INDENT}}}",
        "}",
    ]
    return lines


def _row_count(k: kir.Pool) -> str:
    """An average's taps along y of the output row `oy`."""
    if not k.count_include_pad:
        return "(y1 - y0)"
    h, kh, sh, ph, dh = k.in_spatial[0], k.kernel[0], k.strides[0], k.pads[0], k.dilations[0]
    return f"mdsl_window_count(oy, {sh}, {dh}, {kh}, {h + 2 * ph})"


def _result(k: kir.Pool, acc: str, rows) -> str:
    if k.kind == "max":
        return acc
    return f"{acc} / ((float){rows} * cols[ox])"
