"""Data-dependent output sizes (docs/dynamic-shapes.md): a node declares its run-time
symbols in `dynamic`, the builder names them, the interpreter binds and checks them."""

from __future__ import annotations

import numpy as np
import pytest

import mdsl
from mdsl.ir.tensor_type import TensorType
from mdsl.ir.verify import verify
from mdsl.ops import dynamic
from mdsl.ops.registry import Attr
from tests.op_sandbox import restored_registries


@pytest.fixture
def positives():
    """An op keeping the positive elements of a vector (NonZero-like)."""
    with restored_registries():
        saved = dict(dynamic._DATA_DEPENDENT)

        @mdsl.op_proto(
            "KeepPositive",
            inputs={"x": "float"},
            outputs={"y": "float"},
            attrs={"dynamic": Attr([str], default=())},
        )
        def keep_positive(x, *, dynamic):
            (count,) = dynamic
            return TensorType((mdsl.ops.dynamic.value_dim(count),), x.dtype)

        dynamic.data_dependent(
            "KeepPositive", count=lambda x, **a: 1, bounds=lambda x, **a: [x.shape[0]]
        )
        mdsl.register_op_impl("KeepPositive", lambda x: x[x > 0])
        yield keep_positive
        dynamic._DATA_DEPENDENT.clear()
        dynamic._DATA_DEPENDENT.update(saved)


def _graph(op):
    with mdsl.Graph("g") as g:
        x = g.input("x", ("N",))
        y = op(x)
        g.output(y * 2.0, "doubled")
        g.output(mdsl.ops.reduce_sum(y, axes=(0,), keepdims=True), "total")
    return g, y


def test_the_builder_names_fresh_symbols_and_infer_uses_them(positives):
    g, y = _graph(positives)
    assert y.producer.attrs["dynamic"] == ("keeppositive0",)
    assert str(y.shape[0]) == "keeppositive0"
    verify(g)  # re-inference gives the same types


def test_a_second_node_gets_another_symbol_and_never_a_feed_symbol(positives):
    with mdsl.Graph("g") as g:
        x = g.input("x", ("keeppositive0",))
        a, b = positives(x), positives(x)
        g.output(a, "a")
        g.output(b, "b")
    names = {a.producer.attrs["dynamic"][0], b.producer.attrs["dynamic"][0]}
    assert len(names) == 2 and "keeppositive0" not in names


def test_the_interpreter_binds_the_symbol_for_later_nodes(positives):
    g, _ = _graph(positives)
    x = np.array([1.0, -2.0, 3.0, 0.0, 5.0], np.float32)
    out = mdsl.interpret(g, {"x": x})
    np.testing.assert_array_equal(out["doubled"], [2.0, 6.0, 10.0])
    np.testing.assert_array_equal(out["total"], [9.0])
    out = mdsl.interpret(g, {"x": -np.ones(4, np.float32)})  # an empty result is valid
    assert out["doubled"].shape == (0,)


def test_a_result_beyond_the_registered_bound_is_an_execution_error(positives):
    mdsl.register_op_impl("KeepPositive", lambda x: np.concatenate([x, x]))
    g, _ = _graph(positives)
    with pytest.raises(mdsl.ExecutionError, match="exceeds its bound"):
        mdsl.interpret(g, {"x": np.ones(3, np.float32)})


def test_a_result_of_the_wrong_rank_is_an_execution_error(positives):
    mdsl.register_op_impl("KeepPositive", lambda x: x.reshape(1, -1))
    g, _ = _graph(positives)
    with pytest.raises(mdsl.ExecutionError, match="rank 2"):
        mdsl.interpret(g, {"x": np.ones(3, np.float32)})


def test_dynamic_symbols_names_what_a_node_binds(positives):
    g, y = _graph(positives)
    assert dynamic.dynamic_symbols(y.producer) == {"keeppositive0"}
    assert dynamic.dynamic_bounds(y.producer) == {"keeppositive0": g.inputs["x"].shape[0]}
    assert dynamic.checked_size(3, "Reshape") == 3
    with pytest.raises(mdsl.ShapeError, match="negative"):
        dynamic.checked_size(-4, "Reshape shape[1]")


COMPILED = ("c", "numba")


@pytest.mark.parametrize("backend", COMPILED)
def test_compiled_backends_size_by_the_bound_and_bind_the_actual_size(positives, backend):
    """One compile serves every feed size and every count, an empty result included."""
    g, _ = _graph(positives)
    exe = mdsl.compile(g, backend=backend)
    rng = np.random.default_rng(0)
    for x in [rng.standard_normal(n).astype(np.float32) for n in (5, 9, 1)] + [
        -np.ones(4, np.float32)
    ]:
        got, want = exe(x=x), mdsl.interpret(g, {"x": x})
        for name in ("doubled", "total"):
            assert got[name].shape == want[name].shape, (name, x)
            np.testing.assert_allclose(got[name], want[name], rtol=1e-6)
    assert any("depend on its input values" in f for f in exe.plan.fallbacks)


@pytest.mark.parametrize("backend", COMPILED)
def test_a_compiled_result_beyond_the_bound_is_an_execution_error(positives, backend):
    mdsl.register_op_impl("KeepPositive", lambda x: np.concatenate([x, x]))
    g, _ = _graph(positives)
    with pytest.raises(mdsl.ExecutionError, match="exceeds its bound"):
        mdsl.compile(g, backend=backend)(x=np.ones(3, np.float32))


def test_an_unbounded_data_dependent_size_is_refused_clearly(positives):
    dynamic.data_dependent("KeepPositive", count=lambda x, **a: 1, bounds=lambda x, **a: [None])
    g, _ = _graph(positives)
    with pytest.raises(mdsl.CompileError, match=r"mdsl\.interpret"):
        mdsl.compile(g, backend="c")(x=np.ones(3, np.float32))


# -- a data-dependent op bound to a C function: no callback, the function reports the size ----
KEEP_POSITIVE_C = """
int keep_positive(const mdsl_tensor *in, int n_in, mdsl_tensor *out, int n_out,
                  const double *attrs, int n_attrs) {
    const float *x = (const float *)in[0].data;
    float *y = (float *)out[0].data;
    int64_t kept = 0;
    for (int64_t i = 0; i < in[0].size; i++)
        if (x[i] > 0) y[kept++] = x[i];
    ((int64_t *)out[0].shape)[0] = kept + OVERSHOOT;  /* the size it produced */
    return 0;
}
"""


def _bind_c_keep_positive(overshoot: int) -> None:
    source = f"#define OVERSHOOT ({overshoot})\n{KEEP_POSITIVE_C}"
    mdsl.register_op_impl("KeepPositive", backend="c", source=source, symbol="keep_positive")


def test_a_c_bound_data_dependent_op_runs_natively_and_binds_its_size(positives):
    _bind_c_keep_positive(0)
    g, _ = _graph(positives)
    exe = mdsl.compile(g, backend="c")
    assert exe.plan.fallbacks == [] and exe.plan.callbacks == []
    rng = np.random.default_rng(1)
    for x in [rng.standard_normal(n).astype(np.float32) for n in (7, 1, 0)] + [
        -np.ones(4, np.float32),
        np.ones(4, np.float32),
    ]:
        got, want = exe(x=x), mdsl.interpret(g, {"x": x})
        for name in ("doubled", "total"):
            assert got[name].shape == want[name].shape, (name, x)
            np.testing.assert_allclose(got[name], want[name], rtol=1e-6)


@pytest.mark.parametrize("overshoot", [1, -5])
def test_a_c_function_reporting_a_size_outside_the_bound_is_an_execution_error(
    positives, overshoot
):
    _bind_c_keep_positive(overshoot)
    g, y = _graph(positives)
    exe = mdsl.compile(g, backend="c")
    with pytest.raises(mdsl.ExecutionError, match=r"outside \[0, N\]") as e:
        exe(x=np.ones(3, np.float32))
    assert y.producer.name in str(e.value)
