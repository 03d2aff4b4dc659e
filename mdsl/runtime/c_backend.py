"""The C backend: specialize -> plan -> render C -> build -> load with cffi -> run.

The generated `mdsl_run` executes the whole schedule; nodes without generated code call
back into their Python binding through one cffi callback, so every graph runs compiled.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

import cffi
import numpy as np

from mdsl.codegen.c_target import render_c
from mdsl.codegen.plan import Plan, build_plan
from mdsl.codegen.specialize import specialize
from mdsl.codegen.toolchain import build_library, default_toolchain
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
        plan = build_plan(static)
        source = render_c(plan)
        library = build_library(source, self.toolchain, graph.name)
        return CVariant(plan, {f"{_file_stem(graph.name)}.c": source}, library, threads)


def _file_stem(name: str) -> str:
    return "".join(c if c.isalnum() or c in "_-" else "_" for c in name)[:40] or "graph"


@dataclass
class CVariant:
    plan: Plan
    sources: dict[str, str]
    library_path: Path
    threads: int | None
    _local: threading.local = field(default_factory=threading.local)

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
        self._thread_state: dict[int, tuple] = {}
        self._arena_owners: list[np.ndarray] = []
        self._mdsl_run = self.lib.mdsl_run

    def kernel_infos(self) -> list[KernelInfo]:
        from mdsl.codegen.c_target import _KIND

        return [
            KernelInfo(k.name, _KIND[type(k)], tuple(n.name for n in k.nodes))
            for k in self.plan.kernels
        ]

    # -- one run ---------------------------------------------------------------------------------
    def run(self, env: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        state = self._thread_state.get(threading.get_ident())
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
        status = self._mdsl_run(in_ptrs, out_ptrs, self._const_ptrs, arena, self._callback)
        if status != 0 or self._local.error is not None:
            self._raise(status)
        return dict(zip(self.plan.outputs, outputs))

    def _new_thread_state(self):
        """Pointer tables and an arena owned by the calling thread (calls run concurrently)."""
        in_ptrs = _FFI.new("void *[]", max(1, len(self.plan.inputs)))
        out_ptrs = _FFI.new("void *[]", max(1, len(self._output_specs)))
        raw = np.empty(self._arena_size, np.uint8)
        arena = _FFI.cast("char *", raw.ctypes.data + (-raw.ctypes.data) % ALIGN)
        state = (in_ptrs, out_ptrs, arena)
        with _LIB_LOCK:
            self._arena_owners.append(raw)
            self._thread_state[threading.get_ident()] = state
        return state

    def _raise(self, status: int):
        if self._local.error is not None:
            raise self._local.error
        raise ExecutionError(
            f"graph {self.plan.graph.name!r}: the compiled run failed (status {status})"
        )

    # -- Python callbacks -----------------------------------------------------------------------
    def _on_callback(self, index: int, buffers) -> int:
        node = self.plan.callbacks[index]
        try:
            args = []
            for i, t in enumerate(node.inputs):
                args.append(None if t is None else _view(buffers[i], t).copy())
            base = len(node.inputs)
            _, kernel = node_kernel(node)
            specs = [(tuple(t.shape), t.dtype.np) for t in node.outputs]
            results = kernel(args, specs)
            for j, (t, value) in enumerate(zip(node.outputs, results)):
                np.copyto(
                    _view(buffers[base + j], t),
                    np.asarray(value, dtype=t.dtype.np).reshape(t.shape),
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


def _ptr(array: np.ndarray):
    try:
        return _FFI.from_buffer(array)
    except TypeError:  # dtypes without the buffer protocol (bfloat16)
        return _FFI.cast("void *", array.ctypes.data)


def _view(pointer, t) -> np.ndarray:
    shape = tuple(int(d) for d in t.shape)
    count = int(np.prod(shape, dtype=np.int64))
    nbytes = count * t.dtype.itemsize
    raw = (
        np.frombuffer(_FFI.buffer(pointer, nbytes), dtype=t.dtype.np, count=count)
        if nbytes
        else np.empty(0, t.dtype.np)
    )
    return raw.reshape(shape)
