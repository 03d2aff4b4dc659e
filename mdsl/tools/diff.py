"""Structural diff of two graphs: `mdsl.diff(a, b)`.

Nodes are matched by name first. Nodes left over (renamed by a pass, or named anew) are
then matched by structure, in topological order of `b`: same op type and inputs produced
by already matched nodes (constants: same value), preferring equal attrs. What stays
unmatched in `b` was added, what stays unmatched in `a` was removed; a matched pair whose
op type, attrs, inputs, output types (dtype, shape, format, storage format) or device
differ changed. Beside the node lists the report counts op types before and after and
compares the fusion groups the two graphs record. A control-flow node whose subgraphs
differ in size is reported as changed; subgraph nodes are not matched one by one.

>>> import mdsl
>>> with mdsl.Graph("g") as g:
...     x = g.input("x", (2, 3))
...     g.output(mdsl.ops.relu(x * 2.0), "y")
>>> d = mdsl.diff(g, mdsl.passes.run(g, ["fuse"]))
>>> d.added, d.removed, d.changed
([], [], [])
>>> [(grp.kind, len(grp)) for grp in d.groups_added]
[('pointwise', 2)]
"""

from __future__ import annotations

import hashlib
import textwrap
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from mdsl.ir.errors import GraphError
from mdsl.ir.graph import CONST, Graph, Node, Tensor
from mdsl.ir.html import html_block, html_table
from mdsl.ir.initializer import ParamInit
from mdsl.ir.text import WIDTH
from mdsl.passes.fusion import FusionGroup, fusion_groups

SHOWN_PER_SECTION = 40


@dataclass(frozen=True, slots=True)
class NodeChange:
    """A node present in both graphs (`before` in a, `after` in b) that differs."""

    before: str
    after: str
    op_type: str
    what: tuple[str, ...]

    @property
    def renamed(self) -> bool:
        return self.before != self.after


@dataclass(frozen=True, slots=True)
class OpCount:
    op_type: str
    before: int
    after: int

    @property
    def delta(self) -> int:
        return self.after - self.before


@dataclass
class GraphDiff:
    """What `mdsl.diff(a, b)` found. Node lists hold names: `added` (of b), `removed`
    (of a), `changed` (NodeChange records), `renamed` ((name in a, name in b) pairs matched
    by structure); `matches` maps every matched name of a to its node in b."""

    a: Graph
    b: Graph
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    changed: list[NodeChange] = field(default_factory=list)
    renamed: list[tuple[str, str]] = field(default_factory=list)
    matches: dict[str, str] = field(default_factory=dict)
    op_counts: list[OpCount] = field(default_factory=list)
    groups_before: list[FusionGroup] = field(default_factory=list)
    groups_after: list[FusionGroup] = field(default_factory=list)
    groups_removed: list[FusionGroup] = field(default_factory=list)
    groups_added: list[FusionGroup] = field(default_factory=list)

    @property
    def identical(self) -> bool:
        """No node added, removed, changed or renamed, and the same fusion groups."""
        return not (
            self.added
            or self.removed
            or self.changed
            or self.renamed
            or self.groups_added
            or self.groups_removed
        )

    def __bool__(self) -> bool:
        return not self.identical

    def summary(self) -> str:
        return (
            f"{len(self.added)} added, {len(self.removed)} removed, "
            f"{len(self.changed)} changed, {len(self.renamed)} renamed"
        )

    def table(self, width: int = WIDTH, limit: int = SHOWN_PER_SECTION) -> str:
        """The report as text lines of at most `width` columns; each section lists at
        most `limit` entries."""
        return "\n".join(_fit(line, width) for line in _report_lines(self, width, limit))

    def __str__(self) -> str:
        return self.table()

    def __repr__(self) -> str:
        return f"GraphDiff({self.a.name!r} -> {self.b.name!r}: {self.summary()})"

    def _repr_html_(self) -> str:
        """Added, removed, changed and renamed nodes and op counts (for notebooks)."""
        rows = [["added", n] for n in self.added[:SHOWN_PER_SECTION]]
        rows += [["removed", n] for n in self.removed[:SHOWN_PER_SECTION]]
        rows += [
            ["changed", f"{c.after} ({c.op_type}): {', '.join(c.what)}"]
            for c in self.changed[:SHOWN_PER_SECTION]
        ]
        rows += [["renamed", f"{a} -> {b}"] for a, b in self.renamed[:SHOWN_PER_SECTION]]
        counts = [[c.op_type, c.before, c.after] for c in self.op_counts if c.before != c.after]
        title = f"diff {self.a.name!r} -> {self.b.name!r}: {self.summary()}"
        return html_block(
            title,
            html_table(["", "node"], rows),
            html_table(["op type", "before", "after"], counts),
        )


def diff(a: Graph, b: Graph) -> GraphDiff:
    """Compare graph `a` (before) with graph `b` (after); see `GraphDiff`.

    >>> import mdsl
    >>> with mdsl.Graph("g") as g:
    ...     x = g.input("x", (2, 3))
    ...     g.output(mdsl.ops.identity(x) + 0.0, "y")
    >>> d = mdsl.diff(g, mdsl.passes.run(g, ["simplify"]))
    >>> d.removed, d.summary()
    (['Identity', 'Const', 'Add'], '0 added, 3 removed, 1 changed, 0 renamed')
    >>> print(d.table())  # doctest: +ELLIPSIS
    diff 'g' (5 nodes) -> 'g' (2 nodes)
      0 added, 3 removed, 1 changed, 0 renamed
    ...
    changed (1)
      ~ (Output) Output_y
          input 0: Add -> x
    """
    for graph, which in ((a, "first"), (b, "second")):
        if not isinstance(graph, Graph):
            raise GraphError(
                f"mdsl.diff compares two mdsl.Graphs; the {which} is a {type(graph).__name__}"
            )
    matches = _match_nodes(a, b)
    result = GraphDiff(a, b, matches={x.name: y.name for x, y in matches.items()})
    b_matched = {id(y) for y in matches.values()}
    result.added = [n.name for n in b if id(n) not in b_matched]
    result.removed = [n.name for n in a if n not in matches]
    back = {id(y): x for x, y in matches.items()}
    for x, y in matches.items():
        what = _node_changes(x, y, back)
        if what:
            result.changed.append(NodeChange(x.name, y.name, y.op_type, tuple(what)))
        elif x.name != y.name:
            result.renamed.append((x.name, y.name))
    result.op_counts = _op_counts(a, b)
    _compare_groups(result, back)
    return result


# -- matching ------------------------------------------------------------------------------------
def _match_nodes(a: Graph, b: Graph) -> dict[Node, Node]:
    matches = {x: b.node(x.name) for x in a if b.has_node(x.name)}
    a_names = {id(x): x.name for x in a}
    b_as_a_names = {id(y): x.name for x, y in matches.items()}  # b node -> its match's name
    waiting: dict[tuple | None, list[Node]] = {}  # None: a producer was unmatched
    for x in a:
        if x not in matches:
            waiting.setdefault(_structure_key(x, a_names), []).append(x)
    for y in b:
        if id(y) in b_as_a_names:
            continue
        key = _structure_key(y, b_as_a_names)
        candidates = waiting.get(key) if key is not None else None
        if candidates:
            x = next((c for c in candidates if _same_attrs(c.attrs, y.attrs)), candidates[0])
            candidates.remove(x)
            matches[x] = y
            b_as_a_names[id(y)] = x.name
    return matches


def _structure_key(node: Node, names: dict[int, str]) -> tuple | None:
    """(op type, inputs as (matched producer name, output index)), or a constant's value;
    None when an input's producer is not matched yet."""
    if node.op_type == CONST:
        return (CONST, _value_key(node.attrs.get("value")))
    inputs: list[tuple[str, int] | None] = []
    for t in node.inputs:
        if t is None:
            inputs.append(None)
            continue
        producer = names.get(id(t.producer))
        if producer is None:
            return None
        inputs.append((producer, t.index))
    return (node.op_type, tuple(inputs))


def _value_key(value) -> tuple:
    if isinstance(value, ParamInit):
        return ("init", value)
    if isinstance(value, np.ndarray):
        digest = hashlib.blake2b(np.ascontiguousarray(value).tobytes(), digest_size=16).hexdigest()
        return (str(value.dtype), value.shape, digest)
    return ("other", id(value))


def _same_attrs(p: dict, q: dict) -> bool:
    return p.keys() == q.keys() and all(_same_value(p[k], q[k]) for k in p)


def _same_value(p, q) -> bool:
    if isinstance(p, np.ndarray) or isinstance(q, np.ndarray):
        return (
            isinstance(p, np.ndarray)
            and isinstance(q, np.ndarray)
            and p.dtype == q.dtype
            and np.array_equal(p, q)
        )
    try:
        return bool(p == q)
    except Exception:  # an attr type whose == is not a plain truth value
        return p is q


# -- what changed in a matched pair --------------------------------------------------------------
def _node_changes(x: Node, y: Node, back: dict[int, Node]) -> list[str]:
    what = []
    if x.op_type != y.op_type:
        what.append(f"op type: {x.op_type} -> {y.op_type}")
    for key in sorted(set(x.attrs) | set(y.attrs)):
        p, q = x.attrs.get(key, _MISSING), y.attrs.get(key, _MISSING)
        if not _same_value(p, q):
            what.append(f"attr {key}: {_show(p)} -> {_show(q)}")
    what += _input_changes(x, y, back)
    what += _output_changes(x, y)
    if x.device != y.device:
        what.append(f"device: {x.device} -> {y.device}")
    for key in sorted(set(x.subgraphs) | set(y.subgraphs)):
        p, q = x.subgraphs.get(key), y.subgraphs.get(key)
        if p is None or q is None or len(p) != len(q):
            what.append(f"subgraph {key}: {_count(p)} -> {_count(q)} nodes")
    return what


class _Missing:
    def __repr__(self) -> str:
        return "(none)"


_MISSING = _Missing()


def _count(g: Graph | None) -> str:
    return "no" if g is None else str(len(g))


def _input_changes(x: Node, y: Node, back: dict[int, Node]) -> list[str]:
    out = []
    for i in range(max(len(x.inputs), len(y.inputs))):
        p = x.inputs[i] if i < len(x.inputs) else None
        q = y.inputs[i] if i < len(y.inputs) else None
        if not _same_input(p, q, back):
            out.append(f"input {i}: {_tensor_name(p)} -> {_tensor_name(q)}")
    return out


def _same_input(p: Tensor | None, q: Tensor | None, back: dict[int, Node]) -> bool:
    if p is None or q is None:
        return p is None and q is None
    return back.get(id(q.producer)) is p.producer and p.index == q.index


def _tensor_name(t: Tensor | None) -> str:
    return "(none)" if t is None else t.name


def _output_changes(x: Node, y: Node) -> list[str]:
    if len(x.outputs) != len(y.outputs):
        return [f"outputs: {len(x.outputs)} -> {len(y.outputs)}"]
    return [
        f"output {i}: {type_text(p.type)} -> {type_text(q.type)}"
        for i, (p, q) in enumerate(zip(x.outputs, y.outputs))
        if p.type != q.type
    ]


def type_text(t) -> str:
    """`float32[N,3,8,8] NCHW as NHWC`: dtype, shape, format and storage format."""
    storage = f" as {t.storage_format}" if t.storage_format is not None else ""
    return t.describe() + storage


def _show(value, limit: int = 40) -> str:
    if isinstance(value, np.ndarray):
        return f"array {value.dtype}[{','.join(map(str, value.shape))}]"
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# -- counts and groups -----------------------------------------------------------------------------
def _op_counts(a: Graph, b: Graph) -> list[OpCount]:
    before, after = Counter(n.op_type for n in a), Counter(n.op_type for n in b)
    return [OpCount(op, before[op], after[op]) for op in sorted(set(before) | set(after))]


def _compare_groups(result: GraphDiff, back: dict[int, Node]) -> None:
    result.groups_before = fusion_groups(result.a)
    result.groups_after = fusion_groups(result.b)
    before = {frozenset(grp.names): grp for grp in result.groups_before}
    after = {
        frozenset(back[id(n)].name if id(n) in back else f"+{n.name}" for n in grp.nodes): grp
        for grp in result.groups_after
    }
    result.groups_removed = [grp for key, grp in before.items() if key not in after]
    result.groups_added = [grp for key, grp in after.items() if key not in before]


# -- the text report ---------------------------------------------------------------------------
def _report_lines(d: GraphDiff, width: int, limit: int) -> list[str]:
    lines = [
        f"diff {d.a.name!r} ({len(d.a)} nodes) -> {d.b.name!r} ({len(d.b)} nodes)",
        f"  {d.summary()}",
    ]
    if d.identical:
        return [*lines, "  no structural difference"]
    lines += ["", *_op_count_lines(d)]
    nodes_b = {n.name: n for n in d.b}
    nodes_a = {n.name: n for n in d.a}
    added = [nodes_b[name] for name in d.added[:limit]]
    removed = [nodes_a[name] for name in d.removed[:limit]]
    column = _name_column(added + removed, width)
    lines += _section("added", added, lambda n: _node_line("+", n, column), limit, len(d.added))
    lines += _section(
        "removed", removed, lambda n: _node_line("-", n, column), limit, len(d.removed)
    )
    lines += _section("changed", d.changed, _change_lines, limit)
    lines += _section("renamed", d.renamed, lambda pair: f"  = {pair[0]} -> {pair[1]}", limit)
    lines += _group_lines(d, width, limit)
    return lines


def _op_count_lines(d: GraphDiff) -> list[str]:
    rows = [c for c in d.op_counts if c.delta] or d.op_counts
    name_width = max([len("op type"), *(len(c.op_type) for c in rows)])
    name_width = min(name_width, 40)
    header = f"  {'op type':<{name_width}}  {'before':>7}  {'after':>7}  {'delta':>7}"
    lines = ["op counts (changed only)" if len(rows) < len(d.op_counts) else "op counts", header]
    for c in rows:
        delta = f"{c.delta:+d}" if c.delta else ""
        lines.append(
            f"  {_shorten(c.op_type, name_width):<{name_width}}  {c.before:>7}  {c.after:>7}  {delta:>7}"
        )
    return lines


def _section(title: str, items: list, render, limit: int, total: int | None = None) -> list[str]:
    total = len(items) if total is None else total
    if not total:
        return []
    lines = ["", f"{title} ({total})"]
    for item in items[:limit]:
        rendered = render(item)
        lines += rendered if isinstance(rendered, list) else [rendered]
    if total > limit:
        lines.append(f"  ... and {total - limit} more")
    return lines


def _node_line(mark: str, node: Node, name_width: int) -> str:
    return f"  {mark} {_shorten(node.name, name_width):<{name_width}}  {_node_detail(node)}"


def _node_detail(node: Node) -> str:
    types = ", ".join(type_text(t.type) for t in node.outputs)
    return f"{node.op_type:<18} {types}".rstrip()


def _name_column(nodes: list[Node], width: int) -> int:
    """The width of the name column: the longest name, within what the details leave."""
    longest = max((len(n.name) for n in nodes), default=0)
    detail = max((len(_node_detail(n)) for n in nodes), default=0)
    return max(min(longest, width - 6 - detail, 56), 24)


def _change_lines(change: NodeChange) -> list[str]:
    name = f"{change.before} -> {change.after}" if change.renamed else change.after
    return [f"  ~ ({change.op_type}) {name}", *(f"      {w}" for w in change.what)]


def _group_lines(d: GraphDiff, width: int, limit: int) -> list[str]:
    if not (d.groups_before or d.groups_after):
        return []
    kinds_a = Counter(grp.kind for grp in d.groups_before)
    kinds_b = Counter(grp.kind for grp in d.groups_after)
    per_kind = ", ".join(
        f"{kind} {kinds_a[kind]} -> {kinds_b[kind]}"
        for kind in sorted(set(kinds_a) | set(kinds_b))
        if kinds_a[kind] != kinds_b[kind]
    )
    lines = ["", f"fusion groups: {len(d.groups_before)} -> {len(d.groups_after)}"]
    if per_kind:
        lines.append(f"  by kind: {per_kind}")
    multi = lambda groups: [grp for grp in groups if len(grp) > 1]  # noqa: E731
    for mark, groups in (("-", multi(d.groups_removed)), ("+", multi(d.groups_added))):
        for grp in groups[:limit]:
            lines += _group_member_lines(mark, grp, width)
        if len(groups) > limit:
            lines.append(f"  ... and {len(groups) - limit} more")
    return lines


def _group_member_lines(mark: str, grp: FusionGroup, width: int) -> list[str]:
    """`+ fg1 extern_epilogue (3 nodes) in Block/conv: Conv, BatchNormalization, Relu`: member
    names relative to their common layer path, wrapped."""
    prefix = _common_layer(grp.names)
    names = [n[len(prefix) + 1 :] if prefix else n for n in grp.names]
    where = f" in {_shorten(prefix, width // 2)}" if prefix else ""
    head = f"  {mark} {grp.id} {grp.kind} ({len(grp)} nodes){where}: "
    return textwrap.wrap(
        ", ".join(_shorten(n, width - 8) for n in names),
        width,
        initial_indent=head,
        subsequent_indent=" " * 6,
        break_long_words=False,
        break_on_hyphens=False,
    )


def _common_layer(names: list[str]) -> str:
    paths = [n.split("/")[:-1] for n in names]
    common = []
    for parts in zip(*paths):
        if len(set(parts)) != 1:
            break
        common.append(parts[0])
    return "/".join(common)


def _shorten(text: str, width: int) -> str:
    """`text` cut in the middle to `width` characters (node paths keep both ends)."""
    if len(text) <= width:
        return text
    keep = max(width - 3, 2)
    head = keep // 2
    return text[:head] + "..." + text[len(text) - (keep - head) :]


def _fit(line: str, width: int) -> str:
    """`line` within `width` columns: "a -> b" lines shorten each side, others the middle."""
    if len(line) <= width:
        return line
    indent = line[: len(line) - len(line.lstrip())]
    body = line[len(indent) :]
    room = width - len(indent)
    if " -> " in body:
        left, right = body.split(" -> ", 1)
        half = (room - 4) // 2
        return f"{indent}{_shorten(left, half)} -> {_shorten(right, room - 4 - half)}"
    return indent + _shorten(body, room)
