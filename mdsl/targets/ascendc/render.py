"""AscendC sources of planned kernels, rendered through `csrc/templates/ascendc/`.

Each kernel becomes one `op_kernel/<name>.cpp` (a kernel class with Init/Process and the
CopyIn/Compute/CopyOut stages, the `extern "C" __global__ __aicore__` entry and its
`<name>_do` launch wrapper); the host side is one tiling header (`BEGIN_TILING_DATA_DEF`
structs), one file of host tiling functions and one runner that launches the kernels of
the graph in order over the memory plan. Identifiers come from the planner's buffer and
variable names; user strings (node names, source lines) appear only in comments.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import jinja2

from mdsl.codegen.plan import Plan
from mdsl.codegen.templates import template_environment
from mdsl.ir.dtype import DType
from mdsl.ir.naming import c_comment as comment_text
from mdsl.targets.ascendc.body import (
    CTYPES,
    RowBody,
    VectorBody,
    decompose,
    method,
    scalar_helpers,
)
from mdsl.targets.ascendc.kernels import (
    WORKSPACE,
    HostKernel,
    Im2colKernel,
    MatmulKernel,
    RowKernel,
    VectorKernel,
)
from mdsl.targets.ascendc.needs import scatters
from mdsl.targets.ascendc.soc import SocSpec
from mdsl.targets.ascendc.tiling import Diagnostic, RowTiling, UnitTiling

CUBE_TYPES = {
    DType.float16: "DT_FLOAT16",
    DType.bfloat16: "DT_BF16",
    DType.float32: "DT_FLOAT",
    DType.int8: "DT_INT8",
    DType.int32: "DT_INT32",
}


@dataclass(slots=True)
class MatmulTiling:
    """What the planner fixes for a matmul kernel; M/N blocks come from matmul_tiling at
    run time (`op_host`), the epilogue's tile length from the same rule as vector tiles."""

    batch: int
    epilogue: RowTiling | None


@dataclass(slots=True)
class PlannedKernel:
    """One AscendC kernel with its rendered parts and its tiling."""

    kernel: object
    body: VectorBody | RowBody | None
    tiling: RowTiling | UnitTiling | MatmulTiling | None
    origin: str  # the Kernel IR kind it came from
    notes: list[str] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.kernel.name

    @property
    def on_device(self) -> bool:
        return not isinstance(self.kernel, HostKernel)


def camel(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in re.split(r"[^0-9A-Za-z]+", name) if part)


def tiling_type(name: str) -> str:
    return f"{camel(name)}TilingData"


def node_line(ref) -> str:
    where = f" at {ref.source}" if ref.source else ""
    return comment_text(f"{ref.name} ({ref.op_type}){where}")


def environment() -> jinja2.Environment:
    return template_environment("ascendc")


# -- kernel GM buffers ----------------------------------------------------------------------------
def kernel_buffers(k) -> list[str]:
    """The global buffers a device kernel touches (workspace excluded), deduplicated."""
    names: list[str] = []

    def add(buffer: str) -> None:
        if buffer != WORKSPACE and buffer not in names:
            names.append(buffer)

    if isinstance(k, VectorKernel):
        for s in [*k.loads.values(), *(s for s, _ in k.stores)]:
            add(s.buffer)
    elif isinstance(k, RowKernel):
        for s in k.loads.values():
            add(s.buffer)
        for p in k.phases:
            if hasattr(p, "stream"):
                add(p.stream.buffer)
    elif isinstance(k, MatmulKernel):
        # with the result in the UB, C is in GM only where the epilogue stores it
        matrices = (k.a, k.b) if k.result_in_ub else (k.a, k.b, k.out)
        for access in matrices:
            add(access.buffer)
        if k.epilogue is not None:
            for b in kernel_buffers(k.epilogue):
                add(b)
    elif isinstance(k, Im2colKernel):
        add(k.x)
    return names


def ordered(plan: Plan, names: list[str]) -> list[str]:
    order = {n: i for i, n in enumerate(plan.buffers)}
    return sorted(names, key=lambda n: order[n])


def _signature(plan: Plan, k) -> dict:
    buffers = ordered(plan, kernel_buffers(k))
    names = [*buffers, "workspace", "tiling"]
    return {
        "buffers": buffers,
        "entry_params": ", ".join(f"GM_ADDR {n}" for n in names),
        "launch_params": ", ".join(f"uint8_t *{n}" for n in names),
        "launch_args": ", ".join(names),
    }


def _gm_lines(plan: Plan, buffers: list[str]) -> tuple[list[str], list[str]]:
    """(SetGlobalBuffer lines, GlobalTensor members) for `buffers`."""
    init, members = [], []
    for b in buffers:
        spec = plan.buffers[b]
        ctype = CTYPES[spec.dtype]
        init.append(f"gm_{b}.SetGlobalBuffer((__gm__ {ctype} *){b}, {spec.elements});")
        members.append(f"GlobalTensor<{ctype}> gm_{b};")
    return init, members


def _common(pk: PlannedKernel, graph_name: str, kind: str, stem: str, soc: SocSpec) -> dict:
    k = pk.kernel
    return {
        "kernel_mode": _kernel_mode(soc, isinstance(k, MatmulKernel)),
        "op_package": False,
        "stem": stem,
        "name": k.name,
        "kind": kind,
        "graph_name": comment_text(graph_name),
        "nodes": [node_line(n) for n in k.nodes],
        "notes": [comment_text(n) for n in pk.notes],
        "includes": [],
        "cls": f"Kernel{camel(k.name)}",
        "tiling_type": tiling_type(k.name),
    }


def _entry_lines(cls: str, ttype: str, init_args: list[str], matmul: bool = False) -> list[str]:
    """The entry's body: the tiling struct copied from GM (kernel-launch projects pass its
    address; GET_TILING_DATA exists only in op packages), the kernel object, its run."""
    lines = [f"{ttype} tilingData;", "MdslCopyTiling(&tilingData, tiling);", f"{cls} op;"]
    if matmul:  # the system workspace is set by the launch (no deprecated SetSysWorkspace)
        lines.append(
            "REGIST_MATMUL_OBJ(&op.pipe_, GetSysWorkSpacePtr(), op.mm, &tilingData.cubeTiling);"
        )
    lines.append(f"op.Init({', '.join([*init_args, 'tilingData'])});")
    lines.append("op.Process();")
    if "workspace" not in init_args and not matmul:
        lines.append("(void)workspace;")
    return lines


def _task_type(soc: SocSpec) -> list[str]:
    """A matmul kernel's task type: one cube core and two vector cores per block."""
    return ["KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);"] if soc.split_cores else []


def _kernel_mode(soc: SocSpec, matmul: bool) -> str | None:
    """tikicpulib's kernel mode for the CPU debug launch (separate AIC/AIV cores only)."""
    if not soc.split_cores:
        return None
    return "MIX_MODE" if matmul else "AIV_MODE"


# -- kernels -------------------------------------------------------------------------------------
def render_vector(
    env, plan: Plan, pk: PlannedKernel, graph_name: str, stem: str, soc: SocSpec, entry=None
) -> str:
    body: VectorBody = pk.body
    sig = _signature(plan, pk.kernel)
    gm_init, gm_members = _gm_lines(plan, sig["buffers"])
    kind = "copy" if pk.kernel.is_copy else "fused pointwise (vector unit)"
    ctx = _common(pk, graph_name, kind, stem, soc)
    ctx.update(
        sig,
        init_params=", ".join(f"GM_ADDR {b}" for b in sig["buffers"]),
        init_lines=gm_init + body.pool.init,
        methods="\n".join(body.methods),
        members=gm_members + body.pool.members + body.members,
        align=body.align,
        entry_lines=_entry_lines(ctx["cls"], ctx["tiling_type"], sig["buffers"]),
    )
    return env.get_template("vector_kernel.cpp.j2").render(ctx, **(entry or {}))


def render_row(
    env, plan: Plan, pk: PlannedKernel, graph_name: str, stem: str, soc: SocSpec, entry=None
) -> str:
    body: RowBody = pk.body
    k: RowKernel = pk.kernel
    sig = _signature(plan, k)
    gm_init, gm_members = _gm_lines(plan, sig["buffers"])
    ctx = _common(pk, graph_name, "row reduction (vector unit)", stem, soc)
    streams = [*body.tile_loads, *body.row_stores, *body.scalar_stores]
    locate = body.streams.locate_lines(k.outer_shape, streams, [])
    scalars = body.streams.locate_lines(k.outer_shape, [], body.scalar_loads)
    methods = method("void Locate(uint64_t row, uint64_t col)", [*locate, "(void)col;"])
    methods += method("void LoadRowScalars(uint64_t row)", scalars)
    methods += body.methods + scalar_helpers(body.functions)
    members = gm_members + body.pool.members
    members += [f"int64_t {body.streams.base(s)} = 0;" for s in streams]
    members += [f"float {s.name} = 0.0f;" for s in body.scalar_loads]
    members += body.members_scalars
    ctx.update(
        sig,
        init_params=", ".join(f"GM_ADDR {b}" for b in sig["buffers"]),
        init_lines=gm_init + body.pool.init,
        methods="\n".join(methods),
        members=members,
        align=body.align,
        phase_lines=["LoadRowScalars(row);", *body.phase_lines],
        block_before=body.block_before,
        block_after=body.block_after,
        phase_comment=(
            "the row is read from GM once and stays in UB for all of them"
            if body.resident
            else "each streams the row through UB tiles"
        ),
        entry_lines=_entry_lines(ctx["cls"], ctx["tiling_type"], sig["buffers"]),
    )
    return env.get_template("row_kernel.cpp.j2").render(ctx, **(entry or {}))


def render_matmul(
    env, plan: Plan, pk: PlannedKernel, graph_name: str, stem: str, soc: SocSpec, entry=None
) -> str:
    k: MatmulKernel = pk.kernel
    sig = _signature(plan, k)
    ctx = _common(
        pk, graph_name, "matmul (cube unit, Matmul API) + epilogue (vector unit)", stem, soc
    )
    ctx["includes"] = ["lib/matmul_intf.h"]
    init = []
    matrices = (("gmA_", k.a), ("gmB_", k.b)) + (() if k.result_in_ub else (("gmC_", k.out),))
    for member, access in matrices:
        init.append(_matrix_buffer(plan, member, access.buffer, k))
    gm_init, gm_members, methods, members, align = [], [], "", [], 8
    epilogue = pk.body
    if epilogue is not None:
        ep_buffers = ordered(plan, kernel_buffers(k.epilogue))
        gm_init, gm_members = _gm_lines(plan, ep_buffers)
        methods = "\n".join(epilogue.methods)
        members = gm_members + epilogue.pool.members + epilogue.members
        align = epilogue.align
        init += gm_init + epilogue.pool.init
        if k.result_in_ub:  # one base block of C, its rows padded to whole tiles
            init.append(
                f"pipe_.InitBuffer(inQueue_c_, 1, tiling_.cubeTiling.baseM * tiling_.tileLength * sizeof({CTYPES[k.out_dtype]}));"
            )
    batch_lines, names = decompose("batch", k.batch_shape)
    batch_lines = [x.replace("rest", "restBatch") for x in batch_lines]
    for label, access in (("A", k.a), ("B", k.b), ("C", k.out)):
        terms = [str(access.offset)] + [f"{n} * {s}" for n, s in zip(names, access.strides) if s]
        batch_lines.append(f"const uint64_t offset{label} = {' + '.join(terms)};")
    if not k.batch_shape:
        batch_lines.append("(void)batch;")
    ctx.update(
        sig,
        init_params=", ".join(f"GM_ADDR {b}" for b in [*sig["buffers"], "workspace"]),
        init_lines=init,
        methods=methods,
        members=members,
        align=align,
        epilogue=epilogue is not None,
        result_in_ub=k.result_in_ub,
        shared_loads=bool(epilogue is not None and epilogue.shared),
        a_ctype=CTYPES[k.dtype],
        b_ctype=CTYPES[k.dtype],
        c_ctype=CTYPES[k.out_dtype],
        trans_a="true" if k.trans_a else "false",
        trans_b="true" if k.trans_b else "false",
        a_block="m0" if k.trans_a else f"static_cast<uint64_t>(m0) * {k.lda}",
        b_block=f"static_cast<uint64_t>(n0) * {k.ldb}" if k.trans_b else "n0",
        batch_lines=batch_lines,
        m=k.m,
        n=k.n,
        local_workspace=soc.matmul_local_workspace,
        entry_lines=_task_type(soc)
        + _entry_lines(ctx["cls"], ctx["tiling_type"], [*sig["buffers"], "workspace"], matmul=True),
    )
    return env.get_template("matmul_kernel.cpp.j2").render(ctx, **(entry or {}))


def _matrix_buffer(plan: Plan, member: str, buffer: str, k: MatmulKernel) -> str:
    if buffer == WORKSPACE:
        ctype = CTYPES[k.dtype]
        elements = k.batch * k.k * k.n
        return (
            f"{member}.SetGlobalBuffer((__gm__ {ctype} *)GetUserWorkspace(workspace), {elements});"
        )
    spec = plan.buffers[buffer]
    return f"{member}.SetGlobalBuffer((__gm__ {CTYPES[spec.dtype]} *){buffer}, {spec.elements});"


def render_im2col(
    env, plan: Plan, pk: PlannedKernel, graph_name: str, stem: str, soc: SocSpec, entry=None
) -> str:
    k: Im2colKernel = pk.kernel
    sig = _signature(plan, k)
    ctx = _common(pk, graph_name, "convolution columns (im2col, vector unit)", stem, soc)
    (kh, kw), (oh, ow) = k.kernel, k.out_hw
    ctx.update(
        sig,
        entry_lines=_entry_lines(ctx["cls"], ctx["tiling_type"], [k.x, "workspace"]),
        x_elements=plan.buffers[k.x].elements,
        col_elements=k.col_elements,
        c=k.channels,
        cg=k.channels // k.group,
        h=k.height,
        w=k.width,
        group=k.group,
        k=k.rows_per_image,
        kh=kh,
        kw=kw,
        oh=oh,
        ow=ow,
        ohw=oh * ow,
        sh=k.stride[0],
        sw=k.stride[1],
        ph=k.pad[0],
        pw=k.pad[1],
        dh=k.dilation[0],
        dw=k.dilation[1],
    )
    return env.get_template("im2col_kernel.cpp.j2").render(ctx, **(entry or {}))


RENDERERS = {
    VectorKernel: render_vector,
    RowKernel: render_row,
    MatmulKernel: render_matmul,
    Im2colKernel: render_im2col,
}


def render_kernel(
    env, plan: Plan, pk: PlannedKernel, graph_name: str, stem: str, soc: SocSpec, entry=None
) -> str:
    """The kernel's source; `entry` overrides the context of its entry function (an op
    package's GET_TILING_DATA entry instead of the kernel-launch one)."""
    return RENDERERS[type(pk.kernel)](env, plan, pk, graph_name, stem, soc, entry)


# -- host side ------------------------------------------------------------------------------------
ROW_FIELDS = (
    "rows",
    "rowLength",
    "tileLength",
    "tilesPerRow",
    "tailLength",
    "units",
    "blockDim",
    "unitsPerBlock",
    "unitsRemainder",
)
UNIT_FIELDS = ("units", "blockDim", "unitsPerBlock", "unitsRemainder")
MATMUL_FIELDS = ("batch", "mBlocks", "nBlocks", *UNIT_FIELDS, "tileLength", "localWorkspace")


def tiling_fields(pk: PlannedKernel) -> tuple[str, ...]:
    if isinstance(pk.kernel, (VectorKernel, RowKernel)):
        return ROW_FIELDS
    if isinstance(pk.kernel, MatmulKernel):
        return MATMUL_FIELDS
    return UNIT_FIELDS


def host_tiling_context(pk: PlannedKernel, forced: dict[str, int], soc: SocSpec) -> dict:
    """Values the host tiling function of `pk` is generated from."""
    k = pk.kernel
    ctx = {"name": k.name, "type": tiling_type(k.name), "kind": type(k).__name__}
    if isinstance(k, (VectorKernel, RowKernel)):
        r = pk.body.resources() if isinstance(k, RowKernel) else pk.body.resources(True)
        ctx.update(
            rows=k.rows,
            row_length=k.row_length,
            bpe=r.bytes_per_element,
            fixed=r.fixed_bytes,
            align=r.align,
            split="true" if r.split_rows else "false",
            forced=forced.get(k.name, 0),
            resident=getattr(k, "resident", False),
            # strided stores go through the data cache: one core, no shared cache lines
            cores="1" if scatters(k) else "platform.GetCoreNumAiv()",
        )
    elif isinstance(k, MatmulKernel):
        ctx.update(
            batch=k.batch,
            m=k.m,
            n=k.n,
            k=k.k,
            a_type=CUBE_TYPES[k.dtype],
            c_type=CUBE_TYPES[k.out_dtype],
            trans_a="true" if k.trans_a else "false",
            trans_b="true" if k.trans_b else "false",
            epilogue=pk.body is not None,
            result_in_ub=k.result_in_ub,
            c_bytes=k.out_dtype.itemsize,
            sub_blocks=soc.vector_blocks_per_core,
            local_workspace=soc.matmul_local_workspace,
        )
        if pk.body is not None:
            r = pk.body.resources(False)
            ctx.update(
                bpe=r.bytes_per_element,
                fixed=r.fixed_bytes,
                align=r.align,
                forced=forced.get(k.name, 0),
            )
    elif isinstance(k, Im2colKernel):
        ctx.update(units=k.units)
    return ctx
