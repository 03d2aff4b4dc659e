"""Running a plan whose sizes are known only at run time: symbolic dims, control flow.

A compiled variant of a symbolic plan is built once and serves every shape signature:
per call, `PlanShapes` reads the symbols' values off the feeds, fetches the memory
layout of that signature (the memory planner run on the buffer sizes evaluated for it,
cached in a bounded LRU), allocates the outputs and, after the run, cuts outputs whose
dims control flow decided down to their actual size. The generated code gets the
values as the `dims` array (one slot per symbol; dynamic dims are written back there,
and one more slot holds the value a failed check reports) and the layout as `offsets`.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from mdsl.codegen.memory import MemoryPlan
from mdsl.ir.dim import MAX_DIM, Dim
from mdsl.ir.errors import ExecutionError
from mdsl.ir.tensor_type import MAX_TENSOR_BYTES
from mdsl.targets.feeds import bind_feeds

MAX_LAYOUTS = 64  # memory layouts kept per variant (each a few arrays: cheap)
MAX_GROWTHS = 64  # runs of one call that may grow capacities (each at least doubles one)


class CapacityExceeded(Exception):
    """A value dim bound inside a control-flow block is above the capacity the run's
    memory was planned with: the executable grows it and runs the call again."""

    def __init__(self, capacity: str, needed: int):
        super().__init__(f"{capacity}: {needed} needed")
        self.capacity, self.needed = capacity, needed


@dataclass(slots=True)
class Layout:
    """The memory of one shape signature: the plan, the `offsets` array (with `nbytes`,
    the byte size of each arena buffer in the same order), every buffer's elements;
    `native`: a backend's handle on `offsets` (made once per layout)."""

    memory: MemoryPlan
    offsets: np.ndarray
    nbytes: np.ndarray
    sizes: dict[str, int]
    native: object = None


class PlanShapes:
    """Symbol values, memory layouts and output arrays of one symbolic plan."""

    def __init__(self, plan, max_layouts: int = MAX_LAYOUTS, *, bind_values=None):
        """`bind_values(graph, feeds, symbols)`: the value dims' values (the plan's
        `value_symbols`) for a call, `mdsl.targets.python.interpreter.bind_value_dims`."""
        self.plan = plan
        self._bind_values = bind_values
        self.max_layouts = max_layouts
        self.slots = len(plan.symbols) + 1
        self._slot = {s: i for i, s in enumerate(plan.symbols)}
        self._sources = _bare_symbol_sources(plan)
        self._layouts: OrderedDict[tuple, Layout] = OrderedDict()
        self._lock = threading.Lock()
        self._capacities = dict(plan.capacities)
        self._capacity_of = {c.removesuffix("_capacity"): c for c in plan.capacities}
        self.latest: MemoryPlan | None = None
        self._key_symbols = (*plan.input_symbols, *plan.value_symbols)
        self._latest_layout: tuple[tuple, Layout] | None = None  # (key, layout) of the last call
        inputs = set(plan.input_symbols) | set(plan.value_symbols)
        self._outputs = []
        for name in plan.outputs:
            t = plan.graph.outputs[name]
            symbols = {s for d in t.shape if isinstance(d, Dim) for s in d.free_symbols}
            self._outputs.append((t, not symbols <= inputs))
        self._any_dynamic = any(dynamic for _, dynamic in self._outputs)
        # per output: its dims as ints, symbol names (a bare symbol) or Dims to evaluate
        self._output_dims = [tuple(_dim_recipe(d) for d in t.shape) for t, _ in self._outputs]

    # -- symbols ------------------------------------------------------------------------------
    def symbols(self, env: Mapping[str, np.ndarray]) -> dict[str, int]:
        """The feeds' symbols (user names -> sizes); the feeds were checked already."""
        values = {}
        for name, axis, symbol in self._sources:
            values.setdefault(symbol, int(env[name].shape[axis]))
        if len(values) < len(self.plan.input_symbols):  # some only inside expressions
            values = bind_feeds(self.plan.graph, env)[1]
        if len(self.plan.value_symbols) > len(self._capacities):
            values.update(self._bind_values(self.plan.graph, env, values))
        if self._capacities:
            with self._lock:
                values.update(self._capacities)
        return values

    def new_dims(self, values: Mapping[str, int], dims: np.ndarray | None = None) -> np.ndarray:
        """The `dims` array for `values` (written into `dims` when given)."""
        if dims is None:
            dims = np.zeros(self.slots, np.int64)
        for symbol, slot in self._slot.items():
            dims[slot] = values.get(symbol, 0)
        dims[-1] = 0  # the value a failed check reports
        return dims

    def environment(self, dims: np.ndarray) -> dict[str, int]:
        """User symbol -> value, as the generated code holds them now."""
        return {s: int(dims[i]) for i, s in enumerate(self.plan.symbols)}

    def store_symbols(self, dims: np.ndarray, values: Mapping[str, int], names) -> None:
        """Write symbols `names` (a data-dependent node's, just bound) into `dims`, where
        the generated code reloads them after the callback. CapacityExceeded when one is
        above the capacity this run's memory was planned with."""
        for name in names:
            capacity = self._capacity_of.get(name)
            if capacity is not None and values[name] > values[capacity]:
                raise CapacityExceeded(capacity, values[name])
            dims[self._slot[name]] = values[name]

    def rebinding(self, values: Mapping[str, int], names) -> dict[str, int]:
        """`values` without those of symbols `names` that a block binds afresh each time
        it runs (value dims inside control flow: their slot holds an earlier run's)."""
        return {s: v for s, v in values.items() if s not in names or s not in self._capacity_of}

    def grow(self, exceeded: CapacityExceeded) -> None:
        """Raise a capacity to what a run needed (at least doubling it)."""
        with self._lock:
            old = self._capacities[exceeded.capacity]
            self._capacities[exceeded.capacity] = min(max(exceeded.needed, 2 * old), MAX_DIM)

    def growing(self, run):
        """`run()`, run again each time it stopped on a capacity it grew (see `grow`)."""
        for _ in range(MAX_GROWTHS):
            try:
                return run()
            except CapacityExceeded as exceeded:
                self.grow(exceeded)
        raise ExecutionError(
            f"graph {self.plan.graph.name!r}: sizes bound inside control flow outgrew "
            f"their planned capacity {MAX_GROWTHS} times in one call"
        )

    # -- memory ---------------------------------------------------------------------------------
    def layout(self, values: Mapping[str, int]) -> Layout:
        key = tuple([values.get(s, 0) for s in self._key_symbols])
        latest = self._latest_layout
        if latest is not None and latest[0] == key:  # the signature of the last call
            self.latest = latest[1].memory
            return latest[1]
        with self._lock:
            found = self._layouts.get(key)
            if found is not None:
                self._layouts.move_to_end(key)
                self.latest = found.memory
                self._latest_layout = (key, found)
                return found
        sizes = self.plan.sizes(values)
        _check_sizes(self.plan, sizes, values)
        memory = self.plan.layout(values, sizes)
        arena = self.plan.arena_buffers
        offsets = np.array([memory.offsets.get(b, 0) for b in arena] or [0], np.int64)
        nbytes = [sizes[b] * self.plan.buffers[b].dtype.itemsize for b in arena]
        layout = Layout(memory, offsets, np.array(nbytes or [0], np.int64), sizes)
        with self._lock:
            self._layouts[key] = layout
            while len(self._layouts) > self.max_layouts:
                self._layouts.popitem(last=False)
            self.latest = memory
            self._latest_layout = (key, layout)
        return layout

    # -- outputs --------------------------------------------------------------------------------
    def new_outputs(
        self, layout: Layout, values: Mapping[str, int], allocate=None
    ) -> list[np.ndarray]:
        """Arrays for the outputs: of their shape, or (a dim control flow decides) flat and
        large enough for any size the dim can take. `allocate(i, shape, dtype)` makes
        output i's array (default: `np.empty`; a backend's `OutputPool.array`)."""
        allocate = allocate or (lambda _, shape, dtype: np.empty(shape, dtype))
        arrays = []
        for i, (t, dynamic) in enumerate(self._outputs):
            if dynamic:  # the planner names output buffer i "out<i>"
                shape = (layout.sizes[f"out{i}"],)
            else:
                shape = tuple([_dim_value(d, values) for d in self._output_dims[i]])
            arrays.append(allocate(i, shape, t.dtype.np))
        return arrays

    def finish(self, arrays: list[np.ndarray], dims: np.ndarray) -> list[np.ndarray]:
        """The outputs at their actual shapes (the dynamic dims the run bound)."""
        if not self._any_dynamic:
            return arrays
        env = None
        out = []
        for array, (t, dynamic) in zip(arrays, self._outputs):
            if dynamic:
                env = env or self.environment(dims)
                shape = tuple(d.evaluate(env) if isinstance(d, Dim) else d for d in t.shape)
                array = array[: int(np.prod(shape, dtype=np.int64))].reshape(shape)
            out.append(array)
        return out

    # -- failures -------------------------------------------------------------------------------
    def failure(
        self, status: int, dims: np.ndarray | None
    ) -> ExecutionError | CapacityExceeded | None:
        """The error of a failed check (status past the kernels), else None; a capacity
        exceeded is CapacityExceeded (raised, `growing` runs the call again)."""
        plan = self.plan
        index = status - len(plan.all_kernels()) - 1
        if not 0 <= index < len(plan.failures):
            return None
        failure = plan.failures[index]
        value = "?" if dims is None else int(dims[len(plan.symbols)])
        if failure.capacity is not None and dims is not None:
            return CapacityExceeded(failure.capacity, int(value))
        node = failure.node
        return ExecutionError(
            failure.message.format(value=value),
            node=node.name,
            op_type=node.op_type,
            source=node.source,
        )


def _check_sizes(plan, sizes: Mapping[str, int], values: Mapping[str, int]) -> None:
    """ExecutionError when the dims fed make a buffer too large for int64 sizes."""
    total = 0
    for name, count in sizes.items():
        buffer = plan.buffers.get(name)
        nbytes = count * (buffer.dtype.itemsize if buffer is not None else 8)
        total += nbytes
        if nbytes > MAX_TENSOR_BYTES or total > MAX_TENSOR_BYTES:
            raise ExecutionError(
                f"graph {plan.graph.name!r}: dims {dict(values)} make buffer {name} "
                f"{nbytes} bytes (the buffers {total}); the limit is {MAX_TENSOR_BYTES}"
            )


def _dim_recipe(d):
    """A dim as `_dim_value` reads it fastest: an int, a bare symbol's name, or a Dim."""
    if not isinstance(d, Dim):
        return int(d)
    return d.name if d.name is not None else d


def _dim_value(recipe, values: Mapping[str, int]) -> int:
    if type(recipe) is int:
        return recipe
    if type(recipe) is str:
        return values[recipe]
    return int(recipe.evaluate(values))


def _bare_symbol_sources(plan) -> list[tuple[str, int, str]]:
    """(input name, axis, symbol) for every input dim that is a bare symbol."""
    out = []
    for name in plan.inputs:
        for axis, d in enumerate(plan.graph.inputs[name].shape):
            if isinstance(d, Dim) and d.name is not None:
                out.append((name, axis, d.name))
    return out


def storage_shape(t, env: Mapping[str, int] | None) -> tuple[int, ...]:
    """`t`'s storage shape, symbolic dims evaluated with `env`."""
    shape = t.type.storage_shape
    if env is None:
        return tuple(int(d) for d in shape)
    return tuple(d.evaluate(env) if isinstance(d, Dim) else int(d) for d in shape)
