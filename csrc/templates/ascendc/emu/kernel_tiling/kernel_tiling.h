/* mdsl AscendC emulation: the kernel-side matmul tiling record (plain fields; the host
 * side is optiling::TCubeTiling in tiling/tiling_api.h, the same bytes). */
#pragma once

#include <cstdint>

struct TCubeTiling {
    int32_t usedCoreNum = 0;
    int32_t M = 0, N = 0, Ka = 0, Kb = 0;
    int32_t singleCoreM = 0, singleCoreN = 0, singleCoreK = 0;
    int32_t baseM = 0, baseN = 0, baseK = 0;
    int32_t depthA1 = 1, depthB1 = 1, stepM = 1, stepN = 1, stepKa = 1, stepKb = 1;
    int32_t isBias = 0, transLength = 0, iterateOrder = 0, shareMode = 0;
    int32_t shareL1Size = 0, shareL0CSize = 0, shareUbSize = 0;
    int32_t batchM = 1, batchN = 1, singleBatchM = 1, singleBatchN = 1;
    int32_t dbL0A = 2, dbL0B = 2, dbL0C = 1;
    int32_t reserved = 0;
};
