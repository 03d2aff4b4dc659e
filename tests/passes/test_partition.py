"""Partitioning by device (`mdsl/passes/partition.py`): one copy per crossing (tensor,
target device), none between nodes of one device, constants duplicated, control flow
recursed into, partitions that run in order and compute what the graph computes."""

from __future__ import annotations

import numpy as np
import pytest

import mdsl
from examples import resnet_block
from examples.bert import bert
from mdsl import ops
from mdsl.ir.rewrite import all_graphs
from mdsl.ops.transfer import COPY_OPS
from mdsl.passes.partition import compare_placements, insert_copies, partition_by_device
from mdsl.passes.placement import PlacementPolicy, place
from tests.passes.checks import random_feeds
from tests.passes.random_graphs import assert_same_outputs

NPU = PlacementPolicy.for_devices(["cpu", "npu:0"])
TWO_NPUS = PlacementPolicy.for_devices(["cpu", "npu:0", "npu:1"])
STRUCTURAL = ("Input", "Const", "Output")


def bert_with_embeddings(depth=2, hidden=64, heads=4):
    return bert(depth, hidden, heads, vocab=1000, masked=True, max_positions=64)


def bert_feeds(batch=2, seq=8, seed=0):
    rng = np.random.default_rng(seed)
    return {
        "input_ids": rng.integers(0, 1000, (batch, seq)),
        "position_ids": np.tile(np.arange(seq), (batch, 1)),
        "mask": (rng.random((batch, seq)) > 0.2).astype(np.float32),
    }


def cond_graph():
    """An If on the host whose then-branch holds NPU work."""
    with mdsl.Graph("cf") as g:
        x = g.input("x", (64, 64))
        w = mdsl.param("w", (64, 64))

        def heavy():
            with mdsl.device("npu:0"):
                return ops.relu(x @ w)

        y = mdsl.cond(ops.reduce_sum(x) > 0.0, heavy, lambda: x * 2.0)
        g.output(y + 1.0, "y")
    return g


def home_of(g: mdsl.Graph) -> str:
    """The device of a (sub)graph's boundary: the host, or its control-flow node's."""
    for node in g:
        if node.op_type in ("Input", "Output"):
            return node.device
    return "cpu"


def required_copies(placed: mdsl.Graph) -> list[tuple[str, str]]:
    """Independently of the partitioner: each (tensor, device) pair where a non-constant
    tensor is read on a device other than its producer's, in every (sub)graph."""
    pairs = set()
    for g in all_graphs(placed):
        for node in g:
            for t in node.inputs:
                if t is None or t.producer.op_type == "Const":
                    continue
                if node.device != t.producer.device:
                    pairs.add((t.name, node.device))
    return sorted(pairs)


def check_copies(part) -> None:
    """Each copy node links two different devices; every other edge stays on one."""
    for g in all_graphs(part.graph):
        for node in g:
            for t in node.inputs:
                if t is None:
                    continue
                if node.op_type in COPY_OPS:
                    assert node.attrs["src"] == t.producer.device != node.device
                    assert node.attrs["dst"] == node.device
                else:
                    assert t.producer.device == node.device, f"{t.name} -> {node.name}"


@pytest.mark.parametrize(
    ("build", "policy", "expected"),
    [
        (bert_with_embeddings, NPU, 3),
        (lambda: resnet_block.build(channels=8, size=10), NPU, 2),
        (cond_graph, NPU, 3),
    ],
    ids=["bert-embeddings", "resnet-block", "control-flow"],
)
def test_copy_count_is_what_the_cut_requires(build, policy, expected):
    g = build()
    part = partition_by_device(g, policy)
    required = required_copies(place(g, policy))
    assert len(part.copies) == len(required) == expected
    assert sorted((c.tensor, c.dst) for c in part.copies) == required
    in_graph = [n for sub in all_graphs(part.graph) for n in sub if n.op_type in COPY_OPS]
    assert sorted(n.name for n in in_graph) == sorted(c.name for c in part.copies)
    check_copies(part)


def test_a_tensor_read_by_several_nodes_of_a_device_is_copied_once():
    with mdsl.Graph("g") as g:
        x = g.input("x", (4, 4))
        with mdsl.device("npu:0"):
            a, b, c = ops.relu(x), ops.exp(x), ops.tanh(x)
        g.output(a + b + c, "y")
    part = partition_by_device(g, NPU)
    assert [(c.op_type, c.tensor) for c in part.copies] == [
        ("MemcpyHostToDevice", "x"),
        ("MemcpyDeviceToHost", "Add_1"),
    ]
    copy = part.graph.node("MemcpyHostToDevice_x")
    readers = [n.name for n in part.graph if copy.outputs[0] in n.inputs]
    assert readers == ["Relu", "Exp", "Tanh"]


def test_copy_op_types_follow_the_devices_they_link():
    with mdsl.Graph("g") as g:
        x = g.input("x", (8, 8))
        with mdsl.device("npu:0"):
            h = ops.relu(x)
        with mdsl.device("npu:1"):
            h = ops.exp(h)
        g.output(h, "y")
    part = partition_by_device(g, TWO_NPUS)
    assert [(c.op_type, c.src, c.dst, c.bytes) for c in part.copies] == [
        ("MemcpyHostToDevice", "cpu", "npu:0", 256),
        ("MemcpyDeviceToDevice", "npu:0", "npu:1", 256),
        ("MemcpyDeviceToHost", "npu:1", "cpu", 256),
    ]
    assert [p.device for p in part.partitions] == ["npu:0", "npu:1"]
    assert str(part.report) == (
        "3 copies, 768 B per run: MemcpyDeviceToDevice 1 (256 B), "
        "MemcpyDeviceToHost 1 (256 B), MemcpyHostToDevice 1 (256 B)"
    )


def test_a_constant_read_on_two_devices_is_duplicated_not_copied():
    with mdsl.Graph("g") as g:
        x = g.input("x", (8, 8))
        w = mdsl.param("w", (8, 8))
        with mdsl.device("npu:0"):
            h = ops.relu(x @ w)
        g.output(ops.topk(h + w, 2)[0], "y")  # Add on the host would read w too
    part = partition_by_device(g, NPU)
    consts = [(n.name, n.device) for n in part.graph if n.op_type == "Const"]
    assert ("w", "npu:0") in consts and ("w_1", "cpu") in consts
    assert all(c.tensor != "w" for c in part.copies)
    check_copies(part)
    assert_same_outputs(
        mdsl.interpret(part.graph, {"x": np.ones((8, 8), np.float32)}),
        mdsl.interpret(g, {"x": np.ones((8, 8), np.float32)}),
    )


def test_partitions_alternate_with_the_devices_and_run_in_order():
    with mdsl.Graph("g") as g:
        x = g.input("x", (128, 128))
        with mdsl.device("npu:0"):
            h = ops.relu(x @ mdsl.param("w", (128, 128)))
        h = ops.topk(h, 64)[0]
        with mdsl.device("npu:0"):
            h = ops.tanh(h @ mdsl.param("w2", (64, 128)))
        g.output(ops.topk(h, 2)[0], "y")
    part = partition_by_device(g, NPU)
    assert [
        (p.device, [n.op_type for n in p.graph if n.op_type not in STRUCTURAL])
        for p in part.partitions
    ] == [
        ("npu:0", ["MatMul", "Relu"]),
        ("cpu", ["TopK"]),
        ("npu:0", ["MatMul", "Tanh"]),
        ("cpu", ["TopK"]),
    ]
    kinds = [s[0] if s[0] == "run" else s[1].op_type for s in part.steps]
    assert kinds == [
        "MemcpyHostToDevice", "run", "MemcpyDeviceToHost", "run",
        "MemcpyHostToDevice", "run", "MemcpyDeviceToHost", "run",
    ]  # fmt: skip
    assert run_steps(part, {"x": random_feeds(g)["x"]}).keys() == {"y"}
    assert_same_outputs(run_steps(part, random_feeds(g)), mdsl.interpret(g, random_feeds(g)))


def run_steps(part, feeds: dict) -> dict:
    """The partitions and copies of `part` run by hand in the interpreter."""
    memory = {"cpu": dict(feeds), "npu:0": {}, "npu:1": {}}
    for kind, item in part.steps:
        if kind == "copy":
            memory[item.dst][item.key] = memory[item.src][item.source_key].copy()
            continue
        p = part.partitions[item]
        mdsl.ir.verify(p.graph)
        out = mdsl.interpret(p.graph, {n: memory[p.device][k] for n, k in p.inputs.items()})
        memory[p.device].update({k: out[n] for n, k in p.outputs.items()})
    return {name: memory["cpu"][key] for name, key in part.outputs.items()}


@pytest.mark.parametrize("strategy", ["naive", "cluster"])
def test_partitioned_bert_computes_what_the_graph_computes(strategy):
    g = bert_with_embeddings()
    part = partition_by_device(g, NPU, strategy=strategy)
    feeds = bert_feeds()
    want = mdsl.interpret(g, feeds)
    mdsl.ir.verify(part.graph)
    assert_same_outputs(mdsl.interpret(part.graph, feeds), want)
    assert_same_outputs(run_steps(part, feeds), want)


def test_copies_inside_control_flow_run_with_their_branch():
    g = cond_graph()
    part = partition_by_device(g, NPU)
    assert [(c.op_type, c.tensor, c.nested) for c in part.copies] == [
        ("MemcpyHostToDevice", "cond/then/captured/x", True),
        ("MemcpyHostToDevice", "cond/then/captured/w", True),
        ("MemcpyDeviceToHost", "cond/then/Relu", True),
    ]
    assert [p.device for p in part.partitions] == ["cpu"]
    for sign in (1.0, -1.0):
        feeds = {"x": sign * np.abs(random_feeds(g)["x"])}
        assert_same_outputs(run_steps(part, feeds), mdsl.interpret(g, feeds))


def test_the_report_counts_bytes_at_the_policy_sizes():
    with mdsl.Graph("g") as g:
        x = g.input("x", ("B", "S", 16))
        with mdsl.device("npu:0"):
            y = ops.relu(x)
        g.output(y, "y")
    sized = PlacementPolicy(NPU.devices, sizes={"B": 4, "S": 10})
    part = partition_by_device(g, sized)
    assert [c.bytes for c in part.copies] == [4 * 10 * 16 * 4] * 2
    assert part.report.copies == 2 and part.report.bytes == 2 * 2560


def test_cluster_placement_moves_fewer_bytes_than_naive_on_bert_base():
    g = bert(12, 768, 12, vocab=30522, masked=True)
    policy = PlacementPolicy(NPU.devices, sizes={"B": 8, "S": 128})
    cmp = compare_placements(g, policy)
    hidden = 8 * 128 * 768 * 4  # one (B, S, H) float32 activation
    # naive: both embedding gathers (host) copied up, the Sum runs on the NPU
    assert (cmp.naive.copies, cmp.naive.bytes) == (4, 3 * hidden + 8 * 128 * 4)
    # by cluster: the Sum joins the gathers on the host, one activation goes up
    assert (cmp.cluster.copies, cmp.cluster.bytes) == (3, 2 * hidden + 8 * 128 * 4)
    assert "naive (per op)" in cmp.table()


def test_the_partition_pass_inserts_copies_in_place_of_a_whole_graph():
    with mdsl.Graph("g") as g:
        x = g.input("x", (64, 64))
        with mdsl.device("npu:0"):
            h = ops.relu(x @ mdsl.param("w", (64, 64)))
        g.output(ops.topk(h, 4)[0], "y")
    out = mdsl.passes.run(g, ["partition"], debug=True)
    assert [n.op_type for n in out if n.op_type in COPY_OPS] == [
        "MemcpyHostToDevice",
        "MemcpyDeviceToHost",
    ]
    assert out.pass_log[-1].summary.startswith("2 copies, 32.77 kB per run")
    feeds = random_feeds(g)
    assert_same_outputs(mdsl.interpret(out, feeds), mdsl.interpret(g, feeds))


def test_copies_need_a_placed_graph():
    with mdsl.Graph("g") as g:
        g.output(ops.relu(g.input("x", (3,))), "y")
    with pytest.raises(mdsl.GraphError, match=r"Relu \(Relu\): is not placed"):
        insert_copies(mdsl.passes.clone_graph(g))


def test_partition_tables_name_devices_and_copies():
    part = partition_by_device(cond_graph(), NPU)
    table = part.table()
    assert table.splitlines()[0] == "cf: 1 partitions, 3 copies, 49.15 kB per run: " + (
        "MemcpyDeviceToHost 1 (16.38 kB), MemcpyHostToDevice 2 (32.77 kB)"
    )
    assert "MemcpyDeviceToHost     npu:0 -> cpu" in table and "(in control flow)" in table
