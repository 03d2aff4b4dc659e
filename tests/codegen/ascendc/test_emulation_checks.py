"""The emulation fails loudly on misuse of the AscendC API, the way the device would
misbehave: hand-written kernels, each with one mistake, compiled in one library."""

from __future__ import annotations

import functools

import cffi
import numpy as np
import pytest

from mdsl.codegen.ascendc.emulate import build_emulated
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
KERNEL(misaligned_operand) {
    TPipe pipe; TBuf<TPosition::VECCALC> buf; pipe.InitBuffer(buf, 1024);
    LocalTensor<float> a = buf.Get<float>(); Adds(a[3], a, 1.0f, 16); (void)x;
}

#define CASE(name) if (which == #name) { ICPU_RUN_KF(name, blocks, (GM_ADDR)x); return 0; }
extern "C" int run_case(const char *which_c, void *x, uint32_t blocks) {
    const std::string which = which_c;
    g_error.clear();
    try {
        CASE(ok_double) CASE(deque_empty) CASE(unaligned_copy) CASE(ub_overflow)
        CASE(compute_before_deque) CASE(use_after_free) CASE(missing_free) CASE(queue_full)
        CASE(out_of_bounds) CASE(compare_partial_repeat) CASE(reduce_small_work)
        CASE(misaligned_operand)
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
    int run_case(const char *which, void *x, uint32_t blocks);
    """
)


@functools.lru_cache(maxsize=1)
def library():
    return _FFI.dlopen(str(build_emulated(SOURCE, "ascendc_misuse")))


def run(case: str, blocks: int = 1, elements: int = 64) -> tuple[int, str, np.ndarray]:
    lib = library()
    x = np.arange(elements * blocks, dtype=np.float32)
    lib.set_ub(192 * 1024)
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
