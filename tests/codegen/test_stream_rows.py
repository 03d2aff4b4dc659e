"""Row kernels with a large float32 output write it by streaming stores
(`mdsl.targets.c.render`: STREAM_MIN_BYTES, `streamed_row_store`): each row is computed
on the stack (a cache line a step, hinting the rows to come) and copied out by
`mdsl_stream_f32`, each thread fencing its share. Equal to
the interpreter with rows that start off a 32-byte boundary, at 1 and 2 threads, with the
output read by a later kernel; small outputs and softmax keep plain stores."""

from __future__ import annotations

import re

import numpy as np
import pytest

import mdsl
from mdsl import ops
from mdsl.codegen.plan import build_plan
from mdsl.codegen.toolchain import last_level_cache_bytes
from mdsl.targets.c import render
from mdsl.targets.c.render import STREAM_MIN_BYTES, render_c

ZEN3_L3 = 32 << 20  # the cache STREAM_MIN_BYTES was measured on


@pytest.fixture(autouse=True)
def zen3_cache(monkeypatch):
    """Every test renders as for a Zen 3 core complex's L3, whatever this machine has."""
    monkeypatch.setattr(render, "last_level_cache_bytes", lambda: ZEN3_L3)


def _layer_norm(shape, *, column_sums: bool = False) -> mdsl.Graph:
    n = shape[-1]
    with mdsl.Graph("stream_rows") as g:
        x = g.input("x", shape)
        scale = g.const("scale", np.linspace(0.5, 1.5, n, dtype=np.float32))
        y = ops.layer_norm(x, scale, scale * 0.5, axis=-1, epsilon=1e-5)
        g.output(y, "normed")
        if column_sums:  # a second kernel reading the streamed rows back
            g.output(ops.reduce_sum(y, axes=(0,)), "column_sums")
    return g


def _source(g: mdsl.Graph) -> str:
    return render_c(build_plan(mdsl.optimize(g)))


def _check(g: mdsl.Graph, shape, threads: int) -> None:
    x = np.random.default_rng(threads).standard_normal(shape).astype(np.float32) * 3 + 1
    want = mdsl.compile(g, "python")(x=x)
    got = mdsl.compile(g, "c", threads=threads)(x=x)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=2e-5, atol=2e-4, err_msg=name)


# rows of 1001 floats: every row but every eighth starts off a 32-byte boundary, so the
# scalar head and tail around the streamed vectors run
ROWS = (2100, 1001)


def test_large_rows_stream_and_equal_the_interpreter():
    assert ROWS[0] * ROWS[1] * 4 >= STREAM_MIN_BYTES
    g = _layer_norm(ROWS, column_sums=True)
    source = _source(g)
    assert source.count("mdsl_stream_f32(out0 + b_st") == 1
    assert "#pragma omp for schedule(dynamic" in source and "nowait" in source
    fence = source.index("mdsl_stream_fence();", source.index("mdsl_stream_f32(out0"))
    assert source.index("nowait") < fence
    # the stack row fills a cache line a step, hinting the input 8 KiB on, then its tail
    assert re.search(r"mdsl_prefetch_line\(in0, \(b_ld\d+ \+ j_line\) \* 4 \+ 8192\);", source)
    assert "mdsl_prefetch_line_for_write(out" not in source  # streamed: no ownership needed
    assert "for (int64_t j = j_line; j < 1001; j++) {" in source
    for threads in (1, 2):
        _check(g, ROWS, threads)


def test_small_outputs_and_softmax_keep_plain_stores():
    assert "mdsl_stream_f32(" not in _source(_layer_norm((512, 768)))
    with mdsl.Graph("softmax") as g:
        g.output(ops.softmax(g.input("x", (4096, 1024)), axis=-1), "y")
    assert "mdsl_stream_f32(" not in _source(g)


def test_a_large_last_level_cache_keeps_outputs_inside_it_in_plain_stores(monkeypatch):
    """With 480 MiB of L3, 12 MiB of layer norm output stays plain (1.08 ms, streamed
    1.45 on such a Xeon) and 96 MiB streams (13.3 ms plain, 10.8 streamed)."""
    monkeypatch.setattr(render, "last_level_cache_bytes", lambda: 480 << 20)
    assert "mdsl_stream_f32(out0" not in _source(_layer_norm((4096, 768)))
    assert "mdsl_stream_f32(out0" in _source(_layer_norm((32768, 768)))


def test_the_last_level_cache_is_the_largest_data_cache_sysfs_lists(tmp_path):
    for name, kind, size in [
        ("index0", "Data", "48K"),
        ("index1", "Instruction", "64M"),  # never a data cache, however large
        ("index2", "Unified", "2048K"),
        ("index3", "Unified", "32M"),
    ]:
        (tmp_path / name).mkdir()
        (tmp_path / name / "type").write_text(kind + "\n")
        (tmp_path / name / "size").write_text(size + "\n")
    assert last_level_cache_bytes(tmp_path) == 32 << 20
    assert last_level_cache_bytes(tmp_path / "missing") == 0


@pytest.mark.parametrize("threads", [1, 2])
def test_one_row_past_the_threshold(threads, monkeypatch):
    """A kernel of one row, with no parallel loop, fences after its loop."""
    monkeypatch.setattr(render, "STREAM_MIN_BYTES", 4096 * 4)
    monkeypatch.setattr(render, "last_level_cache_bytes", lambda: 0)
    monkeypatch.setenv("MDSL_COMPILE_CACHE", "0")
    shape = (1, 4096)
    g = _layer_norm(shape)
    source = _source(g)
    kernel = source[source.index("/* k") :]
    assert "mdsl_stream_f32(" in kernel and "omp parallel" not in kernel
    assert source.index("mdsl_stream_fence();") > source.index("mdsl_stream_f32(out0")
    _check(g, shape, threads)
