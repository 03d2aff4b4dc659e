"""Pipeline stages (`mdsl/passes/pipeline.py`): balanced cuts, a Send/Recv pair per cut
edge and stage, stage graphs that compile like any other and chain to the same results."""

from __future__ import annotations

import numpy as np
import pytest

import mdsl
from examples import resnet_block
from examples.bert import bert
from mdsl import ops
from mdsl.passes.cost import CostModel
from mdsl.passes.pipeline import pipeline_stages
from tests.passes.random_graphs import assert_same_outputs


def bert_input(batch=2, seq=8, hidden=64, seed=0):
    return np.random.default_rng(seed).standard_normal((batch, seq, hidden), dtype=np.float32)


def run_stages(stages, feeds: dict, *, compiled=None) -> dict:
    """Run the stage graphs one after the other, each Recv fed from its Send."""
    values = dict(feeds)
    outputs = {}
    for stage in stages:
        mdsl.ir.verify(stage.graph)
        inputs = {name: values[name] for name in stage.graph.inputs}
        run = compiled[stage.index] if compiled else lambda f, s=stage: mdsl.interpret(s.graph, f)
        out = run(inputs)
        values.update({key: out[key] for key in stage.sends})
        outputs.update({name: out[o] for name, o in stage.outputs.items()})
    return outputs


def stage_flops(stages) -> list[int]:
    """FLOPs of each stage, counted with the cost model on the original graph's nodes."""
    return [s.flops for s in stages]


def matmul_flops(g: mdsl.Graph, sizes) -> int:
    model = CostModel(g, sizes)
    return sum(model.node(n).flops for n in g if n.op_type == "MatMul")


@pytest.mark.parametrize("n_stages", [2, 3, 4])
def test_bert_stages_are_balanced_within_20_percent_of_the_ideal(n_stages):
    g = bert(4, 64, 4)
    stages = pipeline_stages(g, n_stages)
    seconds = [s.seconds for s in stages]
    ideal = sum(seconds) / n_stages
    assert max(seconds) <= 1.2 * ideal
    assert stages.imbalance == pytest.approx(max(seconds) / ideal)
    # every op node of the graph is in exactly one stage
    ops_per_stage = [
        sorted(
            n.name for n in s.graph if n.op_type not in ("Input", "Const", "Output", "Send", "Recv")
        )
        for s in stages
    ]
    flat = [name for names in ops_per_stage for name in names]
    originals = sorted(n.name for n in g if n.op_type not in ("Input", "Const", "Output"))
    assert sorted(flat) == originals


def test_two_stages_of_bert_cut_between_blocks():
    """Within the slack the cut moves to where only the hidden state crosses."""
    g = bert(4, 64, 4)
    stages = pipeline_stages(g, 2)
    blocks = [sorted({n.layer.split("/")[0] for n in s.graph if n.layer}) for s in stages]
    assert blocks == [["EncoderBlock", "EncoderBlock_1"], ["EncoderBlock_2", "EncoderBlock_3"]]
    assert stages[0].flops == stages[1].flops  # identical blocks: identical halves
    sizes = {"B": 32, "S": 32}  # the cost model's defaults
    assert sum(stage_flops(stages)) >= matmul_flops(g, sizes)
    assert stages[0].sends == {"EncoderBlock_1/AddNorm_1/LayerNorm@1": 1}
    assert stages[1].recvs == {"EncoderBlock_1/AddNorm_1/LayerNorm@1": 0}
    assert stages[1].graph.inputs["EncoderBlock_1/AddNorm_1/LayerNorm@1"].shape == (
        mdsl.Dim("B"),
        mdsl.Dim("S"),
        64,
    )


def test_each_cut_edge_gets_one_send_recv_pair_per_receiving_stage():
    g = bert(4, 64, 4, masked=True)  # the mask bias is read by every block
    stages = pipeline_stages(g, 3)
    crossing = set()
    for node in g:
        for t in node.inputs:
            if t is None or t.producer.op_type in ("Input", "Const"):
                continue
            src, dst = stages.stage_of[t.producer.name], stages.stage_of.get(node.name)
            if dst is not None and dst != src:
                crossing.add((t.name, src, dst))
    sends = [
        (n.inputs[0].name, n.attrs["src_stage"], n.attrs["dst_stage"])
        for n in stages.graph
        if n.op_type == "Send"
    ]
    recvs = [n for n in stages.graph if n.op_type == "Recv"]
    assert sorted(sends) == sorted(crossing)
    assert len(recvs) == len(sends)
    for recv in recvs:
        send = recv.inputs[0].producer
        assert send.op_type == "Send" and send.attrs == recv.attrs
        assert stages.stage_of[send.name] == send.attrs["src_stage"]
        assert stages.stage_of[recv.name] == recv.attrs["dst_stage"] > send.attrs["src_stage"]
    # the mask bias, computed in stage 0 and read by every block, goes to each stage
    assert [set(s.feeds) for s in stages] == [{"x", "mask"}, set(), set()]
    bias = "AttentionMask/Broadcastable"
    assert {(t, dst) for t, src, dst in crossing if t == bias} == {(bias, 1), (bias, 2)}
    pairs = {(key, s.index, dst) for s in stages for key, dst in s.sends.items()}
    assert pairs == {(key, src, s.index) for s in stages for key, src in s.recvs.items()}


def test_the_whole_graph_with_send_recv_computes_what_the_graph_computes():
    g = bert(3, 64, 4, masked=True)
    stages = pipeline_stages(g, 3)
    mdsl.ir.verify(stages.graph)
    feeds = {"x": bert_input(), "mask": np.ones((2, 8), np.float32)}
    want = mdsl.interpret(g, feeds)
    assert_same_outputs(mdsl.interpret(stages.graph, feeds), want)
    assert_same_outputs(run_stages(stages, feeds), want)


def test_a_stage_is_an_ordinary_graph_that_compiles_like_any_other():
    g = bert(2, 64, 4)
    stages = pipeline_stages(g, 2)
    compiled = [mdsl.compile(s.graph, backend="c").run for s in stages]
    for seed in range(3):  # several micro-batches, two batch sizes
        feeds = {"x": bert_input(batch=1 + seed % 2, seed=seed)}
        assert_same_outputs(
            run_stages(stages, feeds, compiled=compiled), mdsl.interpret(g, feeds), atol=1e-5
        )


def test_outputs_produced_early_come_from_their_stage():
    with mdsl.Graph("two_heads") as g:
        h = g.input("x", ("B", 128))
        b = g.input("b", (128,))
        for i in range(4):
            with mdsl.scope(f"L{i}"):
                h = ops.relu(h @ mdsl.param("w", (128, 128)) + (b if i == 3 else 0.0))
            if i == 0:
                g.output(ops.tanh(h), "early")
        g.output(h, "late")
        g.output(g.inputs["x"], "echo")
    stages = pipeline_stages(g, 2)
    assert [sorted(s.outputs) for s in stages] == [["early"], ["late"]]
    assert stages.direct_outputs == {"echo": ("feed", "x")}
    assert [s.feeds for s in stages] == [("x",), ("b",)]  # a graph input goes straight in
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((3, 128), dtype=np.float32), "b": np.ones(128, np.float32)}
    want = mdsl.interpret(g, feeds)
    got = run_stages(stages, feeds)
    assert_same_outputs(got, {k: want[k] for k in ("early", "late")})


def test_resnet_block_stages_balance_its_two_convolutions():
    g = resnet_block.build(channels=16, size=16)
    stages = pipeline_stages(g, 2)
    assert stages.imbalance <= 1.2
    assert [sum(n.op_type == "Conv" for n in s.graph) for s in stages] == [1, 1]
    x = np.random.default_rng(0).standard_normal((2, 16, 16, 16), dtype=np.float32)
    assert_same_outputs(run_stages(stages, {"x": x}), mdsl.interpret(g, {"x": x}), atol=1e-5)


def test_bad_stage_counts_are_refused():
    g = bert(1, 32, 2)
    with pytest.raises(mdsl.GraphError, match="n_stages must be a positive int"):
        pipeline_stages(g, 0)
    with pytest.raises(mdsl.GraphError, match=r"has \d+ op nodes, too few for 500 stages"):
        pipeline_stages(g, 500)


def test_the_stage_table_reads_like_the_split():
    table = pipeline_stages(bert(2, 64, 4), 2).table()
    lines = table.splitlines()
    assert lines[0].startswith("bert_L2_H64_A4: 2 stages, imbalance 1.0")
    assert "recv 0  send 1" in lines[1] and "recv 1  send 0" in lines[2]
