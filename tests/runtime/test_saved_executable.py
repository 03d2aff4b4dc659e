"""`exe.save(path)` / `mdsl.load_executable(path)`: verified on load, runs without a
compiler, refuses anything tampered with, and never loads an unverified library."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import importlib.util
import json
import shutil
import subprocess
import zipfile

import numpy as np
import pytest

import mdsl
from mdsl.codegen import toolchain
from mdsl.codegen.custom_c import HEADER_FILE, header_text
from mdsl.runtime import c_backend, saved, signing

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")

RNG = np.random.default_rng(7)
X = RNG.normal(size=(3, 16)).astype(np.float32)


@pytest.fixture(scope="module")
def module_cache(tmp_path_factory):
    """One build cache for this module's tests (none of them damages cache entries)."""
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(autouse=True)
def private_cache(module_cache, monkeypatch):
    monkeypatch.setenv("MDSL_CACHE_DIR", str(module_cache))
    monkeypatch.setenv("MDSL_CONFIG_DIR", str(module_cache / "config"))  # the signing key


@contextlib.contextmanager
def compiler_unavailable(monkeypatch):
    """No C compiler can be found or run inside; building a library fails the test."""
    with monkeypatch.context() as m:
        m.setattr(toolchain, "find_compiler", lambda: None)
        m.setattr(c_backend, "build_library", _refuse)
        m.setenv("CC", "/nonexistent/cc")
        yield


@contextlib.contextmanager
def dlopen_forbidden(monkeypatch):
    """Loading any shared library inside fails the test."""

    def refuse(path):
        raise AssertionError(f"an unverified library was loaded: {path}")

    with monkeypatch.context() as m:
        m.setattr(c_backend, "_load_library", refuse)
        yield


def refused_load(monkeypatch, path, match, **kwargs):
    """Loading `path` fails with a CompileError matching `match`, loading no library."""
    with dlopen_forbidden(monkeypatch), pytest.raises(mdsl.CompileError, match=match):
        mdsl.load_executable(path, **kwargs)


def _refuse(*args, **kwargs):
    raise AssertionError("a loaded executable must not compile")


def mlp_graph(batch=3):
    with mdsl.Graph("mlp") as g:
        x = g.input("x", (batch, 16))
        h = mdsl.ops.gelu(x @ mdsl.param("w", (16, 32), seed=1) + mdsl.param("b", (32,), seed=2))
        g.output(mdsl.ops.softmax(h * 0.5), "y")
    return g


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def saved_mlp(tmp_path):
    exe = mdsl.compile(mlp_graph(), backend="c")
    folder = tmp_path / "mlp.exe"
    exe.save(folder)
    return exe, folder


def test_manifest_lists_every_file_with_its_sha256(saved_mlp):
    exe, folder = saved_mlp
    manifest = json.loads((folder / "manifest.json").read_text())
    assert (manifest["format"], manifest["version"], manifest["backend"]) == (
        "mdsl-executable",
        1,
        "c",
    )
    assert manifest["threads"] is None and manifest["debug_outputs"] is None
    assert manifest["graph"]["sha256"] == sha256(folder / "graph.json")
    (variant,) = manifest["variants"]
    assert variant["symbols"] == {}
    (source,) = variant["sources"]
    assert (folder / source["file"]).read_text() == next(iter(exe.sources.values()))
    assert source["sha256"] == sha256(folder / source["file"])
    assert variant["library"]["sha256"] == sha256(folder / variant["library"]["file"])
    digest = (folder / "manifest.sha256").read_text().split()
    mac = hmac.new(signing.user_key(), (folder / "manifest.json").read_bytes(), "sha256")
    assert digest == ["hmac-sha256", mac.hexdigest()]


@pytest.mark.parametrize("name", ["mlp.exe", "mlp.zip"])
def test_loaded_executable_runs_without_a_compiler_and_gives_identical_results(
    tmp_path, monkeypatch, name
):
    exe = mdsl.compile(mlp_graph(), backend="c")
    expected = exe(x=X)["y"]
    exe.save(tmp_path / name)
    with compiler_unavailable(monkeypatch):
        loaded = mdsl.load_executable(tmp_path / name)
        np.testing.assert_array_equal(loaded(x=X)["y"], expected)
    assert loaded.sources == exe.sources
    assert [k.nodes for k in loaded.kernels] == [k.nodes for k in exe.kernels]


def test_symbolic_executable_saves_every_variant_and_builds_new_ones_with_a_compiler(
    tmp_path, monkeypatch
):
    with mdsl.Graph("sym") as g:
        x = g.input("x", ("N", 16))
        g.output(mdsl.ops.tanh(x @ mdsl.param("w", (16, 4), seed=3)), "y")
    exe = mdsl.compile(g, backend="c", specialize=True)  # a variant per signature
    feeds = {n: RNG.normal(size=(n, 16)).astype(np.float32) for n in (2, 5, 9)}
    expected = {n: exe(x=feeds[n])["y"] for n in (2, 5)}
    exe.save(tmp_path / "sym")
    manifest = json.loads((tmp_path / "sym" / "manifest.json").read_text())
    assert sorted(v["symbols"]["N"] for v in manifest["variants"]) == [2, 5]
    with compiler_unavailable(monkeypatch):
        loaded = mdsl.load_executable(tmp_path / "sym")
        for n in (2, 5):
            np.testing.assert_array_equal(loaded(x=feeds[n])["y"], expected[n])
    got = loaded(x=feeds[9])["y"]  # a compiler again: the new signature compiles
    np.testing.assert_allclose(got, np.tanh(feeds[9] @ _param(g, "w")), rtol=1e-5, atol=1e-6)
    assert loaded.variants()[(("N", 9),)].library_path.suffix == ".so"


def test_the_symbolic_build_serves_every_signature_after_loading(tmp_path, monkeypatch):
    with mdsl.Graph("sym") as g:
        x = g.input("x", ("N", 16))
        g.output(mdsl.ops.tanh(x @ mdsl.param("w", (16, 4), seed=3)), "y")
    exe = mdsl.compile(g, backend="c")
    feeds = {n: RNG.normal(size=(n, 16)).astype(np.float32) for n in (2, 5, 9)}
    expected = exe(x=feeds[2])["y"]
    exe.save(tmp_path / "sym")
    manifest = json.loads((tmp_path / "sym" / "manifest.json").read_text())
    assert [v["symbols"] for v in manifest["variants"]] == [{}]
    with compiler_unavailable(monkeypatch):
        loaded = mdsl.load_executable(tmp_path / "sym")
        np.testing.assert_array_equal(loaded(x=feeds[2])["y"], expected)
        for n in (5, 9):  # new signatures: no compiler needed
            want = np.tanh(feeds[n] @ _param(g, "w"))
            np.testing.assert_allclose(loaded(x=feeds[n])["y"], want, rtol=1e-5, atol=1e-6)
    assert list(loaded.variants()) == [()]


def _param(g, name):
    return next(n for n in g.constants if n.name == name).const_value()


def test_threads_and_debug_outputs_survive_a_round_trip(tmp_path):
    exe = mdsl.compile(mlp_graph(), backend="c", threads=1, debug=True)
    exe.save(tmp_path / "dbg.zip")
    loaded = mdsl.load_executable(tmp_path / "dbg.zip")
    assert loaded.threads == 1 and loaded.debug_outputs == exe.debug_outputs
    captured = loaded.run({"x": X}, capture=True)
    np.testing.assert_array_equal(captured["Gelu"], exe.run({"x": X}, capture=True)["Gelu"])
    assert mdsl.load_executable(tmp_path / "dbg.zip", threads=2).threads == 2


@pytest.mark.parametrize(
    "backend",
    [
        "python",
        pytest.param(
            "numba",
            marks=pytest.mark.skipif(
                importlib.util.find_spec("mdsl.runtime.numba_backend") is None, reason="no numba"
            ),
        ),
    ],
)
def test_backends_without_libraries_save_the_graph_and_rebuild_on_load(tmp_path, backend):
    exe = mdsl.compile(mlp_graph(), backend=backend)
    exe.save(tmp_path / backend)
    manifest = json.loads((tmp_path / backend / "manifest.json").read_text())
    assert all(v["library"] is None for v in manifest["variants"])
    loaded = mdsl.load_executable(tmp_path / backend)
    assert loaded.backend.name == backend
    np.testing.assert_array_equal(loaded(x=X)["y"], exe(x=X)["y"])


# -- tampering ----------------------------------------------------------------------------------
def _variant_file(folder, key):
    manifest = json.loads((folder / "manifest.json").read_text())
    entry = manifest["variants"][0]
    return folder / (entry[key]["file"] if key == "library" else entry[key][0]["file"])


def _flip_byte(path, at=-100):
    data = bytearray(path.read_bytes())
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("target", ["library", "sources", "graph.json"])
def test_a_tampered_file_is_refused_before_anything_loads(saved_mlp, monkeypatch, target):
    _, folder = saved_mlp
    path = folder / "graph.json" if target == "graph.json" else _variant_file(folder, target)
    _flip_byte(path, at=len(path.read_bytes()) // 2)
    refused_load(monkeypatch, folder, "modified or damaged.*refusing to load")


def test_a_tampered_manifest_is_refused(saved_mlp, monkeypatch):
    _, folder = saved_mlp
    manifest = folder / "manifest.json"
    manifest.write_text(manifest.read_text().replace('"threads": null', '"threads": 64'))
    refused_load(monkeypatch, folder, "manifest was modified or damaged")


def test_a_tampered_zip_member_is_refused(tmp_path, monkeypatch):
    exe = mdsl.compile(mlp_graph(), backend="c")
    exe.save(tmp_path / "a.zip")
    with zipfile.ZipFile(tmp_path / "a.zip") as z:
        members = {name: z.read(name) for name in z.namelist()}
    library = next(name for name in members if name.endswith(".so"))
    members[library] = members[library][:-1] + bytes([members[library][-1] ^ 1])
    with zipfile.ZipFile(tmp_path / "b.zip", "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    refused_load(monkeypatch, tmp_path / "b.zip", "modified or damaged")


def test_a_rewritten_manifest_and_digest_pass_without_a_key_but_not_with_one(tmp_path, monkeypatch):
    exe = mdsl.compile(mlp_graph(), backend="c")
    folder = tmp_path / "signed"
    exe.save(folder, key=b"secret")
    assert (folder / "manifest.sha256").read_text().startswith("hmac-sha256 ")
    refused_load(monkeypatch, folder, "signed with another key than this user's")
    refused_load(monkeypatch, folder, "signature does not match", key=b"guess")
    # someone swaps in their own library and rewrites every digest, but has no key
    library = _variant_file(folder, "library")
    _flip_byte(library)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["variants"][0]["library"]["sha256"] = sha256(library)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    (folder / "manifest.sha256").write_text(f"sha256 {sha256(folder / 'manifest.json')}\n")
    refused_load(monkeypatch, folder, "not signed, but key= was given", key=b"secret")


def _unsign(folder):
    (folder / "manifest.sha256").write_text(f"sha256 {sha256(folder / 'manifest.json')}\n")


def test_an_unsigned_executable_loads_only_when_trusted(saved_mlp, monkeypatch):
    exe, folder = saved_mlp
    _unsign(folder)
    refused_load(monkeypatch, folder, "is not signed: refusing to trust it.*trust=True")
    np.testing.assert_array_equal(mdsl.load_executable(folder, trust=True)(x=X)["y"], exe(x=X)["y"])


def test_another_users_executable_is_refused_unless_trusted(saved_mlp, monkeypatch, tmp_path):
    exe, folder = saved_mlp
    monkeypatch.setenv("MDSL_CONFIG_DIR", str(tmp_path / "someone-else"))
    refused_load(monkeypatch, folder, "signed with another key than this user's")
    np.testing.assert_array_equal(mdsl.load_executable(folder, trust=True)(x=X)["y"], exe(x=X)["y"])


def test_the_signing_key_is_private_and_made_once(tmp_path, monkeypatch):
    monkeypatch.setenv("MDSL_CONFIG_DIR", str(tmp_path / "cfg"))
    key = signing.user_key()
    assert signing.user_key() == key and len(key) == 32
    assert signing.key_path().stat().st_mode & 0o777 == 0o600
    signing.key_path().chmod(0o644)
    with pytest.raises(mdsl.CompileError, match="others can read or write it"):
        signing.user_key()


def test_a_library_of_another_graph_is_refused_even_when_trusted(tmp_path, monkeypatch):
    folders = {}
    for batch in (3, 5):
        folders[batch] = tmp_path / f"mlp{batch}"
        mdsl.compile(mlp_graph(batch), backend="c").save(folders[batch])
    victim, other = _variant_file(folders[3], "library"), _variant_file(folders[5], "library")
    victim.write_bytes(other.read_bytes())
    manifest = json.loads((folders[3] / "manifest.json").read_text())
    manifest["variants"][0]["library"]["sha256"] = sha256(victim)
    (folders[3] / "manifest.json").write_text(json.dumps(manifest))
    _unsign(folders[3])
    refused_load(monkeypatch, folders[3], "not built from this graph's source", trust=True)


def test_loading_with_the_key_works(tmp_path):
    exe = mdsl.compile(mlp_graph(), backend="c")
    exe.save(tmp_path / "signed.zip", key="secret")
    loaded = mdsl.load_executable(tmp_path / "signed.zip", key="secret")
    np.testing.assert_array_equal(loaded(x=X)["y"], exe(x=X)["y"])


def _rewrite_manifest(folder, edit):
    manifest = json.loads((folder / "manifest.json").read_text())
    edit(manifest)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    (folder / "manifest.sha256").write_text(saved.signature_line(json.dumps(manifest).encode()))


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda m: m.update(version=99), "format version 99"),
        (lambda m: m.update(format="zip"), "not a saved mdsl executable"),
        (lambda m: m["platform"].update(machine="vax"), "was built for"),
        (lambda m: m["graph"].update(file="../../etc/passwd"), "bad file"),
        (lambda m: m["variants"][0]["symbols"].update(N="2"), "symbols are not name -> int"),
        (lambda m: m.update(threads="4"), "threads is not an int"),
        (lambda m: m.update(threads=100000), r"threads must be in \[1, 1024\]"),
        (lambda m: m.update(backend="fortran"), "unknown backend 'fortran'"),
    ],
)
def test_malformed_manifests_get_clear_errors(saved_mlp, monkeypatch, edit, match):
    _, folder = saved_mlp
    _rewrite_manifest(folder, edit)
    refused_load(monkeypatch, folder, match)


def test_source_that_no_longer_matches_the_plan_is_refused(tmp_path, monkeypatch, sandbox):
    @mdsl.op_proto("Halve", inputs={"x": "float32"}, outputs={"y": "float32"}, category="pointwise")
    def halve(x):
        return x

    mdsl.register_op_impl("Halve", lambda x: x * 0.5, backend="expr")
    with mdsl.Graph("halve") as g:
        g.output(halve(g.input("x", (4,))), "y")
    mdsl.compile(g, backend="c").save(tmp_path / "h")
    mdsl.register_op_impl("Halve", lambda x: x * 0.25, backend="expr")  # rebound since
    refused_load(monkeypatch, tmp_path / "h", "differs from what this mdsl generates")


def test_a_changed_custom_op_library_is_refused(tmp_path, monkeypatch, sandbox):
    @mdsl.op_proto("Ident", inputs={"x": "float32"}, outputs={"y": "float32"})
    def ident(x):
        return x

    (tmp_path / HEADER_FILE).write_text(header_text())
    src = tmp_path / "ident.c"
    src.write_text(
        f'#include "{HEADER_FILE}"\n#include <string.h>\n'
        "int ident(const mdsl_tensor *in, int ni, mdsl_tensor *out, int no, const double *a, int na)"
        " { memcpy(out[0].data, in[0].data, 4 * in[0].size); return 0; }\n"
    )
    lib = tmp_path / "libident.so"
    subprocess.run(["cc", "-shared", "-fPIC", str(src), "-o", str(lib)], check=True)
    mdsl.register_op_impl("Ident", backend="c", library=str(lib), symbol="ident")
    with mdsl.Graph("ident") as g:
        g.output(ident(g.input("x", (4,))), "y")
    exe = mdsl.compile(g, backend="c")
    np.testing.assert_array_equal(exe(x=np.arange(4, dtype=np.float32))["y"], np.arange(4))
    exe.save(tmp_path / "ident.exe")
    manifest = json.loads((tmp_path / "ident.exe" / "manifest.json").read_text())
    assert manifest["variants"][0]["custom_libraries"] == [
        {"path": str(lib), "sha256": sha256(lib)}
    ]
    changed = tmp_path / "rebuilt.so"  # a new file: rewriting a loaded library in place crashes
    changed.write_bytes(lib.read_bytes() + b"\0")
    changed.replace(lib)
    refused_load(monkeypatch, tmp_path / "ident.exe", "libident.so changed since")


def test_missing_and_foreign_paths(tmp_path, monkeypatch):
    refused_load(monkeypatch, tmp_path / "nothing", "no saved executable at")
    (tmp_path / "text.zip").write_text("hello")
    refused_load(monkeypatch, tmp_path / "text.zip", "not a saved executable")
    (tmp_path / "empty").mkdir()
    refused_load(monkeypatch, tmp_path / "empty", "cannot read .*manifest.sha256")


def test_save_replaces_an_earlier_save_but_never_other_folders(tmp_path):
    exe = mdsl.compile(mlp_graph(), backend="c")
    exe.save(tmp_path / "out")
    exe.save(tmp_path / "out")  # replaced
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(mdsl.CompileError, match="not a saved executable"):
        exe.save(tmp_path / "mine")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"
    assert saved.load_executable(tmp_path / "out")(x=X)["y"].shape == (3, 32)
