"""The emulation fails loudly on misuse of the AscendC API, the way the device would
misbehave: hand-written kernels, each with one mistake, compiled in one library."""

from __future__ import annotations

import functools

import cffi
import numpy as np
import pytest

import mdsl
from mdsl.targets.ascendc.emulate import build_emulated
from tests.codegen.ascendc.conftest import needs_cxx

pytestmark = needs_cxx

SOURCE = r"""
#include "tikicpulib.h"
#include <string>
using namespace AscendC;

static std::string g_error;
extern "C" const char *last_error(void) { return g_error.c_str(); }
extern "C" void register_gm(void *p, uint64_t bytes) { mdsl_emu::ClearGm(); mdsl_emu::RegisterGm(p, bytes, "x"); }
extern "C" void set_ub(uint32_t bytes) { mdsl_emu::config().ubBytes = bytes; }
extern "C" void set_features(uint32_t bits) { mdsl_emu::config().features = bits; }

/* a correct kernel: y = x + x over 64 floats per block, in two tiles of 32 */
extern "C" __global__ __aicore__ void ok_double(GM_ADDR x) {
    TPipe pipe;
    TQue<QuePosition::VECIN, 2> in;
    TQue<QuePosition::VECOUT, 2> out;
    pipe.InitBuffer(in, 2, 32 * sizeof(float));
    pipe.InitBuffer(out, 2, 32 * sizeof(float));
    GlobalTensor<float> gm;
    gm.SetGlobalBuffer((__gm__ float *)x + GetBlockIdx() * 64, 64);
    for (int t = 0; t < 2; ++t) {
        LocalTensor<float> a = in.AllocTensor<float>();
        DataCopy(a, gm[t * 32], 32);
        in.EnQue(a);
        a = in.DeQue<float>();
        LocalTensor<float> b = out.AllocTensor<float>();
        Add(b, a, a, 32);
        out.EnQue(b);
        in.FreeTensor(a);
        b = out.DeQue<float>();
        DataCopy(gm[t * 32], b, 32);
        out.FreeTensor(b);
    }
}

#define KERNEL(name) extern "C" __global__ __aicore__ void name(GM_ADDR x)
#define SETUP                                         \
    TPipe pipe;                                       \
    TQue<QuePosition::VECIN, 2> in;                   \
    pipe.InitBuffer(in, 2, 64 * sizeof(float));       \
    GlobalTensor<float> gm;                           \
    gm.SetGlobalBuffer((__gm__ float *)x, 64);

KERNEL(deque_empty) { SETUP LocalTensor<float> a = in.DeQue<float>(); (void)a; }
KERNEL(unaligned_copy) { SETUP LocalTensor<float> a = in.AllocTensor<float>(); DataCopy(a, gm, 10); in.EnQue(a); in.FreeTensor(in.DeQue<float>()); }
KERNEL(ub_overflow) { TPipe pipe; TQue<QuePosition::VECIN, 2> in; pipe.InitBuffer(in, 2, 100 * 1024); (void)x; }
KERNEL(compute_before_deque) { SETUP LocalTensor<float> a = in.AllocTensor<float>(); DataCopy(a, gm, 64); Exp(a, a, 64); }
KERNEL(use_after_free) {
    SETUP LocalTensor<float> a = in.AllocTensor<float>(); DataCopy(a, gm, 64); in.EnQue(a);
    a = in.DeQue<float>(); in.FreeTensor(a); Exp(a, a, 64);
}
KERNEL(missing_free) { SETUP LocalTensor<float> a = in.AllocTensor<float>(); DataCopy(a, gm, 64); in.EnQue(a); (void)in.DeQue<float>(); }
KERNEL(queue_full) {
    TPipe pipe; TQue<QuePosition::VECIN, 1> in; pipe.InitBuffer(in, 2, 256);
    in.EnQue(in.AllocTensor<float>()); in.EnQue(in.AllocTensor<float>()); (void)x;
}
KERNEL(out_of_bounds) {
    TPipe pipe; TQue<QuePosition::VECIN, 2> in; pipe.InitBuffer(in, 2, 64 * sizeof(float));
    GlobalTensor<float> gm; gm.SetGlobalBuffer((__gm__ float *)x);  /* no size: only the GM registry checks */
    LocalTensor<float> a = in.AllocTensor<float>(); DataCopy(a, gm[100], 64);
}
KERNEL(compare_partial_repeat) {
    TPipe pipe; TBuf<TPosition::VECCALC> buf; pipe.InitBuffer(buf, 1024);
    LocalTensor<float> a = buf.Get<float>(); LocalTensor<uint8_t> m = buf.Get<uint8_t>()[512];
    Duplicate(a, 1.0f, 64); Compare(m, a, a, CMPMODE::LT, 40); (void)x;
}
KERNEL(reduce_small_work) {
    TPipe pipe; TBuf<TPosition::VECCALC> buf; pipe.InitBuffer(buf, 4096);
    LocalTensor<float> a = buf.Get<float>(); Duplicate(a, 1.0f, 512);
    ReduceSum(a[768], a, a[512], 512);  /* 8 partials need 8 floats: fine */
    ReduceSum(a[768], a, a[1016], 512); /* 8 floats of room from 1016: fine too */
    ReduceSum(a[768], a, a[1020], 600); /* 10 partials -> 16 floats, only 4 left */
    (void)x;
}
KERNEL(reduce_max_pairs) {
    TPipe pipe; TBuf<TPosition::VECCALC> buf; pipe.InitBuffer(buf, 4096);
    LocalTensor<float> a = buf.Get<float>(); Duplicate(a, 1.0f, 512);
    ReduceSum(a[768], a, a[1016], 300); /* 5 partials -> 8 floats: fits */
    ReduceMax(a[768], a, a[1016], 300); /* 5 (value, index) pairs -> 16 floats, only 8 left */
    (void)x;
}
/* every block stores its index into element GetBlockIdx(): one 64-byte line for all */
KERNEL(shared_cache_line) {
    GlobalTensor<float> gm; gm.SetGlobalBuffer((__gm__ float *)x, 64);
    gm.SetValue(GetBlockIdx(), static_cast<float>(GetBlockIdx()));
    DataCacheCleanAndInvalid<float, CacheLine::ENTIRE_DATA_CACHE>(gm);
}
/* each block in its own line (16 floats apart), and written back */
KERNEL(own_cache_lines) {
    GlobalTensor<float> gm; gm.SetGlobalBuffer((__gm__ float *)x, 64);
    gm.SetValue(GetBlockIdx() * 16, -1.0f);
    DataCacheCleanAndInvalid<float, CacheLine::ENTIRE_DATA_CACHE>(gm);
}
KERNEL(no_write_back) {
    GlobalTensor<float> gm; gm.SetGlobalBuffer((__gm__ float *)x, 64);
    gm.SetValue(GetBlockIdx() * 16, -1.0f);
}
/* MIX mode: each vector core writes its sub-block index over its 16 floats */
KERNEL(mix_indices) {
    TPipe pipe; TBuf<TPosition::VECCALC> buf; pipe.InitBuffer(buf, 64);
    LocalTensor<float> a = buf.Get<float>(); Duplicate(a, static_cast<float>(GetSubBlockIdx()), 16);
    GlobalTensor<float> gm; gm.SetGlobalBuffer((__gm__ float *)x + GetBlockIdx() * 16, 16);
    DataCopy(gm, a, 16);
}
/* MIX mode: a buffer reaching into the Matmul client's message area at the end of the UB */
KERNEL(kfc_overlap) { TPipe pipe; TBuf<TPosition::VECCALC> buf; pipe.InitBuffer(buf, 192 * 1024 - 64); (void)x; }
KERNEL(pad_copy) {
    SETUP LocalTensor<float> a = in.AllocTensor<float>();
    DataCopyExtParams params{1, 40, 0, 0, 0}; DataCopyPadExtParams<float> pad{false, 0, 0, 0.0f};
    DataCopyPad(a, gm, params, pad); in.EnQue(a); in.FreeTensor(in.DeQue<float>());
}
KERNEL(misaligned_operand) {
    TPipe pipe; TBuf<TPosition::VECCALC> buf; pipe.InitBuffer(buf, 1024);
    LocalTensor<float> a = buf.Get<float>(); Adds(a[3], a, 1.0f, 16); (void)x;
}

#define CASE(name) if (which == #name) { ICPU_RUN_KF(name, blocks, (GM_ADDR)x); return 0; }
#define CASE_MIX(name)                                                       \
    if (which == #name) {                                                    \
        SetKernelMode(KernelMode::MIX_MODE);                                 \
        try { ICPU_RUN_KF(name, blocks, (GM_ADDR)x); } catch (...) {         \
            SetKernelMode(KernelMode::AIV_MODE); throw; }                    \
        SetKernelMode(KernelMode::AIV_MODE);                                 \
        return 0;                                                            \
    }
extern "C" int run_case(const char *which_c, void *x, uint32_t blocks) {
    const std::string which = which_c;
    g_error.clear();
    try {
        CASE(ok_double) CASE(deque_empty) CASE(unaligned_copy) CASE(ub_overflow)
        CASE(compute_before_deque) CASE(use_after_free) CASE(missing_free) CASE(queue_full)
        CASE(out_of_bounds) CASE(compare_partial_repeat) CASE(reduce_small_work)
        CASE(misaligned_operand) CASE(reduce_max_pairs) CASE(shared_cache_line) CASE(own_cache_lines)
        CASE(no_write_back) CASE_MIX(mix_indices) CASE_MIX(kfc_overlap) CASE(pad_copy)
        g_error = "unknown case";
    } catch (const mdsl_emu::Error &e) {
        g_error = e.what();
    }
    return 1;
}
"""

_FFI = cffi.FFI()
_FFI.cdef(
    """
    const char *last_error(void);
    void register_gm(void *p, uint64_t bytes);
    void set_ub(uint32_t bytes);
    void set_features(uint32_t bits);
    int run_case(const char *which, void *x, uint32_t blocks);
    """
)


A2_FEATURES = 1 | 2 | 8  # DataCopyPad, DataCacheCleanAndInvalid, split cores


@functools.lru_cache(maxsize=1)
def library():
    return _FFI.dlopen(str(build_emulated(SOURCE, "ascendc_misuse")))


def run(case: str, blocks: int = 1, elements: int = 64) -> tuple[int, str, np.ndarray]:
    lib = library()
    x = np.arange(elements * blocks, dtype=np.float32)
    lib.set_ub(192 * 1024)
    lib.set_features(A2_FEATURES)  # the emulation's state is shared by every library loaded
    lib.register_gm(_FFI.cast("void *", x.ctypes.data), x.nbytes)
    status = lib.run_case(case.encode(), _FFI.cast("void *", x.ctypes.data), blocks)
    return status, _FFI.string(lib.last_error()).decode(), x


def test_a_correct_kernel_runs_every_block():
    status, error, x = run("ok_double", blocks=3)
    assert (status, error) == (0, "")
    np.testing.assert_array_equal(x, 2 * np.arange(192, dtype=np.float32))


@pytest.mark.parametrize(
    "case, api, message",
    [
        ("deque_empty", "TQue::DeQue", "queue is empty"),
        ("unaligned_copy", "DataCopy(GM->UB)", "40 bytes is not a multiple of 32 bytes"),
        ("ub_overflow", "TPipe::InitBuffer", "Unified Buffer overflow"),
        (
            "compute_before_deque",
            "Exp",
            "allocated (not yet enqueued) but this use needs it dequeued",
        ),
        ("use_after_free", "Exp", "after FreeTensor"),
        ("missing_free", "end of kernel", "still dequeued when the kernel ends"),
        ("queue_full", "TQue::EnQue", "queue of depth 1 is full"),
        ("out_of_bounds", "DataCopy(GM->UB)", "runs past the end of buffer x"),
        ("compare_partial_repeat", "Compare", "not a multiple of 256 bytes"),
        ("reduce_small_work", "ReduceSum", "600 inputs need 16"),
        ("misaligned_operand", "Adds", "not 32-byte aligned"),
        ("reduce_max_pairs", "ReduceMax", "300 inputs need 16"),
        ("kfc_overlap", "TPipe::InitBuffer", "reach into the Matmul message area"),
        ("no_write_back", "end of kernel", "DataCacheCleanAndInvalid before the kernel ends"),
    ],
)
def test_misuse_fails_loudly(case, api, message):
    status, error, _ = run(case, blocks=2)
    assert status == 1
    assert error.startswith(f"AscendC emulation: kernel {case}, block 0/2: {api}: "), error
    assert message in error


def test_the_unified_buffer_size_is_the_configured_one():
    lib = library()
    x = np.zeros(64, np.float32)
    lib.register_gm(_FFI.cast("void *", x.ctypes.data), x.nbytes)
    lib.set_ub(1024)  # ok_double needs 4 x 128 bytes = 512: fits
    assert lib.run_case(b"ok_double", _FFI.cast("void *", x.ctypes.data), 1) == 0
    lib.set_ub(384)
    assert lib.run_case(b"ok_double", _FFI.cast("void *", x.ctypes.data), 1) == 1
    assert "over the 384-byte UB" in _FFI.string(lib.last_error()).decode()
    lib.set_ub(192 * 1024)


def test_two_cores_never_store_into_one_cache_line():
    status, error, _ = run("shared_cache_line", blocks=2)
    assert status == 1
    assert error.startswith(
        "AscendC emulation: kernel shared_cache_line, block 1/2: GlobalTensor::SetValue: "
    )
    assert "block 0 and this block both store into the 64-byte cache line" in error
    status, error, x = run("own_cache_lines", blocks=2)
    assert (status, error) == (0, "")
    assert x[0] == x[16] == -1.0


def test_mix_mode_runs_two_vector_cores_per_block():
    """GetBlockIdx() covers [0, 2 * blockDim) on the vector cores, GetSubBlockIdx() is 0, 1."""
    status, error, x = run("mix_indices", blocks=2)
    assert (status, error) == (0, "")
    np.testing.assert_array_equal(x[:64], np.repeat([0.0, 1.0, 0.0, 1.0], 16).astype(np.float32))
    np.testing.assert_array_equal(x[64:], np.arange(64, 128, dtype=np.float32))  # untouched


def test_the_soc_api_table_refuses_what_the_soc_lacks():
    lib = library()
    status, error, _ = run("pad_copy")
    assert (status, error) == (0, "")
    x = np.zeros(64, np.float32)
    lib.register_gm(_FFI.cast("void *", x.ctypes.data), x.nbytes)
    lib.set_features(2 | 4)  # the 310P: no DataCopyPad
    try:
        status = lib.run_case(b"pad_copy", _FFI.cast("void *", x.ctypes.data), 1)
        error = _FFI.string(lib.last_error()).decode()
    finally:
        lib.set_features(A2_FEATURES)
    assert status == 1
    assert "DataCopyPad(GM->UB): this SoC does not have this API" in error


PRIVATE_FIELD = r"""
#include "register/tilingdata_base.h"
namespace optiling {
BEGIN_TILING_DATA_DEF(Probe)
TILING_DATA_FIELD_DEF(uint32_t, tileLength);
END_TILING_DATA_DEF;
}
extern "C" unsigned probe(void) { optiling::Probe p; p.set_tileLength(8); return p.tileLength; }
"""


def test_tiling_fields_are_private_as_in_cann():
    """Host code reads fields with get_<field>(): a direct read does not compile."""
    with pytest.raises(mdsl.CompileError, match=r"private|tileLength"):
        build_emulated(PRIVATE_FIELD, "ascendc_private_field")
    build_emulated(PRIVATE_FIELD.replace("p.tileLength;", "p.get_tileLength();"), "ascendc_getter")
