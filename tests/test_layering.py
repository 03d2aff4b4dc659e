"""The architecture as a test: which folder of mdsl may import which.

Layers, bottom to top (a module imports only its own layer and those below it; imports
inside functions count too):

    ir, log      graph IR, dtypes, dims, errors, names and text helpers; logging
    expr         scalar expressions over named variables
    ops          op prototypes, numpy references, bindings, the recording of a node
    builder      the Python graph-building API (control-flow builders)
    passes       graph -> graph rewrites, the PassManager, fusion grouping, placement
    codegen      graph -> Kernel IR: plans, lowering, memory, dims, the C toolchain
    targets      one folder per target (c, numba, ascendc, python), the registry
    runtime      compile, Executable, emit, profile, saved executables, hetero, pipeline
    frontends    ONNX and torch import/export      } the top: nothing imports them
    tools        CLI, compare, bisect, diff, viz   } (but `mdsl/__init__.py`)

Inside `targets`, a target folder imports no other target folder but `python` (the
reference kernels a compiled target calls back into), and the shared modules
(`registry`, `feeds`, `signatures`) import no target folder: the registry names them
as strings, imported on first use. No module reaches another folder's private names
(`from mdsl.x.m import _name`, or `m._name` on a module imported from another folder).
`mdsl/__init__.py` (the public facade) and `mdsl/_moved.py` (old import paths) stand
outside the layers.
"""

from __future__ import annotations

import ast
import pathlib
from collections import defaultdict

import pytest

LAYERS = {
    "ir": 0,
    "log": 0,
    "expr": 1,
    "ops": 2,
    "builder": 3,
    "passes": 4,
    "codegen": 5,
    "targets": 6,
    "runtime": 7,
    "frontends": 8,
    "tools": 8,
}
TARGETS = ("c", "numba", "ascendc", "python")
REFERENCE_TARGET = "targets.python"
OUTSIDE = {"mdsl", "mdsl.__main__", "mdsl._moved"}
PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "mdsl"


def folder(module: str) -> str | None:
    """The unit the rules speak of: `ops`, `targets` (its shared modules), `targets.c`, ..."""
    parts = module.split(".")
    if parts[0] != "mdsl" or len(parts) < 2:
        return None
    if parts[1] == "targets" and len(parts) >= 3 and parts[2] in TARGETS:
        return f"targets.{parts[2]}"
    return parts[1]


def layer(unit: str) -> int:
    return LAYERS[unit.split(".")[0]]


def module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(source: str, modules: set[str]):
    """(line, imported module, imported name or None, local alias) of every mdsl import
    in `source`, at module level or inside functions."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield node.lineno, a.name, None, a.asname
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                if sub in modules:  # `from mdsl.targets.numba import render`: a module
                    yield node.lineno, sub, None, a.asname or a.name
                else:
                    yield node.lineno, node.module, a.name, a.asname or a.name


def private_attributes(source: str, aliases: dict[str, str]):
    """(line, module, attribute) of `alias._name` uses on imported modules."""
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            yield node.lineno, aliases[node.value.id], node.attr


def violations(sources: dict[str, str]) -> tuple[list[str], dict[str, set[str]]]:
    """The broken rules in `sources` (module name -> text) and the folder import graph."""
    modules = set(sources)
    found: list[str] = []
    edges: dict[str, set[str]] = defaultdict(set)
    for module, source in sorted(sources.items()):
        src = folder(module)
        if module in OUTSIDE or src is None:
            continue
        aliases = {}
        for line, target, name, alias in imports_of(source, modules):
            dst = folder(target)
            if dst is None or dst == src:
                continue
            where = f"{module}:{line} imports {target}" + (f".{name}" if name else "")
            edges[src].add(dst)
            if layer(dst) > layer(src):
                found.append(f"{where}: {dst} is above {src}")
            if src.startswith("targets") and dst.startswith("targets.") and dst != REFERENCE_TARGET:
                found.append(f"{where}: only the python target may be imported by another")
            if name is not None and name.startswith("_"):
                found.append(f"{where}: a private name of another folder")
            if name is None and alias:
                aliases[alias] = target
        for line, target, attr in private_attributes(source, aliases):
            found.append(f"{module}:{line} uses {target}.{attr}: a private name of another folder")
    return found, edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every cycle of the folder graph, found by depth-first search."""
    found, state = [], {}

    def visit(node, path):
        state[node] = "open"
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                found.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = "done"

    for start in sorted(edges):
        if start not in state:
            visit(start, [start])
    return found


def package_sources() -> dict[str, str]:
    return {module_name(p): p.read_text() for p in PACKAGE.rglob("*.py")}


def test_every_folder_imports_only_down_the_stack_without_private_reaches():
    sources = package_sources()
    unknown = {folder(m) for m in sources} - set(LAYERS) - {None, "__main__", "_moved"}
    assert not {u for u in unknown if u.split(".")[0] not in LAYERS}, (
        f"folders without a layer in this test's table: {sorted(unknown)}"
    )
    found, edges = violations(sources)
    assert not found, "layering violations:\n" + "\n".join(found)
    assert not cycles(edges), f"folder import cycles: {cycles(edges)}"


@pytest.mark.parametrize(
    ("module", "source", "message"),
    [
        ("mdsl.ops.x", "def f():\n    from mdsl.runtime.compile import compile\n", "above ops"),
        ("mdsl.targets.numba.x", "from mdsl.targets.c.render import render_c\n", "python"),
        ("mdsl.tools.x", "from mdsl.runtime.compile import _backend\n", "private"),
        ("mdsl.tools.x", "from mdsl.ir import graph as g\ng._Private\n", "private"),
    ],
)
def test_the_checker_sees_each_kind_of_violation(module, source, message):
    found, _ = violations({module: source, "mdsl.ir.graph": ""})
    assert len(found) == 1 and message in found[0]


def test_the_checker_sees_a_folder_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
