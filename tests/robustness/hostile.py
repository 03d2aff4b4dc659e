"""Hostile inputs, one probe each; run by `sandbox.run_probe` in a child process.

A probe either returns (its own assertions about the results passed: "ok") or raises.
`main` reports what happened as one JSON line. Probes that must be refused raise the
MdslError themselves (mdsl raises it); probes that must work check their results against
numpy or the interpreter, so a wrong result is an AssertionError ("foreign").
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np

import mdsl
from mdsl import ops

X = np.arange(6, dtype=np.float32).reshape(2, 3)


def tiny_graph(name: str = "tiny", scale: float = 2.0) -> mdsl.Graph:
    with mdsl.Graph(name) as g:
        x = g.input("x", (2, 3))
        g.output(ops.relu(x) * scale + 1.0, "y")
    return g


def tiny_expected(scale: float = 2.0) -> np.ndarray:
    return np.maximum(X, 0) * scale + 1.0


def saved_tiny(folder: Path, name: str = "exe", scale: float = 2.0, **save) -> Path:
    path = folder / name
    mdsl.compile(tiny_graph(f"tiny{int(scale)}", scale), backend="c").save(path, **save)
    return path


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _rewrite_manifest(path: Path, edit, *, sign: bool = True) -> None:
    """Edit the manifest of a saved folder and re-sign it with this user's key (so the
    edit reaches validation) or, with sign=False, give it a plain digest."""
    from mdsl.runtime import saved

    manifest = json.loads((path / "manifest.json").read_text())
    edit(manifest)
    data = json.dumps(manifest).encode()
    (path / "manifest.json").write_bytes(data)
    line = saved.signature_line(data) if sign else f"sha256 {_sha256(data)}\n"
    (path / "manifest.sha256").write_text(line)


def _library_entry(path: Path) -> dict:
    return json.loads((path / "manifest.json").read_text())["variants"][0]["library"]


# -- the build cache ---------------------------------------------------------------------------
EVIL_C = r"""
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void planted(void) {
    FILE *f = fopen(getenv("MDSL_PROBE_MARKER"), "w");
    if (f) { fputs("planted code ran", f); fclose(f); }
}
"""


def build_evil_library(folder: Path) -> Path:
    src, lib = folder / "evil.c", folder / "evil.so"
    src.write_text(EVIL_C)
    subprocess.run(["cc", "-shared", "-fPIC", str(src), "-o", str(lib)], check=True)
    return lib


def _tiny_entry(name: str = "tiny2") -> tuple[Path, str]:
    """(the cache entry folder, the library file name) `tiny_graph` compiles to."""
    from mdsl.codegen import toolchain
    from mdsl.targets.c.backend import plan_variant
    from mdsl.targets.c.render import render_c

    source = render_c(plan_variant(mdsl.optimize(tiny_graph(name)), {}))
    file_name = f"{name}.so"
    tc = toolchain.default_toolchain()
    return toolchain.cache_dir() / toolchain.cache_key(source, tc, file_name), file_name


def plant_entry(entry: Path, file_name: str, library: Path) -> None:
    entry.mkdir(parents=True, exist_ok=True)
    data = library.read_bytes()
    (entry / file_name).write_bytes(data)
    (entry / "library.sha256").write_text(_sha256(data))


def probe_cache_entry_writable_by_others_is_rebuilt(folder: Path) -> None:
    marker = folder / "marker"
    os.environ["MDSL_PROBE_MARKER"] = str(marker)
    entry, file_name = _tiny_entry()
    plant_entry(entry, file_name, build_evil_library(folder))
    os.chmod(entry, 0o777)
    out = mdsl.compile(tiny_graph("tiny2"), backend="c")(x=X)["y"]
    assert not marker.exists(), "a library in a world-writable entry was loaded"
    np.testing.assert_allclose(out, tiny_expected())


def probe_world_writable_cache_root_is_refused(folder: Path) -> None:
    root = folder / "shared-cache"
    root.mkdir()
    os.chmod(root, 0o1777)
    os.environ["MDSL_CACHE_DIR"] = str(root)
    mdsl.compile(tiny_graph(), backend="c")


def probe_cache_dir_that_is_a_file(folder: Path) -> None:
    (folder / "file").write_text("not a folder")
    os.environ["MDSL_CACHE_DIR"] = str(folder / "file" / "cache")
    mdsl.compile(tiny_graph(), backend="c")


def probe_truncated_cache_library_with_matching_sidecar(folder: Path) -> None:
    mdsl.compile(tiny_graph("tiny3"), backend="c")
    entry, file_name = _tiny_entry("tiny3")
    library = entry / file_name
    half = library.read_bytes()[: library.stat().st_size // 2]
    library.unlink()  # a new inode: the loaded copy stays intact
    library.write_bytes(half)
    (entry / "library.sha256").write_text(_sha256(half))
    # a fresh process would dlopen it: do so in a child of this probe
    code = (
        "import numpy as np\nfrom tests.robustness import hostile as h\n"
        "import mdsl\n"
        "out = mdsl.compile(h.tiny_graph('tiny3'), backend='c')(x=h.X)['y']\n"
        "np.testing.assert_allclose(out, h.tiny_expected())\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=600)


def probe_failed_source_does_not_follow_a_planted_symlink(folder: Path) -> None:
    from mdsl.codegen import toolchain

    victim = folder / "victim.txt"
    victim.write_text("precious")
    source = "this is not C;\n"
    failed = toolchain.cache_dir() / "failed"
    failed.mkdir(parents=True, exist_ok=True)
    planted = failed / (hashlib.sha256(source.encode()).hexdigest()[:16] + ".c")
    if planted.exists() or planted.is_symlink():
        planted.unlink()
    planted.symlink_to(victim)
    with contextlib.suppress(mdsl.CompileError):  # it fails; where its source goes matters
        toolchain.build_library(source, toolchain.default_toolchain(), "bad")
    assert victim.read_text() == "precious", "the failed source was written through a symlink"
    assert not planted.is_symlink() and planted.read_text() == source


def probe_bad_cc_quoting(folder: Path) -> None:
    os.environ["CC"] = 'gcc "-O2'
    mdsl.compile(tiny_graph(), backend="c")


def probe_bad_cflags_quoting(folder: Path) -> None:
    os.environ["MDSL_CFLAGS"] = "-DX='unterminated"
    mdsl.compile(tiny_graph("tiny_flags"), backend="c")


# -- saved executables -------------------------------------------------------------------------
def probe_unsigned_executable_is_refused(folder: Path) -> None:
    path = saved_tiny(folder)
    _rewrite_manifest(path, lambda m: None, sign=False)
    mdsl.load_executable(path)


def probe_foreign_signed_executable_is_refused(folder: Path) -> None:
    path = saved_tiny(folder, key=b"someone else's key")
    mdsl.load_executable(path)


def probe_rewritten_library_and_digests_are_refused(folder: Path) -> None:
    """The attack of the issue: the .so replaced by the attacker's, digests rewritten."""
    marker = folder / "marker"
    os.environ["MDSL_PROBE_MARKER"] = str(marker)
    path = saved_tiny(folder)
    entry = _library_entry(path)
    evil = build_evil_library(folder).read_bytes()
    (path / entry["file"]).write_bytes(evil)

    def edit(m):
        m["variants"][0]["library"]["sha256"] = _sha256(evil)

    _rewrite_manifest(path, edit, sign=False)
    try:
        mdsl.load_executable(path)
    finally:
        assert not marker.exists(), "the planted library ran"


def probe_swapped_library_of_another_graph_even_when_trusted(folder: Path) -> None:
    victim, other = saved_tiny(folder, "a", 2.0), saved_tiny(folder, "b", 3.0)
    data = (other / _library_entry(other)["file"]).read_bytes()
    (victim / _library_entry(victim)["file"]).write_bytes(data)

    def edit(m):
        m["variants"][0]["library"]["sha256"] = _sha256(data)

    _rewrite_manifest(victim, edit, sign=False)
    mdsl.load_executable(victim, trust=True)


def probe_signed_executable_round_trips(folder: Path) -> None:
    path = saved_tiny(folder)
    np.testing.assert_allclose(mdsl.load_executable(path)(x=X)["y"], tiny_expected())


def probe_fifo_member_does_not_hang(folder: Path) -> None:
    path = saved_tiny(folder)
    graph = path / "graph.json"
    graph.unlink()
    os.mkfifo(graph)
    mdsl.load_executable(path)


def probe_fifo_digest_file_does_not_hang(folder: Path) -> None:
    path = saved_tiny(folder)
    (path / "manifest.sha256").unlink()
    os.mkfifo(path / "manifest.sha256")
    mdsl.load_executable(path)


def probe_zip_bomb_member_is_refused(folder: Path) -> None:
    path = folder / "bomb.zip"
    saved_tiny(folder, "src")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for member in (folder / "src").rglob("*"):
            if member.is_file() and member.name != "manifest.sha256":
                z.write(member, member.relative_to(folder / "src").as_posix())
        z.writestr("manifest.sha256", b" " * (1 << 30))  # 1 GiB of spaces, ~1 MB zipped
    mdsl.load_executable(path)


def probe_custom_library_pointing_at_dev_zero(folder: Path) -> None:
    path = saved_tiny(folder)

    def edit(m):
        m["variants"][0]["custom_libraries"] = [{"path": "/dev/zero", "sha256": "0" * 64}]

    _rewrite_manifest(path, edit)
    mdsl.load_executable(path)


def probe_deeply_nested_manifest(folder: Path) -> None:
    path = saved_tiny(folder)
    data = ("[" * 200_000 + "]" * 200_000).encode()
    from mdsl.runtime import saved

    (path / "manifest.json").write_bytes(data)
    (path / "manifest.sha256").write_text(saved.signature_line(data))
    mdsl.load_executable(path)


def probe_manifest_threads_100000(folder: Path) -> None:
    path = saved_tiny(folder)
    _rewrite_manifest(path, lambda m: m.update(threads=100_000))
    mdsl.load_executable(path)


def probe_compile_threads_100000(folder: Path) -> None:
    mdsl.compile(tiny_graph(), backend="c", threads=100_000)


def probe_compile_threads_2_pow_31(folder: Path) -> None:
    mdsl.compile(tiny_graph(), backend="c", threads=2**31)


# -- graph files -------------------------------------------------------------------------------
def probe_graph_json_zip_bomb(folder: Path) -> None:
    """1.5 GB of JSON (whitespace, then a real graph) zipped to about 1.5 MB."""
    path = folder / "bomb.mdsl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z, z.open("graph.json", "w") as f:
        chunk = b" " * (1 << 24)
        for _ in range(96):
            f.write(chunk)
        f.write(tiny_graph().to_json().encode())
    started = time.monotonic()
    try:
        mdsl.load(path)
    finally:
        assert time.monotonic() - started < 60


def probe_graph_with_100k_nodes_loads_in_seconds(folder: Path) -> None:
    with mdsl.Graph("long") as g:
        y = g.input("x", (2, 3))
        for _ in range(100_000):
            y = ops.relu(y)
        g.output(y, "y")
    text = g.to_json()
    started = time.monotonic()
    loaded = mdsl.Graph.from_json(text)
    took = time.monotonic() - started
    assert len(loaded.nodes) == 100_002
    assert took < 120, f"loading 10^5 nodes took {took:.0f} s"  # ~15 s on a loaded machine


def probe_deeply_nested_graph_json(folder: Path) -> None:
    mdsl.Graph.from_json("[" * 100_000 + "]" * 100_000)


def _nested_if_doc(depth: int) -> str:
    """A graph document whose If subgraphs nest `depth` deep (built as JSON: the builder
    refuses to make it)."""
    doc = json.loads(_shallow_if_graph().to_json())
    node = next(n for n in doc["graph"]["nodes"] if n.get("subgraphs"))
    template = json.dumps(node)
    for _ in range(depth):
        inner = json.loads(template)
        inner["subgraphs"]["then_branch"]["nodes"].insert(-1, node)
        node = inner
    for i, n in enumerate(doc["graph"]["nodes"]):
        if n.get("subgraphs"):
            doc["graph"]["nodes"][i] = node
    return json.dumps(doc)


def _shallow_if_graph() -> mdsl.Graph:
    with mdsl.Graph("nest") as g:
        x = g.input("x", (2,))
        g.output(mdsl.cond(x.sum() > 0.0, lambda: x + 1.0, lambda: x * 2.0), "y")
    return g


def probe_200_deep_if_nest_in_a_file(folder: Path) -> None:
    mdsl.Graph.from_json(_nested_if_doc(200))


def probe_40_deep_if_nest_in_a_file(folder: Path) -> None:
    mdsl.Graph.from_json(_nested_if_doc(40))


def probe_200_deep_if_nest_built_in_python(folder: Path) -> None:
    def nest(x, depth):
        if depth == 0:
            return x + 1.0
        return mdsl.cond(x.sum() > 0.0, lambda: nest(x, depth - 1), lambda: x * 2.0)

    with mdsl.Graph("deep") as g:
        x = g.input("x", (2,))
        g.output(nest(x, 200), "y")


def probe_32_deep_if_nest_runs_everywhere(folder: Path) -> None:
    def nest(x, depth):
        if depth == 0:
            return x + 1.0
        return mdsl.cond(x.sum() > 0.0, lambda: nest(x, depth - 1), lambda: x * 2.0)

    with mdsl.Graph("deep32") as g:
        x = g.input("x", (2,))
        g.output(nest(x, 32), "y")
    feeds = {"x": np.ones(2, np.float32)}
    g = mdsl.Graph.from_json(g.to_json())
    for result in (mdsl.interpret(g, feeds), mdsl.compile(g, backend="c")(**feeds)):
        np.testing.assert_array_equal(result["y"], [2.0, 2.0])


def probe_dim_name_with_trailing_newline(folder: Path) -> None:
    mdsl.Dim("N\n")


def probe_hostile_fusion_groups(folder: Path) -> None:
    """A cyclic grouping (a, c in one group, b between them outside): compiled at
    opt_level=0 it must be refused (or computed right), never run with kernels dropped."""
    with mdsl.Graph("cyclic") as g:
        x = g.input("x", (2, 3))
        a = ops.exp(x)
        b = ops.reduce_sum(a, axes=(1,), keepdims=True)
        c = a / b
        g.output(c, "y")
    for node in g:
        if node.op_type in ("Exp", "Div"):
            node.fusion_group = "fg0"
    loaded = mdsl.Graph.from_json(g.to_json())
    out = mdsl.compile(loaded, backend="c", opt_level=0)(x=X)["y"]
    np.testing.assert_allclose(out, np.exp(X) / np.exp(X).sum(1, keepdims=True), rtol=1e-6)


# -- native calls and sizes --------------------------------------------------------------------
def _callback_op(exception: type[BaseException]):
    name = f"Raise{exception.__name__}"

    @mdsl.op_proto(name, inputs={"x": "float32"}, outputs={"y": "float32"})
    def raising(x):
        return x

    def impl(x):
        raise exception("from the callback")

    mdsl.register_op_impl(name, impl, backend="python")
    return raising


def probe_keyboard_interrupt_in_a_callback_propagates(folder: Path) -> None:
    raising = _callback_op(KeyboardInterrupt)
    with mdsl.Graph("interrupt") as g:
        g.output(raising(ops.exp(g.input("x", (2, 3)))) + 1.0, "y")
    exe = mdsl.compile(g, backend="c")
    assert exe.plan.fallbacks, "the op must run as a callback"
    try:
        exe(x=X)
    except KeyboardInterrupt:
        return
    raise AssertionError("KeyboardInterrupt was swallowed")


def probe_three_symbolic_dims_of_2_pow_22(folder: Path) -> None:
    with mdsl.Graph("outer") as g:
        a = g.input("a", ("N", 1, 1))
        b = g.input("b", (1, "M", 1))
        c = g.input("c", (1, 1, "K"))
        g.output((a + b) + c, "y")
    n = 2**22
    mdsl.compile(g, backend="c")(
        a=np.zeros((n, 1, 1), np.float32),
        b=np.zeros((1, n, 1), np.float32),
        c=np.zeros((1, 1, n), np.float32),
    )


def probe_static_dims_past_int64(folder: Path) -> None:
    with mdsl.Graph("huge") as g:
        g.output(g.input("x", (2**40, 2**30)) * 2.0, "y")


def probe_custom_op_int_attr_of_10_pow_400(folder: Path) -> None:
    @mdsl.op_proto(
        "BigAttr",
        inputs={"x": "float32"},
        outputs={"y": "float32"},
        attrs={"k": mdsl.Attr(int, default=1)},
    )
    def big(x, k=1):
        return x

    with mdsl.Graph("big") as g:
        g.output(big(g.input("x", (2,)), k=10**400), "y")


# -- ONNX --------------------------------------------------------------------------------------
def _onnx_add_model(folder: Path) -> Path:
    import onnx
    import onnx.helper as oh
    from onnx import numpy_helper

    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    graph = oh.make_graph(
        [oh.make_node("Add", ["x", "w"], ["y"])],
        "ext",
        [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4, 4])],
        [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4, 4])],
        initializer=[w],
    )
    path = folder / "m.onnx"
    onnx.save(
        oh.make_model(graph),
        path,
        save_as_external_data=True,
        location="w.bin",
        size_threshold=0,
    )
    return path


def probe_onnx_missing_external_data(folder: Path) -> None:
    path = _onnx_add_model(folder)
    (folder / "w.bin").unlink()
    mdsl.frontends.onnx.load(path)


def probe_onnx_external_data_outside_the_folder(folder: Path) -> None:
    import onnx

    path = _onnx_add_model(folder)
    model = onnx.load(path, load_external_data=False)
    for entry in model.graph.initializer[0].external_data:
        if entry.key == "location":
            entry.value = "../../../etc/passwd"
    onnx.save(model, path)
    mdsl.frontends.onnx.load(path)


def probe_onnx_negative_initializer_dims(folder: Path) -> None:
    import onnx
    import onnx.helper as oh
    from onnx import numpy_helper

    t = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "c")
    t.dims[:] = [-1, 6]
    graph = oh.make_graph(
        [oh.make_node("Identity", ["c"], ["y"])],
        "neg",
        [],
        [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
        initializer=[t],
    )
    mdsl.frontends.onnx.load(oh.make_model(graph))


def probe_onnx_if_nest_past_the_parser_limit(folder: Path) -> None:
    """40 nested Ifs, written as raw protobuf (onnx.helper itself cannot build them)."""
    import onnx
    import onnx.helper as oh

    def field(number: int, payload: bytes) -> bytes:
        return _varint(number << 3 | 2) + _varint(len(payload)) + payload

    def graph_with_output_y(nodes: bytes) -> bytes:
        y = oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2]).SerializeToString()
        return nodes + field(2, b"g") + field(12, y)

    leaf = graph_with_output_y(field(1, field(1, b"x") + field(2, b"y") + field(4, b"Identity")))
    graph = leaf
    for _ in range(40):
        branches = b"".join(
            field(5, field(1, name) + _varint(20 << 3) + _varint(5) + field(6, body))
            for name, body in ((b"then_branch", graph), (b"else_branch", leaf))
        )
        graph = graph_with_output_y(
            field(1, field(1, b"c") + field(2, b"y") + field(4, b"If") + branches)
        )
    model = _varint(1 << 3) + _varint(8) + field(7, graph) + field(8, _varint(2 << 3) + _varint(17))
    mdsl.frontends.onnx.load(model)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def probe_onnx_import_time_matmul_chain_is_bounded(folder: Path) -> None:
    """A 1 KB model whose Reshape shape needs forty 1024x1024 MatMuls: the importer must
    not spend minutes on it (the shape stays a run-time value: a DynamicReshape)."""
    import onnx
    import onnx.helper as oh

    value = oh.make_tensor("v", onnx.TensorProto.FLOAT, [1], [0.001])
    nodes = [oh.make_node("ConstantOfShape", ["shp"], ["m0"], value=value)]
    nodes += [oh.make_node("MatMul", [f"m{i}", f"m{i}"], [f"m{i + 1}"]) for i in range(40)]
    nodes += [
        oh.make_node("ReduceSum", ["m40"], ["s"], keepdims=0),
        oh.make_node("Cast", ["s"], ["si"], to=onnx.TensorProto.INT64),
        oh.make_node("Mul", ["si", "zero"], ["z"]),
        oh.make_node("Add", ["z", "minus1"], ["shape"]),
        oh.make_node("Reshape", ["x", "shape"], ["y"]),
    ]
    ints = onnx.TensorProto.INT64
    graph = oh.make_graph(
        nodes,
        "matmuls",
        [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4, 4])],
        [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
        initializer=[
            oh.make_tensor("shp", ints, [2], [1024, 1024]),
            oh.make_tensor("zero", ints, [1], [0]),
            oh.make_tensor("minus1", ints, [1], [-1]),
        ],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    started = time.monotonic()
    try:
        g = mdsl.frontends.onnx.load(model)
    finally:
        assert time.monotonic() - started < 60, "import-time evaluation is unbounded"
    assert any(n.op_type == "DynamicReshape" for n in g.nodes), "the shape was evaluated at import"


def probe_npy_header_lies_about_its_size(folder: Path) -> None:
    with mdsl.Graph("c") as g:
        g.output(g.const("c", np.zeros(4, np.float32)), "c")
    doc = json.loads(g.to_json())
    buf = io.BytesIO()
    np.save(buf, np.zeros(4, np.float32))
    raw = buf.getvalue().replace(b"'shape': (4,), ", b"'shape': (1099511627776,), ")
    node = next(n for n in doc["graph"]["nodes"] if n["op_type"] == "Const")
    node["attrs"]["value"]["array"]["npy"] = base64.b64encode(raw).decode()
    mdsl.Graph.from_json(json.dumps(doc))


# -- generated code: no undefined behaviour, one rule everywhere (docs/generated-code-ub.md) --
BACKENDS = ("c", "numba", "python")
I32 = np.iinfo(np.int32)


def _agree(g: mdsl.Graph, feeds: dict, expected: dict) -> None:
    """Every backend and the interpreter compute `expected` exactly (NaN equal to NaN)."""
    runs = {"interpret": mdsl.interpret(g, feeds)}
    runs.update((b, mdsl.compile(g, backend=b)(**feeds)) for b in BACKENDS)
    for who, out in runs.items():
        for name, want in expected.items():
            got = out[name]
            assert got.dtype == np.asarray(want).dtype, (who, name, got.dtype)
            assert np.array_equal(got, want, equal_nan=got.dtype.kind == "f"), (
                who,
                name,
                got,
                want,
            )


def _int_graph(build, dtype="int32", size=6) -> mdsl.Graph:
    with mdsl.Graph("ints") as g:
        a = g.input("a", (size,), dtype=dtype)
        b = g.input("b", (size,), dtype=dtype)
        for name, t in build(a, b).items():
            g.output(t, name)
    return g


def probe_integer_division_by_zero_and_int_min_by_minus_one(folder: Path) -> None:
    for dtype in (np.int32, np.int64, np.int8):
        lo = np.iinfo(dtype).min
        a = np.array([7, -7, 5, lo, lo, -9], dtype)
        b = np.array([2, 2, 0, -1, 0, 4], dtype)
        g = _int_graph(lambda x, y: {"q": x / y}, np.dtype(dtype).name)
        _agree(g, {"a": a, "b": b}, {"q": np.array([3, -3, 0, lo, 0, -2], dtype)})


def probe_integer_remainder_by_zero_and_int_min_by_minus_one(folder: Path) -> None:
    lo = I32.min
    a = np.array([7, -7, 5, lo, lo, -9], np.int32)
    b = np.array([2, 2, 0, -1, 0, 4], np.int32)
    g = _int_graph(lambda x, y: {"mod": ops.mod(x, y), "fmod": ops.mod(x, y, fmod=True)})
    _agree(
        g,
        {"a": a, "b": b},
        {
            "mod": np.array([1, 1, 0, 0, 0, 3], np.int32),
            "fmod": np.array([1, -1, 0, 0, 0, -1], np.int32),
        },
    )


def probe_signed_overflow_wraps(folder: Path) -> None:
    a = np.array([I32.max, I32.min, I32.max, 3, I32.min, -5], np.int32)
    b = np.array([1, 1, 2, 4, -1, 6], np.int32)
    with np.errstate(over="ignore"):
        expected = {
            "add": a + b,
            "sub": a - b,
            "mul": a * b,
            "neg": -a,
            "abs": np.abs(a),
            "pow": np.power(a, np.array([2, 2, 3, 3, 1, 2], np.int32)),
        }
    with mdsl.Graph("wrap") as g:
        x, y = g.input("a", (6,), dtype="int32"), g.input("b", (6,), dtype="int32")
        e = g.const("e", np.array([2, 2, 3, 3, 1, 2], np.int32))
        for name, t in {
            "add": x + y,
            "sub": x - y,
            "mul": x * y,
            "neg": -x,
            "abs": ops.abs(x),
            "pow": x**e,
        }.items():
            g.output(t, name)
    _agree(g, {"a": a, "b": b}, expected)


def probe_integer_sums_wrap(folder: Path) -> None:
    a = np.full((2, 4), I32.max, np.int32)
    with mdsl.Graph("sum") as g:
        g.output(ops.reduce_sum(g.input("a", (2, 4), dtype="int32"), axes=(1,)), "s")
    _agree(g, {"a": a}, {"s": np.sum(a, axis=1, keepdims=True).astype(np.int32)})


def probe_float_to_int_of_nan_and_out_of_range_saturates(folder: Path) -> None:
    x = np.array([np.nan, 1e20, -1e20, 2.7, -2.7, np.inf], np.float32)
    with mdsl.Graph("cast") as g:
        g.output(ops.cast(g.input("x", (6,)), to="int32"), "i")
    want = np.array([0, I32.max, I32.min, 2, -2, I32.max], np.int32)
    _agree(g, {"x": x}, {"i": want})


def probe_integer_mean_computes_its_fraction_in_float(folder: Path) -> None:
    a = np.array([[-1, -2, -3, -4, -6], [1, 2, 3, 4, 1]], np.int32)
    with mdsl.Graph("mean") as g:
        g.output(ops.reduce_mean(g.input("a", (2, 5), dtype="int32"), axes=(1,)), "m")
    _agree(g, {"a": a}, {"m": np.array([[-3], [2]], np.int32)})


def probe_sign_of_nan_is_nan(folder: Path) -> None:
    x = np.array([np.nan, 0.0, -2.5, 3.0, -0.0], np.float32)
    with mdsl.Graph("sign") as g:
        g.output(ops.sign(g.input("x", (5,))), "s")
    _agree(g, {"x": x}, {"s": np.array([np.nan, 0.0, -1.0, 1.0, 0.0], np.float32)})
    for backend in BACKENDS:  # numpy's sign of -0.0 is +0.0; array_equal cannot tell them apart
        got = mdsl.compile(g, backend=backend)(x=x)["s"]
        assert not np.signbit(got[4]), (backend, got)


def probe_reduce_l2_neither_overflows_nor_underflows(folder: Path) -> None:
    for scale in (1e-30, 1e-20, 1.0, 1e20, 1e30):
        x = (np.arange(8, dtype=np.float32).reshape(2, 4) + 1) * np.float32(scale)
        want = np.sqrt(np.sum(np.square(x.astype(np.float64)), axis=1)).astype(np.float32)
        with mdsl.Graph("l2") as g:
            g.output(ops.reduce_l2(g.input("x", (2, 4)), axes=(1,), keepdims=False), "y")
        for backend in BACKENDS:
            got = mdsl.compile(g, backend=backend)(x=x)["y"]
            np.testing.assert_allclose(got, want, rtol=2e-6, err_msg=f"{backend} at {scale}")
    x = np.array([[np.inf, 1, 1, 1], [np.nan, 1, 1, 1]], np.float32)
    _agree(g, {"x": x}, {"y": np.array([np.inf, np.nan], np.float32)})


EMPTY_AXIS = {  # ONNX: a reduction over no elements gives its identity
    "reduce_sum": 0.0,
    "reduce_prod": 1.0,
    "reduce_max": -np.inf,
    "reduce_min": np.inf,
    "reduce_l1": 0.0,
    "reduce_l2": 0.0,
    "reduce_sum_square": 0.0,
    "reduce_log_sum_exp": -np.inf,
    "reduce_mean": np.nan,
}


def probe_empty_axis_reductions_give_the_identity(folder: Path) -> None:
    with mdsl.Graph("empty") as g:
        x = g.input("x", (3, 0))
        for name in EMPTY_AXIS:
            g.output(getattr(ops, name)(x, axes=(1,), keepdims=False), name)
    expected = {n: np.full(3, v, np.float32) for n, v in EMPTY_AXIS.items()}
    _agree(g, {"x": np.zeros((3, 0), np.float32)}, expected)


def probe_python_backend_returns_fresh_arrays(folder: Path) -> None:
    with mdsl.Graph("same") as g:
        x = g.input("x", (3,))
        g.output(x, "a")
        g.output(x, "b")
    x = np.ones(3, np.float32)
    for backend in BACKENDS:
        out = mdsl.compile(g, backend=backend)(x=x)
        assert not np.shares_memory(out["a"], x), f"{backend} returned the input"
        assert not np.shares_memory(out["a"], out["b"]), f"{backend} returned one array twice"


# -- the child's side --------------------------------------------------------------------------
def victim_compiles_tiny2(folder: Path) -> None:
    """What a victim does in the second-user tests: compile and run `tiny_graph`, with
    MDSL_PROBE_MARKER naming the file planted code would create."""
    out = mdsl.compile(tiny_graph("tiny2"), backend="c")(x=X)["y"]
    assert not Path(os.environ["MDSL_PROBE_MARKER"]).exists(), "the planted library ran"
    np.testing.assert_allclose(out, tiny_expected())


def main(name: str, folder: str) -> None:
    probe = globals().get(f"probe_{name}") or globals()[name]
    os.chdir(folder)
    try:
        probe(Path(folder))
        report = {"kind": "ok"}
    except mdsl.MdslError as e:
        report = {"kind": "refused", "error": type(e).__name__, "message": str(e)[:2000]}
    except BaseException as e:  # every other exception is the finding
        report = {"kind": "foreign", "error": type(e).__name__, "message": str(e)[:2000]}
    print(json.dumps(report), flush=True)


def probe_names() -> list[str]:
    return [n[len("probe_") :] for n in globals() if n.startswith("probe_") and n != "probe_names"]


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
