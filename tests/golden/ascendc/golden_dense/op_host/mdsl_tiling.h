/*
 * The tiling rule of mdsl's AscendC kernels (the same arithmetic as the compile-time
 * planner, mdsl.targets.ascendc.tiling.plan_rows), run on the host with the device's
 * Unified Buffer size and core count.
 */
#ifndef MDSL_TILING_H
#define MDSL_TILING_H

#include <cstdint>

struct MdslRowPlan {
    uint32_t rows;
    uint32_t rowLength;
    uint32_t tileLength;
    uint32_t tilesPerRow;
    uint32_t tailLength;
    uint32_t units;
    uint32_t blockDim;
    uint32_t unitsPerBlock;
    uint32_t unitsRemainder;
};

inline uint64_t MdslCeilDiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

/* Spread `units` work units over at most `cores` blocks. */
inline void MdslSpread(uint64_t units, uint32_t cores, MdslRowPlan &plan)
{
    const uint64_t blocks = units < cores ? (units > 0 ? units : 1) : cores;
    plan.units = static_cast<uint32_t>(units);
    plan.blockDim = static_cast<uint32_t>(blocks);
    plan.unitsPerBlock = static_cast<uint32_t>(units / blocks);
    plan.unitsRemainder = static_cast<uint32_t>(units % blocks);
}

/* Tiles of `rows` rows of `rowLength` elements: the UB holds
 * fixedBytes + bytesPerElement * tileLength; tiles are multiples of `align` elements;
 * `splitRows`: tiles of one row may go to different cores; `forcedTile` (0: none) was
 * checked by the compile-time planner. Returns false when no tile fits the UB. */
inline bool MdslPlanRows(uint64_t rows, uint64_t rowLength, uint32_t bytesPerElement, uint32_t fixedBytes,
                         uint32_t align, bool splitRows, uint32_t forcedTile, uint32_t cores, uint64_t ubBytes,
                         MdslRowPlan &plan)
{
    const uint64_t budget = ubBytes > fixedBytes ? ubBytes - fixedBytes : 0;
    const uint64_t maxTile = budget / (bytesPerElement > 0 ? bytesPerElement : 1) / align * align;
    if (maxTile < align) {
        return false;
    }
    uint64_t tile = forcedTile;
    if (tile == 0) {
        tile = MdslCeilDiv(rowLength > 0 ? rowLength : 1, align) * align;
        tile = tile < maxTile ? tile : maxTile;
        if (splitRows && rows < cores) {
            const uint64_t want = MdslCeilDiv(cores, rows > 0 ? rows : 1);
            const uint64_t perCore = MdslCeilDiv(MdslCeilDiv(rowLength, want), align) * align;
            const uint64_t spread = perCore > align ? perCore : align;
            tile = tile < spread ? tile : spread;
        }
    } else if (tile > maxTile) {
        tile = maxTile;
    }
    const uint64_t tilesPerRow = rowLength > tile ? MdslCeilDiv(rowLength, tile) : 1;
    plan.rows = static_cast<uint32_t>(rows);
    plan.rowLength = static_cast<uint32_t>(rowLength);
    plan.tileLength = static_cast<uint32_t>(tile);
    plan.tilesPerRow = static_cast<uint32_t>(tilesPerRow);
    plan.tailLength = static_cast<uint32_t>(rowLength - (tilesPerRow - 1) * tile);
    MdslSpread(splitRows ? rows * tilesPerRow : rows, cores, plan);
    return true;
}

/* A matmul epilogue on the result in the UB: the largest base-block height (a multiple of
 * 16, at most `baseM`) such that fixedBytes + bytesPerElement * tile (the epilogue's tiles
 * for one block row) + height * tile * resultBytes (the block) fits `ubBytes`; 0: none. */
inline uint32_t MdslFitBlockRows(uint32_t baseM, uint64_t tile, uint32_t bytesPerElement, uint32_t fixedBytes,
                                 uint32_t resultBytes, uint64_t ubBytes)
{
    const uint64_t rowTiles = fixedBytes + static_cast<uint64_t>(bytesPerElement) * tile;
    if (ubBytes <= rowTiles) {
        return 0;
    }
    const uint64_t rows = (ubBytes - rowTiles) / (tile * resultBytes) / 16 * 16;
    return static_cast<uint32_t>(rows < baseM ? rows : baseM);
}

#endif  // MDSL_TILING_H
