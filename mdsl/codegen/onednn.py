"""oneDNN's C API, the part mdsl calls: where the library is, and its declarations.

mdsl uses oneDNN 3.x from the `onednn-cpu-gomp` wheel (CPU only, GNU OpenMP: the same
thread pool as the generated code; no other dependency). That wheel ships the library
without headers, so the few functions, handles and enum values mdsl needs are declared
here (`DECLARATIONS`, valid C and cffi `cdef` text alike). Only enums the 3.x ABI keeps
are used: tensors are described by their strides, weights by `format_tag_any` (the
primitive picks its blocked layout, which a reorder fills once).

When the library is missing (`library_path()` is None) the C target keeps its own
kernels; nothing else changes.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

SONAME = "libdnnl.so.3"

# enum values of oneDNN 3.x (dnnl_types.h / dnnl_common_types.h)
F32 = 3  # dnnl_f32
CPU = 1  # dnnl_cpu
STREAM_DEFAULT = 1  # dnnl_stream_in_order
FORWARD_INFERENCE = 96  # dnnl_forward_inference
CONVOLUTION_DIRECT = 0x1
ELTWISE_RELU = 0x20
ELTWISE_CLIP = 0x2E  # relu + 14
ELTWISE_LINEAR = 0x26  # alpha * x + beta
ELTWISE_SWISH = 0x2C  # x * sigmoid(alpha * x)
ELTWISE_LOGISTIC = 0x29  # sigmoid(x)
BINARY_ADD = 0x1FFF0
FORMAT_TAG_ANY = 1
QUERY_SRC_MD, QUERY_WEIGHTS_MD, QUERY_DST_MD = 129, 131, 133
QUERY_IMPL_INFO_STR = 8
# memory-desc queries (dnnl_query_t): what `layout_words` reads
QUERY_STRIDES, QUERY_NDIMS, QUERY_PADDED_DIMS, QUERY_FORMAT_KIND = 14, 256, 260, 262
QUERY_INNER_NBLKS, QUERY_INNER_BLKS, QUERY_INNER_IDXS = 263, 264, 265
LAYOUT_WORDS = 64  # at most 2 + 4 * DNNL_MAX_NDIMS + 1 words
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
dnnl_status_t dnnl_memory_desc_create_with_string_tag(dnnl_memory_desc_t *md, int ndims,
    const int64_t *dims, int data_type, const char *tag);
dnnl_status_t dnnl_memory_desc_destroy(dnnl_memory_desc_t md);
size_t dnnl_memory_desc_get_size(const_dnnl_memory_desc_t md);
dnnl_status_t dnnl_memory_desc_query(const_dnnl_memory_desc_t md, int what, void *result);
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
dnnl_status_t dnnl_pooling_forward_primitive_desc_create(dnnl_primitive_desc_t *pd,
    dnnl_engine_t engine, int prop_kind, int alg_kind, const_dnnl_memory_desc_t src_desc,
    const_dnnl_memory_desc_t dst_desc, const int64_t *strides, const int64_t *kernel,
    const int64_t *dilation, const int64_t *padding_l, const int64_t *padding_r,
    dnnl_primitive_attr_t attr);
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


_OFF: list[bool] = []  # set by `disabled()`


@contextlib.contextmanager
def disabled():
    """Plans made inside keep mdsl's own convolution kernels, as without oneDNN (for
    side-by-side benchmarks and tests of both paths).

    >>> with disabled():
    ...     available()
    False
    """
    _OFF.append(True)
    try:
        yield
    finally:
        _OFF.pop()


def available() -> bool:
    """Whether plans may use oneDNN now (installed, not turned off)."""
    return not _OFF and library_path() is not None


def identity() -> list | None:
    """What `available()` and `library_path()` depend on, found without loading oneDNN
    (10-15 ms, for a compile cache key that may need no oneDNN): None when turned off,
    else each candidate file's path, size and modification time."""
    if _OFF or os.environ.get("MDSL_ONEDNN", "1") == "0":
        return None
    found = []
    for path in _candidates():
        with contextlib.suppress(OSError):
            stat = path.stat()
            found.append([str(path), stat.st_size, stat.st_mtime_ns])
    return found


def _candidates() -> list[Path]:
    """Where oneDNN is looked for: the Python environment's `lib` folder (where pip puts
    the wheel's library), the base interpreter's, then `LD_LIBRARY_PATH`."""
    dirs = [Path(sys.prefix) / "lib", Path(sys.base_prefix) / "lib"]
    dirs += [Path(p) for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p]
    return [d / SONAME for d in dirs]


# `_candidates`' search as one line of Python printing the folder (or nothing): what an
# emitted Makefile runs at build time, so it links the oneDNN of the machine that builds
FIND_DIR_PYTHON = (
    "import os,sys; d=[os.path.join(p,'lib') for p in (sys.prefix,sys.base_prefix)]"
    "+[p for p in os.environ.get('LD_LIBRARY_PATH','').split(':') if p]; "
    f"print(next((x for x in d if os.path.isfile(os.path.join(x,'{SONAME}'))),''))"
)


@functools.lru_cache(maxsize=1)
def preload() -> Path | None:
    """Load oneDNN into the process for every library after it (RTLD_GLOBAL): a library
    linking it by soname then finds it here whatever folder it was built against (a
    saved executable loaded on another machine, another environment). Its path, or None
    when it is not installed."""
    path = library_path()
    if path is not None:
        ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
    return path


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


# -- plan time: which convolutions go to oneDNN --------------------------------------------------
@dataclass(frozen=True)
class ConvProbe:
    """What oneDNN chose for one convolution: its kernel, and the floats of the blocked
    source and destination it needs beside mdsl's NCHW tensors (0: it reads / writes
    the NCHW tensor itself)."""

    impl: str
    src_elems: int
    dst_elems: int
    src_layout: str = ""  # its source's layout, a key of LAYOUTS ("": another)
    dst_layout: str = ""
    same_layouts: bool = False  # every team size's primitive chose those two layouts


@dataclass(frozen=True)
class ConvShape:
    """A convolution as oneDNN's C API takes it: NCHW dims, weights (groups first when
    grouped), strides, dilations minus one, padding before and after."""

    x: tuple[int, ...]
    w: tuple[int, ...]
    y: tuple[int, ...]
    strides: tuple[int, ...]
    dilates: tuple[int, ...]
    pad_l: tuple[int, ...]
    pad_r: tuple[int, ...]
    # oneDNN's bias and post-ops (`kir.Conv.post_ops`): they may change its choice of
    # kernel and of the weights' blocking, so the plan asks with them
    bias: bool = False
    post_ops: tuple = ()
    # the layout the source and destination are asked in (a string tag of LAYOUTS), or
    # "": oneDNN's choice (`mdsl.codegen.packing.activation_tag`)
    act_tag: str = ""


# kernels worth the two reorders; `gemm` (im2col) and `ref` ones are not
FAST_IMPLS = ("brgconv", "brdgmm", "jit")
# the layouts mdsl keeps tensors in between oneDNN kernels, by oneDNN's string tags:
# channels last (what its fp32 `brgconv` kernels of 3.2 pick), 16 or 8 channels a block
LAYOUTS = {"acdb": "NHWC", "aBcd16b": "nChw16c", "aBcd8b": "nChw8c"}


def channel_block(layout: str) -> int:
    """Channels per block of `layout` (a key of LAYOUTS), 1 for channels last.

    >>> channel_block("aBcd16b"), channel_block("acdb")
    (16, 1)
    """
    return int(layout[4:-1]) if layout.startswith("aBcd") else 1


def eltwise(op: tuple) -> tuple[int, float, float]:
    """oneDNN's eltwise algorithm and its alpha, beta for the post-op `op`: ("relu",),
    ("clip", lo, hi), ("linear", alpha, beta), ("swish",), x * sigmoid(x), or
    ("logistic",), sigmoid(x).

    >>> eltwise(("clip", 0.0, 6.0)) == (ELTWISE_CLIP, 0.0, 6.0)
    True
    """
    if op[0] == "swish":
        return ELTWISE_SWISH, 1.0, 0.0
    if op[0] == "logistic":
        return ELTWISE_LOGISTIC, 0.0, 0.0
    alg = {"relu": ELTWISE_RELU, "clip": ELTWISE_CLIP, "linear": ELTWISE_LINEAR}[op[0]]
    lo, hi = op[1:] if len(op) == 3 else (0.0, 0.0)
    return alg, float(lo), float(hi)


@functools.lru_cache(maxsize=1)
def _ffi_lib():
    import cffi

    path = library_path()
    if path is None:
        return None
    ffi = cffi.FFI()
    ffi.cdef(DECLARATIONS)
    return ffi, ffi.dlopen(str(path))


class _Conv:
    """A convolution's primitive descriptor, made through cffi at plan time."""

    def __init__(self, shape: ConvShape, threads: int = 0):
        self.ffi, self.lib = _ffi_lib()
        self.engine = self.ffi.new("dnnl_engine_t *")
        self.pd = self.ffi.new("dnnl_primitive_desc_t *")
        with _planning_threads(threads or plan_threads()):
            self.ok = self._create(shape)

    def _create(self, shape: ConvShape) -> bool:
        return self.lib.dnnl_engine_create(self.engine, CPU, 0) == 0 and (
            self.lib.dnnl_convolution_forward_primitive_desc_create(
                self.pd,
                self.engine[0],
                FORWARD_INFERENCE,
                CONVOLUTION_DIRECT,
                self.activation_md(shape.x, shape.act_tag),
                self.md(shape.w, FORMAT_TAG_ANY),
                self.md((shape.y[1],)) if shape.bias else self.ffi.NULL,
                self.activation_md(shape.y, shape.act_tag),
                *(self.dims(v) for v in (shape.strides, shape.dilates, shape.pad_l, shape.pad_r)),
                self.attr(shape.post_ops),
            )
            == 0
        )

    def attr(self, post_ops: tuple):
        """Primitive attributes holding `post_ops` (NULL: none)."""
        if not post_ops:
            return self.ffi.NULL
        ops, attr = self.ffi.new("dnnl_post_ops_t *"), self.ffi.new("dnnl_primitive_attr_t *")
        self.lib.dnnl_post_ops_create(ops)
        for op in post_ops:
            if op[0] == "sum":
                self.lib.dnnl_post_ops_append_sum(ops[0], 1.0, 0, F32)
            else:
                self.lib.dnnl_post_ops_append_eltwise(ops[0], *eltwise(op))
        self.lib.dnnl_primitive_attr_create(attr)
        self.lib.dnnl_primitive_attr_set_post_ops(attr[0], ops[0])
        return attr[0]

    def dims(self, values):
        return self.ffi.new("int64_t[12]", list(values))

    def md(self, dims, tag=None):
        """A memory desc of `dims`: plain row-major strides, or of format `tag`."""
        out = self.ffi.new("dnnl_memory_desc_t *")
        if tag is not None:
            self.lib.dnnl_memory_desc_create_with_tag(out, len(dims), self.dims(dims), F32, tag)
            return out[0]
        strides = [1] * len(dims)
        for i in range(len(dims) - 2, -1, -1):
            strides[i] = strides[i + 1] * dims[i + 1]
        self.lib.dnnl_memory_desc_create_with_strides(
            out, len(dims), self.dims(dims), F32, self.dims(strides)
        )
        return out[0]

    def activation_md(self, dims, tag: str):
        """The source's or destination's memory desc: of string tag `tag`, else `any`."""
        if not tag:
            return self.md(dims, FORMAT_TAG_ANY)
        out = self.ffi.new("dnnl_memory_desc_t *")
        name = self.ffi.new("char[]", tag.encode())
        self.lib.dnnl_memory_desc_create_with_string_tag(out, len(dims), self.dims(dims), F32, name)
        return out[0]

    def query(self, what):
        return self.lib.dnnl_primitive_desc_query_md(self.pd[0], what, 0)

    def extra_floats(self, what, dims) -> int:
        """Floats of the blocked tensor `what` beside the plain one of `dims` (0: the
        primitive reads or writes the plain one)."""
        chosen = self.query(what)
        if self.lib.dnnl_memory_desc_equal(chosen, self.md(dims)):
            return 0
        return -(-self.lib.dnnl_memory_desc_get_size(chosen) // 64) * 16  # whole cache lines

    def layout_of(self, what, dims) -> str:
        """The tag (a key of LAYOUTS) of the layout of tensor `what`, "" for another."""
        chosen = self.query(what)
        for tag in LAYOUTS:
            md = self.ffi.new("dnnl_memory_desc_t *")
            name = self.ffi.new("char[]", tag.encode())
            self.lib.dnnl_memory_desc_create_with_string_tag(
                md, len(dims), self.dims(dims), F32, name
            )
            if self.lib.dnnl_memory_desc_equal(chosen, md[0]):
                return tag
        return ""

    def impl(self) -> str:
        out = self.ffi.new("char **")
        self.lib.dnnl_primitive_desc_query(self.pd[0], QUERY_IMPL_INFO_STR, 0, out)
        return self.ffi.string(out[0]).decode()

    def layout_words(self, what) -> tuple[int, ...]:
        """The layout of tensor `what` of the primitive as the words the generated code
        compares (`mdsl_dnnl_layout_words`): format kind, ndims, padded dims, strides,
        inner blocks and their dims. Unlike the byte size, it tells apart two blockings
        of one size (weights blocked by 32 or by 64 output channels)."""
        md, ffi, lib = self.query(what), self.ffi, self.lib
        count = ffi.new("int *")

        def number(query) -> int:
            lib.dnnl_memory_desc_query(md, query, count)
            return int(count[0])

        def vector(query, n) -> list[int]:
            out = ffi.new("int64_t **")
            if lib.dnnl_memory_desc_query(md, query, out) != 0:
                return [0] * n
            return [int(v) for v in out[0][0:n]]

        kind, ndims = number(QUERY_FORMAT_KIND), number(QUERY_NDIMS)
        words = [kind, ndims, *vector(QUERY_PADDED_DIMS, ndims), *vector(QUERY_STRIDES, ndims)]
        blocks = number(QUERY_INNER_NBLKS)
        words += [blocks, *vector(QUERY_INNER_BLKS, blocks), *vector(QUERY_INNER_IDXS, blocks)]
        return tuple(words)

    def reordered_weights(self, w_shape, weights: np.ndarray) -> np.ndarray:
        """`weights` (plain, of `w_shape`) in the layout the primitive reads."""
        ffi, lib = self.ffi, self.lib
        plain, blocked = self.md(w_shape), self.query(QUERY_WEIGHTS_MD)
        src = np.ascontiguousarray(weights, np.float32)
        out = np.zeros(-(-lib.dnnl_memory_desc_get_size(blocked) // 4), np.float32)
        rpd, prim = ffi.new("dnnl_primitive_desc_t *"), ffi.new("dnnl_primitive_t *")
        stream = ffi.new("dnnl_stream_t *")
        mems = [ffi.new("dnnl_memory_t *") for _ in range(2)]
        e = self.engine[0]
        ok = (
            lib.dnnl_reorder_primitive_desc_create(rpd, plain, e, blocked, e, ffi.NULL) == 0
            and lib.dnnl_primitive_create(prim, rpd[0]) == 0
            and lib.dnnl_stream_create(stream, e, STREAM_DEFAULT) == 0
            and lib.dnnl_memory_create(mems[0], plain, e, ffi.from_buffer(src)) == 0
            and lib.dnnl_memory_create(mems[1], blocked, e, ffi.from_buffer(out)) == 0
        )
        args = ffi.new("dnnl_exec_arg_t[2]", [(ARG_FROM, mems[0][0]), (ARG_TO, mems[1][0])])
        if not ok or lib.dnnl_primitive_execute(prim[0], stream[0], 2, args) != 0:
            raise RuntimeError("oneDNN could not reorder convolution weights")
        lib.dnnl_stream_wait(stream[0])
        for m in mems:
            lib.dnnl_memory_destroy(m[0])
        lib.dnnl_primitive_destroy(prim[0])
        return out


def team_sizes() -> tuple[int, ...]:
    """The team sizes a convolution's primitives are made at: the whole team
    (`plan_threads()`) and one thread (the team choice runs calls on either, and a
    primitive runs on the team size it was made at)."""
    return tuple(dict.fromkeys((plan_threads(), 1)))


@functools.lru_cache(maxsize=1024)
def _probed(shape: ConvShape, threads: int) -> _Conv | None:
    if _ffi_lib() is None:
        return None
    conv = _Conv(shape, threads)
    return conv if conv.ok else None


@functools.lru_cache(maxsize=512)
def probe_conv(shape: ConvShape) -> ConvProbe | None:
    """oneDNN's choice for `shape` (forward inference, float32, source, weights and
    destination `any`), or None when oneDNN is missing or refuses it (`available()` is
    not asked). oneDNN's choice depends on the team size too: the kernel and layouts are
    the whole team's (`plan_threads()`), the scratch floats the most any of
    `team_sizes()` needs (a one-thread primitive may reorder where the team's does not)."""
    convs = [_probed(shape, t) for t in team_sizes()]
    conv = convs[0]
    if conv is None:
        return None
    made = [c for c in convs if c is not None]
    return ConvProbe(
        conv.impl(),
        max(c.extra_floats(QUERY_SRC_MD, shape.x) for c in made),
        max(c.extra_floats(QUERY_DST_MD, shape.y) for c in made),
        conv.layout_of(QUERY_SRC_MD, shape.x),
        conv.layout_of(QUERY_DST_MD, shape.y),
        len(made) == len(convs)
        and all(
            c.layout_words(what) == conv.layout_words(what)
            for c in made
            for what in (QUERY_SRC_MD, QUERY_DST_MD)
        ),
    )


class BlockedWeights(NamedTuple):
    """Weights reordered at plan time: the floats, their layout's words (which the
    generated code checks against the layout its primitive asks for), and the team size
    of the primitive that chose that layout."""

    values: np.ndarray
    layout: tuple[int, ...]
    threads: int


def reordered_weights(shape: ConvShape, weights: np.ndarray) -> list[BlockedWeights]:
    """The OIHW `weights` of the convolution `shape` in the blocked layout its oneDNN
    primitive reads (flat float32), made at plan time: one copy per layout the
    primitives of `team_sizes()` choose (oneDNN blocks a 1x1 convolution of large K by
    team size), the whole team's first."""
    out: list[BlockedWeights] = []
    for threads in team_sizes():
        conv = _probed(shape, threads)
        if conv is None:
            continue
        layout = conv.layout_words(QUERY_WEIGHTS_MD)
        if all(layout != w.layout for w in out):
            values = conv.reordered_weights(shape.w, weights.reshape(shape.w))
            out.append(BlockedWeights(values, layout, threads))
    return out


@functools.lru_cache(maxsize=1)
def plan_threads() -> int:
    """The team size oneDNN's primitives are planned for, at plan time and when the
    generated code makes them: OpenMP's default (`OMP_NUM_THREADS`, else the processors
    this process may run on). oneDNN picks a convolution's weights blocking from it, and
    every call of an mdsl library changes the OpenMP setting of its thread."""
    value = os.environ.get("OMP_NUM_THREADS", "").split(",")[0]
    return int(value) if value.isdigit() and int(value) > 0 else len(os.sched_getaffinity(0))


@contextlib.contextmanager
def _planning_threads(threads: int):
    """OpenMP's team size of this thread set to `threads` meanwhile."""
    gomp = ctypes.CDLL("libgomp.so.1")
    team = gomp.omp_get_max_threads()
    gomp.omp_set_num_threads(threads)
    try:
        yield
    finally:
        gomp.omp_set_num_threads(team)
