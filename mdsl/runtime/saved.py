"""Saved executables: `exe.save(path)` and `mdsl.load_executable(path)`.

A saved executable is a directory (or the same files in a zip, when the path ends in
`.zip`):

    manifest.json        format, version, mdsl version, platform, backend, threads, and
                         every file below with its SHA-256
    manifest.sha256      "sha256 <hex>" of manifest.json, or "hmac-sha256 <hex>" when
                         saved with key=
    graph.json           the optimized graph (`mdsl.ir.serialize`, no pickle)
    variants/<i>/...     per compiled shape signature: generated sources and, for the C
                         backend, the built shared library

Loading an executable runs its native code, like `torch.load` or pickle: load only
files you trust. mdsl makes "trust" checkable. `exe.save(path)` signs the manifest with
HMAC-SHA256 under this user's key (`mdsl.runtime.signing`: made on first use, mode
0600 in the user's config folder), or under `key=` when given (a key shared with
whoever loads the file elsewhere). `load_executable` refuses, before any library
loads, a file that is unsigned or signed with another key unless told `trust=True`;
the signature covers the manifest, and the manifest the SHA-256 of every file.

Loading then reads the digest file first and every file with a size limit (regular
files only: no FIFOs or devices), checks each digest before using the file, and copies
each library into a private folder before loading it from there, so a library is never
loaded unverified (nor swapped between check and load). It re-plans each variant from
the saved graph and requires the generated source to equal the saved one, and the
library's own build record (the SHA-256 of the source it was compiled from, embedded
by `mdsl.codegen.toolchain`) to name that source: a library of another graph is refused
before it is called. No compiler runs: a loaded executable works where none is
installed, and still compiles a new shape signature when one is.

Prebuilt libraries of custom C ops (`library=`) are not copied: their path and digest
are recorded and checked on load. Every failure is a CompileError saying what is wrong
and where. A library built with `march_native=True` (the default) needs a CPU with the
instruction set of the one that built it; compile with `march_native=False` for
executables meant to move.

>>> import numpy as np, mdsl, tempfile, os
>>> with mdsl.Graph("axpy") as g:
...     x = g.input("x", (3,))
...     g.output(x * 2.0 + 1.0, "y")
>>> folder = os.path.join(tempfile.mkdtemp(), "axpy")
>>> mdsl.compile(g, backend="c").save(folder)
>>> exe = mdsl.load_executable(folder)
>>> exe(x=np.arange(3, dtype=np.float32))["y"]
array([1., 3., 5.], dtype=float32)
"""

from __future__ import annotations

import atexit
import hashlib
import hmac
import json
import os
import platform
import re
import shutil
import tempfile
import threading
import zipfile
from pathlib import Path
from typing import Any

from mdsl.ir.errors import CompileError, MdslError
from mdsl.ir.safe_files import check_zip_member, read_regular
from mdsl.ir.serialize import MAX_JSON_BYTES, json_depth
from mdsl.runtime.signing import user_key
from mdsl.targets.registry import Target, target_class, target_names

FORMAT = "mdsl-executable"
VERSION = 1
MANIFEST, DIGEST = "manifest.json", "manifest.sha256"
MAX_DIGEST_BYTES = 1024
MAX_MANIFEST_BYTES = 1 << 26
MAX_FILE_BYTES = 1 << 30  # a library or a generated source
MAX_JSON_DEPTH = 32  # of the manifest (it nests 5 deep)
_MEMBER = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]*(/[A-Za-z0-9_-][A-Za-z0-9_.-]*)*")


# -- saving ----------------------------------------------------------------------------------
def save_executable(exe, path, *, key: bytes | str | None = None) -> None:
    """Write `exe` to `path` (see the module doc), signed with `key` or else this user's
    key; replaces an earlier save there."""
    manifest, files = _executable_files(exe)
    files[MANIFEST] = json.dumps(manifest, indent=1, sort_keys=True).encode()
    files[DIGEST] = signature_line(files[MANIFEST], key).encode()
    path = Path(os.fspath(path))
    if path.suffix == ".zip":
        _write_zip(path, files)
    else:
        _write_folder(path, files)


def _executable_files(exe) -> tuple[dict, dict[str, bytes]]:
    """(the manifest, the files it lists by path)."""
    from mdsl import __version__
    from mdsl.ir.serialize import graph_to_json

    graph = graph_to_json(exe.graph).encode()
    files = {"graph.json": graph}
    variants = []
    for i, (signature, variant) in enumerate(exe.variants().items()):
        variants.append(_variant_files(i, dict(signature), variant, files))
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "mdsl_version": __version__,
        "platform": _platform(),
        "backend": exe.backend.name,
        "march_native": _march_native(exe.backend),
        "threads": exe.threads,
        "debug_outputs": exe.debug_outputs,
        "specialize": exe.specialize,
        "graph": _entry("graph.json", graph),
        "variants": variants,
    }
    return manifest, files


def _variant_files(i: int, symbols: dict, variant, files: dict) -> dict:
    sources = []
    for j, (name, text) in enumerate(variant.sources.items()):
        member = f"variants/{i}/{j}-{_safe_name(name)}"
        files[member] = text.encode()
        sources.append({"name": name, **_entry(member, files[member])})
    entry: dict[str, Any] = {
        "symbols": symbols,
        "sources": sources,
        "library": None,
        "custom_libraries": [],
    }
    library = getattr(variant, "library_path", None)
    if library is not None:
        member = f"variants/{i}/{_safe_name(Path(library).name)}"
        files[member] = Path(library).read_bytes()
        entry["library"] = _entry(member, files[member])
        system: list[str] = getattr(variant, "system_libraries", list)()
        entry["custom_libraries"] = [
            {"path": p, "sha256": _sha256(Path(p).read_bytes())}
            for p in variant.linked_libraries()
            if Path(p).name not in system
        ]
        entry["system_libraries"] = system
    return entry


def _entry(member: str, data: bytes) -> dict:
    return {"file": member, "sha256": _sha256(data)}


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _safe_name(name: str) -> str:
    cleaned = "".join(c if c.isalnum() or c in "_.-" else "_" for c in name).lstrip(".")
    return cleaned[:80] or "file"


def _platform() -> dict:
    return {"system": platform.system(), "machine": platform.machine()}


def _march_native(backend) -> bool:
    if hasattr(backend, "march_native"):
        return bool(backend.march_native)
    toolchain = getattr(backend, "toolchain", None)
    return toolchain is None or "-march=native" in toolchain.flags


def signature_line(manifest: bytes, key=None) -> str:
    """The digest file's text: the manifest's HMAC-SHA256 under `key` (None: this
    user's key)."""
    return f"hmac-sha256 {_mac(manifest, _key_bytes(key))}\n"


def _mac(data: bytes, key: bytes) -> str:
    return hmac.new(key, data, hashlib.sha256).hexdigest()


def _key_bytes(key) -> bytes:
    if key is None:
        return user_key()
    if isinstance(key, str):
        key = key.encode()
    if not isinstance(key, bytes) or not key:
        raise CompileError(f"key must be non-empty bytes or str, got {type(key).__name__}")
    return key


def _write_zip(path: Path, files: dict) -> None:
    folder = path.resolve().parent
    try:
        fd, tmp = tempfile.mkstemp(prefix=".mdsl-exe-", dir=folder)
    except OSError as e:
        raise CompileError(f"cannot write {path}: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "wb") as f, zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED) as z:
            for name, data in files.items():
                z.writestr(name, data)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _write_folder(path: Path, files: dict) -> None:
    if path.exists() and not _replaceable(path):
        raise CompileError(
            f"cannot save to {path}: it exists and is not a saved executable (not replacing it)"
        )
    parent = path.resolve().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".mdsl-exe-", dir=parent))
    except OSError as e:
        raise CompileError(f"cannot write {path}: {e.strerror or e}") from None
    try:
        for name, data in files.items():
            target = tmp / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        if path.exists():
            old = parent / f".mdsl-old-{os.getpid()}-{threading.get_ident()}"
            path.rename(old)
            shutil.rmtree(old, ignore_errors=True)
        tmp.rename(path)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _replaceable(path: Path) -> bool:
    return path.is_dir() and ((path / MANIFEST).is_file() or not any(path.iterdir()))


# -- loading ---------------------------------------------------------------------------------
def load_executable(
    path, *, key: bytes | str | None = None, threads: int | None = None, trust: bool = False
):
    """The Executable saved at `path` by `exe.save(path)`, verified (see the module doc).

    `key` must be the key it was saved with, when that was not this user's own;
    `trust=True` loads a file that is unsigned or signed with a key you do not have
    (its native code runs: only for files you trust). `threads` overrides the saved
    thread count. Custom ops' bindings (Python callbacks, C sources) must be registered
    before loading, as they were when compiling.
    """
    from mdsl.ir.serialize import graph_from_json
    from mdsl.runtime.executable import Executable, checked_threads

    where = os.fspath(path)
    threads = checked_threads(threads)
    with _open(Path(where)) as reader:
        manifest = _verified_manifest(reader, key, trust, where)
        graph_text = _read_verified(reader, manifest["graph"], where, MAX_JSON_BYTES)
        try:
            graph = graph_from_json(graph_text)
        except MdslError as e:
            raise CompileError(f"{where}: the saved graph does not load: {e.message}") from None
        backend = LoadedBackend(manifest["backend"], manifest["march_native"])
        threads = _manifest_threads(manifest, where) if threads is None else threads
        variants = {}
        for entry in manifest["variants"]:
            signature, variant = _load_variant(
                reader, entry, graph, threads, manifest["backend"], where
            )
            if variant is not None:
                variants[signature] = variant
    return Executable(
        graph,
        backend,
        threads=threads,
        debug_outputs=manifest.get("debug_outputs"),
        variants=variants,
        specialize=manifest.get("specialize"),
    )


class LoadedBackend:
    """The backend of a loaded executable: makes the real one (which needs a compiler
    for "c") only when a new shape signature must be compiled."""

    def __init__(self, name: str, march_native: bool):
        self.name = name
        self.march_native = march_native
        self._backend: Target | None = None

    @property
    def symbolic(self) -> bool:
        """Whether the real backend builds symbolic variants (without making it)."""
        return getattr(target_class(self.name), "symbolic", False)

    def build(self, graph, symbols, threads):
        if self._backend is None:
            from mdsl.runtime.compile import make_backend

            self._backend = make_backend(self.name, self.march_native)
        return self._backend.build(graph, symbols, threads)


class _Reader:
    """Files of a saved executable, from a folder or a zip."""

    def __init__(self, path: Path):
        self.path = path
        self.zip = None
        if path.is_file():
            try:
                self.zip = zipfile.ZipFile(path)
            except (zipfile.BadZipFile, OSError) as e:
                raise CompileError(f"{path} is not a saved executable: {e}") from None
        elif not path.is_dir():
            raise CompileError(f"no saved executable at {path}")

    def read(self, member: object, limit: int = MAX_FILE_BYTES) -> bytes:
        """The bytes of `member` (a name read from an untrusted manifest): a regular file (or
        zip member) of at most `limit`."""
        if not isinstance(member, str) or not _MEMBER.fullmatch(member):
            raise CompileError(f"{self.path}: the manifest names a bad file {member!r:.80}")
        what = f"{self.path}: {member}"
        if self.zip is None:
            return read_regular(self.path / member, limit=limit, what=what, error=CompileError)
        try:
            check_zip_member(self.zip.getinfo(member), cap=limit, error=CompileError)
            return self.zip.read(member)
        except CompileError as e:
            raise CompileError(f"{self.path}: {e.message}") from None
        except (KeyError, OSError, EOFError, zipfile.BadZipFile) as e:
            raise CompileError(f"{what}: cannot read it: {e}") from None
        except Exception as e:  # zlib.error, NotImplementedError (method), RuntimeError...
            raise CompileError(f"{what}: cannot read it ({type(e).__name__}: {e})") from None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.zip is not None:
            self.zip.close()


def _open(path: Path) -> _Reader:
    return _Reader(path)


def _verified_manifest(reader: _Reader, key, trust: bool, where: str) -> dict:
    """The manifest, once its signature (or, with `trust`, its digest) checks out."""
    line = reader.read(DIGEST, MAX_DIGEST_BYTES).decode("ascii", "replace").split()
    if len(line) != 2 or line[0] not in ("sha256", "hmac-sha256"):
        raise CompileError(f"{where}: {DIGEST} is malformed")
    kind, digest = line
    data = reader.read(MANIFEST, MAX_MANIFEST_BYTES)
    if kind == "sha256":
        if not trust:
            given = ", but key= was given" if key is not None else ""
            raise CompileError(
                f"{where} is not signed{given}: refusing to trust it (loading runs its native "
                "code; pass trust=True if you trust where it came from)"
            )
        if not hmac.compare_digest(digest, _sha256(data)):
            raise CompileError(
                f"{where}: the manifest was modified or damaged (its digest differs)"
            )
    elif not trust and not hmac.compare_digest(digest, _mac(data, _key_bytes(key))):
        if key is not None:
            raise CompileError(
                f"{where}: the manifest was modified or damaged, or signed with another key "
                "(its signature does not match the key)"
            )
        raise CompileError(
            f"{where}: the manifest was modified or damaged, or is signed with another key "
            "than this user's (another user's, or one passed as key= when saving): pass that "
            "key=, or trust=True to load it anyway"
        )
    return _checked_manifest(data, where)


def _checked_manifest(data: bytes, where: str) -> dict:
    if json_depth(data) > MAX_JSON_DEPTH:
        raise CompileError(f"{where}: the manifest nests deeper than {MAX_JSON_DEPTH}")
    try:
        m = json.loads(data)
    except (ValueError, RecursionError) as e:
        raise CompileError(f"{where}: the manifest is not JSON: {e}") from None
    if not isinstance(m, dict) or m.get("format") != FORMAT:
        raise CompileError(f"{where} is not a saved mdsl executable")
    if m.get("version") != VERSION:
        raise CompileError(
            f"{where} has format version {m.get('version')!r}; this mdsl reads version {VERSION}"
        )
    _expect(m, {"backend": str, "march_native": bool}, where)
    if m["backend"] not in target_names():
        raise CompileError(f"{where}: the manifest names an unknown backend {m['backend']!r:.40}")
    debug = m.get("debug_outputs")
    if debug is not None and not (
        isinstance(debug, dict) and all(isinstance(v, str) for v in debug.values())
    ):
        raise CompileError(f"{where}: the manifest's debug_outputs is not a dict of names")
    _expect(m, {"graph": dict, "variants": list, "platform": dict}, where)
    if m.get("threads") is not None and type(m.get("threads")) is not int:
        raise CompileError(f"{where}: the manifest's threads is not an int")
    if m["platform"] != _platform():
        raise CompileError(
            f"{where} was built for {m['platform']}, this machine is {_platform()}; "
            "compile the graph again here"
        )
    return m


def _manifest_threads(m: dict, where: str) -> int | None:
    from mdsl.runtime.executable import checked_threads

    try:
        return checked_threads(m.get("threads"))
    except CompileError as e:
        raise CompileError(f"{where}: the manifest's {e.message}") from None


def _expect(doc: dict, fields: dict, where: str) -> None:
    for name, kind in fields.items():
        if not isinstance(doc.get(name), kind):
            raise CompileError(
                f"{where}: the manifest's {name} is missing or not a {kind.__name__}"
            )


def _read_verified(reader: _Reader, entry, where: str, limit: int = MAX_FILE_BYTES) -> bytes:
    if not isinstance(entry, dict) or not isinstance(entry.get("sha256"), str):
        raise CompileError(f"{where}: the manifest lists a file without a digest")
    data = reader.read(entry.get("file"), limit)
    if not hmac.compare_digest(_sha256(data), entry["sha256"]):
        raise CompileError(
            f"{where}: {entry['file']} was modified or damaged (its SHA-256 differs from "
            "the manifest's); refusing to load it"
        )
    return data


def _load_variant(reader: _Reader, entry, graph, threads, backend: str, where: str):
    """(shape signature, variant), the variant None unless it has a library to load."""
    if not isinstance(entry, dict) or not isinstance(entry.get("symbols"), dict):
        raise CompileError(f"{where}: a variant of the manifest is malformed")
    symbols = entry["symbols"]
    if not all(isinstance(k, str) and type(v) is int for k, v in symbols.items()):
        raise CompileError(f"{where}: a variant's symbols are not name -> int")
    signature = tuple(sorted(symbols.items()))
    sources = {}
    for source in _list_of_dicts(entry.get("sources"), where):
        text = _read_verified(reader, source, where)
        try:
            sources[str(source.get("name"))] = text.decode()
        except UnicodeDecodeError:
            raise CompileError(f"{where}: {source.get('file')} is not UTF-8 text") from None
    if entry.get("library") is None:
        return signature, None
    library = _read_verified(reader, entry["library"], where)
    _check_custom_libraries(_list_of_dicts(entry.get("custom_libraries"), where), where)
    _check_system_libraries(entry.get("system_libraries") or [], backend, where)
    load = getattr(target_class(backend), "load_variant", None)
    if load is None:
        raise CompileError(f"{where}: backend {backend!r} cannot load a saved library")
    path = _private_copy(library, next(iter(sources), "graph"))
    try:
        return signature, load(graph, symbols, sources, path, threads)
    except CompileError as e:
        raise CompileError(f"{where}: {e.message}") from None


def _list_of_dicts(value, where: str) -> list[dict]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise CompileError(f"{where}: a variant of the manifest is malformed")
    return value


def _check_custom_libraries(libraries: list, where: str) -> None:
    for lib in libraries:
        path = Path(str(lib.get("path")))
        if not path.exists():
            raise CompileError(f"{where}: the custom op library {path} is missing")
        what = f"{where}: the custom op library {path}"
        digest = _sha256(read_regular(path, limit=MAX_FILE_BYTES, what=what, error=CompileError))
        if not hmac.compare_digest(digest, str(lib.get("sha256"))):
            raise CompileError(
                f"{where}: the custom op library {path} changed since the executable was "
                "saved; refusing to load it"
            )


def _check_system_libraries(sonames, backend: str, where: str) -> None:
    """Each library the saved library links by soname (oneDNN) is installed here."""
    if not isinstance(sonames, list) or not all(isinstance(s, str) for s in sonames):
        raise CompileError(f"{where}: a variant of the manifest is malformed")
    find = getattr(target_class(backend), "system_library", None)
    for soname in sonames:
        path, hint = find(soname) if find else (None, "")
        if path is None:
            raise CompileError(
                f"{where}: the saved library links {soname}, which is not installed here"
                + (f" ({hint})" if hint else "")
            )


_PRIVATE: list[Path] = []
_PRIVATE_LOCK = threading.Lock()


def _private_copy(library: bytes, source_name: str) -> Path:
    """The verified library bytes written where only this process writes, to load."""
    with _PRIVATE_LOCK:
        if not _PRIVATE:
            _PRIVATE.append(Path(tempfile.mkdtemp(prefix="mdsl-loaded-")))
            atexit.register(shutil.rmtree, _PRIVATE[0], True)
        folder = Path(tempfile.mkdtemp(dir=_PRIVATE[0]))
    path = folder / (_safe_name(Path(source_name).stem) + ".so")
    path.write_bytes(library)
    return path
