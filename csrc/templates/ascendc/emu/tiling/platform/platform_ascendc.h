/* mdsl AscendC emulation: the host-side platform query (core counts, memory sizes). */
#pragma once

#include <cstdint>

#include "mdsl_emu/core.h"

namespace platform_ascendc {

enum class CoreMemType { L0_A, L0_B, L0_C, L1, L2, UB, HBM, RESERVED };
enum class SocVersion { ASCEND910, ASCEND910B, ASCEND310P, ASCEND310B, RESERVED_VERSION };

class PlatformAscendC {
public:
    uint32_t GetCoreNum() const { return mdsl_emu::config().aivCores; }
    uint32_t GetCoreNumAiv() const { return mdsl_emu::config().aivCores; }
    uint32_t GetCoreNumAic() const { return mdsl_emu::config().aicCores; }
    void GetCoreMemSize(CoreMemType type, uint64_t &size) const {
        switch (type) {
            case CoreMemType::UB: size = mdsl_emu::config().ubBytes; break;
            case CoreMemType::L0_A:
            case CoreMemType::L0_B: size = 64 * 1024; break;
            case CoreMemType::L0_C: size = 128 * 1024; break;
            case CoreMemType::L1: size = 512 * 1024; break;
            default: size = 0;
        }
    }
    SocVersion GetSocVersion() const { return SocVersion::ASCEND910B; }
    uint32_t GetLibApiWorkSpaceSize() const { return static_cast<uint32_t>(mdsl_emu::config().sysWorkspaceBytes); }
};

class PlatformAscendCManager {
public:
    static PlatformAscendC *GetInstance() {
        static PlatformAscendC platform;
        return &platform;
    }
};

}  // namespace platform_ascendc
