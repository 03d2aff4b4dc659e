"""The C backend against the interpreter: the whole op table, the examples, random graphs,
hostile names, failing callbacks and concurrent calls.

Compiling is the slow part (gcc takes about 0.2 s per small module), so:
- static op-table cases are compiled in batches: one graph holds BATCH_SIZE cases side by
  side (inputs and outputs prefixed per case), one compile and one run check them all. A
  batch that fails to compile or run is retried case by case, so a failure names its case;
- libraries go to mdsl's build cache (`$MDSL_CACHE_DIR`, else the user cache dir), so a
  second run of the suite compiles nothing. Tests that damage cache entries use a private
  cache dir of their own (tests/codegen/test_toolchain.py).

Every comparison uses the op table's tolerances (or the random-graph suite's) against
`mdsl.interpret` of the same graph.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from hypothesis import given, settings

import mdsl
from mdsl import ops
from mdsl.ops.dynamic import data_dependent_spec
from tests.ops import op_table
from tests.ops.test_op_table import CASES
from tests.passes.random_graphs import (
    FAMILIES,
    PROFILE,
    GraphConfig,
    assert_same_outputs,
    random_graphs,
)
from tests.runtime.concurrency import run_concurrently

BATCH_SIZE = 16


def _runnable(case: op_table.OpCase) -> bool:
    return case.raises is None


def _kind(case: op_table.OpCase) -> str:
    """How the case is checked: "static" (batched), "symbolic", "control flow", or
    "run-time dims" (a node output has a dim no input binds: a control-flow node's
    dynamic dim, bound by the generated code when the node ran)."""
    g = op_table.build_graph(case)
    if any(data_dependent_spec(n.op_type) for n in g):
        return "data-dependent"
    bound = {s for t in g.inputs.values() for s in _symbols(t.shape)}
    if any(not _symbols(t.shape) <= bound for n in g for t in n.outputs):
        return "run-time dims"
    if any(n.subgraphs for n in g):
        return "control flow"
    return "symbolic" if case.symbolic else "static"


def _symbols(shape) -> set[str]:
    return {s for d in shape if isinstance(d, mdsl.Dim) for s in d.free_symbols}


RUNNABLE = [c for c in CASES if _runnable(c)]
_KINDS = [_kind(c) for c in RUNNABLE]
RUN_TIME_DIM_CASES = [c for c, k in zip(RUNNABLE, _KINDS) if k == "run-time dims"]
DATA_DEPENDENT_CASES = [c for c, k in zip(RUNNABLE, _KINDS) if k == "data-dependent"]
CONTROL_FLOW_CASES = [c for c, k in zip(RUNNABLE, _KINDS) if k == "control flow"]
SYMBOLIC_CASES = [c for c, k in zip(RUNNABLE, _KINDS) if k == "symbolic"]
STATIC_CASES = [c for c, k in zip(RUNNABLE, _KINDS) if k == "static"]
BATCHES = [STATIC_CASES[i : i + BATCH_SIZE] for i in range(0, len(STATIC_CASES), BATCH_SIZE)]


def assert_matches_interpreter(case: op_table.OpCase, got: dict, want: dict) -> None:
    """`got` equals the interpreter's outputs `want` within the case's tolerances."""
    assert got.keys() == want.keys(), f"outputs {sorted(got)} != {sorted(want)}"
    for name, w in want.items():
        y = got[name]
        assert y.shape == w.shape, f"{name}: shape {y.shape} != {w.shape}"
        assert y.dtype == w.dtype, f"{name}: dtype {y.dtype} != {w.dtype}"
        if w.dtype.kind == "f" or w.dtype.name == "bfloat16":
            np.testing.assert_allclose(
                y.astype(np.float64),
                w.astype(np.float64),
                rtol=case.rtol,
                atol=case.atol,
                err_msg=f"output {name}",
            )
        else:
            np.testing.assert_array_equal(y, w, err_msg=f"output {name}")


# -- the op table ---------------------------------------------------------------------------
def _batch_graph(batch: list[op_table.OpCase]) -> mdsl.Graph:
    """The cases of `batch` side by side in one graph: case i reads `c{i}_<input>` and
    writes `c{i}_y<j>`; its nodes sit in scope `c{i}`."""
    with mdsl.Graph("op_table_batch") as g:
        for i, case in enumerate(batch):
            with mdsl.scope(f"c{i}"):
                tensors = [
                    g.input(f"c{i}_{name}", a.shape, mdsl.DType.of(a.dtype))
                    for name, a in case.inputs.items()
                ]
                out = case.build(*tensors)
                outs = out if isinstance(out, (tuple, list)) else (out,)
                for j, t in enumerate(outs):
                    g.output(t, f"c{i}_y{j}")
    return g


def _batch_feeds(batch: list[op_table.OpCase]) -> dict:
    return {f"c{i}_{n}": a for i, c in enumerate(batch) for n, a in c.inputs.items()}


def _case_outputs(outputs: dict, i: int) -> dict:
    prefix = f"c{i}_"
    return {k[len(prefix) :]: v for k, v in outputs.items() if k.startswith(prefix)}


# Ops the C backend runs through a Python callback (no generated form yet). Equality with
# the interpreter is then nearly by construction, so the list is pinned: an op dropping
# out of generated code fails here. The last group has generated forms for most cases
# (float32 2-D convolution, 1-D and 2-D pools, Gemm without an unusual C, ReduceProd of floats;
# CumSum, CumProd, TopK, ArgMax/ArgMin and reducing ScatterElements in float32/64 and
# int32/64; Resize over static dims).
# If, Case and While are generated (`kir.Branch`, `kir.Loop`): never callbacks.
CALLBACK_OPS = {
    *("Einsum", "GroupNormalization"),  # Einsum: integer contractions (floats are lowered)
    *("TransData", "ConvTranspose"),
    *("AveragePool", "Conv", "Gemm", "MaxPool", "ReduceProd"),
    *("ArgMax", "ArgMin", "CumSum", "CumProd", "ScatterElements", "TopK", "Resize"),
}


def assert_callbacks_expected(exe) -> None:
    from mdsl.ir.rewrite import all_graphs

    op_of = {n.name: n.op_type for g in all_graphs(exe.plan.graph) for n in g}
    ops_in_python = {
        op_of[name] for k in exe.kernels if k.kind == "Python callback" for name in k.nodes
    }
    assert ops_in_python <= CALLBACK_OPS, f"now in Python: {ops_in_python - CALLBACK_OPS}"


def _check_alone(case: op_table.OpCase) -> None:
    g = op_table.build_graph(case)
    exe = mdsl.compile(g, backend="c")
    assert_matches_interpreter(case, exe(case.inputs), mdsl.interpret(g, case.inputs))
    assert_callbacks_expected(exe)


@pytest.mark.parametrize("batch", BATCHES, ids=[f"{b[0].name()}..{b[-1].name()}" for b in BATCHES])
def test_op_table_batch_on_c(batch):
    try:
        exe = mdsl.compile(_batch_graph(batch), backend="c")
        outputs, batch_error = exe(_batch_feeds(batch)), None
    except Exception as e:  # find the case: compile each alone below
        outputs, batch_error = None, e
    failures = []
    for i, case in enumerate(batch):
        try:
            if outputs is None:
                _check_alone(case)
            else:
                want = mdsl.interpret(op_table.build_graph(case), case.inputs)
                assert_matches_interpreter(case, _case_outputs(outputs, i), want)
        except Exception as e:
            failures.append(f"{case.name()}: {type(e).__name__}: {e}")
    assert not failures, "\n\n".join(failures)
    assert batch_error is None, f"the batch failed, every case alone passes: {batch_error!r}"
    assert_callbacks_expected(exe)


@pytest.mark.parametrize("case", SYMBOLIC_CASES, ids=[c.name() for c in SYMBOLIC_CASES])
def test_symbolic_op_case_on_c(case):
    _check_alone(case)


@pytest.mark.parametrize("case", CONTROL_FLOW_CASES, ids=[c.name() for c in CONTROL_FLOW_CASES])
def test_control_flow_op_case_on_c(case):
    _check_alone(case)


@pytest.mark.parametrize("case", RUN_TIME_DIM_CASES, ids=[c.name() for c in RUN_TIME_DIM_CASES])
def test_data_dependent_dims_run_compiled(case):
    """A control-flow node's dynamic dims are bound by the generated code when the node
    ran; buffers are sized for the largest value the dim can take."""
    _check_alone(case)


@pytest.mark.parametrize("case", DATA_DEPENDENT_CASES, ids=[c.name() for c in DATA_DEPENDENT_CASES])
def test_data_dependent_ops_compile_and_match_the_interpreter(case):
    """NonZero, NonMaxSuppression: output sizes their data decides (docs/dynamic-shapes.md):
    buffers sized by the op's bound, the actual size bound when the node ran."""
    g = op_table.build_graph(case)
    exe = mdsl.compile(g, backend="c")
    assert_matches_interpreter(case, exe(**case.inputs), mdsl.interpret(g, case.inputs))


def test_op_table_runs_every_runnable_case():
    checked = sum(len(b) for b in BATCHES) + len(SYMBOLIC_CASES) + len(CONTROL_FLOW_CASES)
    checked += len(DATA_DEPENDENT_CASES)
    assert checked + len(RUN_TIME_DIM_CASES) == len(RUNNABLE)
    assert len(RUN_TIME_DIM_CASES) <= 2  # If-dynamic-rows, While-growing-dim
    assert len(STATIC_CASES) > 250 and len(SYMBOLIC_CASES) > 20


def test_batched_graph_keeps_cases_apart():
    """The batching itself: cases fed the same arrays stay separate computations."""
    add, sub = (next(c for c in STATIC_CASES if c.op == op) for op in ("Add", "Sub"))
    assert [a.tobytes() for a in add.inputs.values()] == [a.tobytes() for a in sub.inputs.values()]
    g = _batch_graph([add, sub])
    assert set(g.outputs) == {"c0_y0", "c1_y0"}
    assert set(g.inputs) == {"c0_a", "c0_b", "c1_a", "c1_b"}
    outputs = mdsl.compile(g, backend="c")(_batch_feeds([add, sub]))
    a, b = add.inputs.values()
    np.testing.assert_allclose(_case_outputs(outputs, 0)["y0"], a + b, rtol=1e-6)
    np.testing.assert_allclose(_case_outputs(outputs, 1)["y0"], a - b, rtol=1e-6)


# -- random graphs --------------------------------------------------------------------------
RANDOM_RTOL, RANDOM_ATOL = 1e-4, 1e-5  # as the pass suite's: fused float32 math reassociates


def _check_random_graph(rg, feeds_list) -> None:
    exe = mdsl.compile(rg.graph, backend="c")
    for feeds in feeds_list:
        want = mdsl.interpret(rg.graph, feeds)
        got = exe(feeds)
        assert_same_outputs(got, want, rtol=RANDOM_RTOL, atol=RANDOM_ATOL, what=f"c {rg}")


def _feeds_for(g: mdsl.Graph, n: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, t in g.inputs.items():
        shape = [d if isinstance(d, int) else d.evaluate({"N": n}) for d in t.shape]
        feeds[name] = rng.uniform(-2, 2, size=shape).astype(t.dtype.np)
    return feeds


@settings(PROFILE, max_examples=80)
@given(random_graphs(GraphConfig(symbolic=False, max_steps=16)))
def test_random_static_graphs_on_c(rg):
    _check_random_graph(rg, [rg.feeds])


@settings(PROFILE, max_examples=70)
@given(random_graphs(GraphConfig(symbolic=True)))
def test_random_symbolic_graphs_on_c_two_sizes(rg):
    """Two values of N: two variants of one executable."""
    other = rg.symbols["N"] % 3 + 1  # N in 1..3: another size
    _check_random_graph(rg, [rg.feeds, _feeds_for(rg.graph, other, seed=1)])


@settings(PROFILE, max_examples=60)
@given(
    random_graphs(
        GraphConfig(
            symbolic=False,
            dtypes=("float32", "float64", "float16"),
            families=(*FAMILIES, "conv_bn", "binary"),
        )
    )
)
def test_random_mixed_dtype_graphs_on_c(rg):
    _check_random_graph(rg, [rg.feeds])


# -- the examples ---------------------------------------------------------------------------
MODEL_RTOL, MODEL_ATOL = 1e-4, 1e-4  # as tests/models: float32 end to end, BLAS vs numpy


def _assert_model_matches(exe, g, feeds) -> None:
    got, want = exe(feeds), mdsl.interpret(g, feeds)
    assert got.keys() == want.keys()
    for name in want:
        assert got[name].dtype == want[name].dtype and got[name].shape == want[name].shape
        np.testing.assert_allclose(got[name], want[name], rtol=MODEL_RTOL, atol=MODEL_ATOL)


def _generated_only(exe) -> None:
    """Every node of the example runs in generated code (no Python callback)."""
    callbacks = [k for k in exe.kernels if k.kind == "Python callback"]
    assert not callbacks, f"nodes run through Python: {callbacks}"


def test_resnet_block_on_c_two_batch_sizes_one_executable():
    from examples import resnet_block

    g = resnet_block.build()  # 64 channels, 56x56, batch "N"
    exe = mdsl.compile(g, backend="c")
    rng = np.random.default_rng(0)
    arenas = []
    for n in (1, 2):
        _assert_model_matches(exe, g, {"x": rng.standard_normal((n, 64, 56, 56), np.float32)})
        arenas.append(exe.memory.arena_bytes)
    assert sorted(exe.variants()) == [()]  # one symbolic build, memory planned per N
    assert arenas[1] > arenas[0]
    kinds = sorted(k.kind for k in exe.kernels)
    assert kinds.count("convolution (packed weights) + epilogue") == 2
    _generated_only(exe)


def test_bert_tiny_on_c_two_shapes_one_executable():
    from examples import bert

    g = bert.bert(2, 64, 4, masked=True, vocab=100)  # embeddings, mask, two blocks
    exe = mdsl.compile(g, backend="c")
    rng = np.random.default_rng(1)
    for batch, seq in ((2, 16), (3, 7)):
        mask = np.ones((batch, seq), np.float32)
        mask[0, seq // 2 :] = 0.0  # padding in the first sequence
        feeds = {
            "input_ids": rng.integers(0, 100, (batch, seq)).astype(np.int64),
            "position_ids": np.broadcast_to(np.arange(seq), (batch, seq)).astype(np.int64),
            "mask": mask,
        }
        _assert_model_matches(exe, g, feeds)
    assert sorted(exe.variants()) == [()]  # one symbolic build for both shapes
    gemms = [k for k in exe.kernels if k.kind == "GEMM + epilogue"]
    assert len(gemms) == 2 * 8  # Q, K, V, QK, AV, Output, Intermediate, Output per block
    assert [k for k in exe.kernels if k.kind == "Python callback"] == []
    gathers = [k.nodes for k in exe.kernels if k.kind == "indexing"]
    assert sorted(gathers) == [("Embeddings/Gather",), ("Embeddings/Gather_1",)]  # over B x S


def test_custom_op_example_on_c_numpy_then_expr_binding():
    from tests.op_sandbox import restored_registries

    with restored_registries():
        from examples import custom_op

        importlib.reload(custom_op)  # its ops, registered inside the sandbox
        g = custom_op.build()
        x = np.random.default_rng(2).normal(0, 3, (5, 32)).astype(np.float32)
        numpy_exe = mdsl.compile(g, backend="c")
        _assert_model_matches(numpy_exe, g, {"x": x})
        assert {k.nodes: k.kind for k in numpy_exe.kernels} == {
            ("Int8Linear/Quantize",): "Python callback",  # numpy only
            ("Int8Linear/QLinearMatMul",): "custom C op",  # its C binding
        }
        custom_op.bind_expr_quantize()
        expr_exe = mdsl.compile(g, backend="c")
        _assert_model_matches(expr_exe, g, {"x": x})
        kinds = {k.nodes: k.kind for k in expr_exe.kernels}
        assert kinds[("Int8Linear/Quantize",)] == "pointwise"  # generated from the expr
        np.testing.assert_array_equal(numpy_exe(x=x)["y"], expr_exe(x=x)["y"])


def test_demo_pipeline_reports_agreement_with_the_interpreter(tmp_path, monkeypatch, capsys):
    from examples import demo, resnet_block

    monkeypatch.chdir(tmp_path)  # the demo writes build/demo/<graph>/
    demo.run_pipeline("small block", resnet_block.build(channels=8, size=10), {"N": 2})
    out = capsys.readouterr().out
    assert "compare vs interpreter: OK" in out
    assert (tmp_path / "build" / "demo" / "resnet_block" / "resnet_block.c").is_file()


# -- hostile names ----------------------------------------------------------------------------
HOSTILE = (
    "*/ int evil_EVIL; /*",
    "quote\"EVIL'",
    "new\nline_EVIL",
    "#define EVIL 1",
    "ñ日本EVIL",
    "../../EVIL/passwd",
    "back\\slash_EVIL\\",
    "tri??/graph_EVIL",
)


def _code_outside_comments(source: str) -> str:
    import re

    code = re.sub(r"/\*.*?\*/", " ", source, flags=re.S)
    assert "*/" not in code and "/*" not in code, "a comment was closed early or left open"
    return code


def test_hostile_names_compile_compute_and_stay_in_comments(tmp_path, monkeypatch):
    monkeypatch.setenv("MDSL_CACHE_DIR", str(tmp_path / "cache"))

    @mdsl.layer(name="Layer*\\ #define EVIL\nñ..")
    def layer(x):
        return ops.relu(x * 2.0, name=HOSTILE[0])

    with mdsl.Graph('graph*/\n#define EVIL "../ñ') as g:
        a = g.input(HOSTILE[1], (2, 3))
        b = g.input(HOSTILE[2], ("N", 3))
        c = ops.softmax(layer(a) + b, axis=-1, name=HOSTILE[3])
        for i, name in enumerate(HOSTILE):
            g.output(c * float(i + 1), name)
    exe = mdsl.compile(g, backend="c")
    feeds = {HOSTILE[1]: np.ones((2, 3), np.float32), HOSTILE[2]: np.eye(2, 3, dtype=np.float32)}
    got, want = exe(feeds), mdsl.interpret(g, feeds)
    assert list(got) == list(HOSTILE)
    for name in HOSTILE:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-6, atol=1e-7)

    [(file_name, source)] = exe.sources.items()
    assert file_name.isascii() and "/" not in file_name and "\\" not in file_name
    code = _code_outside_comments(source)
    assert "EVIL" in source  # the names are there, in comments
    assert "EVIL" not in code and code.isascii()
    libraries = list((tmp_path / "cache").rglob("*.so"))
    assert libraries and all(p.name.isascii() and p.name.count(".") == 1 for p in libraries)
    assert not list(tmp_path.glob("EVIL*")) and not (tmp_path.parent / "EVIL").exists()


def test_custom_op_with_a_non_ascii_op_type_gets_ascii_identifiers(sandbox):
    @mdsl.op_proto("Dōublé", inputs={"x": ["float32"]}, outputs={"y": ["float32"]})
    def double(x):
        return x

    mdsl.register_op_impl("Dōublé", lambda x: x * 2)  # numpy: a callback

    @mdsl.op_proto("Ωmega", inputs={"x": ["float32"]}, outputs={"y": ["float32"]})
    def omega(x):
        return x

    mdsl.register_op_impl("Ωmega", lambda x: x + 1.0, backend="expr")  # generated
    with mdsl.Graph("unicode_ops") as g:
        g.output(omega(double(g.input("x", (4,))) * 3.0), "y")
    exe = mdsl.compile(g, backend="c")
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(exe(x=x)["y"], x * 6.0 + 1.0)
    assert _code_outside_comments(next(iter(exe.sources.values()))).isascii()
    assert all(k.name.isascii() for k in exe.kernels)
    kinds = {k.nodes: k.kind for k in exe.kernels}
    assert kinds[("Dōublé",)] == "Python callback" and kinds[("Ωmega",)] == "pointwise"


# -- Python callbacks inside a compiled graph ----------------------------------------------------
def _declare_picky_op():
    """`Picky(x)`: x + 1, but its numpy binding raises on negative sums."""

    @mdsl.op_proto("Picky", inputs={"x": ["float32"]}, outputs={"y": ["float32"]})
    def picky(x):
        return x

    def picky_ref(x):
        if x.sum() < 0:
            raise ValueError(f"negative sum {x.sum():g}")
        return x + 1.0

    mdsl.register_op_impl("Picky", picky_ref)
    return picky


def test_a_raising_callback_is_an_execution_error_naming_the_node(sandbox):
    picky = _declare_picky_op()
    with mdsl.Graph("picky") as g:
        x = g.input("x", (3,))
        with mdsl.scope("Head"):
            y = picky(ops.exp(x) - 2.0, name="Check")
        g.output(y * 2.0, "y")
    exe = mdsl.compile(g, backend="c")
    assert [k.kind for k in exe.kernels if "Head/Check" in k.nodes] == ["Python callback"]
    with pytest.raises(mdsl.ExecutionError) as info:
        exe(x=np.full(3, -1.0, np.float32))
    error = info.value
    assert (error.node, error.op_type) == ("Head/Check", "Picky")
    assert "ValueError" in error.message and "negative sum" in error.message
    assert isinstance(error.__cause__, ValueError)
    x = np.full(3, 1.0, np.float32)  # the executable still works afterwards
    np.testing.assert_allclose(exe(x=x)["y"], (np.exp(x) - 1.0) * 2.0, rtol=1e-6)


# -- concurrency --------------------------------------------------------------------------------
def test_four_threads_times_25_calls_give_identical_results(sandbox):
    """Per-thread arenas: concurrent calls (generated kernels, BLAS, a Python callback)
    never see each other's intermediates."""
    picky = _declare_picky_op()
    with mdsl.Graph("concurrent") as g:
        x = g.input("x", (16, 32))
        w = g.const("w", np.random.default_rng(0).standard_normal((32, 32), np.float32) / 6)
        h = ops.gelu(x @ w + 1.0)
        h = picky(ops.abs(h))  # a callback between two arena buffers
        g.output(ops.softmax(h @ w, axis=-1), "y")
    exe = mdsl.compile(g, backend="c")
    inputs = [np.random.default_rng(i).standard_normal((16, 32), np.float32) for i in range(4)]
    expected = [exe(x=a)["y"] for a in inputs]
    want = mdsl.interpret(g, {"x": inputs[0]})["y"]
    np.testing.assert_allclose(expected[0], want, rtol=1e-5, atol=1e-7)

    def mismatched_calls(i):
        return [c for c in range(25) if not np.array_equal(exe(x=inputs[i])["y"], expected[i])]

    assert run_concurrently(mismatched_calls, 4) == [[]] * 4
