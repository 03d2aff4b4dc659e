"""A ResNet basic block, written the way API.md "Building a graph" shows it.

Run it as a script to build the graph, print its summary and run it on random data:

    python examples/resnet_block.py

The `mdsl` command line builds the graph through `build()`.
"""

from __future__ import annotations

import numpy as np

import mdsl
from mdsl import ops


@mdsl.layer
def conv_bn_relu(x, cout, stride=1):
    """3x3 convolution (padding 1) without bias, batch norm, ReLU; NCHW.

    Parameters are named after the layer path: `<path>/weight`, `gamma`, `beta`, `mean`,
    `var`.

    >>> import mdsl
    >>> with mdsl.Graph() as g:
    ...     x = g.input("x", ("N", 8, 6, 6))
    ...     g.output(conv_bn_relu(x, 16, stride=2), "y")
    >>> g.outputs["y"].shape
    (Dim('N'), 16, 3, 3)
    >>> g.node("conv_bn_relu/weight").const_value().shape
    (16, 8, 3, 3)
    """
    w = mdsl.param("weight", (cout, x.shape[1], 3, 3))
    y = ops.conv2d(x, w, strides=stride, pads=1)
    y = ops.batch_norm(
        y,
        mdsl.param("gamma", (cout,), init="ones"),
        mdsl.param("beta", (cout,), init="zeros"),
        mdsl.param("mean", (cout,), init="zeros"),
        mdsl.param("var", (cout,), init="ones"),
    )
    return ops.relu(y)


@mdsl.layer(name="Block")
def basic_block(x):
    """Two `conv_bn_relu` layers and a residual connection; keeps the input's shape.

    As in API.md, both convolutions end in a ReLU (the original ResNet's second one
    feeds the residual add directly).

    >>> import mdsl
    >>> with mdsl.Graph() as g:
    ...     g.output(basic_block(g.input("x", ("N", 4, 5, 5))), "y")
    >>> [n.name for n in g.nodes if n.op_type == "Conv"]
    ['Block/conv_bn_relu/Conv', 'Block/conv_bn_relu_1/Conv']
    """
    channels = x.shape[1]
    y = conv_bn_relu(x, channels)
    y = conv_bn_relu(y, channels)
    return ops.relu(y + x)


def build(batch="N", channels: int = 64, size: int = 56) -> mdsl.Graph:
    """The block as a graph with input `x` (batch, channels, size, size) and output `y`.

    `batch` may be an int or a symbolic dim name; one graph then runs any batch size.

    >>> g = build(channels=8, size=10)
    >>> g.inputs["x"].shape, g.outputs["y"].shape
    ((Dim('N'), 8, 10, 10), (Dim('N'), 8, 10, 10))
    """
    with mdsl.Graph("resnet_block") as g:
        x = g.input("x", (batch, channels, size, size), "float32")
        g.output(basic_block(x), "y")
    return g


def main() -> None:
    g = build()
    print(g.summary())
    x = np.random.default_rng(0).standard_normal((2, 64, 56, 56), dtype=np.float32)
    y = mdsl.interpret(g, {"x": x})["y"]
    print(f"y: {y.dtype}{list(y.shape)}, mean {y.mean():.4f}, fraction > 0: {(y > 0).mean():.3f}")


if __name__ == "__main__":
    main()
