"""The C backend: specialize -> plan -> render C -> build -> load with cffi -> run.

The generated `mdsl_run` executes the whole schedule; nodes without generated code call
back into their Python binding through one cffi callback, so every graph runs compiled.
"""

from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from mdsl.codegen import onednn
from mdsl.codegen.half_gemm import half_matmuls_in_float32
from mdsl.codegen.plan import Plan, build_plan
from mdsl.codegen.specialize import specialize
from mdsl.codegen.toolchain import Toolchain, build_library, default_toolchain
from mdsl.ir.errors import CompileError, ExecutionError, MdslError
from mdsl.ir.graph import Graph
from mdsl.ir.naming import file_stem
from mdsl.log import get_logger, timed
from mdsl.ops.dynamic import dynamic_symbols
from mdsl.targets.c._abi_ffi import ffi as _FFI  # the entry points (mdsl.targets.c.abi)
from mdsl.targets.c.conv import onednn_link_args, uses_onednn
from mdsl.targets.c.custom import libraries, link_args
from mdsl.targets.output_pool import OutputPool, cache_line_empty, pooled
from mdsl.targets.python.control_flow import run_data_dependent
from mdsl.targets.python.interpreter import bind_value_dims
from mdsl.targets.python.kernels import node_kernel
from mdsl.targets.registry import KernelInfo
from mdsl.targets.signatures import CapacityExceeded, PlanShapes, storage_shape

_LIBRARIES: dict[str, object] = {}
_LIB_LOCK = threading.Lock()
_LIB_THREADS: dict[int, int] = {}  # id of a loaded library -> the thread count it was set to
ALIGN = 64


def _load_library(path: Path):
    with _LIB_LOCK:
        lib = _LIBRARIES.get(str(path))
        if lib is None:
            try:
                with _blas_without_threads(first=not _LIBRARIES):
                    lib = _FFI.dlopen(str(path))
            except OSError as e:
                raise CompileError(f"cannot load the library {path}: {e}") from None
            _LIBRARIES[str(path)] = lib
        return lib


@contextlib.contextmanager
def _blas_without_threads(first: bool):
    """The first library loaded brings OpenBLAS (scipy-openblas32), which starts a thread
    per processor as it loads, each spinning about 0.1 s of CPU waiting for work that
    never comes: the generated code runs its own threads and sets BLAS to one
    (`mdsl_init_once`). So that first load sees OPENBLAS_NUM_THREADS=1, which OpenBLAS
    reads only then; the variable is restored right after."""
    if not first:
        yield
        return
    previous = os.environ.get(_BLAS_THREADS)
    os.environ[_BLAS_THREADS] = "1"
    try:
        yield
    finally:
        if previous is None:
            del os.environ[_BLAS_THREADS]
        else:
            os.environ[_BLAS_THREADS] = previous


_BLAS_THREADS = "OPENBLAS_NUM_THREADS"


_log = get_logger(__name__)


def render_units(plan: Plan, profile: bool = False) -> dict[str, str]:
    """`mdsl.targets.c.render.render_units` for the plan's graph, imported on first use: a
    variant loaded from the compile cache renders nothing, and the renderer's imports
    (Jinja) cost 0.1 s."""
    from mdsl.targets.c.render import render_units as render

    return render(plan, file_stem(plan.graph.name), profile=profile)


def build_variant(
    graph: Graph, symbols: dict[str, int], threads: int | None, toolchain: Toolchain
) -> CVariant:
    """The variant for `symbols` (every symbol of the graph, or some of them: the
    others stay symbolic; {} for a symbolic graph: the symbolic build). NotSymbolic
    when a kernel cannot be generated with the symbols left."""
    with timed(_log, "plan %r %s", graph.name, symbols or "(static)"):
        plan = plan_variant(graph, symbols)
    with timed(_log, "render C %r (%d kernels)", graph.name, len(plan.all_kernels())):
        sources = render_units(plan)
    if link_args(plan):  # custom ops bound to prebuilt libraries
        toolchain = replace(toolchain, link_args=toolchain.link_args + link_args(plan))
    if onednn_link_args(plan):  # convolutions computed by oneDNN
        toolchain = replace(toolchain, link_args=toolchain.link_args + onednn_link_args(plan))
    library = build_library(sources, toolchain, graph.name)
    return CVariant(plan, sources, library, threads, toolchain=toolchain)


def plan_variant(graph: Graph, symbols: dict[str, int]) -> Plan:
    """The plan of the C variant of `graph` for `symbols` (see `build_variant`)."""
    static = specialize(graph, symbols) if symbols else graph
    static = half_matmuls_in_float32(static)
    return build_plan(static, c_bindings=True, control_flow=True, symbolic=True, indexed=True)


@dataclass
class CVariant:
    plan: Plan
    sources: dict[str, str]
    library_path: Path
    threads: int | None
    _local: threading.local = field(default_factory=threading.local)
    toolchain: Toolchain | None = None  # None (a loaded executable): the default one
    onednn: bool | None = None  # whether the library links oneDNN (None: read the plan)

    def __post_init__(self):
        if self.onednn is None:
            self.onednn = uses_onednn(self.plan)
        if self.onednn:  # found by soname, wherever the library was built
            onednn.preload()
        self.lib = _load_library(self.library_path)
        self._lib_id, self._threads_wanted = id(self.lib), int(self.threads or 0)
        self._use_threads(self.lib)
        self._consts = [_constant(c) for c in self.plan.constants]
        self._const_ptrs = _FFI.new("void *[]", [_ptr(c) for c in self._consts] or [_FFI.NULL])
        self._callback = _FFI.callback("int(int, void **)", self._on_callback)
        self._shapes = (
            PlanShapes(self.plan, bind_values=bind_value_dims) if self.plan.uses_dims else None
        )
        self._input_names = tuple(self.plan.inputs)
        self._output_names = tuple(self.plan.outputs)
        if self._shapes is None:
            outputs = self.plan.graph.outputs
            self._output_specs = [_static_output(n, outputs[n]) for n in self.plan.outputs]
            self._arena_size = self.plan.memory.arena_bytes + ALIGN
            self._mdsl_run = self.lib.mdsl_run
        else:
            self._arena_size = ALIGN
            self._mdsl_run = self.lib.mdsl_run_dims

    @property
    def memory(self):
        """The memory plan (a symbolic plan's: that of the latest shape signature run)."""
        if self._shapes is None:
            return self.plan.memory
        return self._shapes.latest

    def linked_libraries(self) -> list[str]:
        """The libraries the library links beyond libc and BLAS: prebuilt custom op
        libraries and oneDNN (a saved executable checks them where it is loaded)."""
        onednn_path = onednn.library_path() if self.onednn else None
        return libraries(self.plan) + ([str(onednn_path)] if onednn_path else [])

    def system_libraries(self) -> list[str]:
        """The sonames of `linked_libraries` that a loading machine finds in its own
        environment (`CTarget.system_library`), not at the saving machine's path."""
        return [onednn.SONAME] if self.onednn else []

    def kernel_infos(self) -> list[KernelInfo]:
        return [
            KernelInfo(k.name, k.KIND, tuple(n.name for n in k.nodes))
            for k in self.plan.all_kernels()
        ]

    # -- one run ---------------------------------------------------------------------------------
    def run(self, env: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self._call(self._mdsl_run, env)

    def run_profiled(self, env: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """`run` through this variant's profiling build (`render_units(plan, profile=True)`,
        built on first use into the library cache); also returns each kernel's (start
        after the call began, duration) in seconds, one row per kernel."""
        count = len(self.plan.all_kernels())
        timings = np.zeros((max(1, count), 2))
        outputs = self._call(self._profile_entry(), env, _FFI.from_buffer("double[]", timings))
        return outputs, timings[:count]

    def _profile_entry(self):
        entry = getattr(self, "_mdsl_run_profile", None)
        if entry is not None:
            return entry
        toolchain = self.toolchain
        if toolchain is None:
            toolchain = default_toolchain()
            if link_args(self.plan):
                toolchain = replace(toolchain, link_args=toolchain.link_args + link_args(self.plan))
            if onednn_link_args(self.plan):
                toolchain = replace(
                    toolchain, link_args=toolchain.link_args + onednn_link_args(self.plan)
                )
        sources = render_units(self.plan, profile=True)
        lib = _load_library(build_library(sources, toolchain, f"{self.plan.graph.name}_profile"))
        self._use_threads(lib)
        self._mdsl_run_profile = (
            lib.mdsl_run_profile if self._shapes is None else lib.mdsl_run_dims_profile
        )
        return self._mdsl_run_profile

    def _use_threads(self, lib) -> None:
        """Make `lib` run on at most `threads` threads (None: every processor). The
        setting belongs to the library, which variants of equal source share: it is set
        again when a variant of another thread count ran last."""
        wanted = int(self.threads or 0)
        if _LIB_THREADS.get(id(lib)) != wanted:  # checked inline in `_call` for speed
            lib.mdsl_set_threads(wanted)
            _LIB_THREADS[id(lib)] = wanted

    def _call(self, entry, env: dict[str, np.ndarray], *extra) -> dict[str, np.ndarray]:
        """One run of a static plan; this is the whole per-call path of a small graph, so
        everything that does not depend on the call is worked out in `__post_init__`."""
        if _LIB_THREADS.get(self._lib_id) != self._threads_wanted:
            self._use_threads(self.lib)
        if self._shapes is not None:
            return self._shapes.growing(lambda: self._call_with_dims(entry, env, *extra))
        local = self._local
        state = getattr(local, "state", None) or self._new_thread_state()
        in_ptrs, out_ptrs, arena = state
        _copies = self._point_inputs(in_ptrs, env)  # alive until the call returns
        outputs = {}
        for i, (name, shape, dtype, from_pool) in enumerate(self._output_specs):
            a = self._output_pool().array(i, shape, dtype) if from_pool else np.empty(shape, dtype)
            out_ptrs[i] = _ptr(a)
            outputs[name] = a
        local.error = None
        status = entry(in_ptrs, out_ptrs, self._const_ptrs, arena, self._callback, *extra)
        if status != 0 or local.error is not None:
            self._raise(status)
        return outputs

    def _point_inputs(self, in_ptrs, env: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Points the entry's input slots at the feeds; a strided feed is copied first, and
        the copies are returned: they must stay alive until the call returns."""
        copies = []
        for i, name in enumerate(self._input_names):
            a = env[name]
            try:  # a C-contiguous array, the usual feed: one call, no flags object
                in_ptrs[i] = _FFI.from_buffer(a)
            except (ValueError, TypeError, BufferError):  # strided, or no buffer protocol
                if not a.flags.c_contiguous:
                    a = np.ascontiguousarray(a)
                    copies.append(a)
                in_ptrs[i] = _ptr(a)
        return copies

    def _call_with_dims(self, entry, env: dict[str, np.ndarray], *extra):
        """A run of a `mdsl_run_dims` unit: the signature's layout, the symbols' values."""
        shapes = self._shapes
        values = shapes.symbols(env)
        layout = shapes.layout(values)
        state = getattr(self._local, "state", None)
        if state is None or self._local.arena_owner.size < layout.memory.arena_bytes + ALIGN:
            state = self._new_thread_state(layout.memory.arena_bytes + ALIGN)
            self._local.dims_state = None
        in_ptrs, out_ptrs, arena = state
        dims_state = getattr(self._local, "dims_state", None)
        if dims_state is None:  # this thread's dims array, and a pointer to it
            array = np.zeros(shapes.slots, np.int64)
            dims_state = self._local.dims_state = (array, _FFI.from_buffer("int64_t[]", array))
        if layout.native is None:
            layout.native = _FFI.from_buffer("int64_t[]", layout.offsets)
        _copies = self._point_inputs(in_ptrs, env)  # alive until the call returns
        outputs = shapes.new_outputs(layout, values, self._output_pool().array)
        for i, a in enumerate(outputs):
            out_ptrs[i] = _ptr(a)
        dims = self._local.dims = shapes.new_dims(values, dims_state[0])
        self._local.error = None
        status = entry(
            in_ptrs,
            out_ptrs,
            self._const_ptrs,
            arena,
            self._callback,
            dims_state[1],
            layout.native,
            *extra,
        )
        self._local.dims = None
        if status != 0 or self._local.error is not None:
            self._raise(status, dims)
        return dict(zip(self._output_names, shapes.finish(outputs, dims)))

    def _output_pool(self) -> OutputPool:
        """The calling thread's pool of output memory (large outputs reuse the memory of
        results the caller has dropped, instead of faulting in fresh pages)."""
        pool = getattr(self._local, "pool", None)
        if pool is None:
            pool = self._local.pool = OutputPool()
        return pool

    def _new_thread_state(self, arena_size: int | None = None):
        """Pointer tables and an arena owned by the calling thread (calls run concurrently);
        thread-local, so they are freed with their thread."""
        in_ptrs = _FFI.new("void *[]", max(1, len(self.plan.inputs)))
        out_ptrs = _FFI.new("void *[]", max(1, len(self._output_names)))
        raw = np.empty(arena_size or self._arena_size, np.uint8)
        arena = _FFI.cast("char *", raw.ctypes.data + (-raw.ctypes.data) % ALIGN)
        state = self._local.state = (in_ptrs, out_ptrs, arena)
        self._local.arena_owner = raw
        return state

    def _raise(self, status: int, dims: np.ndarray | None = None):
        if self._local.error is not None:
            raise self._local.error
        failed_check = self._shapes and self._shapes.failure(status, dims)
        raise failed_check or _run_failure(self.plan, status)

    # -- Python callbacks -----------------------------------------------------------------------
    def _on_callback(self, index: int, buffers) -> int:
        node = self.plan.callbacks[index]
        try:
            dims = getattr(self._local, "dims", None)
            env = None if dims is None else self._shapes.environment(dims)
            args = []
            for i, t in enumerate(node.inputs):
                args.append(None if t is None else _view(buffers[i], t, env).copy())
            base = len(node.inputs)
            _, kernel = node_kernel(node, symbols=env)
            if dynamic_symbols(node):  # its results decide their sizes: bound into dims
                env = self._shapes.rebinding(env, dynamic_symbols(node))
                results = run_data_dependent(node, kernel, args, env)
                self._shapes.store_symbols(dims, env, dynamic_symbols(node))
            else:
                specs = [(storage_shape(t, env), t.dtype.np) for t in node.outputs]
                results = kernel(args, specs)
            for j, (t, value) in enumerate(zip(node.outputs, results)):
                np.copyto(
                    _view(buffers[base + j], t, env),
                    np.asarray(value, dtype=t.dtype.np).reshape(storage_shape(t, env)),
                )
            return 0
        except CapacityExceeded as e:  # the run stops; `_call` grows it and runs again
            self._local.error = e
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
        except BaseException as e:  # KeyboardInterrupt, SystemExit: re-raised once C returns
            self._local.error = e
        return 1


def _run_failure(plan: Plan, status: int) -> ExecutionError:
    """The error for a failed run; a kernel that fails returns its step + 1."""
    graph = plan.graph.name
    kernels = plan.all_kernels()
    if not 1 <= status <= len(kernels):
        return ExecutionError(f"graph {graph!r}: the compiled run failed (status {status})")
    kernel = kernels[status - 1]
    node = kernel.nodes[0] if kernel.nodes else None
    why = getattr(kernel, "error", None) or "its C function returned nonzero"
    return ExecutionError(
        f"graph {graph!r}: kernel {kernel.name} failed ({why})",
        node=node and node.name,
        op_type=node and node.op_type,
        source=node and node.source,
    )


def _static_output(name: str, t) -> tuple[str, tuple[int, ...], np.dtype, bool]:
    """A static output's name, shape, dtype and whether its memory comes from the pool."""
    shape = tuple(int(d) for d in t.shape)
    return name, shape, t.dtype.np, pooled(shape, t.dtype.np)


SMALL_CONSTANT_BYTES = 1 << 20


def _constant(c: np.ndarray) -> np.ndarray:
    """A constant as the kernels read it: contiguous, and a small one (a layer norm's
    gamma, a bias) at a cache line's start, where numpy's arrays often are not (a layer
    norm over [4096, 768] took 1-2.6% longer with gamma 48 bytes in). Large ones stay
    where they are: a copy would hold a model's weights twice."""
    c = np.ascontiguousarray(c)
    if c.nbytes >= SMALL_CONSTANT_BYTES or c.ctypes.data % ALIGN == 0 or c.dtype.hasobject:
        return c
    aligned = cache_line_empty(c.nbytes).view(c.dtype).reshape(c.shape)
    aligned[...] = c
    return aligned


def _ptr(array: np.ndarray):
    try:
        return _FFI.from_buffer(array)
    except TypeError:  # dtypes without the buffer protocol (bfloat16)
        return _FFI.cast("void *", array.ctypes.data)


def _view(pointer, t, env=None) -> np.ndarray:
    """The buffer of `t` at `pointer`, of its storage shape (the layout pass, TransData);
    `env` gives symbolic dims their values."""
    shape = storage_shape(t, env)
    count = int(np.prod(shape, dtype=np.int64))
    nbytes = count * t.dtype.itemsize
    raw = (
        np.frombuffer(_FFI.buffer(pointer, nbytes), dtype=t.dtype.np, count=count)
        if nbytes
        else np.empty(0, t.dtype.np)
    )
    return raw.reshape(shape)
