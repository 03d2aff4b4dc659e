/* mdsl AscendC emulation: the Matmul high-level API (cube unit) over global memory.
 *
 * IterateAll computes this core's singleCoreM x singleCoreN block (or the SetTail shape)
 * of C = op(A) @ op(B) (+ bias) with float accumulation; leading dimensions are the tiling's
 * original shapes (M, N, Ka, Kb). Init checks the base block against the L0 buffers. */
#pragma once

#include "kernel_operator.h"
#include "kernel_tiling/kernel_tiling.h"

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
        transA_ = isTransposeA;
        hasA_ = true;
    }
    void SetTensorB(const AscendC::GlobalTensor<SrcBT> &gm, bool isTransposeB = false) {
        RequireInit("Matmul::SetTensorB");
        mdsl_emu::Require(!isTransposeB || B_TYPE::isTrans, "Matmul::SetTensorB",
                          "a transposed B needs MatmulType<..., ISTRANS=true>");
        b_ = gm;
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
        RequireInit(api);
        mdsl_emu::Require(hasA_ && hasB_, api, "SetTensorA and SetTensorB first");
        mdsl_emu::Require(hasLocalWorkspace_ || !mdsl_emu::Has(mdsl_emu::kMatmulLocalWorkspace), api,
                          "on this SoC C reaches global memory through the UB: SetLocalWorkspace first");
        const TCubeTiling &t = tiling_;
        const int64_t m = tailM_ > 0 ? tailM_ : t.singleCoreM;
        const int64_t n = tailN_ > 0 ? tailN_ : t.singleCoreN;
        const int64_t k = tailK_ > 0 ? tailK_ : t.singleCoreK;
        mdsl_emu::Require(m <= t.singleCoreM && n <= t.singleCoreN && k <= t.singleCoreK, api,
                          "SetTail beyond the single-core shape");
        const int64_t lda = transA_ ? t.M : t.Ka, ldb = transB_ ? t.Kb : t.N, ldc = t.N;
        // every element read or written lies inside these spans: check them once
        a_.Check(api, 0, transA_ ? (k - 1) * lda + m : (m - 1) * lda + k);
        b_.Check(api, 0, transB_ ? (n - 1) * ldb + k : (k - 1) * ldb + n);
        gm.Check(api, 0, (m - 1) * ldc + n);
        if (hasBias_) bias_.Check(api, 0, n);
        const SrcAT *a = a_.Data();
        const SrcBT *b = b_.Data();
        DstT *c = gm.Data();
        using Acc = std::conditional_t<std::is_integral_v<SrcAT>, int32_t, float>;
        for (int64_t i = 0; i < m; ++i) {
            for (int64_t j = 0; j < n; ++j) {
                Acc acc = 0;
                for (int64_t p = 0; p < k; ++p) {
                    const Acc x = static_cast<Acc>(a[transA_ ? p * lda + i : i * lda + p]);
                    const Acc y = static_cast<Acc>(b[transB_ ? j * ldb + p : p * ldb + j]);
                    acc += x * y;
                }
                if (hasBias_) acc += static_cast<Acc>(bias_.Data()[j]);
                if (enAtomic) acc += static_cast<Acc>(c[i * ldc + j]);
                c[i * ldc + j] = static_cast<DstT>(acc);
            }
        }
        (void)enSequentialWrite;
        (void)waitIterateAll;
        (void)fakeMsg;
    }
    void End() {
        hasA_ = hasB_ = hasBias_ = false;
        tailM_ = tailN_ = tailK_ = -1;
    }

private:
    TCubeTiling tiling_{};
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
