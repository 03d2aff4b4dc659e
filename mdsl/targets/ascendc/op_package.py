"""A CANN custom-operator package (the msopgen layout) from one mdsl op or small graph.

The field report's workflow, done for the real toolchain: declare the op (`@mdsl.op_proto`
with its dtype lists and attrs, its InferShape), bind an implementation mdsl can lower (an
"expr" binding, or write the op as a small graph of mdsl ops) and a Python reference, then

    mdsl.emit(g, target="ascendc", out_dir="build/my_op", project="custom_op")

writes what `msopgen` would scaffold, filled in:

    op_host/<op>.cpp         OpDef (inputs/outputs: ParamType, DataType, Format; attrs with
                             types and defaults), SetInferShape/SetInferDataType, SetTiling,
                             AICore().AddConfig per SoC; the tiling function
    op_host/<op>_tiling.h    BEGIN_TILING_DATA_DEF ... REGISTER_TILING_DATA_CLASS(<Op>, ...)
    op_host/<op>_kernel_tiling.cpp, mdsl_tiling.h   the tiling rule (UB size, cores)
    op_kernel/<op>.cpp       the kernel, reading its tiling with GET_TILING_DATA
    CMakeLists.txt, CMakePresets.json, build.sh     the op build (asc-devkit npu_op_* rules)
    testcases/<Op>.json      the case description (msOpST), golden data testcases/data/*.bin
    README.md                what each file is, how to build, install and test

`g` is the op's example: a graph whose inputs are the op's inputs (same names, the shapes
the kernel is generated for) and whose outputs are the op's outputs; when it holds one node
of a custom op, the OpDef takes that op's type, input/output names and attrs. Golden
outputs come from the op's Python ("python") binding when it has one, else from
`mdsl.interpret`. The op must lower to one device kernel (one op, one kernel launch).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import numpy as np

from mdsl.ir.dtype import DType
from mdsl.ir.errors import CompileError
from mdsl.ir.graph import Graph
from mdsl.targets.ascendc.project import AscendcProject, build_project
from mdsl.targets.ascendc.render import (
    CTYPES,
    MatmulKernel,
    _signature,
    environment,
    host_tiling_context,
    render_kernel,
    tiling_fields,
)
from mdsl.targets.ascendc.shape_rules import choose, infer_shape_cpp
from mdsl.targets.ascendc.soc import SocSpec

GE_TYPES = {
    DType.float32: "ge::DT_FLOAT",
    DType.float16: "ge::DT_FLOAT16",
    DType.bfloat16: "ge::DT_BF16",
    DType.int8: "ge::DT_INT8",
    DType.uint8: "ge::DT_UINT8",
    DType.int16: "ge::DT_INT16",
    DType.int32: "ge::DT_INT32",
    DType.int64: "ge::DT_INT64",
    DType.bool_: "ge::DT_BOOL",
}
ATTR_TYPES = {"bool": "Bool", "int": "Int", "float": "Float", "str": "String"}
COMPUTE_UNITS = {"220": "ascend910b", "200": "ascend310p"}


@dataclass(frozen=True)
class Param:
    name: str
    dtype: DType
    shape: tuple[int, ...]
    buffer: str  # the plan buffer the kernel knows it by


@dataclass(frozen=True)
class OpAttr:
    name: str
    kind: str  # bool, int, float, str
    default: object
    value: object  # in the example


@dataclass(frozen=True)
class OpInterface:
    op_type: str
    inputs: tuple[Param, ...]
    outputs: tuple[Param, ...]
    attrs: tuple[OpAttr, ...]

    @property
    def snake(self) -> str:
        return snake(self.op_type)


def snake(name: str) -> str:
    """CANN's op-type -> file/kernel name rule (optype_snake of the op build):
    AddCustom -> add_custom, QLinearMatMul -> q_linear_mat_mul."""
    return re.sub(r"([A-Z])", r"_\1", name[0].lower() + name[1:]).lower()


def _camel(name: str) -> str:
    return "".join(p[:1].upper() + p[1:] for p in re.split(r"[^0-9A-Za-z]+", name) if p)


# -- the op's interface --------------------------------------------------------------------------------
def _custom_node(g: Graph):
    """(node, OpDef) when `g` computes exactly one node of a custom op (an `op_proto` of
    the default "opaque" category; inputs, outputs and constants aside)."""
    from mdsl.ops.registry import get_op

    nodes = [n for n in g.nodes if n.op_type not in ("Input", "Output", "Const")]
    if len(nodes) != 1:
        return None
    opdef = get_op(nodes[0].op_type)
    return (nodes[0], opdef) if opdef.category == "opaque" else None


def interface(g: Graph, project: AscendcProject, op_type: str | None) -> OpInterface:
    plan = project.plan
    by_slot = {(s.kind, s.slot): name for name, s in plan.buffers.items()}
    inputs = tuple(
        Param(n, t.dtype, _dims(t), by_slot.get(("input", i), ""))
        for i, (n, t) in enumerate(project.graph.inputs.items())
    )
    outputs = tuple(
        Param(n, t.dtype, _dims(t), by_slot[("output", i)])
        for i, (n, t) in enumerate(project.graph.outputs.items())
    )
    attrs: tuple[OpAttr, ...] = ()
    found = _custom_node(g)
    if found is not None:
        node, opdef = found
        op_type = op_type or node.op_type
        attrs = tuple(
            OpAttr(name, spec.kind, spec.default, node.attrs.get(name, spec.default))
            for name, spec in opdef.attrs.items()
            if spec.kind in ATTR_TYPES
        )
    op_type = op_type or _camel(g.name)
    if not op_type.isidentifier() or not op_type[0].isupper():
        raise CompileError(f"op type {op_type!r} must be a CamelCase identifier (CANN's OpDef)")
    return OpInterface(op_type, inputs, outputs, attrs)


def _dims(t) -> tuple[int, ...]:
    return tuple(int(d) for d in t.shape)


# -- the package ------------------------------------------------------------------------------------------
def build_op_package(
    g: Graph,
    *,
    socs=("Ascend910B3",),
    op_type: str | None = None,
    infer_shape=None,
    shapes: dict[str, int] | None = None,
    feeds: dict | None = None,
    seed: int = 0,
) -> dict[str, str | bytes]:
    """The files of the custom-operator package of `g` (see the module docstring).

    socs: the SoCs (preset names or SocSpecs) the package is built for, one AddConfig each;
    every one must take the kernel. op_type: the OpDef name (default: the custom op's type,
    or the graph name in CamelCase). infer_shape: a shape-rule family name or ShapeRule
    (default: detected). feeds: the golden inputs (default: seeded random data).
    """
    specs = [SocSpec.named(s) if isinstance(s, str) else s for s in socs]
    if not specs:
        raise CompileError("an op package needs at least one SoC (socs=)")
    projects = [build_project(g, shapes=shapes, soc=s) for s in specs]
    project = projects[0]
    _require_one_kernel(project, g)
    op = interface(g, project, op_type)
    pk = project.device_kernels[0]
    pad = all(s.has("DataCopyPad") for s in specs)
    env = environment()
    files: dict[str, str | bytes] = {}
    files[f"op_kernel/{op.snake}.cpp"] = _kernel(env, project, pk, op)
    files["op_kernel/mdsl_kernel_common.h"] = env.get_template("kernel_common.h.j2").render(
        graph_name=g.name, stem=op.snake, prefix=op.snake, soc=specs[0].name, pad_copies=pad
    )
    tiling_ctx = {
        **host_tiling_context(pk, project.forced, specs[0]),
        "fields": tiling_fields(pk),
        "op": op.op_type,
    }
    common = {"graph_name": g.name, "stem": op.snake, "prefix": op.snake}
    files[f"op_host/{op.snake}_tiling.h"] = env.get_template("tiling.h.j2").render(
        common, kernels=[tiling_ctx]
    )
    files[f"op_host/{op.snake}_kernel_tiling.cpp"] = env.get_template("host_tiling.cpp.j2").render(
        common, kernels=[tiling_ctx]
    )
    files["op_host/mdsl_tiling.h"] = env.get_template("mdsl_tiling.h.j2").render(common)
    files[f"op_host/{op.snake}.cpp"] = _op_host(env, op, pk, project, specs, infer_shape)
    ctx = {
        "op": op,
        "snake": op.snake,
        "units": sorted({COMPUTE_UNITS[s.family] for s in specs}),
        "socs": [s.name for s in specs],
        "graph_name": g.name,
        "kernel": pk.name,
        "nodes": [n.op_type for n in pk.kernel.nodes],
    }
    for name in ("CMakeLists.txt", "CMakePresets.json", "build.sh", "README.md"):
        files[name] = env.get_template(f"op_package/{name}.j2").render(ctx)
    files.update(_test_case(g, op, feeds, seed))
    return dict(sorted(files.items()))


def _require_one_kernel(project: AscendcProject, g: Graph) -> None:
    device, host = project.device_kernels, project.host_kernels
    if len(device) != 1 or host:
        listed = ", ".join(f"{k.name} ({k.origin})" for k in project.kernels)
        raise CompileError(
            f"graph {g.name!r} lowers to {len(project.kernels)} kernels ({listed}); an op "
            "package holds one kernel launch: fuse the op into one group, or emit a "
            "kernel-launch project (project='kernel_launch') for the whole graph"
        )
    consts = [b for b in _signature(project.plan, device[0].kernel)["buffers"]]
    consts = [b for b in consts if project.plan.buffers[b].kind == "const"]
    if consts:
        names = ", ".join(project.plan.buffers[b].tensor for b in consts)
        raise CompileError(
            f"the kernel of {g.name!r} reads constants ({names}); an op takes every tensor "
            "as an input: make them graph inputs"
        )


def _kernel(env, project: AscendcProject, pk, op: OpInterface) -> str:
    """The kernel with the op entry: params in OpDef order, GET_TILING_DATA."""
    plan = project.plan
    sig = _signature(plan, pk.kernel)
    params = [p.buffer or f"unused_{p.name}" for p in (*op.inputs, *op.outputs)]
    used = set(sig["buffers"])
    matmul = isinstance(pk.kernel, MatmulKernel)
    init_args = [*sig["buffers"], *(["workspace"] if matmul else [])]
    cls = f"Kernel{_camel(pk.name)}"
    lines = []
    if matmul and project.soc.split_cores:
        lines.append("KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);")
    lines += ["GET_TILING_DATA(tilingData, tiling);", f"{cls} op;"]
    if matmul:
        lines.append(
            "REGIST_MATMUL_OBJ(&op.pipe_, GetSysWorkSpacePtr(), op.mm, &tilingData.cubeTiling);"
        )
    lines += [f"op.Init({', '.join([*init_args, 'tilingData'])});", "op.Process();"]
    lines += [f"(void){p};" for p in params if p not in used]
    if "workspace" not in init_args:
        lines.append("(void)workspace;")
    entry = {
        "op_package": True,
        "name": op.snake,
        "entry_params": ", ".join(f"GM_ADDR {p}" for p in [*params, "workspace", "tiling"]),
        "entry_lines": lines,
    }
    return render_kernel(env, plan, pk, project.graph.name, op.snake, project.soc, entry)


def _op_host(env, op: OpInterface, pk, project, specs, infer_shape) -> str:
    rules = []
    where = f"op_host/{op.snake}.cpp"
    for i, out in enumerate(op.outputs):
        rule = choose(op.op_type, [p.shape for p in op.inputs], out.shape, infer_shape, where)
        rules.append(infer_shape_cpp(rule, i))
    attrs = [
        {
            "name": a.name,
            "kind": ATTR_TYPES[a.kind],
            "default": _cpp_literal(a.default if a.default is not None else a.value, a.kind),
        }
        for a in op.attrs
    ]
    user_ws = project.user_workspace_bytes
    return env.get_template("op_package/op_host.cpp.j2").render(
        op=op,
        snake=op.snake,
        ge_types=GE_TYPES,
        attrs=attrs,
        infer_rules=rules,
        kernel=pk.name,
        tiling_type=f"{_camel(pk.name)}TilingData",
        matmul=isinstance(pk.kernel, MatmulKernel),
        user_workspace=user_ws,
        units=sorted({COMPUTE_UNITS[s.family] for s in specs}),
        graph_name=project.graph.name,
    )


def _cpp_literal(value, kind: str) -> str:
    if kind == "bool":
        return "true" if value else "false"
    if kind == "str":
        return json.dumps(str(value))
    if kind == "float":
        return repr(float(value))
    return str(int(value))


# -- test case and golden data -------------------------------------------------------------------------
ST_TYPES = {
    DType.float32: "float32",
    DType.float16: "float16",
    DType.bfloat16: "bfloat16",
    DType.int8: "int8",
    DType.uint8: "uint8",
    DType.int16: "int16",
    DType.int32: "int32",
    DType.int64: "int64",
    DType.bool_: "bool",
}


def example_feeds(op: OpInterface, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {}
    for p in op.inputs:
        if p.dtype.is_float:
            feeds[p.name] = rng.uniform(-1.0, 1.0, p.shape).astype(p.dtype.np)
        else:
            feeds[p.name] = rng.integers(-8, 8, p.shape).astype(p.dtype.np)
    return feeds


def reference_outputs(g: Graph, feeds: dict) -> dict[str, np.ndarray]:
    """The golden outputs: the custom op's Python binding when it has one, else the
    reference interpreter."""
    found = _custom_node(g)
    if found is not None:
        node, _ = found
        from mdsl.ops.bindings import get_binding

        binding = get_binding(node.op_type, "python")
        if binding is not None:
            args = [feeds[t.name] if t is not None else None for t in node.inputs]
            result = binding.fn(*args, **dict(node.attrs))
            values = result if isinstance(result, tuple) else (result,)
            return {
                name: np.asarray(v, dtype=t.dtype.np).reshape(_dims(t))
                for (name, t), v in zip(g.outputs.items(), values)
            }
    import mdsl

    return mdsl.interpret(g, feeds)


def _test_case(g: Graph, op: OpInterface, feeds, seed: int) -> dict[str, str | bytes]:
    feeds = dict(feeds) if feeds is not None else example_feeds(op, seed)
    outputs = reference_outputs(g, feeds)
    files: dict[str, str | bytes] = {}
    for p in op.inputs:
        files[f"testcases/data/input_{p.name}.bin"] = _raw(feeds[p.name], p.dtype)
    for p in op.outputs:
        files[f"testcases/data/output_{p.name}.bin"] = _raw(outputs[p.name], p.dtype)

    def desc(p: Param, role: str) -> dict:
        d = {"name": p.name, "format": ["ND"], "type": [ST_TYPES[p.dtype]], "shape": list(p.shape)}
        if role == "input":
            d["data_distribute"] = ["uniform"]
            d["value_range"] = [[-1.0, 1.0]]
            d["data_file"] = f"data/input_{p.name}.bin"
        else:
            d["golden_file"] = f"data/output_{p.name}.bin"
        return d

    case = {
        "case_name": f"Test_{op.op_type}_001",
        "op": op.op_type,
        "input_desc": [desc(p, "input") for p in op.inputs],
        "output_desc": [desc(p, "output") for p in op.outputs],
    }
    if op.attrs:
        case["attr"] = [
            {"name": a.name, "type": a.kind, "value": a.value if a.value is not None else a.default}
            for a in op.attrs
        ]
    files[f"testcases/{op.op_type}.json"] = json.dumps([case], indent=4) + "\n"
    return files


def _raw(value: np.ndarray, dtype: DType) -> bytes:
    """Raw little-endian element bytes, row-major (the .bin files CANN's test tools read)."""
    return np.ascontiguousarray(np.asarray(value, dtype=dtype.np)).tobytes()


def read_raw(data: bytes, dtype: DType, shape) -> np.ndarray:
    return np.frombuffer(data, dtype=dtype.np).reshape(shape)


__all__ = ["CTYPES", "build_op_package", "read_raw", "reference_outputs", "snake"]
