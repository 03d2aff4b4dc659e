"""The build cache and the compiler driver: cache hits, damaged entries rebuilt, concurrent
builds, and CompileError carrying what a user needs to reproduce a failure.

Every test here uses a private cache dir (MDSL_CACHE_DIR under tmp_path): damaging
entries of the shared cache would slow or break other tests. Damage is written as a new
file renamed over the old one, the way a crash or another process would leave it, so a
library this process has loaded keeps its mapping.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import threading

import cffi
import numpy as np
import pytest

import mdsl
from mdsl.codegen import toolchain

SOURCE = "int mdsl_answer(void) { return 42; }\n"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("MDSL_CACHE_DIR", str(folder))
    return folder


@pytest.fixture
def compiles(monkeypatch):
    """The number of compiler runs so far (a list: one entry per run)."""
    runs = []
    real_run = subprocess.run

    def counting_run(cmd, *args, **kwargs):
        if "-o" in cmd:
            runs.append(cmd)
        return real_run(cmd, *args, **kwargs)

    monkeypatch.setattr(toolchain.subprocess, "run", counting_run)
    return runs


def _tc() -> toolchain.Toolchain:
    return toolchain.default_toolchain(march_native=False)


def _answer(library) -> int:
    ffi = cffi.FFI()
    ffi.cdef("int mdsl_answer(void);")
    return ffi.dlopen(str(library)).mdsl_answer()


def _replace_bytes(path, data: bytes) -> None:
    """Write `data` as `path` through a rename (never in place: see the module doc)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- hits and layout ----------------------------------------------------------------------------
def test_a_second_build_of_the_same_source_is_a_cache_hit(cache, compiles):
    first = toolchain.build_library(SOURCE, _tc(), "answer")
    second = toolchain.build_library(SOURCE, _tc(), "answer")
    assert first == second and len(compiles) == 1
    assert first.parent.parent == cache and first.name == "answer.so"
    entry = sorted(p.name for p in first.parent.iterdir())
    assert entry == ["answer.so", "library.sha256", "source.c"]
    assert (first.parent / "library.sha256").read_text().strip() == _sha(first)
    kept = (first.parent / "source.c").read_text()
    assert kept.startswith(SOURCE) and toolchain.build_record(SOURCE).decode() in kept
    assert toolchain.build_record(SOURCE) in first.read_bytes()
    assert not [p for p in cache.iterdir() if p.name.startswith(".")]  # no temporary folders
    assert _answer(first) == 42


@pytest.mark.parametrize(
    "change",
    [
        lambda tc: (SOURCE + "\n", tc, "answer"),
        lambda tc: (
            SOURCE,
            toolchain.Toolchain(tc.cc, (*tc.flags, "-O1"), tc.include_dirs, tc.link_args),
            "answer",
        ),
        lambda tc: (SOURCE, tc, "other_name"),
    ],
    ids=["source", "flags", "library-name"],
)
def test_source_flags_and_library_name_are_in_the_key(cache, compiles, change):
    tc = _tc()
    first = toolchain.build_library(SOURCE, tc, "answer")
    second = toolchain.build_library(*change(tc))
    assert first.parent != second.parent and len(compiles) == 2
    assert first.is_file() and second.is_file()


def test_the_same_source_under_two_names_gives_two_loadable_libraries(cache):
    """Graph names that render to the same C (comments sanitize both) each get a file."""
    a = toolchain.build_library(SOURCE, _tc(), "x*/")
    b = toolchain.build_library(SOURCE, _tc(), "x* /")
    assert a.is_file() and b.is_file() and a != b


def test_library_file_names_are_sanitized(cache):
    library = toolchain.build_library(SOURCE, _tc(), "../../ñ\n*/evil")
    assert library.parent.parent == cache
    assert library.name == "_" * 10 + "evil.so"


# -- damaged entries ----------------------------------------------------------------------------
def _truncate(entry):
    lib = next(entry.glob("*.so"))
    _replace_bytes(lib, lib.read_bytes()[:100])


def _flip_bytes(entry):
    lib = next(entry.glob("*.so"))
    data = bytearray(lib.read_bytes())
    for i in range(len(data) // 2, len(data) // 2 + 8):
        data[i] ^= 0xFF
    _replace_bytes(lib, bytes(data))


def _empty_library(entry):
    _replace_bytes(next(entry.glob("*.so")), b"")


def _wrong_sidecar(entry):
    _replace_bytes(entry / "library.sha256", b"0" * 64)


def _binary_sidecar(entry):
    _replace_bytes(entry / "library.sha256", bytes(range(256)))


def _no_sidecar(entry):
    (entry / "library.sha256").unlink()


def _no_library(entry):
    next(entry.glob("*.so")).unlink()


DAMAGE = [
    _truncate,
    _flip_bytes,
    _empty_library,
    _wrong_sidecar,
    _binary_sidecar,
    _no_sidecar,
    _no_library,
]


@pytest.mark.parametrize("damage", DAMAGE, ids=[d.__name__.strip("_") for d in DAMAGE])
def test_a_damaged_entry_is_detected_and_rebuilt(cache, compiles, damage):
    library = toolchain.build_library(SOURCE, _tc(), "answer")
    good = _sha(library)
    damage(library.parent)
    rebuilt = toolchain.build_library(SOURCE, _tc(), "answer")
    assert rebuilt == library and len(compiles) == 2
    assert _sha(rebuilt) == good  # the build is reproducible: same bytes as before
    assert (rebuilt.parent / "library.sha256").read_text().strip() == good
    assert _answer(rebuilt) == 42
    assert sorted(p.name for p in cache.iterdir()) == [library.parent.name]  # no leftovers


def test_a_damaged_library_of_a_compiled_graph_is_rebuilt_and_runs(cache):
    with mdsl.Graph("damaged") as g:
        x = g.input("x", (8,))
        g.output(mdsl.ops.tanh(x) * 3.0, "y")
    mdsl.compile(g, backend="c")
    [library] = cache.rglob("damaged.so")
    _flip_bytes(library.parent)
    assert (library.parent / "library.sha256").read_text().strip() != _sha(library)
    exe = mdsl.compile(g, backend="c")
    assert (library.parent / "library.sha256").read_text().strip() == _sha(library)
    x = np.linspace(-2, 2, 8, dtype=np.float32)
    np.testing.assert_allclose(exe(x=x)["y"], np.tanh(x) * 3.0, rtol=1e-6)


def test_concurrent_builds_of_one_source_publish_one_good_entry(cache, compiles):
    source = SOURCE + "/* concurrent */\n"
    results, errors = [], []
    barrier = threading.Barrier(4)

    def build():
        try:
            barrier.wait()
            results.append(toolchain.build_library(source, _tc(), "answer"))
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=build) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(set(results)) == 1
    [entry] = cache.iterdir()  # one entry; losers' temporary folders are gone
    assert (entry / "library.sha256").read_text().strip() == _sha(results[0])
    assert _answer(results[0]) == 42
    assert 1 <= len(compiles) <= 4


# -- several units ------------------------------------------------------------------------------
UNITS = {
    "answer.c": "int mdsl_half(void);\nint mdsl_answer(void) { return 2 * mdsl_half(); }\n",
    "answer_kernels1.c": "int mdsl_half(void) { return 21; }\n",
}


def test_units_are_compiled_apart_and_linked_into_one_library(cache, compiles):
    library = toolchain.build_library(UNITS, _tc(), "answer")
    assert _answer(library) == 42
    objects = [c for c in compiles if "-c" in c]
    assert len(objects) == 2 and len(compiles) == 3  # two objects, one link
    schedule, kernels = (next(c for c in objects if c[c.index("-o") - 1].endswith(n))
                         for n in ("answer.c", "answer_kernels1.c"))  # fmt: skip
    assert schedule[-3:-2] != ["-O3"] and "-O0" in schedule[schedule.index("-O3") :]
    assert "-O0" not in kernels and "-shared" not in kernels
    assert sorted(p.name for p in library.parent.iterdir()) == [
        "answer.c",
        "answer.so",
        "answer_kernels1.c",
        "library.sha256",
    ]
    assert toolchain.build_record(UNITS) in library.read_bytes()
    assert toolchain.build_record(UNITS) != toolchain.build_record(UNITS["answer.c"])
    assert toolchain.build_library(UNITS, _tc(), "answer") == library and len(compiles) == 3


def test_one_unit_is_keyed_and_recorded_as_its_source(cache, compiles):
    one = {"answer.c": SOURCE}
    assert toolchain.build_library(one, _tc(), "answer") == toolchain.build_library(
        SOURCE, _tc(), "answer"
    )
    assert len(compiles) == 1 and toolchain.build_record(one) == toolchain.build_record(SOURCE)


@pytest.mark.parametrize(
    "units",
    [
        {**UNITS, "answer_kernels1.c": UNITS["answer_kernels1.c"] + "/* edited */\n"},
        {"answer.c": UNITS["answer.c"], "answer_kernels2.c": UNITS["answer_kernels1.c"]},
    ],
    ids=["a kernel unit edited", "a unit renamed"],
)
def test_every_unit_and_its_name_is_in_the_key(cache, compiles, units):
    first = toolchain.build_library(UNITS, _tc(), "answer")
    second = toolchain.build_library(units, _tc(), "answer")
    assert first != second and len(compiles) == 6 and _answer(second) == 42


@pytest.mark.parametrize("damage", DAMAGE, ids=[d.__name__.strip("_") for d in DAMAGE])
def test_a_damaged_entry_of_units_is_a_logged_miss_and_rebuilt(cache, compiles, damage, caplog):
    library = toolchain.build_library(UNITS, _tc(), "answer")
    good = _sha(library)
    damage(library.parent)
    with caplog.at_level("WARNING", logger="mdsl.codegen.toolchain"):
        rebuilt = toolchain.build_library(UNITS, _tc(), "answer")
    [warning] = [r for r in caplog.records if r.name == "mdsl.codegen.toolchain"]
    assert library.parent.name in warning.getMessage()
    assert "building it again" in warning.getMessage()
    assert rebuilt == library and len(compiles) == 6 and _sha(rebuilt) == good
    assert _answer(rebuilt) == 42


def test_a_failing_unit_is_a_compile_error_with_its_source_and_command(cache):
    units = {**UNITS, "answer_kernels1.c": "int mdsl_half(void) { return undeclared_half; }\n"}
    with pytest.raises(mdsl.CompileError) as info:
        toolchain.build_library(units, _tc(), "answer")
    error = info.value
    assert "undeclared_half" in error.stderr
    assert error.source_path.read_text() == units["answer_kernels1.c"]
    rerun = subprocess.run(error.command, capture_output=True, text=True)
    assert rerun.returncode != 0 and "undeclared_half" in rerun.stderr
    assert [p.name for p in cache.iterdir()] == ["failed"]  # nothing half-written


def test_units_that_do_not_link_are_a_compile_error(cache):
    hidden = '__attribute__((visibility("hidden"))) '  # as the generated kernels are declared
    units = {"answer.c": hidden + UNITS["answer.c"], "answer_kernels1.c": "int mdsl_other;\n"}
    with pytest.raises(mdsl.CompileError, match="mdsl_half") as info:
        toolchain.build_library(units, _tc(), "answer")
    assert info.value.source_path.read_text() == units["answer.c"]
    assert [p.name for p in cache.iterdir()] == ["failed"]


# -- failures -----------------------------------------------------------------------------------
def test_invalid_c_is_a_compile_error_with_stderr_command_and_kept_source(cache):
    bad = "int broken(void) { return undeclared_symbol; }\n"
    with pytest.raises(mdsl.CompileError) as info:
        toolchain.build_library(bad, _tc(), "broken")
    error = info.value
    assert "undeclared_symbol" in error.stderr and "error" in error.stderr
    assert error.source_path.read_text() == bad
    assert error.source_path.parent == cache / "failed"
    assert str(error.source_path) in error.command and "-o" in error.command
    assert error.command[0] == _tc().cc.split()[0]
    assert "undeclared_symbol" in str(error) and str(error.source_path) in str(error)
    assert "command: " in str(error)
    # the command is re-runnable as reported: it names the kept source, not a temp folder
    rerun = subprocess.run(error.command, capture_output=True, text=True)
    assert rerun.returncode != 0 and "undeclared_symbol" in rerun.stderr
    assert [p.name for p in cache.iterdir()] == ["failed"]  # nothing half-written


def test_a_bad_flag_through_mdsl_compile_is_a_compile_error(cache, monkeypatch):
    monkeypatch.setenv("MDSL_CFLAGS", "-fno-such-mdsl-option")
    with mdsl.Graph("flagged") as g:
        g.output(g.input("x", (2,)) + 1.0, "y")
    with pytest.raises(mdsl.CompileError) as info:
        mdsl.compile(g, backend="c")
    error = info.value
    assert "-fno-such-mdsl-option" in error.stderr
    assert "-fno-such-mdsl-option" in error.command
    assert "mdsl_run" in error.source_path.read_text()  # the generated module, kept


def test_a_compiler_that_cannot_start_is_a_compile_error(cache, monkeypatch):
    missing = toolchain.Toolchain("/nonexistent/mdsl-cc", ("-O2",), (), ())
    monkeypatch.setattr(toolchain, "_compiler_version", lambda cc: cc)
    with pytest.raises(mdsl.CompileError, match="did not run") as info:
        toolchain.build_library(SOURCE, missing, "answer")
    assert info.value.source_path.read_text() == SOURCE


@pytest.mark.parametrize(
    "machine, wanted",
    [
        ("x86_64", ("-march=native", "-mprefer-vector-width=512")),
        ("AMD64", ("-march=native", "-mprefer-vector-width=512")),
        ("aarch64", ("-march=native",)),  # GCC for Arm has no -mprefer-vector-width
    ],
)
def test_native_flags_ask_x86_compilers_for_512_bit_loops(monkeypatch, machine, wanted):
    monkeypatch.setattr(toolchain.platform, "machine", lambda: machine)
    monkeypatch.delenv("MDSL_CFLAGS", raising=False)
    assert toolchain.native_flags() == wanted
    assert toolchain.default_toolchain().flags[-len(wanted) :] == wanted
    assert "-mprefer-vector-width=512" not in toolchain.default_toolchain(march_native=False).flags


def test_blas_paths_are_those_the_blas_package_gives():
    """Found without importing scipy_openblas32, as its own functions find them."""
    import sys

    blas_was_imported = "scipy_openblas32" in sys.modules
    toolchain.blas_paths.cache_clear()
    includes, links = toolchain.blas_paths()
    assert blas_was_imported or "scipy_openblas32" not in sys.modules
    import scipy_openblas32 as blas

    assert [os.path.realpath(d) for d in includes] == [os.path.realpath(blas.get_include_dir())]
    lib_dir = os.path.realpath(blas.get_lib_dir())
    assert [os.path.realpath(a[2:]) for a in links if a.startswith("-L")] == [lib_dir]
    assert f"-l{blas.get_library()}" in links
