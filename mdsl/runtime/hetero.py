"""Heterogeneous execution: each device partition compiled by its device's backend.

`mdsl.compile(g, devices={"cpu": "c", "npu:0": "numba"})` partitions `g` by device
(`mdsl.passes.partition`) and compiles every partition as an Executable of its own, with
the backend `devices` names for its device. Each Executable owns its memory arena, and
each device owns a staging area (`DeviceMemory`) where the values copied to it land: a
copy step is a real copy from one device's buffers into another's, counted in
`exe.stats`. Nodes inside control-flow subgraphs run with their node's partition.

>>> import numpy as np, mdsl
>>> from mdsl import ops
>>> with mdsl.Graph("demo") as g:
...     x = g.input("x", ("N", 32))
...     with mdsl.device("npu:0"):
...         h = ops.relu(x @ mdsl.param("w", (32, 32)))
...     g.output(ops.topk(h, 4)[0], "top")   # TopK runs on the host
>>> exe = mdsl.compile(g, devices={"cpu": "python", "npu:0": "python"})
>>> [(p.device, p.index) for p in exe.partitions]
[('npu:0', 0), ('cpu', 1)]
>>> feeds = {"x": np.ones((2, 32), np.float32)}
>>> np.array_equal(exe(feeds)["top"], mdsl.interpret(g, feeds)["top"])
True
>>> exe.stats.copies, exe.stats.bytes     # x to the NPU, Relu back: 256 + 256 bytes
(2, 512)
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from mdsl.ir.errors import CompileError, ExecutionError
from mdsl.ir.graph import Graph
from mdsl.passes.partition import Copy, Partitioned, TransferReport, partition_by_device
from mdsl.passes.placement import PlacementPolicy
from mdsl.targets.feeds import bind_feeds


def compile_hetero(
    g: Graph,
    devices: Mapping[str, str],
    *,
    policy: PlacementPolicy | None = None,
    strategy: str = "cluster",
    opt_level: int = 2,
    threads: int | None = None,
    march_native: bool = True,
) -> HeteroExecutable:
    """Partition `g` over `devices` (device name -> backend) and compile each partition.

    `policy` defaults to `PlacementPolicy.for_devices(devices)`: the host plus a default
    accelerator per other device. `devices` must name the host, where graph inputs and
    outputs live.
    """
    from mdsl.targets.registry import target_names

    devices = _checked_devices(devices, target_names("build"))
    policy = policy or PlacementPolicy.for_devices(devices)
    if policy.host not in devices:
        raise CompileError(
            f"devices= must give the host {policy.host!r} a backend (graph inputs and outputs "
            f"live there); got {', '.join(devices)}"
        )
    unknown = sorted(set(policy.names) - set(devices))
    if unknown:
        raise CompileError(f"devices= gives no backend for {', '.join(unknown)} of the policy")
    part = partition_by_device(g, policy, strategy=strategy)
    return HeteroExecutable(
        part, devices, opt_level=opt_level, threads=threads, march_native=march_native
    )


def _checked_devices(devices, backends) -> dict[str, str]:
    if not isinstance(devices, Mapping) or not devices:
        raise CompileError(
            f"devices= maps device names to backends, e.g. {{'cpu': 'c', 'npu:0': 'numba'}}; "
            f"got {devices!r:.60}"
        )
    for name, backend in devices.items():
        if not isinstance(name, str) or not name:
            raise CompileError(f"devices=: a device name must be a non-empty string, got {name!r}")
        if backend not in backends:
            raise CompileError(
                f"devices=: unknown backend {backend!r} for {name!r}; expected one of "
                f"{', '.join(backends)}"
            )
    return dict(devices)


@dataclass
class TransferStats:
    """What the copies of an executable moved: runs, copies and bytes, all runs together."""

    runs: int = 0
    copies: int = 0
    bytes: int = 0

    def per_run(self) -> tuple[float, float]:
        """(copies, bytes) per run on average."""
        n = max(self.runs, 1)
        return self.copies / n, self.bytes / n


class DeviceMemory:
    """One device's staging buffers: where values copied to the device land. A buffer is
    kept per key and reused while its shape and dtype stay the same."""

    def __init__(self, device: str):
        self.device = device
        self._buffers: dict[str, np.ndarray] = {}

    def buffer(self, key: str, like: np.ndarray) -> np.ndarray:
        buf = self._buffers.get(key)
        if buf is None or buf.shape != like.shape or buf.dtype != like.dtype:
            buf = self._buffers[key] = np.empty(like.shape, like.dtype)
        return buf

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for b in self._buffers.values())


class HeteroExecutable:
    """Runs a `Partitioned` graph: partitions as Executables, copies between devices.

    Call it like an Executable (`exe(x=arr)`, `exe.run(feeds)`); `partitions`,
    `executables` (one per partition), `transfers` (the static report: copies and bytes
    per run) and `stats` (what runs really moved) describe it.
    """

    def __init__(
        self,
        part: Partitioned,
        devices: Mapping[str, str],
        *,
        opt_level: int = 2,
        threads: int | None = None,
        march_native: bool = True,
    ):
        from mdsl.runtime.compile import compile

        self.partitioned = part
        self.graph = part.graph
        self.devices = dict(devices)
        self.executables = [
            compile(
                p.graph,
                backend=self.devices[p.device],
                opt_level=opt_level,
                threads=threads,
                march_native=march_native,
            )
            for p in part.partitions
        ]
        self.stats = TransferStats()
        self._output_keys = frozenset(part.outputs.values())
        self._local = threading.local()
        self._stats_lock = threading.Lock()

    @property
    def partitions(self):
        return self.partitioned.partitions

    @property
    def transfers(self) -> TransferReport:
        return self.partitioned.report

    def __call__(self, feeds: Mapping | None = None, /, **kwargs) -> dict[str, np.ndarray]:
        return self.run({**(feeds or {}), **kwargs})

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Outputs by name; feeds are checked against the whole graph's inputs."""
        env, _ = bind_feeds(self.graph, feeds)
        host = self.partitioned.host
        values: dict[str, dict[str, np.ndarray]] = {d: {} for d in self.devices}
        values[host].update(env)
        values[host].update(self.partitioned.constants)
        copies = moved = 0
        for kind, item in self.partitioned.steps:
            if kind == "run":
                self._run_partition(item, values)
            else:
                moved += self._copy(item, values)
                copies += 1
        with self._stats_lock:
            self.stats.runs += 1
            self.stats.copies += copies
            self.stats.bytes += moved
        return {name: values[host][key] for name, key in self.partitioned.outputs.items()}

    def _run_partition(self, index: int, values: dict) -> None:
        p = self.partitions[index]
        memory = values[p.device]
        try:
            feeds = {name: memory[key] for name, key in p.inputs.items()}
        except KeyError as e:  # a schedule bug, not a user error: say what was missing
            raise ExecutionError(
                f"partition {p.name} ({p.device}) needs {e.args[0]!r}, which no earlier "
                "step produced on its device"
            ) from None
        outputs = self.executables[index].run(feeds)
        for name, key in p.outputs.items():
            memory[key] = outputs[name]

    def _copy(self, c: Copy, values: dict) -> int:
        src = values[c.src][c.source_key]
        if c.key in self._output_keys:  # a result handed to the caller: a fresh array
            dst = np.empty(src.shape, src.dtype)
        else:
            dst = self._memory(c.dst).buffer(c.key, src)
        np.copyto(dst, src)
        values[c.dst][c.key] = dst
        return src.nbytes

    def _memory(self, device: str) -> DeviceMemory:
        memories = getattr(self._local, "memories", None)
        if memories is None:
            memories = self._local.memories = {d: DeviceMemory(d) for d in self.devices}
        return memories[device]

    def staging_bytes(self) -> dict[str, int]:
        """Bytes of staging buffers each device holds (in the calling thread)."""
        return {d: self._memory(d).nbytes for d in self.devices}

    def __repr__(self) -> str:
        parts = ", ".join(f"{p.device}:{self.devices[p.device]}" for p in self.partitions)
        return f"HeteroExecutable({self.graph.name!r}, partitions [{parts}], {self.transfers})"
