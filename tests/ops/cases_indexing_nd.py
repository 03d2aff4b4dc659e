"""Cases for GatherND and ScatterND: against torch advanced indexing (x[i0, i1]) and
torch's index_put_ (with accumulate for ScatterND's add), and numpy's ufunc.at for the
other reductions; exact (indexing moves values, sums here are of small integers)."""

from __future__ import annotations

import numpy as np

import mdsl
from mdsl import ops
from tests.ops.op_table import OpCase, rand


def _idx(array):
    return np.array(array, dtype=np.int64)


def _torch_gather_nd(x, i):
    return x[tuple(i[..., a] for a in range(i.shape[-1]))]


def _torch_scatter_nd(accumulate):
    def ref(x, i, u):
        return x.clone().index_put_(tuple(i[..., a] for a in range(i.shape[-1])), u, accumulate)

    return ref


def _numpy_scatter(ufunc):
    def ref(x, i, u):
        out = x.copy()
        ufunc.at(out, tuple(i[..., a] for a in range(i.shape[-1])), u)
        return out

    return ref


def _batched_ref(x, i):
    return np.stack(
        [x[b][tuple(i[b][..., a] for a in range(i.shape[-1]))] for b in range(x.shape[0])]
    )


CASES = [
    OpCase("GatherND", ops.gather_nd, {"x": rand(3, 4, 5), "i": _idx([[0, 1], [2, 3], [1, -1]])},
           _torch_gather_nd, id="slices"),
    OpCase("GatherND", ops.gather_nd, {"x": rand(3, 4), "i": _idx([[[0, 1]], [[2, 3]]])},
           _torch_gather_nd, id="elements"),
    OpCase("GatherND", ops.gather_nd,
           {"x": rand(2, 3, dtype="int32", lo=0, hi=9), "i": _idx([[1], [0]]).astype(np.int32)},
           _torch_gather_nd, id="rows-int32"),
    OpCase("GatherND", lambda x, i: ops.gather_nd(x, i, batch_dims=1),
           {"x": rand(2, 3, 4), "i": _idx([[[1], [2]], [[0], [0]]])},
           numpy_ref=_batched_ref, id="batch-dims"),
    OpCase("GatherND", ops.gather_nd, {"x": rand(3, 4), "i": _idx([[0, 1, 2]])},
           raises=mdsl.ShapeError, id="tuple-too-long"),
    OpCase("ScatterND", ops.scatter_nd,
           {"x": rand(4, 3), "i": _idx([[2], [0]]), "u": rand(2, 3, seed=1)},
           _torch_scatter_nd(False), id="rows"),
    OpCase("ScatterND", lambda x, i, u: ops.scatter_nd(x, i, u, reduction="add"),
           {"x": rand(4, 3), "i": _idx([[1, 2], [1, 2], [3, 0]]), "u": rand(3, seed=1)},
           _torch_scatter_nd(True), id="add-duplicates"),
    *(
        OpCase("ScatterND", lambda x, i, u, r=r: ops.scatter_nd(x, i, u, reduction=r),
               {"x": rand(5, dtype="int64", lo=-9, hi=9), "i": _idx([[1], [1], [4]]),
                "u": rand(3, dtype="int64", lo=-9, hi=9, seed=2)},
               numpy_ref=_numpy_scatter(ufunc), id=r)
        for r, ufunc in (("mul", np.multiply), ("max", np.maximum), ("min", np.minimum))
    ),
    OpCase("ScatterND", ops.scatter_nd,
           {"x": rand(4, 3), "i": _idx([[1]]), "u": rand(1, 2)},
           raises=mdsl.ShapeError, id="updates-shape"),
]  # fmt: skip
