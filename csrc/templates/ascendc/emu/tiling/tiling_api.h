/* mdsl AscendC emulation: host-side matmul tiling (matmul_tiling::MultiCoreMatmulTiling).
 *
 * A simple planner, not CANN's: split M and N over at most SetDim cores in multiples of
 * 16, base blocks that fit L0A/L0B (64 KiB) and L0C (128 KiB). */
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernel_tiling/kernel_tiling.h"
#include "tiling/platform/platform_ascendc.h"

namespace matmul_tiling {

enum class TPosition { GM, VECIN, VECOUT, VECCALC, TSCM, A1, B1, C1 };
enum class CubeFormat { ND, NZ, ND_ALIGN, SCALAR, VECTOR };
enum class DataType { DT_FLOAT, DT_FLOAT16, DT_BF16, DT_INT8, DT_INT32 };

inline int32_t SizeOf(DataType t) {
    switch (t) {
        case DataType::DT_FLOAT:
        case DataType::DT_INT32: return 4;
        case DataType::DT_INT8: return 1;
        default: return 2;
    }
}

class MultiCoreMatmulTiling {
public:
    explicit MultiCoreMatmulTiling(const platform_ascendc::PlatformAscendC &) {}
    MultiCoreMatmulTiling() = default;
    int32_t SetDim(int32_t dim) { dim_ = std::max(1, dim); return 0; }
    int32_t SetAType(TPosition, CubeFormat, DataType t, bool isTrans = false) { a_ = t; transA_ = isTrans; return 0; }
    int32_t SetBType(TPosition, CubeFormat, DataType t, bool isTrans = false) { b_ = t; transB_ = isTrans; return 0; }
    int32_t SetCType(TPosition, CubeFormat, DataType t) { c_ = t; return 0; }
    int32_t SetBiasType(TPosition, CubeFormat, DataType) { return 0; }
    int32_t SetShape(int32_t m, int32_t n, int32_t k) { m_ = m; n_ = n; k_ = k; return 0; }
    int32_t SetOrgShape(int32_t m, int32_t n, int32_t k) { orgM_ = m; orgN_ = n; orgK_ = k; return 0; }
    int32_t SetOrgShape(int32_t m, int32_t n, int32_t ka, int32_t) { return SetOrgShape(m, n, ka); }
    int32_t SetBias(bool isBias = false) { bias_ = isBias; return 0; }
    int32_t SetBufferSpace(int32_t = -1, int32_t = -1, int32_t = -1, int32_t = -1) { return 0; }

    int64_t GetTiling(TCubeTiling &t) {
        if (m_ <= 0 || n_ <= 0 || k_ <= 0) return -1;
        const int32_t M = orgM_ > 0 ? orgM_ : m_, N = orgN_ > 0 ? orgN_ : n_, K = orgK_ > 0 ? orgK_ : k_;
        const int32_t mDim = std::min(dim_, Ceil(m_, 16));
        const int32_t nDim = std::max(1, std::min(dim_ / mDim, Ceil(n_, 16)));
        t.M = M;
        t.N = N;
        t.Ka = t.Kb = K;
        t.singleCoreM = Split(m_, mDim);
        t.singleCoreN = Split(n_, nDim);
        t.singleCoreK = k_;
        t.usedCoreNum = Ceil(m_, t.singleCoreM) * Ceil(n_, t.singleCoreN);
        t.baseM = std::min(128, Align(t.singleCoreM, 16));
        t.baseN = std::min(256, Align(t.singleCoreN, 16));
        const int32_t l0a = 64 * 1024 / (t.baseM * SizeOf(a_)), l0b = 64 * 1024 / (t.baseN * SizeOf(b_));
        t.baseK = std::max(16, std::min({Align(k_, 16), l0a / 16 * 16, l0b / 16 * 16}));
        t.isBias = bias_ ? 1 : 0;
        t.iterateOrder = 0;
        return 0;
    }

private:
    int32_t dim_ = 1, m_ = 0, n_ = 0, k_ = 0, orgM_ = 0, orgN_ = 0, orgK_ = 0;
    DataType a_ = DataType::DT_FLOAT16, b_ = DataType::DT_FLOAT16, c_ = DataType::DT_FLOAT;
    bool transA_ = false, transB_ = false, bias_ = false;

    static int32_t Ceil(int32_t a, int32_t b) { return (a + b - 1) / b; }
    static int32_t Align(int32_t a, int32_t b) { return Ceil(a, b) * b; }
    static int32_t Split(int32_t total, int32_t parts) {  // per-core share in multiples of 16
        const int32_t share = Align(Ceil(total, parts), 16);
        return std::min(total, share);
    }
};

using MatmulApiTiling = MultiCoreMatmulTiling;

}  // namespace matmul_tiling
