"""A cache of whole compiles, keyed by the graph: a warm `mdsl.compile` of the C backend
skips optimizing, planning, rendering and packing weights.

The build cache (`mdsl.codegen.toolchain`) is keyed by the generated source, so finding
a library there needs the whole compile but gcc. This cache is keyed by what decides the
compile: the graph (its serialized form, `mdsl.ir.serialize`, with each array replaced by
its BLAKE3 digest and each deferred parameter by its recipe), the compile options, this mdsl's
code and templates, the registered passes and implementation bindings, the compiler and
flags, the machine (CPU model and flags, core count), whether oneDNN is used (installed,
not turned off by `onednn.disabled()`) and the `MDSL_*` / oneDNN
variables. An entry (`compiled/<key>/` in the cache folder) holds the Executable's
parts: the optimized graph and each variant's Plan (memory plan, kernel table, sources)
pickled, each plan's kernels in a pickle of their own inside it (a run needs none of
them: the loaded plan unpickles them when they are first read, `Plan.defer_kernels`),
the plan's arrays (packed and reordered weights) in one file the loaded plan maps
read-only, and each variant's library. Arrays the compiled graph holds itself (its
weights, unless packed or folded) are not written: the manifest names them by their
place in the key's list, and a load reads them from the graph it is given, whose
arrays the key proves byte for byte the same (C-ordered arrays only: the key hashes
content, and a Fortran-ordered twin has other bytes in memory). VGG-19's entry: 1212 ->
637 MB, its packed and Winograd weights.

Why not the saved-executable format (`mdsl.runtime.saved`): a saved executable holds
no plan (loading one plans again, which is what this cache skips) and inlines the
weights in its graph. This cache's entries are pickles and so are read only from this
user's own cache: the entry and its files must be this user's and not writable by
others (as the build cache requires of libraries), the manifest must carry this
user's HMAC signature (`mdsl.runtime.signing`, as saved executables do), and every file
must match the digest the manifest lists before anything is unpickled or loaded. An
entry failing any check is a miss, logged at WARNING, and is replaced by the next
store. Entries are written to a private folder and renamed into place; the least
recently used are removed beyond `MAX_CACHE_BYTES`.

Which digest guards what: the pickled state and the libraries (what runs) by SHA-256,
the arrays file (BERT-base: 440 MB of packed weights) by XXH3-128, 30 GB/s against
SHA-256's 1.8 GB/s here (0.013 s instead of 0.25 s of a warm compile's 0.5 s). What the
digests defend against is damage: a disk or copy that flips or drops bytes, a write cut
short. Tampering by another local user is stopped before any digest is read, by the
owner-only folder and files (`untrusted_reason`): whoever can rewrite an entry's files
is this user or root, and can read the signing key too, so a cryptographic digest of
the arrays would not stop them, and XXH3-128 catches damage as surely.

The arrays file is hashed once, by its writer, which records the file's identity too
(device, inode, size, modification and status-change times: `_identity`) and
publishes the entry only once the clock has moved past the file's status-change time;
a load whose file has that identity was not written, replaced or copied since, and is
not hashed again (BERT-base: 18-45 ms of each warm compile, the hash reading 440 MB).
Any write, copy or restore changes the identity, and the file is then hashed as
before. What the identity cannot see is a disk returning other bytes than it was given
without any write (the file system's own checks are what catch that, as for every
other file a process reads). On a file system that keeps whole-second times, or whose
clock is not this machine's, no identity is recorded and the file is hashed on every
load. The key hashes
arrays with a cryptographic digest instead: there a collision would serve one graph's
executable for another, and the graphs come from anyone. It is BLAKE3 (`blake3`), 4.2
GB/s on one core here against SHA-256's 1.8 GB/s: an imported BERT-base's 440 MB of
weights cost 0.25 s of CPU to key with SHA-256 and cost 0.105 s.

A graph is compiled without this cache (logged at INFO) when something outside the
key could change its compile: an op defined, or an implementation or pass registered,
by a module outside mdsl. `MDSL_COMPILE_CACHE=0` turns the cache off.
"""

from __future__ import annotations

import contextlib
import copyreg
import dataclasses
import functools
import gc
import hashlib
import hmac
import io
import json
import mmap
import os
import pickle
import platform
import shutil
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import blake3
import numpy as np
import xxhash

from mdsl.codegen.toolchain import elf_problem, trusted_cache_dir
from mdsl.ir.errors import CompileError, MdslError
from mdsl.ir.graph import CONST, Graph
from mdsl.ir.initializer import ParamInit
from mdsl.ir.safe_files import read_regular, untrusted_reason
from mdsl.log import get_logger, timed
from mdsl.runtime.saved import signature_line

FORMAT = "mdsl-compile-cache"
VERSION = 6  # 2: the arrays file checked by one XXH3-128; 3: the key's arrays by BLAKE3;
# 4: plans hold their layout template, the arrays file's identity is recorded;
# 5: each plan's kernels pickled apart (unpickled when first read), oneDNN use recorded;
# 6: the graph's own arrays are read from the graph, not written
FOLDER = "compiled"
MANIFEST, SIGNATURE, STATE, ARRAYS = "manifest.json", "manifest.sig", "state.pickle", "arrays.bin"
CHUNK = 32 << 20  # bytes of a key's array per digest (hashed in parallel)
ALIGN = 64
MAX_CACHE_BYTES = 8 << 30  # entries beyond this, least recently used first, are removed
MAX_SMALL_FILE = 1 << 30
STALE_SECONDS = 3600  # a half-written entry this old was left by a killed process
CLOCK_STEP_NS = 20_000_000  # at least the step of the clock file times come from
# variables that change no compile (where files go, what is logged)
IGNORED_VARIABLES = ("MDSL_CACHE_DIR", "MDSL_CONFIG_DIR", "MDSL_LOG", "MDSL_PROGRESS")

_log = get_logger(__name__)


def enabled() -> bool:
    return os.environ.get("MDSL_COMPILE_CACHE", "1") != "0"


def _without_cycle_collection(fn):
    """`fn` run with Python's cycle collector paused: the key's graph document and the
    loaded plan are ~10^5 objects, young enough that a full collection ran among them
    (35 ms of BERT-base's key). Nothing they make is cyclic garbage. After, the objects
    still young go to the oldest generation (`freeze` then `unfreeze`, which moves lists,
    not objects): the youngest generation's next collection traversed the loaded plan,
    26 ms of the first call. Not when the process froze objects itself: `unfreeze`
    would thaw them too."""

    @functools.wraps(fn)
    def paused(*args, **kwargs):
        if not gc.isenabled():
            return fn(*args, **kwargs)
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            if gc.get_freeze_count() == 0:
                gc.freeze()
                gc.unfreeze()
            gc.enable()

    return paused


# -- the key ---------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class CompileKey:
    """A compile's cache key: `digest` names the entry; `arrays` are the graph's arrays in
    the order the key hashed them (an entry refers to them by place)."""

    digest: str
    arrays: tuple[np.ndarray, ...]


@_without_cycle_collection
def compile_key(g: Graph, backend, options: dict) -> CompileKey | None:
    """The cache key of compiling `g` for `backend` (a C target) with `options`, or None
    when the compile cannot be cached (see the module doc)."""
    reason = _uncacheable(g)
    if reason is not None:
        _log.info("compile cache not used for %r: %s", g.name, reason)
        return None
    h = hashlib.sha256()
    try:
        context = {
            "format": [FORMAT, VERSION],
            "code": code_digest(),
            "registries": _registries(),
            "machine": _machine(),
            "toolchain": backend.toolchain.identity(),
            "options": options,
        }
        h.update(json.dumps(context, sort_keys=True, default=str).encode())
        fingerprint, arrays = graph_fingerprint(g)
        h.update(fingerprint)
    except (MdslError, OSError) as e:  # an attr the serializer cannot write, a file gone
        _log.info("compile cache not used for %r: %s", g.name, e)
        return None
    return CompileKey(h.hexdigest()[:40], tuple(arrays))


def graph_fingerprint(g: Graph) -> tuple[bytes, list[np.ndarray]]:
    """A digest of everything `g` is: its serialized form with each array replaced by
    its shape and BLAKE3 digest and each deferred parameter by its recipe; and those
    arrays, in the order hashed."""
    from mdsl.ir.serialize import graph_document

    store = _FingerprintStore()
    document = graph_document(g, store)  # a tree (some forms shared, no cycle)
    doc = json.dumps(document, separators=(",", ":"), check_circular=False).encode()
    return hashlib.sha256(doc).digest() + b"".join(array_digests(store.arrays)), store.arrays


class _FingerprintStore:
    def __init__(self):
        self.arrays: list[np.ndarray] = []

    def put(self, array: np.ndarray):
        self.arrays.append(array)
        return {"digest": len(self.arrays) - 1, "shape": list(array.shape)}

    def describe(self, init: ParamInit):
        return {"init": [list(init.shape), init.dtype.value, init.kind, init.seed, init.scale]}


def array_digests(arrays: list[np.ndarray]) -> list[bytes]:
    """The BLAKE3 digest of each array's bytes, large ones hashed in chunks on every core."""
    views = [_bytes_of(a) for a in arrays]
    chunks = [(i, v[s : s + CHUNK]) for i, v in enumerate(views) for s in range(0, len(v), CHUNK)]
    digests = _parallel_blake3([c for _, c in chunks])
    per_array: list[list[bytes]] = [[] for _ in views]
    for (i, _), d in zip(chunks, digests):
        per_array[i].append(d)
    return [_blake3(b"".join(parts)) for parts in per_array]


def _bytes_of(array: np.ndarray) -> memoryview:
    flat = np.ascontiguousarray(array).reshape(-1)
    return memoryview(flat.view(np.uint8))


def _blake3(data) -> bytes:
    return blake3.blake3(data).digest()


def _parallel_blake3(chunks: list) -> list[bytes]:
    """BLAKE3 of each chunk (the binding releases the GIL on large buffers)."""
    if len(chunks) <= 1 or sum(len(c) for c in chunks) < 4 * CHUNK:
        return [_blake3(c) for c in chunks]
    try:
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            return list(pool.map(_blake3, chunks))
    except RuntimeError:  # called while the interpreter shuts down: no new threads
        return [_blake3(c) for c in chunks]


def _uncacheable(g: Graph) -> str | None:
    """Why compiling `g` may depend on something the key does not hold, or None."""
    from mdsl.ops import bindings, registry
    from mdsl.passes.manager import registered_passes

    for op_type in sorted(_op_types(g)):
        if registry.has_op(op_type) and not _from_mdsl(registry.get_op(op_type).infer):
            return f"it uses op {op_type!r}, defined outside mdsl"
    for b in bindings.all_bindings():
        if not b.from_mdsl:
            return f"an implementation of {b.op_type!r} is registered by {b.origin}"
    for p in registered_passes().values():
        if not _from_mdsl(p.fn):
            return f"pass {p.name!r} is registered by {getattr(p.fn, '__module__', '?')}"
    return None


def _from_mdsl(fn) -> bool:
    module = getattr(fn, "__module__", None) or ""
    return module == "mdsl" or module.startswith("mdsl.")


def _op_types(g: Graph) -> set[str]:
    found = set()
    for node in g:
        found.add(node.op_type)
        for sub in node.subgraphs.values():
            found |= _op_types(sub)
    return found


def _registries() -> list:
    """What mdsl's own registrations are now (modules imported later add some)."""
    from mdsl.ops import bindings
    from mdsl.passes.manager import registered_passes

    impls = sorted((b.op_type, b.backend, b.origin, b.builtin) for b in bindings.all_bindings())
    passes = [(p.name, sorted(p.levels), p.phase) for p in registered_passes().values()]
    return [impls, passes]


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """A digest of mdsl's files (Python, C, templates) as this process found them."""
    from mdsl.codegen.templates import template_dir

    package = Path(__file__).resolve().parent.parent
    return tree_digest([package, template_dir("c").parent])


def tree_digest(roots: list[Path]) -> str:
    """SHA-256 over the relative path, size and modification time of every file under
    `roots`: what Python itself checks before it trusts a .pyc (an edit, a checkout or
    an install changes a file's time). 3 ms, where reading mdsl's 4 MB took 25 ms."""
    h = hashlib.sha256()
    for root in dict.fromkeys(roots):
        files: list[str] = []
        _list_files(str(root), "", files)
        h.update("".join(sorted(files)).encode())
    return h.hexdigest()


def _list_files(folder: str, relative: str, out: list[str]) -> None:
    """Append a line per file under `folder`: its path relative to the root, size and
    modification time (as `os.walk` finds them: not in `__pycache__` nor in a linked
    folder). 2 ms for mdsl's 280 files, where `os.walk` and `relpath` took 6."""
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.is_dir():
                if entry.name != "__pycache__" and not entry.is_symlink():
                    _list_files(entry.path, f"{relative}{entry.name}/", out)
                continue
            stat = entry.stat()
            out.append(f"{relative}{entry.name}\0{stat.st_size}\0{stat.st_mtime_ns}\n")


@functools.lru_cache(maxsize=1)
def _cpu() -> str:
    """The CPU's model and feature flags (plans probe oneDNN, which picks by ISA)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor()
    wanted = ("model name", "flags", "Features", "CPU part")
    lines = [line for line in text.splitlines()[:64] if line.split(":")[0].strip() in wanted]
    return "\n".join(dict.fromkeys(lines))


def _machine() -> dict:
    import _cffi_backend  # the C part of cffi, what loads and calls the libraries

    from mdsl.codegen import onednn

    return {
        "platform": [platform.system(), platform.machine(), sys.version],
        "cpu": _cpu(),
        "cpus": os.cpu_count(),
        "team": onednn.plan_threads(),  # oneDNN blocks some weights by the team size
        "numpy": np.__version__,
        "cffi": _cffi_backend.__version__,
        "onednn": onednn.identity(),  # `onednn.disabled()` too
        "variables": {
            k: v
            for k, v in os.environ.items()
            if k.startswith(("MDSL_", "ONEDNN_", "DNNL_")) and k not in IGNORED_VARIABLES
        },
    }


# -- storing ---------------------------------------------------------------------------------
def store(key: CompileKey, exe) -> None:
    """Keep `exe`, just compiled, under `key`. The plan is pickled now; the files are
    written by a thread (BERT-base: 440 MB of arrays, hashed), so the first call runs
    meanwhile; a later `load` of `key` in this process waits for it, and the process
    does at exit. A failure is only logged: the compile itself succeeded."""
    variants = exe.variants()
    if exe.symbolic_failure is not None or not variants:
        return
    if not all(hasattr(v, "plan") and hasattr(v, "library_path") for v in variants.values()):
        return
    try:
        state = {
            "graph": exe.graph,
            "debug_outputs": exe.debug_outputs,
            "specialize": exe.specialize,
            "variants": [
                (signature, *_deferred_kernels(v.plan), v.sources, v.toolchain, v.onednn, i)
                for i, (signature, v) in enumerate(variants.items())
            ],
        }
        pickled, buffers = _pickle(state)
        sources = _graph_sources(buffers, key.arrays)
        libraries = [Path(v.library_path) for v in variants.values()]
    except Exception as e:  # a plan that does not pickle: compiled as usual
        _log.info("compile cache: not stored (%s: %s)", type(e).__name__, e)
        return
    writer = threading.Thread(
        target=_write_entry,
        args=(key.digest, pickled, list(zip(buffers, sources)), libraries),
        name=f"mdsl-cache-{key.digest[:8]}",
    )
    with _PENDING_LOCK:  # started inside: whoever waits for it finds it started
        _PENDING.setdefault(key.digest, []).append(writer)
        writer.start()


_PENDING: dict[str, list[threading.Thread]] = {}  # entries being written, by key
_PENDING_LOCK = threading.Lock()


def _wait_for_store(key: str) -> None:
    with _PENDING_LOCK:
        writers = _PENDING.pop(key, [])
    for writer in writers:
        writer.join()


def wait_for_stores() -> None:
    """Return once every entry this process is writing is written."""
    with _PENDING_LOCK:
        keys = list(_PENDING)
    for key in keys:
        _wait_for_store(key)


def _graph_sources(buffers: list[pickle.PickleBuffer], arrays) -> list[int | None]:
    """For each buffer, the place in `arrays` (the key's) of a C-contiguous array whose
    memory it is, or None. Only C order: an array of other strides with the same
    content, which the same key would accept, has its bytes in another order."""
    places: dict[tuple[int, int], int] = {}
    for i, a in enumerate(arrays):
        if a.flags.c_contiguous and a.nbytes and not a.dtype.hasobject:
            places.setdefault((a.ctypes.data, a.nbytes), i)
    out = []
    for buffer in buffers:
        raw = buffer.raw()
        address = np.frombuffer(raw, np.uint8).ctypes.data if raw.nbytes else None
        out.append(places.get((address, raw.nbytes)))
    return out


def _write_entry(key: str, pickled: bytes, buffers: list, libraries: list[Path]) -> None:
    try:
        with timed(_log, "compile cache: store %s", key):
            _write_files(key, pickled, buffers, libraries)
    except Exception as e:  # a full disk, a cache folder gone: compiled as usual
        _log.info("compile cache: not stored (%s: %s)", type(e).__name__, e)


def _write_files(key: str, pickled: bytes, buffers: list, libraries: list[Path]) -> None:
    root = _root()
    tmp = Path(tempfile.mkdtemp(prefix=".entry-", dir=root))  # mode 0700, ours
    try:
        names = []
        for i, library in enumerate(libraries):  # the state names them by index
            names.append(f"{i}.so")
            shutil.copyfile(library, tmp / names[-1])
        (tmp / STATE).write_bytes(pickled)
        layout = _write_arrays(tmp / ARRAYS, buffers)
        arrays = {"buffers": layout, "xxh3_128": _file_xxh3(tmp / ARRAYS)}
        arrays["identity"] = _recordable_identity(os.stat(tmp / ARRAYS))
        manifest = {
            "format": FORMAT,
            "version": VERSION,
            "key": key,
            "state": _sha256(pickled),
            "arrays": arrays,
            "libraries": [_sha256((tmp / name).read_bytes()) for name in names],
        }
        text = json.dumps(manifest, indent=1, sort_keys=True).encode()
        (tmp / MANIFEST).write_bytes(text)
        (tmp / SIGNATURE).write_text(signature_line(text))
        if arrays["identity"] is not None:
            _wait_past(arrays["identity"][-1])
        _publish(tmp, root / key)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    _evict(root, keep=key)


def _deferred_kernels(plan) -> tuple:
    """`plan` as stored (`_without_unread_constants`, no kernels) and its kernels
    pickled apart: a loaded plan unpickles them when first read (`Plan.defer_kernels`)."""
    stored = dataclasses.replace(_without_unread_constants(plan), kernels=[])
    out = io.BytesIO()
    _Pickler(out, protocol=5).dump(plan.kernels)
    return stored, out.getvalue()


def _without_unread_constants(plan):
    """`plan`, each constant no kernel reads replaced by an empty array (not stored:
    its pointer reaches no code that reads it)."""
    unread = _unread_constants(plan)
    if not unread:
        return plan
    slots = {plan.buffers[name].slot for name in unread}
    constants = [np.empty(0, c.dtype) if i in slots else c for i, c in enumerate(plan.constants)]
    return dataclasses.replace(plan, constants=constants)


def _unread_constants(plan) -> set[str]:
    """Constant buffers no kernel reads: weights the plan packed into another constant
    (a GEMM with `packed_b` reads that, not `b`; a convolution by oneDNN reads the
    weights reordered for it or transformed for Winograd, not `w`)."""
    from mdsl.codegen import kir
    from mdsl.codegen.plan import kernel_buffers

    read, packed = set(), set()
    for k in plan.all_kernels():
        reads, _ = kernel_buffers(k)
        if isinstance(k, kir.Gemm) and k.packed_b:
            packed.add(k.b.buffer)
            reads = {k.a.buffer, k.packed_b}
            if k.epilogue is not None:
                reads |= {a.buffer for a in k.epilogue.loads.values()}
        elif isinstance(k, kir.Conv) and k.onednn:
            packed.add(k.w)
            reads = reads - {k.w}
        read |= reads
    return {b for b in packed - read if plan.buffers[b].kind == "const"}


def _all_nodes(g: Graph):
    for node in g:
        yield node
        for sub in node.subgraphs.values():
            yield from _all_nodes(sub)


def _pickle(state: dict) -> tuple[bytes, list[pickle.PickleBuffer]]:
    """`state` pickled with its arrays out of band, and its graphs' drawn parameters as
    their recipes (drawn again if ever read), not as their values."""
    swapped = []
    graphs = [state["graph"], *(plan.graph for _, plan, *_ in state["variants"])]
    for g in graphs:
        for node in _all_nodes(g):
            value = node.attrs.get("value") if node.op_type == CONST else None
            if isinstance(value, ParamInit) and value._value:
                swapped.append((node, node.attrs))
                node.attrs = {**node.attrs, "value": _recipe(value)}
    buffers: list[pickle.PickleBuffer] = []
    out = io.BytesIO()
    try:
        _Pickler(out, protocol=5, buffer_callback=buffers.append).dump(state)
        data = out.getvalue()
    finally:
        for node, attrs in swapped:
            node.attrs = attrs
    return data, buffers


class _Pickler(pickle.Pickler):
    """Slotted dataclasses (plans hold ~10^4 of them) restored by setting their fields
    by name: dataclasses' own `__setstate__` looks the fields up again for each object,
    a fifth of the time to load a plan."""

    def reducer_override(self, obj):
        names = _slot_fields(type(obj))
        if names is None:
            return NotImplemented
        values = tuple(getattr(obj, name) for name in names)
        return copyreg.__newobj__, (type(obj),), values, None, None, _set_fields


@functools.cache
def _slot_fields(cls: type) -> tuple[str, ...] | None:
    """The fields of a slotted dataclass keeping dataclasses' own pickling, else None."""
    getstate = cls.__dict__.get("__getstate__")
    if getattr(getstate, "__name__", "") != "_dataclass_getstate":
        return None
    return tuple(f.name for f in dataclasses.fields(cls))


def _set_fields(obj, values: tuple) -> None:
    for name, value in zip(_slot_fields(type(obj)), values):
        object.__setattr__(obj, name, value)


def _recipe(init: ParamInit) -> ParamInit:
    return ParamInit(init.shape, init.dtype, init.kind, init.seed, init.scale)


def _write_arrays(path: Path, buffers: list) -> list:
    """The buffers (each with its place among the key's arrays, or None) written one
    after another, each aligned, but those a graph's array holds; for each, its
    [offset, size] in the file or {"graph": place, "size": size}."""
    layout: list = []
    with open(path, "wb") as f:
        for buffer, place in buffers:
            raw = buffer.raw()
            if place is not None:
                layout.append({"graph": place, "size": raw.nbytes})
                continue
            f.write(b"\0" * (-f.tell() % ALIGN))
            layout.append([f.tell(), raw.nbytes])
            f.write(raw)
    return layout


def _file_xxh3(path: Path) -> str:
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return xxhash.xxh3_128_hexdigest(b"")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            return xxhash.xxh3_128_hexdigest(mapped)


def _identity(stat: os.stat_result) -> list[int]:
    """What changes when a file is written, replaced or copied: device, inode, size,
    modification and status-change times (the last no process can set)."""
    return [stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns]


def _recordable_identity(stat: os.stat_result) -> list[int] | None:
    """`_identity` of a file just written, or None (the file is then hashed on every
    load) on a file system that keeps times in whole seconds, where a write within the
    same second would not change them, or whose clock is not this machine's (a time
    more than a second away from now: `_wait_past` could not wait for that clock)."""
    if stat.st_ctime_ns % 1_000_000_000 == 0:
        return None
    if abs(stat.st_ctime_ns - time.time_ns()) > 1_000_000_000:
        return None
    return _identity(stat)


def _wait_past(ctime_ns: int) -> None:
    """Return once the clock has moved CLOCK_STEP past `ctime_ns`: file times come from
    a clock that steps every few milliseconds, so a write in the same step as the one
    recorded would leave the file's times unchanged. Past it, any write changes them."""
    while (wait := ctime_ns + CLOCK_STEP_NS - time.time_ns()) > 0:
        time.sleep(wait / 1e9)


def _publish(tmp: Path, entry: Path) -> None:
    """Rename the finished entry into place, replacing one there (damaged, or written
    meanwhile by a concurrent store of the same key: equal, and a process reading it
    keeps its open files)."""
    if entry.exists():
        stale = entry.with_name(f".stale-{entry.name}-{os.getpid()}-{id(tmp)}")
        try:
            entry.rename(stale)
            shutil.rmtree(stale, ignore_errors=True)
        except OSError:
            return
    with contextlib.suppress(OSError):  # another process published it meanwhile
        tmp.rename(entry)


def _evict(root: Path, keep: str) -> None:
    """Remove the least recently used entries while the folder holds more than
    MAX_CACHE_BYTES."""
    entries = []
    for entry in root.iterdir():
        if entry.name.startswith(".entry-") and _older_than(entry, STALE_SECONDS):
            shutil.rmtree(entry, ignore_errors=True)  # a writer that was killed
        if entry.name.startswith(".") or not entry.is_dir():
            continue
        try:
            size = sum(f.stat().st_size for f in entry.iterdir())
            entries.append((entry.stat().st_mtime, size, entry))
        except OSError:
            continue
    total = sum(size for _, size, _ in entries)
    for _, size, entry in sorted(entries, key=lambda e: e[0]):
        if total <= MAX_CACHE_BYTES:
            break
        if entry.name != keep:
            shutil.rmtree(entry, ignore_errors=True)
            total -= size


def _older_than(path: Path, seconds: float) -> bool:
    try:
        return time.time() - path.stat().st_mtime > seconds
    except OSError:
        return False


def _root() -> Path:
    root = trusted_cache_dir() / FOLDER
    root.mkdir(mode=0o700, exist_ok=True)
    reason = untrusted_reason(root)
    if reason is not None:
        raise CompileError(f"refusing the compile cache {root}: {reason}")
    return root


# -- loading ---------------------------------------------------------------------------------
@_without_cycle_collection
def load(key: CompileKey, backend, threads: int | None):
    """The Executable stored under `key`, or None (no entry, or one failing a check:
    logged, and compiled again)."""
    _wait_for_store(key.digest)
    try:
        entry = _root() / key.digest
    except CompileError as e:
        _log.warning("compile cache not used: %s", e.message)
        return None
    if not entry.is_dir():
        _log.info("compile cache: miss %s", key.digest)
        return None
    try:
        with timed(_log, "compile cache: hit %s", key.digest):
            exe = _load(entry, key, backend, threads)
    except Exception as e:
        _log.warning("compile cache entry %s not used (%s); compiling again", entry, e)
        return None
    os.utime(entry)  # recently used: evicted last
    return exe


class EntryError(CompileError):
    """A compile cache entry that fails a check."""


def _load(entry: Path, key: CompileKey, backend, threads):
    from mdsl.runtime.executable import Executable
    from mdsl.targets.c.backend import CVariant

    manifest = _verified_manifest(entry, key.digest)
    state_bytes = _verified_file(entry / STATE, manifest["state"])
    libraries = []
    for i, digest in enumerate(manifest["libraries"]):
        path = entry / f"{i}.so"
        _verified_file(path, digest)
        problem = elf_problem(path)
        if problem is not None:
            raise EntryError(f"{path.name} is {problem}")
        libraries.append(path)
    buffers = _verified_arrays(entry / ARRAYS, manifest["arrays"], key.arrays)
    state = pickle.loads(state_bytes, buffers=buffers)
    variants = {}
    for signature, plan, kernels, sources, toolchain, onednn, library in state["variants"]:
        plan.defer_kernels(functools.partial(pickle.loads, kernels))
        variants[signature] = CVariant(
            plan, sources, libraries[library], threads, toolchain=toolchain, onednn=onednn
        )
    return Executable(
        state["graph"],
        backend,
        threads=threads,
        debug_outputs=state["debug_outputs"],
        variants=variants,
        specialize=state["specialize"],
    )


def _verified_manifest(entry: Path, key: str) -> dict:
    for path in (entry, *entry.iterdir()):
        reason = untrusted_reason(path)
        if reason is not None:
            raise EntryError(f"{path.name}: {reason}")
    text = _read(entry / MANIFEST)
    signature = _read(entry / SIGNATURE).decode("ascii", "replace")
    if not hmac.compare_digest(signature.strip(), signature_line(text).strip()):
        raise EntryError("its manifest is not signed with this user's key, or was modified")
    manifest = json.loads(text)
    if manifest.get("format") != FORMAT or manifest.get("version") != VERSION:
        raise EntryError("another format or version")
    if manifest.get("key") != key:
        raise EntryError("its manifest names another key")
    return manifest


def _read(path: Path) -> bytes:
    return read_regular(path, limit=MAX_SMALL_FILE, what=str(path), error=EntryError)


def _verified_file(path: Path, digest: str) -> bytes:
    data = _read(path)
    if not hmac.compare_digest(_sha256(data), digest):
        raise EntryError(f"{path.name} was modified or damaged (its SHA-256 differs)")
    return data


def _verified_arrays(path: Path, arrays: dict, graph_arrays) -> list[memoryview]:
    """The buffers the manifest lists: those of the arrays file, mapped read-only once it
    is the file the manifest's writer hashed (the same identity, so not written since)
    or, when not, once its digest matches; and the graph's own, from `graph_arrays`."""
    layout = arrays["buffers"]
    in_file = [b for b in layout if isinstance(b, list)]
    view = _mapped_arrays(path, arrays, in_file[-1][0] + in_file[-1][1] if in_file else 0)
    out = []
    for b in layout:
        if isinstance(b, list):
            out.append(view[b[0] : b[0] + b[1]])
            continue
        a = graph_arrays[b["graph"]] if 0 <= b["graph"] < len(graph_arrays) else None
        if a is None or not a.flags.c_contiguous or a.nbytes != b["size"]:
            raise EntryError(f"a graph array it names (#{b['graph']}) is not the graph's")
        out.append(_graph_memory(a))
    return out


def _graph_memory(a: np.ndarray) -> memoryview:
    """The bytes of C-contiguous `a`, as a buffer pickle rebuilds an array on."""
    return memoryview(a.reshape(-1).view(np.uint8))


def _mapped_arrays(path: Path, arrays: dict, size: int) -> memoryview:
    with open(path, "rb") as f:
        stat = os.fstat(f.fileno())
        if stat.st_size != size:
            raise EntryError(f"{ARRAYS} has {stat.st_size} bytes, not what the manifest lists")
        if size == 0:
            return memoryview(b"")
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    view = memoryview(mapped)
    if _identity(stat) != arrays.get("identity") and not hmac.compare_digest(
        xxhash.xxh3_128_hexdigest(view), arrays["xxh3_128"]
    ):
        raise EntryError(f"{ARRAYS} was modified or damaged (its XXH3-128 differs)")
    return view


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
