"""Control flow and dynamic shapes in generated code ("c" and "numba").

If/Case/While become `kir.Branch`/`kir.Loop` kernels (C `if`/`switch`/loop, Python
`if`/`while` in the numba driver), never Python callbacks; only the taken branch and the
needed iterations run, proven by a Python-bound op counting its calls (it becomes a
callback inside the block). Results are compared with the interpreter, itself checked
against PyTorch by the op table. Symbolic dims: one symbolic build serves every shape
signature (memory planned per signature), `specialize=` adds static variants.
"""

from __future__ import annotations

import numpy as np
import pytest

import mdsl
from mdsl import ops
from mdsl.codegen import kir
from tests.ops import op_table
from tests.ops.cases_control_flow import CASES

pytestmark = pytest.mark.usefixtures("sandbox")

BACKENDS = ["c", "numba"]
CONTROL_KINDS = {"control flow: branch", "control flow: loop"}
RUNNABLE = [c for c in CASES if c.raises is None]


def assert_same(got: dict, want: dict, rtol=1e-5, atol=1e-6) -> None:
    assert got.keys() == want.keys()
    for name, w in want.items():
        y = got[name]
        assert y.shape == w.shape and y.dtype == w.dtype, (name, y.shape, w.shape)
        np.testing.assert_allclose(y, w, rtol=rtol, atol=atol, err_msg=name)


def control_flow_in_python(exe) -> list:
    """Kernels running an If, Case or While node through a Python callback."""
    ops_of = {n.name: n.op_type for n in _all_nodes(exe.plan.graph)}
    return [
        k
        for k in exe.kernels
        if k.kind == "Python callback" and ops_of[k.nodes[0]] in ("If", "Case", "While")
    ]


def _all_nodes(g):
    from mdsl.ir.rewrite import all_graphs

    return [n for sub in all_graphs(g) for n in sub]


class Counter:
    """A Python-bound op ("Count") returning its input and counting calls per tag: it has
    no generated form, so in compiled code it is a callback inside its block."""

    def __init__(self):
        self.calls: dict[str, int] = {}

        @mdsl.op_proto("Count", inputs={"x": "any"}, outputs={"y": "any"},
                       attrs={"tag": mdsl.Attr(str)})  # fmt: skip
        def count(x, *, tag):
            return x

        @mdsl.register_op_impl("Count")
        def count_ref(x, *, tag):
            self.calls[tag] = self.calls.get(tag, 0) + 1
            return x.copy()

        self.op = count


# -- the op table and the example ----------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", RUNNABLE, ids=[c.name() for c in RUNNABLE])
def test_control_flow_op_case_matches_the_interpreter(case, backend):
    g = op_table.build_graph(case)
    exe = mdsl.compile(g, backend=backend)
    assert_same(exe(case.inputs), mdsl.interpret(g, case.inputs), case.rtol, case.atol)
    kinds = {k.kind for k in exe.kernels}
    assert kinds & CONTROL_KINDS and not control_flow_in_python(exe)
    assert any(isinstance(k, kir.Branch | kir.Loop) for k in exe.plan.kernels)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_detector_example_matches_the_interpreter_on_both_paths(backend):
    from examples import control_flow as example

    g = example.build()
    exe = mdsl.compile(g, backend=backend)
    for height, width in ((48, 64), (256, 192)):  # the small and the large path
        image = example.random_image(height, width, seed=height)
        got, want = exe(image=image), mdsl.interpret(g, {"image": image})
        assert_same(got, want, rtol=1e-4, atol=1e-5)
    assert list(exe.variants()) == [()]  # one symbolic build for every H x W
    kinds = [k.kind for k in exe.kernels]
    assert kinds.count("control flow: branch") == 1 and kinds.count("control flow: loop") == 1
    assert not control_flow_in_python(exe)


def test_generated_c_has_real_branches_and_loops():
    from examples import control_flow as example

    exe = mdsl.compile(example.build(), backend="c")
    exe(image=example.random_image(32, 32))
    (source,) = exe.sources.values()
    assert "int mdsl_run_dims(" in source and "if (" in source and "for (;;) {" in source
    assert "if (it_" in source  # max_iterations enforced
    assert "{ float *swap = " in source  # loop-carried values double-buffered


# -- only what is taken runs -------------------------------------------------------------------------
def _counted_if(counter) -> mdsl.Graph:
    with mdsl.Graph("counted_if") as g:
        x = g.input("x", ("N", 3))
        y = mdsl.cond(
            x.sum() > 0.0,
            lambda: counter.op(x * 2.0, tag="then"),
            lambda: counter.op(ops.exp(x), tag="else"),
        )
        g.output(y, "y")
    return g


@pytest.mark.parametrize("backend", BACKENDS)
def test_only_the_taken_branch_runs(backend):
    counter = Counter()
    exe = mdsl.compile(_counted_if(counter), backend=backend)
    x = np.abs(np.random.default_rng(0).normal(size=(4, 3))).astype(np.float32)
    np.testing.assert_allclose(exe(x=x)["y"], x * 2.0, rtol=1e-6)
    assert counter.calls == {"then": 1}
    np.testing.assert_allclose(exe(x=-x)["y"], np.exp(-x), rtol=1e-6)
    assert counter.calls == {"then": 1, "else": 1}
    assert not control_flow_in_python(exe)


@pytest.mark.parametrize("backend", BACKENDS)
def test_only_the_selected_case_runs(backend):
    counter = Counter()
    with mdsl.Graph("counted_case") as g:
        x = g.input("x", (2, 2))
        k = g.input("k", (), "int64")
        fns = [lambda i=i: counter.op(x + float(i), tag=str(i)) for i in range(3)]
        g.output(mdsl.switch(k, fns), "y")
    exe = mdsl.compile(g, backend=backend)
    x = np.ones((2, 2), np.float32)
    for index in (2, 0, 2):
        np.testing.assert_array_equal(exe(x=x, k=np.int64(index))["y"], x + index)
    assert counter.calls == {"2": 2, "0": 1}
    with pytest.raises(mdsl.ExecutionError, match=r"index 3 is outside \[0, 2\]") as info:
        exe(x=x, k=np.int64(3))
    assert info.value.op_type == "Case" and info.value.node == g.node("switch/Case").name


def _counted_loop(counter, max_iterations=None) -> mdsl.Graph:
    with mdsl.Graph("counted_loop") as g:
        x = g.input("x", (3,))
        n = g.input("n", (), "int64")
        i, acc = mdsl.while_loop(
            lambda i, acc: counter.op(i, tag="cond") < n,
            lambda i, acc: (i + 1, counter.op(acc * 0.5 + x, tag="body")),
            (np.int64(0), x),
            max_iterations=max_iterations,
        )
        g.output(i, "i")
        g.output(acc, "acc")
    return g


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", [0, 1, 5])
def test_a_loop_runs_exactly_the_needed_iterations(backend, n):
    counter = Counter()
    exe = mdsl.compile(_counted_loop(counter), backend=backend)
    x = np.array([1.0, -2.0, 4.0], np.float32)
    out = exe(x=x, n=np.int64(n))
    acc = x.copy()
    for _ in range(n):
        acc = acc * 0.5 + x
    assert int(out["i"]) == n
    np.testing.assert_allclose(out["acc"], acc, rtol=1e-6)
    assert counter.calls == ({"cond": n + 1, "body": n} if n else {"cond": 1})


@pytest.mark.parametrize("backend", BACKENDS)
def test_max_iterations_is_enforced_naming_the_node(backend):
    counter = Counter()
    g = _counted_loop(counter, max_iterations=3)
    exe = mdsl.compile(g, backend=backend)
    x = np.zeros(3, np.float32)
    assert int(exe(x=x, n=np.int64(3))["i"]) == 3  # exactly the limit is fine
    with pytest.raises(mdsl.ExecutionError, match="still running after max_iterations=3") as info:
        exe(x=x, n=np.int64(4))
    assert (info.value.node, info.value.op_type) == (g.node("while/While").name, "While")
    with pytest.raises(mdsl.ExecutionError, match="still running after max_iterations=3"):
        mdsl.interpret(g, {"x": x, "n": np.int64(4)})  # the same rule as the reference


# -- loops: double buffering, nesting ----------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_loop_carried_values_may_swap_and_pass_through(backend):
    """A body returning (b, a, c): each result reads another loop var's current value,
    which double buffering keeps intact while the next values are written."""
    with mdsl.Graph("swap") as g:
        a0 = g.input("a", (4,))
        b0 = g.input("b", (4,))
        n = g.input("n", (), "int64")
        _, a, b, c = mdsl.while_loop(
            lambda i, a, b, c: i < n,
            lambda i, a, b, c: (i + 1, b, a, c + a),
            (np.int64(0), a0, b0, a0 * 0.0),
        )
        g.output(a, "a_out")
        g.output(b, "b_out")
        g.output(c, "c_out")
    exe = mdsl.compile(g, backend=backend)
    a, b = np.arange(4, dtype=np.float32), -np.arange(4, dtype=np.float32) - 10
    for steps in (0, 1, 2, 5):
        feeds = {"a": a, "b": b, "n": np.int64(steps)}
        assert_same(exe(feeds), mdsl.interpret(g, feeds))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_cond_nested_in_a_while_body(backend):
    counter = Counter()
    with mdsl.Graph("nested") as g:
        x = g.input("x", (5,))
        n = g.input("n", (), "int64")

        def body(i, acc):
            odd = ops.mod(i, 2) > 0
            step = mdsl.cond(odd, lambda: counter.op(acc * 2.0, tag="odd"), lambda: acc + x)
            return i + 1, step

        _, y = mdsl.while_loop(lambda i, acc: i < n, body, (np.int64(0), x))
        g.output(y, "y")
    exe = mdsl.compile(g, backend=backend)
    x = np.linspace(-1, 1, 5).astype(np.float32)
    feeds = [{"x": x, "n": np.int64(steps)} for steps in (0, 3, 6)]
    got = [exe(f) for f in feeds]
    assert counter.calls == {"odd": 1 + 3}  # iterations 1 (of 3) and 1, 3, 5 (of 6)
    for f, out in zip(feeds, got):
        assert_same(out, mdsl.interpret(g, f))
    kinds = [k.kind for k in exe.kernels]
    assert kinds.index("control flow: loop") < kinds.index("control flow: branch")


# -- dynamic dims decided by control flow ----------------------------------------------------------
def _growing(max_rows: int) -> mdsl.Graph:
    with mdsl.Graph("growing") as g:
        row = g.input("row", (1, 3))
        n = g.input("n", (), "int64")
        rows = mdsl.while_loop(
            lambda acc: ops.size(acc) < n * 3,
            lambda acc: ops.concat([acc, row * 2.0], axis=0),
            np.zeros((0, 3), np.float32),
            shapes=(mdsl.Dim("L", max=max_rows), 3),
        )
        g.output(rows.sum(axis=0, keepdims=True) + rows[:1].sum(), "total")
        g.output(rows, "rows")
    return g


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_loop_carried_dim_grows_and_is_checked_against_its_range(backend):
    g = _growing(max_rows=6)
    exe = mdsl.compile(g, backend=backend)
    row = np.array([[1.0, 2.0, 3.0]], np.float32)
    for n in (1, 4, 6):
        feeds = {"row": row, "n": np.int64(n)}
        got = exe(feeds)
        assert got["rows"].shape == (n, 3)
        assert_same(got, mdsl.interpret(g, feeds))
    with pytest.raises(mdsl.ExecutionError, match=r"L = 7 is outside its range \[0, 6\]") as info:
        exe(row=row, n=np.int64(7))
    assert info.value.op_type == "While"


def test_a_loop_carried_dim_above_its_first_capacity_grows_within_its_range():
    """max 5000 is above plan.FIRST_ROWS (4096): the rows are planned at a capacity,
    4096 first; 4500 rows outgrow it (the call runs again with it doubled), 5001 rows
    are still the range error naming the While, checked before the capacity. (C only:
    numba takes 20 s over these rows; test_onnx_run_time_values grows it on numba.)"""
    from mdsl.codegen.plan import FIRST_ROWS

    g = _growing(max_rows=5000)
    exe = mdsl.compile(g, backend="c")
    row = np.array([[1.0, 2.0, 3.0]], np.float32)
    for n in (3, FIRST_ROWS + 404, 2):
        feeds = {"row": row, "n": np.int64(n)}
        got = exe(feeds)
        assert got["rows"].shape == (n, 3)
        np.testing.assert_array_equal(got["rows"], np.repeat(row * 2.0, n, axis=0))
    with pytest.raises(mdsl.ExecutionError, match=r"L = 5001 is outside its range \[0, 5000\]"):
        exe(row=row, n=np.int64(5001))


def test_a_loop_carried_dim_without_a_max_is_a_compile_error_naming_the_node():
    with mdsl.Graph("unbounded") as g:
        row = g.input("row", (1, 3))
        rows = mdsl.while_loop(
            lambda acc: ops.size(acc) < 9,
            lambda acc: ops.concat([acc, row], axis=0),
            np.zeros((0, 3), np.float32),
            shapes=("L", 3),
        )
        g.output(rows, "rows")
    with pytest.raises(mdsl.CompileError, match="has no declared max") as info:
        mdsl.compile(g, backend="c")
    assert info.value.op_type == "While"


@pytest.mark.parametrize("backend", BACKENDS)
def test_branch_dims_are_bound_after_the_branch_and_used_downstream(backend):
    with mdsl.Graph("rows") as g:
        x = g.input("x", ("N", 4))
        kept = mdsl.cond(x.sum() > 0.0, lambda: x, lambda: x[1:] * 3.0, shapes=("R", 4))
        g.output(ops.softmax(kept, axis=0) + 1.0, "y")
    exe = mdsl.compile(g, backend=backend)
    rng = np.random.default_rng(3)
    for n, sign in ((5, 1.0), (5, -1.0), (2, -1.0)):
        x = (sign * np.abs(rng.normal(size=(n, 4)))).astype(np.float32)
        got = exe(x=x)
        assert got["y"].shape == ((n if sign > 0 else n - 1), 4)
        assert_same(got, mdsl.interpret(g, {"x": x}))


# -- the symbolic build and specialization -------------------------------------------------------------
def _mlp() -> mdsl.Graph:
    with mdsl.Graph("mlp") as g:
        x = g.input("x", (mdsl.Dim("N", min=1, max=64), 16))
        h = ops.relu(x @ mdsl.param("w", (16, 32), seed=1) + mdsl.param("b", (32,), seed=2))
        g.output(ops.layer_norm(h, mdsl.param("s", (32,)), mdsl.param("t", (32,))), "y")
        g.output(h.mean(axis=0), "m")
    return g


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_symbolic_build_serves_batch_1_7_and_the_range_max(backend):
    g = _mlp()
    exe = mdsl.compile(g, backend=backend)
    rng = np.random.default_rng(0)
    arenas = {}
    for n in (1, 7, 64):
        x = rng.normal(size=(n, 16)).astype(np.float32)
        assert_same(exe(x=x), mdsl.interpret(g, {"x": x}), rtol=1e-4, atol=1e-5)
        arenas[n] = exe.memory.arena_bytes
    assert list(exe.variants()) == [()] and exe.plan.symbols == ["N"]
    assert arenas[1] < arenas[7] < arenas[64]  # memory planned per shape signature
    with pytest.raises(mdsl.ExecutionError, match=r"N = 65 is outside its range \[1, 64\]"):
        exe(x=np.zeros((65, 16), np.float32))
    with pytest.raises(mdsl.ExecutionError, match="dim 1: size 15, declared 16"):
        exe(x=np.zeros((4, 15), np.float32))


def test_inconsistent_symbols_are_rejected_naming_the_dim_and_the_input():
    with mdsl.Graph("pair") as g:
        a = g.input("a", ("N", 2))
        b = g.input("b", ("N", 2))
        g.output(a + b, "y")
    exe = mdsl.compile(g, backend="c")
    with pytest.raises(mdsl.ExecutionError, match=r"input 'b' dim 0: N = 3, but input 'a'"):
        exe(a=np.zeros((2, 2), np.float32), b=np.zeros((3, 2), np.float32))


def test_symbolic_kernels_take_dims_as_arguments():
    exe = mdsl.compile(_mlp(), backend="c")
    exe(x=np.zeros((3, 16), np.float32))
    (source,) = exe.sources.values()
    assert "int64_t *dims," in source and "const int64_t *offsets)" in source
    assert "arena + offsets[" in source and "int64_t dim0 = dims[0];" in source
    assert "for (int64_t o = 0; o < dim0; o++)" in source  # a row kernel over N rows


def test_memory_layouts_are_cached_per_signature_in_a_bounded_lru(monkeypatch):
    from mdsl.runtime import signatures

    exe = mdsl.compile(_mlp(), backend="c")
    exe(x=np.zeros((1, 16), np.float32))
    shapes = exe.variants()[()]._shapes
    monkeypatch.setattr(shapes, "max_layouts", 3)
    first = shapes.layout({"N": 1})
    assert shapes.layout({"N": 1}) is first  # cached
    for n in range(2, 8):
        exe(x=np.zeros((n, 16), np.float32))
    assert len(shapes._layouts) == 3 and shapes.layout({"N": 1}) is not first
    assert signatures.MAX_LAYOUTS >= 16


def _attention():
    """Buffers of B*S, B*S*S and fixed sizes: they grow alike only along B."""
    with mdsl.Graph("attention") as g:
        x = g.input("x", ("B", "S", 16))
        q, k = x @ mdsl.param("wq", (16, 16), seed=1), x @ mdsl.param("wk", (16, 16), seed=2)
        v = ops.tanh(x @ mdsl.param("wv", (16, 16), seed=3))
        p = ops.softmax((q @ k.transpose(0, 2, 1)) * 0.25, axis=-1)
        h = ops.layer_norm(p @ v + x, mdsl.param("s", (16,)), mdsl.param("t", (16,)))
        h = ops.relu(h @ mdsl.param("w2", (16, 64), seed=4)) @ mdsl.param("w3", (64, 16), seed=5)
        g.output(h, "y")
    return g


@pytest.mark.parametrize("backend", BACKENDS)
def test_memory_is_placed_by_the_compile_time_template_where_it_holds(backend, monkeypatch):
    """The symbolic build plans a layout template in `mdsl.compile`; a signature whose
    sizes it holds for is placed without planning, the others are planned afresh."""
    from mdsl.codegen import plan as plan_module

    g = _attention()
    exe = mdsl.compile(g, backend=backend)
    assert exe.variants()[()].plan.layout_template is not None
    planned = []
    original = plan_module.plan_memory
    monkeypatch.setattr(
        plan_module, "plan_memory", lambda *a, **k: planned.append(1) or original(*a, **k)
    )
    rng = np.random.default_rng(4)
    paths = set()
    for b, s in [(1, 1), (2, 64), (1, 5), (1, 200), (3, 7), (5, 130), (8, 3)]:
        planned.clear()
        x = rng.normal(size=(b, s, 16)).astype(np.float32)
        assert_same(exe(x=x), mdsl.interpret(g, {"x": x}), rtol=1e-4, atol=1e-5)
        paths.add("planned" if planned else "template")
        assert exe.memory.lower_bound_bytes <= exe.memory.arena_bytes
    assert paths == {"planned", "template"}


@pytest.mark.parametrize("backend", BACKENDS)
def test_specialized_variants_are_built_ahead_and_used_when_sizes_match(backend):
    g = _mlp()
    exe = mdsl.compile(g, backend=backend, specialize={"N": [1, 8]})
    variants = exe.variants()
    assert sorted(variants) == [(("N", 1),), (("N", 8),)]  # built before any call
    assert not any(v.plan.is_symbolic for v in variants.values())
    rng = np.random.default_rng(1)
    for n in (8, 3, 1):
        x = rng.normal(size=(n, 16)).astype(np.float32)
        assert_same(exe(x=x), mdsl.interpret(g, {"x": x}), rtol=1e-4, atol=1e-5)
        assert exe.plan.is_symbolic == (n == 3)  # 3: the symbolic build
    assert sorted(exe.variants()) == [(), (("N", 1),), (("N", 8),)]


def test_specializing_some_symbols_keeps_the_others_symbolic():
    with mdsl.Graph("two") as g:
        x = g.input("x", ("B", "S", 8))
        g.output(ops.softmax(x * 2.0, axis=-1), "y")
    exe = mdsl.compile(g, backend="c", specialize={"B": [2]})
    x = np.random.default_rng(2).normal(size=(2, 5, 8)).astype(np.float32)
    assert_same(exe(x=x), mdsl.interpret(g, {"x": x}))
    assert exe.plan.symbols == ["S"] and list(exe.variants()) == [(("B", 2),)]


def test_bad_specialize_arguments_are_compile_errors():
    g = _mlp()
    with pytest.raises(mdsl.CompileError, match="no input has symbol 'M'"):
        mdsl.compile(g, backend="c", specialize={"M": [1]})
    with pytest.raises(mdsl.CompileError, match=r"N = 100 is outside its range \[1, 64\]"):
        mdsl.compile(g, backend="c", specialize={"N": [100]})
    with pytest.raises(mdsl.CompileError, match="specialize= takes True"):
        mdsl.compile(g, backend="c", specialize=[1, 2])


def test_kernels_that_need_static_dims_fall_back_to_one_variant_per_signature():
    """A convolution over symbolic spatial dims is generated per signature instead."""
    with mdsl.Graph("conv") as g:
        x = g.input("x", (1, 2, "H", "W"))
        g.output(ops.relu(ops.conv2d(x, mdsl.param("w", (4, 2, 3, 3), seed=4), pads=1)), "y")
    exe = mdsl.compile(g, backend="c")
    for h in (5, 8):
        x = np.random.default_rng(h).normal(size=(1, 2, h, 6)).astype(np.float32)
        assert_same(exe(x=x), mdsl.interpret(g, {"x": x}), rtol=1e-4, atol=1e-5)
    assert "symbolic dims" in exe.symbolic_failure
    assert sorted(exe.variants()) == [(("H", 5), ("W", 6)), (("H", 8), ("W", 6))]


# -- memory and profiling ------------------------------------------------------------------------------
def test_the_buffers_of_two_branches_share_memory():
    with mdsl.Graph("heavy") as g:
        x = g.input("x", (256,))
        y = mdsl.cond(
            x.sum() > 0.0,
            lambda: ops.exp(ops.tanh(x * 2.0) * x) + 1.0,
            lambda: ops.sigmoid(ops.exp(x) * x) - 1.0,
            name="pick",
        )
        g.output(y, "y")
    exe = mdsl.compile(g, backend="c", opt_level=0)  # unfused: each branch has temporaries
    exe(x=np.ones(256, np.float32))
    plan = exe.plan
    (branch,) = [k for k in plan.kernels if isinstance(k, kir.Branch)]
    then_buffers, else_buffers = (
        {b for k in block.kernels for b in _arena_writes(plan, k)} for block in branch.blocks
    )
    assert then_buffers and else_buffers
    offsets = plan.memory.offsets
    assert {offsets[b] for b in then_buffers} & {offsets[b] for b in else_buffers}


def _arena_writes(plan, k) -> set[str]:
    from mdsl.codegen.plan import kernel_buffers

    return {b for b in kernel_buffers(k)[1] if plan.buffers[b].kind == "arena"}


def test_the_profile_times_only_the_kernels_that_ran():
    counter = Counter()
    exe = mdsl.compile(_counted_if(counter), backend="c")
    x = np.ones((4, 3), np.float32)
    prof = exe.profile({"x": x}, runs=2)
    by_name = {k.name: k for k in prof.kernels}
    plan = exe.plan
    (branch,) = [k for k in plan.kernels if isinstance(k, kir.Branch)]
    taken, skipped = branch.blocks
    assert all(max(by_name[k.name].times) > 0 for k in taken.kernels)
    assert all(max(by_name[k.name].times) == 0 for k in skipped.kernels)


def _stacking_loop(rows_per_step: int):
    """rows grows by `rows_per_step` rows per iteration while i < n; its dim T is bounded by
    the value dim of n (bounds=), so compiled backends plan it per call."""
    with mdsl.Graph(f"stack{rows_per_step}") as g:
        n = g.input("n", (1,), "int64")
        x = g.input("x", (3,))
        (count,) = ops.value_dims(n)
        limit = ops.reshape(n, shape=())

        def step(i, rows):
            row = ops.reshape(x * ops.cast(i, to="float32"), shape=(1, 3))
            return i + 1, ops.concat([rows] + [row] * rows_per_step, axis=0)

        start = ops.constant_of_shape((0, 3), 0.0)
        _, rows = mdsl.while_loop(
            lambda i, rows: i < limit,
            step,
            (np.int64(0), start),
            shapes=[None, (mdsl.Dim("T"), 3)],
            bounds={"T": count},
        )
        g.output(rows, "rows")
    return g


@pytest.mark.parametrize("backend", ["python", *BACKENDS])
def test_a_loop_dim_bounded_by_a_value_dim_is_planned_per_call(backend):
    g = _stacking_loop(1)
    exe = None if backend == "python" else mdsl.compile(g, backend=backend)
    x = np.array([1.0, 2.0, 3.0], np.float32)
    for n in (4, 0, 9):
        feeds = {"n": np.array([n], np.int64), "x": x}
        got = mdsl.interpret(g, feeds) if exe is None else exe(**feeds)
        want = np.arange(n, dtype=np.float32)[:, None] * x
        np.testing.assert_array_equal(got["rows"], want)


@pytest.mark.parametrize("backend", ["python", *BACKENDS])
def test_a_loop_dim_above_its_bound_is_an_execution_error_naming_the_loop(backend):
    g = _stacking_loop(2)  # two rows per iteration: 2n rows, bounded by n
    exe = None if backend == "python" else mdsl.compile(g, backend=backend)
    feeds = {"n": np.array([3], np.int64), "x": np.ones(3, np.float32)}
    with pytest.raises(mdsl.ExecutionError, match="T") as e:
        mdsl.interpret(g, feeds) if exe is None else exe(**feeds)
    assert "While" in str(e.value)


def test_a_bound_naming_no_new_symbol_is_a_graph_error():
    with pytest.raises(mdsl.GraphError, match="no new symbol"), mdsl.Graph("bad"):
        mdsl.while_loop(lambda i: i < 3, lambda i: i + 1, np.int64(0), bounds={"Q": 4})
