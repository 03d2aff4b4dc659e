"""The text reports read well in a 100-column terminal on a real model (BERT's long layer
paths): compare's table and Markdown, diff's table, the bisection report."""

from __future__ import annotations

import numpy as np

import mdsl
from examples.bert import bert
from mdsl.passes import PassResult

WIDTH = 100


def widest(text: str) -> int:
    return max(map(len, text.splitlines()))


def tiny_bert_report():
    g = bert(2, 64, 4)
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 8, 64)).astype(np.float32)}
    return g, feeds, mdsl.compare(g, feeds, backend="expr", reference_dtype="float64")


def test_compare_table_fits_and_every_shortened_name_stays_distinct():
    _, _, rep = tiny_bert_report()
    table = rep.table()
    assert widest(table) <= WIDTH
    rows = table.splitlines()[2:]  # after the summary and the header
    names = [row.split("  ")[0] for row in rows]
    assert len(names) == len(rep.rows) and len(set(names)) == len(names)
    shortened = [n for n in names if "…" in n]
    assert shortened  # BERT's paths do not fit: they are shortened, keeping both ends
    for name, row in zip(names, rep.rows):
        head, _, tail = name.partition("…")
        assert row.tensor.startswith(head) and row.tensor.endswith(tail)
        assert row.tensor.split("/")[0] in name or not tail  # the block stays readable
    assert widest(rep.table(width=80)) <= 80


def test_compare_markdown_rows_spend_little_beside_the_tensor_name():
    _, _, rep = tiny_bert_report()
    lines = rep.to_markdown().splitlines()
    table = [line for line in lines if line.startswith("| `")]
    assert len(table) == len(rep.rows)
    for line, row in zip(table, rep.rows):
        assert f"`{row.tensor}`" in line  # full names: Markdown is for pasting
        cells = line.strip("|").split(" | ")
        assert len(cells) == 8 and cells[2] == "f32"  # no layer or format column; short dtype
        variable = len(row.tensor) + len(row.op_type) + len(cells[3])
        assert len(line) - variable <= 56  # numbers and markup


def test_diff_table_fits_on_bert_base():
    g = bert(12, 768, 12)
    d = mdsl.diff(g, mdsl.optimize(g, level=3))
    assert widest(d.table()) <= WIDTH
    assert widest(d.table(width=80)) <= 80
    assert "... and" in d.table()  # long sections are cut, with a count


def test_bisection_report_fits_with_long_paths(restored_passes):
    def flip_first_add(g):
        add = next(n for n in g if n.op_type == "Add")
        add.op_type = "Sub"
        return PassResult(g, changed=True)

    g, feeds, _ = tiny_bert_report()
    rep = mdsl.bisect(g, feeds, passes=["simplify", flip_first_add])
    text = rep.table()
    assert widest(text) <= WIDTH and "first divergent pass: flip_first_add" in text
    assert widest(rep.table(width=72)) <= 72
