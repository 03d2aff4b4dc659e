"""Pipeline execution on Ray (`mdsl/runtime/pipeline.py`): one local Ray cluster for the
module, one actor per stage; results over several micro-batches equal the single-process
run; a failing, dying or hanging stage is an error naming it, never a hang.

Ray is in the `test` extras; where it is missing or cannot start, these tests skip and say
so in the skip reason (`pytest -rs` lists it).
"""

from __future__ import annotations

import time

import numpy as np
import pytest

import mdsl
from examples.bert import bert
from mdsl import ops
from mdsl.passes.pipeline import pipeline_stages
from tests.op_sandbox import restored_registries
from tests.passes.random_graphs import assert_same_outputs
from tests.runtime.slow_ops import register_slow_op

ray = pytest.importorskip(
    "ray",
    reason="RAY IS NOT INSTALLED: the pipeline runtime tests need it (pip install -e '.[test]')",
)
RayPipeline = pytest.importorskip("mdsl.runtime.pipeline").RayPipeline


@pytest.fixture(scope="module")
def cluster():
    """A local Ray cluster of 2 CPUs for this module's tests."""
    try:
        ray.init(
            num_cpus=2,
            include_dashboard=False,
            logging_level="ERROR",
            log_to_driver=False,
            configure_logging=False,
        )
    except Exception as e:  # loud: the reason shows in the skip report
        pytest.skip(f"RAY COULD NOT START A LOCAL CLUSTER HERE: {type(e).__name__}: {e}")
    yield
    ray.shutdown()


def micro_batches(count: int, batch=2, seq=8, hidden=64):
    rng = np.random.default_rng(0)
    return [
        {"x": rng.standard_normal((batch, seq, hidden), dtype=np.float32)} for _ in range(count)
    ]


def test_micro_batches_through_two_stage_actors_equal_the_single_process_run(cluster):
    g = bert(4, 64, 4, seq=8, batch=2)  # static shapes: each stage compiles once
    single = mdsl.compile(g, backend="c")
    batches = micro_batches(5)
    with RayPipeline(pipeline_stages(g, 2), backend="c", timeout=60) as pipe:
        outs = pipe.run(batches)
        assert len(outs) == 5
        for feeds, out in zip(batches, outs):
            assert_same_outputs(out, single(feeds), rtol=1e-5, atol=1e-5)
            assert_same_outputs(out, mdsl.interpret(g, feeds), rtol=1e-4, atol=1e-5)
        whole = {"x": np.concatenate([b["x"] for b in batches[:3]])}
        joined = pipe(whole, micro_batches=3)  # split along the batch axis, run, join
        want = {"y": np.concatenate([single(b)["y"] for b in batches[:3]])}
        assert_same_outputs(joined, want, rtol=1e-5, atol=1e-5)


def switch_graph():
    """Three GEMM layers, then a Case on the `branch` input and a last GEMM: the Case
    lands in stage 1, where an index out of range fails at run time."""
    with mdsl.Graph("switchy") as g:
        h = g.input("x", ("B", 64))
        branch = g.input("branch", (), "int64")
        for i in range(3):
            with mdsl.scope(f"L{i}"):
                h = ops.relu(h @ mdsl.param("w", (64, 64)))
        h = mdsl.switch(branch, [lambda: h * 2.0, lambda: h + 1.0])
        with mdsl.scope("L3"):
            h = ops.relu(h @ mdsl.param("w", (64, 64)))
        g.output(h, "y")
    return g


def test_a_failing_or_dying_stage_is_an_error_naming_it(cluster):
    g = switch_graph()
    stages = pipeline_stages(g, 2)
    assert any(n.op_type == "Case" for n in stages[1].graph)
    batches = [{"x": np.ones((2, 64), np.float32), "branch": np.array(m % 2)} for m in range(4)]
    with RayPipeline(stages, backend="c", timeout=60) as pipe:
        for feeds, out in zip(batches, pipe.run(batches)):
            assert_same_outputs(out, mdsl.interpret(g, feeds))
        batches[2]["branch"] = np.array(7)
        start = time.monotonic()
        with pytest.raises(
            mdsl.ExecutionError,
            match=r"^pipeline stage 1 \(switchy_stage1\) failed on micro-batch 2: "
            r"switch/Case \(Case\).*index 7 is outside \[0, 1\]",
        ):
            pipe.run(batches)
        assert time.monotonic() - start < 30
        ray.kill(pipe._actors[1])  # the actor process dies
        with pytest.raises(mdsl.ExecutionError, match=r"^pipeline stage 1 \(switchy_stage1\) died"):
            pipe.run(batches[:1])
        with pytest.raises(mdsl.ExecutionError, match="this pipeline is closed"):
            pipe.run(batches[:1])


def test_a_hanging_stage_times_out_with_an_error_naming_it(cluster):
    with restored_registries():
        slow = register_slow_op()
        with mdsl.Graph("slow") as g:
            h = g.input("x", (4, 64))
            for i in range(3):
                with mdsl.scope(f"L{i}"):
                    h = ops.relu(h @ mdsl.param("w", (64, 64)))
            g.output(slow(h, name="Sleep"), "y")
        stages = pipeline_stages(g, 2)
        assert [n.op_type for n in stages[1].graph if n.op_type == "TestSlowIdentity"] == [
            "TestSlowIdentity"
        ]
        pipe = RayPipeline(stages, backend="python", timeout=3, setup=register_slow_op)
        start = time.monotonic()
        with pytest.raises(
            mdsl.ExecutionError,
            match=r"^pipeline stage 1 \(slow_stage1\) did not finish micro-batch 0 within 3 s",
        ):
            pipe.run([{"x": np.ones((4, 64), np.float32)}])
        assert time.monotonic() - start < 20
        pipe.close()


def test_a_pipeline_needs_a_running_ray(monkeypatch):
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    with pytest.raises(mdsl.ExecutionError, match=r"Ray is not initialized: call ray.init\(\)"):
        RayPipeline(pipeline_stages(bert(2, 32, 2), 2))
