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
of a custom op, the OpDef takes that op's type, input/output names and attrs, and the
package covers every dtype combination the proto allows and mdsl can generate (each is one
entry of the OpDef's DataType lists, one binary of the op build and one test case; the
kernel source picks its combination from the build's `ORIG_DTYPE_<INPUT>` macros). Golden
outputs come from the op's Python ("python") binding when it has one, else from
`mdsl.interpret`. The op must lower to one device kernel (one op, one kernel launch).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import re
from dataclasses import dataclass

import numpy as np

from mdsl.ir.dtype import DType
from mdsl.ir.errors import CompileError, MdslError
from mdsl.ir.graph import Graph
from mdsl.targets.ascendc.project import AscendcProject, build_project
from mdsl.targets.ascendc.render import (
    CTYPES,
    MatmulKernel,
    PlannedKernel,
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
MAX_COMBINATIONS = 64  # dtype combinations tried per op (the product of its inputs' sets)
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
    variants, skipped = op_variants(g, specs, shapes, op_type)
    pk, op = variants[0].kernel, variants[0].op
    pad = all(s.has("DataCopyPad") for s in specs)
    env = environment()
    files: dict[str, str | bytes] = {}
    files[f"op_kernel/{op.snake}.cpp"] = _kernel_source(env, variants)
    files["op_kernel/mdsl_kernel_common.h"] = env.get_template("kernel_common.h.j2").render(
        graph_name=g.name, stem=op.snake, prefix=op.snake, soc=specs[0].name, pad_copies=pad
    )
    tilings = [_tiling_context(v, specs[0], len(variants) > 1) for v in variants]
    common = {"graph_name": g.name, "stem": op.snake, "prefix": op.snake}
    # one tiling class for every combination, one tiling function each
    declared = [tilings[0], *({**t, "define": False} for t in tilings[1:])]
    files[f"op_host/{op.snake}_tiling.h"] = env.get_template("tiling.h.j2").render(
        common, kernels=declared
    )
    files[f"op_host/{op.snake}_kernel_tiling.cpp"] = env.get_template("host_tiling.cpp.j2").render(
        common, kernels=tilings
    )
    files["op_host/mdsl_tiling.h"] = env.get_template("mdsl_tiling.h.j2").render(common)
    files[f"op_host/{op.snake}.cpp"] = _op_host(env, variants, tilings, specs, infer_shape)
    ctx = {
        "op": op,
        "snake": op.snake,
        "units": sorted({COMPUTE_UNITS[s.family] for s in specs}),
        "socs": [s.name for s in specs],
        "graph_name": g.name,
        "kernel": pk.name,
        "nodes": [n.op_type for n in pk.kernel.nodes],
        "combinations": [v.describe() for v in variants],
        "skipped": skipped,
    }
    for name in ("CMakeLists.txt", "CMakePresets.json", "build.sh", "README.md"):
        files[name] = env.get_template(f"op_package/{name}.j2").render(ctx)
    files.update(_test_cases(variants, feeds, seed))
    return dict(sorted(files.items()))


# -- dtype combinations ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Variant:
    """One dtype combination of the op: its example graph, project, kernel and interface."""

    graph: Graph
    project: AscendcProject
    kernel: PlannedKernel
    op: OpInterface

    @property
    def tag(self) -> str:
        """The input dtypes, as file-name suffixes and host function names take them."""
        return "_".join(p.dtype.value for p in self.op.inputs)

    def describe(self) -> str:
        params = [*self.op.inputs, *self.op.outputs]
        return ", ".join(f"{p.name} {p.dtype.value}" for p in params)


def op_variants(g: Graph, specs, shapes=None, op_type=None) -> tuple[list[Variant], list[str]]:
    """The example's dtype combination, then every other one its custom op's proto allows
    that lowers to the same kind of kernel on every SoC; and why the others are left out."""
    example = _variant(g, specs, shapes, op_type, None)
    variants, skipped = [example], []
    for dtypes, other in _retyped(g):
        try:
            variants.append(_variant(other, specs, shapes, op_type, example))
        except CompileError as e:
            described = ", ".join(f"{n} {d.value}" for n, d in dtypes.items())
            skipped.append(f"{described}: {str(e).splitlines()[0]}")
    return variants, skipped


def _variant(g: Graph, specs, shapes, op_type, example: Variant | None) -> Variant:
    projects = [build_project(g, shapes=shapes, soc=s) for s in specs]  # every SoC takes it
    project = projects[0]
    _require_one_kernel(project, g)
    pk = project.device_kernels[0]
    op = interface(g, project, op_type)
    if example is not None:  # the kernel of the same name, class and tiling struct
        if tiling_fields(pk) != tiling_fields(example.kernel):
            raise CompileError("it lowers to another kind of kernel than the example")
        renamed = dataclasses.replace(pk.kernel, name=example.kernel.name)
        pk = dataclasses.replace(pk, kernel=renamed)
    return Variant(g, project, pk, op)


def _retyped(g: Graph) -> list[tuple[dict, Graph]]:
    """The example graph for every other dtype combination of its custom op's inputs (from
    the proto's dtype sets; what its InferShape refuses is no combination)."""
    found = _custom_node(g)
    if found is None:
        return []
    node, opdef = found
    if any(s.variadic for s in opdef.inputs) or any(
        t is None or t.name not in g.inputs for t in node.inputs
    ):
        return []
    names = [t.name for t in node.inputs]
    choices = [
        sorted(slot.allowed & GE_TYPES.keys(), key=lambda d: d.value)
        for slot, _ in zip(opdef.inputs, node.inputs)
    ]
    if math.prod(len(c) for c in choices) > MAX_COMBINATIONS:
        return []
    example = tuple(g.inputs[n].dtype for n in names)
    graphs = []
    for combo in itertools.product(*choices):
        if combo == example:
            continue
        dtypes = dict(zip(names, combo))
        try:
            graphs.append((dtypes, _rebuild(g, node, opdef, dtypes)))
        except MdslError:
            continue
    return graphs


def _rebuild(g: Graph, node, opdef, dtypes: dict) -> Graph:
    """`g` (one node of a custom op) with inputs of `dtypes`."""
    from mdsl.ops.apply import apply_op

    with Graph(g.name) as other:
        inputs = {n: other.input(n, t.shape, dtypes[n]) for n, t in g.inputs.items()}
        outs = apply_op(opdef, [inputs[t.name] for t in node.inputs], dict(node.attrs))
        outs = outs if isinstance(outs, tuple) else (outs,)
        for name, out in zip(g.outputs, outs):
            other.output(out, name)
    return other


def _tiling_context(v: Variant, soc: SocSpec, several: bool) -> dict:
    ctx = {
        **host_tiling_context(v.kernel, v.project.forced, soc),
        "fields": tiling_fields(v.kernel),
        "op": v.op.op_type,
    }
    if several:  # one host tiling function per combination
        ctx["name"] = f"{v.kernel.name}_{v.tag}"
    return ctx


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


def _kernel_source(env, variants: list[Variant]) -> str:
    """The kernel of one combination, or of each behind the op build's ORIG_DTYPE_<INPUT>
    macros (one binary per combination)."""
    if len(variants) == 1:
        v = variants[0]
        return _kernel(env, v.project, v.kernel, v.op)
    inputs = [p.name.upper() for p in variants[0].op.inputs]
    lines = [
        f"/* {variants[0].op.op_type}: one kernel per dtype combination of its OpDef; the op build",
        " * compiles one binary per combination with ORIG_DTYPE_<INPUT> defined. The DT_ codes",
        " * come from kernel_operator.h: included first, or every DT_ would read as 0 below */",
        '#include "mdsl_kernel_common.h"',
    ]
    lines += [
        f'#if !defined(ORIG_DTYPE_{n}) || !defined(DT_FLOAT16)\n#error "ORIG_DTYPE_{n} is set by the op build"\n#endif'
        for n in inputs
    ]
    for i, v in enumerate(variants):
        cond = " && ".join(
            f"ORIG_DTYPE_{p.name.upper()} == {GE_TYPES[p.dtype].removeprefix('ge::')}"
            for p in v.op.inputs
        )
        lines += [f"{'#if' if i == 0 else '#elif'} {cond}  /* {v.describe()} */", ""]
        lines.append(_kernel(env, v.project, v.kernel, v.op))
    lines += ["#else", '#error "a dtype combination the OpDef does not list"', "#endif", ""]
    return "\n".join(lines)


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


def _op_host(env, variants: list[Variant], tilings: list[dict], specs, infer_shape) -> str:
    first = variants[0]
    op, pk, project = first.op, first.kernel, first.project
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

    def types(index: int, role: str) -> str:
        return ", ".join(GE_TYPES[getattr(v.op, role)[index].dtype] for v in variants)

    def matches(v: Variant, read: str) -> str:
        return " && ".join(
            f"{read.format(i)} == {GE_TYPES[p.dtype]}" for i, p in enumerate(v.op.inputs)
        )

    combinations = [
        {
            "tiling": t["name"],
            "tiling_test": matches(v, "InputType(context, {})"),
            "infer_test": matches(v, "context->GetInputDataType({})"),
            "outputs": [GE_TYPES[p.dtype] for p in v.op.outputs],
            "describe": v.describe(),
        }
        for v, t in zip(variants, tilings)
    ]
    return env.get_template("op_package/op_host.cpp.j2").render(
        op=op,
        snake=op.snake,
        inputs=[(p, types(i, "inputs")) for i, p in enumerate(op.inputs)],
        outputs=[(p, types(i, "outputs")) for i, p in enumerate(op.outputs)],
        formats=", ".join(["ge::FORMAT_ND"] * len(variants)),
        combinations=combinations,
        attrs=attrs,
        infer_rules=rules,
        kernel=pk.name,
        tiling_type=f"{_camel(pk.name)}TilingData",
        matmul=isinstance(pk.kernel, MatmulKernel),
        user_workspace=project.user_workspace_bytes,
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


def data_file(role: str, name: str, tag: str = "") -> str:
    """Where a case's data sit: testcases/data/<role>_<name>[_<dtypes>].bin (the example's
    combination without the dtype suffix)."""
    return f"data/{role}_{name}{'_' + tag if tag else ''}.bin"


def _test_cases(variants: list[Variant], feeds, seed: int) -> dict[str, str | bytes]:
    """One msOpST case per dtype combination, golden outputs from the reference."""
    files: dict[str, str | bytes] = {}
    cases = []
    for i, v in enumerate(variants):
        given = feeds if i == 0 and feeds is not None else None
        case, data = _test_case(v.graph, v.op, given, seed, v.tag if i else "", i + 1)
        cases.append(case)
        files.update(data)
    files[f"testcases/{variants[0].op.op_type}.json"] = json.dumps(cases, indent=4) + "\n"
    return files


def _test_case(g: Graph, op: OpInterface, feeds, seed: int, tag: str, number: int):
    feeds = dict(feeds) if feeds is not None else example_feeds(op, seed)
    outputs = reference_outputs(g, feeds)
    files: dict[str, str | bytes] = {}
    for p in op.inputs:
        files[f"testcases/{data_file('input', p.name, tag)}"] = _raw(feeds[p.name], p.dtype)
    for p in op.outputs:
        files[f"testcases/{data_file('output', p.name, tag)}"] = _raw(outputs[p.name], p.dtype)

    def desc(p: Param, role: str) -> dict:
        d = {"name": p.name, "format": ["ND"], "type": [ST_TYPES[p.dtype]], "shape": list(p.shape)}
        if role == "input":
            d["data_distribute"] = ["uniform"]
            d["value_range"] = [[-1.0, 1.0]]
            d["data_file"] = data_file("input", p.name, tag)
        else:
            d["golden_file"] = data_file("output", p.name, tag)
        return d

    case = {
        "case_name": f"Test_{op.op_type}_{number:03d}",
        "op": op.op_type,
        "input_desc": [desc(p, "input") for p in op.inputs],
        "output_desc": [desc(p, "output") for p in op.outputs],
    }
    if op.attrs:
        case["attr"] = [
            {"name": a.name, "type": a.kind, "value": a.value if a.value is not None else a.default}
            for a in op.attrs
        ]
    return case, files


def _raw(value: np.ndarray, dtype: DType) -> bytes:
    """Raw little-endian element bytes, row-major (the .bin files CANN's test tools read)."""
    return np.ascontiguousarray(np.asarray(value, dtype=dtype.np)).tobytes()


def read_raw(data: bytes, dtype: DType, shape) -> np.ndarray:
    return np.frombuffer(data, dtype=dtype.np).reshape(shape)


__all__ = [
    "CTYPES",
    "Variant",
    "build_op_package",
    "data_file",
    "op_variants",
    "read_raw",
    "reference_outputs",
    "snake",
]
