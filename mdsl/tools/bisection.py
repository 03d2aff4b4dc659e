"""Pass bisection: which optimization pass changed what a graph computes (`mdsl.bisect`,
or `mdsl.compare(g, feeds, bisect=True)`).

Accuracy problems often come from the metadata and the rewrites before the kernels. The
bisection replays `mdsl.optimize`'s pipeline one pass run at a time (fixed-point groups
unrolled into their rounds, exactly as `mdsl.optimize` runs them), runs each graph a pass
changed with `backend` on the feeds, and compares its outputs with the unoptimized graph
run by `reference`. It stops at the first pass after which an output mismatches and
reports:

- the pass, with the nodes it touched (added, removed, changed) and their dtype, shape,
  format and storage-format changes, from `mdsl.diff` of the graphs before and after it;
- the outputs of the graph after it against the reference (`CompareRow`s);
- the first tensor of that graph, in topological order, that differs from the same
  tensor before the pass: usually the node the pass got wrong.

Step 0 is the unoptimized graph run by `backend`; if it already mismatches, no pass is to
blame. A compiled backend ("c", "numba") compiles each step's graph as the passes left it
(`mdsl.compile(..., opt_level=0, debug=True)`). Under the interpreter, fusion grouping
only annotates nodes and cannot change results.

With a compiled backend, when the graph after the culprit pass has fusion groups, the
groups are bisected too: that graph is compiled with every group split into single-node
kernels; if it then matches, the groups are re-enabled in topological order, bisecting
on how many are enabled, and the report names the group whose fusion makes the results
diverge (`culprit_group`, `group_steps`), with the first tensor it changes. If the graph
diverges with every group split, the pass itself is to blame, not a fusion group.

>>> import numpy as np, mdsl
>>> with mdsl.Graph("g") as g:
...     x = g.input("x", (3,))
...     g.output((x + 0.0) * 2.0, "y")
>>> rep = mdsl.bisect(g, {"x": np.ones(3, np.float32)}, level=1)
>>> rep.ok, rep.culprit, [s.pass_name for s in rep.steps if s.changed]
(True, None, ['(unoptimized)', 'simplify'])
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from mdsl.ir.errors import GraphError, MdslError
from mdsl.ir.graph import CONST, INPUT, OUTPUT, Graph, Node
from mdsl.ir.rewrite import clone_graph
from mdsl.ir.text import clip, shorten_path
from mdsl.passes.fusion import fusion_groups
from mdsl.passes.manager import (
    PassInfo,
    get_pass,
    optimize_pipeline,
    run_schedule,
)
from mdsl.targets.registry import can, target_class
from mdsl.tools.compare import (
    _BACKENDS,
    TABLE_WIDTH,
    CompareRow,
    _promotion_target,
    _run,
    _run_promoted,
    _runner,
    row_of_arrays,
)
from mdsl.tools.diff import GraphDiff, diff, type_text

UNOPTIMIZED = "(unoptimized)"
SHOWN_TOUCHED = 30


@dataclass
class BisectStep:
    """One pass run (step 0: the unoptimized graph). `ok` is None when the step was not
    evaluated (the pass changed nothing, or bisection stopped before it)."""

    index: int
    pass_name: str
    changed: bool
    nodes_before: int
    nodes_after: int
    summary: str = ""
    ok: bool | None = None
    max_abs: float = float("nan")
    error: str = ""

    @property
    def result(self) -> str:
        if self.error:
            return "ERROR"
        if self.ok is None:
            return "unchanged" if not self.changed else "not run"
        return "ok" if self.ok else "FAIL"


@dataclass(frozen=True, slots=True)
class TouchedNode:
    """A node the culprit pass added (+), removed (-) or changed (~), with what changed."""

    mark: str
    name: str
    op_type: str
    details: tuple[str, ...]

    @property
    def type_changes(self) -> tuple[str, ...]:
        """The dtype/shape/format/storage-format changes among `details`."""
        return tuple(d for d in self.details if d.startswith(("output", "outputs")))


@dataclass(frozen=True, slots=True)
class DivergentGroup:
    """The fusion group whose fusion made the results diverge: its id and kind, its member
    nodes as (name, op type), and its position among the graph's groups (from 1)."""

    id: str
    kind: str
    nodes: tuple[tuple[str, str], ...]
    position: int
    total: int

    def describe(self) -> str:
        ops = "+".join(op for _, op in self.nodes)
        return f"{self.id} ({self.kind}: {ops}; group {self.position} of {self.total})"


@dataclass
class BisectReport:
    """What `mdsl.bisect` found; `ok`, `culprit`, `first_mismatch`, `table()`,
    `to_markdown()` (the interface of `mdsl.compare`'s report)."""

    graph: str
    steps: list[BisectStep]
    backend: str
    reference: str
    rtol: float
    atol: float
    level: int | None
    culprit: str | None = None
    outputs: list[CompareRow] = field(default_factory=list)
    touched: list[TouchedNode] = field(default_factory=list)
    first_divergence: CompareRow | None = None
    diff: GraphDiff | None = None
    group_steps: list[BisectStep] = field(default_factory=list)
    culprit_group: DivergentGroup | None = None
    group_divergence: CompareRow | None = None
    group_verdict: str = ""

    @property
    def ok(self) -> bool:
        return all(s.ok is not False and not s.error for s in self.steps)

    @property
    def culprit_step(self) -> BisectStep | None:
        return next((s for s in self.steps if s.ok is False or s.error), None)

    @property
    def first_mismatch(self) -> CompareRow | None:
        """The first tensor the culprit pass changed the value of, else its first failing
        output; None when every step matched."""
        if self.first_divergence is not None:
            return self.first_divergence
        return next((r for r in self.outputs if not r.ok), None)

    def summary(self) -> str:
        level = f"opt level {self.level}" if self.level is not None else "the given passes"
        return (
            f"bisect {self.graph!r} over {level}: {self.backend!r} after each pass vs the "
            f"unoptimized graph on {self.reference!r}, rtol={self.rtol:g} atol={self.atol:g}"
        )

    def verdict(self) -> str:
        step = self.culprit_step
        if step is None:
            return f"no divergence: all {len(self.steps)} steps match the reference"
        if step.index == 0:
            return "the unoptimized graph already differs: no pass is to blame"
        what = step.error or f"outputs differ (max abs {_num(step.max_abs)})"
        return f"first divergent pass: {step.pass_name} (step {step.index}): {what}"

    def shown_steps(self, all_steps: bool = False) -> list[BisectStep]:
        """The steps worth a line: those that changed the graph or failed (every step
        with `all_steps`)."""
        return [s for s in self.steps if all_steps or s.changed or s.error]

    def table(self, width: int = TABLE_WIDTH, all_steps: bool = False) -> str:
        """The report as text of at most `width` columns; pass runs that changed nothing
        are counted, not listed, unless `all_steps`."""
        lines = [*_wrap(self.summary(), width), self.verdict(), "", *self._step_lines(all_steps)]
        lines += self._culprit_lines(width)
        return "\n".join(clip(line, width) for line in lines)

    def to_markdown(self) -> str:
        lines = [f"**{self.summary()}**", "", self.verdict(), ""]
        lines += ["| step | pass | nodes | result | max abs |", "|---|---|---|---|---|"]
        for s in self.shown_steps():
            nodes = f"{s.nodes_before} → {s.nodes_after}" if s.index else str(s.nodes_after)
            lines.append(
                f"| {s.index} | {s.pass_name} | {nodes} | {s.result} | {_num(s.max_abs)} |"
            )
        if self.culprit is not None:
            lines += ["", f"Touched by `{self.culprit}`:", ""]
            lines += [
                f"- {t.mark} `{t.name}` ({t.op_type})" + "".join(f"; {d}" for d in t.details)
                for t in self.touched
            ]
        if self.first_divergence is not None:
            r = self.first_divergence
            lines += ["", f"First divergent tensor: `{r.tensor}` ({r.op_type}), {r.note}"]
        if self.group_steps:
            lines += [
                "",
                self.group_verdict,
                "",
                "| step | fusion groups fused | result | max abs |",
            ]
            lines.append("|---|---|---|---|")
            lines += [
                f"| {s.index} | {s.pass_name} | {s.result} | {_num(s.max_abs)} |"
                for s in self.group_steps
            ]
        if self.culprit_group is not None:
            group = self.culprit_group
            members = ", ".join(f"`{name}` ({op})" for name, op in group.nodes)
            lines += ["", f"First divergent fusion group: `{group.id}` ({group.kind}): {members}"]
        if self.group_divergence is not None:
            r = self.group_divergence
            lines += ["", f"First tensor it changes: `{r.tensor}` ({r.op_type}), {r.note}"]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()

    def _step_lines(self, all_steps: bool) -> list[str]:
        lines = [f"{'step':>4}  {'pass':<22}  {'nodes':<13}  {'result':<9}  {'max abs':>9}"]
        shown = self.shown_steps(all_steps)
        for s in shown:
            nodes = f"{s.nodes_before} -> {s.nodes_after}" if s.index else str(s.nodes_after)
            lines.append(
                f"{s.index:>4}  {shorten_path(s.pass_name, 22):<22}  {nodes:<13}  "
                f"{s.result:<9}  {_num(s.max_abs):>9}".rstrip()
            )
        if len(shown) < len(self.steps):
            lines.append(f"      (+{len(self.steps) - len(shown)} pass runs that changed nothing)")
        return lines

    def _group_lines(self, width: int) -> list[str]:
        if not self.group_steps:
            return []
        head = f"{'step':>4}  {'fusion groups fused':<22}  {'result':<9}  {'max abs':>9}"
        lines = ["", *_wrap(self.group_verdict, width), head]
        for s in self.group_steps:
            lines.append(f"{s.index:>4}  {s.pass_name:<22}  {s.result:<9}  {_num(s.max_abs):>9}")
        if self.culprit_group is not None:
            lines.append(f"first divergent fusion group: {self.culprit_group.describe()}")
            lines += [
                f"  {op:<18} {shorten_path(name, width - 21)}"
                for name, op in self.culprit_group.nodes[:SHOWN_TOUCHED]
            ]
        if self.group_divergence is not None:
            r = self.group_divergence
            lines += [f"first tensor it changes: {r.tensor} ({r.op_type})", f"  {r.note}"]
        return lines

    def _culprit_lines(self, width: int) -> list[str]:
        lines: list[str] = []
        if self.culprit is not None:
            counts = {m: sum(t.mark == m for t in self.touched) for m in "~+-"}
            lines += [
                "",
                f"touched by {self.culprit}: {counts['~']} changed, {counts['+']} added, "
                f"{counts['-']} removed",
            ]
            for t in self.touched[:SHOWN_TOUCHED]:
                lines.append(f"  {t.mark} ({t.op_type}) {shorten_path(t.name, width - 24)}")
                lines += [f"      {d}" for d in t.details]
            if len(self.touched) > SHOWN_TOUCHED:
                lines.append(f"  ... and {len(self.touched) - SHOWN_TOUCHED} more")
        if self.first_divergence is not None:
            r = self.first_divergence
            lines += ["", f"first divergent tensor: {r.tensor} ({r.op_type})", f"  {r.note}"]
        lines += self._group_lines(width)
        if self.outputs:
            after = self.culprit_step.pass_name if self.culprit_step else "the last pass"
            lines += ["", f"outputs after {after} against the reference:"]
            lines += [_output_line(r, width) for r in self.outputs]
        return lines


def _output_line(r: CompareRow, width: int) -> str:
    status = "ok" if r.ok else "FAIL"
    tail = f"  max_abs {_num(r.max_abs):>9}  cosine {_cos(r.cosine)}  {status}"
    if r.note:
        tail += f" ({r.note})"
    return f"  {shorten_path(r.tensor, max(12, width - len(tail) - 2))}{tail}"


def _num(v: float) -> str:
    if np.isnan(v):
        return "-"
    return "inf" if np.isinf(v) else ("0" if v == 0 else f"{v:.2e}")


def _cos(v: float) -> str:
    return "-" if np.isnan(v) else f"{v:.6f}"


def _wrap(text: str, width: int) -> list[str]:
    return textwrap.wrap(text, width, subsequent_indent="  ", break_on_hyphens=False)


# -- the steps --------------------------------------------------------------------------------
def _schedule(level: int | None, passes: Sequence | None) -> list[tuple[list[PassInfo], bool]]:
    if passes is not None:
        if isinstance(passes, (str, bytes)) or not isinstance(passes, Sequence):
            raise GraphError(f"passes must be a list of pass names, got {passes!r:.60}")
        return [([_as_pass(p) for p in passes], False)]
    if level is None:
        raise GraphError("bisect needs an optimization level or a list of passes")
    return optimize_pipeline(level)


def _as_pass(p) -> PassInfo:
    if isinstance(p, PassInfo):
        return p
    if isinstance(p, str):
        return get_pass(p)
    if callable(p):  # an unregistered pass function
        return PassInfo(getattr(p, "__name__", "pass"), p, frozenset(), "rewrite")
    raise GraphError(f"a pass is a registered name or a function, got {p!r:.60}")


# -- comparing -------------------------------------------------------------------------------
def _output_values(g: Graph, values: Mapping) -> dict[str, np.ndarray]:
    out = {}
    for name, tensor in g.outputs.items():
        for key in (tensor.name, name):
            if key in values:
                out[name] = np.asarray(values[key])
                break
    return out


def _compare_row(label: str, node: Node, ttype, a, b, rtol: float, atol: float) -> CompareRow:
    """`a` (the run) against `b` (the reference) as a CompareRow labelled `label`."""
    nan = float("nan")
    base = dict(
        tensor=label,
        node=node.name,
        op_type=node.op_type,
        layer=node.layer,
        dtype=ttype.dtype.value,
        format=ttype.format.value,
    )
    if a is None or b is None:
        note = "missing from the run" if a is None else "missing from the reference"
        return CompareRow(
            **base, shape=(), max_abs=nan, max_rel=nan, cosine=nan, ok=False, note=note
        )
    return row_of_arrays(base, a, b, rtol, atol)


def _output_rows(g: Graph, got: Mapping, want: dict, rtol: float, atol: float) -> list[CompareRow]:
    values = _output_values(g, got)
    return [
        _compare_row(name, t.producer, t.type, values.get(name), want.get(name), rtol, atol)
        for name, t in g.outputs.items()
    ]


def _first_divergence(d: GraphDiff, got: Mapping, before: Mapping, rtol, atol) -> CompareRow | None:
    """The first tensor of `d.b` (topological order) whose value differs from its match in
    `d.a`; tensors stored differently before and after (layout) are not compared."""
    back = {after: before_name for before_name, after in d.matches.items()}
    for node in d.b:
        if node.op_type in (INPUT, CONST, OUTPUT) or node.name not in back:
            continue
        old = d.a.node(back[node.name])
        for new_t, old_t in zip(node.outputs, old.outputs):
            if new_t.type.storage_shape != old_t.type.storage_shape:
                continue
            a, b = got.get(new_t.name), before.get(old_t.name)
            if a is None or b is None:
                continue
            row = _compare_row(
                new_t.name, node, new_t.type, np.asarray(a), np.asarray(b), rtol, atol
            )
            if not row.ok:
                was = _was(old, node)
                note = f"differs from before the pass{was}: max abs {_num(row.max_abs)}"
                return replace(row, note=note + (f"; {row.note}" if row.note else ""))
    return None


def _was(old: Node, new: Node) -> str:
    """` (was Add)`, ` (was Add Block/Add)` for a renamed node, or nothing."""
    if old.op_type == new.op_type and old.name == new.name:
        return ""
    name = "" if old.name == new.name else f" {old.name}"
    return f" (was {old.op_type}{name})"


def _touched(d: GraphDiff) -> list[TouchedNode]:
    nodes_a = {n.name: n for n in d.a}
    nodes_b = {n.name: n for n in d.b}
    touched = [TouchedNode("~", c.after, c.op_type, c.what) for c in d.changed]
    touched += [
        TouchedNode("+", name, nodes_b[name].op_type, _types(nodes_b[name])) for name in d.added
    ]
    touched += [
        TouchedNode("-", name, nodes_a[name].op_type, _types(nodes_a[name])) for name in d.removed
    ]
    return touched


def _types(node: Node) -> tuple[str, ...]:
    return tuple(f"output {i}: {type_text(t.type)}" for i, t in enumerate(node.outputs))


# -- the entry point ---------------------------------------------------------------------------
def bisect(
    g: Graph,
    feeds: Mapping[str, np.ndarray],
    level: int = 2,
    *,
    passes: Sequence | None = None,
    backend: str = "python",
    reference: str = "python",
    rtol: float = 1e-3,
    atol: float = 1e-5,
    reference_dtype=None,
    debug: bool | None = None,
    on_step: Callable[[BisectStep], None] | None = None,
) -> BisectReport:
    """Apply `mdsl.optimize(g, level)`'s passes one at a time (or `passes`, each once, in
    order) and name the first after which `backend`'s outputs differ from the
    unoptimized graph's outputs on `reference` (see the module docstring). `on_step` is
    called with each step once it is done (progress display).

    >>> import numpy as np, mdsl
    >>> from mdsl.passes import PassResult
    >>> def flip_add(g):   # a deliberately broken "optimization"
    ...     for n in g:
    ...         if n.op_type == "Add":
    ...             n.op_type = "Sub"
    ...     return PassResult(g, changed=True)
    >>> with mdsl.Graph("g") as g:
    ...     x = g.input("x", (3,))
    ...     g.output(mdsl.ops.relu(x + 1.0), "y")
    >>> rep = mdsl.bisect(g, {"x": np.ones(3, np.float32)}, passes=["simplify", flip_add])
    >>> rep.ok, rep.culprit, rep.first_mismatch.node
    (False, 'flip_add', 'Add')
    >>> rep.touched[0].details
    ('op type: Add -> Sub',)
    """
    if not isinstance(g, Graph):
        raise GraphError(f"mdsl.bisect takes an mdsl.Graph, got {type(g).__name__}")
    schedule = _schedule(level, passes)
    run_backend, run_reference = _step_runner(backend), _runner(reference)
    if reference_dtype is None:
        want_all = _run("reference", reference, run_reference, g, feeds)
    else:
        target = _promotion_target(reference_dtype)
        want_all = _run_promoted(g, feeds, reference, run_reference, target)
    want = _output_values(g, want_all)
    report = BisectReport(
        g.name, [], backend, reference, rtol, atol, None if passes is not None else level
    )
    start = BisectStep(0, UNOPTIMIZED, True, len(g), len(g))
    if backend == reference and reference_dtype is None:  # step 0 would repeat the reference
        got = _record(start, g, want_all, want, rtol, atol, report)
    else:
        got = _evaluate(start, g, feeds, backend, run_backend, want, rtol, atol, report)
    report.steps.append(start)
    if start.ok is False or start.error:
        return report
    last_graph, last_values = g, got
    replay = run_schedule(clone_graph(g), schedule, debug=debug, snapshots=True)
    for index, run in enumerate(replay, start=1):
        step = BisectStep(
            index, run.info.name, run.changed, len(run.before), len(run.after), error=run.failure
        )
        step.summary = run.after.pass_log[-1].summary if run.changed else ""
        report.steps.append(step)
        if on_step is not None:
            on_step(step)
        if run.failure:
            report.culprit = run.info.name
            return report
        if not run.changed:
            continue
        got = _evaluate(step, run.after, feeds, backend, run_backend, want, rtol, atol, report)
        if step.ok is False or step.error:
            _explain(report, run.info.name, last_graph, run.after, got, last_values)
            if step.ok is False and _fuses(backend):
                _GroupBisection(report, run.after, feeds, run_backend, want, on_step).run(got)
            return report
        last_graph, last_values = run.after, got
    return report


def _step_runner(backend: str):
    """How each step's graph runs: compare's runner, except that a compiled backend
    compiles the graph as it is (`opt_level=0`), where compare's would optimize it again."""
    from mdsl.runtime.compile import compile

    if backend in _BACKENDS or not can(backend, "build"):
        return _runner(backend)

    def run(g: Graph, feeds):
        return compile(g, backend, opt_level=0, debug=True).run(feeds, capture=True)

    return run


def _fuses(backend: str) -> bool:
    """Whether `backend`'s kernels follow the fusion groups (a group can then be blamed)."""
    return can(backend, "build") and target_class(backend).fuses


def _evaluate(step, graph, feeds, backend, run_backend, want, rtol, atol, report) -> Mapping:
    """Run `graph`, compare its outputs with `want`, record the result on `step`."""
    try:
        got = _run("backend", backend, run_backend, graph, feeds)
    except MdslError as e:
        step.error = f"running the graph failed: {e}"
        return {}
    return _record(step, graph, got, want, rtol, atol, report)


def _record(step, graph, got, want, rtol, atol, report) -> Mapping:
    """Compare `graph`'s outputs in `got` with `want`; the result goes on `step`."""
    report.outputs = _output_rows(graph, got, want, rtol, atol)
    step.ok = all(r.ok for r in report.outputs)
    worst = [r.max_abs for r in report.outputs if not np.isnan(r.max_abs)]
    step.max_abs = max(worst) if worst else float("nan")
    return got


class _GroupBisection:
    """Which fusion group of `graph` (the culprit pass's result) makes the compiled results
    diverge: compile it with every group split, then with the first k groups (in
    topological order) fused, bisecting on k. Invariant: k = lo matches, k = hi does not;
    so group hi is one whose fusion turns a match into a mismatch."""

    def __init__(self, report: BisectReport, graph: Graph, feeds, run_backend, want, on_step):
        self.report, self.graph, self.feeds = report, graph, feeds
        self.run_backend, self.want, self.on_step = run_backend, want, on_step
        self.groups = fusion_groups(graph)
        self.index = report.steps[-1].index

    def run(self, failing_values: Mapping) -> None:
        total = len(self.groups)
        if not total:
            return
        split, lo_values = self._evaluate(0)
        if not split.ok:
            self.report.group_verdict = (
                f"with all {total} fusion groups split into single nodes the outputs still "
                f"differ: the pass {self.report.culprit} is to blame, not a fusion group"
            )
            return
        self.report.group_verdict = (
            f"with all {total} fusion groups split the outputs match; fusing them in "
            "topological order:"
        )
        lo, hi, hi_values = 0, total, failing_values
        while hi - lo > 1:
            mid = (lo + hi) // 2
            step, values = self._evaluate(mid)
            if step.ok:
                lo, lo_values = mid, values
            else:
                hi, hi_values = mid, values
        self._blame(hi, lo_values, hi_values)

    def _evaluate(self, fused: int) -> tuple[BisectStep, Mapping]:
        total = len(self.groups)
        self.index += 1
        label = "none (all split)" if fused == 0 else f"first {fused} of {total}"
        graph = _with_groups(self.graph, {g.id for g in self.groups[:fused]})
        step = BisectStep(self.index, label, True, len(graph), len(graph))
        report = self.report
        outputs = report.outputs  # the culprit pass's outputs stay the ones reported
        got = _evaluate(
            step,
            graph,
            self.feeds,
            report.backend,
            self.run_backend,
            self.want,
            report.rtol,
            report.atol,
            report,
        )
        report.outputs = outputs
        report.group_steps.append(step)
        if self.on_step is not None:
            self.on_step(step)
        return step, got

    def _blame(self, position: int, before: Mapping, after: Mapping) -> None:
        group = self.groups[position - 1]
        nodes = tuple((n.name, n.op_type) for n in group.nodes)
        self.report.culprit_group = DivergentGroup(
            group.id, group.kind, nodes, position, len(self.groups)
        )
        self.report.group_divergence = _first_changed_tensor(
            self.graph, after, before, self.report.rtol, self.report.atol, group.id
        )


def _with_groups(g: Graph, fused: set[str]) -> Graph:
    """A copy of `g` where only the groups in `fused` stay fusion groups."""
    copy = clone_graph(g)
    for node in copy:
        if node.fusion_group is not None and node.fusion_group not in fused:
            node.fusion_group = None
    return copy


def _first_changed_tensor(g: Graph, got: Mapping, before: Mapping, rtol, atol, group: str):
    """The first tensor of `g` (topological order) whose value in `got` differs from the
    same tensor in `before` (the run with group `group` split)."""
    for node in g:
        if node.op_type in (INPUT, CONST, OUTPUT):
            continue
        for t in node.outputs:
            a, b = got.get(t.name), before.get(t.name)
            if a is None or b is None:
                continue
            row = _compare_row(t.name, node, t.type, np.asarray(a), np.asarray(b), rtol, atol)
            if not row.ok:
                note = f"differs once {group} is fused: max abs {_num(row.max_abs)}"
                return replace(row, note=note + (f"; {row.note}" if row.note else ""))
    return None


def _explain(report: BisectReport, name: str, before: Graph, after: Graph, got, prev) -> None:
    report.culprit = name
    report.diff = diff(before, after)
    report.touched = _touched(report.diff)
    if got:
        report.first_divergence = _first_divergence(
            report.diff, got, prev, report.rtol, report.atol
        )
