"""Building generated C into a shared library, with a content-addressed cache.

The cache key hashes the source, the compiler's identity and the flags. Entries are
written to a temporary folder and renamed into place (atomic on POSIX), so concurrent
builds of one graph never see half-written files; each library has a SHA-256 sidecar,
and an entry whose library no longer matches it is rebuilt. The cache lives in
`$MDSL_CACHE_DIR`, else `$XDG_CACHE_HOME/mdsl`, else `~/.cache/mdsl`.

Trust: a cached library runs as whoever loads it, and its key is computable by anyone
who has the model, so the sidecar (written by whoever wrote the entry) proves nothing.
The cache root, each entry folder and the files in it are used only when this user
owns them and neither group nor others can write them (`mdsl.ir.safe_files`); a root
failing that is refused with a CompileError, an entry failing it is rebuilt. Nothing
is written through a path another user could have planted: builds go to a private
temporary folder renamed into place, kept sources of failed builds are new files
renamed over the target. Each library also carries a build record (the SHA-256 of the
source it was built from, `build_record`), which loading a saved executable checks.
"""

from __future__ import annotations

import concurrent.futures
import functools
import hashlib
import importlib.util
import os
import platform
import shlex
import shutil
import stat
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from mdsl.ir.errors import CompileError
from mdsl.ir.naming import file_stem
from mdsl.ir.safe_files import untrusted_reason, write_new
from mdsl.log import get_logger, timed, waiting

# -fno-trapping-math: mdsl never reads the floating-point exception flags, and without it
# GCC 12 keeps every float select (`a >= c ? 1.0f : r`, as in the exact GELU) as a branch
# unless AVX-512 can mask it, so on AVX2 such loops stayed scalar (the pointwise chain
# W1 ran 4x slower on a Zen 3 core). It changes no result: no reassociation, no
# finite-math or signed-zero assumptions.
DEFAULT_FLAGS = (
    "-O3",
    "-fPIC",
    "-shared",
    "-std=gnu11",
    "-fopenmp",
    "-fno-math-errno",
    "-fno-trapping-math",
)
X86 = ("x86_64", "amd64", "i386", "i686")


def native_flags() -> tuple[str, ...]:
    """Flags for the machine that builds: `-march=native` and, on x86, loops in 512-bit
    vectors where the CPU has them (GCC's default for AVX-512 CPUs is 256-bit: row
    kernels and pointwise chains calling vector `expf`/`erf` ran 20-30% slower so)."""
    if platform.machine().lower() in X86:
        return ("-march=native", "-mprefer-vector-width=512")
    return ("-march=native",)


CPU0_CACHES = Path("/sys/devices/system/cpu/cpu0/cache")
_CACHE_SIZE_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


@functools.cache
def last_level_cache_bytes(caches: Path = CPU0_CACHES) -> int:
    """Bytes of the largest data cache of this machine's first processor, as Linux's sysfs
    reports it (a shared L3: 32 MiB on a Zen 3 core complex, 480 MiB on a 2-vCPU Xeon
    virtual machine); 0 where it cannot be read. Code generation sizes cache-dependent
    choices with it, for the machine that builds."""
    largest = 0
    for index in caches.glob("index*"):
        try:
            kind = (index / "type").read_text().strip()
            size = (index / "size").read_text().strip()
        except OSError:
            continue
        unit = _CACHE_SIZE_UNITS.get(size[-1:].upper(), 1)
        digits = size.rstrip("KMGkmg")
        if kind != "Instruction" and digits.isdigit():
            largest = max(largest, int(digits) * unit)
    return largest


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


def trusted_cache_dir() -> Path:
    """`cache_dir()`, created (mode 0700) if missing, once checked to be this user's alone;
    CompileError otherwise (another user could plant libraries in it)."""
    root = cache_dir()
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as e:
        raise CompileError(
            f"cannot use the build cache {root} ($MDSL_CACHE_DIR): {e.strerror or e}"
        ) from None
    reason = untrusted_reason(root)
    if reason is not None:
        raise CompileError(
            f"refusing the build cache {root}: {reason}; another user could plant libraries "
            "in it that would run as you. Set $MDSL_CACHE_DIR to a folder only you can write"
        )
    return root


def _split_command(text: str, what: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError as e:
        raise CompileError(f"{what} is not a valid command line ({e}): {text!r:.80}") from None


def find_compiler() -> str | None:
    """The C compiler: $CC, else cc, gcc or clang on PATH."""
    for candidate in (os.environ.get("CC"), "cc", "gcc", "clang"):
        words = _split_command(candidate, "$CC") if candidate else []
        if words and shutil.which(words[0]):
            return candidate
    return None


@functools.lru_cache(maxsize=8)
def _compiler_version(cc: str) -> str:
    try:
        out = subprocess.run(
            [*_split_command(cc, "$CC"), "--version"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise CompileError(f"C compiler {cc!r} does not run: {e}") from None
    return out.stdout.splitlines()[0] if out.stdout else cc


@functools.lru_cache(maxsize=1)
def blas_paths() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(include dirs, link args) for the BLAS shipped by scipy-openblas32, found where its
    `get_include_dir`, `get_lib_dir` and `get_library` look, without importing it: its
    import reads the package metadata for its version, 15 ms of a warm compile."""
    spec = importlib.util.find_spec("scipy_openblas32")
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    lib_dir = os.path.join(folders[0], "lib") if folders else ""
    names = os.listdir(lib_dir) if os.path.isdir(lib_dir) else []
    found = sorted(n for n in names if n.startswith("libscipy_openblas"))
    if not found:
        raise CompileError("the scipy-openblas32 package (mdsl's BLAS) is not installed")
    library = os.path.splitext(found[0])[0][3:]  # libscipy_openblas.so -> scipy_openblas
    return (os.path.join(folders[0], "include"),), (
        f"-L{lib_dir}",
        f"-l{library}",
        f"-Wl,-rpath,{lib_dir}",
    )


def default_toolchain(march_native: bool = True, extra_flags: tuple[str, ...] = ()) -> Toolchain:
    cc = find_compiler()
    if cc is None:
        raise CompileError(
            "no C compiler found (set $CC, or install gcc); backend='numba' needs none"
        )
    includes, links = blas_paths()
    flags = DEFAULT_FLAGS + (native_flags() if march_native else ()) + tuple(extra_flags)
    env_flags = tuple(_split_command(os.environ.get("MDSL_CFLAGS", ""), "$MDSL_CFLAGS"))
    return Toolchain(cc, flags + env_flags, includes, links)


RECORD_VERSION = "record1"  # in the cache key: entries built before records are not reused


def build_record(source: str | dict[str, str]) -> bytes:
    """The marker a library built from `source` contains (the source's SHA-256; of
    several units' names and texts), so a library can be matched to its source without
    loading it."""
    text = source if isinstance(source, str) else _joined(source)
    return f"mdsl-build-record sha256={hashlib.sha256(text.encode()).hexdigest()}".encode()


def _joined(units: dict[str, str]) -> str:
    """One text for `units` (one unit: its text, so a split-capable caller keys and
    records a single unit as before)."""
    if len(units) == 1:
        return next(iter(units.values()))
    return "".join(f"\0{name}\0{text}" for name, text in units.items())


def _with_build_record(source: str, record: bytes) -> str:
    return (
        f"{source}\n/* which source this library was built from (checked by load_executable) */\n"
        f'__attribute__((used)) const char mdsl_build_record[] = "{record.decode()}";\n'
    )


def cache_key(source: str | dict[str, str], toolchain: Toolchain, file_name: str) -> str:
    """The cache entry's folder name: anyone with the source and compiler can compute it,
    which is why entries are trusted by owner, never by name or sidecar."""
    text = source if isinstance(source, str) else _joined(source)
    key_text = "\0".join((toolchain.identity(), RECORD_VERSION, file_name, text))
    return hashlib.sha256(key_text.encode()).hexdigest()[:32]


UNOPTIMIZED = ("-O0",)  # the flags that follow the toolchain's for a split build's schedule


def build_library(source: str | dict[str, str], toolchain: Toolchain, name: str = "graph") -> Path:
    """The path of a shared library built from `source` (from the cache when present):
    one C source, or several translation units by file name (`render_units`), the first
    the schedule, compiled with UNOPTIMIZED, the others optimized, all in parallel, then
    linked into the one library."""
    file_name = f"{file_stem(name)}.so"  # in the key: an entry holds exactly this file
    key = cache_key(source, toolchain, file_name)
    entry = trusted_cache_dir() / key
    library = entry / file_name
    problem = _entry_problem(entry, library)
    if problem is None:
        _log.info("C library %s: cache hit (%s)", file_name, key)
        return library
    if problem is not _MISSING:
        _log.warning(
            "C library %s: cache entry %s is %s; building it again", file_name, key, problem
        )
    units = {"graph.c": source} if isinstance(source, str) else source
    lines = sum(text.count("\n") for text in units.values())
    what = f"{lines} lines" + (f" in {len(units)} units" if len(units) > 1 else "")
    with (
        timed(_log, "C compile %s (%s, cache miss %s)", file_name, what, key),
        waiting(f"C compile {file_name} ({what})"),
    ):
        _build_entry(units, toolchain, entry, library.name)
    return library


_MISSING = "missing"


def _entry_problem(entry: Path, library: Path) -> str | None:
    """Why `entry` holds no library to use (_MISSING: none was built), or None when it
    does: this user's alone and matching its sidecar."""
    digest_file = entry / "library.sha256"
    if not (library.is_file() and digest_file.is_file()):
        return _MISSING if not entry.exists() else "incomplete"
    if any(untrusted_reason(p) for p in (entry, library, digest_file)):
        return "not this user's alone"  # planted or opened up by someone else: never loaded
    try:  # a damaged sidecar (any bytes) means a damaged entry, never a crash
        recorded = digest_file.read_bytes().decode("ascii").strip()
        if _sha256(library) != recorded:
            return "damaged (the library does not match its SHA-256)"
        problem = elf_problem(library)
        return None if problem is None else f"damaged (the library is {problem})"
    except (OSError, UnicodeDecodeError):
        return "damaged (its SHA-256 sidecar is unreadable)"


def _entry_ok(entry: Path, library: Path) -> bool:
    return _entry_problem(entry, library) is None


def elf_problem(path: Path) -> str | None:
    """Why `path` is not a whole ELF shared object (truncated, say), or None. dlopen of
    a truncated library can die of SIGBUS, so this is checked before loading."""
    with open(path, "rb") as f:
        head = f.read(64)
        size = os.fstat(f.fileno()).st_size
    if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
        return "not a 64-bit little-endian ELF file"
    phoff, shoff = int.from_bytes(head[32:40], "little"), int.from_bytes(head[40:48], "little")
    phentsize, phnum = int.from_bytes(head[54:56], "little"), int.from_bytes(head[56:58], "little")
    shentsize, shnum = int.from_bytes(head[58:60], "little"), int.from_bytes(head[60:62], "little")
    if phoff + phentsize * phnum > size or shoff + shentsize * shnum > size:
        return f"truncated ({size} bytes, its headers reach past the end)"
    with open(path, "rb") as f:
        f.seek(phoff)
        table = f.read(phentsize * phnum)
    for i in range(phnum):
        header = table[i * phentsize : (i + 1) * phentsize]
        offset, filesz = (
            int.from_bytes(header[8:16], "little"),
            int.from_bytes(header[32:40], "little"),
        )
        if offset + filesz > size:
            return f"truncated ({size} bytes, segment {i} reaches {offset + filesz})"
    return None


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _build_entry(units: dict[str, str], tc: Toolchain, entry: Path, library_name: str) -> None:
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=entry.parent))  # mode 0700, ours
    try:
        out = tmp / library_name
        record = build_record(_joined(units))
        if len(units) == 1:
            [source] = units.values()
            src = tmp / "graph.c"
            src.write_text(_with_build_record(source, record), encoding="utf-8")
            _run_compiler(_command(tc, [str(src)], out, link=True), source, src, out)
            (tmp / "graph.c").replace(tmp / "source.c")
        else:
            _compile_and_link(units, tc, tmp, out, record)
        (tmp / "library.sha256").write_text(_sha256(out))
        _publish(tmp, entry)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _compile_and_link(units: dict[str, str], tc: Toolchain, tmp: Path, out: Path, record) -> None:
    """Each unit compiled to an object at once (the first, the schedule, UNOPTIMIZED),
    then the objects linked into `out`; the sources stay in the entry beside it."""
    jobs = []
    for i, (name, text) in enumerate(units.items()):
        src = tmp / file_stem(name.removesuffix(".c"))
        src = src.with_suffix(".c")
        src.write_text(_with_build_record(text, record) if i == 0 else text, encoding="utf-8")
        extra = UNOPTIMIZED if i == 0 else ()
        jobs.append((text, src, _command(tc, [str(src)], src.with_suffix(".o"), extra=extra)))
    with concurrent.futures.ThreadPoolExecutor(len(jobs)) as pool:
        results = list(pool.map(lambda job: _compiler_result(job[2]), jobs))
    for (text, src, cmd), result in zip(jobs, results):
        _check(result, cmd, text, src, src.with_suffix(".o"))
    objects = [str(src.with_suffix(".o")) for _, src, _ in jobs]
    schedule = next(iter(units.values()))  # kept, should linking fail
    _run_compiler(_command(tc, objects, out, link=True, compile_flags=False), schedule, None, out)
    for name in objects:
        os.unlink(name)


def _command(
    tc: Toolchain,
    inputs: list[str],
    out: Path,
    link: bool = False,
    extra: tuple[str, ...] = (),
    compile_flags: bool = True,
) -> list[str]:
    """The compiler's command: `inputs` compiled (`-c`) into `out`, or with `link`,
    compiled and linked into the shared library `out` (objects only: `compile_flags`
    False leaves out the include folders)."""
    flags = (
        [*tc.flags, *extra] if link else [f for f in tc.flags if f != "-shared"] + [*extra, "-c"]
    )
    includes = [f"-I{d}" for d in tc.include_dirs] if compile_flags else []
    libraries = [*tc.link_args, "-lm"] if link else []
    return [*_split_command(tc.cc, "$CC"), *flags, *includes, *inputs, "-o", str(out), *libraries]


def _compiler_result(cmd: list[str]) -> subprocess.CompletedProcess | Exception:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        return e


def _run_compiler(cmd: list[str], source: str, src: Path | None, out: Path) -> None:
    _check(_compiler_result(cmd), cmd, source, src, out)


def _check(result, cmd: list[str], source: str, src: Path | None, out: Path) -> None:
    """CompileError (see `_compile_error`) unless the compiler ran and succeeded."""
    if isinstance(result, Exception):
        error = _compile_error(f"C compiler did not run: {result}", source, cmd, src, out, "")
        raise error from result
    if result.returncode != 0:
        message = f"C compiler failed (exit {result.returncode})"
        raise _compile_error(message, source, cmd, src, out, result.stderr)


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
        str(kept) if a == str(src) else str(kept.with_suffix(out.suffix)) if a == str(out) else a
        for a in cmd
    ]
    error = CompileError(
        f"{message}; source kept at {kept}\ncommand: {shlex.join(command)}\n{stderr[-4000:]}"
    )
    error.stderr, error.command, error.source_path = stderr, command, kept
    return error


def _keep_failed_source(source: str) -> Path:
    """`source` written to failed/<hash>.c of the cache, as a new file renamed into place
    (a symlink planted there is replaced, never written through)."""
    folder = trusted_cache_dir() / "failed"
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        reason = untrusted_reason(folder)
        if reason is not None:
            raise CompileError(f"refusing to keep a failed source in {folder}: {reason}")
        path = folder / (hashlib.sha256(source.encode()).hexdigest()[:16] + ".c")
        write_new(path, source.encode("utf-8"), mode=stat.S_IRUSR | stat.S_IWUSR)
    except OSError as e:
        raise CompileError(
            f"cannot keep the failed source in {folder}: {e.strerror or e}"
        ) from None
    return path
