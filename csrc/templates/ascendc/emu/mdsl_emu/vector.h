/* mdsl AscendC emulation: vector instructions (count-based forms) and the math library. */
#pragma once

#include <cmath>
#include <limits>
#include <type_traits>

#include "mdsl_emu/tensor.h"

namespace AscendC {

enum class RoundMode : uint8_t { CAST_NONE, CAST_RINT, CAST_FLOOR, CAST_CEIL, CAST_ROUND, CAST_TRUNC, CAST_ODD };
enum class CMPMODE : uint8_t { LT, GT, EQ, LE, GE, NE };
enum class SELMODE : uint8_t { VSEL_CMPMASK_SPR, VSEL_TENSOR_SCALAR_MODE, VSEL_TENSOR_TENSOR_MODE };

namespace detail {

template <typename T>
using Calc = std::conditional_t<std::is_integral_v<T>, int64_t, float>;

template <typename T>
inline Calc<T> Load(T v) {
    return static_cast<Calc<T>>(static_cast<std::conditional_t<std::is_integral_v<T>, int64_t, float>>(v));
}

template <typename T>
inline void Operand(const char *api, const LocalTensor<T> &t, int64_t count, Access how) {
    mdsl_emu::CheckUbAligned(api, t.Data(), how == Access::VectorWrite ? "the destination" : "a source operand");
    t.Check(api, static_cast<uint64_t>(count), how);
}

inline void Count(const char *api, int64_t count) {
    if (count < 0) mdsl_emu::Fail(api, "negative count " + std::to_string(count));
}

template <typename T>
inline T MaxOf(T a, T b) {
    return (a > b || a != a) ? a : b;  // NaN propagates
}
template <typename T>
inline T MinOf(T a, T b) {
    return (a < b || a != a) ? a : b;
}

template <typename T, typename F>
inline void Binary(const char *api, const LocalTensor<T> &dst, const LocalTensor<T> &a, const LocalTensor<T> &b,
                   int64_t count, F f) {
    Count(api, count);
    Operand(api, a, count, Access::VectorRead);
    Operand(api, b, count, Access::VectorRead);
    Operand(api, dst, count, Access::VectorWrite);
    for (int64_t i = 0; i < count; ++i) dst.Data()[i] = static_cast<T>(f(Load(a.Data()[i]), Load(b.Data()[i])));
}

template <typename T, typename F>
inline void Unary(const char *api, const LocalTensor<T> &dst, const LocalTensor<T> &a, int64_t count, F f) {
    Count(api, count);
    Operand(api, a, count, Access::VectorRead);
    Operand(api, dst, count, Access::VectorWrite);
    for (int64_t i = 0; i < count; ++i) dst.Data()[i] = static_cast<T>(f(Load(a.Data()[i])));
}

}  // namespace detail

#define MDSL_EMU_BINARY(NAME, BODY)                                                                  \
    template <typename T>                                                                            \
    inline void NAME(const LocalTensor<T> &dst, const LocalTensor<T> &src0, const LocalTensor<T> &src1, \
                     const int32_t &count) {                                                         \
        detail::Binary(#NAME, dst, src0, src1, count, [](auto x, auto y) { return BODY; });          \
    }
MDSL_EMU_BINARY(Add, x + y)
MDSL_EMU_BINARY(Sub, x - y)
MDSL_EMU_BINARY(Mul, x * y)
MDSL_EMU_BINARY(Div, x / y)
MDSL_EMU_BINARY(Max, detail::MaxOf(x, y))
MDSL_EMU_BINARY(Min, detail::MinOf(x, y))
#undef MDSL_EMU_BINARY

#define MDSL_EMU_SCALAR(NAME, BODY)                                                                   \
    template <typename T, typename U>                                                                 \
    inline void NAME(const LocalTensor<T> &dst, const LocalTensor<T> &src, const U &scalar,           \
                     const int32_t &count) {                                                          \
        const auto y = detail::Load(static_cast<T>(scalar));                                          \
        detail::Unary(#NAME, dst, src, count, [y](auto x) { return BODY; });                          \
    }
MDSL_EMU_SCALAR(Adds, x + y)
MDSL_EMU_SCALAR(Muls, x * y)
MDSL_EMU_SCALAR(Maxs, detail::MaxOf(x, static_cast<decltype(x)>(y)))
MDSL_EMU_SCALAR(Mins, detail::MinOf(x, static_cast<decltype(x)>(y)))
#undef MDSL_EMU_SCALAR

#define MDSL_EMU_UNARY(NAME, BODY)                                                                   \
    template <typename T>                                                                            \
    inline void NAME(const LocalTensor<T> &dst, const LocalTensor<T> &src, const int32_t &count) {   \
        detail::Unary(#NAME, dst, src, count, [](auto x) { return BODY; });                          \
    }
MDSL_EMU_UNARY(Exp, std::exp(x))
MDSL_EMU_UNARY(Ln, std::log(x))
MDSL_EMU_UNARY(Abs, (x < 0 ? -x : x))
MDSL_EMU_UNARY(Sqrt, std::sqrt(x))
MDSL_EMU_UNARY(Rsqrt, 1.0f / std::sqrt(x))
MDSL_EMU_UNARY(Reciprocal, 1.0f / x)
MDSL_EMU_UNARY(Relu, detail::MaxOf(x, static_cast<decltype(x)>(0)))
#undef MDSL_EMU_UNARY

/* math library (kernel_operator.h exposes these too); the optional sharedTmpBuffer form is
 * accepted and only checked for presence */
#define MDSL_EMU_MATH(NAME, BODY)                                                                    \
    template <typename T, bool isReuseSource = false>                                                \
    inline void NAME(const LocalTensor<T> &dst, const LocalTensor<T> &src, const uint32_t count) {   \
        detail::Unary(#NAME, dst, src, count, [](auto x) { return BODY; });                          \
    }                                                                                                \
    template <typename T, bool isReuseSource = false>                                                \
    inline void NAME(const LocalTensor<T> &dst, const LocalTensor<T> &src,                           \
                     const LocalTensor<uint8_t> &sharedTmpBuffer, const uint32_t count) {            \
        sharedTmpBuffer.Check(#NAME, 1, Access::Scalar);                                             \
        NAME<T, isReuseSource>(dst, src, count);                                                     \
    }
MDSL_EMU_MATH(Tanh, std::tanh(x))
MDSL_EMU_MATH(Erf, std::erf(x))
MDSL_EMU_MATH(Sigmoid, 1.0f / (1.0f + std::exp(-x)))
MDSL_EMU_MATH(Sin, std::sin(x))
MDSL_EMU_MATH(Cos, std::cos(x))
MDSL_EMU_MATH(Floor, std::floor(x))
MDSL_EMU_MATH(Ceil, std::ceil(x))
MDSL_EMU_MATH(Sign, static_cast<float>((x > 0) - (x < 0)))
#undef MDSL_EMU_MATH

template <typename T, bool isReuseSource = false>
inline void Power(const LocalTensor<T> &dst, const LocalTensor<T> &src0, const LocalTensor<T> &src1,
                  const uint32_t count) {
    detail::Binary("Power", dst, src0, src1, count, [](auto x, auto y) { return std::pow(x, y); });
}
template <typename T, bool isReuseSource = false>
inline void Power(const LocalTensor<T> &dst, const LocalTensor<T> &src0, const T &src1, const uint32_t count) {
    const float y = static_cast<float>(src1);
    detail::Unary("Power", dst, src0, count, [y](auto x) { return std::pow(x, y); });
}

template <typename T, typename U>
inline void Duplicate(const LocalTensor<T> &dst, const U &scalar, const int32_t &count) {
    detail::Count("Duplicate", count);
    detail::Operand("Duplicate", dst, count, Access::VectorWrite);
    for (int32_t i = 0; i < count; ++i) dst.Data()[i] = static_cast<T>(scalar);
}

/* ---- Cast ---- */
namespace detail {
inline double Rounded(double x, RoundMode mode) {
    switch (mode) {
        case RoundMode::CAST_FLOOR: return std::floor(x);
        case RoundMode::CAST_CEIL: return std::ceil(x);
        case RoundMode::CAST_TRUNC: return std::trunc(x);
        case RoundMode::CAST_ROUND: return std::round(x);  // half away from zero
        default: return std::nearbyint(x);                // half to even
    }
}

/* the neighbouring half value toward +inf (up) or -inf */
inline half NextHalf(half h, bool up) {
    uint16_t bits;
    std::memcpy(&bits, &h, 2);
    const bool negative = bits & 0x8000u;
    if ((bits & 0x7fffu) == 0) {
        bits = up ? 0x0001u : 0x8001u;
    } else if (up != negative) {
        ++bits;
    } else {
        --bits;
    }
    half out;
    std::memcpy(&out, &bits, 2);
    return out;
}

/* float -> half with a directed rounding mode: round to nearest, then step toward the mode */
inline half ToHalf(float x, RoundMode mode) {
    half h = static_cast<half>(x);  // nearest even
    if (mode == RoundMode::CAST_NONE || mode == RoundMode::CAST_RINT || x != x) return h;
    const float back = static_cast<float>(h);
    const half up = NextHalf(h, true);
    const half down = NextHalf(h, false);
    switch (mode) {
        case RoundMode::CAST_FLOOR: return back > x ? down : h;
        case RoundMode::CAST_CEIL: return back < x ? up : h;
        case RoundMode::CAST_TRUNC: return std::fabs(back) > std::fabs(x) ? (x > 0 ? down : up) : h;
        default: return h;
    }
}

template <typename D>
inline D SaturateInt(double v) {
    if (v != v) return 0;
    const double lo = static_cast<double>(std::numeric_limits<D>::min());
    const double hi = static_cast<double>(std::numeric_limits<D>::max());
    return static_cast<D>(v < lo ? lo : (v > hi ? hi : v));
}

template <typename D, typename S>
inline D CastOne(S s, RoundMode mode) {
    if constexpr (std::is_same_v<D, half> && std::is_floating_point_v<S>) {
        return ToHalf(static_cast<float>(s), mode);
    } else if constexpr (std::is_integral_v<D> && !std::is_integral_v<S>) {
        return SaturateInt<D>(Rounded(static_cast<double>(static_cast<float>(s)), mode));
    } else {
        return static_cast<D>(static_cast<std::conditional_t<std::is_integral_v<S>, int64_t, float>>(s));
    }
}
}  // namespace detail

template <typename D, typename S>
inline void Cast(const LocalTensor<D> &dst, const LocalTensor<S> &src, const RoundMode &mode, const uint32_t count) {
    const char *api = "Cast";
    detail::Operand(api, src, count, Access::VectorRead);
    detail::Operand(api, dst, count, Access::VectorWrite);
    if constexpr (std::is_integral_v<D> && !std::is_integral_v<S>) {
        mdsl_emu::Require(mode != RoundMode::CAST_NONE, api,
                          "a float -> integer Cast needs an explicit rounding mode (CAST_RINT, CAST_TRUNC, ...)");
    }
    for (uint32_t i = 0; i < count; ++i) dst.Data()[i] = detail::CastOne<D, S>(src.Data()[i], mode);
}

/* ---- Compare / Select: one mask bit per element, LSB first ---- */
namespace detail {
template <typename T>
inline void RequireCompareAlign(const char *api, uint32_t count) {
    if ((uint64_t(count) * sizeof(T)) % 256 != 0) {
        mdsl_emu::Fail(api, std::to_string(count) + " elements is not a multiple of 256 bytes, "
                                                     "which Compare needs");
    }
}
template <typename X>
inline bool Cmp(X a, X b, CMPMODE m) {
    switch (m) {
        case CMPMODE::LT: return a < b;
        case CMPMODE::GT: return a > b;
        case CMPMODE::EQ: return a == b;
        case CMPMODE::LE: return a <= b;
        case CMPMODE::GE: return a >= b;
        case CMPMODE::NE: return a != b;
    }
    return false;
}
inline void SetBit(uint8_t *mask, uint32_t i, bool v) {
    if (v) mask[i / 8] |= uint8_t(1u << (i % 8));
    else mask[i / 8] &= uint8_t(~(1u << (i % 8)));
}
inline bool GetBit(const uint8_t *mask, uint32_t i) { return (mask[i / 8] >> (i % 8)) & 1u; }
}  // namespace detail

template <typename T, typename U>
inline void Compare(const LocalTensor<U> &dst, const LocalTensor<T> &src0, const LocalTensor<T> &src1, CMPMODE mode,
                    uint32_t count) {
    const char *api = "Compare";
    detail::RequireCompareAlign<T>(api, count);
    detail::Operand(api, src0, count, Access::VectorRead);
    detail::Operand(api, src1, count, Access::VectorRead);
    detail::Operand(api, dst, (uint64_t(count) + 8 * sizeof(U) - 1) / (8 * sizeof(U)), Access::VectorWrite);
    auto *mask = reinterpret_cast<uint8_t *>(dst.Data());
    for (uint32_t i = 0; i < count; ++i)
        detail::SetBit(mask, i, detail::Cmp(detail::Load(src0.Data()[i]), detail::Load(src1.Data()[i]), mode));
}

template <typename T, typename U>
inline void CompareScalar(const LocalTensor<U> &dst, const LocalTensor<T> &src0, const T src1Scalar, CMPMODE mode,
                          uint32_t count) {
    const char *api = "CompareScalar";
    detail::RequireCompareAlign<T>(api, count);
    detail::Operand(api, src0, count, Access::VectorRead);
    detail::Operand(api, dst, (uint64_t(count) + 8 * sizeof(U) - 1) / (8 * sizeof(U)), Access::VectorWrite);
    auto *mask = reinterpret_cast<uint8_t *>(dst.Data());
    const auto y = detail::Load(src1Scalar);
    for (uint32_t i = 0; i < count; ++i) detail::SetBit(mask, i, detail::Cmp(detail::Load(src0.Data()[i]), y, mode));
}

template <typename T, typename U>
inline void Select(const LocalTensor<T> &dst, const LocalTensor<U> &selMask, const LocalTensor<T> &src0,
                   const LocalTensor<T> &src1, SELMODE mode, uint32_t count) {
    const char *api = "Select";
    mdsl_emu::Require(mode == SELMODE::VSEL_TENSOR_TENSOR_MODE, api,
                      "two tensor sources need SELMODE::VSEL_TENSOR_TENSOR_MODE");
    detail::Operand(api, selMask, (uint64_t(count) + 8 * sizeof(U) - 1) / (8 * sizeof(U)), Access::VectorRead);
    detail::Operand(api, src0, count, Access::VectorRead);
    detail::Operand(api, src1, count, Access::VectorRead);
    detail::Operand(api, dst, count, Access::VectorWrite);
    const auto *mask = reinterpret_cast<const uint8_t *>(selMask.Data());
    for (uint32_t i = 0; i < count; ++i) dst.Data()[i] = detail::GetBit(mask, i) ? src0.Data()[i] : src1.Data()[i];
}

template <typename T, typename U>
inline void Select(const LocalTensor<T> &dst, const LocalTensor<U> &selMask, const LocalTensor<T> &src0,
                   T src1Scalar, SELMODE mode, uint32_t count) {
    const char *api = "Select";
    mdsl_emu::Require(mode == SELMODE::VSEL_TENSOR_SCALAR_MODE, api,
                      "a scalar second source needs SELMODE::VSEL_TENSOR_SCALAR_MODE");
    detail::Operand(api, selMask, (uint64_t(count) + 8 * sizeof(U) - 1) / (8 * sizeof(U)), Access::VectorRead);
    detail::Operand(api, src0, count, Access::VectorRead);
    detail::Operand(api, dst, count, Access::VectorWrite);
    const auto *mask = reinterpret_cast<const uint8_t *>(selMask.Data());
    for (uint32_t i = 0; i < count; ++i) dst.Data()[i] = detail::GetBit(mask, i) ? src0.Data()[i] : src1Scalar;
}

/* ---- reductions of `count` elements into dst[0]; work holds per 256-byte repeat one
 * partial (ReduceSum) or a (value, index) pair (ReduceMax/Min), rounded up to whole 32-byte
 * blocks ---- */
namespace detail {
template <typename T>
inline uint32_t ReduceWorkElems(uint32_t count, uint32_t perPartial) {
    const uint32_t perRepeat = 256 / sizeof(T), perBlock = 32 / sizeof(T);
    const uint32_t repeats = (count + perRepeat - 1) / perRepeat;
    return (repeats * perPartial + perBlock - 1) / perBlock * perBlock;
}

template <typename T, typename F>
inline void Reduce(const char *api, const LocalTensor<T> &dst, const LocalTensor<T> &src, const LocalTensor<T> &work,
                   int32_t count, uint32_t perPartial, F combine) {
    Count(api, count);
    mdsl_emu::Require(count > 0, api, "reduces zero elements");
    Operand(api, src, count, Access::VectorRead);
    Operand(api, dst, 1, Access::VectorWrite);
    const uint32_t need = ReduceWorkElems<T>(count, perPartial);
    if (work.GetSize() < need) {
        mdsl_emu::Fail(api, "the work tensor has " + std::to_string(work.GetSize()) + " elements; " +
                                std::to_string(count) + " inputs need " + std::to_string(need));
    }
    Operand(api, work, need, Access::VectorWrite);
    const uint32_t perRepeat = 256 / sizeof(T);
    float total = 0.0f;
    bool first = true;
    for (int32_t start = 0; start < count; start += perRepeat) {  // per-repeat partials, then combined
        const int32_t end = start + int32_t(perRepeat) < count ? start + int32_t(perRepeat) : count;
        float part = static_cast<float>(src.Data()[start]);
        for (int32_t i = start + 1; i < end; ++i) part = combine(part, static_cast<float>(src.Data()[i]));
        work.Data()[start / perRepeat * perPartial] = static_cast<T>(part);
        total = first ? part : combine(total, part);
        first = false;
    }
    dst.Data()[0] = static_cast<T>(total);
}
}  // namespace detail

template <typename T>
inline void ReduceSum(const LocalTensor<T> &dst, const LocalTensor<T> &src, const LocalTensor<T> &work, const int32_t count) {
    detail::Reduce("ReduceSum", dst, src, work, count, 1, [](float a, float b) { return a + b; });
}
template <typename T>
inline void ReduceMax(const LocalTensor<T> &dst, const LocalTensor<T> &src, const LocalTensor<T> &work, const int32_t count,
                      bool calIndex = false) {
    mdsl_emu::Require(!calIndex, "ReduceMax", "calIndex is not emulated");
    detail::Reduce("ReduceMax", dst, src, work, count, 2, [](float a, float b) { return detail::MaxOf(a, b); });
}
template <typename T>
inline void ReduceMin(const LocalTensor<T> &dst, const LocalTensor<T> &src, const LocalTensor<T> &work, const int32_t count,
                      bool calIndex = false) {
    mdsl_emu::Require(!calIndex, "ReduceMin", "calIndex is not emulated");
    detail::Reduce("ReduceMin", dst, src, work, count, 2, [](float a, float b) { return detail::MinOf(a, b); });
}

}  // namespace AscendC
