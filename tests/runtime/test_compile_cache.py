"""The compile cache (`mdsl.runtime.compile_cache`): a warm `mdsl.compile` does no
optimizing, planning, rendering, drawing or building (counted, not timed); any change to
the graph, a weight, an attr, an option or mdsl's code misses; a damaged or tampered
entry is a clean miss; a hit computes what the interpreter does."""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

import mdsl
from mdsl.codegen import toolchain
from mdsl.ir.initializer import ParamInit
from mdsl.ops import bindings
from mdsl.passes import manager
from mdsl.runtime import compile_cache
from mdsl.runtime.compile import make_backend
from mdsl.targets.c import backend

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")

RNG = np.random.default_rng(3)
X = RNG.standard_normal((5, 64)).astype(np.float32)
W = (RNG.standard_normal((64, 96)) / 8).astype(np.float32)


@pytest.fixture(scope="module")
def module_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(autouse=True)
def cache_on(module_cache, monkeypatch):
    """The cache on, in a private folder, with only mdsl's own registrations (tests run
    before in this process may have left custom ops, which turn the cache off)."""
    monkeypatch.setattr(
        bindings, "_TABLE", {k: b for k, b in bindings._TABLE.items() if b.from_mdsl}
    )
    own_passes = {k: p for k, p in manager._REGISTRY.items() if p.fn.__module__.startswith("mdsl.")}
    monkeypatch.setattr(manager, "_REGISTRY", own_passes)
    monkeypatch.setenv("MDSL_COMPILE_CACHE", "1")
    monkeypatch.setenv("MDSL_CACHE_DIR", str(module_cache))
    monkeypatch.setenv("MDSL_CONFIG_DIR", str(module_cache / "config"))  # the signing key


@pytest.fixture
def work(monkeypatch):
    """Counts of the compile's stages: optimize, plan, render, gcc, weights drawn."""
    counts = {"optimize": 0, "plan": 0, "render": 0, "gcc": 0, "draw": 0}

    def counting(owner, name, stage):
        original = getattr(owner, name)

        def counted(*args, **kwargs):
            counts[stage] += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(owner, name, counted)

    counting(manager, "optimize", "optimize")
    counting(backend, "plan_variant", "plan")
    counting(backend, "render_units", "render")
    counting(toolchain, "_build_entry", "gcc")
    counting(ParamInit, "_draw", "draw")
    return counts


def graph(name="cached", w=W, alpha=0.5, symbolic=True):
    """A GEMM on a constant weight, a drawn parameter, an attr and a row kernel."""
    with mdsl.Graph(name) as g:
        x = g.input("x", ("N" if symbolic else 5, 64))
        h = x @ g.const("w", w) + mdsl.param("b", (96,), seed=4)
        h = mdsl.ops.leaky_relu(h, alpha=alpha) @ mdsl.param("v", (96, 48), seed=5)
        g.output(mdsl.ops.softmax(h), "y")
    return g


def check_against_interpreter(exe, g, x=X):
    expected = mdsl.interpret(g, {"x": x})["y"]
    np.testing.assert_allclose(exe(x=x)["y"], expected, rtol=1e-5, atol=1e-6)


def test_a_warm_compile_does_no_compile_work_and_equals_the_interpreter(work):
    cold = mdsl.compile(graph("warm"), backend="c")
    assert work["optimize"] == 1 and work["plan"] == 1 and work["render"] == 1
    work.update(dict.fromkeys(work, 0))
    g = graph("warm")  # the same model built again, as a new process would
    exe = mdsl.compile(g, backend="c")
    assert work == dict.fromkeys(work, 0)  # no optimize, plan, render, gcc, nor weights drawn
    assert exe is not cold and exe.variants()
    check_against_interpreter(exe, g)
    check_against_interpreter(exe, g, X[:2])  # another batch: the symbolic build
    assert work["plan"] == 0 and work["gcc"] == 0
    np.testing.assert_array_equal(exe(x=X)["y"], cold(x=X)["y"])


@pytest.mark.parametrize("threads", [1, 2])
def test_a_hit_runs_at_the_threads_asked_for(threads, work):
    mdsl.compile(graph("threads", symbolic=False), backend="c", threads=1)
    work.update(dict.fromkeys(work, 0))
    g = graph("threads", symbolic=False)
    exe = mdsl.compile(g, backend="c", threads=threads)
    assert work["plan"] == 0 and exe.threads == threads
    check_against_interpreter(exe, g)


def changed_weight():
    w = W.copy()
    w[17, 3] += 0.25
    return graph("change", w=w)


@pytest.mark.parametrize(
    "changed, options",
    [
        (changed_weight, {}),  # one value of a constant
        (lambda: graph("change", alpha=0.25), {}),  # an attr
        (lambda: graph("change", symbolic=False), {}),  # a type
        (lambda: graph("change"), {"opt_level": 1}),  # an option
        (lambda: graph("change"), {"debug": True}),
    ],
    ids=["weight", "attr", "type", "opt_level", "debug"],
)
def test_any_change_misses_and_gives_the_new_results(changed, options, work):
    mdsl.compile(graph("change"), backend="c")
    work.update(dict.fromkeys(work, 0))
    g = changed()
    exe = mdsl.compile(g, backend="c", **options)
    assert work["optimize"] == 1 and work["plan"] == 1
    check_against_interpreter(exe, g)


def test_a_parameter_drawn_from_another_seed_misses(work):
    def with_seed(seed):
        with mdsl.Graph("seeded") as g:
            x = g.input("x", ("N", 64))
            g.output(x @ mdsl.param("w", (64, 8), seed=seed), "y")
        return g

    mdsl.compile(with_seed(1), backend="c")
    work.update(dict.fromkeys(work, 0))
    g = with_seed(2)
    exe = mdsl.compile(g, backend="c")
    assert work["plan"] == 1
    check_against_interpreter(exe, g)


def test_other_mdsl_code_or_templates_miss(work, monkeypatch, tmp_path):
    mdsl.compile(graph("code"), backend="c")
    work.update(dict.fromkeys(work, 0))
    monkeypatch.setattr(compile_cache, "code_digest", lambda: "another mdsl")
    mdsl.compile(graph("code"), backend="c")
    assert work["plan"] == 1
    # and the digest follows every file: a template edited by one byte, written again,
    # a file added
    shutil.copytree(_templates(), tmp_path / "t")
    before = compile_cache.tree_digest([tmp_path / "t"])
    assert compile_cache.tree_digest([tmp_path / "t"]) == before
    template = next((tmp_path / "t").rglob("*.j2"))
    text = template.read_text()
    template.write_text(text + " ")
    after_edit = compile_cache.tree_digest([tmp_path / "t"])
    assert after_edit != before
    os.utime(template, ns=(1, 1))  # the same text written at another time
    assert compile_cache.tree_digest([tmp_path / "t"]) not in (before, after_edit)
    (template.parent / "new.j2").write_text("")  # a file added
    added = compile_cache.tree_digest([tmp_path / "t"])
    assert added not in (before, after_edit)
    (tmp_path / "t" / "deep" / "__pycache__").mkdir(parents=True)
    (tmp_path / "t" / "deep" / "__pycache__" / "m.pyc").write_text("")  # not mdsl's code
    assert compile_cache.tree_digest([tmp_path / "t"]) == added
    (tmp_path / "t" / "deep" / "m.py").write_text("")  # a file added in a new folder
    assert compile_cache.tree_digest([tmp_path / "t"]) != added


def _templates():
    from mdsl.codegen.templates import template_dir

    return template_dir("c")


def entry_of(g, **options) -> os.PathLike:
    target = make_backend("c")
    opts = {"backend": "c", "opt_level": 2, "debug": False, "specialize": None, **options}
    key = compile_cache.compile_key(g, target, opts)
    compile_cache.wait_for_stores()
    return compile_cache._root() / key.digest


def damage_arrays(entry):
    data = bytearray((entry / compile_cache.ARRAYS).read_bytes())
    data[len(data) // 2] ^= 0x40
    (entry / compile_cache.ARRAYS).write_bytes(bytes(data))


def damage_last_array_byte(entry):
    with open(entry / compile_cache.ARRAYS, "r+b") as f:
        f.seek(-1, os.SEEK_END)
        byte = f.read(1)[0]
        f.seek(-1, os.SEEK_END)
        f.write(bytes([byte ^ 0x01]))


def damage_manifest(entry):
    manifest = json.loads((entry / compile_cache.MANIFEST).read_text())
    manifest["libraries"] = ["0" * 64 for _ in manifest["libraries"]]
    (entry / compile_cache.MANIFEST).write_text(json.dumps(manifest))


def truncate_library(entry):
    library = next(entry.glob("*.so"))
    library.write_bytes(library.read_bytes()[:4096])


def damage_state(entry):
    (entry / compile_cache.STATE).write_bytes(b"\x80\x05garbage")


def open_up(entry):
    os.chmod(entry / compile_cache.STATE, 0o666)


@pytest.mark.parametrize(
    "damage",
    [
        damage_arrays,
        damage_last_array_byte,
        damage_manifest,
        truncate_library,
        damage_state,
        open_up,
    ],
)
def test_a_damaged_or_tampered_entry_is_a_clean_miss(damage, work, caplog):
    g = graph(f"damaged_{damage.__name__}")
    mdsl.compile(g, backend="c")
    entry = entry_of(g)
    assert entry.is_dir()
    damage(entry)
    work.update(dict.fromkeys(work, 0))
    with caplog.at_level(logging.WARNING, logger="mdsl"):
        exe = mdsl.compile(g, backend="c")
    assert work["plan"] == 1  # compiled again
    assert any("not used" in r.getMessage() for r in caplog.records)
    check_against_interpreter(exe, g)
    work.update(dict.fromkeys(work, 0))
    check_against_interpreter(mdsl.compile(g, backend="c"), g)  # the entry was replaced
    assert work["plan"] == 0


@pytest.fixture
def array_hashes(monkeypatch):
    """How many times a load hashed an arrays file."""
    hashed = []
    digest = compile_cache.xxhash.xxh3_128_hexdigest

    def counted(data):
        hashed.append(len(data))
        return digest(data)

    monkeypatch.setattr(compile_cache.xxhash, "xxh3_128_hexdigest", counted)
    return hashed


def test_an_unwritten_arrays_file_is_not_hashed_again(work, array_hashes):
    g = graph("identity")
    mdsl.compile(g, backend="c")
    entry = entry_of(g)
    manifest = json.loads((entry / compile_cache.MANIFEST).read_text())
    stat = os.stat(entry / compile_cache.ARRAYS)
    assert manifest["arrays"]["identity"][1:] == [
        stat.st_ino,
        stat.st_size,
        stat.st_mtime_ns,
        stat.st_ctime_ns,
    ]
    array_hashes.clear()
    work.update(dict.fromkeys(work, 0))
    check_against_interpreter(mdsl.compile(g, backend="c"), g)
    assert work["plan"] == 0 and array_hashes == []


def test_an_arrays_file_written_with_its_times_put_back_is_still_hashed(work, caplog):
    """A byte flipped and the modification time restored: the status-change time, which
    no process sets, still differs, so the file is hashed and the damage found."""
    g = graph("restored_times")
    mdsl.compile(g, backend="c")
    entry = entry_of(g)
    before = os.stat(entry / compile_cache.ARRAYS)
    damage_arrays(entry)
    os.utime(entry / compile_cache.ARRAYS, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert os.stat(entry / compile_cache.ARRAYS).st_mtime_ns == before.st_mtime_ns
    work.update(dict.fromkeys(work, 0))
    with caplog.at_level(logging.WARNING, logger="mdsl"):
        check_against_interpreter(mdsl.compile(g, backend="c"), g)
    assert work["plan"] == 1
    assert any("XXH3-128 differs" in r.getMessage() for r in caplog.records)


def test_a_copied_arrays_file_is_hashed_and_used_when_equal(work, array_hashes):
    g = graph("copied")
    mdsl.compile(g, backend="c")
    entry = entry_of(g)
    arrays = entry / compile_cache.ARRAYS
    shutil.copyfile(arrays, entry / "copy")
    os.replace(entry / "copy", arrays)  # the same bytes in another file
    array_hashes.clear()
    work.update(dict.fromkeys(work, 0))
    check_against_interpreter(mdsl.compile(g, backend="c"), g)
    assert work["plan"] == 0 and len(array_hashes) == 1


def test_no_identity_is_recorded_where_file_times_cannot_be_trusted():
    """Whole-second times, or a file system clock a second or more away from this
    machine's (waiting for it could hang a store): such files are hashed on each load."""
    import time
    from types import SimpleNamespace

    now = time.time_ns()

    def stat(ctime_ns):
        return SimpleNamespace(st_dev=1, st_ino=2, st_size=3, st_mtime_ns=4, st_ctime_ns=ctime_ns)

    assert compile_cache._recordable_identity(stat(now - 1234)) == [1, 2, 3, 4, now - 1234]
    assert compile_cache._recordable_identity(stat(now // 10**9 * 10**9)) is None
    assert compile_cache._recordable_identity(stat(now + 3600 * 10**9 + 7)) is None
    assert compile_cache._recordable_identity(stat(now - 3600 * 10**9 + 7)) is None


def test_an_entry_is_published_once_the_clock_is_past_its_arrays_file(work):
    """Else a write in the same step of the file times' clock would keep its identity."""
    g = graph("published")
    mdsl.compile(g, backend="c")
    entry = entry_of(g)
    manifest = json.loads((entry / compile_cache.MANIFEST).read_text())
    assert os.stat(entry).st_ctime_ns >= (
        manifest["arrays"]["identity"][-1] + compile_cache.CLOCK_STEP_NS - 10_000_000
    )


def test_a_hit_runs_without_unpickling_its_kernels_and_reads_them_when_asked(work):
    cold = mdsl.compile(graph("deferred"), backend="c")
    cold(x=X)
    g = graph("deferred")
    exe = mdsl.compile(g, backend="c")
    check_against_interpreter(exe, g)
    (variant,) = exe.variants().values()
    assert variant.plan.kernel_loader is not None  # ran, kernels still pickled
    assert exe.kernels == cold.kernels and variant.plan.kernel_loader is None
    assert [type(k) for k in exe.plan.all_kernels()] == [type(k) for k in cold.plan.all_kernels()]
    profile = exe.profile({"x": X}, runs=2)
    assert [k.name for k in profile.kernels] == [k.name for k in cold.kernels]
    assert work["plan"] == 1


def offset_graph(name, offset):
    """y = x + offset: the plan reads the graph's own array."""
    with mdsl.Graph(name) as g:
        g.output(g.input("x", (5, 64)) + g.const("offset", offset), "y")
    return g


def plan_constants(exe):
    return [c for v in exe.variants().values() for c in v.plan.constants]


def test_an_entry_holds_no_copy_of_the_graphs_own_arrays_and_a_hit_reads_them(work):
    offset = RNG.standard_normal((5, 64)).astype(np.float32)
    mdsl.compile(offset_graph("own_arrays", offset), backend="c")
    g = offset_graph("own_arrays", offset.copy())  # the same model, loaded again
    entry = entry_of(g)
    assert (entry / compile_cache.ARRAYS).stat().st_size < offset.nbytes
    work.update(dict.fromkeys(work, 0))
    exe = mdsl.compile(g, backend="c")
    assert work["plan"] == 0
    (held,) = [n.attrs["value"] for n in g if n.op_type == "Const"]
    assert any(np.shares_memory(c, held) for c in plan_constants(exe))
    check_against_interpreter(exe, g)


def test_a_weight_stored_in_fortran_order_loads_for_its_c_ordered_twin(work):
    """Both orders have one key (it hashes content); the entry must not hand the second
    graph the first one's bytes in the wrong order."""
    offset = RNG.standard_normal((5, 64)).astype(np.float32)
    g = offset_graph("fortran_twin", np.asfortranarray(offset))
    check_against_interpreter(mdsl.compile(g, backend="c"), g)
    twin = offset_graph("fortran_twin", np.ascontiguousarray(offset))
    work.update(dict.fromkeys(work, 0))
    exe = mdsl.compile(twin, backend="c")
    assert work["plan"] == 0
    check_against_interpreter(exe, twin)
    (held,) = [n.attrs["value"] for n in exe.graph if n.op_type == "Const"]
    np.testing.assert_array_equal(held, offset)


def test_a_hit_of_a_onednn_convolution_knows_it_links_onednn(work):
    from mdsl.codegen import onednn
    from mdsl.targets.c.conv import uses_onednn

    w = RNG.standard_normal((8, 4, 3, 3)).astype(np.float32)
    x = RNG.standard_normal((2, 4, 9, 9)).astype(np.float32)

    def conv_graph():
        with mdsl.Graph("conv_deferred") as g:
            h = mdsl.ops.conv2d(g.input("x", ("N", 4, 9, 9)), g.const("w", w), pads=1)
            g.output(mdsl.ops.relu(h), "y")
        return g

    mdsl.compile(conv_graph(), backend="c", specialize={"N": [2]})
    g = conv_graph()
    exe = mdsl.compile(g, backend="c", specialize={"N": [2]})
    assert work["plan"] == 1
    np.testing.assert_allclose(
        exe(x=x)["y"], mdsl.interpret(g, {"x": x})["y"], rtol=1e-4, atol=1e-4
    )
    (variant,) = exe.variants().values()
    assert variant.onednn == uses_onednn(variant.plan)
    assert variant.onednn == (onednn.library_path() is not None)


def test_a_custom_op_in_the_process_turns_the_cache_off(work, sandbox, caplog):
    mdsl.register_op_impl("Relu", lambda x: np.maximum(x, 0), backend="python")
    with caplog.at_level(logging.INFO, logger="mdsl"):
        mdsl.compile(graph("custom"), backend="c")
        mdsl.compile(graph("custom"), backend="c")
    assert work["plan"] == 2
    assert any("compile cache not used" in r.getMessage() for r in caplog.records)


def test_specialized_variants_come_back_from_the_cache(work):
    mdsl.compile(graph("gears"), backend="c", specialize={"N": [2, 5]})
    work.update(dict.fromkeys(work, 0))
    g = graph("gears")
    exe = mdsl.compile(g, backend="c", specialize={"N": [2, 5]})
    assert work["plan"] == 0
    assert sorted(exe.variants()) == [(("N", 2),), (("N", 5),)]
    check_against_interpreter(exe, g)
    check_against_interpreter(exe, g, X[:2])
    assert work["plan"] == 0


def test_turned_off_by_the_environment(work, monkeypatch):
    monkeypatch.setenv("MDSL_COMPILE_CACHE", "0")
    mdsl.compile(graph("off"), backend="c")
    mdsl.compile(graph("off"), backend="c")
    assert work["plan"] == 2


def test_a_hit_saves_and_loads_as_a_compiled_executable(work, tmp_path):
    mdsl.compile(graph("saved"), backend="c")
    g = graph("saved")
    exe = mdsl.compile(g, backend="c")
    assert work["plan"] == 1  # the first compile only
    exe.save(tmp_path / "saved")
    check_against_interpreter(mdsl.load_executable(tmp_path / "saved"), g)


def test_a_compile_with_onednn_turned_off_misses_one_with_it(work):
    """`onednn.disabled()` (the hand-written kernels, for side-by-side benchmarks) is part
    of the key: a graph compiled with oneDNN first is not served to it."""
    from mdsl.codegen import onednn

    w = RNG.standard_normal((16, 8, 3, 3)).astype(np.float32)

    def conv_graph():
        with mdsl.Graph("conv_cached") as g:
            g.output(mdsl.ops.conv2d(g.input("x", (1, 8, 10, 10)), g.const("w", w), pads=1), "y")
        return g

    on = mdsl.compile(conv_graph(), backend="c")
    with onednn.disabled():
        off = mdsl.compile(conv_graph(), backend="c")
    assert work["plan"] == 2
    assert "mdsl_dnnl" not in "\n".join(off.sources.values())
    if onednn.library_path() is not None:
        assert "mdsl_dnnl" in "\n".join(on.sources.values())


def test_threads_compiling_one_graph_at_once_all_get_it_right(work):
    from concurrent.futures import ThreadPoolExecutor

    g = graph("racing")
    with ThreadPoolExecutor(3) as pool:
        exes = list(pool.map(lambda _: mdsl.compile(graph("racing"), backend="c"), range(3)))
    for exe in exes:
        check_against_interpreter(exe, g)
    compile_cache.wait_for_stores()
    planned = work["plan"]
    check_against_interpreter(mdsl.compile(graph("racing"), backend="c"), g)
    assert work["plan"] == planned  # the entry one of them wrote


def test_a_graph_the_serializer_cannot_write_compiles_without_the_cache(work, monkeypatch):
    def refuse(g):
        raise mdsl.GraphError("cannot serialize attr value <object>")

    monkeypatch.setattr(compile_cache, "graph_fingerprint", refuse)
    g = graph("unwritable")
    for _ in range(2):
        check_against_interpreter(mdsl.compile(g, backend="c"), g)
    assert work["plan"] == 2


def test_a_key_hashes_large_arrays_in_chunks_on_every_core(work, monkeypatch):
    """The key's threaded hashing of large weights (BERT-base's 440 MB), in 4 KiB chunks:
    equal weights hit, one value changed in the last chunk misses."""
    monkeypatch.setattr(compile_cache, "CHUNK", 4096)
    assert W.nbytes > 4 * 4096
    mdsl.compile(graph("chunked"), backend="c")
    work.update(dict.fromkeys(work, 0))
    g = graph("chunked")
    check_against_interpreter(mdsl.compile(g, backend="c"), g)
    assert work["plan"] == 0
    w = W.copy()
    w[-1, -1] += 0.25
    g = graph("chunked", w=w)
    check_against_interpreter(mdsl.compile(g, backend="c"), g)
    assert work["plan"] == 1


CHILD = """
import numpy as np, mdsl
with mdsl.Graph("child") as g:
    x = g.input("x", ("N", 1024))
    w = np.random.default_rng(0).standard_normal((1024, 8192)).astype(np.float32)  # 32 MB
    g.output(x @ g.const("w", w), "y")
mdsl.compile(g, backend="c")
"""


def test_an_entry_is_written_whole_when_the_process_ends_right_after_compiling(module_cache):
    """The writer thread outlives the main one (and hashes the arrays in that thread: a
    thread pool takes no work once the interpreter shuts down): the next process hits."""
    import subprocess
    import sys

    env = {**os.environ, "MDSL_LOG": "INFO"}
    runs = [
        subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True)
        for _ in range(2)
    ]
    assert all(r.returncode == 0 for r in runs), runs[-1].stderr[-2000:]
    assert "compile cache: miss" in runs[0].stderr and "not stored" not in runs[0].stderr
    assert "compile cache: hit" in runs[1].stderr, runs[1].stderr[-2000:]


def test_the_key_sees_onednn_turned_off_or_moved_without_loading_it(monkeypatch, tmp_path):
    """`onednn.identity()`: None when turned off, else the candidate files' stats (the
    key reads them instead of loading oneDNN, 10-15 ms)."""
    from mdsl.codegen import onednn

    with onednn.disabled():
        assert onednn.identity() is None
    monkeypatch.setenv("MDSL_ONEDNN", "0")
    assert onednn.identity() is None
    monkeypatch.delenv("MDSL_ONEDNN")
    found = onednn.identity()
    if onednn.library_path() is not None:
        assert onednn.library_path() in [Path(f[0]).resolve() for f in found]
    (tmp_path / onednn.SONAME).write_bytes(b"not a library")
    monkeypatch.setenv("LD_LIBRARY_PATH", str(tmp_path))
    assert str(tmp_path / onednn.SONAME) in [f[0] for f in onednn.identity()]


def test_keying_and_loading_leave_the_cycle_collector_as_they_found_it(work):
    """Paused while keying and loading, on after (off if the user turned it off), and
    the permanent generation as it was (empty, or what the process froze)."""
    import gc

    mdsl.compile(graph("collector"), backend="c")
    g = graph("collector")
    check_against_interpreter(mdsl.compile(g, backend="c"), g)
    assert work["plan"] == 1  # the second was a hit
    assert gc.isenabled() and gc.get_freeze_count() == 0
    gc.disable()
    try:
        mdsl.compile(graph("collector"), backend="c")
        assert not gc.isenabled()
    finally:
        gc.enable()
    gc.freeze()  # a process that froze its objects keeps them frozen
    try:
        count = gc.get_freeze_count()
        mdsl.compile(graph("collector"), backend="c")
        assert 0 < gc.get_freeze_count() <= count  # not thawed (some died meanwhile)
    finally:
        gc.unfreeze()


def test_array_digests_follow_the_bytes_across_chunks_and_not_the_layout(monkeypatch):
    monkeypatch.setattr(compile_cache, "CHUNK", 4096)
    a = np.arange(3 * 4096, dtype=np.float32).reshape(96, 128)
    same = compile_cache.array_digests([a, np.asfortranarray(a), a.copy()])
    assert same[0] == same[1] == same[2] and len(same[0]) == 32
    changed = []
    for index in ((0, 0), (40, 7), (95, 127)):  # first, middle and last chunk
        b = a.copy()
        b[index] += 1.0
        changed += compile_cache.array_digests([b])
    assert len({same[0], *changed}) == 4
    assert compile_cache.array_digests([a.view(np.int32)]) == [same[0]]  # bytes, not values
