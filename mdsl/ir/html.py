"""Small HTML pieces for notebook reprs (`_repr_html_`): escaped tables, one style.

>>> print(html_table(["op", "count"], [["MatMul", 2], ["<Add>", 1]]))
<table class="mdsl"><thead><tr><th>op</th><th>count</th></tr></thead><tbody><tr><td>MatMul</td><td>2</td></tr><tr><td>&lt;Add&gt;</td><td>1</td></tr></tbody></table>
"""

from __future__ import annotations

import html


def escape(value) -> str:
    return html.escape(str(value), quote=True)


def html_table(headers, rows, *, row_classes=None) -> str:
    """An HTML table; every cell escaped; `row_classes[i]` styles row i (e.g. "bad")."""
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = []
    for i, row in enumerate(rows):
        css = row_classes[i] if row_classes else ""
        attr = f' class="{escape(css)}"' if css else ""
        body.append(f"<tr{attr}>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>")
    return (
        f'<table class="mdsl"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'
    )


def html_block(title: str, *parts: str) -> str:
    """A titled block of already-rendered parts (tables, pictures)."""
    return f'<div class="mdsl"><p><b>{escape(title)}</b></p>{"".join(parts)}</div>'
