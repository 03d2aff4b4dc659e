"""Float sums over rows in C run in blocks of partial sums (independent vector adds),
combined in halves, with a tail loop, and row kernels reading rows several times hint later rows
into the cache: line by line from a last pass that stores the row (LINE_HINT_AHEAD_BYTES), else a
later row at the row's start (PREFETCH_AHEAD_BYTES), both in `mdsl.targets.c.render`. Equal to
the interpreter for rows around the block size and the line, float64, symbolic rows and several
threads; short rows and integer sums keep the plain loop."""

from __future__ import annotations

import re

import numpy as np
import pytest

import mdsl
from mdsl import ops
from mdsl.codegen.plan import build_plan
from mdsl.targets.c.render import render_c
from tests.c_library import gcc_compile

LENGTHS = (31, 63, 64, 65, 96, 300, 768)


def _graph(shape, dtype: str = "float32") -> mdsl.Graph:
    n = shape[-1]
    with mdsl.Graph("row_sums") as g:
        x = g.input("x", shape, dtype=dtype)
        scale = g.const("scale", np.linspace(0.5, 1.5, n if isinstance(n, int) else 1, dtype=dtype))
        g.output(ops.reduce_sum(x, axes=(-1,)), "total")
        if isinstance(n, int):
            g.output(ops.layer_norm(x, scale, scale * 0.5, axis=-1, epsilon=1e-5), "normed")
    return g


def _rows(rows: int, n: int, dtype: str, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((rows, n)) * 3 + 10  # a mean far from 0
    return x.astype(dtype)


def _check(g: mdsl.Graph, x: np.ndarray, threads: int = 1) -> None:
    want = mdsl.compile(g, "python")(x=x)
    got = mdsl.compile(g, "c", threads=threads)(x=x)
    tol = 1e-12 if x.dtype == np.float64 else 2e-5
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=tol, atol=tol, err_msg=name)


@pytest.mark.parametrize("n", LENGTHS)
def test_row_sums_and_layer_norm_equal_the_interpreter(n):
    _check(_graph((5, n)), _rows(5, n, "float32", n))


@pytest.mark.parametrize("n", (15, 16, 17, 300))
def test_float64_rows_sum_in_their_own_blocks(n):
    _check(_graph((3, n), "float64"), _rows(3, n, "float64", n))


def test_symbolic_rows_and_several_threads():
    g = _graph(("N", "D"))
    for n in (1, 31, 32, 33, 500):
        for threads in (1, 2):
            _check(g, _rows(9, n, "float32", n), threads)


def _kernel(source: str) -> str:
    return source[re.search(r"/\* k\d+_", source).start() :]


def test_long_rows_sum_in_blocks_and_hint_later_lines_as_they_store():
    kernel = _kernel(render_c(build_plan(mdsl.optimize(_graph((8, 300))))))
    assert kernel.count("_p[64] = {0};") == 3  # the total and layer norm's two sums
    assert "for (int64_t j = r" in kernel  # 300 is not whole blocks: a tail loop
    # layer norm's store, a cache line a step, hints the line 8 KiB on; then the row's tail
    hint = r"mdsl_prefetch_line\(in0, \(b_ld\d+ \+ j_line\) \* 4 \+ 8192\);"
    assert len(re.findall(hint, kernel)) == 1
    # ...and its output's line 8 KiB on for writing
    write = r"mdsl_prefetch_line_for_write\(out1, \(b_st\d+ \+ j_line\) \* 4 \+ 8192\);"
    assert len(re.findall(write, kernel)) == 1
    assert "for (; j_line + 16 <= 300; j_line += 16) {" in kernel
    assert "for (int64_t j = j_line; j < 300; j++) {" in kernel
    assert "mdsl_prefetch(" not in kernel  # no burst at the row's start as well
    whole_lines = _kernel(render_c(build_plan(mdsl.optimize(_graph((8, 4096))))))
    assert len(re.findall(hint, whole_lines)) == 1 and "j < 4096; j++" not in whole_lines


def test_float64_rows_hint_a_line_per_eight_elements():
    kernel = _kernel(render_c(build_plan(mdsl.optimize(_graph((8, 300), "float64")))))
    assert "for (; j_line + 8 <= 300; j_line += 8) {" in kernel
    assert re.search(r"mdsl_prefetch_line\(in0, \(b_ld\d+ \+ j_line\) \* 8 \+ 8192\);", kernel)
    write = r"mdsl_prefetch_line_for_write\(out1, \(b_st\d+ \+ j_line\) \* 8 \+ 8192\);"
    assert re.search(write, kernel)


def test_rows_shorter_than_a_kib_take_no_hint():
    """A burst hint at each row's start made layer norm over rows of 128 floats 10%
    slower; a line-by-line one too."""
    kernel = _kernel(render_c(build_plan(mdsl.optimize(_graph((8, 200))))))
    assert "mdsl_prefetch" not in kernel and "j_line" not in kernel


def test_a_softmax_keeps_the_hint_at_the_row_start():
    with mdsl.Graph("softmax_rows") as g:
        g.output(ops.softmax(g.input("x", (64, 128)), axis=-1), "y")
    kernel = _kernel(render_c(build_plan(mdsl.optimize(g))))
    assert re.search(r"mdsl_prefetch\(in0, \(b_ld\d+ \+ 32 \* 128\) \* 4, 128 \* 4\);", kernel)
    assert "mdsl_prefetch_line" not in kernel


def _centred(shape) -> mdsl.Graph:
    with mdsl.Graph("centred_rows") as g:
        x = g.input("x", shape)
        g.output(x - ops.reduce_mean(x, axes=(-1,), keepdims=True), "centred")
    return g


@pytest.mark.parametrize("threads", (1, 2))
def test_symbolic_rows_store_by_lines_and_a_tail(threads):
    g = _centred(("N", "D"))
    source = next(iter(mdsl.compile(g, "c", threads=threads).sources.values()))
    assert re.search(r"for \(int64_t j = j_line; j < dim\d+; j\+\+\) \{", _kernel(source))
    for n in (1, 15, 16, 17, 300):
        _check(g, _rows(9, n, "float32", n), threads)


def test_partial_sums_combine_in_halves():
    """The partials fold in halves (a few vector adds), not one by one: a chain of 64
    dependent scalar adds per sum, which kept layer norm 20% slower."""
    kernel = _kernel(render_c(build_plan(mdsl.optimize(_graph((8, 768))))))
    sums = re.findall(r"float (\w+)_p\[64\] = \{0\};", kernel)
    assert len(sums) == 3
    for var in sums:
        for width in (32, 16, 8, 4, 2):
            assert (
                f"for (int64_t l = 0; l < {width}; l++) {var}_p[l] += {var}_p[l + {width}];"
                in kernel
            )
        assert f"float {var} = {var}_p[0] + {var}_p[1];" in kernel
        assert f"{var} += {var}_p[l]" not in kernel


def test_a_layer_norm_keeps_no_vector_on_the_stack(tmp_path):
    """Fully unrolled, a 768 row's 12 blocks, GCC kept the first pass's loaded vectors for
    the second and spilled them to the stack in the OpenMP loop (W2 3-6% slower with
    AVX-512); the blocks' loop unrolls twice at most. Read from GCC's assembly of the
    kernel, built with the target's own flags."""
    source = next(iter(mdsl.compile(_graph((64, 768)), backend="c", threads=1).sources.values()))
    gcc_compile(tmp_path, source, "-S", output="unit.s")
    assembly = (tmp_path / "unit.s").read_text()
    body = re.search(r"^k\d+_layernormali\._omp_fn\.0:$(.*?)\.size", assembly, re.M | re.S)
    spills = re.findall(r"vmov\w+\s+%[xyz]mm\d+, -?\d*\(%rsp\)", body.group(1))
    assert not spills, spills


def test_rows_shorter_than_two_blocks_sum_in_half_blocks():
    kernel = _kernel(render_c(build_plan(mdsl.optimize(_graph((8, 96))))))
    assert kernel.count("_p[32] = {0};") == 3 and "_p[64]" not in kernel


def test_short_rows_and_integer_sums_keep_the_plain_loop():
    short = _kernel(render_c(build_plan(mdsl.optimize(_graph((8, 48))))))
    assert "_p[" not in short and "mdsl_prefetch(" not in short
    with mdsl.Graph("int_sums") as g:
        g.output(ops.reduce_sum(g.input("x", (4, 1000), dtype="int32"), axes=(-1,)), "total")
    assert "_p[" not in _kernel(render_c(build_plan(mdsl.optimize(g))))


def test_a_softmax_without_its_helper_keeps_storing_exp_as_it_sums():
    """float64 rows take the generic loops, whose sum writes exp(x - max) into the output
    row (one read, one write): that sum is not blocked, or the stores would be lost."""
    with mdsl.Graph("softmax64") as g:
        g.output(ops.softmax(g.input("x", (5, 300), dtype="float64"), axis=-1), "y")
    _check(g, _rows(5, 300, "float64", 1))
