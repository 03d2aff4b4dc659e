/* mdsl AscendC emulation: DataCopy and DataCopyPad between global memory and the UB. */
#pragma once

#include "mdsl_emu/tensor.h"

namespace AscendC {

constexpr uint32_t ONE_BLK_SIZE = 32;
constexpr uint32_t DEFAULT_C0_SIZE = 32;

/* Strided copies in 32-byte blocks: blockLen and both strides count 32-byte blocks. */
struct DataCopyParams {
    uint16_t blockCount = 1;
    uint16_t blockLen = 0;
    uint16_t srcStride = 0;
    uint16_t dstStride = 0;
};

/* DataCopyPad: blockLen counts bytes; the global-memory side stride counts bytes, the UB
 * side stride counts 32-byte blocks; each block occupies whole 32-byte blocks in the UB. */
struct DataCopyExtParams {
    uint16_t blockCount = 1;
    uint32_t blockLen = 0;
    uint32_t srcStride = 0;
    uint32_t dstStride = 0;
    uint32_t rsv = 0;
};

template <typename T>
struct DataCopyPadExtParams {
    bool isPad = false;
    uint8_t leftPadding = 0;
    uint8_t rightPadding = 0;
    T paddingValue = T(0);
};

namespace detail {
template <typename T>
inline void RequireWholeBlocks(const char *api, uint64_t count) {
    const uint64_t bytes = count * sizeof(T);
    if (bytes % ONE_BLK_SIZE != 0) {
        mdsl_emu::Fail(api, std::to_string(count) + " elements = " + std::to_string(bytes) +
                                " bytes is not a multiple of 32 bytes (the 32-byte rule); use "
                                "DataCopyPad for unaligned lengths");
    }
}
}  // namespace detail

/* global -> UB, `count` contiguous elements */
template <typename T>
inline void DataCopy(const LocalTensor<T> &dst, const GlobalTensor<T> &src, const uint32_t count) {
    const char *api = "DataCopy(GM->UB)";
    detail::RequireWholeBlocks<T>(api, count);
    mdsl_emu::CheckUbAligned(api, dst.Data(), "the destination");
    dst.Check(api, count, Access::CopyToUb);
    src.Check(api, 0, count);
    std::memcpy(dst.Data(), src.Data(), size_t(count) * sizeof(T));
}

/* UB -> global */
template <typename T>
inline void DataCopy(const GlobalTensor<T> &dst, const LocalTensor<T> &src, const uint32_t count) {
    const char *api = "DataCopy(UB->GM)";
    detail::RequireWholeBlocks<T>(api, count);
    mdsl_emu::CheckUbAligned(api, src.Data(), "the source");
    src.Check(api, count, Access::CopyFromUb);
    dst.Check(api, 0, count);
    std::memcpy(dst.Data(), src.Data(), size_t(count) * sizeof(T));
}

/* UB -> UB (e.g. VECIN -> VECOUT) */
template <typename T>
inline void DataCopy(const LocalTensor<T> &dst, const LocalTensor<T> &src, const uint32_t count) {
    const char *api = "DataCopy(UB->UB)";
    detail::RequireWholeBlocks<T>(api, count);
    mdsl_emu::CheckUbAligned(api, src.Data(), "the source");
    mdsl_emu::CheckUbAligned(api, dst.Data(), "the destination");
    src.Check(api, count, Access::VectorRead);
    dst.Check(api, count, Access::VectorWrite);
    std::memmove(dst.Data(), src.Data(), size_t(count) * sizeof(T));
}

/* strided global -> UB in 32-byte blocks */
template <typename T>
inline void DataCopy(const LocalTensor<T> &dst, const GlobalTensor<T> &src, const DataCopyParams &p) {
    const char *api = "DataCopy(GM->UB, DataCopyParams)";
    mdsl_emu::CheckUbAligned(api, dst.Data(), "the destination");
    const uint64_t per = ONE_BLK_SIZE / sizeof(T);
    const uint64_t len = uint64_t(p.blockLen) * per;
    const uint64_t dstSpan = (uint64_t(p.blockCount) * (p.blockLen + p.dstStride)) * per;
    dst.Check(api, dstSpan ? dstSpan - uint64_t(p.dstStride) * per : 0, Access::CopyToUb);
    for (uint16_t i = 0; i < p.blockCount; ++i) {
        const uint64_t s = uint64_t(i) * (p.blockLen + p.srcStride) * per;
        const uint64_t d = uint64_t(i) * (p.blockLen + p.dstStride) * per;
        src.Check(api, s, len);
        std::memcpy(dst.Data() + d, src.Data() + s, len * sizeof(T));
    }
}

/* strided UB -> global in 32-byte blocks */
template <typename T>
inline void DataCopy(const GlobalTensor<T> &dst, const LocalTensor<T> &src, const DataCopyParams &p) {
    const char *api = "DataCopy(UB->GM, DataCopyParams)";
    mdsl_emu::CheckUbAligned(api, src.Data(), "the source");
    const uint64_t per = ONE_BLK_SIZE / sizeof(T);
    const uint64_t len = uint64_t(p.blockLen) * per;
    const uint64_t srcSpan = (uint64_t(p.blockCount) * (p.blockLen + p.srcStride)) * per;
    src.Check(api, srcSpan ? srcSpan - uint64_t(p.srcStride) * per : 0, Access::CopyFromUb);
    for (uint16_t i = 0; i < p.blockCount; ++i) {
        const uint64_t s = uint64_t(i) * (p.blockLen + p.srcStride) * per;
        const uint64_t d = uint64_t(i) * (p.blockLen + p.dstStride) * per;
        dst.Check(api, d, len);
        std::memcpy(dst.Data() + d, src.Data() + s, len * sizeof(T));
    }
}

namespace detail {
inline uint64_t PaddedBlocks(uint32_t bytes) { return (uint64_t(bytes) + ONE_BLK_SIZE - 1) / ONE_BLK_SIZE; }
}  // namespace detail

/* global -> UB with any byte length per block; the UB side is padded to 32 bytes */
template <typename T>
inline void DataCopyPad(const LocalTensor<T> &dst, const GlobalTensor<T> &src, const DataCopyExtParams &p,
                        const DataCopyPadExtParams<T> &pad) {
    const char *api = "DataCopyPad(GM->UB)";
    mdsl_emu::RequireFeature(mdsl_emu::kDataCopyPad, api);
    mdsl_emu::CheckUbAligned(api, dst.Data(), "the destination");
    mdsl_emu::Require(p.blockLen % sizeof(T) == 0, api,
                      "blockLen " + std::to_string(p.blockLen) + " bytes is not a whole number of elements");
    const uint64_t rowBlocks = detail::PaddedBlocks(p.blockLen);
    const uint64_t rowElems = p.blockLen / sizeof(T);
    const uint64_t dstRow = (rowBlocks + p.dstStride) * ONE_BLK_SIZE / sizeof(T);
    const uint64_t srcRowBytes = uint64_t(p.blockLen) + p.srcStride;
    mdsl_emu::Require(srcRowBytes % sizeof(T) == 0, api, "srcStride is not a whole number of elements");
    const uint64_t last = p.blockCount ? (p.blockCount - 1) * dstRow + rowBlocks * ONE_BLK_SIZE / sizeof(T) : 0;
    dst.Check(api, last, Access::CopyToUb);
    for (uint16_t i = 0; i < p.blockCount; ++i) {
        const uint64_t s = i * srcRowBytes / sizeof(T);
        src.Check(api, s, rowElems);
        T *out = dst.Data() + i * dstRow;
        std::memcpy(out, src.Data() + s, rowElems * sizeof(T));
        if (pad.isPad) {
            const uint64_t room = rowBlocks * ONE_BLK_SIZE / sizeof(T);
            for (uint64_t j = rowElems; j < room && j < rowElems + pad.rightPadding; ++j) out[j] = pad.paddingValue;
        }
    }
}

/* UB -> global with any byte length per block */
template <typename T>
inline void DataCopyPad(const GlobalTensor<T> &dst, const LocalTensor<T> &src, const DataCopyExtParams &p) {
    const char *api = "DataCopyPad(UB->GM)";
    mdsl_emu::RequireFeature(mdsl_emu::kDataCopyPad, api);
    mdsl_emu::CheckUbAligned(api, src.Data(), "the source");
    mdsl_emu::Require(p.blockLen % sizeof(T) == 0, api,
                      "blockLen " + std::to_string(p.blockLen) + " bytes is not a whole number of elements");
    const uint64_t rowBlocks = detail::PaddedBlocks(p.blockLen);
    const uint64_t rowElems = p.blockLen / sizeof(T);
    const uint64_t srcRow = (rowBlocks + p.srcStride) * ONE_BLK_SIZE / sizeof(T);
    const uint64_t dstRowBytes = uint64_t(p.blockLen) + p.dstStride;
    mdsl_emu::Require(dstRowBytes % sizeof(T) == 0, api, "dstStride is not a whole number of elements");
    const uint64_t last = p.blockCount ? (p.blockCount - 1) * srcRow + rowElems : 0;
    src.Check(api, last, Access::CopyFromUb);
    for (uint16_t i = 0; i < p.blockCount; ++i) {
        const uint64_t d = i * dstRowBytes / sizeof(T);
        dst.Check(api, d, rowElems);
        std::memcpy(dst.Data() + d, src.Data() + i * srcRow, rowElems * sizeof(T));
    }
}

}  // namespace AscendC
