"""`mdsl.emit(g, target, out_dir)`: the written C builds by hand (its Makefile, the system
compiler) into a library that computes what the interpreter computes."""

from __future__ import annotations

import importlib.util
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

import cffi
import numpy as np
import pytest

import mdsl
from mdsl.codegen import emit as emit_module
from mdsl.codegen import onednn
from mdsl.codegen.custom_c import HEADER_FILE
from mdsl.codegen.toolchain import default_toolchain
from tests.op_sandbox import restored_registries

needs_cc = pytest.mark.skipif(
    shutil.which("cc") is None or shutil.which("make") is None, reason="needs cc and make"
)


@pytest.fixture(scope="module")
def module_cache(tmp_path_factory):
    """One build cache for this module's tests (none of them damages cache entries)."""
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(autouse=True)
def private_cache(module_cache, monkeypatch):
    monkeypatch.setenv("MDSL_CACHE_DIR", str(module_cache))


_FFI = cffi.FFI()
_FFI.cdef(
    """
    int mdsl_run(void *const *inputs, void *const *outputs, const void *const *consts,
                 char *arena, void *callback);
    """
)


def block_graph():
    """GEMM + GELU epilogue, layer norm, softmax: three kinds of kernels and constants."""
    with mdsl.Graph("block") as g:
        x = g.input("x", ("N", 16))
        h = mdsl.ops.gelu(x @ mdsl.param("w", (16, 24), seed=1) + mdsl.param("b", (24,), seed=2))
        n = mdsl.ops.layer_norm(h, mdsl.param("s", (24,), seed=3), mdsl.param("t", (24,), seed=4))
        g.output(mdsl.ops.softmax(n * 2.0), "y")
    return g


def run_built_library(folder, stem, plan_inputs, outputs):
    """Call `mdsl_run` of the library `make` built in `folder`."""
    lib = _FFI.dlopen(str(folder / f"{stem}.so"))
    consts = [
        np.load(p, allow_pickle=False)
        for p in sorted((folder / "constants").glob("c*.npy"), key=lambda p: int(p.stem[1:]))
    ]
    arena_bytes = int(re.search(r"arena (\d+) bytes", (folder / f"{stem}.c").read_text()).group(1))
    raw = np.zeros(arena_bytes + 64, np.uint8)
    arena = _FFI.cast("char *", raw.ctypes.data + (-raw.ctypes.data) % 64)

    def pointers(arrays):
        return _FFI.new(
            "void *[]", [_FFI.cast("void *", a.ctypes.data) for a in arrays] or [_FFI.NULL]
        )

    status = lib.mdsl_run(
        pointers(plan_inputs), pointers(outputs), pointers(consts), arena, _FFI.NULL
    )
    assert status == 0


@needs_cc
def test_emitted_c_builds_standalone_and_computes_what_the_interpreter_does(tmp_path):
    g = block_graph()
    files = mdsl.emit(g, target="c", out_dir=tmp_path / "out", symbols={"N": 5})
    names = sorted(str(p.relative_to(tmp_path / "out")) for p in files)
    constants = [n for n in names if n.startswith("constants/")]
    assert names == ["Makefile", "README.md", "block.c", *constants] and len(constants) >= 4
    build = subprocess.run(["make", "-C", str(tmp_path / "out")], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    x = np.random.default_rng(0).normal(size=(5, 16)).astype(np.float32)
    y = np.empty((5, 24), np.float32)
    run_built_library(tmp_path / "out", "block", [x], [y])
    np.testing.assert_allclose(y, mdsl.interpret(g, {"x": x})["y"], rtol=1e-4, atol=1e-6)


def test_emitted_source_is_what_compile_builds_and_the_readme_maps_kernels_to_nodes(tmp_path):
    g = block_graph()
    mdsl.emit(g, out_dir=tmp_path, symbols={"N": 5})
    exe = mdsl.compile(g, backend="c", specialize=True)  # a variant for N = 5, as emitted
    exe(x=np.zeros((5, 16), np.float32))
    assert (tmp_path / "block.c").read_text() == exe.sources["block.c"]
    readme = (tmp_path / "README.md").read_text()
    rows = re.findall(r"^\| (\d+) \| `(\w+)` \| ([^|]+) \| (.*) \|$", readme, re.M)
    listed = [
        (name, kind.strip(), tuple(re.findall(r"`([^`]+)`", nodes)))
        for _, name, kind, nodes in rows
    ]
    assert listed == [(k.name, k.kind, k.nodes) for k in exe.kernels]
    assert "| `inputs[0]` | `x` | float32 | 80 |" in readme
    assert "make" in readme and "block.so" in readme


def test_symbols_are_required_and_checked(tmp_path):
    g = block_graph()
    with pytest.raises(mdsl.CompileError, match=r"symbolic dims N: .*symbols=\{'N': \.\.\.\}"):
        mdsl.emit(g, out_dir=tmp_path)
    with pytest.raises(mdsl.CompileError, match="symbols M are not dims"):
        mdsl.emit(g, out_dir=tmp_path, symbols={"N": 2, "M": 3})
    with pytest.raises(mdsl.CompileError, match="non-negative ints"):
        mdsl.emit(g, out_dir=tmp_path, symbols={"N": "2"})
    assert not any(tmp_path.iterdir())


def test_unknown_target_lists_the_known_ones(tmp_path):
    with pytest.raises(
        mdsl.CompileError, match=r"unknown emit target 'cuda'; known: .*ascendc, c, numba"
    ):
        mdsl.emit(block_graph(), target="cuda", out_dir=tmp_path, symbols={"N": 1})


@pytest.mark.skipif(
    importlib.util.find_spec("mdsl.codegen.numba_target") is None, reason="no numba target yet"
)
def test_numba_target_writes_the_module_the_numba_backend_loads(tmp_path):
    g = block_graph()
    files = mdsl.emit(g, target="numba", out_dir=tmp_path, symbols={"N": 5})
    assert {"block.py", "README.md"} <= {p.name for p in files}
    exe = mdsl.compile(g, backend="numba", specialize=True)
    exe(x=np.zeros((5, 16), np.float32))
    assert (tmp_path / "block.py").read_text() == exe.sources["block.py"]
    assert f"| 1 | `{exe.kernels[0].name}` |" in (tmp_path / "README.md").read_text()


def test_ascendc_target_emits_or_says_it_is_missing(tmp_path):
    try:
        files = mdsl.emit(block_graph(), target="ascendc", out_dir=tmp_path, symbols={"N": 2})
    except mdsl.CompileError as e:
        assert "emit target 'ascendc' is not available" in str(e)
    else:
        assert files and all(p.is_file() and tmp_path in p.parents for p in files)


def test_registered_targets_write_inside_out_dir_only(tmp_path, monkeypatch):
    monkeypatch.setattr(emit_module, "_TARGETS", dict(emit_module._TARGETS))
    emit_module.register_target("listing", lambda g: {"nodes.txt": "\n".join(n.name for n in g)})
    (path,) = mdsl.emit(block_graph(), target="listing", out_dir=tmp_path, symbols={"N": 2})
    assert path == tmp_path / "nodes.txt" and "Softmax" in path.read_text()
    emit_module.register_target("escape", lambda g: {"../outside.txt": "x"})
    with pytest.raises(mdsl.CompileError, match="outside out_dir"):
        mdsl.emit(block_graph(), target="escape", out_dir=tmp_path / "in", symbols={"N": 2})
    assert not (tmp_path / "outside.txt").exists()


@needs_cc
def test_hostile_graph_and_node_names_stay_in_comments_and_file_names(tmp_path):
    with mdsl.Graph("../x */ #define N 0\n") as g:
        x = g.input("x */ evil(); /* y", (3,))
        y = mdsl.ops.exp(x, name="n|`\n#include <x>")
        g.output(y, "y */ z")
    files = mdsl.emit(g, out_dir=tmp_path)
    assert all(p.parent == tmp_path for p in files)
    (source,) = [p for p in files if p.suffix == ".c"]
    assert source.name == "___x_____define_N_0_.c"
    text = source.read_text()
    assert "evil(); / *" in text  # inside comments, defused
    assert not re.search(r"^\s*(evil|#include <x>|#define N)", text, re.M)
    readme = (tmp_path / "README.md").read_text()
    assert all(
        line.count("|") - line.count("\\|") in (0, 5)
        for line in readme.splitlines()
        if line.startswith("|")
    )
    assert subprocess.run(["make", "-C", str(tmp_path)], capture_output=True).returncode == 0


@needs_cc
def test_a_graph_with_a_custom_c_op_emits_its_header_and_builds(tmp_path):
    with restored_registries():

        @mdsl.op_proto("Clamp01", inputs={"x": "float32"}, outputs={"y": "float32"})
        def clamp01(x):
            return x

        mdsl.register_op_impl(
            "Clamp01",
            backend="c",
            symbol="clamp01",
            source="""
int clamp01(const mdsl_tensor *in, int ni, mdsl_tensor *out, int no, const double *a, int na) {
    const float *x = in[0].data; float *y = out[0].data;
    for (int64_t i = 0; i < in[0].size; i++) y[i] = x[i] < 0 ? 0 : (x[i] > 1 ? 1 : x[i]);
    return 0;
}""",
        )
        with mdsl.Graph("clamp") as g:
            g.output(clamp01(g.input("x", (6,)) * 0.5), "y")
        mdsl.emit(g, out_dir=tmp_path)
    assert "mdsl_tensor" in (tmp_path / HEADER_FILE).read_text()
    assert subprocess.run(["make", "-C", str(tmp_path)], capture_output=True).returncode == 0
    x = np.array([-2, -0.5, 0.5, 1, 1.5, 4], np.float32)
    y = np.empty(6, np.float32)
    run_built_library(tmp_path, "clamp", [x], [y])
    np.testing.assert_array_equal(y, np.clip(x * 0.5, 0, 1))


needs_onednn = pytest.mark.skipif(
    onednn.library_path() is None, reason="oneDNN (onednn-cpu-gomp) is not installed"
)


def conv_graph():
    w = np.random.default_rng(3).standard_normal((16, 16, 3, 3)).astype(np.float32)
    with mdsl.Graph("convnet") as g:
        x = g.input("x", (1, 16, 9, 9))
        g.output(mdsl.ops.relu(mdsl.ops.conv2d(x, g.const("w", w), pads=1)), "y")
    return g


@needs_cc
@needs_onednn
def test_a_makefile_linking_onednn_finds_it_where_it_builds_and_the_library_computes(tmp_path):
    g = conv_graph()
    mdsl.emit(g, out_dir=tmp_path)
    assert "mdsl_dnnl_conv_run(" in (tmp_path / "convnet.c").read_text()
    makefile = (tmp_path / "Makefile").read_text()
    here = onednn.library_path()  # no path of the emitting machine's oneDNN
    assert str(here) not in makefile
    assert not {f"-L{here.parent}", f"-Wl,-rpath,{here.parent}"} & set(makefile.split())
    assert '"$DNNL_DIR"' in (tmp_path / "README.md").read_text()
    no_python = subprocess.run(["make", "-C", str(tmp_path), "PYTHON=true"], capture_output=True)
    assert no_python.returncode != 0 and b"libdnnl.so.3 not found" in no_python.stderr
    build = subprocess.run(
        ["make", "-C", str(tmp_path), f"PYTHON={sys.executable}"], capture_output=True, text=True
    )
    assert build.returncode == 0, build.stderr
    assert f"-L{onednn.library_path().parent}" in build.stdout.replace("/./", "/")
    x = np.random.default_rng(0).normal(size=(1, 16, 9, 9)).astype(np.float32)
    y = np.empty((1, 16, 9, 9), np.float32)
    run_built_library(tmp_path, "convnet", [x], [y])
    np.testing.assert_allclose(y, mdsl.interpret(g, {"x": x})["y"], rtol=1e-4, atol=1e-4)


@needs_onednn
def test_the_makefiles_search_for_onednn_is_the_runtimes():
    found = subprocess.run(
        [sys.executable, "-c", onednn.FIND_DIR_PYTHON], capture_output=True, text=True, check=True
    )
    assert (Path(found.stdout.strip()) / onednn.SONAME).resolve() == onednn.library_path()


@needs_cc
def test_the_makefile_asks_for_512_bit_loops_on_x86_as_the_native_build_does(tmp_path):
    mdsl.emit(block_graph(), out_dir=tmp_path, symbols={"N": 5})
    dry = subprocess.run(["make", "-n", "-C", str(tmp_path)], capture_output=True, text=True)
    x86 = platform.machine().lower() in ("x86_64", "amd64")
    assert ("-mprefer-vector-width=512" in dry.stdout) == x86
    assert ("-mprefer-vector-width=512" in default_toolchain().flags) == x86
