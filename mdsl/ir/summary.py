"""`g.summary()`: a readable table of what a graph holds."""

from __future__ import annotations

from collections import Counter

from mdsl.ir.graph import CONST, INPUT, OUTPUT, Graph


def _human_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def graph_summary(g: Graph) -> str:
    params, nbytes = g.parameter_count()
    ops = Counter(n.op_type for n in g if n.op_type not in (INPUT, CONST, OUTPUT))
    layers = Counter(n.layer.split("/")[0] or "(top level)" for n in g if n.op_type != OUTPUT)
    lines = [f"Graph {g.name!r}: {len(g)} nodes, {params:,} parameters ({_human_bytes(nbytes)})"]
    lines.append("")
    lines.append(_table("inputs", [(n, t.type.describe()) for n, t in g.inputs.items()]))
    lines.append(_table("outputs", [(n, t.type.describe()) for n, t in g.outputs.items()]))
    lines.append(_table("op type", [(k, str(v)) for k, v in ops.most_common()], "nodes"))
    lines.append(_table("top-level layer", [(k, str(v)) for k, v in layers.most_common()], "nodes"))
    return "\n".join(lines)


def _table(title: str, rows: list[tuple[str, str]], value_title: str = "") -> str:
    width = max([len(title)] + [len(r[0]) for r in rows])
    out = [f"  {title:<{width}}  {value_title}".rstrip(), f"  {'-' * width}  {'-' * 10}"]
    out += [f"  {k:<{width}}  {v}" for k, v in rows] or ["  (none)"]
    return "\n".join(out) + "\n"
