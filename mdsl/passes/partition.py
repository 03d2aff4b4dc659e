"""Partitioning a placed graph by device, with a copy on every edge that crosses devices.

`partition_by_device(g, policy)` places `g` (`mdsl.passes.placement`), then:

1. **copies**: for each tensor read on a device other than the one producing it, one copy
   node per target device (`MemcpyHostToDevice`, `MemcpyDeviceToHost` or
   `MemcpyDeviceToDevice`, `mdsl.ops.transfer`), however many readers it has there; a
   constant read on several devices is duplicated instead. Control-flow subgraphs get
   their own copies, relative to their node's device;
2. **partitions**: the op nodes are cut into standalone graphs, one per run of a device
   (a device used before and after another device's nodes gets two partitions, so the
   partitions form a DAG that runs in order); copies sit between partitions;
3. **report**: the number of copies and the bytes they move per run (symbolic dims at
   the policy's sizes), comparable with the naive per-op placement
   (`compare_placements`).

`Partitioned.steps` is the schedule the heterogeneous runtime (`mdsl.runtime.hetero`)
follows: run a partition, make the copies its results need, run the next.

>>> import mdsl
>>> from mdsl import ops
>>> with mdsl.Graph("demo") as g:
...     x = g.input("x", (64, 64))
...     with mdsl.device("npu:0"):
...         h = ops.relu(x @ mdsl.param("w", (64, 64)))
...     g.output(ops.topk(h, 3)[0], "top")   # TopK runs on the host only
>>> part = partition_by_device(g)
>>> [(c.op_type, c.tensor) for c in part.copies]
[('MemcpyHostToDevice', 'x'), ('MemcpyDeviceToHost', 'Relu')]
>>> [(p.device, [n.op_type for n in p.graph if n.op_type not in ("Input", "Output")])
...  for p in part.partitions]
[('npu:0', ['Const', 'MatMul', 'Relu']), ('cpu', ['TopK'])]
>>> part.report.copies, part.report.bytes
(2, 32768)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mdsl.ir.errors import GraphError
from mdsl.ir.graph import CONST, INPUT, OUTPUT, Graph, Node, Tensor
from mdsl.ir.rewrite import clone_graph, insert_nodes, mark_changed, new_node, prune_dead
from mdsl.ops.transfer import COPY_OPS, copy_op_type
from mdsl.passes.cost import CostModel
from mdsl.passes.manager import PassResult, register
from mdsl.passes.placement import PlacementPolicy, place_in_place
from mdsl.passes.split import Piece, split_graph, tensor_key

_STRUCTURAL = frozenset({INPUT, CONST, OUTPUT})


@dataclass(frozen=True, slots=True)
class Copy:
    """One copy node: what it copies from where to where, and the bytes it moves per run.

    `key` names the copied value in the destination's memory (the copy's output),
    `source_key` the value copied; `nested` is True inside a control-flow subgraph (it
    runs each time its subgraph runs, within its partition).
    """

    name: str
    op_type: str
    tensor: str
    src: str
    dst: str
    bytes: int
    key: str
    source_key: str
    nested: bool = False


@dataclass(frozen=True)
class TransferReport:
    """Copies per run and the bytes they move, in total and per copy op type."""

    copies: int
    bytes: int
    by_kind: dict[str, tuple[int, int]] = field(default_factory=dict)

    @staticmethod
    def of(copies: list[Copy]) -> TransferReport:
        by_kind: dict[str, tuple[int, int]] = {}
        for c in copies:
            n, b = by_kind.get(c.op_type, (0, 0))
            by_kind[c.op_type] = (n + 1, b + c.bytes)
        return TransferReport(len(copies), sum(c.bytes for c in copies), by_kind)

    def __str__(self) -> str:
        kinds = ", ".join(f"{k} {n} ({_size(b)})" for k, (n, b) in sorted(self.by_kind.items()))
        return f"{self.copies} copies, {_size(self.bytes)} per run" + (
            f": {kinds}" if kinds else ""
        )


@dataclass
class Partition:
    """One device partition: its graph and where its inputs come from (input -> key)."""

    index: int
    device: str
    graph: Graph
    inputs: dict[str, str]
    outputs: dict[str, str]

    @property
    def name(self) -> str:
        return self.graph.name


@dataclass
class Partitioned:
    """A graph cut by device: `graph` (the placed whole, copies included, runnable in the
    interpreter), `partitions` in a runnable order, `copies`, the schedule `steps`
    (("run", partition index) or ("copy", Copy)), `outputs` (output name -> key of its
    value in host memory) and `constants` (key -> array for outputs that are constants)."""

    graph: Graph
    partitions: list[Partition]
    copies: list[Copy]
    steps: list[tuple]
    outputs: dict[str, str]
    constants: dict[str, object]
    host: str

    @property
    def report(self) -> TransferReport:
        """Copies per run and bytes moved (copies inside control flow counted once)."""
        return TransferReport.of(self.copies)

    def table(self) -> str:
        """A readable summary: partitions (device, op nodes) and copies."""
        lines = [f"{self.graph.name}: {len(self.partitions)} partitions, {self.report}"]
        for p in self.partitions:
            ops = sum(n.op_type not in _STRUCTURAL for n in p.graph)
            lines.append(f"  [{p.index}] {p.device:<10} {ops:>5} ops  {p.name}")
        for c in self.copies:
            where = " (in control flow)" if c.nested else ""
            lines.append(
                f"  {c.op_type:<22} {c.src} -> {c.dst}  {_size(c.bytes):>9}  {c.tensor}{where}"
            )
        return "\n".join(lines)


# -- entry points -----------------------------------------------------------------------------
def partition_by_device(
    g: Graph, policy: PlacementPolicy | None = None, *, strategy: str = "cluster"
) -> Partitioned:
    """Place `g` (nodes already placed keep their device), insert copies and cut it into
    per-device partitions; `g` is not changed. See the module doc."""
    policy = policy or PlacementPolicy.for_graph(g)
    placed = clone_graph(g)
    place_in_place(placed, policy, strategy=strategy)
    prune_dead(placed)
    copies = insert_copies(placed, CostModel(g, policy.sizes), host=policy.host)
    return _cut(placed, copies, policy)


def insert_copies(g: Graph, model: CostModel | None = None, *, host: str = "cpu") -> list[Copy]:
    """Insert copy nodes into placed graph `g` itself (and its control-flow subgraphs) and
    duplicate constants read on several devices; returns the copies made."""
    model = model or CostModel(g)
    copies: list[Copy] = []
    _insert_level(g, model, home=host, nested=False, copies=copies)
    return copies


@register("partition")
def partition_pass(g: Graph) -> PassResult:
    """Place unplaced nodes and insert device copies (the graph stays whole)."""
    policy = PlacementPolicy.for_graph(g)
    place_in_place(g, policy)
    copies = insert_copies(g, CostModel(g, policy.sizes), host=policy.host)
    return PassResult(g, changed=bool(copies), summary=str(TransferReport.of(copies)))


def compare_placements(g: Graph, policy: PlacementPolicy | None = None) -> PlacementComparison:
    """Copies and bytes of the naive per-op placement against placement by cluster.

    >>> import mdsl
    >>> from mdsl import ops
    >>> with mdsl.Graph("demo") as g:
    ...     x = g.input("x", (256, 256))
    ...     with mdsl.device("npu:0"):
    ...         h = x @ mdsl.param("w", (256, 256))
    ...     g.output(ops.relu(ops.topk(h, 128)[0]), "y")   # TopK: host only
    >>> cmp = compare_placements(g)
    >>> (cmp.naive.copies, cmp.cluster.copies)
    (4, 2)
    """
    policy = policy or PlacementPolicy.for_graph(g)
    naive = partition_by_device(g, policy, strategy="naive")
    cluster = partition_by_device(g, policy, strategy="cluster")
    return PlacementComparison(g.name, naive.report, cluster.report)


@dataclass(frozen=True)
class PlacementComparison:
    graph: str
    naive: TransferReport
    cluster: TransferReport

    def table(self) -> str:
        return "\n".join(
            [
                f"{self.graph}: placement   copies   bytes/run",
                f"  naive (per op)   {self.naive.copies:>7}   {_size(self.naive.bytes):>9}",
                f"  by cluster       {self.cluster.copies:>7}   {_size(self.cluster.bytes):>9}",
            ]
        )


# -- copies -----------------------------------------------------------------------------------
def _insert_level(g: Graph, model: CostModel, home: str, nested: bool, copies: list) -> None:
    for node in g.nodes:
        if node.op_type not in _STRUCTURAL and node.device is None:
            raise GraphError(
                "is not placed; run placement first", node=node.name, op_type=node.op_type
            )
        for sub in node.subgraphs.values():
            _insert_level(sub, model, home=node.device, nested=True, copies=copies)
    _duplicate_constants(g, home)
    for t, readers in _crossing_reads(g, home):
        copies.append(_insert_copy(g, t, readers, model, home, nested))


def _device_of(node: Node, home: str) -> str:
    if node.op_type in (INPUT, OUTPUT):
        return home
    return node.device or home


def _readers(g: Graph) -> dict[Tensor, list[tuple[Node, int]]]:
    readers: dict[Tensor, list[tuple[Node, int]]] = {}
    for node in g:
        for i, t in enumerate(node.inputs):
            if t is not None:
                readers.setdefault(t, []).append((node, i))
    return readers


def _crossing_reads(g: Graph, home: str):
    """(tensor, readers on one other device) for each copy `g` needs, in graph order."""
    crossing = []
    for t, readers in _readers(g).items():
        if t.producer.op_type == CONST:
            continue
        src = _device_of(t.producer, home)
        by_device: dict[str, list] = {}
        for reader, i in readers:
            dst = _device_of(reader, home)
            if dst != src:
                by_device.setdefault(dst, []).append((reader, i))
        crossing += [(t, group) for group in by_device.values()]
    return crossing


def _insert_copy(g: Graph, t: Tensor, readers: list, model: CostModel, home, nested) -> Copy:
    src = _device_of(t.producer, home)
    dst = _device_of(readers[0][0], home)
    op_type = copy_op_type(src, dst)
    leaf = f"{op_type}_{tensor_key(t).replace('/', '_')}"
    node = new_node(g, op_type, [t], {"src": src, "dst": dst}, [t.type], name=leaf, layer="")
    node.device = dst
    node.source = t.producer.source
    insert_nodes(g, [node], before=_first(g, [r for r, _ in readers]))
    for reader, i in readers:
        reader.inputs[i] = node.outputs[0]
    mark_changed(g)  # readers were edited in place
    return Copy(
        node.name,
        op_type,
        t.name,
        src,
        dst,
        model.tensor_bytes(t),
        tensor_key(node.outputs[0]),
        tensor_key(t),
        nested,
    )


def _first(g: Graph, nodes: list[Node]) -> Node:
    position = {id(n): i for i, n in enumerate(g)}
    return min(nodes, key=lambda n: position[id(n)])


def _duplicate_constants(g: Graph, home: str) -> None:
    """A constant read on several devices: one copy of the Const node per device."""
    readers = _readers(g)
    for const in [n for n in g if n.op_type == CONST]:
        by_device: dict[str, list] = {}
        for reader, i in readers.get(const.outputs[0], ()):
            by_device.setdefault(_device_of(reader, home), []).append((reader, i))
        if not by_device:
            continue
        first, *others = by_device
        const.device = first
        for device in others:
            twin = new_node(
                g,
                CONST,
                [],
                dict(const.attrs),
                [const.outputs[0].type],
                like=const,
                name=const.name.rsplit("/", 1)[-1],
            )
            twin.device = device
            insert_nodes(g, [twin], before=const)
            for reader, i in by_device[device]:
                reader.inputs[i] = twin.outputs[0]
        mark_changed(g)


# -- cutting into partitions --------------------------------------------------------------------
def _cut(placed: Graph, copies: list[Copy], policy: PlacementPolicy) -> Partitioned:
    top_copies = [c for c in copies if not c.nested]
    copy_names = {c.name for c in top_copies}
    segment = _segments(placed, copy_names, policy.host)
    order = sorted(
        set(segment.values()),
        key=lambda k: (k[1], policy.names.index(k[0])),
    )
    index = {key: i for i, key in enumerate(order)}
    piece_of = {name: index[key] for name, key in segment.items()}
    names = [f"{placed.name}_p{i}_{_safe(dev)}" for i, (dev, _) in enumerate(order)]
    pieces = split_graph(placed, piece_of, names)
    partitions = [
        Partition(i, dev, p.graph, p.inputs, p.outputs)
        for i, ((dev, _), p) in enumerate(zip(order, pieces))
    ]
    outputs, constants = _output_keys(placed)
    steps = _schedule(placed, partitions, pieces, top_copies, piece_of)
    return Partitioned(placed, partitions, copies, steps, outputs, constants, policy.host)


def _segments(g: Graph, copy_names: set[str], host: str) -> dict[str, tuple[str, int]]:
    """node name -> (device, level): a node's level is the highest level of what it
    reads, plus one where that crosses devices; a partition is one (device, level)."""
    level: dict[int, int] = {}
    segment: dict[str, tuple[str, int]] = {}
    for node in g:
        if node.op_type in _STRUCTURAL:
            continue
        device = _device_of(node, host)
        reads = [t.producer for t in node.inputs if t is not None]
        level[id(node)] = max(
            (
                level.get(id(p), 0)
                + (p.device is not None and p.device != device and p.op_type not in _STRUCTURAL)
                for p in reads
            ),
            default=0,
        )
        if node.name not in copy_names:
            segment[node.name] = (device, level[id(node)])
    return segment


def _output_keys(g: Graph) -> tuple[dict[str, str], dict[str, object]]:
    outputs, constants = {}, {}
    for node in g.output_nodes:
        t = node.inputs[0]
        key = tensor_key(t)
        outputs[node.attrs["name"]] = key
        if t.producer.op_type == CONST:
            constants[key] = t.producer.const_value()
    return outputs, constants


def _schedule(g: Graph, partitions, pieces: list[Piece], copies: list[Copy], piece_of) -> list:
    """Each partition in order, followed by the copies of values it produces; copies of
    graph inputs first."""
    by_source: dict[int | None, list[Copy]] = {}
    for c in copies:
        producer = g.node(c.name).inputs[0].producer
        by_source.setdefault(piece_of.get(producer.name), []).append(c)
    steps: list[tuple] = [("copy", c) for c in by_source.get(None, [])]
    for p in partitions:
        steps.append(("run", p.index))
        steps += [("copy", c) for c in by_source.get(p.index, [])]
    return steps


def _safe(device: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in device)


def _size(nbytes: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.2f} {unit}"
    return f"{nbytes} B"


def copy_nodes(g: Graph) -> list[Node]:
    """The copy nodes of `g` (top level)."""
    return [n for n in g if n.op_type in COPY_OPS]
