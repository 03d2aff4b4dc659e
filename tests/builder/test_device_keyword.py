"""Per-op `device=` on every builder, and its relation to the `mdsl.device` scope."""

from __future__ import annotations

import mdsl
from mdsl import ops


def test_per_op_device_places_only_that_op():
    with mdsl.Graph() as g:
        x = g.input("x", (2, 3, 8, 8))
        with mdsl.device("cpu"):
            y = ops.conv2d(x, mdsl.param("w", (4, 3, 3, 3)), pads=1, device="npu:0")
            z = ops.relu(y)
        g.output(ops.softmax(z, device="npu:1"), "y")
    devices = {n.op_type: n.device for n in g.nodes}
    assert devices["Conv"] == "npu:0"  # the keyword wins over the scope
    assert devices["Relu"] == "cpu"  # the scope applies again after it
    assert devices["Softmax"] == "npu:1"
    assert devices["Input"] is None


def test_every_public_builder_takes_device():
    import inspect

    builders = [
        f for name, f in vars(ops).items() if not name.startswith("_") and inspect.isfunction(f)
    ]
    assert len(builders) > 80
    assert all("device" in inspect.signature(f, follow_wrapped=False).parameters for f in builders)
