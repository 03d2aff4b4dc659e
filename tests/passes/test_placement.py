"""Device placement (`mdsl/passes/placement.py`): pinned nodes stay, the rest is filled in
by cluster; the naive per-op strategy leaves islands the cluster strategy merges."""

from __future__ import annotations

import pytest

import mdsl
from examples import control_flow
from examples.bert import bert
from mdsl import ops
from mdsl.passes.placement import (
    DeviceSpec,
    PlacementPolicy,
    accelerator_supports,
    place,
)
from tests.op_sandbox import restored_registries
from tests.passes.checks import assert_preserves_results

NPU = PlacementPolicy.for_devices(["cpu", "npu:0"])


def devices(g: mdsl.Graph, *op_types: str) -> list[tuple[str, str]]:
    return [(n.name, n.device) for n in g if not op_types or n.op_type in op_types]


def island_graph(k: int = 128) -> mdsl.Graph:
    """A big MatMul pinned to the NPU, TopK (host only), then a Relu either could run."""
    with mdsl.Graph("island") as g:
        x = g.input("x", (256, 256))
        with mdsl.device("npu:0"):
            h = x @ mdsl.param("w", (256, 256))
        g.output(ops.relu(ops.topk(h, k)[0]), "y")
    return g


def test_pinned_nodes_keep_their_device_and_the_rest_is_filled_in():
    with mdsl.Graph("g") as g:
        x = g.input("x", ("N", 256))
        with mdsl.device("npu:0"):
            h = ops.relu(x @ mdsl.param("w", (256, 256)))
        g.output(ops.tanh(h @ mdsl.param("w2", (256, 256))), "y")
    placed = place(g, NPU)
    assert [n.device for n in g if n.op_type == "Tanh"] == [None]  # g itself untouched
    assert devices(placed) == [
        ("x", "cpu"),  # inputs and outputs live on the host
        ("w", "npu:0"),
        ("MatMul", "npu:0"),
        ("Relu", "npu:0"),
        ("w2", "npu:0"),  # a constant goes with its reader
        ("MatMul_1", "npu:0"),  # big compute next to the NPU's output: stays there
        ("Tanh", "npu:0"),
        ("Output_y", "cpu"),
    ]
    assert_preserves_results(g, placed)


def test_without_accelerators_everything_runs_on_the_host():
    placed = place(bert(1, 32, 2))
    assert {n.device for n in placed} == {"cpu"}


def test_the_default_accelerator_runs_float_compute_only():
    with mdsl.Graph("g") as g:
        x = g.input("x", (4, 8))
        i = g.input("i", (2,), "int64")
        y = ops.softmax(ops.relu(x) @ mdsl.param("w", (8, 8)))
        picked = ops.gather(y, i, axis=0)
        flag = ops.reduce_sum(picked) > 0.0
        g.output(mdsl.cond(flag, lambda: picked * 2.0, lambda: picked), "y")
        g.output(ops.cast(ops.argmax(y, axis=1), to="float32"), "z")
    support = {
        n.op_type: accelerator_supports(n)
        for n in g
        if n.op_type not in ("Input", "Const", "Output")
    }
    assert support == {
        "Relu": True,
        "MatMul": True,
        "Softmax": True,
        "Gather": False,  # an index op
        "ReduceSum": True,
        "Greater": False,  # produces a bool
        "If": False,  # control flow runs on the host
        "ArgMax": False,  # produces int64
        "Cast": False,  # reads int64
    }


def test_naive_placement_leaves_an_island_the_cluster_placement_merges():
    naive = place(island_graph(), NPU, strategy="naive")
    cluster = place(island_graph(), NPU)
    # per op, the Relu over (256, 128) values is faster on the NPU: a round trip for it
    assert devices(naive, "MatMul", "TopK", "Relu") == [
        ("MatMul", "npu:0"),
        ("TopK", "cpu"),
        ("Relu", "npu:0"),
    ]
    # two copies of 128 kB cost more than the Relu on the host
    assert devices(cluster, "MatMul", "TopK", "Relu") == [
        ("MatMul", "npu:0"),
        ("TopK", "cpu"),
        ("Relu", "cpu"),
    ]


def test_big_compute_between_host_ops_stays_on_the_accelerator():
    with mdsl.Graph("g") as g:
        x = g.input("x", (512, 512))
        h = ops.topk(x, 256)[0]  # host only
        h = h @ mdsl.param("w", (256, 512))  # 134 MFLOP: worth two copies
        g.output(ops.topk(h, 4)[0], "y")
    assert devices(place(g, NPU), "TopK", "MatMul") == [
        ("TopK", "cpu"),
        ("MatMul", "npu:0"),
        ("TopK_1", "cpu"),
    ]


def test_a_small_island_of_supported_ops_between_host_ops_joins_the_host():
    with mdsl.Graph("g") as g:
        x = g.input("x", (64, 64))
        h = ops.topk(x, 32)[0]
        h = ops.exp(ops.relu(h) * 0.5)  # three cheap ops on 8 kB
        g.output(ops.topk(h, 4)[0], "y")
    placed = place(g, NPU)
    assert {n.device for n in placed} == {"cpu"}
    naive = place(g, NPU, strategy="naive")
    assert [n.device for n in naive if n.op_type in ("Relu", "Mul", "Exp")] == ["cpu"] * 3
    # launching on the NPU costs more than these tiny ops: even per op they stay


def test_an_op_pinned_to_a_device_that_cannot_run_it_is_an_error_naming_it():
    with mdsl.Graph("g") as g:
        x = g.input("x", (8, 8))
        with mdsl.device("npu:0"):
            y = ops.topk(x, 2)[0]
        g.output(y, "y")
    with pytest.raises(
        mdsl.GraphError,
        match=r"TopK \(TopK\) at .*test_placement.py:\d+: placed on 'npu:0', which cannot run TopK",
    ):
        place(g, NPU)


def test_a_device_the_policy_does_not_know_is_an_error_naming_the_node():
    with mdsl.Graph("g") as g:
        x = g.input("x", (8, 8))
        with mdsl.device("gpu:3"):
            y = ops.relu(x)
        g.output(y, "y")
    with pytest.raises(
        mdsl.GraphError, match=r"Relu \(Relu\).*'gpu:3'.*not in the placement policy \(cpu, npu:0\)"
    ):
        place(g, NPU)
    assert place(g).node("Relu").device == "gpu:3"  # the default policy knows it


def test_an_op_no_device_runs_is_an_error():
    policy = PlacementPolicy((DeviceSpec("cpu", supports=lambda n: n.op_type != "Relu"),))
    with mdsl.Graph("g") as g:
        g.output(ops.relu(g.input("x", (3,))), "y")
    with pytest.raises(
        mdsl.GraphError, match=r"Relu \(Relu\).*no device of the placement policy \(cpu\) runs Relu"
    ):
        place(g, policy)


def test_a_policy_must_name_its_host_and_each_device_once():
    with pytest.raises(mdsl.GraphError, match="host 'cpu' is not one of"):
        PlacementPolicy((DeviceSpec("npu:0"),))
    with pytest.raises(mdsl.GraphError, match="names a device twice"):
        PlacementPolicy((DeviceSpec("cpu"), DeviceSpec("cpu")))
    with pytest.raises(mdsl.GraphError, match="strategy must be one of"):
        place(island_graph(), NPU, strategy="random")


def test_control_flow_subgraphs_are_placed_with_their_node_as_home():
    with mdsl.Graph("g") as g:
        x = g.input("x", (64, 64))
        w = mdsl.param("w", (64, 64))

        def heavy():
            with mdsl.device("npu:0"):
                return ops.relu(x @ w)

        g.output(mdsl.cond(ops.reduce_sum(x) > 0.0, heavy, lambda: x * 2.0), "y")
    placed = place(g, NPU)
    node = placed.node("cond/If")
    assert node.device == "cpu"
    then, other = node.subgraphs["then_branch"], node.subgraphs["else_branch"]
    assert [(n.op_type, n.device) for n in then] == [
        ("Input", "cpu"),
        ("Input", "cpu"),
        ("MatMul", "npu:0"),
        ("Relu", "npu:0"),
        ("Output", "cpu"),
    ]
    assert {n.device for n in other} == {"cpu"}  # 8 kB of Mul: not worth two copies
    assert_preserves_results(g, placed)


def test_the_place_pass_fills_unplaced_nodes_and_reports_them():
    g = island_graph()
    out = mdsl.passes.run(g, ["place"], debug=True)
    entry = out.pass_log[-1]
    assert entry.name == "place" and entry.changed
    assert entry.summary == "placed 4 nodes (npu:0: 1, cpu: 2)"
    assert all(n.device for n in out)
    again = mdsl.passes.run(out, ["place"])
    assert not again.pass_log[-1].changed


def test_the_detector_example_keeps_its_small_workload_on_the_host():
    """Control flow runs on the host, and the backbone's convolutions over a 32x32 image
    are too small to pay for copies: nothing goes to the NPU."""
    placed = place(control_flow.build(), NPU)
    assert {n.device for sub in mdsl.ir.rewrite.all_graphs(placed) for n in sub} == {"cpu"}


def test_custom_ops_run_on_the_host_only():
    with restored_registries():

        @mdsl.op_proto("Fancy", inputs={"x": "float"}, outputs={"y": "float"})
        def fancy(x):
            return x

        with mdsl.Graph("g") as g:
            x = g.input("x", (512, 512))
            h = ops.relu(x @ mdsl.param("w", (512, 512)))
            g.output(fancy(h) @ mdsl.param("w2", (512, 512)), "y")
        assert devices(place(g, NPU), "MatMul", "Relu", "Fancy") == [
            ("MatMul", "npu:0"),
            ("Relu", "npu:0"),
            ("Fancy", "cpu"),
            ("MatMul_1", "npu:0"),
        ]
