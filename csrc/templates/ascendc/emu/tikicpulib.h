/* mdsl AscendC emulation: the CPU launch entry points (ICPU_RUN_KF, GmAlloc). */
#pragma once

#include <cstdlib>

#include "kernel_operator.h"

namespace AscendC {
inline void SetKernelMode(KernelMode mode) { mdsl_emu::config().mode = mode; }
inline void *GmAlloc(size_t size) {
    void *p = std::aligned_alloc(64, (size + 63) / 64 * 64);
    mdsl_emu::RegisterGm(p, size, "GmAlloc");
    return p;
}
inline void GmFree(void *p) {
    mdsl_emu::gmRegions().erase(reinterpret_cast<uintptr_t>(p));
    std::free(p);
}
}  // namespace AscendC

#define ICPU_RUN_KF(func, blockDim, ...) \
    ::mdsl_emu::RunKernel(#func, (blockDim), ::mdsl_emu::LaunchWorkspace(__VA_ARGS__), [&]() { func(__VA_ARGS__); })
