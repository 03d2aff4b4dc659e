"""Per-node accuracy comparison of two executions of one graph (`mdsl.compare`).

Both executions capture every tensor; the report aligns them node by node in topological
order, so the first failing row is where the two first disagree, which is usually the
node to look at (later rows inherit its error).

Executions come from a small registry, `name -> run(g, feeds) -> {tensor name: array}`:
"python", "expr" and "auto" are the interpreter with that `impl`; every other target that
builds ("c", "numba", ...) runs as a debug build (`mdsl.compile(g, backend, debug=True)`),
which stores every node's value even inside fused kernels; others plug in with
`register_backend(name, run)`. A run may leave out tensors it never computes (a node
the optimizer folded away); those rows are skipped, graph outputs never are.

`reference_dtype="float32"` runs the reference with every narrower float (float16,
bfloat16) promoted to float32, inputs, constants and casts included, and rounds its
tensors back before comparing: a node that fails then loses accuracy to precision, not
to a logic bug.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from mdsl.ir.dtype import FLOATS, DType
from mdsl.ir.errors import DTypeError, ExecutionError, MdslError
from mdsl.ir.graph import CONST, INPUT, OUTPUT, Graph, Node
from mdsl.ir.html import escape, html_block, html_table
from mdsl.ir.rewrite import all_graphs
from mdsl.ir.tensor_type import TensorType
from mdsl.ir.text import WIDTH, clip, shorten_path
from mdsl.ir.tracebacks import api_boundary
from mdsl.targets.python.interpreter import interpret
from mdsl.targets.registry import can, target_names

Runner = Callable[[Graph, Mapping[str, np.ndarray]], Mapping[str, np.ndarray]]
_BACKENDS: dict[str, Runner] = {}
TABLE_WIDTH = WIDTH


def register_backend(name: str, run: Runner) -> None:
    """Make `name` usable as `compare`'s backend or reference. `run(g, feeds)` returns
    the tensors it computed by name (graph outputs at least, by tensor or output name).

    >>> import mdsl
    >>> register_backend("python-again", lambda g, feeds: mdsl.interpret(g, feeds, capture=True))
    """
    if not isinstance(name, str) or not name or not callable(run):
        raise ExecutionError(f"register_backend needs a name and a callable, got {name!r}")
    _BACKENDS[name] = run


def backends() -> list[str]:
    """Names `compare` accepts: those registered here and every target that builds."""
    return sorted(set(_BACKENDS) | set(target_names("build")))


def _interpreter(impl: str) -> Runner:
    def run(g: Graph, feeds):
        return interpret(g, feeds, capture=True, impl=impl)

    return run


for _impl in ("python", "expr", "auto"):
    register_backend(_impl, _interpreter(_impl))


def _compiled(backend: str) -> Runner:
    """A debug build (`mdsl.compile(g, backend, debug=True)`): every node's output is
    materialized, so rows align node by node even inside fused kernels."""

    def run(g: Graph, feeds):
        from mdsl.runtime.compile import compile

        return compile(g, backend, debug=True).run(feeds, capture=True)

    return run


# -- the report ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class CompareRow:
    """One tensor of one node: where it is, what it is, how far the two runs differ."""

    tensor: str
    node: str
    op_type: str
    layer: str
    dtype: str
    format: str
    shape: tuple
    max_abs: float
    max_rel: float
    cosine: float
    ok: bool
    note: str = ""

    @property
    def skipped(self) -> bool:
        return bool(self.note) and self.ok


@dataclass
class CompareReport:
    """Rows in topological order; `ok`, `first_mismatch`, `table()`, `to_markdown()`."""

    rows: list[CompareRow]
    backend: str
    reference: str
    rtol: float
    atol: float
    reference_dtype: str | None = None

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.rows)

    @property
    def mismatches(self) -> list[CompareRow]:
        return [r for r in self.rows if not r.ok]

    @property
    def first_mismatch(self) -> CompareRow | None:
        """The first failing row in topological order: where the runs first disagree."""
        return next((r for r in self.rows if not r.ok), None)

    def row(self, tensor: str) -> CompareRow:
        for r in self.rows:
            if r.tensor == tensor:
                return r
        raise ExecutionError(f"the report has no row for tensor {tensor!r}")

    def summary(self) -> str:
        """What was compared and how many tensors mismatched."""
        ref = repr(self.reference) + (f" in {self.reference_dtype}" if self.reference_dtype else "")
        return (
            f"compare {self.backend!r} against {ref} (rtol={self.rtol:g}, atol={self.atol:g}): "
            f"{len(self.rows)} tensors, {len(self.mismatches)} mismatched"
        )

    def _first_line(self) -> str | None:
        first = self.first_mismatch
        if first is None:
            return None
        layer = f", layer {first.layer}" if first.layer else ""
        return f"first mismatch: {first.tensor} ({first.op_type}{layer})"

    def table(self, width: int = TABLE_WIDTH) -> str:
        """A fixed-width table (at most `width` columns), one line per tensor, after the
        summary and the first mismatch."""
        cells = [_cells(r) for r in self.rows]
        widths = _column_widths(cells, width)
        first = self._first_line()
        lines = [clip(self.summary(), width)] + ([clip(first, width)] if first else [])
        lines.append(_line(_HEADERS, widths))
        lines += [_line(c, widths) for c in cells]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"CompareReport({self.summary()})"

    def _repr_html_(self) -> str:
        """The summary and one row per tensor, mismatches marked (for notebooks)."""
        first = self._first_line()
        table = html_table(
            _HEADERS, [_cells(r) for r in self.rows], row_classes=[_row_class(r) for r in self.rows]
        )
        note = f"<p>{escape(first)}</p>" if first else ""
        return html_block(self.summary(), note, table)

    def to_markdown(self) -> str:
        """The report as a Markdown table, one row per tensor (the layer is the tensor
        name's path; a format other than ND follows the dtype, as in `table()`)."""
        header = "| tensor | op | dtype | shape | max abs | max rel | cosine | ok |"
        first = self._first_line()
        lines = [f"**{self.summary()}**"] + ([f"\n{first}"] if first else [])
        lines += ["", header, "|" + "---|" * 8]
        for r in self.rows:
            tensor, op, dtype, shape, max_abs, max_rel, cosine, _ = _cells(r)
            status = "ok" if r.ok else "**FAIL**"
            if r.note:
                status += f" ({r.note})"
            lines.append(
                f"| `{tensor}` | {op} | {dtype} | {shape} | {max_abs} | {max_rel} | {cosine} "
                f"| {status} |"
            )
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


_HEADERS = ("tensor", "op", "dtype", "shape", "max_abs", "max_rel", "cosine", "ok")
_CAPS = (None, 12, 12, 16, 9, 9, 8, 4)  # None: the tensor column takes what is left


def _short_dtype(name: str) -> str:
    """`f32`, `bf16`, `i64`, `u8`, `bool`: dtype names short enough for a table column."""
    for long, short in (("bfloat", "bf"), ("float", "f"), ("uint", "u"), ("int", "i")):
        if name.startswith(long):
            return short + name[len(long) :]
    return name


def _row_class(r: CompareRow) -> str:
    return "" if r.ok else "bad"


def _cells(r: CompareRow) -> tuple[str, ...]:
    dtype = _short_dtype(r.dtype)
    dtype = dtype if r.format == "ND" else f"{dtype} {r.format}"
    shape = "[" + ",".join(map(str, r.shape)) + "]"
    status = ("skip" if r.skipped else "ok") if r.ok else "FAIL"
    return (
        r.tensor,
        r.op_type,
        dtype,
        shape,
        _num(r.max_abs),
        _num(r.max_rel),
        _cos(r.cosine),
        status,
    )


def _column_widths(cells: list, width: int) -> list[int]:
    widths = []
    for i, cap in enumerate(_CAPS):
        natural = max([len(_HEADERS[i])] + [len(c[i]) for c in cells])
        widths.append(natural if cap is None else min(natural, cap))
    fixed = sum(widths[1:]) + 2 * (len(widths) - 1)
    widths[0] = max(8, min(widths[0], width - fixed))
    return widths


def _line(cells, widths) -> str:
    parts = []
    for i, (text, w) in enumerate(zip(cells, widths)):
        if len(text) > w:  # names keep their top-level layer and leaf, the rest its start
            text = shorten_path(text, w) if i == 0 else text[: w - 1] + "…"
        parts.append(text.rjust(w) if 4 <= i <= 6 else text.ljust(w))
    return "  ".join(parts).rstrip()


def _num(v: float) -> str:
    if np.isnan(v):
        return "-"
    if np.isinf(v):
        return "inf"
    return "0" if v == 0 else f"{v:.2e}"


def _cos(v: float) -> str:
    return "-" if np.isnan(v) else f"{v:.6f}"


# -- comparing -------------------------------------------------------------------------------
@api_boundary
def compare(
    g: Graph,
    feeds: Mapping[str, np.ndarray],
    backend: str = "python",
    reference: str = "python",
    rtol: float = 1e-3,
    atol: float = 1e-5,
    reference_dtype=None,
    *,
    bisect: bool = False,
    opt_level: int = 2,
):
    """Run `g` on `feeds` with `backend` and with `reference`, and compare every tensor.

    A tensor passes when every element satisfies `|got - want| <= atol + rtol * |want|`
    (NaNs must coincide, infinities must be equal). Relative errors are elementwise,
    `|got - want| / |want|` (inf where want is 0 and got is not).

    `bisect=True` instead replays `mdsl.optimize(g, opt_level)` one pass at a time and
    returns a `mdsl.tools.bisection.BisectReport` naming the first pass after which the
    outputs differ (same `ok`, `first_mismatch`, `table()`, `to_markdown()`); see
    `mdsl.bisect`.

    >>> import numpy as np, mdsl
    >>> with mdsl.Graph("cancel") as g:
    ...     x = g.input("x", (4,), "float16")
    ...     g.output((x + 1000.0) - 1000.0, "y")
    >>> feeds = {"x": np.array([0.1, 0.2, 0.3, 0.4], np.float16)}
    >>> rep = mdsl.compare(g, feeds, reference_dtype="float32")
    >>> rep.ok, rep.first_mismatch.node
    (False, 'Sub')
    """
    if bisect:
        from mdsl.tools.bisection import bisect as bisect_passes

        return bisect_passes(
            g,
            feeds,
            opt_level,
            backend=backend,
            reference=reference,
            rtol=rtol,
            atol=atol,
            reference_dtype=reference_dtype,
        )
    run_backend, run_reference = _runner(backend), _runner(reference)
    target = None if reference_dtype is None else _promotion_target(reference_dtype)
    got = _run("backend", backend, run_backend, g, feeds)
    if target is None:
        want = _run("reference", reference, run_reference, g, feeds)
    else:
        want = _run_promoted(g, feeds, reference, run_reference, target)
    rows = _rows(g, got, want, rtol, atol)
    return CompareReport(rows, backend, reference, rtol, atol, target and target.value)


def _rows(g: Graph, got: Mapping, want: Mapping, rtol: float, atol: float) -> list[CompareRow]:
    """One row per output tensor of every computing node, in topological order. The
    nodes of a control-flow subgraph come just before the node holding it, and only where
    they ran (the taken branch; loop bodies that ran at least once)."""
    rows = []
    outputs = {t: name for name, t in g.outputs.items()} if g.parent is None else {}
    for node in g:
        if node.op_type in (INPUT, CONST, OUTPUT):
            continue
        for sub in node.subgraphs.values():
            ran = _rows(sub, got, want, rtol, atol)
            rows += [r for r in ran if r.tensor in got or r.tensor in want]
        for tensor in node.outputs:
            names = (tensor.name, outputs.get(tensor))
            rows.append(_row(node, tensor.type, names, got, want, rtol, atol, tensor in outputs))
    return rows


def _runner(name: str) -> Runner:
    run = _BACKENDS.get(name) if isinstance(name, str) else None
    if run is None and isinstance(name, str) and can(name, "build"):
        run = _compiled(name)
    if run is None:
        raise ExecutionError(
            f"no compare backend {name!r}; known: {', '.join(backends())} "
            "(add one with mdsl.tools.compare.register_backend)"
        )
    return run


def _run(role: str, name: str, run: Runner, g: Graph, feeds) -> Mapping[str, np.ndarray]:
    try:
        values = run(g, feeds)
    except MdslError as e:
        raise type(e)(
            f"{role} {name!r} failed: {e.message}", node=e.node, op_type=e.op_type, source=e.source
        ) from None
    if not isinstance(values, Mapping):
        raise ExecutionError(
            f"{role} {name!r} returned {type(values).__name__}, not a mapping of tensor "
            "name to array"
        )
    return values


def _lookup(values: Mapping, names: tuple):
    for name in names:
        if name is not None and name in values:
            return np.asarray(values[name])
    return None


def _row(node: Node, ttype, names, got, want, rtol, atol, is_output) -> CompareRow:
    a, b = _lookup(got, names), _lookup(want, names)
    base = dict(
        tensor=names[0],
        node=node.name,
        op_type=node.op_type,
        layer=node.layer,
        dtype=ttype.dtype.value,
        format=ttype.format.value,
    )
    nan = float("nan")
    if a is None or b is None:
        side = "backend" if a is None else "reference"
        note = f"not captured by the {side}"
        present = a if a is not None else b
        shape = () if present is None else present.shape
        return CompareRow(
            **base, shape=shape, max_abs=nan, max_rel=nan, cosine=nan, ok=not is_output, note=note
        )
    return row_of_arrays(base, a, b, rtol, atol)


def row_of_arrays(base: dict, a: np.ndarray, b: np.ndarray, rtol: float, atol: float) -> CompareRow:
    """`a` (a run) against `b` (its reference) as a CompareRow; `base` holds the row's
    tensor, node, op_type, layer, dtype and format."""
    nan = float("nan")
    if a.shape != b.shape:
        note = f"shape {list(a.shape)} vs reference {list(b.shape)}"
        return CompareRow(
            **base, shape=a.shape, max_abs=nan, max_rel=nan, cosine=nan, ok=False, note=note
        )
    max_abs, max_rel, cosine, close = _errors(a, b, rtol, atol)
    note = "" if a.dtype == b.dtype else f"dtype {a.dtype} vs reference {b.dtype}"
    return CompareRow(
        **base,
        shape=a.shape,
        max_abs=max_abs,
        max_rel=max_rel,
        cosine=cosine,
        ok=close and not note,
        note=note,
    )


def _errors(got: np.ndarray, want: np.ndarray, rtol: float, atol: float):
    """(max abs error, max rel error, cosine similarity, all elements close)."""
    a, b = got.astype(np.float64), want.astype(np.float64)
    with np.errstate(all="ignore"):
        same = (a == b) | (np.isnan(a) & np.isnan(b))
        diff = np.where(same, 0.0, np.abs(a - b))
        diff = np.where(np.isnan(diff), np.inf, diff)
        mag = np.abs(b)
        close = bool(np.all(same | (np.isfinite(diff) & (diff <= atol + rtol * mag))))
        rel = np.where(same, 0.0, diff / mag)
    if a.size == 0:
        return 0.0, 0.0, 1.0, True
    rel = np.where(np.isnan(rel), np.inf, rel)
    return float(diff.max()), float(rel.max()), _cosine(a, b), close


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    finite = np.isfinite(a) & np.isfinite(b)
    a, b = a[finite], b[finite]
    scale_a, scale_b = (np.abs(a).max(initial=0.0), np.abs(b).max(initial=0.0))
    if scale_a == 0 and scale_b == 0:
        return 1.0 if a.size else float("nan")
    if scale_a == 0 or scale_b == 0:
        return 0.0
    a, b = a / scale_a, b / scale_b
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


# -- the promoted reference ----------------------------------------------------------------------
def _promotion_target(reference_dtype) -> DType:
    target = DType.of(reference_dtype)
    if target not in (DType.float32, DType.float64):
        raise DTypeError(f"reference_dtype must be float32 or float64, got {target}")
    return target


def _narrower(dtype: DType, target: DType) -> bool:
    return dtype in FLOATS and dtype.itemsize < target.itemsize


def _run_promoted(g: Graph, feeds, name: str, run: Runner, target: DType) -> dict:
    """The reference run on a copy of `g` computing in `target`, rounded back."""
    promoted = promote_graph(g, target)
    promoted_feeds = {
        k: _promote_array(v, target) if isinstance(v, np.ndarray) else v for k, v in feeds.items()
    }
    values = dict(_run("reference", name, run, promoted, promoted_feeds))
    original = {t.name: t.type.dtype for sub in all_graphs(g) for n in sub for t in n.outputs}
    original.update({out: t.type.dtype for out, t in g.outputs.items()})
    for key, value in values.items():
        dtype = original.get(key)
        if dtype is not None and np.asarray(value).dtype != dtype.np:
            values[key] = np.asarray(value).astype(dtype.np)
    return values


def _promote_array(value: np.ndarray, target: DType) -> np.ndarray:
    try:
        narrow = _narrower(DType.of(value.dtype), target)
    except MdslError:
        return value
    return value.astype(target.np) if narrow else value


def promote_graph(g: Graph, target: DType = DType.float32) -> Graph:
    """A copy of `g` in which every float narrower than `target` becomes `target`: input
    and constant types, dtype attrs (a Cast to float16 casts to float32) and, re-inferred,
    every node's outputs.

    >>> import mdsl
    >>> with mdsl.Graph() as g:
    ...     x = g.input("x", (2,), "float16")
    ...     g.output((x * 2.0).astype("float16"), "y")
    >>> [str(n.outputs[0].dtype) for n in promote_graph(g).nodes if n.outputs]
    ['float32', 'float32', 'float32', 'float32']
    """
    copy = Graph.from_json(g.to_json())
    _promote_nodes(copy, target)
    return copy


def _promote_nodes(g: Graph, target: DType) -> None:
    from mdsl.ops.registry import infer_node_types

    for node in g:
        for sub in node.subgraphs.values():
            _promote_nodes(sub, target)
        if node.op_type == OUTPUT:
            continue
        if node.op_type == CONST:
            value = _promote_array(node.const_value(), target)
            value.setflags(write=False)
            node.attrs["value"] = value
        else:
            node.attrs = {k: _promote_attr(v, target) for k, v in node.attrs.items()}
        if node.op_type in (INPUT, CONST):
            new_dtypes = [
                target if _narrower(t.type.dtype, target) else t.type.dtype for t in node.outputs
            ]
        else:
            try:
                new_dtypes = [t.dtype for t in infer_node_types(node)]
            except MdslError as e:
                raise ExecutionError(
                    f"reference_dtype={target}: the op does not accept {target} inputs "
                    f"({e.message})",
                    node=node.name,
                    op_type=node.op_type,
                    source=node.source,
                ) from None
        for tensor, dtype in zip(node.outputs, new_dtypes):
            tensor.type = _with_dtype(tensor.type, dtype)


def _with_dtype(ttype: TensorType, dtype: DType) -> TensorType:
    return ttype if ttype.dtype == dtype else ttype.with_dtype(dtype)


def _promote_attr(value, target: DType):
    if isinstance(value, DType):
        return target if _narrower(value, target) else value
    if isinstance(value, np.ndarray):
        return _promote_array(value, target)
    if isinstance(value, tuple):
        return tuple(_promote_attr(v, target) for v in value)
    return value


__all__ = [
    "CompareReport",
    "CompareRow",
    "backends",
    "compare",
    "promote_graph",
    "register_backend",
]
