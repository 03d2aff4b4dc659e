"""Pipeline stages: cut a graph into balanced stages with Send/Recv pairs on the cut edges.

`pipeline_stages(g, n)` orders the op nodes topologically (the graph's own order), costs
each one (`mdsl.passes.cost`: FLOPs at `gflops` plus bytes at `gbps`) and cuts the order
into `n` contiguous runs. Each cut lands near its ideal place (k/n of the total cost);
among the positions within `slack` of it, the one whose cut moves the fewest bytes wins
(in a transformer, the boundary between two blocks, where only the hidden state crosses).

A tensor produced in stage i and read in stage j > i gets a `Send` in stage i and a
`Recv` in stage j, paired by a key. `PipelineStages.graph` is the whole graph with those
pairs (it runs in the interpreter like the original); `stages[i].graph` is stage i as an
ordinary graph that compiles like any other: its inputs are the graph inputs it reads and
its Recv keys, its outputs its Send keys and the graph outputs it produces. Constants are
copied into every stage that reads them. The runtime in `mdsl.runtime.pipeline` runs the
stages as a micro-batched pipeline on Ray.

>>> import mdsl
>>> from mdsl import ops
>>> with mdsl.Graph("mlp") as g:
...     h = g.input("x", ("B", 256))
...     for i in range(4):
...         with mdsl.scope(f"Layer{i}"):
...             h = ops.relu(h @ mdsl.param("w", (256, 256)))
...     g.output(h, "y")
>>> stages = pipeline_stages(g, 2)
>>> [sorted({n.layer for n in s.graph if n.layer}) for s in stages]
[['Layer0', 'Layer1'], ['Layer2', 'Layer3']]
>>> stages[0].sends, stages[1].recvs
({'Layer1/Relu@1': 1}, {'Layer1/Relu@1': 0})
>>> stages.imbalance < 1.2          # the slowest stage against an ideal, even split
True
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from mdsl.ir.errors import GraphError
from mdsl.ir.graph import CONST, INPUT, OUTPUT, Graph, Node, Tensor
from mdsl.ir.rewrite import clone_graph, insert_nodes, mark_changed, new_node, prune_dead
from mdsl.ops.transfer import RECV, SEND
from mdsl.passes.cost import CostModel
from mdsl.passes.split import split_graph, tensor_key

_STRUCTURAL = frozenset({INPUT, CONST, OUTPUT})
DEFAULT_SLACK = 0.1


@dataclass
class Stage:
    """One pipeline stage: its graph and how it connects to the others.

    `feeds`: graph inputs it reads (same names). `recvs`: key of a Send/Recv pair (the
    name of the stage graph's input) -> the stage it receives from; `sends`: key (the
    name of the stage graph's output) -> the stage it sends to; `outputs`: graph outputs
    it produces (output name -> the stage graph's output name). `seconds`: its
    estimated cost (`flops` and `bytes` the same, as counts).
    """

    index: int
    graph: Graph
    feeds: tuple[str, ...]
    recvs: dict[str, int]
    sends: dict[str, int]
    outputs: dict[str, str]
    seconds: float
    flops: int
    bytes: int

    @property
    def name(self) -> str:
        return self.graph.name


@dataclass
class PipelineStages:
    """The stages of a graph (`len`, iteration and indexing give them), the whole graph
    with Send/Recv pairs (`graph`), each node's stage (`stage_of`), the ideal stage cost
    (total / n) and `imbalance` (the slowest stage / ideal; 1.0 is perfect).
    `direct_outputs`: graph outputs no stage computes, ("feed", input) or ("const", array).
    """

    source: str
    graph: Graph
    stages: list[Stage]
    stage_of: dict[str, int] = field(repr=False)
    direct_outputs: dict[str, tuple[str, object]] = field(default_factory=dict, repr=False)

    def __len__(self) -> int:
        return len(self.stages)

    def __iter__(self):
        return iter(self.stages)

    def __getitem__(self, i: int) -> Stage:
        return self.stages[i]

    @property
    def ideal(self) -> float:
        return sum(s.seconds for s in self.stages) / len(self.stages)

    @property
    def imbalance(self) -> float:
        return max(s.seconds for s in self.stages) / self.ideal if self.ideal else 1.0

    def table(self) -> str:
        """One line per stage: cost, share of the ideal, its sends and receives."""
        lines = [f"{self.source}: {len(self)} stages, imbalance {self.imbalance:.3f}"]
        for s in self.stages:
            ops = sum(n.op_type not in _STRUCTURAL for n in s.graph)
            lines.append(
                f"  [{s.index}] {ops:>5} ops  {s.flops / 1e9:8.3f} GFLOP  "
                f"{s.seconds / self.ideal:6.1%} of ideal  recv {len(s.recvs)}  send {len(s.sends)}"
            )
        return "\n".join(lines)


def pipeline_stages(
    g: Graph,
    n_stages: int,
    *,
    sizes: Mapping[str, int] | None = None,
    gflops: float = 50.0,
    gbps: float = 20.0,
    slack: float = DEFAULT_SLACK,
) -> PipelineStages:
    """Cut `g` into `n_stages` balanced stages (see the module doc); `g` is not changed.

    `sizes` sizes symbolic dims for the cost model; `gflops`/`gbps` weigh FLOPs against
    bytes; `slack` (a fraction of the ideal stage cost) is how far a cut may move from its
    ideal place to cross fewer bytes.
    """
    if isinstance(n_stages, bool) or not isinstance(n_stages, int) or n_stages < 1:
        raise GraphError(f"pipeline_stages: n_stages must be a positive int, got {n_stages!r}")
    if not slack >= 0:
        raise GraphError(f"pipeline_stages: slack must be >= 0, got {slack!r}")
    work = clone_graph(g)
    prune_dead(work)
    model = CostModel(work, sizes)
    order = [n for n in work if n.op_type not in _STRUCTURAL]
    if len(order) < n_stages:
        raise GraphError(
            f"pipeline_stages: graph {g.name!r} has {len(order)} op nodes, "
            f"too few for {n_stages} stages"
        )
    seconds = [_seconds(model, n, gflops, gbps) for n in order]
    cuts = _choose_cuts(order, seconds, _cut_bytes(work, order, model), n_stages, slack)
    stage_of = _stage_assignment(order, cuts)
    pairs = _insert_send_recv(work, stage_of)
    return _build(g.name, work, stage_of, pairs, n_stages, model, gflops, gbps)


def _seconds(model: CostModel, node: Node, gflops: float, gbps: float) -> float:
    cost = model.node(node)
    return cost.flops / (gflops * 1e9) + cost.bytes / (gbps * 1e9)


# -- choosing the cuts ------------------------------------------------------------------------
def _cut_bytes(g: Graph, order: list[Node], model: CostModel) -> list[int]:
    """bytes[j]: bytes of the tensors a cut just before `order[j]` crosses."""
    position = {id(n): i for i, n in enumerate(order)}
    delta = [0] * (len(order) + 1)
    last_read: dict[Tensor, int] = {}
    for i, node in enumerate(order):
        for t in node.inputs:
            if t is not None and id(t.producer) in position:
                last_read[t] = max(last_read.get(t, -1), i)
    for t, last in last_read.items():
        first = position[id(t.producer)] + 1
        if first <= last:
            nbytes = model.tensor_bytes(t)
            delta[first] += nbytes
            delta[last + 1] -= nbytes
    crossing, running = [], 0
    for j in range(len(order)):
        running += delta[j]
        crossing.append(running)
    return crossing


def _choose_cuts(order, seconds, crossing, n_stages: int, slack: float) -> list[int]:
    """Cut positions (a stage starts at each), one per stage after the first."""
    prefix = [0.0]
    for s in seconds:
        prefix.append(prefix[-1] + s)
    total = prefix[-1]
    ideal = total / n_stages
    cuts: list[int] = []
    for k in range(1, n_stages):
        lo = (cuts[-1] if cuts else 0) + 1
        hi = len(order) - (n_stages - k)
        target = k * ideal
        window = [j for j in range(lo, hi + 1) if abs(prefix[j] - target) <= slack * ideal]
        if window:
            best = min(window, key=lambda j: (crossing[j], abs(prefix[j] - target)))
        else:
            best = min(range(lo, hi + 1), key=lambda j: abs(prefix[j] - target))
        cuts.append(best)
    return cuts


def _stage_assignment(order: list[Node], cuts: list[int]) -> dict[str, int]:
    stage_of, stage = {}, 0
    bounds = [*cuts, len(order)]
    for i, node in enumerate(order):
        while i >= bounds[stage]:
            stage += 1
        stage_of[node.name] = stage
    return stage_of


# -- Send/Recv pairs --------------------------------------------------------------------------
def recv_key(t: Tensor, dst_stage: int) -> str:
    """The key of the Send/Recv pair carrying `t` to stage `dst_stage`."""
    return f"{tensor_key(t)}@{dst_stage}"


def _insert_send_recv(g: Graph, stage_of: dict[str, int]) -> dict[str, tuple[int, int]]:
    """A Send/Recv pair for each (tensor, later stage reading it), readers rewired;
    returns key -> (sending stage, receiving stage)."""
    pairs: dict[str, tuple[int, int]] = {}
    readers: dict[Tensor, list[tuple[Node, int]]] = {}
    for node in g:
        for i, t in enumerate(node.inputs):
            if t is not None:
                readers.setdefault(t, []).append((node, i))
    for t, uses in readers.items():
        src = stage_of.get(t.producer.name)
        if src is None:
            continue
        by_stage: dict[int, list] = {}
        for reader, i in uses:
            dst = stage_of.get(reader.name)
            if dst is not None and dst != src:
                by_stage.setdefault(dst, []).append((reader, i))
        for dst, group in sorted(by_stage.items()):
            _pair(g, t, src, dst, group, stage_of)
            pairs[recv_key(t, dst)] = (src, dst)
    return pairs


def _pair(g: Graph, t: Tensor, src: int, dst: int, readers: list, stage_of: dict) -> None:
    key = recv_key(t, dst)
    attrs = {"key": key, "src_stage": src, "dst_stage": dst}
    send = new_node(g, SEND, [t], attrs, [t.type], name=f"Send_s{dst}", like=t.producer)
    recv = new_node(
        g, RECV, [send.outputs[0]], dict(attrs), [t.type], name=f"Recv_s{src}", like=readers[0][0]
    )
    stage_of[send.name], stage_of[recv.name] = src, dst
    insert_nodes(g, [send], before=_after(g, t.producer))
    insert_nodes(g, [recv], before=readers[0][0])
    for reader, i in readers:
        reader.inputs[i] = recv.outputs[0]
    mark_changed(g)  # readers were edited in place


def _after(g: Graph, node: Node) -> Node | None:
    nodes = g.nodes
    for i, n in enumerate(nodes):
        if n is node:
            return nodes[i + 1] if i + 1 < len(nodes) else None
    return None


# -- the stage graphs -------------------------------------------------------------------------
def _build(name, work, stage_of, pairs, n_stages, model, gflops, gbps) -> PipelineStages:
    def key_of(t: Tensor) -> str:
        producer = t.producer
        return producer.attrs["key"] if producer.op_type == SEND else tensor_key(t)

    pieces = split_graph(work, stage_of, [f"{name}_stage{i}" for i in range(n_stages)], key_of)
    out_keys = {n.attrs["name"]: key_of(n.inputs[0]) for n in work.output_nodes}
    stages = []
    for i, piece in enumerate(pieces):
        produced = {key: out for out, key in piece.outputs.items()}
        _check_pair_names(i, piece, pairs)
        cost = model.graph(piece.graph)
        stages.append(
            Stage(
                i,
                piece.graph,
                feeds=tuple(n for n, k in piece.inputs.items() if k in work.inputs),
                recvs={n: pairs[k][0] for n, k in piece.inputs.items() if k in pairs},
                sends={n: pairs[k][1] for n, k in piece.outputs.items() if k in pairs},
                outputs={o: produced[k] for o, k in out_keys.items() if k in produced},
                seconds=sum(
                    _seconds(model, n, gflops, gbps) for n in work if stage_of.get(n.name) == i
                ),
                flops=cost.flops,
                bytes=cost.bytes,
            )
        )
    return PipelineStages(name, work, stages, stage_of, _direct_outputs(work))


def _check_pair_names(index: int, piece, pairs) -> None:
    for name, key in [*piece.inputs.items(), *piece.outputs.items()]:
        if key in pairs and name != key:  # only if a node of the graph is named like a key
            raise GraphError(
                f"pipeline_stages: stage {index} cannot name its Send/Recv {key!r}: "
                "a node of the graph has that name"
            )


def _direct_outputs(g: Graph) -> dict[str, tuple[str, object]]:
    """Graph outputs no stage computes: ("feed", input name) or ("const", array)."""
    direct = {}
    for node in g.output_nodes:
        producer = node.inputs[0].producer
        if producer.op_type == INPUT:
            direct[node.attrs["name"]] = ("feed", producer.name)
        elif producer.op_type == CONST:
            direct[node.attrs["name"]] = ("const", producer.const_value())
    return direct
