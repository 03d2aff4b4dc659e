/*
 * mdsl AscendC emulation: shared state and checks.
 *
 * Written by the mdsl authors from the public AscendC API documentation; no CANN code is
 * copied. It implements the subset of the AscendC kernel API that mdsl's templates use, on
 * the CPU, so g++ compiles the generated kernels unchanged and runs them: each block of a
 * launch runs in turn (GetBlockIdx() loops over blockDim), every block gets a fresh
 * Unified Buffer of the configured size, and misuse fails loudly with an
 * mdsl_emu::Error naming the kernel, the block and the API call.
 *
 * Where the documentation leaves behaviour open, the emulation assumes (and checks):
 * - DataCopyPad's global-memory side strides count bytes, its UB side strides count
 *   32-byte blocks, and each block occupies whole 32-byte blocks in the UB;
 * - ReduceSum/Max/Min need a work tensor of one partial per 256-byte repeat, rounded up
 *   to whole 32-byte blocks; Compare works on whole 256-byte repeats;
 * - vector instructions read and write 32-byte aligned UB addresses;
 * - the Matmul API's IterateAll computes one core's singleCoreM x singleCoreN block (or the
 *   SetTail shape) with float accumulation; host matmul tiling is a simple planner of its
 *   own (tiling/tiling_api.h), not CANN's.
 * Pipe synchronization (SetFlag/WaitFlag/PipeBarrier) is accepted and ignored: the CPU
 * runs in program order; the queue state machine (tensor.h) checks the protocol instead.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#define __aicore__
#define __global__
#define __gm__
#ifndef GM_ADDR
#define GM_ADDR uint8_t *
#endif

using half = _Float16;

namespace mdsl_emu {

struct Error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

struct Config {
    uint32_t ubBytes = 192 * 1024;
    uint32_t aivCores = 8;
    uint32_t aicCores = 4;
    uint64_t sysWorkspaceBytes = 1024;
};

inline Config &config() {
    static Config c;
    return c;
}

struct BlockContext {
    std::string kernel = "<host>";
    int64_t blockIdx = 0;
    int64_t blockNum = 1;
    std::vector<uint8_t> ub;  // this block's Unified Buffer
    uint32_t ubUsed = 0;      // bytes handed out by TPipe::InitBuffer
    void *pipe = nullptr;     // the live TPipe
    uint8_t *sysWorkspace = nullptr;
    std::vector<std::string> leaks;
    bool active = false;
};

inline BlockContext &block() {
    static thread_local BlockContext b;
    return b;
}

[[noreturn]] inline void Fail(const std::string &api, const std::string &message) {
    const BlockContext &b = block();
    std::ostringstream os;
    os << "AscendC emulation: kernel " << b.kernel << ", block " << b.blockIdx << "/" << b.blockNum
       << ": " << api << ": " << message;
    throw Error(os.str());
}

inline void Require(bool ok, const char *api, const std::string &message) {
    if (!ok) Fail(api, message);
}

/* ---- global memory regions: every GM access must fall inside a registered buffer ---- */
struct GmRegion {
    uint64_t bytes;
    std::string name;
};

inline std::map<uintptr_t, GmRegion> &gmRegions() {
    static std::map<uintptr_t, GmRegion> regions;
    return regions;
}

inline void RegisterGm(const void *ptr, uint64_t bytes, const std::string &name) {
    if (ptr != nullptr && bytes > 0) gmRegions()[reinterpret_cast<uintptr_t>(ptr)] = {bytes, name};
}

inline void ClearGm() { gmRegions().clear(); }

inline void CheckGm(const char *api, const void *ptr, uint64_t bytes) {
    auto &regions = gmRegions();
    if (regions.empty() || bytes == 0) return;  // nothing registered: unchecked (host tests)
    const uintptr_t p = reinterpret_cast<uintptr_t>(ptr);
    auto it = regions.upper_bound(p);
    if (it != regions.begin()) {
        --it;
        if (p >= it->first && p + bytes <= it->first + it->second.bytes) return;
        if (p >= it->first && p < it->first + it->second.bytes) {
            std::ostringstream os;
            os << "global memory access of " << bytes << " bytes at offset " << (p - it->first)
               << " runs past the end of buffer " << it->second.name << " (" << it->second.bytes
               << " bytes)";
            Fail(api, os.str());
        }
    }
    std::ostringstream os;
    os << "global memory access of " << bytes << " bytes at " << ptr
       << " is outside every buffer of this launch";
    Fail(api, os.str());
}

/* ---- the Unified Buffer ---- */
constexpr uint32_t kUbAlign = 32;

inline uint8_t *UbBase() { return block().ub.data(); }

inline uint32_t UbOffset(const void *p) {
    return static_cast<uint32_t>(static_cast<const uint8_t *>(p) - UbBase());
}

inline void CheckUbAligned(const char *api, const void *p, const char *what) {
    if (UbOffset(p) % kUbAlign != 0) {
        std::ostringstream os;
        os << what << " starts at Unified Buffer offset " << UbOffset(p)
           << ", not 32-byte aligned";
        Fail(api, os.str());
    }
}

/* ---- one launch: run every block in turn ---- */
inline void RunKernel(const char *name, uint32_t blockDim, const std::function<void()> &body) {
    BlockContext &b = block();
    Require(blockDim > 0, "launch", std::string("kernel ") + name + " launched with blockDim 0");
    for (uint32_t i = 0; i < blockDim; ++i) {
        b.kernel = name;
        b.blockIdx = i;
        b.blockNum = blockDim;
        b.ub.assign(config().ubBytes, 0xFF);  // poison: unwritten floats read as NaN
        b.ubUsed = 0;
        b.pipe = nullptr;
        b.leaks.clear();
        b.active = true;
        try {
            body();
        } catch (...) {
            b.active = false;
            throw;
        }
        b.active = false;
        if (!b.leaks.empty()) {
            std::string all;
            for (const auto &l : b.leaks) all += (all.empty() ? "" : "; ") + l;
            Fail("end of kernel", all);
        }
    }
    b.kernel = "<host>";
    b.blockIdx = 0;
    b.blockNum = 1;
}

/* ---- numeric helpers ---- */
template <typename T>
inline float ToFloat(T v) {
    return static_cast<float>(v);
}

template <typename T>
inline T FromFloat(float v) {
    return static_cast<T>(v);
}

}  // namespace mdsl_emu
