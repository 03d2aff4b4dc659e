/* mdsl AscendC emulation: TPipe, TQue, TBuf, LocalTensor, GlobalTensor. */
#pragma once

#include "mdsl_emu/core.h"

struct bfloat16_t {
    uint16_t bits = 0;
    bfloat16_t() = default;
    bfloat16_t(float f) {  // round to nearest even, NaN kept
        uint32_t u;
        std::memcpy(&u, &f, 4);
        if ((u & 0x7fffffffu) > 0x7f800000u) {
            bits = static_cast<uint16_t>((u >> 16) | 0x40u);
        } else {
            bits = static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
        }
    }
    operator float() const {
        uint32_t u = static_cast<uint32_t>(bits) << 16;
        float f;
        std::memcpy(&f, &u, 4);
        return f;
    }
};

namespace AscendC {

enum class TPosition : uint8_t { GM, A1, A2, B1, B2, C1, C2, CO1, CO2, VECIN, VECOUT, VECCALC, LCM };
using QuePosition = TPosition;

/* State of one queue buffer; the rules below are what the hardware's pipe synchronization
 * needs: a VECIN buffer is written by DataCopy while ALLOCATED and read by vector
 * instructions only after EnQue/DeQue; a VECOUT buffer is written by vector instructions
 * while ALLOCATED and read by DataCopy only after EnQue/DeQue. */
enum class SlotState : uint8_t { FREE, ALLOCATED, ENQUEUED, DEQUEUED };

inline const char *StateName(SlotState s) {
    switch (s) {
        case SlotState::FREE: return "free";
        case SlotState::ALLOCATED: return "allocated (not yet enqueued)";
        case SlotState::ENQUEUED: return "enqueued (not yet dequeued)";
        case SlotState::DEQUEUED: return "dequeued";
    }
    return "?";
}

struct Slot {
    uint8_t *addr = nullptr;
    uint32_t bytes = 0;
    SlotState state = SlotState::FREE;
    uint32_t generation = 0;
    TPosition position = TPosition::VECCALC;
    const char *owner = "TBuf";
    bool queued = false;  // false: a TBuf, always usable
};

enum class Access : uint8_t { VectorRead, VectorWrite, CopyToUb, CopyFromUb, Scalar };

template <typename T>
class LocalTensor {
public:
    LocalTensor() = default;
    LocalTensor(T *addr, uint32_t size, Slot *slot)
        : addr_(addr), size_(size), slot_(slot), generation_(slot ? slot->generation : 0) {}

    LocalTensor operator[](uint32_t offset) const {
        mdsl_emu::Require(offset <= size_, "LocalTensor::operator[]",
                          "offset " + std::to_string(offset) + " beyond the tensor's " +
                              std::to_string(size_) + " elements");
        LocalTensor t(addr_ + offset, size_ - offset, slot_);
        t.generation_ = generation_;
        return t;
    }
    T GetValue(uint32_t i) const {
        Check("LocalTensor::GetValue", i + 1, Access::Scalar);
        return addr_[i];
    }
    void SetValue(uint32_t i, T v) const {
        Check("LocalTensor::SetValue", i + 1, Access::Scalar);
        addr_[i] = v;
    }
    T &operator()(uint32_t i) const {
        Check("LocalTensor::operator()", i + 1, Access::Scalar);
        return addr_[i];
    }
    uint32_t GetSize() const { return size_; }
    uint64_t GetPhyAddr() const { return mdsl_emu::UbOffset(addr_); }
    template <typename U>
    LocalTensor<U> ReinterpretCast() const {
        LocalTensor<U> t(reinterpret_cast<U *>(addr_),
                         static_cast<uint32_t>(uint64_t(size_) * sizeof(T) / sizeof(U)), slot_);
        t.SetGeneration(generation_);
        return t;
    }

    /* emulation internals */
    T *Data() const { return addr_; }
    Slot *GetSlot() const { return slot_; }
    void SetGeneration(uint32_t g) { generation_ = g; }
    uint32_t Generation() const { return generation_; }

    /* `count` elements from the start are about to be used in the way `how`. */
    void Check(const char *api, uint64_t count, Access how) const {
        using mdsl_emu::Fail;
        if (addr_ == nullptr) Fail(api, "uses a LocalTensor that was never allocated");
        if (count > size_) {
            Fail(api, "touches " + std::to_string(count) + " elements of a LocalTensor of " +
                          std::to_string(size_) + " elements (" + (slot_ ? slot_->owner : "?") +
                          ")");
        }
        if (slot_ == nullptr || !slot_->queued) return;
        if (slot_->state == SlotState::FREE || slot_->generation != generation_) {
            Fail(api, std::string("uses a tensor of ") + slot_->owner + " after FreeTensor");
        }
        const bool in = slot_->position == TPosition::VECIN;
        SlotState need = SlotState::DEQUEUED;
        switch (how) {
            case Access::CopyToUb: need = SlotState::ALLOCATED; break;
            case Access::CopyFromUb: need = SlotState::DEQUEUED; break;
            case Access::VectorRead:
            case Access::VectorWrite: need = in ? SlotState::DEQUEUED : SlotState::ALLOCATED; break;
            case Access::Scalar:
                if (slot_->state == SlotState::ENQUEUED) {
                    Fail(api, std::string("scalar access to a tensor of ") + slot_->owner +
                                  " while it is enqueued");
                }
                return;
        }
        if (slot_->state != need) {
            Fail(api, std::string("a tensor of ") + slot_->owner + " is " +
                          StateName(slot_->state) + " but this use needs it " + StateName(need) +
                          (in ? " (VECIN: DataCopy in, EnQue, DeQue, then compute)"
                              : " (VECOUT: compute, EnQue, DeQue, then DataCopy out)"));
        }
    }

private:
    T *addr_ = nullptr;
    uint32_t size_ = 0;
    Slot *slot_ = nullptr;
    uint32_t generation_ = 0;
};

template <typename T>
class GlobalTensor {
public:
    void SetGlobalBuffer(__gm__ T *buffer, uint64_t size) {
        addr_ = buffer;
        size_ = size;
        sized_ = true;
    }
    void SetGlobalBuffer(__gm__ T *buffer) {
        addr_ = buffer;
        sized_ = false;
    }
    GlobalTensor operator[](uint64_t offset) const {
        GlobalTensor t = *this;
        if (sized_) {
            mdsl_emu::Require(offset <= size_, "GlobalTensor::operator[]",
                              "offset " + std::to_string(offset) + " beyond the buffer's " +
                                  std::to_string(size_) + " elements");
            t.size_ = size_ - offset;
        }
        t.addr_ = addr_ + offset;
        return t;
    }
    T GetValue(uint64_t i) const {
        Check("GlobalTensor::GetValue", i, 1);
        return addr_[i];
    }
    void SetValue(uint64_t i, T v) {  // not const, as in CANN: a store through the data cache
        Check("GlobalTensor::SetValue", i, 1);
        mdsl_emu::CacheStore("GlobalTensor::SetValue", addr_ + i);
        addr_[i] = v;
    }
    uint64_t GetSize() const { return size_; }
    __gm__ T *GetPhyAddr() const { return addr_; }

    /* emulation internals */
    T *Data() const { return addr_; }
    void Check(const char *api, uint64_t first, uint64_t count) const {
        if (addr_ == nullptr) mdsl_emu::Fail(api, "GlobalTensor used before SetGlobalBuffer");
        if (sized_ && first + count > size_) {
            mdsl_emu::Fail(api, "elements [" + std::to_string(first) + ", " +
                                    std::to_string(first + count) + ") of a GlobalTensor of " +
                                    std::to_string(size_) + " elements");
        }
        mdsl_emu::CheckGm(api, addr_ + first, count * sizeof(T));
    }

private:
    T *addr_ = nullptr;
    uint64_t size_ = 0;
    bool sized_ = false;
};

class TPipe;

/* Common part of TQue and TBuf: buffers handed out by TPipe::InitBuffer. */
class TQueBindBase {
public:
    std::vector<Slot> slots;
    bool initialized = false;

    TQueBindBase() = default;
    TQueBindBase(const TQueBindBase &) = delete;
    TQueBindBase &operator=(const TQueBindBase &) = delete;
    ~TQueBindBase() {  // a queue tensor never freed is a bug on the device too
        auto &b = mdsl_emu::block();
        if (!b.active) return;
        for (auto &s : slots) {
            if (s.queued && s.state != SlotState::FREE) {
                b.leaks.push_back(std::string("a tensor of ") + s.owner + " is still " + StateName(s.state) +
                                  " when the kernel ends (missing FreeTensor)");
            }
        }
    }
};

template <TPosition POS, int32_t DEPTH>
class TQue : public TQueBindBase {
public:
    template <typename T>
    LocalTensor<T> AllocTensor() {
        RequireInit("TQue::AllocTensor");
        for (auto &s : slots) {
            if (s.state == SlotState::FREE) {
                s.state = SlotState::ALLOCATED;
                ++s.generation;
                return LocalTensor<T>(reinterpret_cast<T *>(s.addr),
                                      static_cast<uint32_t>(s.bytes / sizeof(T)), &s);
            }
        }
        mdsl_emu::Fail("TQue::AllocTensor",
                       "all " + std::to_string(slots.size()) + " buffers of a " +
                           PositionName() + " queue are in use (missing FreeTensor?)");
    }
    template <typename T>
    bool EnQue(const LocalTensor<T> &t) {
        RequireInit("TQue::EnQue");
        Slot *s = Own("TQue::EnQue", t);
        if (s->state != SlotState::ALLOCATED) {
            mdsl_emu::Fail("TQue::EnQue", std::string("the tensor is ") + StateName(s->state) +
                                              "; only a freshly allocated tensor can be enqueued");
        }
        if (static_cast<int32_t>(fifo_.size()) >= DEPTH) {
            mdsl_emu::Fail("TQue::EnQue", "the " + PositionName() + " queue of depth " +
                                              std::to_string(DEPTH) + " is full");
        }
        s->state = SlotState::ENQUEUED;
        fifo_.push_back(s);
        return true;
    }
    template <typename T>
    LocalTensor<T> DeQue() {
        RequireInit("TQue::DeQue");
        if (fifo_.empty()) {
            mdsl_emu::Fail("TQue::DeQue", "the " + PositionName() +
                                              " queue is empty (DeQue without a matching EnQue)");
        }
        Slot *s = fifo_.front();
        fifo_.erase(fifo_.begin());
        s->state = SlotState::DEQUEUED;
        LocalTensor<T> t(reinterpret_cast<T *>(s->addr), static_cast<uint32_t>(s->bytes / sizeof(T)),
                         s);
        return t;
    }
    template <typename T>
    void FreeTensor(const LocalTensor<T> &t) {
        RequireInit("TQue::FreeTensor");
        Slot *s = Own("TQue::FreeTensor", t);
        if (s->state == SlotState::FREE) mdsl_emu::Fail("TQue::FreeTensor", "double FreeTensor");
        if (s->state == SlotState::ENQUEUED) {
            mdsl_emu::Fail("TQue::FreeTensor", "the tensor is still enqueued (DeQue it first)");
        }
        s->state = SlotState::FREE;
    }
    bool VacantInQue() const { return static_cast<int32_t>(fifo_.size()) < DEPTH; }
    bool HasTensorInQue() const { return !fifo_.empty(); }
    int32_t GetTensorCountInQue() const { return static_cast<int32_t>(fifo_.size()); }

private:
    std::vector<Slot *> fifo_;

    std::string PositionName() const { return POS == TPosition::VECIN ? "VECIN" : POS == TPosition::VECOUT ? "VECOUT" : "TQue"; }
    void RequireInit(const char *api) const {
        if (!initialized) mdsl_emu::Fail(api, "queue used before TPipe::InitBuffer");
    }
    template <typename T>
    Slot *Own(const char *api, const LocalTensor<T> &t) {
        for (auto &s : slots) {
            if (&s == t.GetSlot()) {
                if (t.Generation() != s.generation) mdsl_emu::Fail(api, "stale tensor handle");
                if (t.Data() != reinterpret_cast<T *>(s.addr)) {
                    mdsl_emu::Fail(api, "a sub-tensor (operator[]) cannot be enqueued or freed");
                }
                return &s;
            }
        }
        mdsl_emu::Fail(api, "the tensor does not belong to this queue");
    }
};

/* A queue binding two positions (VECIN -> VECOUT): DataCopy in, EnQue, DeQue, DataCopy
 * out, with no vector instruction in between (copies through the UB). */
template <TPosition SRC, TPosition DST, int32_t DEPTH>
class TQueBind : public TQue<SRC, DEPTH> {};

template <TPosition POS>
class TBuf : public TQueBindBase {
public:
    template <typename T>
    LocalTensor<T> Get() {
        if (!initialized) mdsl_emu::Fail("TBuf::Get", "TBuf used before TPipe::InitBuffer");
        Slot &s = slots[0];
        return LocalTensor<T>(reinterpret_cast<T *>(s.addr), static_cast<uint32_t>(s.bytes / sizeof(T)), &s);
    }
    template <typename T>
    LocalTensor<T> Get(uint32_t len) {
        LocalTensor<T> all = Get<T>();
        mdsl_emu::Require(len <= all.GetSize(), "TBuf::Get", "asks for " + std::to_string(len) +
                                                               " elements of a " +
                                                               std::to_string(all.GetSize()) +
                                                               "-element buffer");
        return LocalTensor<T>(all.Data(), len, all.GetSlot());
    }
};

enum class HardEvent : uint8_t { MTE2_V, V_MTE2, MTE3_V, V_MTE3, V_S, S_V, MTE2_S, S_MTE2, MTE3_S, S_MTE3, MTE2_MTE3, MTE3_MTE2 };
using TEventID = int8_t;
using event_t = int8_t;

class TPipe {
public:
    TPipe() {
        auto &b = mdsl_emu::block();
        mdsl_emu::Require(b.active, "TPipe", "constructed outside a kernel launch");
        mdsl_emu::Require(b.pipe == nullptr, "TPipe", "a second TPipe in one kernel");
        b.pipe = this;
    }
    ~TPipe() {
        auto &b = mdsl_emu::block();
        if (b.pipe == this) b.pipe = nullptr;
    }
    TPipe(const TPipe &) = delete;
    TPipe &operator=(const TPipe &) = delete;

    template <TPosition POS, int32_t DEPTH>
    bool InitBuffer(TQue<POS, DEPTH> &que, uint8_t num, uint32_t len) {
        const char *owner = POS == TPosition::VECIN ? "a VECIN queue" : POS == TPosition::VECOUT ? "a VECOUT queue" : "a queue";
        return Bind(que, num, len, POS, owner, true);
    }
    template <TPosition SRC, TPosition DST, int32_t DEPTH>
    bool InitBuffer(TQueBind<SRC, DST, DEPTH> &que, uint8_t num, uint32_t len) {
        return Bind(que, num, len, SRC, "a TQueBind", true);
    }
    template <TPosition POS>
    bool InitBuffer(TBuf<POS> &buf, uint32_t len) {
        return Bind(buf, 1, len, POS, "a TBuf", false);
    }
    void Reset() {}
    void Destroy() {}
    TEventID FetchEventID(HardEvent) { return 0; }
    template <HardEvent E>
    TEventID FetchEventID() { return 0; }
    template <HardEvent E>
    TEventID AllocEventID() { return 0; }
    template <HardEvent E>
    void ReleaseEventID(TEventID) {}

private:
    bool Bind(TQueBindBase &q, uint8_t num, uint32_t len, TPosition pos, const char *owner, bool queued) {
        auto &b = mdsl_emu::block();
        mdsl_emu::Require(!q.initialized, "TPipe::InitBuffer", "the queue/buffer is initialized twice");
        mdsl_emu::Require(num > 0 && len > 0, "TPipe::InitBuffer", "zero buffers or zero length");
        const uint32_t each = (len + mdsl_emu::kUbAlign - 1) / mdsl_emu::kUbAlign * mdsl_emu::kUbAlign;
        const uint64_t need = uint64_t(b.ubUsed) + uint64_t(each) * num;
        // in MIX mode the Matmul client keeps its message area (KfcMsg) at the end of the UB
        const uint64_t kfc = b.subBlocks > 1 ? mdsl_emu::kKfcMsgBytes : 0;
        if (kfc != 0 && need > b.ub.size() - kfc && need <= b.ub.size()) {
            mdsl_emu::Fail("TPipe::InitBuffer",
                           std::to_string(num) + " x " + std::to_string(len) + " bytes for " + owner +
                               " reach into the Matmul message area (the last " + std::to_string(kfc) +
                               " bytes of the UB, TOTAL_UB_SIZE - sizeof(KfcMsg))");
        }
        if (need > b.ub.size()) {
            mdsl_emu::Fail("TPipe::InitBuffer",
                           "Unified Buffer overflow: " + std::to_string(num) + " x " + std::to_string(len) +
                               " bytes for " + owner + " would bring the total to " + std::to_string(need) +
                               " bytes, over the " + std::to_string(b.ub.size()) + "-byte UB");
        }
        for (uint8_t i = 0; i < num; ++i) {
            Slot s;
            s.addr = b.ub.data() + b.ubUsed;
            s.bytes = len;
            s.position = pos;
            s.owner = owner;
            s.queued = queued;
            s.state = queued ? SlotState::FREE : SlotState::ALLOCATED;
            q.slots.push_back(s);
            b.ubUsed += each;
        }
        q.initialized = true;
        return true;
    }
};

inline TPipe *GetTPipePtr() { return static_cast<TPipe *>(mdsl_emu::block().pipe); }

inline int64_t GetBlockIdx() { return mdsl_emu::block().blockIdx; }
inline int64_t GetBlockNum() { return mdsl_emu::block().blockNum; }
inline int64_t GetSubBlockIdx() { return mdsl_emu::block().blockIdx % mdsl_emu::block().subBlocks; }
inline int64_t GetTaskRatio() { return mdsl_emu::block().subBlocks; }

/* ---- the data cache of scalar global-memory stores ---- */
enum class CacheLine : uint8_t { SINGLE_CACHE_LINE, ENTIRE_DATA_CACHE };
enum class DcciDst : uint8_t { CACHELINE_ALL, CACHELINE_UB, CACHELINE_OUT, CACHELINE_ATOMIC };
template <typename T, CacheLine LINE>
inline void DataCacheCleanAndInvalid(const GlobalTensor<T> &dst) {
    mdsl_emu::RequireFeature(mdsl_emu::kDataCacheCleanAndInvalid, "DataCacheCleanAndInvalid");
    (void)dst;
    if (LINE == CacheLine::ENTIRE_DATA_CACHE) mdsl_emu::block().cacheDirty = false;
}
template <typename T, CacheLine LINE, DcciDst DST>
inline void DataCacheCleanAndInvalid(const GlobalTensor<T> &dst) {
    DataCacheCleanAndInvalid<T, LINE>(dst);
}

/* ---- synchronization: ordering is program order on the CPU, so these only check usage ---- */
enum pipe_t : uint8_t { PIPE_S, PIPE_V, PIPE_M, PIPE_MTE1, PIPE_MTE2, PIPE_MTE3, PIPE_ALL };
template <pipe_t P>
inline void PipeBarrier() {}
template <HardEvent E>
inline void SetFlag(int32_t) {}
template <HardEvent E>
inline void WaitFlag(int32_t) {}

/* ---- workspace ---- */
inline void SetSysWorkspace(GM_ADDR workspace) { mdsl_emu::block().sysWorkspace = workspace; }
inline GM_ADDR GetSysWorkSpacePtr() { return mdsl_emu::block().sysWorkspace; }
inline GM_ADDR GetUserWorkspace(GM_ADDR workspace) {
    return workspace == nullptr ? nullptr : workspace + mdsl_emu::config().sysWorkspaceBytes;
}

}  // namespace AscendC
