"""Control flow in the numba driver: Python `if`/`while` around the blocks' kernel calls.

The driver is plain Python, so a `kir.Branch` is an `if`/`elif` chain and a `kir.Loop`
a `while True` loop; blocks run their kernels (rendered by the module renderer, as at
top level), copy the results not computed in place, and bind the node's dynamic dims,
exactly as the C schedule does (`mdsl.targets.c.control`): loop-carried values are
double-buffered by swapping two array names, a failed check stores its value in
`dims[len(plan.symbols)]` and returns its status (`len(plan.all_kernels()) + 1 + i`
for `plan.failures[i]`).
"""

from __future__ import annotations

from mdsl.codegen import kir
from mdsl.codegen.dims import render_dim
from mdsl.ir.naming import python_comment

INDENT = "    "


def control_lines(renderer, k) -> list[str]:
    """The driver lines of control-flow kernel `k` (`renderer`: the module renderer)."""
    return _Control(renderer).kernel(k)


class _Control:
    def __init__(self, renderer):
        self.renderer = renderer
        plan = renderer.plan
        self.failure_base = len(plan.all_kernels()) + 1
        self.detail = f"dims[{len(plan.symbols)}]"

    def kernel(self, k) -> list[str]:
        return self.branch(k) if isinstance(k, kir.Branch) else self.loop(k)

    def fail(self, failure: int, value: str) -> list[str]:
        return [f"{self.detail} = {value}", f"return {self.failure_base + failure}"]

    def kernels(self, kernels: list) -> list[str]:
        """The lines of `kernels`, rendered by the module renderer as at top level."""
        renderer = self.renderer
        saved, renderer.calls = renderer.calls, []
        try:
            for k in kernels:
                renderer.add(k)
            return renderer.calls
        finally:
            renderer.calls = saved

    def block(self, block: kir.Block, bindings: list[kir.DimBinding]) -> list[str]:
        lines = [*self.kernels(block.kernels), *(copy_line(c) for c in block.copies)]
        lines += self.bind(bindings)
        return [f"# {python_comment(block.name)}", *(lines or ["pass"])]

    def bind(self, bindings: list[kir.DimBinding]) -> list[str]:
        lines = [f"nd{i} = {render_dim(b.value, 'py')}" for i, b in enumerate(bindings)]
        first: dict[str, str] = {}
        for i, b in enumerate(bindings):
            name, value = render_dim(b.symbol, "py"), f"nd{i}"
            if name in first:
                test = f"{value} != {first[name]}"
            else:
                first[name] = value
                test = f"{value} < {b.lo}"
                if b.hi is not None:
                    test += f" or {value} > {render_dim(b.hi, 'py')}"
            lines += [f"if {test}:", *_indented(self.fail(b.failure, value))]
            if b.capacity is not None:
                capacity = render_dim(b.capacity, "py")
                lines += [f"if {value} > {capacity}:", *_indented(self.fail(b.grow, value))]
        for name, value in first.items():
            lines.append(f"{name} = {value}; dims[{int(name.removeprefix('dim'))}] = {value}")
        return lines

    def branch(self, k: kir.Branch) -> list[str]:
        lines = [f"# {k.name}: {python_comment(k.nodes[0].name)} ({k.kind})"]
        if k.kind == "If":
            then, other = (self.block(b, k.bindings[i]) for i, b in enumerate(k.blocks))
            return [*lines, f"if {k.selector}[0]:", *_indented(then), "else:", *_indented(other)]
        lines.append(f"selected = int({k.selector}[0])")
        for i, block in enumerate(k.blocks):
            lines += [f"{'if' if i == 0 else 'elif'} selected == {i}:"]
            lines += _indented(self.block(block, k.bindings[i]))
        return [*lines, "else:", *_indented(self.fail(k.failure, "selected"))]

    def loop(self, k: kir.Loop) -> list[str]:
        counter = f"it_{k.name}"
        lines = [f"# {k.name}: {python_comment(k.nodes[0].name)} (While)"]
        lines += [f"{v.current}, {v.next} = {v.first}, {v.second}" for v in k.state]
        lines += [copy_line(c) for c in k.init]
        lines += self.bind(k.init_bindings)
        body = [*self.block(k.cond, []), f"if not {k.pred}[0]:", f"{INDENT}break"]
        if k.max_iterations is not None:
            body += [f"if {counter} == {k.max_iterations}:"]
            body += _indented(self.fail(k.failure, counter))
        body += [f"{counter} += 1", *self.block(k.body, k.bindings)]
        body += [f"{v.current}, {v.next} = {v.next}, {v.current}" for v in k.state]
        lines += [f"{counter} = 0", "while True:", *_indented(body)]
        return lines + [copy_line(c) for c in k.final]


def copy_line(c: kir.Copy) -> str:
    count = render_dim(c.elements, "py")
    return f"{c.dst}[:{count}] = {c.src}[:{count}]"


def _indented(lines) -> list[str]:
    return [INDENT + line for line in lines]
