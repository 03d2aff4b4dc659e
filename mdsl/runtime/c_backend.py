"""The C backend: specialize -> plan -> render C -> build -> load with cffi -> run.

The generated `mdsl_run` executes the whole schedule; nodes without generated code call
back into their Python binding through one cffi callback, so every graph runs compiled.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from pathlib import Path

import cffi
import numpy as np

from mdsl.codegen.c_target import render_c
from mdsl.codegen.custom_c import link_args
from mdsl.codegen.plan import Plan, build_plan
from mdsl.codegen.specialize import specialize
from mdsl.codegen.toolchain import Toolchain, build_library, default_toolchain
from mdsl.ir.errors import ExecutionError, MdslError
from mdsl.ir.graph import Graph
from mdsl.runtime.executable import KernelInfo
from mdsl.runtime.kernels import node_kernel

_FFI = cffi.FFI()
_FFI.cdef(
    """
    typedef int (*mdsl_callback_t)(int index, void **buffers);
    int mdsl_run(void *const *inputs, void *const *outputs, const void *const *consts,
                 char *arena, mdsl_callback_t callback);
    int mdsl_run_profile(void *const *inputs, void *const *outputs, const void *const *consts,
                         char *arena, mdsl_callback_t callback, double *timings);
    void mdsl_set_threads(int n);
    """
)
_LIBRARIES: dict[str, object] = {}
_LIB_LOCK = threading.Lock()
ALIGN = 64


def _load_library(path: Path):
    with _LIB_LOCK:
        lib = _LIBRARIES.get(str(path))
        if lib is None:
            lib = _LIBRARIES[str(path)] = _FFI.dlopen(str(path))
        return lib


class CBackend:
    name = "c"

    def __init__(self, march_native: bool = True):
        self.toolchain = default_toolchain(march_native)

    def build(self, graph: Graph, symbols: dict[str, int], threads: int | None):
        static = specialize(graph, symbols) if symbols else graph
        plan = build_plan(static, c_bindings=True)
        source = render_c(plan)
        toolchain = self.toolchain
        if link_args(plan):  # custom ops bound to prebuilt libraries
            toolchain = replace(toolchain, link_args=toolchain.link_args + link_args(plan))
        library = build_library(source, toolchain, graph.name)
        sources = {f"{_file_stem(graph.name)}.c": source}
        return CVariant(plan, sources, library, threads, toolchain=toolchain)


def _file_stem(name: str) -> str:
    stem = "".join(c if (c.isascii() and c.isalnum()) or c in "_-" else "_" for c in name)
    return stem[:40] or "graph"


@dataclass
class CVariant:
    plan: Plan
    sources: dict[str, str]
    library_path: Path
    threads: int | None
    _local: threading.local = field(default_factory=threading.local)
    toolchain: Toolchain | None = None  # None (a loaded executable): the default one

    def __post_init__(self):
        self.lib = _load_library(self.library_path)
        if self.threads:
            self.lib.mdsl_set_threads(int(self.threads))
        self._consts = [np.ascontiguousarray(c) for c in self.plan.constants]
        self._const_ptrs = _FFI.new("void *[]", [_ptr(c) for c in self._consts] or [_FFI.NULL])
        self._callback = _FFI.callback("int(int, void **)", self._on_callback)
        outputs = [self.plan.graph.outputs[name] for name in self.plan.outputs]
        self._output_specs = [(tuple(int(d) for d in t.shape), t.dtype.np) for t in outputs]
        self._arena_size = self.plan.memory.arena_bytes + ALIGN
        self._mdsl_run = self.lib.mdsl_run

    def kernel_infos(self) -> list[KernelInfo]:
        from mdsl.codegen.c_target import _KIND

        return [
            KernelInfo(k.name, _KIND[type(k)], tuple(n.name for n in k.nodes))
            for k in self.plan.kernels
        ]

    # -- one run ---------------------------------------------------------------------------------
    def run(self, env: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self._call(self._mdsl_run, env)

    def run_profiled(self, env: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """`run` through this variant's profiling build (`render_c(plan, profile=True)`,
        built on first use into the library cache); also returns each kernel's (start
        after the call began, duration) in seconds, one row per kernel."""
        timings = np.zeros((max(1, len(self.plan.kernels)), 2))
        outputs = self._call(self._profile_entry(), env, _FFI.from_buffer("double[]", timings))
        return outputs, timings[: len(self.plan.kernels)]

    def _profile_entry(self):
        entry = getattr(self, "_mdsl_run_profile", None)
        if entry is not None:
            return entry
        toolchain = self.toolchain
        if toolchain is None:
            toolchain = default_toolchain()
            if link_args(self.plan):
                toolchain = replace(toolchain, link_args=toolchain.link_args + link_args(self.plan))
        source = render_c(self.plan, profile=True)
        lib = _load_library(build_library(source, toolchain, f"{self.plan.graph.name}_profile"))
        if self.threads:
            lib.mdsl_set_threads(int(self.threads))
        self._mdsl_run_profile = lib.mdsl_run_profile
        return self._mdsl_run_profile

    def _call(self, entry, env: dict[str, np.ndarray], *extra) -> dict[str, np.ndarray]:
        state = getattr(self._local, "state", None)
        if state is None:
            state = self._new_thread_state()
        in_ptrs, out_ptrs, arena = state
        for i, name in enumerate(self.plan.inputs):
            a = env[name]
            if not a.flags.c_contiguous:
                a = np.ascontiguousarray(a)
                env = {**env, name: a}  # keep the copy alive for the call
            in_ptrs[i] = _ptr(a)
        outputs = [np.empty(shape, dtype) for shape, dtype in self._output_specs]
        for i, a in enumerate(outputs):
            out_ptrs[i] = _ptr(a)
        self._local.error = None
        status = entry(in_ptrs, out_ptrs, self._const_ptrs, arena, self._callback, *extra)
        if status != 0 or self._local.error is not None:
            self._raise(status)
        return dict(zip(self.plan.outputs, outputs))

    def _new_thread_state(self):
        """Pointer tables and an arena owned by the calling thread (calls run concurrently);
        thread-local, so they are freed with their thread."""
        in_ptrs = _FFI.new("void *[]", max(1, len(self.plan.inputs)))
        out_ptrs = _FFI.new("void *[]", max(1, len(self._output_specs)))
        raw = np.empty(self._arena_size, np.uint8)
        arena = _FFI.cast("char *", raw.ctypes.data + (-raw.ctypes.data) % ALIGN)
        state = self._local.state = (in_ptrs, out_ptrs, arena)
        self._local.arena_owner = raw
        return state

    def _raise(self, status: int):
        if self._local.error is not None:
            raise self._local.error
        raise _run_failure(self.plan, status)

    # -- Python callbacks -----------------------------------------------------------------------
    def _on_callback(self, index: int, buffers) -> int:
        node = self.plan.callbacks[index]
        try:
            args = []
            for i, t in enumerate(node.inputs):
                args.append(None if t is None else _view(buffers[i], t).copy())
            base = len(node.inputs)
            _, kernel = node_kernel(node)
            specs = [(_storage_shape(t), t.dtype.np) for t in node.outputs]
            results = kernel(args, specs)
            for j, (t, value) in enumerate(zip(node.outputs, results)):
                np.copyto(
                    _view(buffers[base + j], t),
                    np.asarray(value, dtype=t.dtype.np).reshape(_storage_shape(t)),
                )
            return 0
        except MdslError as e:
            self._local.error = e.with_context(
                node=node.name, op_type=node.op_type, source=node.source
            )
        except Exception as e:
            err = ExecutionError(
                f"implementation raised {type(e).__name__}: {e}",
                node=node.name,
                op_type=node.op_type,
                source=node.source,
            )
            err.__cause__ = e
            self._local.error = err
        return 1


def _run_failure(plan: Plan, status: int) -> ExecutionError:
    """The error for a failed run; a kernel that fails returns its step + 1."""
    graph = plan.graph.name
    if not 1 <= status <= len(plan.kernels):
        return ExecutionError(f"graph {graph!r}: the compiled run failed (status {status})")
    kernel = plan.kernels[status - 1]
    node = kernel.nodes[0] if kernel.nodes else None
    return ExecutionError(
        f"graph {graph!r}: kernel {kernel.name} failed (its C function returned nonzero)",
        node=node and node.name,
        op_type=node and node.op_type,
        source=node and node.source,
    )


def _ptr(array: np.ndarray):
    try:
        return _FFI.from_buffer(array)
    except TypeError:  # dtypes without the buffer protocol (bfloat16)
        return _FFI.cast("void *", array.ctypes.data)


def _storage_shape(t) -> tuple[int, ...]:
    """The shape `t`'s buffer holds: its storage shape (the layout pass, TransData)."""
    return tuple(int(d) for d in t.type.storage_shape)


def _view(pointer, t) -> np.ndarray:
    shape = _storage_shape(t)
    count = int(np.prod(shape, dtype=np.int64))
    nbytes = count * t.dtype.itemsize
    raw = (
        np.frombuffer(_FFI.buffer(pointer, nbytes), dtype=t.dtype.np, count=count)
        if nbytes
        else np.empty(0, t.dtype.np)
    )
    return raw.reshape(shape)
