"""An AscendC op project for a graph: plan, kernels, tiling, host code, build files, README.

`build_project` optimizes and specializes the graph, builds the Plan every target shares,
turns each Kernel IR record into AscendC kernels (`kernels.py`), renders their vector
code (`body.py`), tiles them for the SoC (`tiling.py`) and renders every file
(`render.py`); `emit_ascendc` writes the files to a folder.

Kernels the templates cannot express run on the host between launches and are listed in
the README with the reason; what the hardware would reject (dtypes, UB overflow) raises
`TilingError` naming the kernels and their graph nodes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from mdsl.codegen import kir
from mdsl.codegen.access import broadcast_strides, contiguous_strides
from mdsl.codegen.plan import Plan, build_plan
from mdsl.codegen.plan import kernel_buffers as plan_kernel_buffers
from mdsl.codegen.specialize import specialize
from mdsl.ir.dtype import DType
from mdsl.ir.errors import CompileError
from mdsl.ir.graph import Graph
from mdsl.ir.naming import c_comment as comment_text
from mdsl.ir.naming import identifier_stem, md_cell
from mdsl.targets.ascendc.body import RowBody, VectorBody
from mdsl.targets.ascendc.kernels import (
    HostKernel,
    Im2colKernel,
    MatmulKernel,
    RowKernel,
    VectorKernel,
    adapt_conv,
    adapt_gemm,
    adapt_pointwise,
    adapt_rowwise,
)
from mdsl.targets.ascendc.needs import scatters, unaligned_copies
from mdsl.targets.ascendc.program import NotVectorizable
from mdsl.targets.ascendc.render import (
    MatmulTiling,
    PlannedKernel,
    _signature,
    environment,
    host_tiling_context,
    node_line,
    render_kernel,
    tiling_fields,
    tiling_type,
)
from mdsl.targets.ascendc.soc import FEATURES, SocSpec
from mdsl.targets.ascendc.tiling import (
    BUFFER_NUM,
    Diagnostic,
    RowTiling,
    TilingError,
    UnitTiling,
    align_up,
    plan_rows,
)
from mdsl.targets.ascendc.traffic import gm_bytes, minimum_bytes

ORIGIN = {
    kir.Pointwise: "pointwise",
    kir.Rowwise: "row reduction",
    kir.Gemm: "GEMM",
    kir.Conv: "convolution",
    kir.Pool: "pooling",
    kir.Callback: "Python callback",
    kir.CustomCall: "C function call",
}
KFC_MSG_BYTES = 128  # sizeof(KfcMsg): the Matmul client's message area at the end of the UB
MIN_BLOCK_ROWS = 16  # the lowest matmul base block (the cube works on 16 x 16 fractals)
UNIT = {
    VectorKernel: "vector",
    RowKernel: "vector",
    MatmulKernel: "cube + vector",
    Im2colKernel: "vector",
    HostKernel: "host fallback",
}


@dataclass(slots=True)
class AscendcProject:
    """The generated op project of one graph (one static shape)."""

    graph: Graph
    plan: Plan
    soc: SocSpec
    kernels: list[PlannedKernel]
    diagnostics: list[Diagnostic]
    shapes: dict[str, int]
    forced: dict[str, int] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)

    @property
    def stem(self) -> str:
        return identifier_stem(self.graph.name)

    @property
    def prefix(self) -> str:
        return f"mdsl_{self.stem}"

    @property
    def device_kernels(self) -> list[PlannedKernel]:
        return [k for k in self.kernels if k.on_device]

    @property
    def host_kernels(self) -> list[PlannedKernel]:
        return [k for k in self.kernels if not k.on_device]

    @property
    def user_workspace_bytes(self) -> int:
        cols = [
            k.kernel.col_elements * 4 for k in self.kernels if isinstance(k.kernel, Im2colKernel)
        ]
        return max(cols, default=0)

    def write(self, out_dir) -> Path:
        """Write every file under `out_dir` (created if needed); returns the folder."""
        root = Path(out_dir)
        for rel, text in self.files.items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        return root


# -- the pipeline ---------------------------------------------------------------------------------
def static_graph(g: Graph, shapes: dict[str, int] | None, opt_level: int) -> Graph:
    """`g` optimized and specialized to `shapes` (every symbolic dim needs a value)."""
    from mdsl.ir.dim import Dim
    from mdsl.passes.manager import optimize

    optimized = optimize(g, level=opt_level) if opt_level else g
    symbols: dict[str, None] = {}
    for t in optimized.inputs.values():
        for d in t.shape:
            if isinstance(d, Dim):
                symbols.update(dict.fromkeys(sorted(d.free_symbols)))
    missing = sorted(s for s in symbols if s not in (shapes or {}))
    if missing:
        raise CompileError(
            f"graph {g.name!r} has symbolic dims {', '.join(missing)}: AscendC kernels are "
            f"generated for static shapes; pass shapes={{{', '.join(repr(m) + ': ...' for m in missing)}}}"
        )
    return specialize(optimized, dict(shapes)) if symbols else optimized


def build_project(
    g: Graph,
    *,
    shapes: dict[str, int] | None = None,
    soc: SocSpec | str = "Ascend910B3",
    opt_level: int = 2,
    tile_length: int | dict[str, int] | None = None,
    strict: bool = False,
) -> AscendcProject:
    """Plan, tile and render the AscendC project of `g` (not written anywhere).

    shapes: values of the graph's symbolic dims; soc: a `SocSpec` or preset name;
    tile_length: force tile lengths (all kernels, or by kernel name), repaired when the
    hardware would reject them unless `strict`.
    """
    soc = SocSpec.named(soc) if isinstance(soc, str) else soc
    static = static_graph(g, shapes, opt_level)
    plan = build_plan(static)
    planner = _Planner(plan, soc, tile_length, strict)
    kernels = planner.plan_all()
    project = AscendcProject(
        static, plan, soc, kernels, planner.diagnostics, dict(shapes or {}), planner.forced
    )
    project.files = render_files(project)
    return project


def emit_ascendc(g: Graph, out_dir, **options) -> AscendcProject:
    """Write the AscendC op project of `g` to `out_dir` (see `build_project` for options).

    >>> import mdsl, tempfile, pathlib
    >>> with mdsl.Graph("axpy") as g:
    ...     x = g.input("x", ("N", 1000), "float16")
    ...     g.output(mdsl.ops.relu(x * 2.0 + 1.0), "y")
    >>> out = tempfile.mkdtemp()
    >>> project = emit_ascendc(g, out, shapes={"N": 4})
    >>> sorted(p.name for p in pathlib.Path(out, "op_host").iterdir())
    ['axpy_tiling.cpp', 'axpy_tiling.h', 'mdsl_tiling.h']
    >>> [(k.origin, [n.op_type for n in k.kernel.nodes]) for k in project.kernels]
    [('pointwise', ['Mul', 'Add', 'Relu'])]
    """
    project = build_project(g, **options)
    project.write(out_dir)
    return project


class _Planner:
    def __init__(self, plan: Plan, soc: SocSpec, tile_length, strict: bool):
        self.plan = plan
        self.soc = soc
        self.tile_length = tile_length
        self.strict = strict
        self.diagnostics: list[Diagnostic] = []
        self.rejected: list[Diagnostic] = []
        self.forced: dict[str, int] = {}

    def plan_all(self) -> list[PlannedKernel]:
        planned = []
        for k in self.plan.kernels:
            planned += self.plan_kernel(k)
        if self.rejected:
            raise TilingError(self.rejected)
        return planned

    def plan_kernel(self, k) -> list[PlannedKernel]:
        origin = ORIGIN[type(k)]
        try:
            adapted = self.adapt(k)
            return [self.tile(a, origin) for a in adapted]
        except NotVectorizable as why:
            return [self.fallback(k, origin, str(why))]
        except TilingError as e:
            self.rejected += e.diagnostics
            return []

    # -- adaptation -----------------------------------------------------------------------------
    def adapt(self, k) -> list:
        if isinstance(k, kir.Pointwise):
            return [adapt_pointwise(k)]
        if isinstance(k, kir.Rowwise):
            return [adapt_rowwise(k)]
        if isinstance(k, kir.Gemm):
            return [adapt_gemm(k)]
        if isinstance(k, kir.Conv):
            return adapt_conv(k)
        if isinstance(k, kir.Callback):
            matmul = cube_matmul(self.plan, k)
            if matmul is not None:
                return [matmul]
            raise NotVectorizable(
                "no generated form (the compiled backends call back into Python too)"
            )
        raise NotVectorizable(f"no AscendC template for {ORIGIN[type(k)]} kernels")

    def fallback(self, k, origin: str, why: str) -> PlannedKernel:
        if isinstance(k, kir.Callback):
            reads, writes = list(k.inputs), list(k.outputs)
        else:
            r, w = plan_kernel_buffers(k)
            order = {n: i for i, n in enumerate(self.plan.buffers)}
            reads = sorted(
                (b for b in r if b in self.plan.buffers and self.plan.buffers[b].kind != "scratch"),
                key=order.get,
            )
            writes = sorted((b for b in w if self.plan.buffers[b].kind != "scratch"), key=order.get)
        host = HostKernel(k.name, list(k.nodes), why, reads, writes, k)
        self.diagnostics.append(
            Diagnostic("fallback", k.name, _refs(k.nodes), f"runs on the host: {why}")
        )
        return PlannedKernel(host, None, None, origin)

    # -- tiling -----------------------------------------------------------------------------------
    def forced_tile(self, name: str) -> int | None:
        if isinstance(self.tile_length, dict):
            return self.tile_length.get(name)
        return self.tile_length

    def tile(self, a, origin: str) -> PlannedKernel:
        nodes = _refs(a.nodes)
        self.check_copies(a, nodes)
        cores = 1 if scatters(a) else None  # no two cores store into one cache line
        if isinstance(a, VectorKernel):
            self.check_vector_dtypes(a, nodes)
            body = VectorBody(a)
            tiling = self.rows(a.name, nodes, a.rows, a.row_length, body.resources(True), cores)
            return PlannedKernel(a, body, tiling, origin, body.notes, tiling.notes)
        if isinstance(a, RowKernel):
            self.check_row_dtypes(a, nodes)
            a, body = self.row_body(a)
            tiling = self.rows(a.name, nodes, a.rows, a.row_length, body.resources(), cores)
            return PlannedKernel(a, body, tiling, origin, [], tiling.notes)
        if isinstance(a, MatmulKernel):
            return self.tile_matmul(a, origin, nodes)
        if isinstance(a, Im2colKernel):
            return self.tile_im2col(a, origin, nodes)
        raise TypeError(f"unknown AscendC kernel {a!r}")

    def row_body(self, a: RowKernel) -> tuple[RowKernel, RowBody]:
        """A row that fits in the UB stays there across the phases (read from GM once);
        a longer row, or a forced tile length, streams through tiles in every phase."""
        if self.forced_tile(a.name) is None:
            held = dataclasses.replace(a, resident=True)
            body = RowBody(held)
            r = body.resources()
            if (
                r.fixed_bytes + r.bytes_per_element * align_up(a.row_length, r.align)
                <= self.soc.ub_bytes
            ):
                return held, body
        return a, RowBody(a)

    def rows(self, name, nodes, rows, row_length, resources, cores=None, soc=None) -> RowTiling:
        tiling = plan_rows(
            name,
            rows=rows,
            row_length=row_length,
            resources=resources,
            soc=soc or self.soc,
            nodes=nodes,
            tile_length=self.forced_tile(name),
            strict=self.strict,
            cores=cores,
        )
        if self.forced_tile(name) is not None:
            self.forced[name] = tiling.tile_length
        self.diagnostics += tiling.notes
        return tiling

    def tile_matmul(self, a: MatmulKernel, origin: str, nodes) -> PlannedKernel:
        for dtype in {a.dtype, a.out_dtype}:
            if not self.soc.supports_cube(dtype):
                self.reject(
                    a.name,
                    nodes,
                    f"matmul in {dtype}: the cube unit of {self.soc.name} supports {_names(self.soc.cube_dtypes)}; cast the operands first",
                )
        body = None
        epilogue_tiling = None
        if a.epilogue is not None:
            self.check_vector_dtypes(a.epilogue, nodes)
            # with the Matmul client (MIX mode) the epilogue reads the result blocks in the UB
            a.result_in_ub = self.soc.split_cores
            body = VectorBody(a.epilogue, a.result_in_ub)
            resources = body.resources(False)
            if a.result_in_ub:  # and a block of at least 16 result rows beside its tiles
                per_element = resources.bytes_per_element + MIN_BLOCK_ROWS * a.out_dtype.itemsize
                resources = dataclasses.replace(resources, bytes_per_element=per_element)
            # in MIX mode the Matmul client's message area takes the end of the UB
            reserved = KFC_MSG_BYTES if self.soc.split_cores else 0
            room = dataclasses.replace(self.soc, ub_bytes=self.soc.ub_bytes - reserved)
            epilogue_tiling = self.rows(a.name, nodes, 1, a.n, resources, cores=1, soc=room)
        return PlannedKernel(
            a, body, MatmulTiling(a.batch, epilogue_tiling), origin, body.notes if body else []
        )

    def tile_im2col(self, a: Im2colKernel, origin: str, nodes) -> PlannedKernel:
        need = BUFFER_NUM * 4 * (align_up(a.width, 8) + align_up(a.out_hw[1], 8))
        if need > self.soc.ub_bytes:
            self.reject(
                a.name,
                nodes,
                f"an image row of {a.width} floats and an output row of {a.out_hw[1]} need {need} bytes of Unified Buffer, over the {self.soc.ub_bytes}-byte UB of {self.soc.name}",
            )
        tiling = UnitTiling.spread(a.units, self.soc.vector_cores)
        return PlannedKernel(
            a, None, tiling, origin, ["image rows are gathered through the scalar unit (slow path)"]
        )

    # -- capability checks ---------------------------------------------------------------------------
    def reject(self, name, nodes, message) -> None:
        raise TilingError([Diagnostic("rejected", name, nodes, message)])

    def check_copies(self, a, nodes) -> None:
        if self.soc.has("DataCopyPad"):
            return
        unaligned = unaligned_copies(a)
        if unaligned:
            self.reject(
                a.name,
                nodes,
                f"{'; '.join(unaligned)} need DataCopyPad ({FEATURES['DataCopyPad']}), which "
                f"{self.soc.name} does not have; pad the rows to whole 32-byte blocks",
            )

    def check_vector_dtypes(self, a: VectorKernel, nodes) -> None:
        if a.is_copy:
            return  # a copy moves bytes: any dtype
        dtypes = {s.dtype for s in a.loads.values()} | {s.dtype for s, _ in a.stores}
        dtypes |= {let.dtype for let in a.lets}
        self._vector_dtypes(a.name, nodes, dtypes)

    def check_row_dtypes(self, a: RowKernel, nodes) -> None:
        dtypes = {s.dtype for s in a.loads.values()}
        dtypes |= {p.stream.dtype for p in a.phases if hasattr(p, "stream")}
        dtypes |= {p.dtype for p in a.phases if isinstance(p, (kir.Let, kir.Reduce))}
        self._vector_dtypes(a.name, nodes, dtypes)

    def _vector_dtypes(self, name, nodes, dtypes) -> None:
        lacking = sorted(str(d) for d in dtypes if not self.soc.supports_vector(d))
        if lacking:
            self.reject(
                name,
                nodes,
                f"{', '.join(lacking)} arithmetic: the vector unit of {self.soc.name} supports "
                f"{_names(self.soc.vector_dtypes)}; cast to float32 or float16 before these ops",
            )


def _names(dtypes) -> str:
    return ", ".join(sorted(str(d) for d in dtypes))


def _refs(nodes) -> tuple[str, ...]:
    return tuple(node_line(n) for n in nodes)


# -- half-precision MatMul (the C plan leaves it to Python; the cube unit takes it) ---------------
def cube_matmul(plan: Plan, k: kir.Callback) -> MatmulKernel | None:
    """A MatMul callback in float16/bfloat16 as a cube kernel (no epilogue)."""
    node = plan.callbacks[k.index]
    if node.op_type != "MatMul" or len(k.inputs) != 2 or None in k.inputs:
        return None
    a, b = node.inputs
    out = node.outputs[0]
    if not (a.dtype == b.dtype == out.dtype and a.dtype in (DType.float16, DType.bfloat16)):
        return None
    from mdsl.ops.shape_rules import broadcast_shapes

    a_shape = (1, *a.shape) if len(a.shape) == 1 else tuple(a.shape)
    b_shape = (*b.shape, 1) if len(b.shape) == 1 else tuple(b.shape)
    m, kk, n = a_shape[-2], a_shape[-1], b_shape[-1]
    batch = tuple(broadcast_shapes(a_shape[:-2], b_shape[:-2]))

    def batched(buffer, shape, dtype):
        own = broadcast_strides(tuple(shape[:-2]), batch)
        return kir.Access(buffer, dtype, 0, tuple(s * shape[-1] * shape[-2] for s in own))

    out_strides = tuple(s * m * n for s in contiguous_strides(batch))
    return MatmulKernel(
        k.name,
        list(k.nodes),
        a.dtype,
        out.dtype,
        batch,
        batched(k.inputs[0], a_shape, a.dtype),
        batched(k.inputs[1], b_shape, b.dtype),
        kir.Access(k.outputs[0], out.dtype, 0, out_strides),
        m,
        n,
        kk,
        False,
        False,
        kk,
        n,
        None,
    )


# -- files -------------------------------------------------------------------------------------------
def render_files(project: AscendcProject) -> dict[str, str]:
    env = environment()
    stem, name = project.stem, project.graph.name
    device = project.device_kernels
    tiling_ctx = [
        {
            **host_tiling_context(pk, project.forced, project.soc),
            "fields": tiling_fields(pk),
            "op": f"Mdsl{tiling_type(pk.name)[:-10]}",
        }
        for pk in device
    ]
    common = {"graph_name": comment_text(name), "stem": stem, "prefix": project.prefix}
    files = {
        f"op_kernel/{pk.name}.cpp": render_kernel(env, project.plan, pk, name, stem, project.soc)
        for pk in device
    }
    files["op_kernel/mdsl_kernel_common.h"] = env.get_template("kernel_common.h.j2").render(
        common, soc=project.soc.name, pad_copies=project.soc.has("DataCopyPad")
    )
    files[f"op_kernel/{stem}_tiling_data.h"] = env.get_template("tiling_data.h.j2").render(
        common, kernels=tiling_ctx
    )
    files[f"op_host/{stem}_tiling.h"] = env.get_template("tiling.h.j2").render(
        common, kernels=tiling_ctx
    )
    files[f"op_host/{stem}_tiling.cpp"] = env.get_template("host_tiling.cpp.j2").render(
        common, kernels=tiling_ctx
    )
    files["op_host/mdsl_tiling.h"] = env.get_template("mdsl_tiling.h.j2").render(common)
    files[f"host/{stem}_runner.cpp"] = env.get_template("runner.cpp.j2").render(
        common, **runner_context(project)
    )
    files["CMakeLists.txt"] = env.get_template("CMakeLists.txt.j2").render(
        common, soc=project.soc.name, kernel_files=[f"op_kernel/{pk.name}.cpp" for pk in device]
    )
    files["README.md"] = env.get_template("README.md.j2").render(common, **readme_context(project))
    return dict(sorted(files.items()))


def runner_context(project: AscendcProject) -> dict:
    plan = project.plan
    used: list[str] = []
    steps = []
    host_index = 0
    for step, pk in enumerate(project.kernels):
        if pk.on_device:
            sig = _signature(plan, pk.kernel)
            used += sig["buffers"]
            ttype = f"optiling::{tiling_type(pk.name)}"
            lines = [
                "{",
                f"    {ttype} tiling;",
                f"    const uint32_t blockDim = optiling::Tiling_{pk.name}(*platform, tiling);",
                "    if (blockDim == 0) {",
                f"        return -{step + 1};",
                "    }",
                "    std::vector<uint8_t> staged(tiling.GetDataSize());",
                "    tiling.SaveToBuffer(staged.data(), staged.size());",
                "    uint8_t *tilingSlot = tilingDevice + tilingOffset;",
                "    MDSL_COPY_TO_DEVICE(tilingSlot, staged.data(), staged.size());",
                "    tilingOffset += (staged.size() + 31) / 32 * 32;",
                f"    {pk.name}_do(blockDim, nullptr, stream, {sig['launch_args'].replace('tiling', 'tilingSlot')});",
                "}",
            ]
            kind = UNIT[type(pk.kernel)]
        else:
            k: HostKernel = pk.kernel
            used += [b for b in [*k.reads, *k.writes] if b]
            buffers = ", ".join(b or "nullptr" for b in [*k.reads, *k.writes]) or "nullptr"
            lines = [
                "{",
                f"    void *buffers[] = {{{buffers}}};",
                "    MDSL_SYNC(stream);",
                f"    if (fallback == nullptr || fallback({host_index}, buffers) != 0) {{",
                f"        return {step + 1};",
                "    }",
                "}",
            ]
            host_index += 1
            kind = f"host fallback {host_index - 1}"
        steps.append({"name": pk.name, "kind": kind, "lines": lines})
    return {
        "device": [
            {
                "name": pk.name,
                "type": tiling_type(pk.name),
                "launch_params": _signature(plan, pk.kernel)["launch_params"],
            }
            for pk in project.device_kernels
        ],
        "steps": steps,
        "buffer_lines": _buffer_lines(plan, used),
        "arena_bytes": plan.memory.arena_bytes,
        "user_workspace_bytes": project.user_workspace_bytes,
        "uses_matmul": any(isinstance(pk.kernel, MatmulKernel) for pk in project.kernels),
    }


def _buffer_lines(plan: Plan, used: list[str]) -> list[str]:
    lines = []
    for name, spec in plan.buffers.items():
        if name not in used:
            continue
        if spec.kind == "input":
            source = f"(uint8_t *)inputs[{spec.slot}]"
        elif spec.kind == "output":
            source = f"(uint8_t *)outputs[{spec.slot}]"
        elif spec.kind == "const":
            source = f"(uint8_t *)consts[{spec.slot}]"
        else:
            source = f"arena + {plan.memory.offsets[name]}"
        lines.append(
            f"uint8_t *{name} = {source};  /* {comment_text(spec.tensor)}: {spec.dtype} x {spec.elements} */"
        )
    return lines


def readme_context(project: AscendcProject) -> dict:
    rows, fallbacks, slow = [], [], []
    host_index = 0
    for pk in project.kernels:
        nodes = (
            "<br>".join(md_cell(node_line(n)) for n in pk.kernel.nodes)
            or "(copy of a graph output)"
        )
        rows.append(
            {
                "name": pk.name,
                "unit": UNIT[type(pk.kernel)],
                "nodes": nodes,
                "tiling": md_cell(tiling_summary(pk)),
                "gm": gm_bytes(pk.kernel) if pk.on_device else "-",
                "minimum": minimum_bytes(pk.kernel, project.plan) if pk.on_device else "-",
            }
        )
        if not pk.on_device:
            fallbacks.append(
                {
                    "index": host_index,
                    "name": pk.name,
                    "nodes": nodes,
                    "why": md_cell(pk.kernel.reason),
                }
            )
            host_index += 1
        if any("slow path" in n for n in pk.notes):
            slow.append(f"`{pk.name}`")
    return {
        "soc": project.soc,
        "shapes": ", ".join(f"{k}={v}" for k, v in project.shapes.items()),
        "arena_bytes": project.plan.memory.arena_bytes,
        "device_count": len(project.device_kernels),
        "host_count": len(project.host_kernels),
        "rows": rows,
        "fallbacks": fallbacks,
        "diagnostics": [md_cell(str(d)) for d in project.diagnostics if d.level != "fallback"],
        "slow": ", ".join(slow),
        "epilogue_in_ub": any(
            isinstance(pk.kernel, MatmulKernel) and pk.kernel.result_in_ub for pk in project.kernels
        ),
    }


def tiling_summary(pk: PlannedKernel) -> str:
    t = pk.tiling
    if isinstance(t, RowTiling):
        return (
            f"{t.block_dim} blocks; {t.rows} rows x {t.row_length}, tile {t.tile_length} "
            f"({t.tiles_per_row} per row, tail {t.tail_length}); UB {t.ub_bytes} B"
        )
    if isinstance(t, UnitTiling):
        return f"{t.block_dim} blocks; {t.units} image rows"
    if isinstance(t, MatmulTiling):
        k: MatmulKernel = pk.kernel
        text = f"{k.batch} x ({k.m} x {k.k}) @ ({k.k} x {k.n}) {k.dtype}; blocks from matmul_tiling"
        if t.epilogue is not None:
            text += f"; epilogue tile {t.epilogue.tile_length}, UB {t.epilogue.ub_bytes} B"
        return text
    return "-"
