"""C++ for the vector part of a kernel: tile queues, copies, the compute sequence.

`VectorBody` renders one `VectorKernel` (a pointwise kernel, or a matmul epilogue) as the
members and methods of a kernel class: `Locate(row, col)` computes every stream's global
offset for a tile, `CopyIn(len)` / `Compute(len)` / `CopyOut(len)` are the three stages of
the standard AscendC pipeline over `TQue<VECIN/VECOUT, BUFFER_NUM>` queues. `RowBody`
does the same per phase of a `RowKernel`. Both report the Unified Buffer they need as
`Resources` for the tiling planner.
"""

from __future__ import annotations

from mdsl import expr as E
from mdsl.codegen import kir
from mdsl.ir.dtype import DType
from mdsl.targets.ascendc.kernels import (
    RowKernel,
    RowStorePhase,
    ScalarStorePhase,
    Stream,
    VectorKernel,
    inline_lets,
)
from mdsl.targets.ascendc.program import NotVectorizable, VectorCode, compile_tiles
from mdsl.targets.ascendc.tiling import BUFFER_NUM, COMPARE_ALIGN, UB_ALIGN, Resources

IND = "    "  # one indent level of the generated C++

CTYPES = {
    DType.float32: "float",
    DType.float16: "half",
    DType.bfloat16: "bfloat16_t",
    DType.int32: "int32_t",
    DType.int16: "int16_t",
    DType.int8: "int8_t",
    DType.uint8: "uint8_t",
    DType.bool_: "uint8_t",
    DType.int64: "int64_t",
    DType.float64: "double",
}
# loads the vector program can widen to float32 (Cast from the loaded dtype)
WIDENED = (DType.float16, DType.bfloat16, DType.int32)
# stores it can narrow float32 results to, with the rounding of numpy's astype
NARROWED = {DType.float16: "CAST_RINT", DType.bfloat16: "CAST_RINT", DType.int32: "CAST_TRUNC"}
# value dtypes the programs compute in float32 (half floats widen, as in the Kernel IR)
COMPUTED = (DType.float32, DType.float16, DType.bfloat16, DType.bool_)
SCALAR_BYTES = 32  # one 32-byte block for scalar helpers and single-element copies
LIBRARY_BYTES_PER_ELEMENT = 8  # headroom left for math-library temporaries (Tanh, Sin, ...)


def gm_name(buffer: str) -> str:
    return f"gm_{buffer}"


def offset_expr(stream: Stream, index_vars: list[str], col: str | None) -> str:
    terms = [str(stream.offset)] if stream.offset else []
    for var, stride in zip(index_vars, stream.outer):
        if stride:
            terms.append(var if stride == 1 else f"{var} * {stride}")
    if col is not None and stream.inner:
        terms.append(col if stream.inner == 1 else f"{col} * {stream.inner}")
    return " + ".join(terms) or "0"


def decompose(row: str, shape: tuple[int, ...]) -> tuple[list[str], list[str]]:
    """Lines splitting flat index `row` over `shape` (row-major) and the index names."""
    names = [f"o{d}" for d in range(len(shape))]
    if not shape:
        return [], names
    lines = [f"uint64_t rest = {row};"]
    for d in reversed(range(len(shape))):
        if d == 0:
            lines.append("const uint64_t o0 = rest;")
        else:
            lines.append(f"const uint64_t o{d} = rest % {shape[d]};")
            lines.append(f"rest /= {shape[d]};")
    if len(shape) == 1:
        lines = [f"const uint64_t o0 = {row};"]
    return lines, names


def scalar_helpers(names: set[str]) -> list[str]:
    """Methods computing a math function of one scalar on an 8-lane vector."""
    lines = []
    for instr in sorted(names):
        if instr == "Power":
            signature, body = "float a, float b", ["Duplicate(s, a, 8);", "Power(s, s, b, 8);"]
        else:
            signature, body = "float x", ["Duplicate(s, x, 8);", f"{instr}(s, s, 8);"]
        lines += [
            f"{IND}__aicore__ inline float Scalar{instr}({signature})",
            f"{IND}{{",
            f"{IND * 2}LocalTensor<float> s = scalarBuf_.Get<float>();",
            *(f"{IND * 2}{x}" for x in body),
            f"{IND * 2}MdslSync<HardEvent::V_S>();",
            f"{IND * 2}return s.GetValue(0);",
            f"{IND}}}",
            "",
        ]
    return lines


def method(signature: str, body: list[str]) -> list[str]:
    return [
        f"{IND}__aicore__ inline {signature}",
        f"{IND}{{",
        *(f"{IND * 2}{x}" for x in body),
        f"{IND}}}",
        "",
    ]


class _Pool:
    """UB buffers of a kernel class: queues and TBufs, their init lines and byte costs."""

    def __init__(self):
        self.members: list[str] = []
        self.init: list[str] = []
        self.per_element = 0
        self.fixed = 0

    def queue(self, name: str, position: str, ctype: str, itemsize: int) -> None:
        self.members.append(f"TQue<QuePosition::{position}, BUFFER_NUM> {name};")
        self.init.append(
            f"pipe_.InitBuffer({name}, BUFFER_NUM, tiling_.tileLength * sizeof({ctype}));"
        )
        self.per_element += BUFFER_NUM * itemsize

    def bind(self, name: str, ctype: str, itemsize: int) -> None:
        self.members.append(f"TQueBind<TPosition::VECIN, TPosition::VECOUT, BUFFER_NUM> {name};")
        self.init.append(
            f"pipe_.InitBuffer({name}, BUFFER_NUM, tiling_.tileLength * sizeof({ctype}));"
        )
        self.per_element += BUFFER_NUM * itemsize

    def tiles(self, name: str, count: int, itemsize: int = 4) -> None:
        """`count` float32 tiles in one TBuf (slices `name[i * tileLength]`)."""
        if count:
            self.members.append(f"TBuf<TPosition::VECCALC> {name};")
            self.init.append(
                f"pipe_.InitBuffer({name}, {count} * tiling_.tileLength * {itemsize});"
            )
            self.per_element += count * itemsize

    def masks(self, count: int) -> None:
        if count:  # one bit per element, each mask slice padded to 32 bytes
            self.members.append("TBuf<TPosition::VECCALC> maskBuf_;")
            self.init.append(
                f"pipe_.InitBuffer(maskBuf_, {count} * MdslAlignUp(tiling_.tileLength / 8, 32));"
            )
            self.per_element += count  # >= ceil(T / 8) rounded to 32 bytes, for T >= 64
            self.fixed += count * UB_ALIGN

    def block(self, name: str, nbytes: int) -> None:
        self.members.append(f"TBuf<TPosition::VECCALC> {name};")
        self.init.append(f"pipe_.InitBuffer({name}, {nbytes});")
        self.fixed += max(UB_ALIGN, -(-nbytes // UB_ALIGN) * UB_ALIGN)


class _Streams:
    """Per-stream naming and copies shared by the vector and row bodies."""

    def __init__(self, streams: list[Stream]):
        self.streams = streams

    @staticmethod
    def base(s: Stream) -> str:
        return f"base_{s.name}_"

    @staticmethod
    def queue(s: Stream, output: bool) -> str:
        return f"{'out' if output else 'in'}Queue_{s.name}_"

    def locate_lines(
        self, outer_shape: tuple[int, ...], streams: list[Stream], scalars: list[Stream]
    ):
        lines, names = decompose("row", outer_shape)
        for s in streams:
            lines.append(f"{self.base(s)} = {offset_expr(s, names, 'col')};")
        for s in scalars:
            value = f"{gm_name(s.buffer)}.GetValue({offset_expr(s, names, None)})"
            lines.append(f"{s.name} = static_cast<float>({value});")
        if not outer_shape:
            lines.append("(void)row;")
        return lines

    def copy_in(self, s: Stream) -> list[str]:
        ctype = CTYPES[s.dtype]
        q = self.queue(s, False)
        src = f"{gm_name(s.buffer)}[{self.base(s)}]"
        if s.inner == 1:
            copy = [f"MdslCopyIn({s.name}, {src}, len);"]
        else:
            copy = [f"MdslGather({s.name}, {src}, len, {s.inner});", "MdslSync<HardEvent::S_V>();"]
        return [
            f"LocalTensor<{ctype}> {s.name} = {q}.AllocTensor<{ctype}>();",
            *copy,
            f"{q}.EnQue({s.name});",
        ]

    def copy_out(self, s: Stream) -> list[str]:
        ctype = CTYPES[s.dtype]
        q = self.queue(s, True)
        dst = f"{gm_name(s.buffer)}[{self.base(s)}]"
        if s.inner == 1:
            copy = [f"MdslCopyOut({dst}, {s.name}, len);"]
        else:
            copy = [
                "MdslSync<HardEvent::MTE2_S>();",
                f"MdslScatter({dst}, {s.name}, len, {s.inner});",
            ]
        return [
            f"LocalTensor<{ctype}> {s.name} = {q}.DeQue<{ctype}>();",
            *copy,
            f"{q}.FreeTensor({s.name});",
        ]


def _f32_name(s: Stream) -> str:
    """The float32 tile holding a stream's values: the tile itself, or its widened copy."""
    return s.name if s.dtype == DType.float32 else f"f_{s.name}"


def _widen(s: Stream) -> str:
    return f"Cast(f_{s.name}, {s.name}, RoundMode::CAST_NONE, calcLen);"


def _narrow(s: Stream) -> str:
    return f"Cast({s.name}, f_{s.name}, RoundMode::{NARROWED[s.dtype]}, calcLen);"


def _views(cvt: list[Stream], code: VectorCode) -> list[str]:
    """Slices of the TBufs: widened copies, program temporaries, masks."""
    lines = [
        f"LocalTensor<float> f_{s.name} = cvtBuf_.Get<float>()[{i} * tiling_.tileLength];"
        for i, s in enumerate(cvt)
    ]
    lines += [
        f"LocalTensor<float> tmp{i} = calcBuf_.Get<float>()[{i} * tiling_.tileLength];"
        for i in range(code.temps)
    ]
    lines += [
        f"LocalTensor<uint8_t> mask{i} = maskBuf_.Get<uint8_t>()[{i} * MdslAlignUp(tiling_.tileLength / 8, 32)];"
        for i in range(code.masks)
    ]
    return lines


def _tile_loop(body: list[str]) -> list[str]:
    """A row phase: `body` for each tile of the row (`len` elements at `tile`)."""
    return [
        "for (uint32_t tile = 0; tile < tiling_.tilesPerRow; ++tile) {",
        f"{IND}const uint32_t len = tile + 1 == tiling_.tilesPerRow ? tiling_.tailLength : tiling_.tileLength;",
        f"{IND}Locate(row, static_cast<uint64_t>(tile) * tiling_.tileLength);",
        *(IND + line for line in body),
        "}",
    ]


def _check_dtype(dtype: DType, role: str) -> None:
    if dtype not in (DType.float32, *WIDENED, *NARROWED):
        raise NotVectorizable(f"{role} of dtype {dtype} in a vector kernel")


class VectorBody:
    """Members, init lines and methods of a vector kernel class over tiles of its rows.

    `result_in_ub`: a matmul epilogue whose `acc` is a row of the result block the cube
    unit put in the UB (`accRow_`, set by the kernel's block loop) instead of a tile copied
    from GM; operands every row of a block reads (outer stride 0 along M: a bias) are then
    loaded once per block (`LoadShared`) and held."""

    def __init__(self, k: VectorKernel, result_in_ub: bool = False):
        self.k = k
        self.result_in_ub = result_in_ub
        self.pool = _Pool()
        self.streams = _Streams([*k.loads.values(), *(s for s, _ in k.stores)])
        self.methods: list[str] = []
        self.align = 8
        self.code = VectorCode()
        if k.is_copy:
            self._copy()
        else:
            self._compute()

    # -- copy kernels (movement ops): one bound queue, no arithmetic -----------------------------
    def _copy(self) -> None:
        k = self.k
        (load,) = k.loads.values()
        (store, _) = k.stores[0]
        ctype, size = CTYPES[load.dtype], load.dtype.itemsize
        self.align = max(1, UB_ALIGN // size)
        self.pool.bind("queBind_", ctype, size)
        self.members = [
            f"int64_t {self.streams.base(load)} = 0;",
            f"int64_t {self.streams.base(store)} = 0;",
        ]
        t = "tile"
        src, dst = (
            f"{gm_name(load.buffer)}[{self.streams.base(load)}]",
            f"{gm_name(store.buffer)}[{self.streams.base(store)}]",
        )
        copy_in = (
            f"MdslCopyIn({t}, {src}, len);"
            if load.inner == 1
            else f"MdslGather({t}, {src}, len, {load.inner});"
        )
        copy_out = (
            f"MdslCopyOut({dst}, {t}, len);"
            if store.inner == 1
            else f"MdslScatter({dst}, {t}, len, {store.inner});"
        )
        in_sync = [] if load.inner == 1 else ["MdslSync<HardEvent::S_MTE3>();"]
        out_sync = [] if store.inner == 1 else ["MdslSync<HardEvent::MTE2_S>();"]
        self.methods += method(
            "void Locate(uint64_t row, uint64_t col)",
            self.streams.locate_lines(k.outer_shape, [load, store], []),
        )
        self.methods += method(
            "void CopyIn(uint32_t len)",
            [
                f"LocalTensor<{ctype}> {t} = queBind_.AllocTensor<{ctype}>();",
                copy_in,
                *in_sync,
                f"queBind_.EnQue({t});",
            ],
        )
        self.methods += method(
            "void Compute(uint32_t len)", ["(void)len;  // a copy: nothing to compute"]
        )
        self.methods += method(
            "void CopyOut(uint32_t len)",
            [
                f"LocalTensor<{ctype}> {t} = queBind_.DeQue<{ctype}>();",
                *out_sync,
                copy_out,
                f"queBind_.FreeTensor({t});",
            ],
        )
        self.notes = (
            []
            if load.inner == 1 and store.inner == 1
            else ["strided copy: elements move through the scalar unit (slow path)"]
        )

    # -- compute kernels ---------------------------------------------------------------------------
    def _compute(self) -> None:
        k = self.k
        self.tile_loads = [s for s in k.loads.values() if s.is_tile]
        self.scalar_loads = [s for s in k.loads.values() if not s.is_tile]
        self.stored = [s for s, _ in k.stores]
        self.acc = k.loads["acc"] if self.result_in_ub else None
        self.shared = [
            s
            for s in self.tile_loads
            if self.result_in_ub and s is not self.acc and not (s.outer and s.outer[-1])
        ]
        # tiles copied in from GM for every row (with a queue each)
        self.queued = [s for s in self.tile_loads if s is not self.acc and s not in self.shared]
        self._validate()
        self.cvt = [s for s in [*self.tile_loads, *self.stored] if s.dtype != DType.float32]
        self._program()
        self._buffers()
        self._methods()

    def _validate(self) -> None:
        for s in self.k.loads.values():
            _check_dtype(s.dtype, f"load {s.name}")
        for s in self.stored:
            _check_dtype(s.dtype, f"store {s.name}")
            if not s.is_tile:
                raise NotVectorizable("a store with stride 0 along the row")
        for let in self.k.lets:
            if let.dtype not in COMPUTED:
                raise NotVectorizable(f"{let.dtype} arithmetic")

    def _program(self) -> None:
        """The vector instructions over float32 tiles (half floats widened in cvtBuf_)."""
        k = self.k
        roots = inline_lets(k.lets, [v for _, v in k.stores])
        tiles = {s.name: _f32_name(s) for s in self.tile_loads}
        self.code = compile_tiles(
            {s.name: r for s, r in zip(self.stored, roots)},
            tiles=tiles,
            scalars={s.name: s.name for s in self.scalar_loads},
            destinations={s.name: _f32_name(s) for s in self.stored},
            # a loaded tile is read by this compute only (a held shared one by every row)
            clobber=set(tiles) - {s.name for s in self.shared},
        )
        itemsizes = [4] + [s.dtype.itemsize for s in [*self.tile_loads, *self.stored]]
        self.align = COMPARE_ALIGN // 4 if self.code.masks else UB_ALIGN // min(itemsizes)

    def _buffers(self) -> None:
        pool = self.pool
        for s in [*self.queued, *self.shared]:
            pool.queue(self.streams.queue(s, False), "VECIN", CTYPES[s.dtype], s.dtype.itemsize)
        for s in self.stored:
            pool.queue(self.streams.queue(s, True), "VECOUT", CTYPES[s.dtype], s.dtype.itemsize)
        pool.tiles("calcBuf_", self.code.temps)
        pool.tiles("cvtBuf_", len(self.cvt))
        pool.masks(self.code.masks)
        if self.code.scalar_functions:
            pool.block("scalarBuf_", SCALAR_BYTES)
        if self.code.library:
            pool.per_element += LIBRARY_BYTES_PER_ELEMENT
        streamed = [*self.queued, *self.shared, *self.stored]
        self.members = [f"int64_t {self.streams.base(s)} = 0;" for s in streamed]
        self.members += [f"float {s.name} = 0.0f;" for s in self.scalar_loads]

    def _methods(self) -> None:
        streamed = [*self.queued, *self.shared, *self.stored]
        locate = self.streams.locate_lines(self.k.outer_shape, streamed, self.scalar_loads)
        copy_in = [x for s in self.queued for x in self.streams.copy_in(s)]
        copy_out = [x for s in self.stored for x in self.streams.copy_out(s)]
        self.methods += method("void Locate(uint64_t row, uint64_t col)", locate)
        if self.shared:
            self._shared_methods()
        self.methods += method("void CopyIn(uint32_t len)", copy_in or ["(void)len;"])
        self.methods += method("void Compute(uint32_t len)", self._compute_lines())
        self.methods += method("void CopyOut(uint32_t len)", copy_out)
        self.methods += scalar_helpers(self.code.scalar_functions)
        strided = [s for s in [*self.k.loads.values(), *self.stored] if s.inner not in (0, 1)]
        self.notes = (
            ["strided operands move through the scalar unit (slow path)"] if strided else []
        )

    @staticmethod
    def held(s: Stream) -> str:
        return f"row_{s.name}_"

    def _shared_methods(self) -> None:
        """LoadShared(len) copies the block's shared operands in and holds them; FreeShared()."""
        q = self.streams.queue
        load = [x for s in self.shared for x in self.streams.copy_in(s)]
        load += [f"{self.held(s)} = {q(s, False)}.DeQue<{CTYPES[s.dtype]}>();" for s in self.shared]
        free = [f"{q(s, False)}.FreeTensor({self.held(s)});" for s in self.shared]
        self.methods += method("void LoadShared(uint32_t len)", load)
        self.methods += method("void FreeShared()", free)
        self.members += [f"LocalTensor<{CTYPES[s.dtype]}> {self.held(s)};" for s in self.shared]

    def _source(self, s: Stream) -> str:
        """Where Compute finds a loaded tile: its queue, the held shared tile, the result row."""
        if s is self.acc:
            return "accRow_"
        if s in self.shared:
            return self.held(s)
        return f"{self.streams.queue(s, False)}.DeQue<{CTYPES[s.dtype]}>()"

    def _compute_lines(self) -> list[str]:
        """DeQue the inputs, widen, compute, narrow, EnQue the outputs, free the inputs."""
        k, q = self.k, self.streams.queue
        lines = ["const uint32_t calcLen = MdslAlignUp(len, ALIGN);"]
        for s in self.tile_loads:
            lines.append(f"LocalTensor<{CTYPES[s.dtype]}> {s.name} = {self._source(s)};")
        lines += _views(self.cvt, self.code)
        for s in self.stored:
            lines.append(
                f"LocalTensor<{CTYPES[s.dtype]}> {s.name} = {q(s, True)}.AllocTensor<{CTYPES[s.dtype]}>();"
            )
        lines += [_widen(s) for s in self.tile_loads if s.dtype != DType.float32]
        if k.prescale != 1.0:  # a GEMM's alpha
            lines.append(
                f"Muls({_f32_name(k.loads['acc'])}, {_f32_name(k.loads['acc'])}, {float(k.prescale)!r}f, calcLen);"
            )
        lines += self.code.lines
        for s in self.stored:
            if s.dtype != DType.float32:
                lines.append(_narrow(s))
            lines.append(f"{q(s, True)}.EnQue({s.name});")
        lines += [f"{q(s, False)}.FreeTensor({s.name});" for s in self.queued]
        return lines

    def resources(self, split_rows: bool = True) -> Resources:
        return Resources(self.pool.per_element, self.pool.fixed, self.align, split_rows)


class RowBody:
    """A row kernel: per row, each phase streams the row through UB tiles, or (a resident
    row) reads the tiles the row was loaded into once."""

    def __init__(self, k: RowKernel):
        self.k = k
        self.resident = k.resident
        self.pool = _Pool()
        self.members_scalars: list[str] = []  # per-row state (reductions, lets, held tiles)
        self.tile_loads = [s for s in k.loads.values() if s.is_tile]
        self.scalar_loads = [s for s in k.loads.values() if not s.is_tile]
        self.row_stores = [p.stream for p in k.phases if isinstance(p, RowStorePhase)]
        self.scalar_stores = [p.stream for p in k.phases if isinstance(p, ScalarStorePhase)]
        self.streams = _Streams([*k.loads.values(), *self.row_stores, *self.scalar_stores])
        for s in k.loads.values():
            _check_dtype(s.dtype, f"load {s.name}")
        for s in [*self.row_stores, *self.scalar_stores]:
            _check_dtype(s.dtype, f"store {s.name}")
        self.scalar_vars = {s.name: s.name for s in self.scalar_loads}
        self.phase_lines: list[str] = []
        self.methods: list[str] = []
        self.functions: set[str] = set()  # Scalar<op> helpers
        self.library: set[str] = set()  # math-library instructions on tiles
        self.temps = self.masks = 0
        self.cvt = [s for s in self.tile_loads if s.dtype != DType.float32]
        self.cvt += [s for s in self.row_stores if s.dtype != DType.float32]
        self.tiles = {s.name: _f32_name(s) for s in self.tile_loads}
        self.last_reader = {
            name: i
            for i, p in enumerate(k.phases)
            if isinstance(p, (kir.Reduce, RowStorePhase))
            for name in E.variables(p.value)
        }
        self.reduces = False
        # a resident row's operands shared by all rows; lines around the row loop
        self.shared = [s for s in self.tile_loads if self.resident and not any(s.outer)]
        self.block_before: list[str] = []
        self.block_after: list[str] = []
        if self.resident:
            self._load_row()
        for i, phase in enumerate(k.phases):
            self._phase(i, phase)
        if self.resident and any(s not in self.shared for s in self.tile_loads):
            self.phase_lines.append("FreeRow();")
        self._buffers()

    # -- a resident row: loaded once, held across the phases, freed at the end -------------------------
    @staticmethod
    def held(s: Stream) -> str:
        return f"row_{s.name}_"

    def _load_row(self) -> None:
        """Per row: its tiles loaded once; operands shared by every row (outer strides 0:
        layer norm's scale and bias) loaded once per block, before the first row."""
        self.phase_lines += ["const uint32_t len = tiling_.rowLength;", "Locate(row, 0);"]
        own = [s for s in self.tile_loads if s not in self.shared]
        self._hold("Row", own)
        self._hold("Shared", self.shared)
        if own:
            self.phase_lines.append("LoadRow(len);")
        else:
            self.phase_lines.append("(void)len;")
        if self.shared:
            self.block_before = ["Locate(range.first, 0);", "LoadShared(tiling_.rowLength);"]
            self.block_after = ["FreeShared();"]

    def _hold(self, what: str, loads: list[Stream]) -> None:
        """Load{what}(len) copies `loads` in and holds their tiles; Free{what}() frees them."""
        if not loads:
            return
        q = self.streams.queue
        load = [x for s in loads for x in self.streams.copy_in(s)]
        load += [f"{self.held(s)} = {q(s, False)}.DeQue<{CTYPES[s.dtype]}>();" for s in loads]
        free = [f"{q(s, False)}.FreeTensor({self.held(s)});" for s in loads]
        self.methods += method(f"void Load{what}(uint32_t len)", load)
        self.methods += method(f"void Free{what}()", free)
        self.members_scalars += [f"LocalTensor<{CTYPES[s.dtype]}> {self.held(s)};" for s in loads]

    def _clobber(self, i: int, tiles: dict[str, str]) -> set[str]:
        """Tiles phase `i` may overwrite: a streamed tile is read by this phase only; a held
        float32 tile only by its last reader and if no later row reads it (half floats are
        widened again per phase)."""
        if not self.resident:
            return set(tiles)
        loads = {s.name: s for s in self.tile_loads}
        return {
            v
            for v in tiles
            if loads[v].dtype != DType.float32
            or (self.last_reader.get(v) == i and loads[v] not in self.shared)
        }

    # -- phases ----------------------------------------------------------------------------------------
    def _phase(self, i: int, phase) -> None:
        if isinstance(phase, kir.Let):
            if phase.dtype not in COMPUTED:
                raise NotVectorizable(f"{phase.dtype} arithmetic")
            value = self._scalar(phase.value)
            ctype = "bool" if phase.dtype == DType.bool_ else "float"
            self.members_scalars.append(f"{ctype} {phase.var} = 0;")
            self.phase_lines.append(f"{phase.var} = {value};")
            self.scalar_vars[phase.var] = phase.var
        elif isinstance(phase, kir.Reduce):
            self._reduce(i, phase)
        elif isinstance(phase, RowStorePhase):
            self._row_store(i, phase)
        elif isinstance(phase, ScalarStorePhase):
            self._scalar_store(phase)
        else:
            raise NotVectorizable(f"row phase {type(phase).__name__}")

    def _scalar(self, value: E.Expr) -> str:
        used = [v for v in E.variables(value) if v not in self.scalar_vars]
        if used:
            raise NotVectorizable(f"a per-row scalar reads row elements ({', '.join(used)})")
        code = compile_tiles({"v": value}, tiles={}, scalars=self.scalar_vars)
        self.functions |= code.scalar_functions
        result = code.results["v"]
        if result.kind != "scalar":
            raise NotVectorizable("a per-row scalar that is not a scalar expression")
        return result.text

    def _tile_code(self, i: int, roots: dict[str, E.Expr], dests: dict[str, str]) -> VectorCode:
        used = [v for r in roots.values() for v in E.variables(r)]
        tiles = {v: self.tiles[v] for v in used if v in self.tiles}
        code = compile_tiles(
            roots,
            tiles=tiles,
            scalars=self.scalar_vars,
            destinations=dests,
            clobber=self._clobber(i, tiles),
        )
        self.temps = max(self.temps, code.temps)
        self.masks = max(self.masks, code.masks)
        self.functions |= code.scalar_functions
        self.library |= code.library
        return code

    def _loads_of(self, value: E.Expr) -> list[Stream]:
        names = set(E.variables(value))
        return [s for s in self.tile_loads if s.name in names]

    def _reduce(self, i: int, phase: kir.Reduce) -> None:
        if phase.op not in ("sum", "max", "min") or phase.dtype not in COMPUTED[:3]:
            raise NotVectorizable(f"a {phase.op} reduction in {phase.dtype}")
        loads = self._loads_of(phase.value)
        code = self._tile_code(i, {"v": phase.value}, {})
        result = code.results["v"]
        self.reduces = True
        combine = {
            "sum": "{acc} + part",
            "max": "MdslMax({acc}, part)",
            "min": "MdslMin({acc}, part)",
        }[phase.op]
        if result.kind == "scalar":  # a row-constant value: no tiles to read
            total = (
                f"({result.text}) * static_cast<float>(tiling_.rowLength)"
                if phase.op == "sum"
                else result.text
            )
            self.members_scalars.append(f"float {phase.var} = 0.0f;")
            self.phase_lines.append(f"{phase.var} = {total};")
            self.scalar_vars[phase.var] = phase.var
            return
        if result.kind != "tile":
            raise NotVectorizable("a reduction of a boolean mask")
        api = {"sum": "ReduceSum", "max": "ReduceMax", "min": "ReduceMin"}[phase.op]
        body = self._dequeue(loads, code)
        body += [
            "LocalTensor<float> red = redBuf_.Get<float>();",
            "LocalTensor<float> work = workBuf_.Get<float>();",
            f"{api}<float>(red, {result.text}, work, len);",
            "MdslSync<HardEvent::V_S>();",
            "const float part = red.GetValue(0);",
        ]
        body += self._free(loads)
        body.append("return part;")
        if not self.resident:
            self.methods += method(f"void CopyIn{i}(uint32_t len)", self._copy_in(loads))
        self.methods += method(f"float Compute{i}(uint32_t len)", body)
        self.members_scalars.append(f"float {phase.var} = 0.0f;")
        if self.resident:
            self.phase_lines.append(f"{phase.var} = Compute{i}(len);")
        else:
            self.phase_lines += _tile_loop(
                [
                    f"CopyIn{i}(len);",
                    f"const float part = Compute{i}(len);",
                    f"{phase.var} = tile == 0 ? part : {combine.format(acc=phase.var)};",
                ]
            )
        self.scalar_vars[phase.var] = phase.var

    def _row_store(self, i: int, phase: RowStorePhase) -> None:
        s = phase.stream
        if s.inner == 0:
            raise NotVectorizable("a row output with stride 0 along the row")
        loads = self._loads_of(phase.value)
        code = self._tile_code(i, {s.name: phase.value}, {s.name: _f32_name(s)})
        body = self._dequeue(loads, code, output=s)
        if s.dtype != DType.float32:
            body.append(_narrow(s))
        body.append(f"{self.streams.queue(s, True)}.EnQue({s.name});")
        body += self._free(loads)
        if not self.resident:
            self.methods += method(f"void CopyIn{i}(uint32_t len)", self._copy_in(loads))
        self.methods += method(f"void Compute{i}(uint32_t len)", body)
        self.methods += method(f"void CopyOut{i}(uint32_t len)", self.streams.copy_out(s))
        if self.resident:
            self.phase_lines += [f"Compute{i}(len);", f"CopyOut{i}(len);"]
        else:
            self.phase_lines += _tile_loop(
                [f"CopyIn{i}(len);", f"Compute{i}(len);", f"CopyOut{i}(len);"]
            )

    def _scalar_store(self, phase: ScalarStorePhase) -> None:
        s = phase.stream
        value = self._scalar(phase.value)
        ctype = CTYPES[s.dtype]
        self.phase_lines += [
            "{",
            f"{IND}LocalTensor<{ctype}> one = scalarOut_.Get<{ctype}>();",
            f"{IND}one.SetValue(0, static_cast<{ctype}>({value}));",
            f"{IND}MdslSync<HardEvent::S_MTE3>();",
            f"{IND}Locate(row, 0);",
            f"{IND}MdslCopyOut({gm_name(s.buffer)}[{self.streams.base(s)}], one, 1);",
            f"{IND}MdslSync<HardEvent::MTE3_S>();",
            "}",
        ]

    def _free(self, loads: list[Stream]) -> list[str]:
        """A streamed phase frees its input tiles; a held row is freed by FreeRow()."""
        if self.resident:
            return []
        return [f"{self.streams.queue(s, False)}.FreeTensor({s.name});" for s in loads]

    def _copy_in(self, loads: list[Stream]) -> list[str]:
        lines = [x for s in loads for x in self.streams.copy_in(s)]
        return lines or ["(void)len;"]

    def _dequeue(
        self, loads: list[Stream], code: VectorCode, output: Stream | None = None
    ) -> list[str]:
        """A phase's compute up to its instructions: DeQue, views, Alloc the output, widen."""
        q = self.streams.queue
        lines = ["const uint32_t calcLen = MdslAlignUp(len, ALIGN);"]
        for s in loads:
            source = self.held(s) if self.resident else f"{q(s, False)}.DeQue<{CTYPES[s.dtype]}>()"
            lines.append(f"LocalTensor<{CTYPES[s.dtype]}> {s.name} = {source};")
        used = {s.name for s in loads} | ({output.name} if output else set())
        lines += [
            f"LocalTensor<float> f_{s.name} = cvtBuf_.Get<float>()[{i} * tiling_.tileLength];"
            for i, s in enumerate(self.cvt)
            if s.name in used
        ]
        lines += _views([], code)
        if output is not None:
            ctype = CTYPES[output.dtype]
            lines.append(
                f"LocalTensor<{ctype}> {output.name} = {q(output, True)}.AllocTensor<{ctype}>();"
            )
        lines += [_widen(s) for s in loads if s.dtype != DType.float32]
        return lines + code.lines

    # -- buffers ------------------------------------------------------------------------------------------
    def _buffers(self) -> None:
        pool = self.pool
        for s in self.tile_loads:
            pool.queue(self.streams.queue(s, False), "VECIN", CTYPES[s.dtype], s.dtype.itemsize)
        for s in self.row_stores:
            pool.queue(self.streams.queue(s, True), "VECOUT", CTYPES[s.dtype], s.dtype.itemsize)
        pool.tiles("calcBuf_", self.temps)
        pool.tiles("cvtBuf_", len(self.cvt))
        pool.masks(self.masks)
        if self.reduces:
            pool.block("redBuf_", SCALAR_BYTES)
            # ReduceMax/Min keep a (value, index) pair per 256-byte repeat, ReduceSum one
            # partial: 2 floats per 64 elements in whole 32-byte blocks, <= 1 byte/element
            pool.members.append("TBuf<TPosition::VECCALC> workBuf_;")
            pool.init.append(
                "pipe_.InitBuffer(workBuf_, MdslAlignUp((tiling_.tileLength + 63) / 64 * 2, 8) * sizeof(float));"
            )
            pool.per_element += 1
            pool.fixed += UB_ALIGN
        if self.functions:
            pool.block("scalarBuf_", SCALAR_BYTES)
        if self.library:
            pool.per_element += LIBRARY_BYTES_PER_ELEMENT
        if self.scalar_stores:
            pool.block("scalarOut_", SCALAR_BYTES)
        itemsizes = [4] + [s.dtype.itemsize for s in [*self.tile_loads, *self.row_stores]]
        self.align = COMPARE_ALIGN // 4 if self.masks else UB_ALIGN // min(itemsizes)

    def resources(self) -> Resources:
        return Resources(self.pool.per_element, self.pool.fixed, self.align, False)
