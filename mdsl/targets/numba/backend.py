"""The numba backend: specialize -> plan -> render Python -> load the module -> run.

It runs the same Plan as the C backend, for machines without a C compiler (and for
comparison): `mdsl.targets.numba.render` renders one Python module per shape variant
with one numba function per kernel and a plain-Python `run` driver.

Design choices:

- The driver is plain Python, not one big `@njit`: each kernel compiles lazily on its
  first call (a graph's first run pays numba's compile time kernel by kernel, a kernel
  that never runs costs nothing), Python callbacks are ordinary calls between kernels
  (no object mode), and GEMM goes through numpy's `matmul` (numba's `np.dot` needs SciPy,
  which mdsl does not depend on).
- The module text is written, named by its content hash, to `<cache dir>/numba/` (the
  C backend's cache dir) and executed from there, so `cache=True` kernels are stored by
  numba beside it and a later process loads them instead of compiling. The text that
  runs is always the one just rendered; the file only anchors numba's cache.
- Compile time: structurally equal kernels (repeated layers) share one function, pure
  copies are numpy strided copies (nothing to compile), and `threads=1` renders no
  `parallel=True` kernels (the slowest to compile).
- Half floats: numba has no float16/bfloat16 arithmetic, so the driver stages those
  buffers through float32 copies around each kernel (`numba_support.widen/narrow`).
- Threads: `threads=` sets numba's thread count for `prange` kernels of the calling
  thread. With numba's "workqueue" threading layer (not thread-safe) runs of parallel
  kernels are serialized; the "omp" and "tbb" layers run concurrently.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import sys
import tempfile
import threading
import time
import types
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numba
import numpy as np
from numba.core.errors import NumbaError

from mdsl.codegen.plan import Plan, build_plan
from mdsl.codegen.specialize import specialize
from mdsl.codegen.toolchain import trusted_cache_dir
from mdsl.ir.errors import CompileError, ExecutionError, MdslError
from mdsl.ir.graph import Graph
from mdsl.ir.naming import file_stem
from mdsl.ir.safe_files import untrusted_reason
from mdsl.ops.dynamic import dynamic_symbols
from mdsl.targets.numba import support as numba_support
from mdsl.targets.numba.render import render_numba, render_profile_driver
from mdsl.targets.python.control_flow import run_data_dependent
from mdsl.targets.python.interpreter import bind_value_dims
from mdsl.targets.python.kernels import node_kernel
from mdsl.targets.registry import KernelInfo
from mdsl.targets.signatures import CapacityExceeded, PlanShapes, storage_shape

ALIGN = 64
_MODULES: dict[str, types.ModuleType] = {}
_LOAD_LOCK = threading.Lock()
_WORKQUEUE_LOCK = threading.Lock()


def build_variant(graph: Graph, symbols: dict[str, int], threads: int | None) -> NumbaVariant:
    """The variant for `symbols` (all of the graph's symbols, some, or none: those
    left stay symbolic; see `mdsl.runtime.executable`)."""
    static = specialize(graph, symbols) if symbols else graph
    plan = build_plan(static, control_flow=True, symbolic=True)
    source = render_numba(plan, parallel=threads != 1)
    module, path = load_module(source)
    return NumbaVariant(plan, {f"{file_stem(graph.name)}.py": source}, module, path, threads)


# -- loading generated modules -------------------------------------------------------------------
def load_module(source: str) -> tuple[types.ModuleType, Path]:
    """The module executing `source` (one per distinct text in this process) and the file
    anchoring numba's cache of its kernels."""
    key = _module_key(source)
    with _LOAD_LOCK:
        module = _MODULES.get(key)
        if module is None:
            path = _publish(source, f"mdsl_{key}.py")
            module = _MODULES[key] = _execute(source, f"mdsl_numba_{key}", path)
        return module, Path(module.__file__)


def _module_key(source: str) -> str:
    """Hash of the text, numba's version and the support module's code: cached kernels
    inline support helpers, so a changed helper must not reuse them."""
    h = hashlib.sha256(source.encode())
    h.update(_support_fingerprint())
    return h.hexdigest()[:32]


@functools.lru_cache(maxsize=1)
def _support_fingerprint() -> bytes:
    support = Path(numba_support.__file__).read_bytes()
    return numba.__version__.encode() + b"\0" + hashlib.sha256(support).digest()


def _publish(source: str, filename: str) -> Path:
    """Write `source` to the cache folder (atomically, unless the same text is there)."""
    try:  # numba's cache index there is a pickle: the folder must be this user's alone
        return _write_once(_trusted_folder(trusted_cache_dir() / "numba"), filename, source)
    except (OSError, CompileError) as e:  # a private folder still lets numba cache
        if not _PRIVATE:
            warnings.warn(f"numba kernels go to a private folder: {e}", RuntimeWarning, 2)
        return _write_once(_private_dir(), filename, source)


def _trusted_folder(folder: Path) -> Path:
    folder.mkdir(mode=0o700, exist_ok=True)
    reason = untrusted_reason(folder)
    if reason is not None:
        raise CompileError(f"refusing the numba cache {folder}: {reason}")
    return folder


def _write_once(folder: Path, filename: str, source: str) -> Path:
    path = folder / filename
    with contextlib.suppress(OSError, UnicodeDecodeError):
        if path.read_text(encoding="utf-8") == source:
            return path  # untouched, so numba's cache stamps stay valid
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".py", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(source)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return path


_PRIVATE: list[Path] = []


def _private_dir() -> Path:
    if not _PRIVATE:
        _PRIVATE.append(Path(tempfile.mkdtemp(prefix="mdsl-numba-")))
    return _PRIVATE[0]


def _execute(source: str, name: str, path: Path) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__file__ = str(path)
    sys.modules[name] = module  # numba resolves a cached kernel's globals through it
    try:
        exec(compile(source, str(path), "exec"), module.__dict__)
    except Exception as e:
        del sys.modules[name]
        raise CompileError(f"the generated numba module {path} does not load: {e}") from e
    return module


# -- running -----------------------------------------------------------------------------------
@dataclass
class NumbaVariant:
    plan: Plan
    sources: dict[str, str]
    module: types.ModuleType
    path: Path
    threads: int | None
    _local: threading.local = field(default_factory=threading.local)

    def __post_init__(self):
        self._consts = [np.ascontiguousarray(c).reshape(-1) for c in self.plan.constants]
        self._outputs = [self.plan.graph.outputs[name] for name in self.plan.outputs]
        self._input_names, self._output_names = tuple(self.plan.inputs), tuple(self.plan.outputs)
        if not self.plan.uses_dims:  # worked out once: the per-call path of small graphs
            self._static_outputs = [(_shape(t), t.dtype.np) for t in self._outputs]
        self._shapes = (
            PlanShapes(self.plan, bind_values=bind_value_dims) if self.plan.uses_dims else None
        )
        memory = self.plan.memory
        self._arena_size = (memory.arena_bytes if memory else 0) + ALIGN
        self._parallel = "parallel=True" in next(iter(self.sources.values()))

    @property
    def memory(self):
        """The memory plan (a symbolic plan's: that of the latest shape signature run)."""
        return self.plan.memory if self._shapes is None else self._shapes.latest

    def kernel_infos(self) -> list[KernelInfo]:
        return [
            KernelInfo(k.name, k.KIND, tuple(n.name for n in k.nodes))
            for k in self.plan.all_kernels()
        ]

    def run(self, env: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self.run_driver(self.module.run, env)

    def run_profiled(self, env: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """`run` through a timed copy of the driver; also returns each kernel's (start
        after the call began, duration) in seconds, one row per kernel of
        `plan.all_kernels()` (those inside control flow stay zero: timed as a whole)."""
        timings = np.zeros((len(self.plan.all_kernels()), 2))
        try:
            outputs = self.run_driver(self._profile_driver(), env, timings, time.perf_counter)
        except MdslError as e:
            if "numba could not compile" not in e.message:
                raise
            raise ExecutionError(f"graph {self.plan.graph.name!r}: {e.message}") from e
        return outputs, timings

    def _profile_driver(self):
        driver = getattr(self, "_run_profile", None)
        if driver is None:
            plan, parallel = self.plan, self.threads != 1  # as build_variant renders it
            if render_numba(plan, parallel=parallel) != next(iter(self.sources.values())):
                raise ExecutionError(
                    f"graph {plan.graph.name!r}: this numba variant was not rendered by this "
                    "mdsl; it cannot be profiled"
                )
            namespace = dict(self.module.__dict__)  # the compiled kernels, np, rt
            source = render_profile_driver(plan, parallel)
            exec(compile(source, f"<profile of {self.path.name}>", "exec"), namespace)
            driver = self._run_profile = namespace["run_profile"]
        return driver

    def run_driver(self, driver, env: dict[str, np.ndarray], *extra) -> dict[str, np.ndarray]:
        """Run `driver` (the module's `run`, or a timed copy taking `extra` arguments
        after the standard ones) on input arrays `env`; the outputs by name."""
        if self._shapes is None:
            return self._run_driver(driver, env, *extra)
        return self._shapes.growing(lambda: self._run_driver(driver, env, *extra))

    def _run_driver(self, driver, env: dict[str, np.ndarray], *extra) -> dict[str, np.ndarray]:
        shapes = self._shapes
        inputs = [np.ascontiguousarray(env[name]).reshape(-1) for name in self._input_names]
        if shapes is None:
            outputs = [np.empty(shape, dtype) for shape, dtype in self._static_outputs]
            standard = (self._arena(), self._callback)
        else:
            values = shapes.symbols(env)
            layout = shapes.layout(values)
            outputs = shapes.new_outputs(layout, values)
            dims = self._local.dims = shapes.new_dims(values)
            arena = self._arena(layout.memory.arena_bytes)
            standard = (arena, self._callback, dims, layout.offsets, layout.nbytes)
        flat = [o.reshape(-1) for o in outputs]
        try:
            if self._parallel:
                with self._thread_setup():
                    status = driver(inputs, flat, self._consts, *standard, *extra)
            else:  # a serial module: numba's thread count does not matter to it
                status = driver(inputs, flat, self._consts, *standard, *extra)
        except NumbaError as e:
            raise CompileError(
                f"graph {self.plan.graph.name!r}: numba could not compile a kernel of "
                f"{self.path}: {e}"
            ) from e
        finally:
            self._local.dims = None
        if shapes is None:
            return dict(zip(self._output_names, outputs))
        if status:
            raise shapes.failure(status, dims) or ExecutionError(
                f"graph {self.plan.graph.name!r}: the run failed (status {status})"
            )
        return dict(zip(self._output_names, shapes.finish(outputs, dims)))

    @contextlib.contextmanager
    def _thread_setup(self):
        if self.threads:
            numba.set_num_threads(max(1, min(int(self.threads), numba.config.NUMBA_NUM_THREADS)))
        if self._parallel and not _threadsafe_layer():
            with _WORKQUEUE_LOCK:
                yield
        else:
            yield

    def _arena(self, size: int | None = None) -> np.ndarray:
        """This thread's arena, of `size` bytes at least (default: the static plan's)."""
        size = self.plan.memory.arena_bytes if size is None else size
        arena = getattr(self._local, "arena", None)
        if arena is None or arena.size < size:
            raw = np.empty(size + ALIGN, np.uint8)
            shift = (-raw.ctypes.data) % ALIGN
            arena = self._local.arena = raw[shift : shift + size]
        return arena

    def _callback(self, index: int, buffers: list) -> None:
        """Run callback `index`'s node on flat buffers (its inputs, then its outputs)."""
        node = self.plan.callbacks[index]
        try:
            dims = getattr(self._local, "dims", None)
            env = None if dims is None else self._shapes.environment(dims)
            args = [
                None if b is None else _leading(b, storage_shape(t, env)).copy()
                for b, t in zip(buffers, node.inputs)
            ]
            _, kernel = node_kernel(node, symbols=env)
            if dynamic_symbols(node):  # its results decide their sizes: bound into dims
                env = self._shapes.rebinding(env, dynamic_symbols(node))
                results = run_data_dependent(node, kernel, args, env)
                self._shapes.store_symbols(dims, env, dynamic_symbols(node))
            else:
                specs = [(storage_shape(t, env), t.dtype.np) for t in node.outputs]
                results = kernel(args, specs)
            for b, t, value in zip(buffers[len(node.inputs) :], node.outputs, results):
                shape = storage_shape(t, env)
                np.copyto(_leading(b, shape), np.asarray(value, t.dtype.np).reshape(shape))
        except CapacityExceeded:  # the run stops; `run_driver` grows it and runs again
            raise
        except MdslError as e:
            raise e.with_context(node=node.name, op_type=node.op_type, source=node.source) from e
        except Exception as e:
            raise ExecutionError(
                f"implementation raised {type(e).__name__}: {e}",
                node=node.name,
                op_type=node.op_type,
                source=node.source,
            ) from e


def _shape(t) -> tuple[int, ...]:
    return tuple(int(d) for d in t.shape)


def _leading(flat: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The first elements of a flat buffer as an array of `shape` (a buffer sized for the
    largest value of a dynamic dim holds more)."""
    return flat[: int(np.prod(shape, dtype=np.int64))].reshape(shape)


def _threadsafe_layer() -> bool:
    """Whether numba's threading layer lets threads run parallel kernels concurrently
    (unknown until the first parallel kernel ran: then assume not)."""
    try:
        return numba.threading_layer() != "workqueue"
    except ValueError:
        return False
