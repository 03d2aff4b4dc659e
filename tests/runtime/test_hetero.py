"""Heterogeneous execution (`mdsl/runtime/hetero.py`): each device partition compiled by
its device's backend, real copies between device memories, results equal to the
interpreter."""

from __future__ import annotations

import numpy as np
import pytest

import mdsl
from examples.bert import bert
from mdsl import ops
from mdsl.passes.placement import PlacementPolicy
from mdsl.runtime.hetero import compile_hetero
from tests.passes.random_graphs import assert_same_outputs

PY = {"cpu": "python", "npu:0": "python"}


def bert_with_embeddings():
    return bert(2, 64, 4, vocab=1000, masked=True, max_positions=64)


def bert_feeds(batch=2, seq=8, seed=0):
    rng = np.random.default_rng(seed)
    return {
        "input_ids": rng.integers(0, 1000, (batch, seq)),
        "position_ids": np.tile(np.arange(seq), (batch, 1)),
        "mask": (rng.random((batch, seq)) > 0.2).astype(np.float32),
    }


def npu_sandwich():
    """Host -> NPU (pinned GEMM) -> host (TopK): two partitions, two copies."""
    with mdsl.Graph("sandwich") as g:
        x = g.input("x", ("N", 32))
        with mdsl.device("npu:0"):
            h = ops.relu(x @ mdsl.param("w", (32, 32)))
        g.output(ops.topk(h, 4)[0], "top")
        g.output(x, "echo")
    return g


def test_c_on_the_host_and_numba_on_the_npu_equal_the_interpreter():
    g = bert_with_embeddings()
    exe = mdsl.compile(g, devices={"cpu": "c", "npu:0": "numba"})
    assert [(p.device, e.backend.name) for p, e in zip(exe.partitions, exe.executables)] == [
        ("cpu", "c"),
        ("npu:0", "numba"),
    ]
    for seed, (batch, seq) in enumerate([(2, 8), (2, 8)]):
        feeds = bert_feeds(batch, seq, seed)
        assert_same_outputs(exe(feeds), mdsl.interpret(g, feeds), rtol=1e-4, atol=1e-5)
    # x's embedding sum up to the NPU, the mask bias up, the last hidden state back
    assert exe.transfers.copies == 3
    assert exe.stats.runs == 2 and exe.stats.copies == 6
    hidden, bias = 4 * 64, 4
    assert exe.stats.bytes == 2 * (2 * 8) * (2 * hidden + bias)


def test_copies_move_real_bytes_into_the_destination_device_memory():
    g = npu_sandwich()
    exe = mdsl.compile(g, devices={"cpu": "c", "npu:0": "c"})
    x = np.random.default_rng(0).standard_normal((3, 32), dtype=np.float32)
    out = exe(x=x)
    assert_same_outputs(out, mdsl.interpret(g, {"x": x}))
    assert [(c.op_type, c.src, c.dst) for c in exe.partitioned.copies] == [
        ("MemcpyHostToDevice", "cpu", "npu:0"),
        ("MemcpyDeviceToHost", "npu:0", "cpu"),
    ]
    assert (exe.stats.copies, exe.stats.bytes) == (2, 2 * x.nbytes)
    # the NPU keeps its copy of x in its own staging buffer; results are fresh arrays
    assert exe.staging_bytes() == {"cpu": x.nbytes, "npu:0": x.nbytes}
    again = exe(x=x)
    assert not np.shares_memory(again["top"], out["top"])
    assert len({id(e) for e in exe.executables}) == len(exe.partitions) == 2


def test_each_partition_is_an_executable_of_its_own():
    g = npu_sandwich()
    exe = mdsl.compile(g, devices={"cpu": "c", "npu:0": "c"})
    exe(x=np.ones((2, 32), np.float32))
    names = [e.graph.name for e in exe.executables]
    assert names == ["sandwich_p0_npu_0", "sandwich_p1_cpu"]
    placed = [
        {n.device for n in e.graph if n.op_type not in ("Input", "Output")} for e in exe.executables
    ]
    assert placed == [{"npu:0"}, {"cpu"}]
    assert [list(e.graph.inputs) for e in exe.executables] == [
        ["MemcpyHostToDevice_x"],
        ["MemcpyDeviceToHost_Relu"],
    ]


def test_control_flow_branches_with_npu_work_run_in_their_partition():
    with mdsl.Graph("cf") as g:
        x = g.input("x", (16, 16))
        w = mdsl.param("w", (16, 16))

        def heavy():
            with mdsl.device("npu:0"):
                return ops.relu(x @ w)

        g.output(mdsl.cond(ops.reduce_sum(x) > 0.0, heavy, lambda: x * 2.0) + 1.0, "y")
    exe = mdsl.compile(g, devices={"cpu": "c", "npu:0": "numba"})
    assert exe.transfers.copies == 3  # inside the then-branch
    for sign in (1.0, -1.0):
        x = sign * np.abs(np.random.default_rng(1).standard_normal((16, 16), dtype=np.float32))
        assert_same_outputs(exe(x=x), mdsl.interpret(g, {"x": x}))


def test_a_graph_on_one_device_needs_no_copies():
    g = bert(1, 32, 2)
    exe = mdsl.compile(g, devices={"cpu": "python"})
    x = np.ones((1, 4, 32), np.float32)
    assert_same_outputs(exe(x=x), mdsl.interpret(g, {"x": x}))
    assert exe.transfers.copies == 0 and exe.stats.copies == 0
    assert len(exe.partitions) == 1


def test_the_policy_can_be_given():
    policy = PlacementPolicy.for_devices(["cpu", "npu:0"], copy_latency_us=1e6)
    exe = compile_hetero(npu_sandwich(), PY, policy=policy)
    # copies are prohibitively slow, but the pinned GEMM still needs its two
    assert exe.transfers.copies == 2
    assert "2 copies" in repr(exe)


def test_feeds_are_checked_against_the_whole_graph():
    exe = mdsl.compile(npu_sandwich(), devices=PY)
    with pytest.raises(mdsl.ExecutionError, match=r"input 'x' dim 1: size 31, declared 32"):
        exe(x=np.ones((2, 31), np.float32))
    with pytest.raises(mdsl.ExecutionError, match="x"):
        exe(y=np.ones((2, 32), np.float32))


def test_devices_must_name_backends_for_the_host_and_every_placed_device():
    g = npu_sandwich()
    with pytest.raises(mdsl.CompileError, match=r"must give the host 'cpu' a backend"):
        mdsl.compile(g, devices={"npu:0": "c"})
    with pytest.raises(mdsl.CompileError, match=r"unknown backend 'cuda' for 'npu:0'"):
        mdsl.compile(g, devices={"cpu": "c", "npu:0": "cuda"})
    with pytest.raises(mdsl.CompileError, match=r"maps device names to backends"):
        mdsl.compile(g, devices={})
    # a node pinned to a device `devices` does not name
    with pytest.raises(
        mdsl.GraphError,
        match=r"MatMul \(MatMul\) at .*: placed on 'npu:0', which is not in the placement policy \(cpu, npu:1\)",
    ):
        mdsl.compile(g, devices={"cpu": "c", "npu:1": "c"})


def test_outputs_that_are_inputs_come_back_unchanged():
    exe = mdsl.compile(npu_sandwich(), devices=PY)
    x = np.arange(64, dtype=np.float32).reshape(2, 32)
    np.testing.assert_array_equal(exe(x=x)["echo"], x)
