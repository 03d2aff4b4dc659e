/* mdsl AscendC emulation: host-side matmul tiling (matmul_tiling::MultiCoreMatmulTiling).
 *
 * A simple planner, not CANN's: split M and N over at most SetDim cores in multiples of
 * 16, base blocks that fit L0A/L0B (64 KiB) and L0C (128 KiB). */
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernel_tiling/kernel_tiling.h"
#include "register/tilingdata_base.h"
#include "tiling/platform/platform_ascendc.h"

namespace optiling {
/* the host view of TCubeTiling: private fields, set_/get_ accessors, the kernel's bytes */
BEGIN_TILING_DATA_DEF(TCubeTiling)
TILING_DATA_FIELD_DEF(int32_t, usedCoreNum);
TILING_DATA_FIELD_DEF(int32_t, M);
TILING_DATA_FIELD_DEF(int32_t, N);
TILING_DATA_FIELD_DEF(int32_t, Ka);
TILING_DATA_FIELD_DEF(int32_t, Kb);
TILING_DATA_FIELD_DEF(int32_t, singleCoreM);
TILING_DATA_FIELD_DEF(int32_t, singleCoreN);
TILING_DATA_FIELD_DEF(int32_t, singleCoreK);
TILING_DATA_FIELD_DEF(int32_t, baseM);
TILING_DATA_FIELD_DEF(int32_t, baseN);
TILING_DATA_FIELD_DEF(int32_t, baseK);
TILING_DATA_FIELD_DEF(int32_t, depthA1);
TILING_DATA_FIELD_DEF(int32_t, depthB1);
TILING_DATA_FIELD_DEF(int32_t, stepM);
TILING_DATA_FIELD_DEF(int32_t, stepN);
TILING_DATA_FIELD_DEF(int32_t, stepKa);
TILING_DATA_FIELD_DEF(int32_t, stepKb);
TILING_DATA_FIELD_DEF(int32_t, isBias);
TILING_DATA_FIELD_DEF(int32_t, transLength);
TILING_DATA_FIELD_DEF(int32_t, iterateOrder);
TILING_DATA_FIELD_DEF(int32_t, shareMode);
TILING_DATA_FIELD_DEF(int32_t, shareL1Size);
TILING_DATA_FIELD_DEF(int32_t, shareL0CSize);
TILING_DATA_FIELD_DEF(int32_t, shareUbSize);
TILING_DATA_FIELD_DEF(int32_t, batchM);
TILING_DATA_FIELD_DEF(int32_t, batchN);
TILING_DATA_FIELD_DEF(int32_t, singleBatchM);
TILING_DATA_FIELD_DEF(int32_t, singleBatchN);
TILING_DATA_FIELD_DEF(int32_t, dbL0A);
TILING_DATA_FIELD_DEF(int32_t, dbL0B);
TILING_DATA_FIELD_DEF(int32_t, dbL0C);
TILING_DATA_FIELD_DEF(int32_t, reserved);
END_TILING_DATA_DEF;
}  // namespace optiling

static_assert(sizeof(optiling::TCubeTiling) == sizeof(::TCubeTiling), "host and kernel TCubeTiling differ");

namespace matmul_tiling {

enum class TPosition { GM, VECIN, VECOUT, VECCALC, TSCM, A1, B1, C1 };
enum class CubeFormat { ND, NZ, ND_ALIGN, SCALAR, VECTOR };
enum class DataType { DT_FLOAT, DT_FLOAT16, DT_BF16, DT_INT8, DT_INT32 };
enum class MatrixTraverse : int32_t { NOSET = 0, FIRSTM = 1, FIRSTN = 2 };

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
    /* the block order of Iterate (iterateOrder 0: along M first, 1: along N first) */
    int32_t SetTraverse(MatrixTraverse traverse) {
        order_ = traverse == MatrixTraverse::FIRSTN ? 1 : 0;
        return 0;
    }
    /* fixed base block sizes (-1: the planner's own), as CANN's SetFixSplit */
    int32_t SetFixSplit(int32_t baseM = -1, int32_t baseN = -1, int32_t baseK = -1) {
        fixM_ = baseM;
        fixN_ = baseN;
        (void)baseK;
        return 0;
    }

    int64_t GetTiling(optiling::TCubeTiling &t) {
        if (m_ <= 0 || n_ <= 0 || k_ <= 0) return -1;
        const int32_t M = orgM_ > 0 ? orgM_ : m_, N = orgN_ > 0 ? orgN_ : n_, K = orgK_ > 0 ? orgK_ : k_;
        const int32_t mDim = std::min(dim_, Ceil(m_, 16));
        const int32_t nDim = std::max(1, std::min(dim_ / mDim, Ceil(n_, 16)));
        const int32_t singleM = Split(m_, mDim), singleN = Split(n_, nDim);
        const int32_t baseM = fixM_ > 0 ? fixM_ : std::min(128, Align(singleM, 16));
        const int32_t baseN = fixN_ > 0 ? fixN_ : std::min(256, Align(singleN, 16));
        if (baseM % 16 != 0 || baseN % 16 != 0) return -1;
        const int32_t l0a = 64 * 1024 / (baseM * SizeOf(a_)), l0b = 64 * 1024 / (baseN * SizeOf(b_));
        t.set_M(M);
        t.set_N(N);
        t.set_Ka(K);
        t.set_Kb(K);
        t.set_singleCoreM(singleM);
        t.set_singleCoreN(singleN);
        t.set_singleCoreK(k_);
        t.set_usedCoreNum(Ceil(m_, singleM) * Ceil(n_, singleN));
        t.set_baseM(baseM);
        t.set_baseN(baseN);
        t.set_baseK(std::max(16, std::min({Align(k_, 16), l0a / 16 * 16, l0b / 16 * 16})));
        t.set_depthA1(1);
        t.set_depthB1(1);
        t.set_stepM(1);
        t.set_stepN(1);
        t.set_stepKa(1);
        t.set_stepKb(1);
        t.set_isBias(bias_ ? 1 : 0);
        t.set_transLength(baseM * baseN * SizeOf(c_));
        t.set_iterateOrder(order_);
        t.set_batchM(1);
        t.set_batchN(1);
        t.set_singleBatchM(1);
        t.set_singleBatchN(1);
        t.set_dbL0A(2);
        t.set_dbL0B(2);
        t.set_dbL0C(1);
        return 0;
    }

private:
    int32_t dim_ = 1, m_ = 0, n_ = 0, k_ = 0, orgM_ = 0, orgN_ = 0, orgK_ = 0, fixM_ = -1, fixN_ = -1, order_ = 0;
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

struct SysTilingTempBufSize {
    int32_t ubSize = 0;
    int32_t l1Size = 0;
    int32_t l0cSize = 0;
};

}  // namespace matmul_tiling

/* the UB the Matmul API needs to move C to GM through UB (SetLocalWorkspace): one base block */
inline int32_t MultiCoreMatmulGetTmpBufSize(optiling::TCubeTiling &tiling, matmul_tiling::SysTilingTempBufSize &bufSize) {
    if (tiling.get_transLength() <= 0) return -1;
    bufSize.ubSize = tiling.get_transLength();
    bufSize.l1Size = 0;
    bufSize.l0cSize = 0;
    return 0;
}
