"""Device placement: give every node a device, placing by cluster, not by op.

Nodes built inside `with mdsl.device("npu:0"):` are pinned there; placement fills in the
rest from a `PlacementPolicy`: which ops each device runs (`DeviceSpec.supports`) and a
cost model (`mdsl.passes.cost`) turning a node's FLOPs and bytes into seconds on a device,
and a tensor's bytes into seconds on the link between two devices (plus a fixed latency
per copy). Every crossing edge becomes a copy (`mdsl.passes.partition`), so the cost of a
placement is its compute time plus its copy time.

Two strategies:

- "naive" (per-op): each node goes to the device that runs *it* fastest, whatever its
  neighbours do. Ops a device lacks leave islands, and each island costs two copies;
- "cluster" (the default): a greedy pass in topological order charges each node the
  copies its inputs would need, then whole islands (connected nodes on one device) move
  to a neighbouring device whenever that lowers compute + copy time, until none does.
  Small islands between host-only ops come back to the host; big compute stays put.

Graph inputs and outputs live on the host (feeds come from and results go to host
memory); a constant goes with its consumers (the partitioner duplicates a constant read
on several devices rather than copying it). Control-flow nodes run on one device; their
subgraphs are placed the same way, with the node's device as their home.

>>> import mdsl
>>> from mdsl import ops
>>> with mdsl.Graph("demo") as g:
...     x = g.input("x", ("N", 256))
...     with mdsl.device("npu:0"):
...         h = ops.relu(x @ mdsl.param("w", (256, 256)))
...     g.output(ops.tanh(h @ mdsl.param("w2", (256, 256))), "y")
>>> placed = place(g, PlacementPolicy.for_devices(["cpu", "npu:0"]))
>>> [(n.op_type, n.device) for n in placed if n.op_type in ("MatMul", "Relu", "Tanh")]
[('MatMul', 'npu:0'), ('Relu', 'npu:0'), ('MatMul', 'npu:0'), ('Tanh', 'npu:0')]
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from mdsl.ir.dtype import FLOATS
from mdsl.ir.errors import GraphError
from mdsl.ir.graph import CONST, INPUT, OUTPUT, Graph, Node, Tensor
from mdsl.ir.rewrite import all_graphs, clone_graph
from mdsl.ops.registry import get_op, has_op
from mdsl.ops.transfer import HOST, TRANSFER_OPS
from mdsl.passes.cost import CostModel, NodeCost
from mdsl.passes.manager import PassResult, register

STRATEGIES = ("cluster", "naive")
_STRUCTURAL = frozenset({INPUT, CONST, OUTPUT})
# Data movement an accelerator does in its own memory (strided copies); gathers, scatters
# and index arithmetic stay on the host.
ACCELERATOR_MOVEMENT = frozenset(
    {
        "Reshape",
        "Transpose",
        "Flatten",
        "Squeeze",
        "Unsqueeze",
        "Concat",
        "Split",
        "Slice",
        "Expand",
        "Tile",
        "Pad",
        "Identity",
        "Dropout",
        "TransData",
        "DepthToSpace",
        "SpaceToDepth",
    }
)
ACCELERATOR_OPAQUE = frozenset({"MaxPool", "AveragePool"})


def accelerator_supports(node: Node) -> bool:
    """What the default accelerator runs: floating-point compute (pointwise, reductions and
    normalizations, GEMM/convolution, pooling) and strided data movement; not control
    flow, custom (opaque) ops, gathers, or anything reading or producing integers or bools
    (index and shape arithmetic stays on the host, as on NPUs and GPUs).

    >>> import mdsl
    >>> with mdsl.Graph() as g:
    ...     x = g.input("x", (4, 4))
    ...     g.output(mdsl.ops.relu(x) > 0.5, "y")
    >>> [accelerator_supports(n) for n in g if n.op_type in ("Relu", "Greater")]
    [True, False]
    """
    if node.subgraphs or not has_op(node.op_type):
        return False
    category = get_op(node.op_type).category
    kind_ok = (
        category in ("pointwise", "reduction", "extern")
        or node.op_type in ACCELERATOR_MOVEMENT
        or node.op_type in ACCELERATOR_OPAQUE
    )
    tensors = [t for t in (*node.inputs, *node.outputs) if t is not None]
    return kind_ok and all(t.dtype in FLOATS for t in tensors)


@dataclass(frozen=True)
class DeviceSpec:
    """One device of a policy: its speed and the ops it runs (`supports`; None: all).

    A node's time on it is `launch_us` + FLOPs at `gflops` + bytes at `gbps`.
    """

    name: str
    gflops: float = 50.0
    gbps: float = 20.0
    launch_us: float = 1.0
    supports: Callable[[Node], bool] | None = None

    def can_run(self, node: Node) -> bool:
        if node.op_type in TRANSFER_OPS or node.op_type in _STRUCTURAL:
            return True
        return self.supports is None or bool(self.supports(node))

    def seconds(self, cost: NodeCost) -> float:
        return (
            self.launch_us * 1e-6
            + cost.flops / (self.gflops * 1e9)
            + cost.bytes / (self.gbps * 1e9)
        )


def host_device(name: str = HOST) -> DeviceSpec:
    """The default host: runs everything, modestly fast."""
    return DeviceSpec(name, gflops=50.0, gbps=20.0, launch_us=1.0, supports=None)


def accelerator_device(name: str) -> DeviceSpec:
    """The default accelerator: 10x the host's compute and bandwidth, a slower launch,
    and `accelerator_supports`' op set."""
    return DeviceSpec(name, gflops=500.0, gbps=200.0, launch_us=5.0, supports=accelerator_supports)


@dataclass(frozen=True)
class PlacementPolicy:
    """Devices (the host first), the link between them and the sizes of symbolic dims.

    A copy of `b` bytes costs `copy_latency_us` + `b` at `link_gbps`. `sizes` gives the
    symbolic dims their sizes for the cost model (others: `mdsl.passes.cost` defaults).
    """

    devices: tuple[DeviceSpec, ...]
    host: str = HOST
    link_gbps: float = 10.0
    copy_latency_us: float = 10.0
    sizes: Mapping[str, int] = field(default_factory=dict)
    max_rounds: int = 16

    def __post_init__(self):
        names = [d.name for d in self.devices]
        if len(set(names)) != len(names):
            raise GraphError(f"placement policy names a device twice: {names}")
        if self.host not in names:
            raise GraphError(f"placement policy: host {self.host!r} is not one of {names}")

    @classmethod
    def for_devices(cls, names: Iterable[str], **options) -> PlacementPolicy:
        """The host (`host_device`) plus a default accelerator for every other name.

        >>> [d.name for d in PlacementPolicy.for_devices(["npu:0"]).devices]
        ['cpu', 'npu:0']
        """
        host = options.get("host", HOST)
        others = [n for n in dict.fromkeys(names) if n != host]
        for name in others:
            if not isinstance(name, str) or not name:
                raise GraphError(f"a device name must be a non-empty string, got {name!r}")
        specs = (host_device(host), *(accelerator_device(n) for n in others))
        return cls(specs, **options)

    @classmethod
    def for_graph(cls, g: Graph, **options) -> PlacementPolicy:
        """`for_devices` of the devices `g`'s nodes are pinned to (and the host)."""
        return cls.for_devices(devices_of(g), **options)

    @property
    def names(self) -> list[str]:
        return [d.name for d in self.devices]

    def device(self, name: str) -> DeviceSpec:
        for d in self.devices:
            if d.name == name:
                return d
        raise GraphError(
            f"device {name!r} is not in the placement policy ({', '.join(self.names)})"
        )

    def copy_seconds(self, nbytes: int) -> float:
        return self.copy_latency_us * 1e-6 + nbytes / (self.link_gbps * 1e9)


def devices_of(g: Graph) -> list[str]:
    """The devices nodes of `g` (and its subgraphs) are placed on, in order of appearance."""
    return list(dict.fromkeys(n.device for sub in all_graphs(g) for n in sub if n.device))


# -- the entry points -------------------------------------------------------------------------
def place(g: Graph, policy: PlacementPolicy | None = None, *, strategy: str = "cluster") -> Graph:
    """A copy of `g` with every node placed (`g` is not changed); see the module doc.

    `policy` defaults to `PlacementPolicy.for_graph(g)`. A node pinned to a device the
    policy does not know, or that cannot run it, is a GraphError naming the node.
    """
    work = clone_graph(g)
    place_in_place(work, policy or PlacementPolicy.for_graph(g), strategy=strategy)
    return work


def place_in_place(g: Graph, policy: PlacementPolicy, *, strategy: str = "cluster") -> int:
    """Place the nodes of `g` itself; returns how many nodes had no device before."""
    if strategy not in STRATEGIES:
        raise GraphError(f"placement strategy must be one of {STRATEGIES}, got {strategy!r}")
    unplaced = sum(n.device is None for sub in all_graphs(g) for n in sub)
    _Placer(g, policy, CostModel(g, policy.sizes), policy.host, strategy).run()
    return unplaced


@register("place")
def place_pass(g: Graph) -> PassResult:
    """Place unplaced nodes by cluster (policy: the host and the devices the graph names)."""
    unplaced = place_in_place(g, PlacementPolicy.for_graph(g))
    counts = Counter(n.device for n in g if n.op_type not in _STRUCTURAL)
    summary = ", ".join(f"{d}: {c}" for d, c in counts.items())
    return PassResult(g, changed=unplaced > 0, summary=f"placed {unplaced} nodes ({summary})")


# -- the placer -------------------------------------------------------------------------------
class _Placer:
    """Places the nodes of one graph level; control-flow subgraphs get placers of their own."""

    def __init__(self, g: Graph, policy: PlacementPolicy, model: CostModel, home: str, strategy):
        self.g, self.policy, self.model, self.home, self.strategy = g, policy, model, home, strategy
        self.readers: dict[Tensor, list[Node]] = {}
        for node in g:
            for t in node.inputs:
                if t is not None:
                    self.readers.setdefault(t, []).append(node)
        self.ops = [n for n in g if n.op_type not in _STRUCTURAL]
        self.device: dict[int, str] = {}
        self.pinned: set[int] = set()

    def run(self) -> None:
        self._pin_fixed_nodes()
        self._place_greedily()
        if self.strategy == "cluster":
            self._merge_islands()
        for node in self.ops:
            node.device = self.device[id(node)]
        self._place_boundary()
        for node in self.ops:
            for sub in node.subgraphs.values():
                _Placer(sub, self.policy, self.model, node.device, self.strategy).run()

    # -- pinned nodes and the first assignment --------------------------------------------------
    def _pin_fixed_nodes(self) -> None:
        for node in self.ops:
            device = node.device
            if device is None and node.op_type in TRANSFER_OPS and "dst" in node.attrs:
                device = node.attrs["dst"]
            if device is None:
                continue
            spec = self._known_device(node, device)
            if not spec.can_run(node):
                raise GraphError(
                    f"placed on {device!r}, which cannot run {node.op_type} under the "
                    "placement policy; build it outside that device scope",
                    node=node.name,
                    op_type=node.op_type,
                    source=node.source,
                )
            self.device[id(node)] = device
            self.pinned.add(id(node))

    def _known_device(self, node: Node, device: str) -> DeviceSpec:
        if device not in self.policy.names:
            raise GraphError(
                f"placed on {device!r}, which is not in the placement policy "
                f"({', '.join(self.policy.names)})",
                node=node.name,
                op_type=node.op_type,
                source=node.source,
            )
        return self.policy.device(device)

    def _place_greedily(self) -> None:
        for node in self.ops:
            if id(node) in self.device:
                continue
            candidates = [d for d in self.policy.devices if d.can_run(node)]
            if not candidates:
                raise GraphError(
                    f"no device of the placement policy ({', '.join(self.policy.names)}) "
                    f"runs {node.op_type}",
                    node=node.name,
                    op_type=node.op_type,
                    source=node.source,
                )
            cost = self.model.node(node)
            self.device[id(node)] = min(
                candidates, key=lambda d: d.seconds(cost) + self._input_copy_seconds(node, d.name)
            ).name

    def _input_copy_seconds(self, node: Node, device: str) -> float:
        """Copies `node`'s inputs would need on `device` (none for the naive strategy, and
        none where another reader already placed there shares the copy)."""
        if self.strategy == "naive":
            return 0.0
        seconds = 0.0
        for t in dict.fromkeys(t for t in node.inputs if t is not None):
            src = self._source_device(t)
            if src is None or src == device:
                continue
            placed_readers = (self.device.get(id(r)) for r in self.readers.get(t, ()))
            if device not in placed_readers:
                seconds += self.policy.copy_seconds(self.model.tensor_bytes(t))
        return seconds

    # -- cost of the current assignment -----------------------------------------------------------
    def _source_device(self, t: Tensor) -> str | None:
        """Where `t` lives (None: a constant, which is duplicated, never copied)."""
        producer = t.producer
        if producer.op_type == CONST:
            return None
        if producer.op_type == INPUT or producer.graph is not self.g:
            return self.home
        return self.device[id(producer)]

    def _reader_device(self, node: Node) -> str:
        return self.home if node.op_type == OUTPUT else self.device[id(node)]

    def _copy_seconds(self, t: Tensor) -> float:
        src = self._source_device(t)
        if src is None:
            return 0.0
        targets = {self._reader_device(r) for r in self.readers.get(t, ())} - {src}
        return len(targets) * self.policy.copy_seconds(self.model.tensor_bytes(t))

    def _seconds(self, nodes: list[Node]) -> float:
        """Compute time of `nodes` plus copy time of every tensor they read or write."""
        tensors = {t for n in nodes for t in (*n.inputs, *n.outputs) if t is not None}
        compute = sum(
            self.policy.device(self.device[id(n)]).seconds(self.model.node(n)) for n in nodes
        )
        return compute + sum(self._copy_seconds(t) for t in tensors)

    # -- moving islands -------------------------------------------------------------------------
    def _merge_islands(self) -> None:
        for _ in range(self.policy.max_rounds):
            moved = False
            for island in sorted(self._islands(), key=len):
                moved |= self._move_if_cheaper(island)
            if not moved:
                return

    def _islands(self) -> list[list[Node]]:
        """Connected groups of movable nodes sharing a device (edges through data)."""
        movable = [n for n in self.ops if id(n) not in self.pinned]
        parent = {id(n): id(n) for n in movable}

        def root(i: int) -> int:
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i

        for node in movable:
            for t in node.inputs:
                p = None if t is None else t.producer
                if (
                    p is not None
                    and id(p) in parent
                    and self.device[id(p)] == self.device[id(node)]
                ):
                    parent[root(id(p))] = root(id(node))
        groups: dict[int, list[Node]] = {}
        for node in movable:
            groups.setdefault(root(id(node)), []).append(node)
        return list(groups.values())

    def _neighbour_devices(self, island: list[Node]) -> list[str]:
        members = {id(n) for n in island}
        found = []
        for node in island:
            for t in node.inputs:
                if t is not None and id(t.producer) not in members:
                    found.append(self._source_device(t))
            for t in node.outputs:
                found += [
                    self._reader_device(r) for r in self.readers.get(t, ()) if id(r) not in members
                ]
        here = self.device[id(island[0])]
        return [d for d in dict.fromkeys(found) if d is not None and d != here]

    def _move_if_cheaper(self, island: list[Node]) -> bool:
        here = self.device[id(island[0])]
        before = self._seconds(island)
        best, best_seconds = None, before
        for name in self._neighbour_devices(island):
            spec = self.policy.device(name)
            if not all(spec.can_run(n) for n in island):
                continue
            self._assign(island, name)
            seconds = self._seconds(island)
            if seconds < best_seconds - 1e-12:
                best, best_seconds = name, seconds
        self._assign(island, best or here)
        return best is not None

    def _assign(self, nodes: list[Node], device: str) -> None:
        for n in nodes:
            self.device[id(n)] = device

    # -- inputs, outputs, constants ---------------------------------------------------------------
    def _place_boundary(self) -> None:
        for node in self.g:
            if node.op_type in (INPUT, OUTPUT):
                node.device = self.home
            elif node.op_type == CONST:
                readers = [r.device or self.home for r in self.readers.get(node.outputs[0], ())]
                votes = Counter(readers)
                node.device = votes.most_common(1)[0][0] if votes else self.home
