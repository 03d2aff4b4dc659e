"""What the AscendC target needs to know about an Ascend SoC: sizes and capabilities.

The Unified Buffer size bounds every tile; the vector and cube dtype sets and the API
features decide which kernels the SoC can run at all. This is the one per-SoC capability
table: the planner rejects at emit time what a SoC lacks (naming the kernel, its nodes
and the SoC), and the renderers and the emulation read the same features.

Presets are CANN's `SOC_VERSION` names with the core counts and UB size of the platform
description of each part (`Ascend910B1`..`B4`: Atlas A2, dav-c220, separate cube and
vector cores; `Ascend310P1`/`P3`: dav-m200, AI cores with both units). Family names such
as "Ascend910B" are refused: CANN's CMake reads "Ascend910B" as the old Ascend910
(dav-c100). Any field can be overridden (`SocSpec.named("Ascend910B3", ub_bytes=128 * 1024)`).

>>> import mdsl
>>> soc = SocSpec.named("Ascend910B2")
>>> soc.ub_bytes, soc.cube_cores, soc.vector_cores, soc.supports_vector(mdsl.float64)
(196608, 24, 48, False)
>>> soc.family, soc.split_cores, soc.has("DataCopyPad")
('220', True, True)
>>> SocSpec.named("Ascend310P3").has("DataCopyPad")
False
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from mdsl.ir.dtype import DType
from mdsl.ir.errors import CompileError

_F16, _BF16, _F32 = DType.float16, DType.bfloat16, DType.float32
_INTS = (DType.int8, DType.uint8, DType.int16, DType.int32, DType.bool_)

# API features a kernel may need, with what they are for (shown in rejections)
FEATURES = {
    "DataCopyPad": "copies of rows that are not whole 32-byte blocks (tails, scalar results)",
    "DataCacheCleanAndInvalid": "element-wise stores to global memory (scattered rows)",
}


@dataclass(frozen=True, slots=True)
class SocSpec:
    """An Ascend SoC as the planner, the renderers and the emulation see it."""

    name: str  # CANN's SOC_VERSION
    ub_bytes: int  # Unified Buffer per vector core (per AI core on 310P)
    vector_cores: int  # AIV cores (blocks of a vector kernel)
    cube_cores: int  # AIC cores (blocks of a matmul kernel)
    vector_dtypes: frozenset[DType]
    cube_dtypes: frozenset[DType]
    family: str = "220"  # the __NPU_ARCH__ family CANN's headers gate on: "220", "200"
    split_cores: bool = True  # separate AIC/AIV cores: matmul kernels run in MIX 1:2 mode
    features: frozenset[str] = frozenset(FEATURES)  # the APIs of FEATURES this SoC has
    matmul_local_workspace: bool = False  # Matmul with C in GM needs SetLocalWorkspace (310P)

    @staticmethod
    def named(name: str = "Ascend910B3", **overrides) -> SocSpec:
        """A preset (`Ascend910B1`..`B4`, `Ascend310P1`, `Ascend310P3`) with any field replaced."""
        if name not in PRESETS:
            parts = [p for p in PRESETS if p.startswith(name)]
            hint = f" (a family name; CANN needs the part: {', '.join(parts)})" if parts else ""
            raise CompileError(
                f"unknown Ascend SoC {name!r}{hint}; presets: {', '.join(PRESETS)} "
                "(or build a SocSpec with your own numbers)"
            )
        return dataclasses.replace(PRESETS[name], **overrides)

    def supports_vector(self, dtype: DType) -> bool:
        return dtype in self.vector_dtypes

    def supports_cube(self, dtype: DType) -> bool:
        return dtype in self.cube_dtypes

    def has(self, feature: str) -> bool:
        if feature not in FEATURES:
            raise KeyError(f"unknown AscendC feature {feature!r}")
        return feature in self.features

    @property
    def vector_blocks_per_core(self) -> int:
        """Vector blocks per launched block of a matmul kernel (GetBlockIdx() range / blockDim)."""
        return 2 if self.split_cores else 1


def _a2(name: str, cube: int) -> SocSpec:
    return SocSpec(
        name,
        ub_bytes=192 * 1024,
        vector_cores=2 * cube,
        cube_cores=cube,
        vector_dtypes=frozenset({_F16, _BF16, _F32, *_INTS}),
        cube_dtypes=frozenset({_F16, _BF16, _F32, DType.int8}),
    )


def _310p(name: str, cores: int) -> SocSpec:
    return SocSpec(
        name,
        ub_bytes=256 * 1024,
        vector_cores=cores,
        cube_cores=cores,
        vector_dtypes=frozenset({_F16, _F32, *_INTS}),
        cube_dtypes=frozenset({_F16, DType.int8}),
        family="200",
        split_cores=False,
        features=frozenset({"DataCacheCleanAndInvalid"}),
        matmul_local_workspace=True,
    )


PRESETS = {
    "Ascend910B1": _a2("Ascend910B1", 24),
    "Ascend910B2": _a2("Ascend910B2", 24),
    "Ascend910B3": _a2("Ascend910B3", 20),
    "Ascend910B4": _a2("Ascend910B4", 20),
    "Ascend310P1": _310p("Ascend310P1", 10),
    "Ascend310P3": _310p("Ascend310P3", 8),
}
