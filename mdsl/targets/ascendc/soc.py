"""What the AscendC target needs to know about an Ascend SoC.

The Unified Buffer size bounds every tile; the vector and cube dtype sets decide which
kernels can run on the device at all. Presets cover common parts; any field can be
overridden (`SocSpec.named("Ascend910B", ub_bytes=128 * 1024)`).

>>> import mdsl
>>> soc = SocSpec.named("Ascend910B")
>>> soc.ub_bytes, soc.supports_vector(mdsl.float64)
(196608, False)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from mdsl.ir.dtype import DType
from mdsl.ir.errors import CompileError

_F16, _BF16, _F32 = DType.float16, DType.bfloat16, DType.float32
_INTS = (DType.int8, DType.uint8, DType.int16, DType.int32, DType.bool_)


@dataclass(frozen=True, slots=True)
class SocSpec:
    """An Ascend SoC as the tiling planner sees it."""

    name: str
    ub_bytes: int  # Unified Buffer per vector core
    vector_cores: int  # AIV cores (blocks of a vector kernel)
    cube_cores: int  # AIC cores (blocks of a matmul kernel)
    vector_dtypes: frozenset[DType]
    cube_dtypes: frozenset[DType]

    @staticmethod
    def named(name: str = "Ascend910B", **overrides) -> SocSpec:
        """A preset (`Ascend910B`, `Ascend310P`) with any field replaced."""
        if name not in PRESETS:
            raise CompileError(
                f"unknown Ascend SoC {name!r}; presets: {', '.join(PRESETS)} "
                "(or build a SocSpec with your own numbers)"
            )
        return dataclasses.replace(PRESETS[name], **overrides)

    def supports_vector(self, dtype: DType) -> bool:
        return dtype in self.vector_dtypes

    def supports_cube(self, dtype: DType) -> bool:
        return dtype in self.cube_dtypes


PRESETS = {
    "Ascend910B": SocSpec(
        "Ascend910B",
        ub_bytes=192 * 1024,
        vector_cores=40,
        cube_cores=20,
        vector_dtypes=frozenset({_F16, _BF16, _F32, *_INTS}),
        cube_dtypes=frozenset({_F16, _BF16, _F32, DType.int8}),
    ),
    "Ascend310P": SocSpec(
        "Ascend310P",
        ub_bytes=256 * 1024,
        vector_cores=8,
        cube_cores=8,
        vector_dtypes=frozenset({_F16, _F32, *_INTS}),
        cube_dtypes=frozenset({_F16, DType.int8}),
    ),
}
