"""The numba backend (`mdsl.compile(g, backend="numba")`) against the interpreter.

numba compiles each kernel on first use (~0.1-0.5 s), so the op table runs a subset:
the first case of every op (each op's own lowering, callbacks included), plus the
half-float cases. Set MDSL_NUMBA_FULL_TABLE=1 to run every case. Kernels are cached
(numba `cache=True`) next to the generated module in the mdsl cache dir, so a second
run of this file compiles almost nothing.

Tolerances: float results rtol 1e-5 / atol 1e-6 against the interpreter (GEMM
summation order and float32 vs float64 erf/exp differ in the last bits); integers and
bools exactly; half floats as each case's own tolerance, and exactly where nothing
is fused (one rounding of the same float32 value in both).
"""

from __future__ import annotations

import os
import re

import ml_dtypes
import numpy as np
import pytest

import mdsl
from examples import bert, resnet_block
from mdsl import ops
from mdsl.codegen import toolchain
from mdsl.runtime import numba_backend
from tests.ops import op_table
from tests.ops.test_op_table import CASES as ALL_CASES
from tests.runtime.concurrency import run_concurrently

pytestmark = pytest.mark.usefixtures("sandbox")


def _selected_cases() -> list[op_table.OpCase]:
    runnable = [c for c in ALL_CASES if c.raises is None]
    if os.environ.get("MDSL_NUMBA_FULL_TABLE"):
        return runnable
    seen, chosen = set(), []
    for case in runnable:
        half = any(a.dtype in (np.float16, ml_dtypes.bfloat16) for a in case.inputs.values())
        if case.op not in seen or half:
            chosen.append(case)
        seen.add(case.op)
    return chosen


CASES = _selected_cases()


def _param(case: op_table.OpCase):
    return pytest.param(case, id=case.name())


def assert_same(got: dict, want: dict, rtol=1e-5, atol=1e-6) -> None:
    assert set(got) == set(want)
    for name, w in want.items():
        y = got[name]
        assert y.shape == w.shape and y.dtype == w.dtype, (name, y.shape, w.shape, y.dtype)
        if w.dtype.kind == "f" or w.dtype == ml_dtypes.bfloat16:
            np.testing.assert_allclose(
                y.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol, err_msg=name
            )
        else:
            np.testing.assert_array_equal(y, w, err_msg=name)


def kinds(exe) -> list[str]:
    return [k.kind for k in exe.kernels]


def source_of(exe) -> str:
    (text,) = exe.sources.values()
    return text


# -- the op table ----------------------------------------------------------------------------------
@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_op_case_matches_the_interpreter(case: op_table.OpCase):
    g = op_table.build_graph(case)
    try:
        want = mdsl.interpret(g, case.inputs)
    except mdsl.MdslError as e:  # the interpreter's own table test reports these
        pytest.skip(f"the interpreter cannot run this case: {e}")
    exe = mdsl.compile(g, backend="numba")
    assert exe.backend.name == "numba"
    half = any(w.dtype in (np.float16, ml_dtypes.bfloat16) for w in want.values())
    rtol, atol = (max(case.rtol, 1e-5), max(case.atol, 1e-6)) if half else (1e-5, 1e-6)
    assert_same(exe(case.inputs), want, rtol, atol)


def test_the_subset_covers_every_op_and_every_kernel_kind():
    assert {c.op for c in CASES} == {c.op for c in ALL_CASES if c.raises is None}
    assert len(CASES) >= 100


# -- the examples ----------------------------------------------------------------------------------
def randomize_trivial_params(g: mdsl.Graph, seed: int = 0) -> None:
    """Give the zeros/ones parameters (biases, norms) random values, so a wrong bias or
    norm rule cannot pass unnoticed; variances stay positive."""
    rng = np.random.default_rng(seed)
    for node in g.constants:
        value = node.const_value()
        if value.dtype.kind != "f" or value.ndim == 0 or np.ptp(value) != 0:
            continue
        if node.name.endswith(("var", "gamma")):
            new = rng.uniform(0.5, 1.5, value.shape)
        else:
            new = rng.normal(0.0, 0.2, value.shape)
        node.attrs["value"] = new.astype(value.dtype)


def test_resnet_block_matches_the_interpreter():
    g = resnet_block.build(channels=8, size=10)
    randomize_trivial_params(g)
    x = np.random.default_rng(1).standard_normal((2, 8, 10, 10), dtype=np.float32)
    exe = mdsl.compile(g, backend="numba")
    assert_same(exe(x=x), mdsl.interpret(g, {"x": x}), rtol=1e-4, atol=1e-5)
    assert kinds(exe) == ["convolution (im2col + GEMM) + epilogue"] * 2
    assert "np.matmul" in source_of(exe) and "_im2col(" in source_of(exe)


def test_bert_tiny_matches_the_interpreter_and_compiles_each_layer_once():
    g = bert.build()
    randomize_trivial_params(g)
    x = np.random.default_rng(2).standard_normal((2, 7, 64), dtype=np.float32)
    exe = mdsl.compile(g, backend="numba")
    assert_same(exe(x=x), mdsl.interpret(g, {"x": x}), rtol=1e-4, atol=1e-5)
    source = source_of(exe)
    # both encoder blocks call the functions of the first: one numba compile per layer
    (norm,) = re.findall(r"^def (k\d+_layernormali)\(", source, re.MULTILINE)
    assert len(re.findall(rf"^    {norm}\(", source, re.MULTILINE)) == 4  # 2 per block
    assert sum(k.kind == "row reduction" for k in exe.kernels) == 6  # + a softmax per block
    assert len(re.findall(r"^def k\d+_softmax\(", source, re.MULTILINE)) == 1


def test_bert_with_embeddings_and_mask_matches_the_interpreter():
    g = bert.bert(1, 32, 2, masked=True, vocab=50)
    randomize_trivial_params(g)
    rng = np.random.default_rng(3)
    feeds = {
        "input_ids": rng.integers(0, 50, (2, 5)),
        "position_ids": np.tile(np.arange(5), (2, 1)),
        "mask": np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], np.float32),
    }
    exe = mdsl.compile(g, backend="numba")
    assert_same(exe(feeds), mdsl.interpret(g, feeds), rtol=1e-4, atol=1e-5)
    assert "Python callback" in kinds(exe)  # the embedding lookups


# -- half floats -----------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_floats_compute_in_float32_and_round_once_per_store(dtype):
    with mdsl.Graph("half") as g:
        x = g.input("x", (4, 33), dtype)
        g.output(x * 3.0, "scaled")  # one op: the same rounding as the interpreter, bit for bit
        g.output(ops.softmax(ops.tanh(x) * 2.0 + x, axis=-1), "soft")
        g.output(ops.reduce_sum(x, axes=(1,), keepdims=False), "sum")
    x = np.random.default_rng(4).uniform(-3, 3, (4, 33)).astype(mdsl.DType.of(dtype).np)
    exe = mdsl.compile(g, backend="numba")
    got, want = exe(x=x), mdsl.interpret(g, {"x": x})
    np.testing.assert_array_equal(got["scaled"].view(np.uint16), want["scaled"].view(np.uint16))
    ulp = 2.0**-7 if dtype == "bfloat16" else 2.0**-10  # fused chains skip intermediate roundings
    assert_same(got, want, rtol=2 * ulp, atol=ulp)
    assert "rt.widen(" in source_of(exe) and "rt.narrow(" in source_of(exe)


# -- expressions: integer and float semantics -------------------------------------------------------
@pytest.mark.parametrize("dtype", ["int8", "int32", "int64"])
def test_integer_arithmetic_matches_the_interpreter_exactly(dtype):
    with mdsl.Graph("ints") as g:
        a = g.input("a", (7, 5), dtype)
        b = g.input("b", (7, 5), dtype)
        g.output(a / b, "div")  # truncates toward zero
        g.output(ops.mod(a, b), "mod")  # sign of the divisor
        g.output(ops.mod(a, b, fmod=True), "fmod")  # sign of the dividend
        g.output(ops.maximum(ops.abs(a), b) - a * b, "mixed")
        g.output(ops.reduce_max(a, axes=(1,), keepdims=False), "rmax")
        g.output(ops.reduce_min(-ops.abs(a) - 1, axes=(1,), keepdims=False), "rmin")
    rng = np.random.default_rng(5)
    np_dtype = np.dtype(dtype)
    a = rng.integers(-100, 100, (7, 5)).astype(np_dtype)
    b = rng.integers(1, 9, (7, 5)).astype(np_dtype) * rng.choice([-1, 1], (7, 5)).astype(np_dtype)
    a[0] = -np.arange(1, 6)  # an all-negative row: max must not start at 0
    exe = mdsl.compile(g, backend="numba")
    assert_same(exe(a=a, b=b), mdsl.interpret(g, {"a": a, "b": b}))


def test_float_to_int_casts_saturate_and_nan_becomes_zero():
    with mdsl.Graph("casts") as g:
        x = g.input("x", (8,), "float32")
        g.output(ops.cast(x * 1.0, to="int8"), "i8")
        g.output(ops.cast(x + 0.0, to="uint8"), "u8")
        g.output(ops.cast(x * 2.0, to="int32"), "i32")
        g.output(ops.cast(x, to="bool"), "b")
    x = np.array([np.nan, np.inf, -np.inf, 300.7, -300.2, 2.9, -2.9, 0.0], np.float32)
    exe = mdsl.compile(g, backend="numba")
    assert_same(exe(x=x), mdsl.interpret(g, {"x": x}))


def test_nan_propagates_through_max_min_and_max_pooling():
    with mdsl.Graph("nans") as g:
        x = g.input("x", (1, 1, 4, 4), "float32")
        g.output(ops.relu(x), "relu")
        g.output(ops.reduce_max(x, axes=(3,), keepdims=False), "rmax")
        g.output(ops.max_pool(x, kernel_shape=(2, 2), strides=(2, 2)), "pool")
    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4) - 8
    x[0, 0, 0, 1] = np.nan
    exe = mdsl.compile(g, backend="numba")
    got, want = exe(x=x), mdsl.interpret(g, {"x": x})
    assert_same(got, want)
    assert np.isnan(got["rmax"][0, 0, 0]) and np.isnan(got["pool"][0, 0, 0, 0])


# -- parallel kernels and threads -------------------------------------------------------------------
def _big_graph() -> mdsl.Graph:
    with mdsl.Graph("big") as g:
        x = g.input("x", (96, 512))
        y = ops.gelu(x * 1.5 + 0.25)
        g.output(ops.softmax(y, axis=-1), "y")
        g.output(y * ops.sigmoid(x), "z")
    return g


def test_big_kernels_run_in_parallel_and_match():
    g = _big_graph()
    x = np.random.default_rng(6).standard_normal((96, 512), dtype=np.float32)
    exe = mdsl.compile(g, backend="numba")
    assert "parallel=True" in source_of(exe) and "prange(" in source_of(exe)
    assert_same(exe(x=x), mdsl.interpret(g, {"x": x}))


def test_one_thread_generates_no_parallel_kernels():
    exe = mdsl.compile(_big_graph(), backend="numba", threads=1)
    assert "prange(" not in source_of(exe) and "parallel=True" not in source_of(exe)


def test_concurrent_calls_give_identical_results():
    g = _big_graph()
    exe = mdsl.compile(g, backend="numba")
    inputs = [
        np.random.default_rng(i).standard_normal((96, 512), dtype=np.float32) for i in range(4)
    ]
    expected = [exe(x=x) for x in inputs]

    def all_equal(i: int):
        outs = [exe(x=inputs[i]) for _ in range(10)]
        return all(np.array_equal(o[k], expected[i][k]) for o in outs for k in o)

    assert run_concurrently(all_equal, 4) == [True] * 4


# -- Python callbacks ------------------------------------------------------------------------------
def _declare_python_only_op(name: str = "Wiggle"):
    @mdsl.op_proto(name, inputs={"x": "float"}, outputs={"y": "float"})
    def wiggle(x):
        return mdsl.TensorType(x.shape, x.dtype)

    return wiggle


def test_nodes_without_generated_code_call_back_into_python():
    wiggle = _declare_python_only_op()
    mdsl.register_op_impl("Wiggle", lambda x: np.sin(x) * x)
    with mdsl.Graph("cb") as g:
        x = g.input("x", (3, 5))
        g.output(ops.exp(wiggle(ops.relu(x) + 1.0)) * 0.5, "y")
    x = np.random.default_rng(7).standard_normal((3, 5), dtype=np.float32)
    exe = mdsl.compile(g, backend="numba")
    assert kinds(exe) == ["pointwise", "Python callback", "pointwise"]
    assert "callback(0, [" in source_of(exe)
    assert_same(exe(x=x), mdsl.interpret(g, {"x": x}))


def test_a_failing_callback_raises_an_execution_error_naming_the_node():
    wiggle = _declare_python_only_op()

    def broken(x):
        raise ValueError("wiggled too hard")

    mdsl.register_op_impl("Wiggle", broken)
    with mdsl.Graph("cb") as g:
        g.output(wiggle(g.input("x", (2,)) * 2.0, name="Shaky"), "y")
    exe = mdsl.compile(g, backend="numba")
    with pytest.raises(mdsl.ExecutionError, match="wiggled too hard") as info:
        exe(x=np.ones(2, np.float32))
    assert info.value.node == "Shaky" and info.value.op_type == "Wiggle"


# -- generated code ---------------------------------------------------------------------------------
HOSTILE = 'evil"""\n# coding= latin-1\r\n*/ \'q\' \\ #define X Ü∂ \u2028 ../../etc/passwd'


def test_hostile_names_stay_in_comments_and_the_graph_computes():
    weird_op = "Ünïcode_Op"
    op = _declare_python_only_op(weird_op)
    mdsl.register_op_impl(weird_op, lambda x: x + 1, backend="expr")
    with mdsl.Graph(HOSTILE) as g:
        x = g.input("x", (4,))
        y = ops.relu(x * 2.0, name=HOSTILE)
        g.output(op(y, name="a\nb = 1; import os"), "y")
    x = np.arange(4, dtype=np.float32) - 2
    exe = mdsl.compile(g, backend="numba")
    source = source_of(exe)
    assert source.isascii()
    compile(source, "generated.py", "exec")  # valid Python
    for line in source.splitlines():
        if "passwd" in line or "import os" in line:
            assert line.lstrip().startswith("#") or " # " in line, line
    assert source.splitlines()[0].startswith("# Generated by mdsl")  # no coding cookie
    assert_same(exe(x=x), mdsl.interpret(g, {"x": x}))


def test_sources_kernels_and_memory_are_reported():
    exe = mdsl.compile(_big_graph(), backend="numba")
    (name,) = exe.sources
    assert name == "big.py"
    assert "def run(inputs, outputs, consts, arena, callback):" in source_of(exe)
    assert {k.kind for k in exe.kernels} == {"pointwise", "row reduction"}
    assert all(k.nodes for k in exe.kernels)
    assert exe.memory.arena_bytes <= exe.memory.naive_bytes


def test_modules_are_cached_on_disk_by_content(tmp_path, monkeypatch):
    monkeypatch.setenv("MDSL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(numba_backend, "_MODULES", {})
    with mdsl.Graph("cached") as g:
        g.output(ops.exp(g.input("x", (3,))) + 1.0, "y")
    first = mdsl.compile(g, backend="numba")
    (path,) = (tmp_path / "numba").glob("mdsl_*.py")
    assert path.read_text() == source_of(first)
    x = np.ones(3, np.float32)
    np.testing.assert_allclose(first(x=x)["y"], np.e + 1, rtol=1e-6)
    assert list((tmp_path / "numba" / "__pycache__").glob("*.nbi"))  # numba's kernel cache

    path.write_text("raise SystemExit('tampered')\n")
    monkeypatch.setattr(numba_backend, "_MODULES", {})
    second = mdsl.compile(g, backend="numba")  # the file is rewritten, never executed as is
    assert path.read_text() == source_of(second)
    np.testing.assert_allclose(second(x=x)["y"], np.e + 1, rtol=1e-6)


def test_without_a_c_compiler_backend_c_falls_back_to_numba(monkeypatch):
    monkeypatch.setattr(toolchain, "find_compiler", lambda: None)
    with mdsl.Graph("nocc") as g:
        g.output(g.input("x", (2,)) * 3.0, "y")
    with pytest.warns(RuntimeWarning, match="no C compiler"):
        exe = mdsl.compile(g, backend="c")
    assert exe.backend.name == "numba"
    np.testing.assert_array_equal(exe(x=np.ones(2, np.float32))["y"], [3.0, 3.0])
