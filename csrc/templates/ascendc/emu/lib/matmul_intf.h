/* mdsl AscendC emulation: the Matmul high-level API (cube unit) over global memory.
 *
 * IterateAll computes this core's singleCoreM x singleCoreN block (or the SetTail shape)
 * of C = op(A) @ op(B) (+ bias) with float accumulation into GM; Iterate + GetTensorC hand
 * it out one baseM x baseN block at a time into the UB (C in VECIN). Leading dimensions are
 * the tiling's original shapes (M, N, Ka, Kb). Init checks the base block against the L0
 * buffers. */
#pragma once

#include "kernel_operator.h"
#include "kernel_tiling/kernel_tiling.h"

#include <algorithm>
#include <vector>

namespace matmul {

using AscendC::TPosition;
enum class CubeFormat : uint8_t { ND, NZ, ZN, ZZ, NN, ND_ALIGN, SCALAR, VECTOR };
enum class LayoutMode : uint8_t { NONE, BSNGD, SBNGD, BNGS1S2, NORMAL };

template <TPosition POSITION, CubeFormat FORMAT, typename TYPE, bool ISTRANS = false,
          LayoutMode LAYOUT = LayoutMode::NONE, bool IBSHARE = false>
struct MatmulType {
    constexpr static TPosition pos = POSITION;
    constexpr static CubeFormat format = FORMAT;
    using T = TYPE;
    constexpr static bool isTrans = ISTRANS;
};

struct MatmulConfig {
    bool doNorm = true;
};
inline constexpr MatmulConfig CFG_NORM{};
inline constexpr MatmulConfig CFG_MDL{};

constexpr uint32_t kL0ABytes = 64 * 1024, kL0BBytes = 64 * 1024, kL0CBytes = 128 * 1024;

template <class A_TYPE, class B_TYPE, class C_TYPE, class BIAS_TYPE = C_TYPE,
          const MatmulConfig &MM_CFG = CFG_NORM>
class Matmul {
    using SrcAT = typename A_TYPE::T;
    using SrcBT = typename B_TYPE::T;
    using DstT = typename C_TYPE::T;
    using BiasT = typename BIAS_TYPE::T;

public:
    void Init(const TCubeTiling *tiling, AscendC::TPipe *tpipe = nullptr) {
        const char *api = "Matmul::Init";
        mdsl_emu::Require(tiling != nullptr, api, "no tiling");
        tiling_ = *tiling;
        const TCubeTiling &t = tiling_;
        mdsl_emu::Require(t.M > 0 && t.N > 0 && t.Ka > 0 && t.Kb == t.Ka, api, "bad shape in the tiling");
        mdsl_emu::Require(t.singleCoreM > 0 && t.singleCoreM <= t.M && t.singleCoreN > 0 && t.singleCoreN <= t.N &&
                              t.singleCoreK > 0 && t.singleCoreK <= t.Ka,
                          api, "single-core shape outside the matrix");
        mdsl_emu::Require(t.baseM > 0 && t.baseN > 0 && t.baseK > 0, api, "zero base block");
        Check(uint64_t(t.baseM) * t.baseK * sizeof(SrcAT) <= kL0ABytes, "baseM x baseK of A overflows L0A (64 KiB)");
        Check(uint64_t(t.baseK) * t.baseN * sizeof(SrcBT) <= kL0BBytes, "baseK x baseN of B overflows L0B (64 KiB)");
        Check(uint64_t(t.baseM) * t.baseN * 4 <= kL0CBytes, "baseM x baseN of C overflows L0C (128 KiB)");
        inited_ = true;
        (void)tpipe;
    }
    void SetTensorA(const AscendC::GlobalTensor<SrcAT> &gm, bool isTransposeA = false) {
        RequireInit("Matmul::SetTensorA");
        mdsl_emu::Require(!isTransposeA || A_TYPE::isTrans, "Matmul::SetTensorA",
                          "a transposed A needs MatmulType<..., ISTRANS=true>");
        a_ = gm;
        iterating_ = haveBlock_ = false;
        transA_ = isTransposeA;
        hasA_ = true;
    }
    void SetTensorB(const AscendC::GlobalTensor<SrcBT> &gm, bool isTransposeB = false) {
        RequireInit("Matmul::SetTensorB");
        mdsl_emu::Require(!isTransposeB || B_TYPE::isTrans, "Matmul::SetTensorB",
                          "a transposed B needs MatmulType<..., ISTRANS=true>");
        b_ = gm;
        iterating_ = haveBlock_ = false;
        transB_ = isTransposeB;
        hasB_ = true;
    }
    void SetBias(const AscendC::GlobalTensor<BiasT> &gm) {
        mdsl_emu::Require(tiling_.isBias != 0, "Matmul::SetBias", "the tiling was made without a bias (SetBias(true))");
        bias_ = gm;
        hasBias_ = true;
    }
    void ClearBias() { hasBias_ = false; }
    /* on SoCs whose Matmul API moves C to GM through the UB (310P): a UB workspace of at
     * least one base block of C (the host's MultiCoreMatmulGetTmpBufSize) */
    void SetLocalWorkspace(const AscendC::LocalTensor<uint8_t> &buffer) {
        const char *api = "Matmul::SetLocalWorkspace";
        RequireInit(api);
        mdsl_emu::Require(buffer.GetSize() >= uint32_t(tiling_.transLength), api,
                          "the workspace has " + std::to_string(buffer.GetSize()) + " bytes; one base block of C needs " +
                              std::to_string(tiling_.transLength));
        hasLocalWorkspace_ = true;
    }
    void SetTail(int tailM = -1, int tailN = -1, int tailK = -1) {
        iterating_ = haveBlock_ = false;
        tailM_ = tailM;
        tailN_ = tailN;
        tailK_ = tailK;
    }
    void SetOrgShape(int orgM, int orgN, int orgK) { SetOrgShape(orgM, orgN, orgK, orgK); }
    void SetOrgShape(int orgM, int orgN, int orgKa, int orgKb) {
        tiling_.M = orgM;
        tiling_.N = orgN;
        tiling_.Ka = orgKa;
        tiling_.Kb = orgKb;
    }
    void IterateAll(const AscendC::GlobalTensor<DstT> &gm, uint8_t enAtomic = 0, bool enSequentialWrite = false,
                    bool waitIterateAll = false, bool fakeMsg = false) {
        const char *api = "Matmul::IterateAll";
        static_assert(C_TYPE::pos == TPosition::GM, "IterateAll(GlobalTensor) needs C in GM (MatmulType<TPosition::GM, ...>)");
        const Shape s = Begin(api);
        const int64_t ldc = tiling_.N;
        gm.Check(api, 0, (s.m - 1) * ldc + s.n);
        DstT *c = gm.Data();
        for (int64_t i = 0; i < s.m; ++i) {
            for (int64_t j = 0; j < s.n; ++j) {
                const Acc acc = Element(i, j, s.k);
                c[i * ldc + j] = static_cast<DstT>(enAtomic ? acc + static_cast<Acc>(c[i * ldc + j]) : acc);
            }
        }
        (void)enSequentialWrite;
        (void)waitIterateAll;
        (void)fakeMsg;
    }

    /* one baseM x baseN block of this core's result per call, in the tiling's iterateOrder
     * (0: along M first), tails of the SetTail shape included; false after the last */
    template <bool sync = true>
    bool Iterate(bool enPartialSum = false) {
        const char *api = "Matmul::Iterate";
        mdsl_emu::Require(!enPartialSum, api, "enPartialSum is not emulated");
        if (!iterating_) {
            shape_ = Begin(api);
            const TCubeTiling &t = tiling_;
            mIter_ = (shape_.m + t.baseM - 1) / t.baseM;
            nIter_ = (shape_.n + t.baseN - 1) / t.baseN;
            count_ = -1;
            iterating_ = true;
        }
        haveBlock_ = false;
        if (++count_ >= mIter_ * nIter_) {
            iterating_ = false;
            return false;
        }
        haveBlock_ = true;
        return true;
    }

    /* the current block into a UB tensor: as the Matmul client on the vector core does it,
     * the block lands in its workspace written sequentially (real height x real width,
     * rows not padded), then is copied into the UB; with doPad (needs CubeFormat::ND_ALIGN)
     * as `height` rows of `width` elements, each padded to 32 bytes plus `dstGap` blocks */
    template <bool sync = true, bool doPad = false>
    void GetTensorC(const AscendC::LocalTensor<DstT> &c, uint8_t enAtomic = 0, bool enSequentialWrite = false,
                    uint32_t height = 0, uint32_t width = 0, uint32_t srcGap = 0, uint32_t dstGap = 0) {
        const char *api = "Matmul::GetTensorC(LocalTensor)";
        static_assert(C_TYPE::pos == TPosition::VECIN || C_TYPE::pos == TPosition::VECCALC,
                      "GetTensorC(LocalTensor) needs C in the UB (MatmulType<TPosition::VECIN, ...>)");
        static_assert(sync, "asynchronous GetTensorC is not emulated");
        mdsl_emu::Require(haveBlock_, api, "no block: call Iterate() first (and only while it returns true)");
        mdsl_emu::Require(enAtomic == 0, api, "enAtomic must be 0 for a UB destination");
        mdsl_emu::Require(enSequentialWrite, api,
                          "only sequential write is emulated for a UB destination (the block at the tensor's start)");
        haveBlock_ = false;
        const TCubeTiling &t = tiling_;
        const int64_t bm = t.iterateOrder == 0 ? count_ % mIter_ : count_ / nIter_;
        const int64_t bn = t.iterateOrder == 0 ? count_ / mIter_ : count_ % nIter_;
        const int64_t h = std::min<int64_t>(t.baseM, shape_.m - bm * t.baseM);
        const int64_t w = std::min<int64_t>(t.baseN, shape_.n - bn * t.baseN);
        std::vector<DstT> packed(size_t(h * w));
        for (int64_t i = 0; i < h; ++i) {
            for (int64_t j = 0; j < w; ++j) {
                packed[size_t(i * w + j)] = static_cast<DstT>(Element(bm * t.baseM + i, bn * t.baseN + j, shape_.k));
            }
        }
        mdsl_emu::CheckUbAligned(api, c.Data(), "the destination");
        if constexpr (doPad) {
            static_assert(C_TYPE::format == CubeFormat::ND_ALIGN, "GetTensorC<sync, doPad=true> needs CubeFormat::ND_ALIGN");
            mdsl_emu::Require(srcGap == 0, api, "srcGap is not emulated");
            const uint64_t per = 32 / sizeof(DstT);
            const uint64_t room = (width + per - 1) / per * per;
            const uint64_t row = room + uint64_t(dstGap) * per;
            mdsl_emu::Require(uint64_t(height) * width <= packed.size(), api,
                              std::to_string(height) + " x " + std::to_string(width) + " elements from a block of " +
                                  std::to_string(h) + " x " + std::to_string(w));
            c.Check(api, height ? (height - 1) * row + room : 0, AscendC::Access::CopyToUb);
            for (uint64_t i = 0; i < height; ++i) {
                DstT *out = c.Data() + i * row;
                std::memcpy(out, packed.data() + i * width, width * sizeof(DstT));
                for (uint64_t j = width; j < room; ++j) out[j] = DstT(0);
            }
        } else {
            c.Check(api, c.GetSize(), AscendC::Access::CopyToUb);
            mdsl_emu::Require(c.GetSize() >= packed.size(), api,
                              "the tensor holds " + std::to_string(c.GetSize()) + " elements, the block " +
                                  std::to_string(packed.size()));
            std::memcpy(c.Data(), packed.data(), packed.size() * sizeof(DstT));
        }
    }

    void End() {
        iterating_ = haveBlock_ = false;
        hasA_ = hasB_ = hasBias_ = false;
        tailM_ = tailN_ = tailK_ = -1;
    }

private:
    using Acc = std::conditional_t<std::is_integral_v<SrcAT>, int32_t, float>;
    struct Shape {
        int64_t m, n, k;
    };

    /* this call's shape (single-core or SetTail), its operand spans checked (and counted)
     * once, as the cube unit reads them */
    Shape Begin(const char *api) {
        RequireInit(api);
        mdsl_emu::Require(hasA_ && hasB_, api, "SetTensorA and SetTensorB first");
        mdsl_emu::Require(hasLocalWorkspace_ || !mdsl_emu::Has(mdsl_emu::kMatmulLocalWorkspace), api,
                          "on this SoC C reaches global memory through the UB: SetLocalWorkspace first");
        const TCubeTiling &t = tiling_;
        const Shape s{tailM_ > 0 ? tailM_ : t.singleCoreM, tailN_ > 0 ? tailN_ : t.singleCoreN,
                      tailK_ > 0 ? tailK_ : t.singleCoreK};
        mdsl_emu::Require(s.m <= t.singleCoreM && s.n <= t.singleCoreN && s.k <= t.singleCoreK, api,
                          "SetTail beyond the single-core shape");
        lda_ = transA_ ? t.M : t.Ka;
        ldb_ = transB_ ? t.Kb : t.N;
        a_.Check(api, 0, transA_ ? (s.k - 1) * lda_ + s.m : (s.m - 1) * lda_ + s.k);
        b_.Check(api, 0, transB_ ? (s.n - 1) * ldb_ + s.k : (s.k - 1) * ldb_ + s.n);
        if (hasBias_) bias_.Check(api, 0, s.n);
        return s;
    }

    /* C[i][j] of this call with float (int32) accumulation */
    Acc Element(int64_t i, int64_t j, int64_t k) const {
        const SrcAT *a = a_.Data();
        const SrcBT *b = b_.Data();
        Acc acc = 0;
        for (int64_t p = 0; p < k; ++p) {
            const Acc x = static_cast<Acc>(a[transA_ ? p * lda_ + i : i * lda_ + p]);
            const Acc y = static_cast<Acc>(b[transB_ ? j * ldb_ + p : p * ldb_ + j]);
            acc += x * y;
        }
        if (hasBias_) acc += static_cast<Acc>(bias_.Data()[j]);
        return acc;
    }

    TCubeTiling tiling_{};
    Shape shape_{0, 0, 0};
    int64_t lda_ = 0, ldb_ = 0, mIter_ = 0, nIter_ = 0, count_ = -1;
    bool iterating_ = false, haveBlock_ = false;
    AscendC::GlobalTensor<SrcAT> a_;
    AscendC::GlobalTensor<SrcBT> b_;
    AscendC::GlobalTensor<BiasT> bias_;
    bool inited_ = false, hasLocalWorkspace_ = false, transA_ = false, transB_ = false, hasA_ = false, hasB_ = false, hasBias_ = false;
    int tailM_ = -1, tailN_ = -1, tailK_ = -1;

    void RequireInit(const char *api) const {
        mdsl_emu::Require(inited_, api, "the Matmul object was not registered (REGIST_MATMUL_OBJ)");
    }
    static void Check(bool ok, const char *what) { mdsl_emu::Require(ok, "Matmul::Init", what); }
};

namespace detail {
inline void Regist(AscendC::TPipe *, GM_ADDR) {}
template <class MM, class... Rest>
inline void Regist(AscendC::TPipe *pipe, GM_ADDR workspace, MM &mm, const TCubeTiling *tiling, Rest &&...rest) {
    mdsl_emu::Require(workspace != nullptr, "REGIST_MATMUL_OBJ",
                      "no system workspace (the launch's workspace argument, GetSysWorkSpacePtr())");
    mm.Init(tiling, pipe);
    Regist(pipe, workspace, rest...);
}
}  // namespace detail

}  // namespace matmul

#define REGIST_MATMUL_OBJ(tpipe, workspace, ...) ::matmul::detail::Regist(tpipe, workspace, __VA_ARGS__)
