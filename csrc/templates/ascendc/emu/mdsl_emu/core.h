/*
 * mdsl AscendC emulation: shared state and checks.
 *
 * Written by the mdsl authors from the public AscendC API documentation; no CANN code is
 * copied. It implements the subset of the AscendC kernel API that mdsl's templates use, on
 * the CPU, so g++ compiles the generated kernels unchanged and runs them: each block of a
 * launch runs in turn (GetBlockIdx() loops over blockDim; in MIX mode, SetKernelMode(MIX_MODE),
 * over the vector cores: two per launched block where the SoC has separate cube and vector
 * cores, as GetBlockIdx() does on the hardware), every block gets a fresh
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
 * - GlobalTensor::SetValue goes through the core's data cache: a block that stores with it
 *   must DataCacheCleanAndInvalid before it ends, and two blocks of one launch never store
 *   into one 64-byte cache line (write-backs of whole lines would clobber each other);
 * - the per-SoC API table (Config::features) refuses the APIs a SoC lacks (DataCopyPad on
 *   310P), and on SoCs where the Matmul API writes C through UB it needs SetLocalWorkspace;
 * - the Matmul client's message area (KfcMsg, 128 bytes) sits at the end of each vector
 *   core's UB in MIX mode: TPipe buffers may not reach into it.
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

enum class KernelMode { MIX_MODE = 0, AIC_MODE, AIV_MODE, MIX_AIC_1_1 };

namespace mdsl_emu {

struct Error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

/* the SoC's API table (mdsl.targets.ascendc.soc): bits of Config::features */
enum Feature : uint32_t {
    kDataCopyPad = 1,
    kDataCacheCleanAndInvalid = 2,
    kMatmulLocalWorkspace = 4,  // Matmul with C in GM needs SetLocalWorkspace (310P)
    kSplitCores = 8,            // separate AIC/AIV cores: MIX mode runs two AIV per block
};

struct Config {
    uint32_t ubBytes = 192 * 1024;
    uint32_t aivCores = 8;
    uint32_t aicCores = 4;
    uint64_t sysWorkspaceBytes = 1024;
    uint32_t features = kDataCopyPad | kDataCacheCleanAndInvalid | kSplitCores;
    KernelMode mode = KernelMode::AIV_MODE;  // set by SetKernelMode before a CPU launch
};

constexpr uint32_t kKfcMsgBytes = 128;  // sizeof(KfcMsg): the Matmul client's message area
constexpr uint64_t kCacheLine = 64;

inline bool Has(uint32_t feature);

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
    int64_t subBlocks = 1;     // vector blocks per launched block (2 in MIX mode on split cores)
    bool cacheDirty = false;   // a GlobalTensor::SetValue not yet written back
    uint64_t launch = 0;       // launches so far (cache-line ownership is per launch)
    std::map<uintptr_t, int64_t> lines;  // 64-byte lines stored with SetValue -> block
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

inline bool Has(uint32_t feature) { return (config().features & feature) != 0; }

inline void RequireFeature(uint32_t feature, const char *api) {
    if (!Has(feature)) Fail(api, "this SoC does not have this API (the SoC's API table, soc.py)");
}

/* a scalar store to global memory: through the data cache, line by line */
inline void CacheStore(const char *api, const void *p) {
    BlockContext &b = block();
    if (!b.active) return;
    b.cacheDirty = true;
    const uintptr_t line = reinterpret_cast<uintptr_t>(p) / kCacheLine;
    auto it = b.lines.find(line);
    if (it != b.lines.end() && it->second != b.blockIdx) {
        std::ostringstream os;
        os << "block " << it->second << " and this block both store into the 64-byte cache line at "
           << reinterpret_cast<const void *>(line * kCacheLine)
           << ": the write-back of one core's line overwrites the other's values";
        Fail(api, os.str());
    }
    b.lines[line] = b.blockIdx;
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

/* the system workspace of a kernel-launch call: by convention the kernel's last two
 * arguments are (workspace, tiling), and the launch hands the workspace to the Matmul API */
template <typename... Args>
inline uint8_t *LaunchWorkspace(Args... args) {
    uint8_t *all[] = {reinterpret_cast<uint8_t *>(args)..., nullptr};
    return sizeof...(Args) >= 2 ? all[sizeof...(Args) - 2] : nullptr;
}

/* ---- one launch: run every block in turn (in MIX mode, every vector core) ---- */
inline void RunKernel(const char *name, uint32_t blockDim, uint8_t *workspace, const std::function<void()> &body) {
    BlockContext &b = block();
    Require(blockDim > 0, "launch", std::string("kernel ") + name + " launched with blockDim 0");
    const bool mix = config().mode == KernelMode::MIX_MODE;
    const uint32_t sub = mix && Has(kSplitCores) ? 2 : 1;
    b.launch += 1;
    b.lines.clear();
    for (uint32_t i = 0; i < blockDim * sub; ++i) {
        b.kernel = name;
        b.blockIdx = i;
        b.blockNum = blockDim;
        b.subBlocks = sub;
        b.sysWorkspace = workspace;
        b.cacheDirty = false;
        b.ub.assign(config().ubBytes, 0xFF);  // poison: unwritten floats read as NaN
        b.ubUsed = 0;
        b.pipe = nullptr;
        b.leaks.clear();
        b.active = true;
        try {
            body();
        } catch (...) {
            b.active = false;
            config().mode = KernelMode::AIV_MODE;
            throw;
        }
        b.active = false;
        if (b.cacheDirty) {
            Fail("end of kernel", "GlobalTensor::SetValue stores still sit in the data cache: "
                                  "DataCacheCleanAndInvalid before the kernel ends");
        }
        if (!b.leaks.empty()) {
            std::string all;
            for (const auto &l : b.leaks) all += (all.empty() ? "" : "; ") + l;
            Fail("end of kernel", all);
        }
    }
    b.kernel = "<host>";
    b.blockIdx = 0;
    b.blockNum = 1;
    b.subBlocks = 1;
    config().mode = KernelMode::AIV_MODE;  // each launch sets its own mode (libraries share this state)
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
