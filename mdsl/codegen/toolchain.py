"""Building generated C into a shared library, with a content-addressed cache.

The cache key hashes the source, the compiler's identity and the flags. Entries are
written to a temporary folder and renamed into place (atomic on POSIX), so concurrent
builds of one graph never see half-written files; each library has a SHA-256 sidecar,
and an entry whose library no longer matches it is rebuilt. The cache lives in
`$MDSL_CACHE_DIR`, else `$XDG_CACHE_HOME/mdsl`, else `~/.cache/mdsl`.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from mdsl.ir.errors import CompileError
from mdsl.ir.naming import file_stem
from mdsl.log import get_logger, timed

DEFAULT_FLAGS = ("-O3", "-fPIC", "-shared", "-std=gnu11", "-fopenmp", "-fno-math-errno")

_log = get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Toolchain:
    """A C compiler and the flags mdsl builds with."""

    cc: str
    flags: tuple[str, ...]
    include_dirs: tuple[str, ...]
    link_args: tuple[str, ...]

    def identity(self) -> str:
        return (
            _compiler_version(self.cc)
            + "|"
            + " ".join(self.flags + self.include_dirs + self.link_args)
        )


def cache_dir() -> Path:
    root = os.environ.get("MDSL_CACHE_DIR")
    if root:
        return Path(root)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg) / "mdsl" if xdg else Path.home() / ".cache" / "mdsl"


def find_compiler() -> str | None:
    """The C compiler: $CC, else cc, gcc or clang on PATH."""
    for candidate in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if candidate and shutil.which(shlex.split(candidate)[0]):
            return candidate
    return None


@functools.lru_cache(maxsize=8)
def _compiler_version(cc: str) -> str:
    try:
        out = subprocess.run(
            [*shlex.split(cc), "--version"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise CompileError(f"C compiler {cc!r} does not run: {e}") from None
    return out.stdout.splitlines()[0] if out.stdout else cc


@functools.lru_cache(maxsize=1)
def blas_paths() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(include dirs, link args) for the BLAS shipped by scipy-openblas32."""
    try:
        import scipy_openblas32 as blas
    except ImportError:
        raise CompileError("the scipy-openblas32 package (mdsl's BLAS) is not installed") from None
    lib_dir = blas.get_lib_dir()
    return (blas.get_include_dir(),), (
        f"-L{lib_dir}",
        f"-l{blas.get_library()}",
        f"-Wl,-rpath,{lib_dir}",
    )


def default_toolchain(march_native: bool = True, extra_flags: tuple[str, ...] = ()) -> Toolchain:
    cc = find_compiler()
    if cc is None:
        raise CompileError(
            "no C compiler found (set $CC, or install gcc); backend='numba' needs none"
        )
    includes, links = blas_paths()
    flags = DEFAULT_FLAGS + (("-march=native",) if march_native else ()) + tuple(extra_flags)
    env_flags = tuple(shlex.split(os.environ.get("MDSL_CFLAGS", "")))
    return Toolchain(cc, flags + env_flags, includes, links)


def build_library(source: str, toolchain: Toolchain, name: str = "graph") -> Path:
    """The path of a shared library built from `source` (from the cache when present)."""
    file_name = f"{file_stem(name)}.so"  # in the key: an entry holds exactly this file
    key_text = "\0".join((toolchain.identity(), file_name, source))
    key = hashlib.sha256(key_text.encode()).hexdigest()[:32]
    entry = cache_dir() / key
    library = entry / file_name
    if _entry_ok(entry, library):
        _log.info("C library %s: cache hit (%s)", file_name, key)
        return library
    with timed(_log, "C compile %s (%d lines, cache miss %s)", file_name, source.count("\n"), key):
        _build_entry(source, toolchain, entry, library.name)
    return library


def _entry_ok(entry: Path, library: Path) -> bool:
    digest_file = entry / "library.sha256"
    if not (library.is_file() and digest_file.is_file()):
        return False
    try:  # a damaged sidecar (any bytes) means a damaged entry, never a crash
        recorded = digest_file.read_bytes().decode("ascii").strip()
    except (OSError, UnicodeDecodeError):
        return False
    return _sha256(library) == recorded


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _build_entry(source: str, tc: Toolchain, entry: Path, library_name: str) -> None:
    entry.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=entry.parent))
    try:
        src = tmp / "graph.c"
        src.write_text(source, encoding="utf-8")
        out = tmp / library_name
        cmd = [
            *shlex.split(tc.cc),
            *tc.flags,
            *(f"-I{d}" for d in tc.include_dirs),
            str(src),
            "-o",
            str(out),
            *tc.link_args,
            "-lm",
        ]
        try:
            result = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        except (OSError, subprocess.TimeoutExpired) as e:
            message = f"C compiler did not run: {e}"
            raise _compile_error(message, source, cmd, src, out, "") from e
        if result.returncode != 0:
            message = f"C compiler failed (exit {result.returncode})"
            raise _compile_error(message, source, cmd, src, out, result.stderr)
        (tmp / "library.sha256").write_text(_sha256(out))
        (tmp / "graph.c").replace(tmp / "source.c")
        _publish(tmp, entry)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _publish(tmp: Path, entry: Path) -> None:
    """Move a finished build into place; a concurrent builder may have won the race."""
    if entry.exists() and _entry_ok(entry, next(entry.glob("*.so"), entry / "none.so")):
        return  # a concurrent build finished first; ours is discarded
    if entry.exists():
        stale = entry.with_name(entry.name + f".stale-{os.getpid()}-{id(tmp)}")
        try:
            entry.rename(stale)
            shutil.rmtree(stale, ignore_errors=True)
        except OSError:
            pass
    try:
        tmp.rename(entry)
    except OSError:
        if not (entry / "library.sha256").is_file():
            raise


def _compile_error(message, source, cmd, src, out, stderr) -> CompileError:
    """A CompileError carrying `.stderr`, `.command` (re-runnable: it names the kept
    source, not the temporary build folder) and `.source_path`."""
    kept = _keep_failed_source(source)
    command = [
        str(kept) if a == str(src) else str(kept.with_suffix(".so")) if a == str(out) else a
        for a in cmd
    ]
    error = CompileError(
        f"{message}; source kept at {kept}\ncommand: {shlex.join(command)}\n{stderr[-4000:]}"
    )
    error.stderr, error.command, error.source_path = stderr, command, kept
    return error


def _keep_failed_source(source: str) -> Path:
    folder = cache_dir() / "failed"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / (hashlib.sha256(source.encode()).hexdigest()[:16] + ".c")
    path.write_text(source, encoding="utf-8")
    return path
