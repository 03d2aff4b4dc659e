"""Deferred parameter values: a graph can be built without generating its weights.

A parameter's data is drawn the first time something needs it (interpreting, saving,
folding), from a seed derived from the graph-independent parameter path, so the same
layer code gives the same weights in any graph and any process.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np

from mdsl.ir.dtype import DType
from mdsl.ir.errors import GraphError

INIT_KINDS = ("normal", "zeros", "ones", "uniform")


@dataclass(frozen=True, slots=True)
class ParamInit:
    """How to make a parameter's value: `kind` in INIT_KINDS, drawn from `seed`."""

    shape: tuple[int, ...]
    dtype: DType
    kind: str
    seed: int
    scale: float = 0.02
    # the drawn value, kept once made: clones of a graph share this record, so the
    # weights are generated once however many optimized copies or compiles there are
    _value: list = field(default_factory=list, compare=False, repr=False)

    def materialize(self) -> np.ndarray:
        """The value (read-only), generated on the first call."""
        if not self._value:
            value = self._draw()
            value.setflags(write=False)
            self._value.append(value)
        return self._value[0]

    def _draw(self) -> np.ndarray:
        if self.kind == "zeros":
            return np.zeros(self.shape, self.dtype.np)
        if self.kind == "ones":
            return np.ones(self.shape, self.dtype.np)
        rng = np.random.default_rng(self.seed)
        if self.kind == "normal":
            data = rng.standard_normal(self.shape, dtype=np.float32) * np.float32(self.scale)
        elif self.kind == "uniform":
            data = rng.uniform(-self.scale, self.scale, self.shape).astype(np.float32)
        else:
            raise GraphError(f"unknown init {self.kind!r}; expected one of {INIT_KINDS}")
        return data.astype(self.dtype.np, copy=False)


def seed_for(path: str, seed: int | None) -> int:
    """A stable 63-bit seed from a parameter path and an optional user seed."""
    digest = hashlib.blake2b(f"{seed}:{path}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1
