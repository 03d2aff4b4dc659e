"""The numba target: renders a Plan as one Python module of numba kernels and a driver.

Every Kernel IR record becomes one function: pointwise, row-reduction and pooling
kernels are `@njit` loop nests (the outer loop a `prange` when the kernel is big enough
to pay for threads); GEMM and convolution are plain Python around numpy's `matmul`
(im2col and the fused epilogue are `@njit`); pure copies (reshape, transpose, slice,
concat) are numpy strided copies in the driver, and vanish when the memory plan put
source and destination on the same bytes; a Python callback is a call of the
`callback` argument. `run` is a plain Python function that executes the schedule over
one arena, so each kernel compiles lazily on its first call and the driver calls back
into Python between kernels without numba's object mode.

numba compiles slowly (0.1-0.5 s a kernel), so kernels are rendered from a canonical
copy (buffers become parameters p0, p1, ... in order of first use; variables are
renumbered) and structurally equal kernels share one function: the twelve layers of
BERT-base compile once.

numba has no half-float arithmetic: the driver hands a kernel a float32 copy of each
float16/bfloat16 buffer it touches and rounds the buffers it wrote back afterwards
(`mdsl.targets.numba.support.widen` / `narrow`), one rounding per store as in C.

Identifiers come from the planner's names (buffer names are checked, kernel names
reduced to ASCII identifier characters) and from this module's fixed local names; user
strings (node names, source lines, the graph name) appear only in `#` comments, through
`comment_text`.
"""

from __future__ import annotations

import keyword
import math
import re
from dataclasses import replace

import jinja2
import numpy as np

from mdsl import expr as E
from mdsl.codegen import kir
from mdsl.codegen.access import (
    contiguous_strides,
    flat_index,
    merge_dims,
    row_offset,
    with_strides,
)
from mdsl.codegen.dims import free_symbols, render_dim
from mdsl.codegen.expr_types import compute_type
from mdsl.codegen.plan import Plan, kernel_buffers, slot_name
from mdsl.codegen.templates import template_environment
from mdsl.ir.dim import Dim
from mdsl.ir.dtype import DType
from mdsl.ir.errors import CompileError
from mdsl.ir.naming import python_comment as comment_text
from mdsl.ir.naming import python_identifier
from mdsl.targets.numba.expr import NumbaExprRenderer, ctor, literal

INDENT = "    "
PAR_MIN = 32768  # elements below which a kernel stays serial (as MDSL_PAR_MIN in C)
JIT = 'njit(cache=True, error_model="numpy")'
PARALLEL_JIT = 'njit(cache=True, error_model="numpy", parallel=True)'
HALF = (DType.float16, DType.bfloat16)
VIEW_DTYPES = {
    DType.bool_: "np.bool_",
    DType.float16: "np.float16",
    DType.bfloat16: "rt.BFLOAT16",
    **{d: f"np.{d.value}" for d in DType if d not in (DType.bool_, *HALF)},
}
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
RESERVED = {"np", "math", "rt", "njit", "prange", "run", "range", "abs", "callback"}
RESERVED |= {"inputs", "outputs", "consts", "arena", "dims", "offsets", "sizes"}


def _n(value) -> str:
    """A dim (int or Dim over slot identifiers) as a Python int expression."""
    return render_dim(value, "py")


def _tuple(values) -> str:
    """A tuple of dims as Python source."""
    return "(" + "".join(f"{_n(v)}, " for v in values).rstrip(" ") + ")"


def _checked(name: str) -> str:
    """A planner-made buffer or variable name, verified to be a plain identifier."""
    if not _IDENT.match(name) or keyword.iskeyword(name) or name in RESERVED:
        raise CompileError(f"numba target: {name!r} is not usable as an identifier")
    return name


def _env() -> jinja2.Environment:
    return template_environment("numba")


def render_numba(plan: Plan, parallel: bool = True) -> str:
    """The Python source of `plan` (`parallel`: use prange in big kernels)."""
    _check_names(plan)
    env = _env()
    renderer = _ModuleRenderer(plan, env.get_template("kernel.py.j2"), parallel)
    for k in plan.kernels:
        renderer.add(k)
    memory = plan.memory
    return env.get_template("module.py.j2").render(
        graph_name=comment_text(plan.graph.name),
        kernel_count=len(plan.kernels),
        memory=memory is not None,
        arena_bytes=memory and memory.arena_bytes,
        naive_bytes=memory and memory.naive_bytes,
        lower_bound_bytes=memory and memory.lower_bound_bytes,
        functions=renderer.functions,
        buffer_lines=_buffer_lines(plan),
        call_lines=renderer.calls,
        dims=plan.uses_dims,
    )


def _check_names(plan: Plan) -> None:
    for name in plan.buffers:
        _checked(name)
    for k in plan.kernels:
        loads = getattr(k, "loads", {})
        if isinstance(k, (kir.Gemm, kir.Conv)) and k.epilogue is not None:
            loads = k.epilogue.loads
        for name in loads:
            _checked(name)


def render_profile_driver(plan: Plan, parallel: bool = True) -> str:
    """`run_profile`: the module's `run` with a `clock()` read around each top-level
    kernel call (a control-flow kernel is timed as a whole, the kernels of its blocks
    not), the (start, duration) of kernel i of `plan.all_kernels()` in `timings[i]`. It is
    executed among the module's compiled functions (`NumbaVariant.run_profiled`)."""
    renderer = _ModuleRenderer(plan, _env().get_template("kernel.py.j2"), parallel)
    dims = ", dims, offsets, sizes" if plan.uses_dims else ""
    lines = [f"def run_profile(inputs, outputs, consts, arena, callback{dims}, timings, clock):"]
    lines += ["    " + line for line in _buffer_lines(plan)]
    lines.append("    t0 = clock()")
    index = {id(k): i for i, k in enumerate(plan.all_kernels())}
    for k in plan.kernels:
        step = index[id(k)]
        first = len(renderer.calls)
        renderer.add(k)
        lines.append("    start = clock()")
        lines += ["    " + line for line in renderer.calls[first:]]
        lines.append(f"    timings[{step}, 0] = start - t0")
        lines.append(f"    timings[{step}, 1] = clock() - start")
    lines.append("    return 0")
    return "\n".join(lines) + "\n"


def _buffer_lines(plan: Plan) -> list[str]:
    lines = []
    if plan.uses_dims:
        lines += [
            f"{slot_name(i)} = int(dims[{i}])  # {comment_text(s)}"
            for i, s in enumerate(plan.symbols)
        ]
    arena_slot = {name: i for i, name in enumerate(plan.arena_buffers)}
    for name, spec in plan.buffers.items():
        if spec.kind == "input":
            source = f"inputs[{spec.slot}]"
        elif spec.kind == "output":
            source = f"outputs[{spec.slot}]"
        elif spec.kind == "const":
            source = f"consts[{spec.slot}]"
        elif plan.memory is None and name in arena_slot:  # planned per shape signature
            i, view = arena_slot[name], VIEW_DTYPES[spec.dtype]
            source = f"arena[offsets[{i}]:offsets[{i}] + sizes[{i}]].view({view})"
        elif plan.memory is not None and name in plan.memory.offsets:
            start = plan.memory.offsets[name]
            view = VIEW_DTYPES[spec.dtype]
            source = f"arena[{start}:{start + spec.nbytes}].view({view})"
        else:
            continue  # planned but never touched, or a pointer the schedule assigns
        lines.append(f"{name} = {source}  # {comment_text(spec.tensor)}")
    return lines


def _var_types(loads: dict[str, kir.Access], lets) -> dict[str, DType]:
    types = {name: compute_type(a.dtype) for name, a in loads.items()}
    for let in lets:
        types[let.var] = compute_type(let.dtype)
    return types


def _node_line(ref: kir.NodeRef) -> str:
    where = f" at {ref.source}" if ref.source else ""
    return comment_text(f"{ref.name} ({ref.op_type}){where}")


def _store(access: kir.Access, index: str, value: str) -> str:
    return f"{access.buffer}[{index}] = {value}"


class _ModuleRenderer:
    """Collects the module's functions and the driver's call lines, kernel by kernel.

    Kernels are rendered from a canonical copy (`_Renamer`: buffers become parameters
    p0, p1, ... in order of first use, variables are renumbered), so structurally equal
    kernels (the same layer repeated) render the same text; that text becomes one
    function, called once per kernel, and numba compiles it once."""

    def __init__(self, plan: Plan, template, parallel: bool):
        self.plan = plan
        self.template = template
        self.parallel = parallel
        self.functions: list[str] = []
        self.calls: list[str] = []
        self._by_text: dict[tuple, str] = {}

    def add(self, k) -> None:
        name = python_identifier(k.name, RESERVED)
        if isinstance(k, kir.Branch | kir.Loop):
            from mdsl.targets.numba.control import control_lines

            self.calls += control_lines(self, k)
            return
        if isinstance(k, kir.Callback):
            buffers = ", ".join(b or "None" for b in [*k.inputs, *k.outputs])
            self.calls.append(f"callback({k.index}, [{buffers}])  # {name}")
            self.calls += [  # sizes the node's results decided
                f"{slot_name(i)} = int(dims[{i}])" for i in self.plan.slots_bound_by(k)
            ]
            return
        if _is_copy(k):
            lines = _copy_lines(k, self.plan.memory.offsets if self.plan.memory else {})
            self.calls += [f"# {name}: {'copy' if lines else 'in place, nothing to copy'}", *lines]
            return
        renamer = _Renamer()
        canonical = renamer.kernel(k)
        body, decorator = _BODY[type(k)](self, canonical, name)
        dims = sorted(free_symbols(k), key=lambda d: int(d.removeprefix("dim")))
        params = list(renamer.buffers.values()) + dims
        used = self.function(name, k.KIND, k.nodes, params, body, decorator)
        self.calls += self.call_lines(used, name, k, list(renamer.buffers) + dims)

    def function(self, name, kind, nodes, params, body: list[str], decorator) -> str:
        """Add a function (unless one with the same code exists); the name to call."""
        key = (decorator, tuple(params), tuple(body))
        if key in self._by_text:
            return self._by_text[key]
        self._by_text[key] = name
        self.functions.append(
            self.template.render(
                name=name,
                kind=kind,
                nodes=[_node_line(n) for n in nodes],
                decorator=decorator,
                params=", ".join(params),
                body="\n".join(INDENT + line for line in body),
            ).rstrip("\n")
        )
        return name

    def call_lines(self, function: str, name: str, k, args: list[str]) -> list[str]:
        """The call of `function` for kernel `name`, staging half-float buffers through
        float32 copies."""
        _, writes = kernel_buffers(k)
        half = [a for a in args if a in self.plan.buffers and self.plan.buffers[a].dtype in HALF]
        lines = [f"w_{a} = rt.widen({a})" for a in half]
        staged = [f"w_{a}" if a in half else a for a in args]
        note = f"  # {name}" if function != name else ""
        lines.append(f"{function}({', '.join(staged)}){note}")
        lines += [f"rt.narrow(w_{a}, {a})" for a in half if a in writes]
        return lines

    def decorator(self, work: int) -> str:
        big = isinstance(work, Dim) or work > PAR_MIN  # symbolic: maybe big, so prange
        return PARALLEL_JIT if self.parallel and big else JIT

    # -- pointwise --------------------------------------------------------------------------------
    def pointwise(self, k: kir.Pointwise, name: str):
        load_names = list(k.loads)
        accesses = [k.loads[n] for n in load_names] + [s.access for s in k.stores]
        dims = merge_dims(k.shape, accesses)
        idx = [f"i{d}" for d in range(len(dims))]
        views = [with_strides(a, [s[j] for _, s in dims]) for j, a in enumerate(accesses)]
        r = NumbaExprRenderer(_var_types(k.loads, k.lets))
        body = [f"{n} = {v.buffer}[{flat_index(v, idx, 'py')}]" for n, v in zip(load_names, views)]
        body += [f"{let.var} = {r.render(let.value, let.dtype)}" for let in k.lets]
        for store, view in zip(k.stores, views[len(load_names) :]):
            value = r.render(store.value, store.access.dtype)
            body.append(_store(view, flat_index(view, idx, "py"), value))
        decorator = self.decorator(k.size)
        return _loop_nest([d for d, _ in dims], idx, body, decorator == PARALLEL_JIT), decorator

    # -- row reductions -----------------------------------------------------------------------------
    def rowwise(self, k: kir.Rowwise, name: str):
        several = isinstance(k.outer_size, Dim) or k.outer_size > 1  # rows run in parallel
        decorator = self.decorator(k.outer_size * k.row_size if several else 0)
        rows = _RowRenderer(k)
        loop = "prange" if decorator == PARALLEL_JIT else "range"
        body = [f"{kir.ROW_SIZE_VAR} = {_n(k.row_size)}"] if isinstance(k.row_size, Dim) else []
        body.append(f"for o in {loop}({_n(k.outer_size)}):")
        body += [INDENT + line for line in rows.lines()]
        return body, decorator

    # -- GEMM and convolution: numpy matmul around numba im2col / epilogue --------------------------
    def gemm(self, k: kir.Gemm, name: str):
        batch, m = _folded_batch(k)
        a, b, out = k.a, k.b, k.out
        a_strides, b_strides = a.strides[: len(batch)], b.strides[: len(batch)]
        body = [
            f"a = rt.matrix_view({a.buffer}, {_n(a.offset)}, {_tuple(a_strides)}, "
            f"{_tuple(batch)}, {_n(m)}, {_n(k.k)}, {_n(k.lda)}, {k.trans_a})",
            f"b = rt.matrix_view({b.buffer}, {_n(b.offset)}, {_tuple(b_strides)}, "
            f"{_tuple(batch)}, {_n(k.k)}, {_n(k.n)}, {_n(k.ldb)}, {k.trans_b})",
            f"rt.gemm(a, b, {out.buffer}, {_n(out.offset)}, {_tuple(batch)}, {_n(m)}, "
            f"{_n(k.n)}, {k.alpha!r})",
        ]
        acc = kir.Access(out.buffer, k.dtype, out.offset, contiguous_strides(k.out_shape))
        body += self.epilogue(k, name, acc)
        return body, None

    def conv(self, k: kir.Conv, name: str):
        cg, coutg = k.c // k.group, k.cout // k.group
        ohw, kdim = k.oh * k.ow, cg * k.kh * k.kw
        body = [
            f"w = {k.w}[:{k.cout * kdim}].reshape({k.group}, {coutg}, {kdim})",
            f"for n in range({_n(k.n)}):",
            f"{INDENT}for g in range({k.group}):",
        ]
        inner = []
        if k.scratch:
            params = [k.x, k.scratch, "n", "g"]
            helper = self.function(f"{name}_im2col", "im2col", k.nodes[:1], params, *self.im2col(k))
            inner.append(f"{helper}({k.x}, {k.scratch}, n, g)")
            inner.append(f"col = {k.scratch}[:{kdim * ohw}].reshape({kdim}, {ohw})")
        else:  # 1x1, stride 1, no padding: the input is already the column matrix
            start = f"(n * {k.c} + g * {cg}) * {k.h * k.w_in}"
            inner.append(f"col = {k.x}[{start}:{start} + {kdim * ohw}].reshape({kdim}, {ohw})")
        inner.append(f"start = (n * {k.cout} + g * {coutg}) * {ohw}")
        inner.append(
            f"np.matmul(w[g], col, out={k.out}[start:start + {coutg * ohw}]"
            f".reshape({coutg}, {ohw}))"
        )
        body += [INDENT * 2 + line for line in inner]
        acc = kir.Access(k.out, DType.float32, 0, contiguous_strides(k.out_shape))
        body += self.epilogue(k, name, acc)
        return body, None

    def im2col(self, k: kir.Conv):
        sh, sw = k.stride
        ph, pw = k.pad
        dh, dw = k.dilation
        cg, ohw = k.c // k.group, k.oh * k.ow
        kdim = cg * k.kh * k.kw
        decorator = self.decorator(kdim * ohw)
        loop = "prange" if decorator == PARALLEL_JIT else "range"
        body = [
            f"base = (n * {k.c} + g * {cg}) * {k.h * k.w_in}",
            f"for row in {loop}({kdim}):",
            f"{INDENT}c = row // {k.kh * k.kw}",
            f"{INDENT}ki = row // {k.kw} % {k.kh}",
            f"{INDENT}kj = row % {k.kw}",
            f"{INDENT}for oy in range({k.oh}):",
            f"{INDENT * 2}iy = oy * {sh} - {ph} + ki * {dh}",
            f"{INDENT * 2}for ox in range({k.ow}):",
            f"{INDENT * 3}ix = ox * {sw} - {pw} + kj * {dw}",
            f"{INDENT * 3}inside = iy >= 0 and iy < {k.h} and ix >= 0 and ix < {k.w_in}",
            f"{INDENT * 3}value = {k.x}[base + (c * {k.h} + iy) * {k.w_in} + ix] "
            "if inside else np.float32(0.0)",
            f"{INDENT * 3}{k.scratch}[row * {ohw} + oy * {k.ow} + ox] = value",
        ]
        return body, decorator

    def epilogue(self, k, name: str, acc: kir.Access) -> list[str]:
        """The call of the fused epilogue (rendered as a pointwise kernel over the output,
        reading `acc` from where the product landed); [] without one."""
        if k.epilogue is None:
            return []
        ep = k.epilogue
        pointwise = kir.Pointwise(
            f"{name}_epilogue", ep.nodes, k.out_shape, {"acc": acc, **ep.loads}, ep.lets, ep.stores
        )
        params = list(dict.fromkeys(a.buffer for a in _accesses(pointwise)))
        params += sorted(free_symbols(pointwise), key=lambda d: int(d.removeprefix("dim")))
        body, decorator = self.pointwise(pointwise, pointwise.name)
        used = self.function(pointwise.name, "epilogue", ep.nodes, params, body, decorator)
        return [f"{used}({', '.join(params)})"]

    # -- pooling ----------------------------------------------------------------------------------
    def pool(self, k: kir.Pool, name: str):
        """Max or average pooling over 2 or 3 spatial dims (1-D comes as 2-D of height 1)."""
        rank = len(k.in_spatial)
        axes = ("z", "y", "x")[-rank:]
        if k.kind == "max":  # NaN-propagating, as mdsl_max_float in C
            init, update, result = "-np.inf", ["acc = acc if (acc > v or acc != acc) else v"], "acc"
        else:
            init, update = "0.0", ["acc += v", "count += 1"]
            result = "acc / np.float32(full)" if k.count_include_pad else "acc / np.float32(count)"
        decorator = self.decorator(k.n * k.c * math.prod(k.out_spatial))
        loop = "prange" if decorator == PARALLEL_JIT else "range"
        body = [
            f"for nc in {loop}({_n(k.n * k.c)}):",
            f"{INDENT}base = nc * {math.prod(k.in_spatial)}",
        ]
        depth = 1
        for a, n in zip(axes, k.out_spatial):
            body.append(f"{INDENT * depth}for o{a} in range({n}):")
            depth += 1
        out_depth = depth
        body += [f"{INDENT * depth}acc = np.float32({init})", f"{INDENT * depth}count = 0"]
        body.append(f"{INDENT * depth}full = 0")
        windows = list(zip(axes, k.in_spatial, k.kernel, k.strides, k.pads, k.dilations))
        for a, _, kk, s, p, d in windows:
            body.append(f"{INDENT * depth}for k{a} in range({kk}):")
            body.append(f"{INDENT * (depth + 1)}i{a} = o{a} * {s} - {p} + k{a} * {d}")
            depth += 1
        padded = " and ".join(f"i{a} < {n + p}" for a, n, _, _, p, _ in windows)
        inside = " and ".join(f"i{a} >= 0 and i{a} < {n}" for a, n, *_ in windows)
        at = ""
        for a, n, *_ in windows:
            at = f"({at}) * {n} + i{a}" if at else f"i{a}"
        body += [
            f"{INDENT * depth}if {padded}:",
            f"{INDENT * (depth + 1)}full += 1",
            f"{INDENT * depth}if {inside}:",
            f"{INDENT * (depth + 1)}v = {k.x}[base + {at}]",
            *(INDENT * (depth + 1) + line for line in update),
        ]
        index = "nc"
        for a, n in zip(axes, k.out_spatial):
            index = f"({index}) * {n} + o{a}"
        body.append(f"{INDENT * out_depth}{k.out}[{index}] = {result}")
        return body, decorator


_BODY = {
    kir.Pointwise: _ModuleRenderer.pointwise,
    kir.Rowwise: _ModuleRenderer.rowwise,
    kir.Gemm: _ModuleRenderer.gemm,
    kir.Conv: _ModuleRenderer.conv,
    kir.Pool: _ModuleRenderer.pool,
}


def _folded_batch(k: kir.Gemm) -> tuple[tuple[int, ...], int]:
    """(batch shape, rows) of the GEMM calls: a batch of row-major A matrices stacked
    contiguously against one shared B is one GEMM with batch * m rows."""
    batch = tuple(k.batch_shape)
    stacked = tuple(s * k.m * k.lda for s in contiguous_strides(batch))
    if batch and not k.trans_a and k.a.strides == stacked and not any(k.b.strides):
        return (), k.m * math.prod(batch)
    return batch, k.m


def _loop_nest(sizes: list[int], idx: list[str], body: list[str], parallel: bool) -> list[str]:
    lines = []
    for level, (size, var) in enumerate(zip(sizes, idx)):
        loop = "prange" if parallel and level == 0 else "range"
        lines.append(INDENT * level + f"for {var} in {loop}({_n(size)}):")
    return lines + [INDENT * len(sizes) + line for line in body]


def _decompose(flat: str, prefix: str, shape: tuple[int, ...]) -> list[str]:
    """Lines splitting flat index `flat` into `prefix0..` over `shape` (row-major)."""
    lines = []
    for d, size in enumerate(shape):
        inner = math.prod(shape[d + 1 :])
        value = f"{flat} // {_n(inner)}" if inner != 1 else flat
        lines.append(f"{prefix}{d} = {value}" + (f" % {_n(size)}" if d else ""))
    return lines


_INIT = {"sum": 0, "prod": 1}


class _RowRenderer:
    """The body of one row-reduction kernel's outer loop (see `kir.Rowwise`)."""

    def __init__(self, k: kir.Rowwise):
        self.k = k
        self.n_outer = len(k.outer_shape)
        scalars = [p for p in k.phases if isinstance(p, (kir.Let, kir.Reduce))]
        lets = [kir.Let(p.var, p.value, p.dtype) for p in scalars]
        lets += [
            let for p in k.phases if isinstance(p, (kir.Reduce, kir.RowStore)) for let in p.lets
        ]
        types = _var_types(k.loads, lets)
        types[kir.ROW_SIZE_VAR] = DType.int64
        self.r = NumbaExprRenderer(types)
        row_accesses = list(k.loads.values()) + [
            p.access for p in k.phases if isinstance(p, kir.RowStore)
        ]
        row_dims = merge_dims(
            k.row_shape,
            [kir.Access(a.buffer, a.dtype, 0, a.strides[self.n_outer :]) for a in row_accesses],
        )
        self.row_stride = {}
        if len(row_dims) == 1:
            for a, s in zip(row_accesses, row_dims[0][1]):
                self.row_stride[id(a)] = s
        self.bases: dict[int, str] = {}

    def lines(self) -> list[str]:
        k = self.k
        lines = _decompose("o", "o", k.outer_shape)
        stored = [p.access for p in k.phases if isinstance(p, (kir.RowStore, kir.Store))]
        named = list(k.loads.items()) + [(f"st{i}", a) for i, a in enumerate(stored)]
        outer_idx = [f"o{d}" for d in range(self.n_outer)]
        for name, a in named:
            outer = kir.Access(a.buffer, a.dtype, a.offset, a.strides[: self.n_outer])
            self.bases[id(a)] = f"b_{name}"
            lines.append(f"b_{name} = {flat_index(outer, outer_idx, 'py')}")
        for phase in k.phases:
            lines += self.phase(phase)
        return lines

    def phase(self, phase) -> list[str]:
        r = self.r
        if isinstance(phase, kir.Let):
            value = r.render(phase.value, phase.dtype)
            return [*self.scalar_loads(phase.value), f"{phase.var} = {value}"]
        if isinstance(phase, kir.Store):
            value = r.render(phase.value, phase.access.dtype)
            store = _store(phase.access, self.bases[id(phase.access)], value)
            return [*self.scalar_loads(phase.value), store]
        values = [let.value for let in phase.lets] + [phase.value]
        used = [v for v in E.variables(*values) if v in self.k.loads]
        temporaries = [f"{let.var} = {r.render(let.value, let.dtype)}" for let in phase.lets]
        if isinstance(phase, kir.Reduce):
            return self.reduce(phase, used, temporaries)
        if isinstance(phase, kir.RowStore):
            index = self.row_index(phase.access)
            value = r.render(phase.value, phase.access.dtype)
            return self.row_loop(used, [*temporaries, _store(phase.access, index, value)])
        raise TypeError(f"unknown phase {phase!r}")

    def reduce(self, phase: kir.Reduce, used: list[str], temporaries: list[str]) -> list[str]:
        t = compute_type(phase.dtype)
        acc = phase.var
        value = self.r.render(phase.value, t)
        if phase.op in ("max", "min"):
            better = ">" if phase.op == "max" else "<"
            update = [
                f"e = {value}",
                f"{acc} = {acc} if ({acc} {better} e or {acc} != {acc}) else e",
            ]
            init = _extreme(phase.op, t)
        else:
            update = [f"{acc} = {self.r.render(_accumulate(phase), t)}"]
            init = literal(_INIT[phase.op], t)
        return [f"{acc} = {init}", *self.row_loop(used, temporaries + update)]

    def row_loop(self, used: list[str], inner: list[str]) -> list[str]:
        k = self.k
        lines = [f"for j in range({_n(k.row_size)}):"]
        if len(k.row_shape) > 1 and not self.row_stride:
            lines += [INDENT + line for line in _decompose("j", "j", k.row_shape)]
        for name in used:
            lines.append(
                f"{INDENT}{name} = {k.loads[name].buffer}[{self.row_index(k.loads[name])}]"
            )
        return lines + [INDENT + line for line in inner]

    def row_index(self, access: kir.Access) -> str:
        off = row_offset(self.k, access, self.row_stride, self.n_outer, "py")
        base = self.bases[id(access)]
        return f"{base} + {off}" if off else base

    def scalar_loads(self, value) -> list[str]:
        lines = []
        for name in E.variables(value):
            if name in self.k.loads:
                a = self.k.loads[name]
                lines.append(f"{name} = {a.buffer}[{self.bases[id(a)]}]")
        return lines


def _accumulate(phase: kir.Reduce) -> E.Expr:
    acc = E.var(phase.var)
    return acc + phase.value if phase.op == "sum" else acc * phase.value


def _extreme(op: str, t: DType) -> str:
    """The identity of max/min in `t`: -inf/inf, or the integer type's limit."""
    if t.is_float:
        return literal(-math.inf if op == "max" else math.inf, t)
    if t == DType.bool_:
        return "False" if op == "max" else "True"
    info = np.iinfo(t.np)
    return f"{ctor(t)}({info.min if op == 'max' else info.max})"


# -- copies -----------------------------------------------------------------------------------------
def _is_copy(k) -> bool:
    """A pointwise kernel that only moves elements (reshape, transpose, slice, concat)."""
    if not isinstance(k, kir.Pointwise) or k.lets:
        return False
    for store in k.stores:
        load = k.loads.get(store.value.value) if store.value.op == "var" else None
        if load is None or load.dtype != store.access.dtype:
            return False
    return True


def _copy_lines(k: kir.Pointwise, offsets: dict[str, int]) -> list[str]:
    """numpy strided copies in the driver: no kernel to compile, any dtype (halves too).
    A copy onto the same arena bytes (a reshape the memory plan did in place) is none."""
    lines = []
    for store in k.stores:
        load, dst = k.loads[store.value.value], store.access
        dims = merge_dims(k.shape, [load, dst])
        shape = tuple(d for d, _ in dims)
        src_strides = tuple(s[0] for _, s in dims)
        dst_strides = tuple(s[1] for _, s in dims)
        same_bytes = load.buffer in offsets and offsets.get(load.buffer) == offsets.get(dst.buffer)
        if same_bytes and (load.offset, src_strides) == (dst.offset, dst_strides):
            continue
        lines.append(
            f"rt.strided_copy({load.buffer}, {_n(load.offset)}, {_tuple(shape)}, "
            f"{_tuple(src_strides)}, {dst.buffer}, {_n(dst.offset)}, {_tuple(dst_strides)})"
        )
    return lines


def _accesses(k: kir.Pointwise) -> list[kir.Access]:
    return list(k.loads.values()) + [s.access for s in k.stores]


# -- canonical kernels --------------------------------------------------------------------------------
class _Renamer:
    """A copy of a kernel with buffers named p0, p1, ... by first use and variables
    renumbered per prefix (ld7, ld9 -> ld0, ld1): equal structure, equal text."""

    def __init__(self):
        self.buffers: dict[str, str] = {}  # planner name -> parameter name
        self.vars: dict[str, str] = {}
        self.counts: dict[str, int] = {}

    def kernel(self, k):
        if isinstance(k, kir.Pointwise):
            loads = self.loads(k.loads)
            lets = [self.let(let) for let in k.lets]
            return replace(k, loads=loads, lets=lets, stores=[self.store(s) for s in k.stores])
        if isinstance(k, kir.Rowwise):
            return replace(k, loads=self.loads(k.loads), phases=[self.phase(p) for p in k.phases])
        if isinstance(k, kir.Gemm):
            a, b, out = self.access(k.a), self.access(k.b), self.access(k.out)
            return replace(k, a=a, b=b, out=out, epilogue=self.epilogue(k.epilogue))
        if isinstance(k, kir.Conv):
            x, w, out, scratch = (self.buffer(n) for n in (k.x, k.w, k.out, k.scratch))
            epilogue = self.epilogue(k.epilogue)
            return replace(k, x=x, w=w, out=out, scratch=scratch, epilogue=epilogue)
        if isinstance(k, kir.Pool):
            return replace(k, x=self.buffer(k.x), out=self.buffer(k.out))
        raise CompileError(f"the numba target has no rendering for {type(k).__name__} kernels")

    def buffer(self, name: str) -> str:
        if not name:  # a convolution without im2col scratch
            return name
        return self.buffers.setdefault(name, f"p{len(self.buffers)}")

    def var(self, name: str) -> str:
        if name not in self.vars:
            prefix = name.rstrip("0123456789")
            number = self.counts.get(prefix, 0)
            self.counts[prefix] = number + 1
            self.vars[name] = name if prefix == name else f"{prefix}{number}"
        return self.vars[name]

    def access(self, a: kir.Access) -> kir.Access:
        return replace(a, buffer=self.buffer(a.buffer))

    def expr(self, e: E.Expr) -> E.Expr:
        new: dict[int, E.Expr] = {}
        for node in E.walk(e):
            if node.op == "var":
                new[id(node)] = E.var(self.var(node.value))
            elif node.args:
                new[id(node)] = E.Expr(node.op, tuple(new[id(a)] for a in node.args), node.value)
            else:
                new[id(node)] = node
        return new[id(e)]

    def loads(self, loads: dict[str, kir.Access]) -> dict[str, kir.Access]:
        return {self.var(name): self.access(a) for name, a in loads.items()}

    def let(self, let: kir.Let) -> kir.Let:
        value = self.expr(let.value)
        return kir.Let(self.var(let.var), value, let.dtype)

    def store(self, s: kir.Store) -> kir.Store:
        return kir.Store(self.access(s.access), self.expr(s.value))

    def phase(self, p):
        if isinstance(p, kir.Let):
            return self.let(p)
        if isinstance(p, kir.Store):
            return self.store(p)
        lets = [self.let(let) for let in p.lets]
        if isinstance(p, kir.Reduce):
            value = self.expr(p.value)
            return kir.Reduce(self.var(p.var), p.op, value, p.dtype, lets)
        return kir.RowStore(self.access(p.access), self.expr(p.value), lets)

    def epilogue(self, ep: kir.Epilogue | None) -> kir.Epilogue | None:
        if ep is None:
            return None
        loads = self.loads(ep.loads)
        lets = [self.let(let) for let in ep.lets]
        return kir.Epilogue(loads, lets, [self.store(s) for s in ep.stores], ep.nodes)
