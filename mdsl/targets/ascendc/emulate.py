"""Running a generated AscendC project on the CPU, through mdsl's emulation of the API.

The project's files are compiled unchanged by the host C++ compiler against the header-
only emulation (`csrc/templates/ascendc/emu/`, shipped with the templates): kernel files,
host tiling and runner go into one translation unit with `ASCENDC_CPU_DEBUG` defined, so
each `<kernel>_do` launch runs every block in turn through `ICPU_RUN_KF`. Misuse of the
API (a DeQue of an empty queue, an unaligned DataCopy, a Unified Buffer overflow, a
global-memory access outside every buffer) stops the run with an `ExecutionError` naming
the kernel, the block and the call.

Builds are cached by content (`mdsl.codegen.toolchain`), so one graph compiles once.

>>> import numpy as np, mdsl
>>> from mdsl.targets.ascendc.project import build_project
>>> with mdsl.Graph("axpy") as g:
...     x = g.input("x", (3, 100), "float16")
...     g.output(x * 2.0 + 1.0, "y")
>>> emu = Emulator(build_project(g))                         # doctest: +SKIP
>>> emu.run({"x": np.ones((3, 100), np.float16)})["y"][0, :3]  # doctest: +SKIP
array([3., 3., 3.], dtype=float16)
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shlex
import shutil
import threading
from pathlib import Path

import cffi
import numpy as np

from mdsl.codegen.templates import template_dir
from mdsl.codegen.toolchain import Toolchain, build_library, trusted_cache_dir
from mdsl.ir.errors import CompileError, ExecutionError, MdslError
from mdsl.targets.ascendc.kernels import MatmulKernel
from mdsl.targets.ascendc.project import AscendcProject
from mdsl.targets.ascendc.render import tiling_fields, tiling_type
from mdsl.targets.feeds import bind_feeds

FLAGS = ("-std=c++17", "-O0", "-fPIC", "-shared", "-DASCENDC_CPU_DEBUG")  # -O0 compiles 2x faster
ALIGN = 64
FAILED = -1000000  # mdsl_emu_run's status when the emulation raised

_FFI = cffi.FFI()
_FFI.cdef(
    """
    typedef int (*mdsl_host_fallback_t)(int index, void **buffers);
    int mdsl_emu_run(void *const *inputs, void *const *outputs, const void *const *consts,
                     uint8_t *arena, uint8_t *workspace, uint8_t *tiling,
                     mdsl_host_fallback_t fallback);
    const char *mdsl_emu_error(void);
    void mdsl_emu_configure(uint32_t ub_bytes, uint32_t aiv, uint32_t aic, uint64_t sys_ws,
                            uint32_t features);
    void mdsl_emu_register(const void *p, uint64_t bytes, const char *name);
    void mdsl_emu_clear(void);
    uint64_t mdsl_emu_gm_traffic(const char *kernel);
    size_t mdsl_emu_arena_bytes(void);
    size_t mdsl_emu_workspace_bytes(void);
    size_t mdsl_emu_tiling_bytes(void);
    uint32_t mdsl_emu_tiling(int index, uint32_t *fields, int capacity);
    """
)
_LOCK = threading.Lock()  # the emulation's global state (UB, GM registry) is per process
_LIBRARIES: dict[str, object] = {}


# the emulation's API table bits (mdsl_emu::Feature in emu/mdsl_emu/core.h)
_FEATURE_BITS = {"DataCopyPad": 1, "DataCacheCleanAndInvalid": 2}
_LOCAL_WORKSPACE_BIT, _SPLIT_CORES_BIT = 4, 8


def feature_bits(soc) -> int:
    """The SoC's capability table as the emulation reads it."""
    bits = sum(bit for name, bit in _FEATURE_BITS.items() if soc.has(name))
    bits |= _LOCAL_WORKSPACE_BIT if soc.matmul_local_workspace else 0
    return bits | (_SPLIT_CORES_BIT if soc.split_cores else 0)


def emulation_headers() -> Path:
    return template_dir("ascendc") / "emu"


def find_cxx() -> str | None:
    """The C++ compiler: $CXX, else g++, clang++ or c++ on PATH."""
    for candidate in (os.environ.get("CXX"), "g++", "clang++", "c++"):
        if candidate and shutil.which(shlex.split(candidate)[0]):
            return candidate
    return None


def _digest(texts) -> str:
    h = hashlib.sha256()
    for text in texts:
        h.update(text.encode())
        h.update(b"\0")
    return h.hexdigest()[:24]


def _headers_digest() -> str:
    root = emulation_headers()
    return _digest(f"{p.relative_to(root)}\n{p.read_text()}" for p in sorted(root.rglob("*.h")))


def stage_sources(project: AscendcProject) -> Path:
    """The project's sources in a content-addressed folder (stable include paths, so the
    build cache hits for identical sources; the SoC only enters through the host tiling at
    run time, so projects planned for different SoCs share one build)."""
    sources = {n: t for n, t in project.files.items() if n.endswith((".cpp", ".h"))}
    key = _digest(f"{name}\n{text}" for name, text in sources.items())
    folder = trusted_cache_dir() / "ascendc-src" / key
    if not (folder / ".complete").is_file():
        for name, text in sources.items():
            path = folder / name
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
            tmp.write_text(text)
            tmp.replace(path)
        (folder / ".complete").write_text("ok")
    return folder


def unity_source(project: AscendcProject) -> str:
    """One translation unit: every kernel, the host tiling, the runner and C entry points."""
    device = project.device_kernels
    lines = ['#include "tikicpulib.h"', "#include <string>", "#include <vector>", ""]
    lines += [f'#include "op_kernel/{pk.name}.cpp"' for pk in device]
    lines += [
        f'#include "op_host/{project.stem}_tiling.cpp"',
        f'#include "host/{project.stem}_runner.cpp"',
    ]
    lines += [
        f"static_assert(sizeof(::{tiling_type(pk.name)}) == sizeof(optiling::{tiling_type(pk.name)}), "
        f'"kernel and host views of the {pk.name} tiling differ");'
        for pk in device
    ]
    lines += _GLUE.replace("PREFIX", project.prefix).splitlines()
    lines.append('extern "C" uint32_t mdsl_emu_tiling(int index, uint32_t *fields, int capacity) {')
    lines.append("    switch (index) {")
    for i, pk in enumerate(device):
        t = tiling_type(pk.name)
        # the uint32 fields, after a TCubeTiling if any (fields are private: read the bytes)
        skip = "sizeof(::TCubeTiling)" if isinstance(pk.kernel, MatmulKernel) else "0"
        lines += [
            f"    case {i}: {{",
            f"        optiling::{t} tiling;",
            f"        const uint32_t blockDim = optiling::Tiling_{pk.name}(*platform_ascendc::PlatformAscendCManager::GetInstance(), tiling);",
            "        std::vector<uint8_t> bytes(tiling.GetDataSize());",
            "        tiling.SaveToBuffer(bytes.data(), bytes.size());",
            f"        const size_t skip = {skip};",
            "        const size_t n = (bytes.size() - skip) / 4 < size_t(capacity) ? (bytes.size() - skip) / 4 : size_t(capacity);",
            "        std::memcpy(fields, bytes.data() + skip, n * 4);",
            "        return blockDim;",
            "    }",
        ]
    lines += ["    default: return 0;", "    }", "}", ""]
    return "\n".join(lines)


_GLUE = """
static std::string g_mdsl_emu_error;

extern "C" int mdsl_emu_run(void *const *inputs, void *const *outputs, const void *const *consts,
                            uint8_t *arena, uint8_t *workspace, uint8_t *tiling,
                            mdsl_host_fallback_t fallback) {
    g_mdsl_emu_error.clear();
    mdsl_emu::ClearGmTraffic();
    try {
        return PREFIX_run(inputs, outputs, consts, arena, workspace, tiling, nullptr, fallback);
    } catch (const mdsl_emu::Error &e) {
        g_mdsl_emu_error = e.what();
    } catch (const std::exception &e) {
        g_mdsl_emu_error = std::string("C++ exception in the emulation: ") + e.what();
    }
    return -1000000;
}
extern "C" const char *mdsl_emu_error(void) { return g_mdsl_emu_error.c_str(); }
extern "C" void mdsl_emu_configure(uint32_t ub, uint32_t aiv, uint32_t aic, uint64_t sys, uint32_t features) {
    mdsl_emu::config().ubBytes = ub;
    mdsl_emu::config().aivCores = aiv;
    mdsl_emu::config().aicCores = aic;
    mdsl_emu::config().sysWorkspaceBytes = sys;
    mdsl_emu::config().features = features;
    mdsl_emu::config().mode = KernelMode::AIV_MODE;
}
extern "C" void mdsl_emu_register(const void *p, uint64_t bytes, const char *name) {
    mdsl_emu::RegisterGm(p, bytes, name);
}
extern "C" void mdsl_emu_clear(void) { mdsl_emu::ClearGm(); }
extern "C" uint64_t mdsl_emu_gm_traffic(const char *kernel) { return mdsl_emu::gmTraffic()[kernel]; }
extern "C" size_t mdsl_emu_arena_bytes(void) { return PREFIX_arena_bytes(); }
extern "C" size_t mdsl_emu_workspace_bytes(void) { return PREFIX_workspace_bytes(); }
extern "C" size_t mdsl_emu_tiling_bytes(void) { return PREFIX_tiling_bytes(); }
"""


def build_emulated(
    source: str, name: str, include_dirs: tuple[str, ...] = (), cxx: str | None = None
) -> Path:
    """A shared library of C++ `source` compiled against the emulation headers, with
    `ASCENDC_CPU_DEBUG` defined (cached by content; concurrent builders of the same
    library wait for each other)."""
    cxx = cxx or find_cxx()
    if cxx is None:
        raise CompileError(
            "no C++ compiler found (set $CXX or install g++): the AscendC emulation needs one"
        )
    flags = (*FLAGS, f"-DMDSL_EMU_HEADERS={_headers_digest()}")
    toolchain = Toolchain(cxx, flags, (str(emulation_headers()), *include_dirs), ())
    with _build_lock(_digest([source, *include_dirs, *flags])):
        return build_library(source, toolchain, name)


@contextlib.contextmanager
def _build_lock(key: str):
    folder = trusted_cache_dir() / "ascendc-locks"
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / key, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def build_emulation(project: AscendcProject, cxx: str | None = None) -> Path:
    """The shared library of `project` compiled against the emulation (cached)."""
    staged = stage_sources(project)
    includes = (str(staged), str(staged / "op_kernel"), str(staged / "op_host"))
    return build_emulated(unity_source(project), f"ascendc_{project.stem}", includes, cxx)


class Emulator:
    """A generated AscendC project running on the CPU: `run(feeds)` like an executable."""

    def __init__(
        self, project: AscendcProject, *, cxx: str | None = None, sys_workspace: int = 1024
    ):
        self.project = project
        self.library = build_emulation(project, cxx)
        with _LOCK:
            key = str(self.library)
            if key not in _LIBRARIES:
                _LIBRARIES[key] = _FFI.dlopen(key)
            self.lib = _LIBRARIES[key]
        self.sys_workspace = sys_workspace
        soc = project.soc
        self._configure = (
            soc.ub_bytes,
            soc.vector_cores,
            soc.cube_cores,
            sys_workspace,
            feature_bits(soc),
        )
        self._host = [pk.kernel for pk in project.host_kernels]
        # kernel name -> global-memory bytes it moved in the last run (through GlobalTensor)
        self.gm_traffic: dict[str, int] = {}

    # -- running -----------------------------------------------------------------------------
    def run(self, feeds) -> dict[str, np.ndarray]:
        plan = self.project.plan
        env, _ = bind_feeds(plan.graph, feeds)
        inputs = [np.ascontiguousarray(env[name]) for name in plan.inputs]
        outputs = [
            np.empty(_shape(plan.graph.outputs[n]), plan.graph.outputs[n].dtype.np)
            for n in plan.outputs
        ]
        consts = [np.ascontiguousarray(c) for c in plan.constants]
        with _LOCK:
            self.lib.mdsl_emu_configure(*self._configure)
            arena = _aligned(self.lib.mdsl_emu_arena_bytes())
            workspace = _aligned(self.lib.mdsl_emu_workspace_bytes())
            tiling = _aligned(self.lib.mdsl_emu_tiling_bytes())
            error: list[BaseException] = []
            callback = _FFI.callback("int(int, void **)", lambda i, b: self._fallback(i, b, error))
            self.lib.mdsl_emu_clear()
            self._register(inputs, plan.inputs, "input")
            self._register(outputs, plan.outputs, "output")
            self._register(consts, [f"c{i}" for i in range(len(consts))], "constant")
            for array, label in (
                (arena, "the arena"),
                (workspace, "the workspace"),
                (tiling, "the tiling area"),
            ):
                self.lib.mdsl_emu_register(_ptr(array), array.nbytes, label.encode())
            status = self.lib.mdsl_emu_run(
                _pointers(inputs),
                _pointers(outputs),
                _pointers(consts),
                _u8(arena),
                _u8(workspace),
                _u8(tiling),
                callback,
            )
            message = _FFI.string(self.lib.mdsl_emu_error()).decode()
            self.lib.mdsl_emu_clear()
            self.gm_traffic = {
                pk.name: int(self.lib.mdsl_emu_gm_traffic(pk.name.encode()))
                for pk in self.project.device_kernels
            }
        if error:
            raise error[0]
        if status != 0:
            raise ExecutionError(self._failure(status, message))
        return dict(zip(plan.outputs, outputs))

    def _register(self, arrays, names, kind) -> None:
        for array, name in zip(arrays, names):
            self.lib.mdsl_emu_register(_ptr(array), array.nbytes, f"{kind} {name}".encode())

    def _failure(self, status: int, message: str) -> str:
        kernels = self.project.kernels
        if status == FAILED:
            return message
        if status < 0:
            return f"kernel {kernels[-status - 1].name}: the host tiling found no tile that fits the Unified Buffer"
        return f"host fallback {kernels[status - 1].name} failed"

    def _fallback(self, index: int, buffers, error: list) -> int:
        """Run a host kernel's graph nodes with numpy (the nodes' own implementations)."""
        from mdsl.targets.python.kernels import node_kernel

        host = self._host[index]
        plan = self.project.plan
        try:
            values = {}
            for i, b in enumerate(host.reads):
                if b is not None:
                    spec = plan.buffers[b]
                    values[spec.tensor] = _view(buffers[i], spec).copy()
            for ref in host.nodes:
                node = plan.graph.node(ref.name)
                args = [
                    None if t is None else values[t.name].reshape(_shape(t)) for t in node.inputs
                ]
                _, kernel = node_kernel(node)
                specs = [(_shape(t), t.dtype.np) for t in node.outputs]
                for t, value in zip(node.outputs, kernel(args, specs)):
                    values[t.name] = np.asarray(value, dtype=t.dtype.np).reshape(_shape(t))
            for j, b in enumerate(host.writes):
                spec = plan.buffers[b]
                np.copyto(
                    _view(buffers[len(host.reads) + j], spec), values[spec.tensor].reshape(-1)
                )
            return 0
        except MdslError as e:
            error.append(e)
        except Exception as e:  # reported with the kernel's name, original chained
            err = ExecutionError(f"host fallback {host.name} raised {type(e).__name__}: {e}")
            err.__cause__ = e
            error.append(err)
        return 1

    # -- inspection ------------------------------------------------------------------------------
    def tiling(self, index: int) -> tuple[int, dict[str, int]]:
        """(block count, tiling fields) the generated host tiling computes for device kernel
        `index` on the configured SoC."""
        names = tiling_fields(self.project.device_kernels[index])
        buf = np.zeros(len(names), np.uint32)
        with _LOCK:
            self.lib.mdsl_emu_configure(*self._configure)
            block_dim = self.lib.mdsl_emu_tiling(
                index, _FFI.cast("uint32_t *", buf.ctypes.data), buf.size
            )
        return int(block_dim), {n: int(v) for n, v in zip(names, buf)}


def _aligned(nbytes: int) -> np.ndarray:
    raw = np.zeros(int(nbytes) + ALIGN, np.uint8)
    shift = (-raw.ctypes.data) % ALIGN
    return raw[shift : shift + max(int(nbytes), 1)]


def _ptr(array: np.ndarray):
    return _FFI.cast("void *", array.ctypes.data)


def _u8(array: np.ndarray):
    return _FFI.cast("uint8_t *", array.ctypes.data)


def _pointers(arrays):
    return _FFI.new("void *[]", [_ptr(a) for a in arrays] or [_FFI.NULL])


def _view(pointer, spec) -> np.ndarray:
    nbytes = spec.elements * spec.dtype.itemsize
    return np.frombuffer(_FFI.buffer(pointer, nbytes), dtype=spec.dtype.np, count=spec.elements)


def _shape(t) -> tuple[int, ...]:
    return tuple(int(d) for d in t.shape)


def run_emulated(g, feeds, **options) -> dict[str, np.ndarray]:
    """Build the AscendC project of `g` for the shapes of `feeds` and run it on the CPU
    (`options` as for `build_project`)."""
    from mdsl.targets.ascendc.project import build_project

    if options.get("shapes") is None:
        options["shapes"] = bind_feeds(g, feeds)[1]
    return Emulator(build_project(g, **options)).run(feeds)
