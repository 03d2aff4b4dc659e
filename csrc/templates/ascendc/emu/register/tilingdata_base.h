/* mdsl AscendC emulation: tiling-data definition macros.
 *
 * BEGIN_TILING_DATA_DEF(Name) ... END_TILING_DATA_DEF defines a class whose fields keep
 * declaration order (the byte layout kernels read). As in CANN, the fields are private:
 * host code uses set_<field>/get_<field>; struct fields (TILING_DATA_FIELD_DEF_STRUCT) are
 * public members; GetDataSize and SaveToBuffer give the bytes the kernel receives. */
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernel_tiling/kernel_tiling.h"
#include "mdsl_emu/core.h"

#define BEGIN_TILING_DATA_DEF(class_name) \
    class class_name {                    \
        using SelfType = class_name;

#define TILING_DATA_FIELD_DEF(data_type, field_name)                    \
public:                                                                 \
    void set_##field_name(data_type v) { field_name##_ = v; }           \
    data_type get_##field_name() const { return field_name##_; }        \
                                                                        \
private:                                                                \
    data_type field_name##_ = 0;

#define TILING_DATA_FIELD_DEF_ARR(data_type, arr_size, field_name)      \
public:                                                                 \
    void set_##field_name(const data_type *v) { std::memcpy(field_name##_, v, sizeof(field_name##_)); } \
    const data_type *get_##field_name() const { return field_name##_; } \
                                                                        \
private:                                                                \
    data_type field_name##_[arr_size] = {};

#define TILING_DATA_FIELD_DEF_STRUCT(struct_type, field_name) \
public:                                                       \
    struct_type field_name{};

#define END_TILING_DATA_DEF                                                               \
public:                                                                                   \
    size_t GetDataSize() const { return sizeof(SelfType); }                               \
    void SaveToBuffer(void *buffer, size_t capacity) const {                              \
        mdsl_emu::Require(capacity >= sizeof(SelfType), "SaveToBuffer", "buffer too small"); \
        std::memcpy(buffer, this, sizeof(SelfType));                                      \
    }                                                                                     \
    }

#define REGISTER_TILING_DATA_CLASS(op_type, class_name) \
    static_assert(sizeof(class_name) > 0, "tiling data class " #class_name);
