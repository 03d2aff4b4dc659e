"""The schedule of `mdsl_run` in C: kernel calls, and control flow around them.

If becomes `if/else`, Case a `switch` (an index without a branch fails), While a loop
over two blocks with its carried values double-buffered (pointers swapped after each
iteration) and `max_iterations` enforced. Every block runs its kernels, copies the
results that were not computed in place, then binds the node's dynamic dims (`dimK`
locals, written back to `dims[K]` for the Python side: callbacks and output shapes).

Statuses: a kernel that fails returns its position in `plan.all_kernels()` + 1; a
failed check returns `len(plan.all_kernels()) + 1 + i` for `plan.failures[i]`, having
stored the offending value in `dims[len(plan.symbols)]`.
"""

from __future__ import annotations

from mdsl.codegen import kir
from mdsl.codegen.dims import render_dim
from mdsl.ir.naming import c_comment
from mdsl.targets.c.expr import C_TYPES

INDENT = "    "


class Schedule:
    """Renders the body of `mdsl_run` (or, `timed`, of `mdsl_run_profile`) for a plan whose
    kernel calls are `calls` (kernel id -> the call statement)."""

    def __init__(self, plan, calls: dict[int, str], timed: bool = False):
        self.plan = plan
        self.calls = calls
        self.timed = timed
        kernels = plan.all_kernels()
        self.index = {id(k): i for i, k in enumerate(kernels)}
        self.failure_base = len(kernels) + 1
        self.detail = f"dims[{len(plan.symbols)}]"

    def lines(self, kernels: list) -> list[str]:
        out = []
        for k in kernels:
            if isinstance(k, kir.Branch):
                out += self.branch(k)
            elif isinstance(k, kir.Loop):
                out += self.loop(k)
            else:
                out += self.call(k)
        return out

    def call(self, k) -> list[str]:
        call = self.calls[id(k)]
        if not self.timed:
            return [call]
        i = self.index[id(k)]  # a kernel in a loop runs often: first start, total time
        return [
            "mdsl_start = mdsl_clock();",
            call,
            f"if (timings[{2 * i + 1}] == 0.0) timings[{2 * i}] = mdsl_start - mdsl_t0; "
            f"timings[{2 * i + 1}] += mdsl_clock() - mdsl_start;",
        ]

    def fail(self, failure: int, value: str) -> str:
        return f"{{ {self.detail} = (int64_t)({value}); return {self.failure_base + failure}; }}"

    # -- If and Case ----------------------------------------------------------------------------
    def branch(self, k: kir.Branch) -> list[str]:
        head = f"/* {k.name}: {_comment(k)} */"
        selector = f"{k.selector}[0]"
        if k.kind == "If":
            then, other = (self.block(b, k.bindings[i]) for i, b in enumerate(k.blocks))
            return [
                head,
                f"if ({selector}) {{",
                *_indented(then),
                "} else {",
                *_indented(other),
                "}",
            ]
        lines = [head, f"switch ({selector}) {{"]
        for i, block in enumerate(k.blocks):
            lines += [
                f"case {i}: {{",
                *_indented(self.block(block, k.bindings[i])),
                f"{INDENT}break;",
                "}",
            ]
        lines += ["default:", INDENT + self.fail(k.failure, selector), "}"]
        return lines

    def block(self, block: kir.Block, bindings: list[kir.DimBinding]) -> list[str]:
        lines = [f"/* {c_comment(block.name)} */", *self.lines(block.kernels)]
        lines += [copy_line(self.plan, c) for c in block.copies]
        return lines + self.bind(bindings)

    def bind(self, bindings: list[kir.DimBinding]) -> list[str]:
        """Compute every new value first (they may read the old ones), check, assign."""
        if not bindings:
            return []
        lines = ["{"]
        first: dict[str, str] = {}
        for i, b in enumerate(bindings):
            lines.append(f"{INDENT}const int64_t nd{i} = {render_dim(b.value)};")
        for i, b in enumerate(bindings):
            name = render_dim(b.symbol)
            value = f"nd{i}"
            if name in first:
                lines.append(f"{INDENT}if ({value} != {first[name]}) {self.fail(b.failure, value)}")
                continue
            first[name] = value
            test = f"{value} < {b.lo}"
            if b.hi is not None:
                test += f" || {value} > {render_dim(b.hi)}"
            lines.append(f"{INDENT}if ({test}) {self.fail(b.failure, value)}")
            if b.capacity is not None:
                capacity = render_dim(b.capacity)
                lines.append(f"{INDENT}if ({value} > {capacity}) {self.fail(b.grow, value)}")
        for name, value in first.items():
            lines.append(f"{INDENT}{name} = {value}; dims[{slot_of(name)}] = {value};")
        return [*lines, "}"]

    # -- While ----------------------------------------------------------------------------------
    def loop(self, k: kir.Loop) -> list[str]:
        counter = f"it_{k.name}"
        pointers = [
            f"{C_TYPES[v.dtype]} *{v.current} = {v.first}, *{v.next} = {v.second};" for v in k.state
        ]
        swaps = [
            f"{{ {C_TYPES[v.dtype]} *swap = {v.current}; {v.current} = {v.next}; {v.next} = swap; }}"
            for v in k.state
        ]
        body = [*self.block(k.cond, []), f"if (!{k.pred}[0]) break;"]
        if k.max_iterations is not None:
            body.append(f"if ({counter} == {k.max_iterations}) {self.fail(k.failure, counter)}")
        body += [f"{counter}++;", *self.block(k.body, k.bindings), *swaps]
        return [
            f"{{  /* {k.name}: {_comment(k)} */",
            *_indented(pointers),
            *_indented(copy_line(self.plan, c) for c in k.init),
            *_indented(self.bind(k.init_bindings)),
            f"{INDENT}int64_t {counter} = 0;",
            f"{INDENT}for (;;) {{",
            *_indented(_indented(body)),
            f"{INDENT}}}",
            *_indented(copy_line(self.plan, c) for c in k.final),
            "}",
        ]


def copy_line(plan, c: kir.Copy) -> str:
    ctype = C_TYPES[c.dtype]
    return f"memcpy({c.dst}, {c.src}, (size_t)({render_dim(c.elements)}) * sizeof({ctype}));"


def slot_of(name: str) -> int:
    """The slot index of a slot identifier (`dim3` -> 3)."""
    return int(name.removeprefix("dim"))


def _indented(lines) -> list[str]:
    return [INDENT + line for line in lines]


def _comment(k) -> str:
    node = k.nodes[0]
    return c_comment(f"{node.name} ({node.op_type})")
