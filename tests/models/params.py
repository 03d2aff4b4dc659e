"""Loading values into a built graph's parameters, as if they were trained weights.

Parameters are created with simple inits (zeros, ones, small normals) that would let a
wrong bias, norm or attention rule go unnoticed; the model tests overwrite them with
random values of the right scale before comparing against PyTorch.
"""

from __future__ import annotations

import numpy as np

import mdsl


def set_param(g: mdsl.Graph, name: str, value: np.ndarray) -> None:
    """Replace the value of Const node `name` (same shape and dtype)."""
    node = g.node(name)
    old = node.const_value()
    value = np.array(value, dtype=old.dtype)
    assert value.shape == old.shape, f"{name}: {value.shape} != {old.shape}"
    value.setflags(write=False)
    node.attrs["value"] = value


def param(g: mdsl.Graph, name: str):
    """A parameter's value as a torch tensor (a copy)."""
    import torch

    return torch.from_numpy(np.array(g.node(name).const_value()))


def params_named(g: mdsl.Graph, suffix: str) -> list[str]:
    """Names of the Const nodes whose name ends in `/<suffix>` (or is `suffix`)."""
    return [
        n.name
        for n in g.constants
        if n.name == suffix or n.name.endswith("/" + suffix) or n.name.endswith("_" + suffix)
    ]
