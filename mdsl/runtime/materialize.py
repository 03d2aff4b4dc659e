"""Debug builds: every node's output materialized, so a compiled run can be compared
node by node (`mdsl.compile(g, debug=True)`, `mdsl.compare(g, feeds, backend="c")`).

The optimized graph keeps its fusion groups; each intermediate tensor becomes an extra
graph output, so a fused kernel still computes its members together but also stores
every member's value (a group output is any value read outside the group). What the
optimizer removed or replaced (a BatchNorm folded into its Conv) has no value to show.

>>> import numpy as np, mdsl
>>> with mdsl.Graph("g") as g:
...     x = g.input("x", (3,))
...     g.output(mdsl.ops.exp(x * 2.0) + 1.0, "y")
>>> exe = mdsl.compile(g, backend="c", debug=True)
>>> [k.nodes for k in exe.kernels]
[('Mul', 'Exp', 'Add')]
>>> got = exe.run({"x": np.zeros(3, np.float32)}, capture=True)
>>> got["Exp"], got["y"]
(array([1., 1., 1.], dtype=float32), array([2., 2., 2.], dtype=float32))
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from mdsl.ir.errors import ExecutionError
from mdsl.ir.graph import CONST, INPUT, OUTPUT, Graph
from mdsl.ir.verify import verify

PREFIX = "debug/"


def materialize_all(g: Graph) -> dict[str, str]:
    """Make every computed tensor of `g` (mutated in place) a graph output; returns the
    added output names -> tensor names (tensors already outputs are not added again)."""
    from mdsl.passes.edit import add_output

    existing = set(g.outputs.values())
    added: dict[str, str] = {}
    for node in list(g):
        if node.op_type in (INPUT, CONST, OUTPUT):
            continue
        for t in node.outputs:
            if t not in existing:
                # ':' in node names is reserved for output indices ("Split:1")
                name = _free_output_name(g, PREFIX + t.name.replace(":", "."))
                add_output(g, t, name)
                existing.add(t)
                added[name] = t.name
    verify(g)
    return added


def _free_output_name(g: Graph, name: str) -> str:
    taken = g.outputs
    candidate, i = name, 1
    while candidate in taken or g.has_node(f"Output_{candidate}"):
        candidate, i = f"{name}_{i}", i + 1
    return candidate


def split_debug_outputs(
    g: Graph,
    outputs: Mapping[str, np.ndarray],
    debug_outputs: Mapping[str, str] | None,
    feeds: Mapping[str, np.ndarray] | None,
) -> dict[str, np.ndarray]:
    """The user's outputs of a run of `g`, or with `feeds` (a capture) every tensor by
    name as `mdsl.interpret(capture=True)` gives them: inputs, constants, intermediates,
    outputs (under their tensor names and their output names)."""
    if feeds is None:
        return {k: v for k, v in outputs.items() if k not in (debug_outputs or {})}
    if debug_outputs is None:
        raise ExecutionError(
            "capture=True needs an executable compiled with debug=True "
            "(mdsl.compile(g, backend=..., debug=True) materializes every tensor)"
        )
    captured = dict(feeds)
    captured.update({n.outputs[0].name: n.const_value() for n in g.constants})
    tensors = {name: t.name for name, t in g.outputs.items()}
    tensors.update(debug_outputs)
    for name, value in outputs.items():
        captured[tensors[name]] = value
    for name, value in outputs.items():
        if name not in debug_outputs:
            captured.setdefault(name, value)
    return captured
