"""Shape inference of the movement, indexing, resize and reduction ops with symbolic dims.

Each test builds one op over inputs with named dims and compares the inferred shape
with the expected expression (built from `Dim`s, so "N+M" means Dim("N") + Dim("M")).
"""

from __future__ import annotations

import numpy as np
import pytest

import mdsl
from mdsl import Dim, ops

N, M, H, W, B, T = (Dim(s) for s in ("N", "M", "H", "W", "B", "T"))


def _infer(build, *shapes, dtypes=None):
    """The output shape(s) of `build` applied to inputs of `shapes`."""
    dtypes = dtypes or ["float32"] * len(shapes)
    with mdsl.Graph() as g:
        xs = [g.input(f"x{i}", s, d) for i, (s, d) in enumerate(zip(shapes, dtypes))]
        out = build(*xs)
        outs = out if isinstance(out, tuple) else (out,)
        for i, t in enumerate(outs):
            g.output(t, f"y{i}")
    return [t.shape for t in out] if isinstance(out, tuple) else out.shape


def test_concat_adds_the_axis_and_keeps_the_rest():
    assert _infer(lambda a, b: ops.concat([a, b], 1), ("N", 4), ("N", 5)) == (N, 9)
    assert _infer(lambda a, b: ops.concat([a, b], 0), ("N", 4), ("M", 4)) == (N + M, 4)
    assert _infer(lambda a, b, c: ops.concat([a, b, c], -1), ("N", "H"), ("N", 2), ("N", "H")) == (
        N,
        2 * H + 2,
    )


def test_concat_takes_the_static_dim_against_a_symbol():
    assert _infer(lambda a, b: ops.concat([a, b], 1), ("N", 4), (3, 5)) == (3, 9)


def test_concat_refuses_two_different_symbols_off_the_axis():
    with pytest.raises(mdsl.ShapeError, match="dim 0 differs from input 0: N vs M"):
        _infer(lambda a, b: ops.concat([a, b], 1), ("N", 4), ("M", 4))


def test_split_pieces_of_a_symbolic_tensor():
    assert _infer(lambda a: ops.split(a, [2, 4], axis=1), ("N", 6)) == [(N, 2), (N, 4)]
    assert _infer(lambda a: ops.split(a, num_outputs=2, axis=0), (8, "W")) == [(4, W), (4, W)]


def test_split_into_equal_pieces_of_a_symbolic_dim():
    with mdsl.Graph() as g:
        x = g.input("x", (2 * N, 3))
        top, bottom = ops.split(x, num_outputs=2)
        g.output(top, "top")
    assert top.shape == bottom.shape == (N, 3)


def test_split_of_a_symbolic_dim_into_uneven_pieces_stays_exact():
    with mdsl.Graph() as g:
        pieces = ops.split(g.input("x", ("N",)), num_outputs=3)
        g.output(pieces[0], "first")
    first, _, last = (p.shape[0] for p in pieces)
    assert first == (N + 2) // 3
    assert last == N - 2 * ((N + 2) // 3)
    assert sum(p.shape[0] for p in pieces) == N


def test_split_sizes_must_sum_to_a_symbolic_dim():
    with pytest.raises(mdsl.ShapeError, match="sum to 6, but the dim is N"):
        _infer(lambda a: ops.split(a, [3, 3]), ("N", 2))


def test_split_is_one_node_with_a_variadic_output():
    with mdsl.Graph() as g:
        outs = ops.split(g.input("x", ("N", 6)), [6], axis=1)
        g.output(outs[0], "y")
    assert isinstance(outs, tuple) and len(outs) == 1
    (node,) = [n for n in g.nodes if n.op_type == "Split"]
    assert node.outputs == list(outs)


def test_pad_expand_tile_with_symbols():
    assert _infer(lambda a: ops.pad(a, [0, 1, 0, 2]), ("N", "W")) == (N, W + 3)
    assert _infer(lambda a: ops.pad(a, [-1, 0], axes=[0]), ("N", 3)) == (N - 1, 3)
    assert _infer(lambda a: ops.expand(a, [2, 1, 5]), ("N", 1)) == (2, N, 5)
    assert _infer(lambda a: ops.tile(a, [3, 1]), ("N", "W")) == (3 * N, W)


def test_depth_to_space_and_back_with_symbols():
    assert _infer(lambda a: ops.depth_to_space(a, blocksize=2), ("N", 8, "H", "W")) == (
        N,
        2,
        2 * H,
        2 * W,
    )
    assert _infer(lambda a: ops.space_to_depth(a, blocksize=2), ("N", 3, 2 * H, 4)) == (N, 12, H, 2)


def test_space_to_depth_refuses_a_symbolic_dim_it_cannot_divide():
    with pytest.raises(mdsl.ShapeError, match="not divisible"):
        _infer(lambda a: ops.space_to_depth(a, blocksize=2), ("N", 3, "H", 4))


def test_gather_shapes():
    ids = ("B", "T")
    assert _infer(ops.gather, (1000, 64), ids, dtypes=["float32", "int64"]) == (B, T, 64)
    assert _infer(
        lambda d, i: ops.gather(d, i, axis=1), ("N", 8, 3), (), dtypes=["float32", "int32"]
    ) == (
        N,
        3,
    )
    assert _infer(
        lambda d, i: ops.gather_elements(d, i, axis=1),
        ("N", 10),
        ("N", 1),
        dtypes=["float32", "int64"],
    ) == (N, 1)
    assert _infer(lambda i: ops.one_hot(i, 7, axis=0), ("N", "T"), dtypes=["int64"]) == (7, N, T)


def test_resize_shapes():
    assert _infer(lambda a: ops.resize(a, scales=(1, 1, 2, 0.5)), ("N", 3, "H", 8)) == (
        N,
        3,
        2 * H,
        4,
    )
    assert _infer(lambda a: ops.resize(a, scales=(1.5,), axes=[2]), ("N", 3, "H", 8)) == (
        N,
        3,
        (3 * H) // 2,
        8,
    )
    assert _infer(lambda a: ops.resize(a, sizes=(7, 9), axes=[2, 3]), ("N", 3, "H", "W")) == (
        N,
        3,
        7,
        9,
    )
    assert _infer(lambda a: ops.resize(a, scales=(1, 1, 1.5, 0.7)), (1, 3, 5, 5)) == (1, 3, 7, 3)


def test_shape_and_size_are_static_for_symbolic_inputs():
    with mdsl.Graph() as g:
        x = g.input("x", ("N", 3, "H", "W"))
        s, whole, n = ops.shape(x), ops.shape(x, start=1, end=-1), ops.size(x)
        g.output(n, "n")
    assert (s.shape, whole.shape, n.shape) == ((4,), (2,), ())
    assert s.dtype == n.dtype == mdsl.int64


def test_reductions_arg_topk_cumsum_with_symbols():
    assert _infer(lambda a: ops.reduce_l2(a, axes=[1]), ("N", "T", 4)) == (N, 1, 4)
    assert _infer(lambda a: ops.reduce_log_sum_exp(a, keepdims=False), ("N", "T")) == ()
    assert _infer(lambda a: ops.argmax(a, axis=-1, keepdims=False), ("N", "T")) == (N,)
    assert _infer(lambda a: ops.topk(a, 5, axis=1), ("N", "T")) == [(N, 5), (N, 5)]
    assert _infer(lambda a: ops.cumsum(a, 1, reverse=True), ("N", "T")) == (N, T)


def test_einsum_shapes():
    assert _infer(lambda a, b: ops.einsum("bij,bjk->bik", a, b), ("B", "T", 8), ("B", 8, "N")) == (
        B,
        T,
        N,
    )
    assert _infer(lambda a, b: ops.einsum("...ij,...jk", a, b), ("B", 1, 2, 3), (5, 3, 4)) == (
        B,
        5,
        2,
        4,
    )


@pytest.mark.parametrize("backend", ["python", "c"])
def test_a_size_1_dim_expands_to_a_symbolic_dim(backend):
    with mdsl.Graph("g") as g:
        a = g.input("a", (1, 4))
        n = g.input("n", ("N",))
        y = ops.expand(a, ["N", 4])
        g.output(y + ops.unsqueeze(n, axes=(1,)), "y")
    assert y.shape == (mdsl.Dim("N"), 4)
    a, n = np.arange(4, dtype=np.float32).reshape(1, 4), np.arange(3, dtype=np.float32)
    feeds = {"a": a, "n": n}
    out = (
        mdsl.interpret(g, feeds)
        if backend == "python"
        else mdsl.compile(g, backend=backend)(**feeds)
    )
    np.testing.assert_array_equal(out["y"], a + n[:, None])
