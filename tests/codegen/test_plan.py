"""The Plan: schedule order, buffers, fallbacks, and the memory plan of real models.

Plans are built without the C compiler (optimize -> specialize -> build_plan), which is
what `exe.plan` holds for one variant. Memory figures of the ResNet block and BERT are
checked against the issue's targets (arena within 1.05x of the lower bound, under 0.6x
of naive) and verified independently: no two buffers alive at the same step overlap.
"""

from __future__ import annotations

import numpy as np
import pytest

import mdsl
from mdsl import ops
from mdsl.codegen import kir
from mdsl.codegen.plan import build_plan, kernel_buffers
from mdsl.codegen.specialize import specialize
from mdsl.ir.graph import Node
from tests.op_sandbox import restored_registries


@pytest.fixture
def sandbox():
    """Ops and bindings a test registers are undone after it."""
    with restored_registries():
        yield


def plan_of(g: mdsl.Graph, **symbols):
    """The plan `mdsl.compile(g, backend="c")` builds for these symbol values."""
    optimized = mdsl.optimize(g, level=2)
    return build_plan(specialize(optimized, symbols) if symbols else optimized, c_bindings=True)


def lifetimes(plan) -> dict[str, tuple[int, int]]:
    """Arena/scratch buffer -> (first step touching it, last step touching it)."""
    life: dict[str, tuple[int, int]] = {}
    for step, k in enumerate(plan.kernels):
        reads, writes = kernel_buffers(k)
        for b in reads | writes:
            if plan.buffers[b].kind in ("arena", "scratch"):
                first, _ = life.get(b, (step, step))
                life[b] = (first, step)
    return life


def assert_no_live_overlap(plan) -> None:
    """Buffers alive at a common step occupy disjoint bytes, unless one reuses the
    other in place (recorded in `memory.aliases`) and inherits its bytes."""
    m = plan.memory
    life = lifetimes(plan)
    spans = {b: (m.offsets[b], m.offsets[b] + plan.buffers[b].nbytes) for b in life}
    for b, (lo, hi) in spans.items():
        assert lo >= 0 and hi <= m.arena_bytes, f"{b} [{lo}, {hi}) outside the arena"
        assert lo % m.alignment == 0
    names = sorted(life)
    related = {frozenset(p) for p in m.aliases.items()}
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            (sa, ea), (sb, eb) = life[a], life[b]
            if sa > eb or sb > ea or frozenset((a, b)) in related:
                continue
            (la, ha), (lb, hb) = spans[a], spans[b]
            assert ha <= lb or hb <= la, f"{a} and {b} are both alive and overlap"


def assert_memory_targets(plan) -> None:
    m = plan.memory
    assert m.lower_bound_bytes <= m.arena_bytes <= 1.05 * m.lower_bound_bytes, m.summary()
    # reuse: under 0.6 of the naive bytes, unless the lower bound itself is above that
    # (a direct convolution's padded copy is small; im2col's scratch was most of naive)
    assert m.arena_bytes < max(0.6 * m.naive_bytes, m.lower_bound_bytes + 1), m.summary()
    assert_no_live_overlap(plan)


# -- memory of the example models -----------------------------------------------------------------
def test_resnet_block_memory():
    from examples import resnet_block

    plan = plan_of(resnet_block.build(), N=1)  # 64 channels, 56x56
    assert_memory_targets(plan)
    feature_map = 64 * 56 * 56 * 4
    if any(k.onednn for k in plan.kernels):
        # the input reordered once for both convolutions, and the tensor between them,
        # both in oneDNN's layout; no scratch where the primitives of every team size
        # choose those layouts: the second computes in the first's copy
        assert plan.memory.lower_bound_bytes >= 2 * feature_map
        if all(k.same_layouts for k in plan.kernels):
            assert plan.memory.lower_bound_bytes == 2 * feature_map
        return
    padded = 64 * 58 * 58 * 4  # the scratch of one direct 3x3 convolution: a padded copy
    assert plan.memory.lower_bound_bytes >= feature_map + padded
    assert plan.memory.naive_bytes >= feature_map + 2 * padded
    assert plan.memory.lower_bound_bytes < 2 * feature_map + padded  # no im2col matrix


@pytest.mark.parametrize("batch,seq", [(2, 16), (1, 128)])
def test_bert_tiny_memory(batch, seq):
    from examples import bert

    assert_memory_targets(plan_of(bert.bert(2, 64, 4), B=batch, S=seq))


def test_bert_base_memory(monkeypatch):
    """BERT-base, seq 128, batch 1: planned, not compiled nor run. The plan never reads
    parameter values, so they are zeros here: drawing BERT-base's 85M random weights
    would cost seconds."""
    from examples import bert

    g = bert.bert(12, 768, 12, seq=128, batch=1)
    optimized = mdsl.optimize(g, level=2)

    def zeros(node):
        t = node.outputs[0]
        return np.zeros(tuple(t.shape), t.dtype.np)

    monkeypatch.setattr(Node, "const_value", zeros)
    plan = build_plan(optimized, c_bindings=True)
    assert_memory_targets(plan)
    hidden = 128 * 768 * 4
    assert plan.memory.lower_bound_bytes >= 4 * hidden  # the FFN's 3072-wide activation
    assert len([k for k in plan.kernels if isinstance(k, kir.Gemm)]) == 12 * 8


# -- schedule and buffers ---------------------------------------------------------------------------
def _mlp() -> mdsl.Graph:
    rng = np.random.default_rng(0)
    with mdsl.Graph("mlp") as g:
        x = g.input("x", ("N", 16))
        w1 = g.const("w1", rng.standard_normal((16, 32)).astype(np.float32))
        w2 = g.const("w2", rng.standard_normal((32, 16)).astype(np.float32))
        h = ops.gelu(x @ w1 + 1.0)
        y = ops.layer_norm(h @ w2 + x, g.const("s", np.ones(16, np.float32)), None)
        g.output(ops.softmax(y, axis=-1), "y")
        g.output(h.sum(axis=1), "h_sum")
    return g


def test_kernels_run_in_dependency_order():
    plan = plan_of(_mlp(), N=4)
    ready = {n for n, b in plan.buffers.items() if b.kind in ("input", "const")}
    for k in plan.kernels:
        reads, writes = kernel_buffers(k)
        assert reads <= ready, f"{k.name} reads {sorted(reads - ready)} before they are written"
        ready |= writes
    assert {b for b, spec in plan.buffers.items() if spec.kind == "output"} <= ready


def test_buffers_of_inputs_outputs_and_constants_stay_outside_the_arena():
    plan = plan_of(_mlp(), N=4)
    kinds = {b.kind for b in plan.buffers.values()}
    assert kinds <= {"input", "output", "const", "arena", "scratch"}
    assert plan.inputs == ["x"] and plan.outputs == ["y", "h_sum"]
    assert set(plan.memory.offsets) == set(lifetimes(plan))  # only arena buffers are placed
    spec = plan.buffers["out0"]
    assert (spec.kind, spec.slot, spec.elements, spec.dtype) == ("output", 0, 64, mdsl.float32)
    assert_no_live_overlap(plan)


def test_every_computed_node_is_in_exactly_one_kernel():
    plan = plan_of(_mlp(), N=4)
    covered = [ref.name for k in plan.kernels for ref in k.nodes]
    computed = [n.name for n in plan.graph if n.op_type not in ("Input", "Const", "Output")]
    assert sorted(covered) == sorted(computed)
    kinds = [type(k).__name__ for k in plan.kernels]
    assert kinds.count("Gemm") == 2 and "Callback" not in kinds


def test_a_pointwise_kernel_reuses_a_dying_input_in_place():
    with mdsl.Graph("inplace") as g:
        x = g.input("x", (64, 64))
        t = ops.transpose(x)  # a copy kernel: an arena buffer
        u = ops.exp(t)  # reads t at the positions it writes; t dies here
        g.output(ops.transpose(u), "y")
    plan = plan_of(g)
    [(out, inp)] = plan.memory.aliases.items()
    assert plan.memory.offsets[out] == plan.memory.offsets[inp]
    assert plan.memory.arena_bytes == 64 * 64 * 4 == plan.memory.lower_bound_bytes
    assert plan.memory.naive_bytes == 2 * 64 * 64 * 4
    x = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    np.testing.assert_allclose(mdsl.compile(g, backend="c")(x=x)["y"], np.exp(x), rtol=1e-6)


# -- fallbacks ------------------------------------------------------------------------------------------
def test_a_python_only_op_becomes_a_callback_and_the_fallback_says_why(sandbox):
    @mdsl.op_proto("Shuffle", inputs={"x": ["float32"]}, outputs={"y": ["float32"]})
    def shuffle(x):
        return x

    mdsl.register_op_impl("Shuffle", lambda x: x[::-1].copy())
    with mdsl.Graph("fallback") as g:
        g.output(shuffle(ops.exp(g.input("x", (5,))), name="Mix") + 1.0, "y")
    plan = plan_of(g)
    [callback] = [k for k in plan.kernels if isinstance(k, kir.Callback)]
    assert [r.name for r in callback.nodes] == ["Mix"] and plan.callbacks[
        callback.index
    ].name == "Mix"
    assert plan.fallbacks == ["Mix (Shuffle) runs in Python: no generated form for Shuffle"]


def test_an_opaque_user_op_with_an_expr_binding_is_generated(sandbox):
    @mdsl.op_proto("Twice", inputs={"x": ["float32"]}, outputs={"y": ["float32"]})
    def twice(x):
        return x

    mdsl.register_op_impl("Twice", lambda x: x * 2.0, backend="expr")
    with mdsl.Graph("expr_op") as g:
        g.output(twice(g.input("x", (5,))), "y")
    plan = plan_of(g)
    assert [type(k).__name__ for k in plan.kernels] == ["Pointwise"] and not plan.fallbacks


def test_tensors_in_storage_layouts_get_storage_sized_buffers_and_callbacks():
    """NC1HWC0 pads 20 channels to 32: the buffer holds the padded storage."""
    with mdsl.Graph("stored") as g:
        x = g.input("x", (1, 20, 3, 2), "float16")
        y = ops.trans_data(x, src_format="NCHW", dst_format="NC1HWC0")
        g.output(ops.trans_data(y, src_format="NC1HWC0", dst_format="NCHW"), "y")
    plan = plan_of(g)
    stored = [b for b in plan.buffers.values() if b.kind == "arena"]
    assert [b.elements for b in stored] == [1 * 2 * 3 * 2 * 16]
    assert all(isinstance(k, kir.Callback) for k in plan.kernels)
    x = np.random.default_rng(0).standard_normal((1, 20, 3, 2)).astype(np.float16)
    np.testing.assert_array_equal(mdsl.compile(g, backend="c")(x=x)["y"], x)


def test_deferred_kernels_come_back_once_read_by_threads_at_once():
    """`Plan.defer_kernels` (a plan from the compile cache): the kernels are loaded by
    the first reads, concurrent ones included, and equal the plan's own."""
    import time

    from tests.runtime.concurrency import run_concurrently

    with mdsl.Graph("deferred") as g:
        x = g.input("x", ("N", 8))
        g.output(ops.relu(x @ mdsl.param("w", (8, 4), seed=1)), "y")
    plan = build_plan(mdsl.optimize(g), symbolic=True)
    kernels = plan.kernels
    loads = []

    def loader():
        loads.append(1)
        time.sleep(0.01)  # readers overlap while it loads
        return list(kernels)

    plan.defer_kernels(loader)
    read = run_concurrently(lambda _: plan.kernels, 4)
    assert all(r == kernels for r in read) and 1 <= len(loads) <= 4
    assert plan.kernel_loader is None and plan.kernels == kernels and plan.all_kernels()
    with pytest.raises(AttributeError, match="no attribute 'kernel_count'"):
        _ = plan.kernel_count
