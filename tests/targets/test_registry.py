"""A target is one class and one registration: a toy target registered from this file is
compiled, compared, profiled, bisected, emitted and offered by the CLI, with no edit to
mdsl (its runtime, tools and CLI ask the registry, never name a target)."""

from __future__ import annotations

import numpy as np
import pytest

import mdsl
from mdsl.targets import registry
from mdsl.tools.cli import main


class ToyVariant:
    """Runs the graph on the interpreter, adding `bias` to every float output."""

    plan = None
    sources = {"toy.txt": "no code: the interpreter runs it"}

    def __init__(self, graph, bias: float):
        self.graph, self.bias = graph, bias

    def run(self, env):
        out = mdsl.interpret(self.graph, env)
        return {k: v + np.asarray(self.bias, v.dtype) for k, v in out.items()}

    def run_profiled(self, env):
        nodes = [n for n in self.graph if n.op_type not in ("Input", "Const", "Output")]
        return self.run(env), np.full((len(nodes), 2), 1e-6)

    def kernel_infos(self):
        return []


class ToyTarget:
    name = "toy"
    symbolic = True
    fuses = False
    bias = 0.0

    def build(self, graph, symbols, threads):
        self.builds = getattr(self, "builds", 0) + 1
        return ToyVariant(graph, self.bias)

    @staticmethod
    def emit_files(graph):
        return {"nodes.txt": "\n".join(n.name for n in graph) + "\n"}


class WrongToyTarget(ToyTarget):
    name = "wrongtoy"
    bias = 1.0


@pytest.fixture
def toy():
    for cls in (ToyTarget, WrongToyTarget):
        assert registry.register_target(cls) is cls
    yield
    for cls in (ToyTarget, WrongToyTarget):
        registry.unregister_target(cls.name)
    assert "toy" not in registry.target_names()


def scale_graph():
    with mdsl.Graph("scale") as g:
        x = g.input("x", (2, 3))
        g.output(mdsl.ops.relu(x * 2.0) + 1.0, "y")
    return g


X = np.array([[-1, 0, 1], [2, -3, 4]], np.float32)


def test_a_registered_target_compiles_runs_and_lists(toy):
    assert {"toy", "wrongtoy"} <= set(registry.target_names("build"))
    assert {"toy", "wrongtoy"} <= set(registry.target_names("emit"))
    exe = mdsl.compile(scale_graph(), backend="toy")
    np.testing.assert_array_equal(exe(x=X)["y"], np.maximum(X * 2, 0) + 1)
    assert exe.backend.name == "toy" and exe.sources == ToyVariant.sources
    wrong = mdsl.compile(scale_graph(), backend="wrongtoy")
    np.testing.assert_array_equal(wrong(x=X)["y"], np.maximum(X * 2, 0) + 2)


def test_compare_and_bisect_run_a_registered_target(toy):
    g = scale_graph()
    assert mdsl.compare(g, {"x": X}, backend="toy").ok
    report = mdsl.compare(g, {"x": X}, backend="wrongtoy")
    assert not report.ok and report.first_mismatch.node == "Mul"  # debug build: all outputs
    assert "toy" in mdsl.tools.compare.backends()
    bisected = mdsl.bisect(g, {"x": X}, backend="wrongtoy")
    assert not bisected.ok and bisected.culprit is None  # wrong before any pass ran


def test_profile_and_emit_use_the_target_hooks(toy, tmp_path):
    prof = mdsl.compile(scale_graph(), backend="toy").profile({"x": X}, runs=2, warmup=0)
    assert prof.unit == "nodes" and [k.op_type for k in prof.kernels] == ["Mul", "Relu", "Add"]
    assert all(k.times == (1e-6, 1e-6) for k in prof.kernels)
    (path,) = mdsl.emit(scale_graph(), target="toy", out_dir=tmp_path)
    assert path.name == "nodes.txt" and "Relu" in path.read_text()


def test_heterogeneous_execution_and_the_cli_accept_it(toy, tmp_path, capsys):
    exe = mdsl.compile(scale_graph(), devices={"cpu": "toy"})
    np.testing.assert_array_equal(exe(x=X)["y"], np.maximum(X * 2, 0) + 1)
    model = tmp_path / "scale.mdsl"
    mdsl.save(scale_graph(), model)
    code = main(["profile", str(model), "--random", "--backend", "toy", "--runs", "1"])
    assert code == 0 and "profile 'scale' (toy): 1 runs, 3 nodes" in capsys.readouterr().out


def test_registration_is_checked():
    class Nameless:
        def build(self, graph, symbols, threads): ...

    class Inert:
        name = "inert"

    with pytest.raises(mdsl.CompileError, match="identifier `name`"):
        registry.register_target(Nameless)
    with pytest.raises(mdsl.CompileError, match="neither build"):
        registry.register_target(Inert)
    with pytest.raises(mdsl.CompileError, match="unknown target 'cuda'; expected one of"):
        registry.target_class("cuda")
    with pytest.raises(mdsl.CompileError, match="unknown backend 'inert'"):
        mdsl.compile(scale_graph(), backend="inert")


def test_builtin_targets_are_folders_with_one_registration_each():
    import importlib

    for name in ("c", "numba", "python", "ascendc"):
        cls = registry.target_class(name)
        assert cls.name == name and cls.__module__ == f"mdsl.targets.{name}.target"
        assert importlib.import_module(f"mdsl.targets.{name}").__file__.endswith("__init__.py")
    assert registry.target_names("build") == ["c", "numba", "python"]
    assert registry.target_names("emit") == ["ascendc", "c", "numba"]
