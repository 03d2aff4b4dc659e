"""Cases for GridSample, checked against torch.nn.functional.grid_sample: every mode,
padding mode and align_corners, 1-D (as 2-D of height 1 in torch) to 3-D, points
inside and well outside the image."""

from __future__ import annotations

import torch

import mdsl
from mdsl import ops
from tests.ops.op_table import OpCase, rand

IMAGE = rand(2, 3, 5, 4)
POINTS = rand(2, 3, 6, 2, lo=-1.6, hi=1.6)  # a third of them outside [-1, 1]
VOLUME = rand(1, 2, 3, 4, 5)
POINTS_3D = rand(1, 2, 3, 4, 3, lo=-1.4, hi=1.4)


def _case(mode, padding, align, x=IMAGE, grid=POINTS, torch_mode=None, **tol):
    def torch_ref(x, grid):
        return torch.nn.functional.grid_sample(
            x, grid, mode=torch_mode or mode, padding_mode=padding, align_corners=bool(align)
        )

    return OpCase(
        "GridSample",
        lambda x, g: ops.grid_sample(x, g, mode=mode, padding_mode=padding, align_corners=align),
        {"x": x, "grid": grid},
        torch_ref,
        id=f"{x.ndim - 2}d-{mode}-{padding}-{align}",
        **tol,
    )


CASES = [
    *(
        _case(mode, padding, align, torch_mode=torch_mode)
        for mode, torch_mode in (("linear", "bilinear"), ("nearest", "nearest"))
        for padding in ("zeros", "border", "reflection")
        for align in (0, 1)
    ),
    *(
        _case("bicubic", padding, align, rtol=1e-4, atol=1e-5)
        for padding in ("zeros", "border", "reflection")
        for align in (0, 1)
    ),
    *(_case("linear", p, 1, VOLUME, POINTS_3D, "bilinear") for p in ("zeros", "reflection")),
    _case("nearest", "border", 0, VOLUME, POINTS_3D),
    OpCase(
        "GridSample",
        lambda x, g: ops.grid_sample(x, g, padding_mode="border"),
        {"x": rand(1, 2, 5, dtype="float64"), "grid": rand(1, 7, 1, dtype="float64", lo=-1.5)},
        lambda x, g: torch.nn.functional.grid_sample(
            x[:, :, None, :],
            torch.stack([g[..., 0], torch.zeros_like(g[..., 0])], -1)[:, None],
            padding_mode="border",
            align_corners=False,
        )[:, :, 0],
        id="1d-float64",
    ),
    OpCase(
        "GridSample",
        lambda x, g: ops.grid_sample(x, g),
        {"x": IMAGE, "grid": rand(2, 3, 6, 3)},
        raises=mdsl.ShapeError,
        id="grid-rank-mismatch",
    ),
    OpCase(
        "GridSample",
        lambda x, g: ops.grid_sample(x, g, mode="area"),
        {"x": IMAGE, "grid": POINTS},
        raises=mdsl.GraphError,
        id="bad-mode",
    ),
]
