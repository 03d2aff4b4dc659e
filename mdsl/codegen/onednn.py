"""oneDNN's C API, the part mdsl calls: where the library is, and its declarations.

mdsl uses oneDNN 3.x from the `onednn-cpu-gomp` wheel (CPU only, GNU OpenMP: the same
thread pool as the generated code; no other dependency). That wheel ships the library
without headers, so the few functions, handles and enum values mdsl needs are declared
here (`DECLARATIONS`, valid C and cffi `cdef` text alike). Only enums the 3.x ABI keeps
are used: tensors are described by their strides, weights by `format_tag_any` (the
primitive picks its blocked layout, which a reorder fills once).

When the library is missing (`library_dir()` is None) the C target keeps its own
kernels; nothing else changes.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
from pathlib import Path

SONAME = "libdnnl.so.3"

# enum values of oneDNN 3.x (dnnl_types.h / dnnl_common_types.h)
F32 = 3  # dnnl_f32
CPU = 1  # dnnl_cpu
STREAM_DEFAULT = 1  # dnnl_stream_in_order
FORWARD_INFERENCE = 96  # dnnl_forward_inference
CONVOLUTION_DIRECT = 0x1
ELTWISE_RELU = 0x20
ELTWISE_CLIP = 0x2E  # relu + 14
BINARY_ADD = 0x1FFF0
FORMAT_TAG_ANY = 1
QUERY_SRC_MD, QUERY_WEIGHTS_MD, QUERY_DST_MD = 129, 131, 133
QUERY_IMPL_INFO_STR = 8
ARG_SRC, ARG_SRC_1, ARG_DST, ARG_WEIGHTS, ARG_BIAS = 1, 2, 17, 33, 41
ARG_FROM, ARG_TO = 1, 17
ARG_POST_OP_BASE = 32768  # DNNL_ARG_ATTR_MULTIPLE_POST_OP(i) = BASE * (i + 1), 3.x

DECLARATIONS = """
typedef int dnnl_status_t;
typedef struct dnnl_engine *dnnl_engine_t;
typedef struct dnnl_stream *dnnl_stream_t;
typedef struct dnnl_memory *dnnl_memory_t;
typedef struct dnnl_memory_desc *dnnl_memory_desc_t;
typedef const struct dnnl_memory_desc *const_dnnl_memory_desc_t;
typedef struct dnnl_primitive_desc *dnnl_primitive_desc_t;
typedef struct dnnl_primitive *dnnl_primitive_t;
typedef struct dnnl_primitive_attr *dnnl_primitive_attr_t;
typedef struct dnnl_post_ops *dnnl_post_ops_t;
typedef int64_t dnnl_dims_t[12];
typedef struct { int arg; dnnl_memory_t memory; } dnnl_exec_arg_t;
typedef struct { int major; int minor; int patch; const char *hash;
                 unsigned cpu_runtime; unsigned gpu_runtime; } dnnl_version_t;

const dnnl_version_t *dnnl_version(void);
dnnl_status_t dnnl_engine_create(dnnl_engine_t *engine, int kind, size_t index);
dnnl_status_t dnnl_stream_create(dnnl_stream_t *stream, dnnl_engine_t engine, unsigned flags);
dnnl_status_t dnnl_memory_desc_create_with_strides(dnnl_memory_desc_t *md, int ndims,
    const int64_t *dims, int data_type, const int64_t *strides);
dnnl_status_t dnnl_memory_desc_create_with_tag(dnnl_memory_desc_t *md, int ndims,
    const int64_t *dims, int data_type, int tag);
dnnl_status_t dnnl_memory_desc_destroy(dnnl_memory_desc_t md);
size_t dnnl_memory_desc_get_size(const_dnnl_memory_desc_t md);
int dnnl_memory_desc_equal(const_dnnl_memory_desc_t lhs, const_dnnl_memory_desc_t rhs);
dnnl_status_t dnnl_memory_create(dnnl_memory_t *memory, const_dnnl_memory_desc_t md,
    dnnl_engine_t engine, void *handle);
dnnl_status_t dnnl_memory_set_data_handle(dnnl_memory_t memory, void *handle);
dnnl_status_t dnnl_memory_destroy(dnnl_memory_t memory);
dnnl_status_t dnnl_post_ops_create(dnnl_post_ops_t *post_ops);
dnnl_status_t dnnl_post_ops_append_eltwise(dnnl_post_ops_t post_ops, int alg,
    float alpha, float beta);
dnnl_status_t dnnl_post_ops_append_binary(dnnl_post_ops_t post_ops, int alg,
    const_dnnl_memory_desc_t src1_desc);
dnnl_status_t dnnl_post_ops_append_sum(dnnl_post_ops_t post_ops, float scale,
    int32_t zero_point, int data_type);
dnnl_status_t dnnl_post_ops_destroy(dnnl_post_ops_t post_ops);
dnnl_status_t dnnl_primitive_attr_create(dnnl_primitive_attr_t *attr);
dnnl_status_t dnnl_primitive_attr_set_post_ops(dnnl_primitive_attr_t attr,
    dnnl_post_ops_t post_ops);
dnnl_status_t dnnl_primitive_attr_destroy(dnnl_primitive_attr_t attr);
dnnl_status_t dnnl_convolution_forward_primitive_desc_create(dnnl_primitive_desc_t *pd,
    dnnl_engine_t engine, int prop_kind, int alg_kind, const_dnnl_memory_desc_t src_desc,
    const_dnnl_memory_desc_t weights_desc, const_dnnl_memory_desc_t bias_desc,
    const_dnnl_memory_desc_t dst_desc, const int64_t *strides, const int64_t *dilates,
    const int64_t *padding_l, const int64_t *padding_r, dnnl_primitive_attr_t attr);
dnnl_status_t dnnl_reorder_primitive_desc_create(dnnl_primitive_desc_t *pd,
    const_dnnl_memory_desc_t src_desc, dnnl_engine_t src_engine,
    const_dnnl_memory_desc_t dst_desc, dnnl_engine_t dst_engine, dnnl_primitive_attr_t attr);
const_dnnl_memory_desc_t dnnl_primitive_desc_query_md(dnnl_primitive_desc_t pd, int what,
    int index);
dnnl_status_t dnnl_primitive_desc_query(dnnl_primitive_desc_t pd, int what, int index,
    void *result);
dnnl_status_t dnnl_primitive_desc_destroy(dnnl_primitive_desc_t pd);
dnnl_status_t dnnl_primitive_create(dnnl_primitive_t *primitive, dnnl_primitive_desc_t pd);
dnnl_status_t dnnl_primitive_execute(dnnl_primitive_t primitive, dnnl_stream_t stream,
    int nargs, const dnnl_exec_arg_t *args);
dnnl_status_t dnnl_primitive_destroy(dnnl_primitive_t primitive);
dnnl_status_t dnnl_stream_wait(dnnl_stream_t stream);
"""


def _candidates() -> list[Path]:
    dirs = [Path(sys.prefix) / "lib", Path(sys.base_prefix) / "lib"]
    dirs += [Path(p) for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p]
    return [d / SONAME for d in dirs]


@functools.lru_cache(maxsize=1)
def library_path() -> Path | None:
    """The oneDNN 3.x library mdsl links against, or None when it is not installed (or
    `MDSL_ONEDNN=0` turns it off)."""
    if os.environ.get("MDSL_ONEDNN", "1") == "0":
        return None
    for path in _candidates():
        if path.is_file() and _is_v3(path):
            return path.resolve()
    return None


def _is_v3(path: Path) -> bool:
    try:
        lib = ctypes.CDLL(str(path))
    except OSError:
        return False
    lib.dnnl_version.restype = ctypes.POINTER(ctypes.c_int * 3)
    return lib.dnnl_version().contents[0] == 3
