"""The C target: renders a Plan as one translation unit (kernels + a `mdsl_run` that
executes the whole schedule over one arena).

Structure lives in the Jinja templates under `csrc/templates/c/`; this module renders
loop nests and expressions. Identifiers in the C code are buffer and variable names the
planner made (`in0`, `t3`, `ld7`); user strings (node names, source lines) appear only
in comments, through `comment_text`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import re

import jinja2

from mdsl import expr as E
from mdsl.codegen import kir
from mdsl.codegen.access import flat_index, merge_dims, row_offset, with_strides
from mdsl.codegen.dims import free_symbols, render_dim
from mdsl.codegen.onednn import DECLARATIONS
from mdsl.codegen.packing import TILE_ALIGN, padded_extent
from mdsl.codegen.plan import Plan, kernel_buffers, slot_name
from mdsl.codegen.templates import template_environment
from mdsl.codegen.toolchain import last_level_cache_bytes
from mdsl.ir.dim import Dim
from mdsl.ir.dtype import DType
from mdsl.ir.naming import c_comment as comment_text
from mdsl.targets.c import column_rows, softmax_rows
from mdsl.targets.c.cindex import ctype as _ctype
from mdsl.targets.c.cindex import decompose as _decompose
from mdsl.targets.c.cindex import load as _load
from mdsl.targets.c.cindex import store as _store
from mdsl.targets.c.conv import (
    conv_index,
    onednn_conv_body,
    onednn_pool_body,
    packed_conv_body,
    uses_onednn,
)
from mdsl.targets.c.custom import call_status, render_call_body, render_preamble
from mdsl.targets.c.expr import C_TYPES, LIBMVEC, WRAPPING, CExprRenderer, compute_type
from mdsl.targets.c.indexed import render_indexed_body
from mdsl.targets.c.onednn_matmul import onednn_matmul_body, uses_onednn_matmul
from mdsl.targets.c.pool_rows import separable_pool_lines, signed_offset, window_interior

INDENT = "    "


@functools.lru_cache(maxsize=1)  # parsing the templates again costs ~0.1 s per compile
def _env() -> jinja2.Environment:
    return template_environment("c")


# A plan whose schedule calls more kernels than this is built as several translation
# units (`render_units`): BERT-base's 2,400 calls in one function took gcc 4-6 s at -O3.
SPLIT_CALLS = 256
KERNEL_UNIT_LINES = 3000  # about this many lines of kernels per kernel unit ...
KERNEL_UNITS_MAX = 4  # ... and at most this many kernel units


def render_c(plan: Plan, *, profile: bool = False) -> str:
    """The C source of `plan`, one translation unit. With `profile`, the unit also exports
    `mdsl_run_profile`: `mdsl_run` with one more argument, `double *timings`, where kernel
    i writes its start (seconds after the call began) at `timings[2 * i]` and its duration
    at `timings[2 * i + 1]` (CLOCK_MONOTONIC); `mdsl_run` itself is unchanged."""
    kernels, calls = _kernels(plan, "static")
    texts = [k.text for k in kernels]
    return _module(plan, calls, profile, unit="whole", kernels=texts, kernel_count=len(texts))


def render_units(plan: Plan, stem: str, *, profile: bool = False) -> dict[str, str]:
    """The translation units `backend="c"` builds for `plan`, by file name: `render_c`'s
    one unit `<stem>.c` for a plan whose schedule calls at most SPLIT_CALLS kernels; else
    `<stem>.c` holding the schedule, the team and the entry points, compiled without
    optimization (`schedule_unit`), and `<stem>_kernels<i>.c` holding the kernels,
    compiled in parallel. The split depends on the plan alone, so a saved executable's
    sources can be checked against it on any machine."""
    if sum(1 for _ in plan.all_kernels()) <= SPLIT_CALLS:
        return {f"{stem}.c": render_c(plan, profile=profile)}
    kernels, calls = _kernels(plan, "MDSL_KERNEL")
    groups = _balanced(kernels, _kernel_unit_count(kernels))
    count, total = len(groups), len(kernels)
    units = {
        f"{stem}.c": _module(
            plan,
            calls,
            profile,
            unit="schedule",
            kernel_units=count,
            kernel_count=total,
            prototypes=[k.prototype for k in kernels if k.prototype],
        )
    }
    for i, group in enumerate(groups, 1):
        units[f"{stem}_kernels{i}.c"] = _module(
            plan,
            calls,
            False,
            unit="kernels",
            unit_index=i,
            kernel_units=count,
            kernel_count=total,
            kernels=[k.text for k in group],
        )
    return units


def schedule_unit(units: dict[str, str]) -> str | None:
    """The file name of the schedule unit of split `units` (`render_units`), else None."""
    return next(iter(units)) if len(units) > 1 else None


@dataclasses.dataclass(frozen=True, slots=True)
class _KernelText:
    text: str  # the function, or a comment naming the function a repeated kernel runs as
    prototype: str | None  # its declaration (None for a comment)


def _kernels(plan: Plan, linkage: str) -> tuple[list[_KernelText], dict[int, str]]:
    """Each kernel's text in schedule order, and each kernel's line in the schedule (by
    `id`); a repeated layer's kernel (equal code, other buffers) reuses one function."""
    kernel_template = _env().get_template("kernel.c.j2")
    kernels, calls = [], {}
    shared: dict[tuple[str, str], str] = {}  # (parameters, body) as `_code_key` -> function
    position = {name: i for i, name in enumerate(plan.buffers)}
    for step, k in enumerate(plan.all_kernels()):
        if isinstance(k, kir.Branch | kir.Loop):
            continue  # rendered in the schedule (`mdsl.targets.c.control`)
        params, args = _signature(plan, k, position)
        body = _BODY[type(k)](plan, k).rstrip("\n")
        nodes = [_node_line(n) for n in k.nodes]
        key = _code_key(params, body)
        function = shared.get(key) if key else None
        if function is None:
            function = k.name
            if key:
                shared[key] = function
            signature = f"{k.name}({', '.join(params) or 'void'})"
            text = kernel_template.render(
                name=k.name,
                kind=k.KIND,
                nodes=nodes,
                params=", ".join(params) or "void",
                body=body,
                linkage=linkage,
            ).rstrip("\n")
            kernels.append(_KernelText(text, f"{linkage} int {signature};"))
        else:  # a repeated layer's kernel: one function, compiled once
            lines = [f"/* {k.name}: {k.KIND}, runs as {function}", *(f" *   {n}" for n in nodes)]
            kernels.append(_KernelText("\n".join(lines) + "\n */", None))
        # a failing kernel returns its step + 1, so the caller can name it
        call = f"{function}({', '.join(args)})"
        if copy := kir.same_place_copy(k):  # a reshape the arena laid over its source
            call = f"{copy[1]} != {copy[0]} && {call}"
        calls[id(k)] = call_status(k, step, call)
        if isinstance(k, kir.Callback | kir.CustomCall):  # sizes the node's results decided
            calls[id(k)] += "".join(f" {slot_name(i)} = dims[{i}];" for i in plan.slots_bound_by(k))
    return kernels, calls


def _kernel_unit_count(kernels: list[_KernelText]) -> int:
    lines = sum(k.text.count("\n") + 1 for k in kernels)
    return max(1, min(KERNEL_UNITS_MAX, -(-lines // KERNEL_UNIT_LINES)))


def _balanced(kernels: list[_KernelText], count: int) -> list[list[_KernelText]]:
    """`kernels` in `count` groups of about equal text, each in schedule order: the
    longest first, each to the group with least so far."""
    sizes = [0] * count
    owner = {}
    for i in sorted(range(len(kernels)), key=lambda i: -len(kernels[i].text)):
        group = sizes.index(min(sizes))
        owner[i] = group
        sizes[group] += len(kernels[i].text)
    groups: list[list[_KernelText]] = [[] for _ in range(count)]
    for i, k in enumerate(kernels):
        groups[owner[i]].append(k)
    return [g for g in groups if g]


def _module(plan: Plan, calls: dict[int, str], profile: bool, **unit) -> str:
    """module.c.j2 for `plan`: the whole unit, or one of a split build's (`unit`, with
    `kernels` or `prototypes`)."""
    unit = {"kernels": [], "prototypes": [], "unit_index": 0, "kernel_units": 0, **unit}
    lines = _schedule_lines(plan, calls, profile) if unit["unit"] != "kernels" else ([], [])
    call_lines, timed_lines = lines
    memory = plan.memory
    return (
        _env()
        .get_template("module.c.j2")
        .render(
            graph_name=comment_text(plan.graph.name),
            memory=memory is not None,
            arena_bytes=memory and memory.arena_bytes,
            naive_bytes=memory and memory.naive_bytes,
            lower_bound_bytes=memory and memory.lower_bound_bytes,
            uses_blas=any(isinstance(k, (kir.Gemm, kir.Conv)) for k in plan.all_kernels()),
            uses_packed_gemm=any(
                isinstance(k, kir.Gemm) and k.packed_b for k in plan.all_kernels()
            ),
            uses_packed_conv=any(
                isinstance(k, kir.Conv) and k.packed_w for k in plan.all_kernels()
            ),
            uses_softmax_rows=any(
                isinstance(k, kir.Rowwise) and softmax_rows.softmax_form(k) is not None
                for k in plan.all_kernels()
            ),
            uses_silu=any(isinstance(k, kir.Conv) and k.silu for k in plan.all_kernels()),
            uses_stream_rows=any(
                isinstance(k, kir.Rowwise) and streamed_row_store(k) is not None
                for k in plan.all_kernels()
            ),
            onednn_declarations=DECLARATIONS if uses_onednn(plan) else "",
            uses_onednn_matmul=uses_onednn_matmul(plan),
            buffer_lines=_buffer_lines(plan),
            call_lines=call_lines,
            preamble=render_preamble(plan),
            profile=profile,
            profile_call_lines=timed_lines,
            dims=plan.uses_dims,
            libmvec=LIBMVEC,
            **unit,
        )
    )


def _schedule_lines(plan: Plan, calls: dict[int, str], profile: bool):
    """(the calls of `mdsl_run`, those of `mdsl_run_profile` or [])."""
    if not plan.has_control_flow:
        flat = [calls[id(k)] for k in plan.kernels]
        return _checkpointed(flat), _timed_calls(flat) if profile else []
    from mdsl.targets.c.control import Schedule

    timed = Schedule(plan, calls, timed=True).lines(plan.kernels) if profile else []
    return Schedule(plan, calls).lines(plan.kernels), timed


def _checkpointed(calls: list[str]) -> list[str]:
    """`calls` with the team choice's checkpoint between each two (team.h.j2: a call on
    the whole team that has lost against one thread runs its remaining kernels on one)."""
    lines = calls[:1]
    for call in calls[1:]:
        lines += ["mdsl_team_checkpoint(team_call);", call]
    return lines


def _timed_calls(calls: list[str]) -> list[str]:
    """`calls` with kernel step i's start offset and duration stored in `timings`."""
    lines = []
    for step, call in enumerate(calls):
        lines += [
            "mdsl_start = mdsl_clock();",
            call,
            f"timings[{2 * step}] = mdsl_start - mdsl_t0; "
            f"timings[{2 * step + 1}] = mdsl_clock() - mdsl_start;",
        ]
    return lines


def _node_line(ref: kir.NodeRef) -> str:
    where = f" at {ref.source}" if ref.source else ""
    return comment_text(f"{ref.name} ({ref.op_type}){where}")


def _buffer_lines(plan: Plan) -> list[str]:
    lines = _dim_lines(plan)
    arena_slot = {name: i for i, name in enumerate(plan.arena_buffers)}
    for name, spec in plan.buffers.items():
        ctype = C_TYPES[spec.dtype]
        if spec.kind == "input":
            source = f"inputs[{spec.slot}]"
        elif spec.kind == "output":
            source = f"outputs[{spec.slot}]"
        elif spec.kind == "const":
            source = f"(void *)consts[{spec.slot}]"
        elif plan.memory is None and name in arena_slot:  # planned per shape signature
            source = f"arena + offsets[{arena_slot[name]}]"
        elif plan.memory is not None and name in plan.memory.offsets:
            source = f"arena + {plan.memory.offsets[name]}"
        else:
            continue  # planned but never touched, a view, or a pointer the schedule declares
        lines.append(f"{ctype} *{name} = ({ctype} *)({source});  /* {comment_text(spec.tensor)} */")
    for name, view in plan.views.items():
        ctype = C_TYPES[plan.buffers[name].dtype]
        where = f"its producers write straight into {view.concat}'s output"
        if view.pixel_stride:
            where += f", its pixels {view.pixel_stride} elements apart"
        lines.append(
            f"{ctype} *{name} = ({ctype} *)((char *){view.root} + {view.offset});  "
            f"/* {comment_text(plan.buffers[name].tensor)}: {comment_text(where)} */"
        )
    return lines


def _dim_lines(plan: Plan) -> list[str]:
    """The symbols' values as locals `dim0`, ... (a control-flow node's dynamic dims are
    assigned by the schedule)."""
    if not plan.uses_dims:
        return []
    lines = [
        f"int64_t {slot_name(i)} = dims[{i}]; (void){slot_name(i)};  /* {comment_text(s)} */"
        for i, s in enumerate(plan.symbols)
    ]
    return [*lines, "(void)dims; (void)offsets;"]


def _signature(plan: Plan, k, position: dict[str, int]) -> tuple[list[str], list[str]]:
    reads, writes = kernel_buffers(k)
    names = sorted(reads | writes, key=position.__getitem__)
    params = [f"{C_TYPES[plan.buffers[n].dtype]} *{n}" for n in names]
    args = list(names)
    slots = free_symbols(k) if plan.symbols else ()  # a static plan has no Dims to look for
    for slot in sorted(slots, key=lambda n: int(n.removeprefix("dim"))):
        params.append(f"int64_t {slot}")
        args.append(slot)
    if isinstance(k, kir.Callback):
        params.append("mdsl_callback_t callback")
        args.append("callback")
    if isinstance(k, kir.CustomCall) and k.sizes:  # the sizes it reports are bound in dims
        params.append("int64_t *dims")
        args.append("dims")
    return params, args


_IDENTIFIER = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)")
_MUTABLE_STATIC = re.compile(r"\bstatic\s+(?!const\b)")
# a local the body declares: `const float ld3 =`, `int r7_nan = 0;`, `int64_t b_ld2 =`
_DECLARED = re.compile(
    r"\b(?:float|double|int|char|_Float16|u?int(?:8|16|32|64)_t)\s*\*?\s*(?:(?:const|restrict)\s+)*"
    r"([A-Za-z_][A-Za-z0-9_]*)\s*(?=[=;\[])"
)


def _code_key(params: list[str], body: str) -> tuple[str, str] | None:
    """What makes two kernels one function: their code with each parameter renamed by
    its position and each local it declares by the order of declaration (BERT's 12
    layers differ only in the buffers they are passed and in the planner's numbering
    of locals); every other name must be equal. None for a body with mutable static
    state (a oneDNN primitive), which is never shared."""
    if "static" in body and _MUTABLE_STATIC.search(body):
        return None
    names = {p.split()[-1].lstrip("*"): f"@{i}" for i, p in enumerate(params)}
    for name in _DECLARED.findall(body):
        names.setdefault(name, f"@v{len(names)}")

    def rename(text: str) -> str:
        parts = _IDENTIFIER.split(text)  # (other text, identifier) alternating
        parts[1::2] = [names.get(word, word) for word in parts[1::2]]
        return "".join(parts)

    return ", ".join(rename(p) for p in params), rename(body)


def _var_types(loads: dict[str, kir.Access], lets) -> dict[str, DType]:
    types = {name: compute_type(a.dtype) for name, a in loads.items()}
    for let in lets:
        types[let.var] = compute_type(let.dtype)
    return types


# -- pointwise ------------------------------------------------------------------------------------
def _pointwise_body(plan: Plan, k: kir.Pointwise) -> str:
    load_names = list(k.loads)
    accesses = [k.loads[n] for n in load_names] + [s.access for s in k.stores]
    dims = merge_dims(k.shape, accesses)
    idx = [f"i{d}" for d in range(len(dims))]
    views = [with_strides(a, [s[j] for _, s in dims]) for j, a in enumerate(accesses)]
    types = _var_types(k.loads, k.lets)
    r = CExprRenderer(types)
    body = []
    for name, view in zip(load_names, views):
        body.append(f"const {_ctype(view.dtype)} {name} = {_load(view, flat_index(view, idx))};")
    for let in k.lets:
        body.append(f"const {_ctype(let.dtype)} {let.var} = {r.render_as(let.value, let.dtype)};")
    for store, view in zip(k.stores, views[len(load_names) :]):
        value = r.render_as(store.value, store.access.dtype)
        body.append(_store(view, flat_index(view, idx), value))
    sizes = [d for d, _ in dims]
    if _transposes(sizes, views[: len(load_names)]):
        return _tiled_loop_nest(sizes, idx, body, math.prod(k.shape))
    return _loop_nest(sizes, idx, body, math.prod(k.shape))


# A loop nest whose innermost loop reads an input down a column (a stride of many elements)
# and that input's rows along the loop outside it, as a transpose does, runs in square
# tiles of this many elements a side: each cache line read is used whole while in L1.
# SegFormer's [3136, 128] -> [128, 3136] took 0.68 ms untiled (a line read for every
# float, from L3) and 0.19 ms in tiles of 32 (tiles of 8: 0.23, 16: 0.21, 64: 0.19; Zen 3)
TRANSPOSE_TILE = 32
TRANSPOSE_MIN_STRIDE = 16  # elements: a float32 cache line, so each innermost read is a new line


def _transposes(sizes: list, loads: list[kir.Access]) -> bool:
    """Whether the last two of the loop nest's static `sizes` read some input as a
    transpose: down a column of it in the innermost loop, along its rows in the next."""
    if len(sizes) < 2 or not all(isinstance(n, int) for n in sizes[-2:]):
        return False
    if min(sizes[-2:]) < TRANSPOSE_TILE:
        return False
    return any(
        a.strides[-2] == 1
        and isinstance(a.strides[-1], int)
        and a.strides[-1] >= TRANSPOSE_MIN_STRIDE
        for a in loads
    )


def _tiled_loop_nest(sizes: list[int], idx: list[str], body: list[str], total: int) -> str:
    """`_loop_nest` with its last two loops in TRANSPOSE_TILE x TRANSPOSE_TILE tiles (the
    first tile loop parallel when those are the only two)."""
    t, (rows, cols), (r, c) = TRANSPOSE_TILE, sizes[-2:], idx[-2:]
    outer = sizes[:-2]
    tiles = [
        f"for (int64_t {r}t = 0; {r}t < {rows}; {r}t += {t}) {{",
        f"for (int64_t {c}t = 0; {c}t < {cols}; {c}t += {t}) {{",
        f"for (int64_t {r} = {r}t; {r} < ({r}t + {t} < {rows} ? {r}t + {t} : {rows}); {r}++) {{",
        "#pragma omp simd",
        f"for (int64_t {c} = {c}t; {c} < ({c}t + {t} < {cols} ? {c}t + {t} : {cols}); {c}++) {{",
    ]
    lines = []
    for level, (size, var) in enumerate(zip(outer, idx)):
        pragma = _parallel(total, trips=size) if level == 0 else ""
        lines += [INDENT * (level + 1) + pragma] if pragma else []
        loop = f"for (int64_t {var} = 0; {var} < {render_dim(size)}; {var}++) {{"
        lines.append(INDENT * (level + 1) + loop)
    depth = len(outer)
    if not outer:
        pragma = _parallel(total, trips=-(-rows // t))
        lines += [INDENT + pragma] if pragma else []
    level = depth
    for line in tiles:
        lines.append(INDENT * (level + 1) + line)
        level += line.endswith("{")
    lines += [INDENT * (level + 1) + line for line in body]
    for closing in reversed(range(level)):
        lines.append(INDENT * (closing + 1) + "}")
    return "\n".join(lines)


PARALLEL_MIN = 32768  # elements below which a loop stays on one thread (no OpenMP entry cost)


# A parallel loop is cut into about this many chunks that the team's threads take as they
# finish (`schedule(dynamic)`): when the scheduler holds one thread back (another process on
# its core), the others take its share and the call waits for one chunk of it at most,
# instead of for half the loop (static halves). Chunks keep at least CHUNK_MIN_WORK elements.
CHUNKS = 16
CHUNK_MIN_WORK = 16384


def _parallel(work: int, clause: str = "parallel for", trips=None) -> str:
    """An OpenMP pragma for a loop doing `work` element operations; small loops get none
    (entering a parallel region costs microseconds even when it runs on one thread).
    Symbolic work decides at run time (an `if` clause). Given the loop's trip count
    `trips`, its iterations are handed out in dynamic chunks (see CHUNKS)."""
    if trips is not None:
        clause += " " + _dynamic_schedule(work, trips, simd="simd" in clause)
    if isinstance(work, Dim):
        return f"#pragma omp {clause} if({render_dim(work)} > {PARALLEL_MIN})"
    return f"#pragma omp {clause}" if work > PARALLEL_MIN else ""


def _dynamic_schedule(work, trips, simd: bool) -> str:
    kind = "simd:dynamic" if simd else "dynamic"
    if isinstance(trips, Dim) or isinstance(work, Dim):
        return f"schedule({kind}, ({render_dim(trips)} + {CHUNKS - 1}) / {CHUNKS})"
    chunks = max(1, min(CHUNKS, work // CHUNK_MIN_WORK))
    return f"schedule({kind}, {max(1, -(-trips // chunks))})"


def _loop_nest(sizes: list[int], idx: list[str], body: list[str], total: int) -> str:
    lines = []
    depth = len(sizes)
    for level, (size, var) in enumerate(zip(sizes, idx)):
        pad = INDENT * (level + 1)
        if level == 0 and depth == 1:
            pragma = _parallel(total, "parallel for simd", size) or "#pragma omp simd"
        elif level == 0:
            pragma = _parallel(total, trips=size)
        else:
            pragma = "#pragma omp simd" if level == depth - 1 else ""
        if pragma:
            lines.append(pad + pragma)
        lines.append(f"{pad}for (int64_t {var} = 0; {var} < {render_dim(size)}; {var}++) {{")
    pad = INDENT * (depth + 1)
    lines += [pad + line for line in body]
    for level in reversed(range(depth)):
        lines.append(INDENT * (level + 1) + "}")
    return "\n".join(lines)


# -- rowwise --------------------------------------------------------------------------------------
_INIT = {"sum": "0", "prod": "1", "max": "-INFINITY", "min": "INFINITY"}
_OMP_OP = {"sum": "+", "prod": "*", "max": "max", "min": "min"}
# identities of integer max/min in the accumulator's own type (INT64_MIN in an int32 is 0)
_INT_LIMITS = {
    DType.bool_: ("0", "1"),
    DType.int8: ("INT8_MIN", "INT8_MAX"),
    DType.uint8: ("0", "UINT8_MAX"),
    DType.int16: ("INT16_MIN", "INT16_MAX"),
    DType.int32: ("INT32_MIN", "INT32_MAX"),
    DType.int64: ("INT64_MIN", "INT64_MAX"),
    DType.uint16: ("0", "UINT16_MAX"),
    DType.uint32: ("0", "UINT32_MAX"),
    DType.uint64: ("0", "UINT64_MAX"),
}


def _stash_row_values(k: kir.Rowwise) -> tuple[kir.Rowwise, dict[int, kir.Access]]:
    """Softmax rows in one read and one write: a sum phase whose per-element value (the
    very expression node, `exp(x - max)`) a later row store uses again writes it into
    that store's output row as it sums, and the store reads it back instead of computing
    it again. Returns the kernel (loads and that store rewritten) and, by id of each
    such sum phase, the access it writes."""
    phases, loads, stashes = list(k.phases), dict(k.loads), {}
    for i, phase in enumerate(phases):
        if not (isinstance(phase, kir.Reduce) and phase.op == "sum" and not phase.lets):
            continue
        if phase.value.op in ("var", "const"):
            continue
        for j in range(i + 1, len(phases)):
            store = phases[j]
            if not isinstance(store, kir.RowStore) or store.lets:
                continue
            if store.access.dtype not in (DType.float32, DType.float64):
                continue
            if store.access.dtype != compute_type(phase.dtype) or not _contains(
                store.value, phase.value
            ):
                continue
            if any(a.buffer == store.access.buffer for a in loads.values()):
                continue
            name = f"{phase.var}_e"
            loads[name] = store.access  # the same record: it shares the store's row offsets
            value = _replace_node(store.value, phase.value, E.var(name))
            phases[j] = kir.RowStore(store.access, value, store.lets)
            stashes[id(phase)] = store.access
            break
    if not stashes:
        return k, {}
    return dataclasses.replace(k, loads=loads, phases=phases), stashes


def _contains(root: E.Expr, node: E.Expr) -> bool:
    return any(n is node for n in E.walk(root))


def _replace_node(root: E.Expr, node: E.Expr, by: E.Expr) -> E.Expr:
    """`root` with every occurrence of the node object `node` replaced by `by`."""
    done: dict[int, E.Expr] = {}
    for n in E.walk(root):
        if n is node:
            done[id(n)] = by
        elif n.args:
            args = tuple(done[id(a)] for a in n.args)
            same = all(a is b for a, b in zip(args, n.args))
            done[id(n)] = n if same else dataclasses.replace(n, args=args)
        else:
            done[id(n)] = n
    return done[id(root)]


def _row_strides(k: kir.Rowwise) -> dict[int, object]:
    """The row stride of each load and row store of `k`, by id of its access, when the
    row's dims merge into one (else empty)."""
    n_outer = len(k.outer_shape)
    row_accesses = list(k.loads.values()) + [
        p.access for p in k.phases if isinstance(p, kir.RowStore)
    ]
    row_dims = merge_dims(
        k.row_shape, [kir.Access(a.buffer, a.dtype, 0, a.strides[n_outer:]) for a in row_accesses]
    )
    if len(row_dims) != 1:
        return {}
    return {id(a): s for a, s in zip(row_accesses, row_dims[0][1])}


def _rowwise_body(plan: Plan, k: kir.Rowwise) -> str:
    across = column_rows.columns(k)
    if across is not None:
        return column_rows.body(across, _row_renderer(across), _row_strides(across), _parallel)
    streamed = streamed_row_store(k)
    form = softmax_rows.softmax_form(k)
    if form is not None and not softmax_rows.usable(k, form, _row_strides(k)):
        form = None
    k, stashes = (k, {}) if form is not None else _stash_row_values(k)
    n_outer = len(k.outer_shape)
    r = _row_renderer(k)
    several = isinstance(k.outer_size, Dim) or k.outer_size > 1
    pragma = _parallel(k.outer_size * k.row_size, trips=k.outer_size) if several else ""
    lines = []
    if isinstance(k.row_size, Dim):  # the row size, for means over a symbolic row
        lines.append(f"{INDENT}const int64_t {kir.ROW_SIZE_VAR} = {render_dim(k.row_size)};")
    loop = [pragma] if pragma else []
    loop.append(f"for (int64_t o = 0; o < {render_dim(k.outer_size)}; o++) {{")
    body = _decompose("o", "o", k.outer_shape)
    row_stride = _row_strides(k)
    bases = {}
    for name, a in list(k.loads.items()) + [
        (f"st{i}", p.access)
        for i, p in enumerate(k.phases)
        if isinstance(p, (kir.RowStore, kir.Store))
    ]:
        base = flat_index(
            kir.Access(a.buffer, a.dtype, a.offset, a.strides[:n_outer]),
            [f"o{d}" for d in range(n_outer)],
        )
        bases[id(a)] = f"b_{name}"
        body.append(f"const int64_t b_{name} = {base};")
    ends_in_store = form is None and _ends_in_flat_row_store(k, row_stride)
    hinted = _line_hinted_loads(k, row_stride, n_outer) if ends_in_store else []
    if not ends_in_store:
        body += _prefetch_next_rows(k, bases, row_stride, n_outer)
    if form is not None:
        body += _softmax_row_lines(k, form, r, bases, row_stride, n_outer)
    else:
        for phase in k.phases:
            stash = stashes.get(id(phase))
            last = phase is k.phases[-1]
            if phase is streamed:
                body += _streamed_row_lines(k, phase, r, bases, row_stride, n_outer, hinted)
            elif last and isinstance(phase, kir.RowStore):
                body += _row_store_loop(k, phase, r, bases, row_stride, n_outer, hinted)
            else:
                body += _phase_lines(k, phase, r, bases, row_stride, n_outer, stash)
    loop += [INDENT + line for line in body]
    loop.append("}")
    if streamed is not None:
        loop = _fenced(loop)
    lines += [INDENT + line for line in loop]
    return "\n".join(lines)


def _row_renderer(k: kir.Rowwise) -> CExprRenderer:
    """The expression renderer of `k`'s phases: its loads' and row scalars' types."""
    lets = [p for p in k.phases if isinstance(p, (kir.Let, kir.Reduce))]
    types = _var_types(k.loads, [kir.Let(p.var, p.value, p.dtype) for p in lets])
    types[kir.ROW_SIZE_VAR] = DType.int64
    return CExprRenderer(types)


# A row kernel whose float32 output is at least this big writes it by streaming stores
# (stream_rows.h.j2): such an output has left the cache before its reader comes, and a
# plain store reads each line before writing it. Layer norm over [n, 768] and then a
# pass reading its output, one core, Zen 3, medians (plain / streamed): 3 MiB of output
# 0.41 / 0.53 ms, 6 MiB 1.30 / 1.21, 12 MiB 3.46 / 2.84; the layer norm alone over
# 12 MiB 1.87-2.08 / 1.07-1.24 ms. Rows up to STREAM_ROW_MAX elements (the stack buffer
# one is computed into) and at least STREAM_ROW_MIN (a streamed partial line is slow).
STREAM_MIN_BYTES = 8 << 20
# ...and at least an eighth of the last-level cache: an output well inside it is still
# there for its reader, and streaming it out costs a trip to memory. Layer norm alone on
# a Xeon with 480 MiB of L3, one core (plain / streamed): 12 MiB 1.08 / 1.45 ms, 48 MiB
# 4.8 / 5.5, 96 MiB 13.3 / 10.8, 192 MiB 28.7 / 24.1; Zen 3's 32 MiB gives the 8 MiB above.
STREAM_CACHE_SHARE = 8
STREAM_ROW_MAX = 4096
STREAM_ROW_MIN = 64


def stream_min_bytes() -> int:
    """The smallest row output written by streaming stores on the machine that builds."""
    return max(STREAM_MIN_BYTES, last_level_cache_bytes() // STREAM_CACHE_SHARE)


def streamed_row_store(k: kir.Rowwise) -> kir.RowStore | None:
    """The row store of `k` written by streaming stores, if any: a static kernel's only
    store, float32 rows one element apart, large (`stream_min_bytes`), and no load of the
    kernel reading its buffer. Not a softmax: over [98304, 128] streamed rows took 9%
    longer (and over [12288, 1024] 4% less)."""
    if isinstance(k.outer_size, Dim) or isinstance(k.row_size, Dim):
        return None
    if not STREAM_ROW_MIN <= k.row_size <= STREAM_ROW_MAX:
        return None
    if k.outer_size * k.row_size * 4 < stream_min_bytes():
        return None
    stores = [p for p in k.phases if isinstance(p, (kir.RowStore, kir.Store))]
    if len(stores) != 1 or not isinstance(stores[0], kir.RowStore):
        return None
    access, strides = stores[0].access, _row_strides(k)
    if access.dtype != DType.float32 or strides.get(id(access)) != 1:
        return None
    if any(a.buffer == access.buffer for a in k.loads.values()):
        return None
    if softmax_rows.softmax_form(k) is not None or _stash_row_values(k)[1]:
        return None
    return stores[0]


def _streamed_row_lines(k, store, r, bases, row_stride, n_outer, hinted) -> list[str]:
    """A row store computed into a stack row and streamed to its output."""
    used = [v for v in E.variables(store.value) if v in k.loads]
    value = r.render_as(store.value, store.access.dtype)
    n = k.row_size
    inner = [f"row[j] = {value};"]
    loop = _line_hinting_row_loop(k, used, r, bases, row_stride, n_outer, inner, hinted)
    out = f"{store.access.buffer} + {bases[id(store.access)]}"
    return [
        f"float row[{n}] __attribute__((aligned(64)));",
        *loop,
        f"mdsl_stream_f32({out}, row, {n});",
    ]


def _fenced(loop: list[str]) -> list[str]:
    """`loop` (its OpenMP pragma first, if any) with each thread's streaming stores
    fenced once its share is done."""
    if not loop[0].startswith("#pragma omp parallel for"):
        return [*loop, "mdsl_stream_fence();"]
    clauses = loop[0].removeprefix("#pragma omp parallel for").strip()
    condition = re.search(r"\bif\(.*\)$", clauses)
    outer = "#pragma omp parallel" + (f" {condition.group(0)}" if condition else "")
    schedule = clauses[: condition.start()].strip() if condition else clauses
    inner = f"#pragma omp for {schedule} nowait".replace("  ", " ")
    body = [inner, *loop[1:], "mdsl_stream_fence();"]
    return [outer, "{", *[INDENT + line for line in body], "}"]


# Rows read in several passes have a later row hinted into the L2 cache (`mdsl_prefetch`),
# the hardware's stream prefetcher not running far enough ahead: the row about
# PREFETCH_AHEAD_BYTES on, or the next one when rows are longer. One core, Zen 3, means
# over 3 compiles (each output buffer lands on other pages, which moves a call by up to
# 10%): softmax over [64, 12, 128, 128] (rows of 512 bytes, 48 MiB from memory) took
# 7.7-7.9 ms with no hint, 7.5 with the row 8 KiB on, 7.1-7.2 with 16 or 32 KiB; layer
# norm over [4096, 768] (from L3) took 1.8 ms with no hint and 1.59 with the next row
# or the row 16 KiB on. Rows shorter than PREFETCH_MIN_BYTES take no hint: one a row
# would cost more than the rows save.
PREFETCH_MIN_BYTES = 256
PREFETCH_AHEAD_BYTES = 16384


def _rows_to_hint(k: kir.Rowwise, row_stride, n_outer: int) -> list[kir.Access]:
    """The inputs of a kernel passing over its rows more than once whose later rows are
    worth a hint: contiguous rows, moving along the innermost outer dim."""
    passes = sum(isinstance(p, (kir.Reduce, kir.RowStore)) for p in k.phases)
    if passes < 2 or not n_outer:
        return []
    moving = []
    for a in k.loads.values():
        step = a.strides[n_outer - 1]
        if row_stride.get(id(a)) == 1 and not (isinstance(step, int) and step == 0):
            moving.append(a)
    return moving


def _prefetch_next_rows(k: kir.Rowwise, bases, row_stride, n_outer: int) -> list[str]:
    """Lines hinting a later row of each contiguous input into the L2 cache."""
    lines = []
    for a in _rows_to_hint(k, row_stride, n_outer):
        step, size = a.strides[n_outer - 1], a.dtype.itemsize
        ahead = 1
        if not isinstance(k.row_size, Dim):
            if k.row_size * size < PREFETCH_MIN_BYTES:
                continue
            ahead = max(1, PREFETCH_AHEAD_BYTES // (k.row_size * size))
        rows_on = render_dim(step) if ahead == 1 else f"{ahead} * {render_dim(step)}"
        row = f"({bases[id(a)]} + {rows_on}) * {size}"
        line = f"mdsl_prefetch({a.buffer}, {row}, {render_dim(k.row_size)} * {size});"
        if line not in lines:
            lines.append(line)
    return lines


# A kernel whose last pass is a row store (layer norm, RMS norm) instead hints its inputs
# into L1 from that pass, one 64-byte line per line it reads, LINE_HINT_AHEAD_BYTES on:
# the reads of rows to come then overlap the stores, where a burst of 64 hints at the
# row's start waited on the memory system's queue. Layer norm over 12 MiB of [n, d] rows
# in a C harness, one core of an AVX-512 Xeon, medians (a copy of the bytes: 0.87 ms):
#   d                128    256    512    768   1024   2048   4096
#   no hint         1.25   1.12   0.93   1.00   0.90   0.97   1.07 ms
#   burst, L2       1.38   1.01   0.99   0.97   1.01   1.03   1.12
#   line by line    1.36   0.88   0.88   0.88   0.89   0.88   0.99
# (4 KiB on did as well as 8; AVX2 flags, d = 768: 1.00, 1.05, 0.89.) Streamed rows the
# same way, d = 768: 12 MiB 1.17, 1.31, 0.92 ms; 96 MiB 11.6, 10.1, 8.7 ms. Rows shorter
# than LINE_HINT_MIN_BYTES take no hint. The output's line the same distance on is
# hinted for writing: the same layer norm, rows of 768, after the 12 MiB had left the
# cache, mean of 8 calls 1.10-1.20 ms with the input hinted and 1.01-1.13 with both
# (a memcpy 1.03-1.11), the same once warm; see docs/cpu-kernels.md.
LINE_HINT_AHEAD_BYTES = 8192
LINE_HINT_MIN_BYTES = 1024
LINE_BYTES = 64


def _ends_in_flat_row_store(k: kir.Rowwise, row_stride) -> bool:
    """Whether `k`'s last pass is a row store whose accesses index the row as one dim."""
    last = k.phases[-1] if k.phases else None
    if not isinstance(last, kir.RowStore) or id(last.access) not in row_stride:
        return False
    return all(id(k.loads[v]) in row_stride for v in E.variables(last.value) if v in k.loads)


def _line_hinted_loads(k: kir.Rowwise, row_stride, n_outer: int) -> list[kir.Access]:
    """The inputs a kernel ending in a row store hints from that pass (none when its rows
    are short)."""
    hinted = _rows_to_hint(k, row_stride, n_outer)
    if not isinstance(k.row_size, Dim):
        hinted = [a for a in hinted if k.row_size * a.dtype.itemsize >= LINE_HINT_MIN_BYTES]
    return hinted


def _line_hinting_row_loop(
    k, used, r, bases, row_stride, n_outer, inner, hinted, written=None
) -> list[str]:
    """`_row_loop` in steps of a cache line, each step hinting every input in `hinted`
    LINE_HINT_AHEAD_BYTES on (and the output `written`, if any, for writing), then the
    row's tail (no hinted inputs: the plain loop)."""
    simd = "#pragma omp simd"
    if not hinted:
        return _row_loop(k, used, r, bases, row_stride, n_outer, inner, simd)
    step = LINE_BYTES // min(a.dtype.itemsize for a in hinted)
    n = render_dim(k.row_size)
    targets = [(a, "mdsl_prefetch_line") for a in hinted]
    if written is not None:
        targets.append((written, "mdsl_prefetch_line_for_write"))
    hints: list[str] = []
    for a, helper in targets:
        for line in range(0, step * a.dtype.itemsize, LINE_BYTES):
            at = f"({bases[id(a)]} + j_line) * {a.dtype.itemsize} + {LINE_HINT_AHEAD_BYTES + line}"
            hint = f"{INDENT}{helper}({a.buffer}, {at});"
            hints += [] if hint in hints else [hint]
    head = [f"for (int64_t j = j_line; j < j_line + {step}; j++) {{"]
    lines = [
        "int64_t j_line = 0;  /* a cache line per step, hinting the rows to come */",
        f"for (; j_line + {step} <= {n}; j_line += {step}) {{",
        *hints,
        *[INDENT + x for x in _row_loop(k, used, r, bases, row_stride, n_outer, inner, simd, head)],
        "}",
    ]
    if isinstance(k.row_size, Dim) or k.row_size % step:
        tail = [f"for (int64_t j = j_line; j < {n}; j++) {{"]
        lines += _row_loop(k, used, r, bases, row_stride, n_outer, inner, simd, tail)
    return lines


def _softmax_row_lines(k, form, r, bases, row_stride, n_outer) -> list[str]:
    """One row of a softmax / log-softmax as a call of its runtime helper; an input
    expression that is not a plain row load is first written into the output row."""
    out = f"{form.out.buffer} + {bases[id(form.out)]}"
    source = softmax_rows.plain_row_load(k, form, row_stride)
    lines = []
    if source is None:
        lines += _phase_lines(k, kir.RowStore(form.out, form.value), r, bases, row_stride, n_outer)
        src = out
    else:
        src = f"{source.buffer} + {bases[id(source)]}"
    return [*lines, f"{form.helper}({src}, {out}, {render_dim(k.row_size)});"]


def _row_loop(
    k, used_loads, r, bases, row_stride, n_outer, inner: list[str], pragma: str, head=None
) -> list[str]:
    """A loop over the row's index `j` (or, with `head`, that loop header and its first
    lines, which define `j`) loading `used_loads` and running `inner`."""
    lines = [pragma] if pragma else []
    lines += head or [f"for (int64_t j = 0; j < {render_dim(k.row_size)}; j++) {{"]
    if not all(id(k.loads[n]) in row_stride for n in used_loads) and len(k.row_shape) > 1:
        lines += [INDENT + x for x in _decompose("j", "j", k.row_shape)]
    for name in used_loads:
        a = k.loads[name]
        off = row_offset(k, a, row_stride, n_outer)
        index = f"{bases[id(a)]} + {off}" if off else bases[id(a)]
        lines.append(f"{INDENT}const {_ctype(a.dtype)} {name} = {_load(a, index)};")
    lines += [INDENT + x for x in inner]
    lines.append("}")
    return lines


def _phase_lines(k, phase, r, bases, row_stride, n_outer, stash=None) -> list[str]:
    if isinstance(phase, kir.Let):
        loads = _scalar_loads(k, phase.value, bases)
        return [
            *loads,
            f"const {_ctype(phase.dtype)} {phase.var} = {r.render_as(phase.value, phase.dtype)};",
        ]
    used = [v for v in E.variables(phase.value) if v in k.loads]
    if isinstance(phase, kir.Reduce):
        t = compute_type(phase.dtype)
        value = r.render(phase.value, t)
        if phase.op in ("max", "min"):
            update = f"{phase.var} = mdsl_{phase.op}_{C_TYPES[t]}({phase.var}, {value});"
            pragma = ""  # NaN-propagating max is not an OpenMP reduction
        elif stash is not None:  # the value also lands in the output row (see above)
            off = row_offset(k, stash, row_stride, n_outer)
            index = f"{bases[id(stash)]} + {off}" if off else bases[id(stash)]
            update = [
                f"const {C_TYPES[t]} {phase.var}_v = {value};",
                _store(stash, index, f"{phase.var}_v"),
                f"{phase.var} += {phase.var}_v;",
            ]
            pragma = f"#pragma omp simd reduction(+:{phase.var})"
        elif (
            phase.op == "sum" and t in WRAPPING
        ):  # int32/int64 sums wrap (as numpy's) instead of overflowing
            u = WRAPPING[t]
            update = f"{phase.var} = ({C_TYPES[t]})(({u}){phase.var} + ({u})({value}));"
            pragma = ""
        else:
            update = f"{phase.var} {_OMP_OP[phase.op]}= {value};"
            pragma = f"#pragma omp simd reduction({_OMP_OP[phase.op]}:{phase.var})"
        init = (
            _INIT[phase.op]
            if t.is_float or phase.op in ("sum", "prod")
            else _INT_LIMITS[t][phase.op == "min"]
        )
        head = [f"{C_TYPES[t]} {phase.var} = {init};"]
        if phase.op in ("max", "min") and t.is_float:
            return head + _nan_aware_extreme(
                k, phase, value, t, used, r, bases, row_stride, n_outer
            )
        inner = update if isinstance(update, list) else [update]
        plain_sum = phase.op == "sum" and stash is None and t.is_float
        if plain_sum and _blocks_sum(k, used, row_stride, t):
            return _blocked_sum(k, phase.var, value, t, used, r, bases, row_stride, n_outer)
        return head + _row_loop(k, used, r, bases, row_stride, n_outer, inner, pragma)
    if isinstance(phase, kir.RowStore):
        return _row_store_loop(k, phase, r, bases, row_stride, n_outer)
    if isinstance(phase, kir.Store):
        loads = _scalar_loads(k, phase.value, bases)
        value = r.render_as(phase.value, phase.access.dtype)
        return [*loads, _store(phase.access, bases[id(phase.access)], value)]
    raise TypeError(f"unknown phase {phase!r}")


def _row_store_loop(k, store, r, bases, row_stride, n_outer, hinted=()) -> list[str]:
    """The loop writing `store`'s row, hinting the inputs in `hinted` line by line."""
    used = [v for v in E.variables(store.value) if v in k.loads]
    value = r.render_as(store.value, store.access.dtype)
    off = row_offset(k, store.access, row_stride, n_outer)
    base = bases[id(store.access)]
    index = f"{base} + {off}" if off else base
    inner = [_store(store.access, index, value)]
    written = _write_hinted(store, row_stride) if hinted else None
    return _line_hinting_row_loop(k, used, r, bases, row_stride, n_outer, inner, hinted, written)


def _write_hinted(store: kir.RowStore, row_stride) -> kir.Access | None:
    """The output a line-hinting row store also hints for writing: its rows contiguous."""
    return store.access if row_stride.get(id(store.access)) == 1 else None


# A float sum over a row runs in blocks of SUM_BLOCK_BYTES of partial sums (4 AVX-512 or
# 8 AVX2 vectors; half that for rows shorter than two blocks): `omp simd reduction` makes
# one vector accumulator, a chain of adds each waiting 3-4 cycles on the last, while
# independent ones keep both of a core's adders busy. The partials then fold in halves,
# a few vector adds, where adding them one by one was a chain of 32 scalar adds per sum.
# Layer norm over [4096, 768], one core: 1.55 ms with one accumulator, 1.37 with 128-byte
# blocks (Zen 3); on an AVX-512 Xeon, the kernel alone 1.12-1.18 ms with 128-byte blocks
# added one by one and 0.99-1.05 with 256-byte blocks folded (W2 in one process:
# 1.22 -> 1.16 ms), where copying the 12 MiB takes 0.90.
SUM_BLOCK_BYTES = 256


# The blocks' loop unrolls twice at most: fully unrolled (12 blocks of a 768 row), GCC 12
# kept the row's loaded vectors from the first sum's pass for the next pass, spilling
# them to the stack in an OpenMP loop. Layer norm over [4096, 768] with AVX-512, one core:
# the kernel alone 1.03 -> 0.97 ms, W2 in one process 1.10-1.12 -> 1.08-1.09 ms; no
# change with AVX2 flags.
BLOCK_UNROLL = "#pragma GCC unroll 2"


def _sum_lanes(k, t: DType) -> int:
    """Partial sums per block of a float row sum (0: a static row too short for two
    blocks, even of half the width)."""
    lanes = SUM_BLOCK_BYTES // t.itemsize
    if isinstance(k.row_size, Dim):
        return lanes
    for width in (lanes, lanes // 2):
        if k.row_size >= 2 * width:
            return width
    return 0


def _blocks_sum(k, used, row_stride, t: DType) -> bool:
    """Whether a float row sum runs in partial sums: its loads vectorize (each row's
    elements one stride apart) and a static row has at least two blocks."""
    return bool(_sum_lanes(k, t)) and all(id(k.loads[n]) in row_stride for n in used)


def _tree_combine(var: str, lanes: int, ct: str) -> list[str]:
    """`var` = the sum of `lanes` partials (a power of two), folded in halves."""
    lines, width = [], lanes // 2
    while width > 1:
        lines.append(f"for (int64_t l = 0; l < {width}; l++) {var}_p[l] += {var}_p[l + {width}];")
        width //= 2
    return [*lines, f"{ct} {var} = {var}_p[0] + {var}_p[1];"]


def _blocked_sum(k, var, value, t, used, r, bases, row_stride, n_outer) -> list[str]:
    """`var` = the row's sum of `value`, in whole blocks of partial sums and then a tail
    (none when a static row is whole blocks)."""
    lanes, ct, n = _sum_lanes(k, t), C_TYPES[t], render_dim(k.row_size)
    jb = f"{var}_j"
    head = [f"for (int64_t l = 0; l < {lanes}; l++) {{", f"{INDENT}const int64_t j = {jb} + l;"]
    update = [f"{var}_p[l] += {value};"]
    block = _row_loop(k, used, r, bases, row_stride, n_outer, update, "#pragma omp simd", head)
    lines = [
        f"{ct} {var}_p[{lanes}] = {{0}};  /* partial sums: independent vector adds */",
        f"int64_t {jb} = 0;",
        BLOCK_UNROLL,
        f"for (; {jb} + {lanes} <= {n}; {jb} += {lanes}) {{",
        *[INDENT + line for line in block],
        "}",
        *_tree_combine(var, lanes, ct),
    ]
    if isinstance(k.row_size, Dim) or k.row_size % lanes:
        tail = [f"for (int64_t j = {jb}; j < {n}; j++) {{"]
        pragma = f"#pragma omp simd reduction(+:{var})"
        lines += _row_loop(
            k, used, r, bases, row_stride, n_outer, [f"{var} += {value};"], pragma, tail
        )
    return lines


def _nan_aware_extreme(k, phase, value, t, used, r, bases, row_stride, n_outer) -> list[str]:
    """A float max/min over the row as a vectorized OpenMP reduction; NaN propagates (as
    in numpy and ONNX) through a separate or-reduction, since `max` reductions drop it."""
    var, cmp = phase.var, ">" if phase.op == "max" else "<"
    nan = f"{var}_nan"
    inner = [
        f"const {C_TYPES[t]} {var}_v = {value};",
        f"{var} = {var}_v {cmp} {var} ? {var}_v : {var};",
        f"{nan} |= ({var}_v != {var}_v);",
    ]
    pragma = f"#pragma omp simd reduction({phase.op}:{var}) reduction(|:{nan})"
    loop = _row_loop(k, used, r, bases, row_stride, n_outer, inner, pragma)
    return [f"int {nan} = 0;", *loop, f"if ({nan}) {var} = NAN;"]


def _scalar_loads(k, value, bases) -> list[str]:
    lines = []
    for name in E.variables(value):
        if name in k.loads:
            a = k.loads[name]
            lines.append(f"const {_ctype(a.dtype)} {name} = {_load(a, bases[id(a)])};")
    return lines


# -- GEMM, convolution, pooling, callbacks -----------------------------------------------------------
def _epilogue_lines(
    ep: kir.Epilogue, space: tuple[int, ...], idx: list[str], acc: str, acc_type: DType
) -> list[str]:
    types = _var_types(ep.loads, ep.lets)
    types["acc"] = acc_type
    r = CExprRenderer(types)
    lines = [f"const {C_TYPES[acc_type]} acc = {acc};"]
    for name, a in ep.loads.items():
        lines.append(f"const {_ctype(a.dtype)} {name} = {_load(a, flat_index(a, idx))};")
    for let in ep.lets:
        lines.append(f"const {_ctype(let.dtype)} {let.var} = {r.render_as(let.value, let.dtype)};")
    for store in ep.stores:
        lines.append(
            _store(
                store.access,
                flat_index(store.access, idx),
                r.render_as(store.value, store.access.dtype),
            )
        )
    return lines


# four tiles per core, taken dynamically: a thread the scheduler holds back delays the call by
# one tile at most (see CHUNKS); packed B panels make a column tile cost no extra packing
GEMM_TILES = 4 * max(2, os.cpu_count() or 2)
SMALL_GEMM_FLOPS = 1 << 21  # below this a GEMM runs as one call on one thread


def _gemm_tiles(batch: int, m: int, n: int, k: int, align: int = 16) -> tuple[int, int]:
    """(rows, columns) of one tile. BLAS runs single-threaded inside OpenMP tiles: one
    thread pool for the whole graph (two pools on the same cores fight for them).
    Columns are split first (each tile then packs only its slice of B); symbolic sizes
    are not tiled (the tiles are the batch entries)."""
    if any(isinstance(v, Dim) for v in (batch, m, n, k)):
        return m, n
    if 2 * batch * m * n * k < SMALL_GEMM_FLOPS:
        return m, n
    per_batch = -(-GEMM_TILES // batch)
    # as many tiles as wanted, or as many as the GEMM has columns (64) or rows (16) for:
    # a [64, 1024] x [1024, 256] GEMM (a small transformer's FFN) is 4 tiles of 64 columns
    by_cols, by_rows = min(per_batch, n // 64), min(per_batch, m // 16)
    if by_cols > 1 and by_cols >= by_rows:
        return m, (-(-n // by_cols) + align - 1) // align * align
    if by_rows > 1:
        return (-(-m // by_rows) + 7) // 8 * 8, n
    return m, n


def _gemm_body(plan: Plan, k: kir.Gemm) -> str:
    if k.onednn:
        rows = math.prod(k.batch_shape) * k.m  # the epilogue's loop after the product
        pragma = _parallel(rows * k.n, trips=rows) or "/* small: one thread */"
        return onednn_matmul_body(k, _epilogue_lines, pragma)
    if any(isinstance(v, Dim) for v in (k.m, k.n, k.k, *k.batch_shape)):
        return _symbolic_gemm_body(k)
    real = C_TYPES[k.dtype]
    gemm = "MDSL_SGEMM" if k.dtype == DType.float32 else "MDSL_DGEMM"
    batch = math.prod(k.batch_shape)
    mb, nb = _gemm_tiles(batch, k.m, k.n, k.k, TILE_ALIGN if k.packed_b else 16)
    n_mt, n_nt = (1, 1) if (mb, nb) == (k.m, k.n) else (-(-k.m // mb), -(-k.n // nb))
    tiles = batch * n_mt * n_nt
    m, n, kk, mb, nb = (render_dim(v) for v in (k.m, k.n, k.k, mb, nb))
    bvars = [f"bi{d}" for d in range(len(k.batch_shape))]
    oa, ob, oc = (flat_index(a, bvars) for a in (k.a, k.b, k.out))
    a_ptr = f"{k.a.buffer} + {oa} + " + ("m0" if k.trans_a else f"m0 * ({render_dim(k.lda)})")
    b_ptr = f"{k.b.buffer} + {ob} + " + (f"n0 * ({render_dim(k.ldb)})" if k.trans_b else "n0")
    body = [
        f"const int64_t nt = tile % {n_nt}, mt = (tile / {n_nt}) % {n_mt};",
        *_decompose(f"tile / {n_mt * n_nt}", "bi", k.batch_shape),
        f"const int64_t m0 = mt * {mb}, n0 = nt * {nb};",
        f"const int mlen = (int)({m} - m0 < {mb} ? {m} - m0 : {mb});",
        f"const int nlen = (int)({n} - n0 < {nb} ? {n} - n0 : {nb});",
        _gemm_call(k, gemm, real, m, n, kk, a_ptr, b_ptr, f"{k.out.buffer} + {oc} + m0 * {n}"),
    ]
    if k.epilogue is not None:
        acc = f"{k.out.buffer}[{oc} + i * {n} + jn]"
        inner = _epilogue_lines(k.epilogue, k.out_shape, [*bvars, "i", "jn"], acc, k.dtype)
        body += [
            "for (int64_t i = m0; i < m0 + mlen; i++) {",
            f"{INDENT}#pragma omp simd",
            f"{INDENT}for (int64_t jn = n0; jn < n0 + nlen; jn++) {{",
            *(INDENT * 2 + x for x in inner),
            f"{INDENT}}}",
            "}",
        ]
    if isinstance(tiles, int):
        lines = [f"{INDENT}#pragma omp parallel for schedule(dynamic, 1)"] if tiles > 1 else []
    else:  # a symbolic batch: parallel over its entries when there are several
        lines = [
            f"{INDENT}#pragma omp parallel for schedule(dynamic, 1) if({render_dim(tiles)} > 1)"
        ]
    lines.append(f"{INDENT}for (int64_t tile = 0; tile < {render_dim(tiles)}; tile++) {{")
    lines += [INDENT * 2 + x for x in body]
    lines.append(f"{INDENT}}}")
    return "\n".join(lines)


def _gemm_call(k: kir.Gemm, gemm, real, m, n, kk, a_ptr, b_ptr, out_row) -> str:
    """The call computing rows [m0, m0 + mlen) and columns [n0, n0 + nlen) of one tile;
    `out_row` points at column 0 of row m0."""
    if k.packed_b:  # the constant B packed at plan time (mdsl.codegen.packing)
        return (
            f"mdsl_sgemm_packed(mlen, n0, nlen, {kk}, {a_ptr}, {render_dim(k.lda)}, "
            f"{k.packed_b}, {out_row}, {n});"
        )
    ta = "CblasTrans" if k.trans_a else "CblasNoTrans"
    tb = "CblasTrans" if k.trans_b else "CblasNoTrans"
    return (
        f"{gemm}(CblasRowMajor, {ta}, {tb}, mlen, nlen, (int)({kk}), ({real}){k.alpha!r}, "
        f"{a_ptr}, (int)({render_dim(k.lda)}), {b_ptr}, (int)({render_dim(k.ldb)}), "
        f"({real})0, {out_row} + n0, (int)({n}));"
    )


def _symbolic_gemm_body(k: kir.Gemm) -> str:
    """A GEMM of symbolic sizes: tiled at run time as `_gemm_tiles` tiles static ones."""
    real = C_TYPES[k.dtype]
    gemm = "MDSL_SGEMM" if k.dtype == DType.float32 else "MDSL_DGEMM"
    sizes = (k.m, k.n, k.k, math.prod(k.batch_shape))
    bvars = [f"bi{d}" for d in range(len(k.batch_shape))]
    oa, ob, oc = (flat_index(a, bvars) for a in (k.a, k.b, k.out))
    lda, ldb = render_dim(k.lda), render_dim(k.ldb)
    align = TILE_ALIGN if k.packed_b else 16
    a_ptr = f"{k.a.buffer} + {oa} + " + ("m0" if k.trans_a else f"m0 * {lda}")
    b_ptr = f"{k.b.buffer} + {ob} + " + (f"n0 * {ldb}" if k.trans_b else "n0")
    head = [
        "const int64_t gm = {}, gn = {}, gk = {}, gb = {};".format(*map(render_dim, sizes)),
        "if (gm <= 0 || gn <= 0 || gb <= 0) return 0;",
        "int64_t mb = gm, nb = gn;",
        f"if (2 * gb * gm * gn * gk >= {SMALL_GEMM_FLOPS}) {{",
        f"{INDENT}const int64_t per = ({GEMM_TILES} + gb - 1) / gb;",
        f"{INDENT}const int64_t by_cols = gn / 64 < per ? gn / 64 : per;",
        f"{INDENT}const int64_t by_rows = gm / 16 < per ? gm / 16 : per;",
        f"{INDENT}if (by_cols > 1 && by_cols >= by_rows)",
        f"{INDENT * 2}nb = ((gn + by_cols - 1) / by_cols + {align - 1}) / {align} * {align};",
        f"{INDENT}else if (by_rows > 1) mb = ((gm + by_rows - 1) / by_rows + 7) / 8 * 8;",
        "}",
        "const int64_t n_mt = (gm + mb - 1) / mb, n_nt = (gn + nb - 1) / nb;",
        "const int64_t tiles = gb * n_mt * n_nt;",
    ]
    body = [
        "const int64_t nt = tile % n_nt, mt = (tile / n_nt) % n_mt;",
        *_decompose("tile / (n_mt * n_nt)", "bi", k.batch_shape),
        "const int64_t m0 = mt * mb, n0 = nt * nb;",
        "const int mlen = (int)(gm - m0 < mb ? gm - m0 : mb);",
        "const int nlen = (int)(gn - n0 < nb ? gn - n0 : nb);",
        _gemm_call(
            k, gemm, real, "gm", "gn", "gk", a_ptr, b_ptr, f"{k.out.buffer} + {oc} + m0 * gn"
        ),
    ]
    if k.epilogue is not None:
        acc = f"{k.out.buffer}[{oc} + i * gn + jn]"
        inner = _epilogue_lines(k.epilogue, k.out_shape, [*bvars, "i", "jn"], acc, k.dtype)
        body += [
            "for (int64_t i = m0; i < m0 + mlen; i++) {",
            f"{INDENT}#pragma omp simd",
            f"{INDENT}for (int64_t jn = n0; jn < n0 + nlen; jn++) {{",
            *(INDENT * 2 + x for x in inner),
            f"{INDENT}}}",
            "}",
        ]
    lines = [INDENT + x for x in head]
    lines.append(f"{INDENT}#pragma omp parallel for schedule(dynamic, 1) if(tiles > 1)")
    lines.append(f"{INDENT}for (int64_t tile = 0; tile < tiles; tile++) {{")
    lines += [INDENT * 2 + x for x in body]
    lines.append(f"{INDENT}}}")
    return "\n".join(lines)


def _im2col_lines(k: kir.Conv, xg: str, cg: int) -> list[str]:
    """Rows of the im2col matrix of image `xg` (cg channels) into `k.scratch`: row
    (c, ki, kj) holds the input each output position reads at that tap (0 outside)."""
    ohw, kdim = k.oh * k.ow, cg * k.kh * k.kw
    sh, sw = k.stride
    ph, pw = k.pad
    dh, dw = k.dilation
    return [
        f"{_parallel(kdim * ohw) or '/* small: one thread */'}",
        f"for (int64_t row = 0; row < {kdim}; row++) {{",
        f"{INDENT}const int64_t c = row / {k.kh * k.kw}, ki = (row / {k.kw}) % {k.kh}, kj = row % {k.kw};",
        f"{INDENT}float *col = {k.scratch} + row * {ohw};",
        # the valid ox range is computed, not tested per element: a conditional
        # load in this loop is miscompiled by GCC 12 at -O3 inside OpenMP regions
        f"{INDENT}const int64_t off = kj * {dw} - {pw};  /* ix = ox * {sw} + off */",
        f"{INDENT}const int64_t lo = off >= 0 ? 0 : (-off + {sw - 1}) / {sw};",
        f"{INDENT}int64_t hi = {k.w_in} - off > 0 ? ({k.w_in} - off + {sw - 1}) / {sw} : 0;",
        f"{INDENT}if (hi > {k.ow}) hi = {k.ow};",
        f"{INDENT}for (int64_t oy = 0; oy < {k.oh}; oy++) {{",
        f"{INDENT * 2}const int64_t iy = oy * {sh} - {ph} + ki * {dh};",
        f"{INDENT * 2}float *dst = col + oy * {k.ow};",
        f"{INDENT * 2}if (iy < 0 || iy >= {k.h} || hi <= lo) {{",
        f"{INDENT * 3}memset(dst, 0, sizeof(float) * {k.ow});",
        f"{INDENT * 3}continue;",
        f"{INDENT * 2}}}",
        f"{INDENT * 2}const float *src = {xg} + (c * {k.h} + iy) * {k.w_in} + off;",
        f"{INDENT * 2}for (int64_t ox = 0; ox < lo; ox++) dst[ox] = 0.0f;",
        f"{INDENT * 2}for (int64_t ox = lo; ox < hi; ox++) dst[ox] = src[ox * {sw}];",
        f"{INDENT * 2}for (int64_t ox = hi; ox < {k.ow}; ox++) dst[ox] = 0.0f;",
        f"{INDENT}}}",
        "}",
    ]


def _conv_body(plan: Plan, k: kir.Conv) -> str:
    if k.onednn:
        return onednn_conv_body(k, _epilogue_lines)
    if k.packed_w:
        return packed_conv_body(k, _epilogue_lines, _im2col_lines)
    if k.group == k.c == k.cout and k.group > 1:
        return _depthwise_padded_body(k) if _padded_plane_fits(k) else _depthwise_body(k)
    cg, kdim = k.c // k.group, (k.c // k.group) * k.kh * k.kw
    # GEMM over tiles of whole output rows (single-threaded BLAS per tile, one OpenMP
    # pool), each tile's epilogue applied right after its GEMM while it is in cache
    rows = _conv_tile_rows(k.cout // k.group, k.oh, k.ow, kdim)
    tiles = 1 if rows is k.oh else -(-k.oh // rows)
    xg = f"const float *xg = {k.x} + (n * {k.c} + g * {cg}) * {k.h * k.w_in};"
    if not k.scratch:
        return _conv_tasks_body(k, tiles, [xg, *_conv_tile_lines(k, "xg", rows)])
    lines = [
        f"for (int64_t n = 0; n < {render_dim(k.n)}; n++) {{",
        f"{INDENT}for (int64_t g = 0; g < {k.group}; g++) {{",
        INDENT * 2 + xg,
        *(INDENT * 2 + x for x in _im2col_lines(k, "xg", cg)),
    ]
    if tiles > 1:
        lines.append(f"{INDENT * 2}#pragma omp parallel for schedule(static)")
    lines += [
        f"{INDENT * 2}for (int64_t tile = 0; tile < {tiles}; tile++) {{",
        *(INDENT * 3 + x for x in _conv_tile_lines(k, k.scratch, rows)),
        f"{INDENT * 2}}}",
        f"{INDENT}}}",
        "}",
    ]
    return "\n".join(INDENT + x for x in lines)


def _conv_tile_lines(k: kir.Conv, col: str, rows) -> list[str]:
    """One tile of output rows `tile` of image `n`, group `g`: the GEMM of the group's
    weights and `col` (its im2col matrix, or its input read in place), then the epilogue."""
    coutg, ohw, kdim = k.cout // k.group, k.oh * k.ow, (k.c // k.group) * k.kh * k.kw
    lines = [
        f"const int64_t oy0 = tile * {rows};",
        f"const int64_t oy1 = oy0 + {rows} < {k.oh} ? oy0 + {rows} : {k.oh};",
        f"MDSL_SGEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, {coutg}, (int)((oy1 - oy0) * {k.ow}), "
        f"{kdim}, 1.0f, {k.w} + g * {coutg * kdim}, {kdim}, {col} + oy0 * {k.ow}, {ohw}, 0.0f, "
        f"{k.out} + (n * {k.cout} + g * {coutg}) * {ohw} + oy0 * {k.ow}, {ohw});",
    ]
    if k.epilogue is None:
        return lines
    acc = f"{k.out}[((n * {k.cout} + co) * {k.oh} + oy) * {k.ow} + ox]"
    inner = _epilogue_lines(k.epilogue, k.out_shape, conv_index(k), acc, DType.float32)
    return [
        *lines,
        f"for (int64_t co = g * {coutg}; co < (g + 1) * {coutg}; co++) {{",
        f"{INDENT}for (int64_t oy = oy0; oy < oy1; oy++) {{",
        f"{INDENT * 2}#pragma omp simd",
        f"{INDENT * 2}for (int64_t ox = 0; ox < {k.ow}; ox++) {{",
        *(INDENT * 3 + x for x in inner),
        f"{INDENT * 2}}}",
        f"{INDENT}}}",
        "}",
    ]


def _conv_tasks_body(k: kir.Conv, tiles: int, task_lines: list[str]) -> str:
    """A convolution that reads its input in place (1x1, stride 1: no im2col scratch) as
    one parallel loop over every (image, group, row tile): a grouped convolution's groups
    are independent GEMMs (ShuffleNet's 4 groups of 34 channels on 28 x 28, 1.8 MFLOP
    each and one tile apiece, ran one after the other on one thread)."""
    per_group = 2 * (k.cout // k.group) * k.oh * k.ow * (k.c // k.group) * k.kh * k.kw
    tasks, work = k.n * k.group * tiles, k.n * k.group * per_group
    pragma = "#pragma omp parallel for schedule(dynamic, 1)"
    if isinstance(tasks, Dim):
        pragma += f" if({render_dim(tasks)} > 1 && {render_dim(work)} >= {SMALL_GEMM_FLOPS})"
    elif tasks == 1 or work < SMALL_GEMM_FLOPS:
        pragma = "/* small: one thread */"
    lines = [
        pragma,
        f"for (int64_t task = 0; task < {render_dim(tasks)}; task++) {{",
        f"{INDENT}const int64_t n = task / {k.group * tiles}, g = task / {tiles} % {k.group}, "
        f"tile = task % {tiles};",
        *(INDENT + x for x in task_lines),
        "}",
    ]
    return "\n".join(INDENT + x for x in lines)


def _depthwise_body(k: kir.Conv) -> str:
    """Depthwise convolution, direct: one channel plane per task, each output row summed
    tap by tap into a row buffer (a vector loop over the row's valid span per tap), its
    epilogue applied before the row is stored. im2col + GEMM would multiply a 1-row
    matrix per channel."""
    sh, sw = k.stride
    ph, pw = k.pad
    dh, dw = k.dilation
    taps = k.kh * k.kw
    planes = k.n * k.c
    lines = [
        _parallel(planes * k.oh * k.ow * taps, "parallel for schedule(static)")
        or "/* small: one thread */",
        f"for (int64_t plane = 0; plane < {render_dim(planes)}; plane++) {{",
        f"{INDENT}const int64_t n = plane / {k.c}, co = plane % {k.c};",
        f"{INDENT}const float *xc = {k.x} + plane * {k.h * k.w_in};",
        f"{INDENT}const float *wc = {k.w} + co * {taps};",
        f"{INDENT}float row[{k.ow}];",
        f"{INDENT}for (int64_t oy = 0; oy < {k.oh}; oy++) {{",
        f"{INDENT * 2}for (int64_t ox = 0; ox < {k.ow}; ox++) row[ox] = 0.0f;",
        f"{INDENT * 2}int64_t y0, y1;",
        f"{INDENT * 2}mdsl_window(oy, {sh}, {ph}, {dh}, {k.kh}, {k.h}, &y0, &y1);",
        f"{INDENT * 2}for (int64_t ki = y0; ki < y1; ki++) {{",
        f"{INDENT * 3}const float *xr = xc + (oy * {sh} - {ph} + ki * {dh}) * {k.w_in};",
        f"{INDENT * 3}for (int64_t kj = 0; kj < {k.kw}; kj++) {{",
        f"{INDENT * 4}const float wv = wc[ki * {k.kw} + kj];",
        # ix = ox * sw + off lies in [0, w) for ox in [lo, hi): computed, not tested
        # per element (see the im2col loop of _conv_body)
        f"{INDENT * 4}const int64_t off = kj * {dw} - {pw};",
        f"{INDENT * 4}const int64_t lo = off >= 0 ? 0 : (-off + {sw - 1}) / {sw};",
        f"{INDENT * 4}int64_t hi = {k.w_in} - off > 0 ? ({k.w_in} - off + {sw - 1}) / {sw} : 0;",
        f"{INDENT * 4}if (hi > {k.ow}) hi = {k.ow};",
        f"{INDENT * 4}#pragma omp simd",
        f"{INDENT * 4}for (int64_t ox = lo; ox < hi; ox++) row[ox] += wv * xr[ox * {sw} + off];",
        f"{INDENT * 3}}}",
        f"{INDENT * 2}}}",
    ]
    out_row = f"{k.out} + (plane * {k.oh} + oy) * {k.ow}"
    if k.epilogue is None:
        lines.append(f"{INDENT * 2}memcpy({out_row}, row, sizeof(float) * {k.ow});")
    else:
        inner = _epilogue_lines(k.epilogue, k.out_shape, conv_index(k), "row[ox]", DType.float32)
        lines += [
            f"{INDENT * 2}#pragma omp simd",
            f"{INDENT * 2}for (int64_t ox = 0; ox < {k.ow}; ox++) {{",
            *(INDENT * 3 + x for x in inner),
            f"{INDENT * 2}}}",
        ]
    lines += [f"{INDENT}}}", "}"]
    return "\n".join(INDENT + x for x in lines)


DEPTHWISE_PLANE_MAX = 1 << 16  # floats of a padded plane kept on a thread's stack
DEPTHWISE_TAPS_MAX = 49  # taps written out in the inner loop


def _padded_plane_fits(k: kir.Conv) -> bool:
    hp, wp = padded_extent(k)
    return hp * wp <= DEPTHWISE_PLANE_MAX and k.kh * k.kw <= DEPTHWISE_TAPS_MAX


DEPTHWISE_FLAT_MAX_WIDTH = 32  # narrower stride-1 outputs are summed on the padded grid


def _tap_sum(k: kir.Conv, tap) -> str:
    """The sum of the window's weighted taps (`tap(i, j)` reads kernel row i, column j):
    a sum per kernel row, the rows' sums added pairwise. Written as one chain, each
    multiply-add waited for the last: 49 of them for a 7x7 window, which took 563 us
    for 768 channels of 7 x 7 and takes 318 us as rows (one Zen 3 core)."""

    def pairwise(parts: list[str]) -> str:
        if len(parts) == 1:
            return parts[0]
        half = len(parts) // 2
        return f"({pairwise(parts[:half])}) + ({pairwise(parts[half:])})"

    rows = [" + ".join(f"w{i}_{j} * {tap(i, j)}" for j in range(k.kw)) for i in range(k.kh)]
    return pairwise(rows)


def _depthwise_padded_body(k: kir.Conv) -> str:
    """Depthwise convolution, direct: each channel plane is copied into a zero-padded
    plane on the stack, then every output is one sum of the kernel's taps (written out,
    weights in registers) with its epilogue, in a vector loop over the output row; or,
    for a narrow stride-1 output, over the whole padded grid first (`_grid_sum_lines`)."""
    (ph, pw), taps = k.pad, k.kh * k.kw
    hp, wp = padded_extent(k)
    planes = k.n * k.c
    rows, cols = min(k.h, hp - ph), min(k.w_in, wp - pw)
    lines = [
        _parallel(planes * k.oh * k.ow * taps, "parallel for schedule(static)")
        or "/* small: one thread */",
        f"for (int64_t plane = 0; plane < {render_dim(planes)}; plane++) {{",
        f"{INDENT}const int64_t n = plane / {k.c}, co = plane % {k.c};",
        f"{INDENT}const float *xc = {k.x} + plane * {k.h * k.w_in};",
        f"{INDENT}const float *wc = {k.w} + co * {taps};",
        f"{INDENT}float xp[{hp * wp}];  /* the plane, zero-padded: {hp} x {wp} */",
        f"{INDENT}memset(xp, 0, sizeof(xp));",
        f"{INDENT}for (int64_t iy = 0; iy < {rows}; iy++)",
        f"{INDENT * 2}memcpy(xp + (iy + {ph}) * {wp} + {pw}, xc + iy * {k.w_in}, sizeof(float) * {cols});",
        *(
            f"{INDENT}const float w{i}_{j} = wc[{i * k.kw + j}];"
            for i in range(k.kh)
            for j in range(k.kw)
        ),
    ]
    on_grid = k.stride == (1, 1) and k.ow < DEPTHWISE_FLAT_MAX_WIDTH
    phases = k.stride[1] == 2
    lines += [INDENT + x for x in (_grid_sum_lines(k) if on_grid else [])]
    lines += [INDENT + x for x in (_phase_split_lines(k) if phases else [])]
    lines += [
        f"{INDENT}for (int64_t oy = 0; oy < {k.oh}; oy++) {{",
        *(INDENT * 2 + x for x in ([] if on_grid else _window_rows(k, phases))),
        f"{INDENT * 2}float *dst = {k.out} + (plane * {k.oh} + oy) * {k.ow};",
        f"{INDENT * 2}#pragma omp simd",
        f"{INDENT * 2}for (int64_t ox = 0; ox < {k.ow}; ox++) {{",
    ]
    sw, dw = k.stride[1], k.dilation[1]
    if on_grid:
        terms = f"sums[oy * {wp} + ox]"
    elif phases:  # column 2 ox + j dw: phase (j dw) % 2, index ox + (j dw) / 2
        terms = _tap_sum(k, lambda i, j: f"r{i}_{j * dw % 2}[ox{signed_offset(j * dw // 2)}]")
    else:
        terms = _tap_sum(k, lambda i, j: f"r{i}[ox * {sw} + {j * dw}]")
    if k.epilogue is None:
        lines.append(f"{INDENT * 3}dst[ox] = {terms};")
    else:
        lines.append(f"{INDENT * 3}const float sum = {terms};")
        inner = _epilogue_lines(k.epilogue, k.out_shape, conv_index(k), "sum", DType.float32)
        lines += [INDENT * 3 + x for x in inner]
    lines += [f"{INDENT * 2}}}", f"{INDENT}}}", "}"]
    return "\n".join(INDENT + x for x in lines)


def _window_rows(k: kir.Conv, phases: bool) -> list[str]:
    """Pointers to the padded rows the output row `oy`'s windows read (to both phases of
    each, `phases`)."""
    sh, dh, wp = k.stride[0], k.dilation[0], padded_extent(k)[1]
    if not phases:
        return [f"const float *r{i} = xp + (oy * {sh} + {i * dh}) * {wp};" for i in range(k.kh)]
    half = (wp + 1) // 2
    return [
        f"const float *r{i}_{p} = phase{p} + (oy * {sh} + {i * dh}) * {half};"
        for i in range(k.kh)
        for p in (0, 1)
    ]


def _phase_split_lines(k: kir.Conv) -> list[str]:
    """The padded plane of a stride-2 convolution split into its even and odd columns,
    so that each tap reads a phase contiguously (rows of (wp + 1) / 2 floats). Read in
    place, each tap loaded every other float and shuffled the pairs apart: ShuffleNet's
    3x3 stride 2 over 112 x 56 x 56 took 171 us."""
    hp, wp = padded_extent(k)
    half, pairs = (wp + 1) // 2, wp // 2
    lines = [
        f"float phase0[{hp * half}], phase1[{hp * half}];  /* even and odd columns */",
        f"for (int64_t r = 0; r < {hp}; r++) {{",
        f"{INDENT}#pragma omp simd",
        f"{INDENT}for (int64_t i = 0; i < {pairs}; i++) {{",
        f"{INDENT * 2}phase0[r * {half} + i] = xp[r * {wp} + 2 * i];",
        f"{INDENT * 2}phase1[r * {half} + i] = xp[r * {wp} + 2 * i + 1];",
        f"{INDENT}}}",
    ]
    if wp % 2:
        lines.append(f"{INDENT}phase0[r * {half} + {pairs}] = xp[r * {wp} + {wp - 1}];")
    return [*lines, "}"]


def _grid_sum_lines(k: kir.Conv) -> list[str]:
    """The window sums of a stride-1 plane on the padded grid: output (oy, ox) at
    oy * wp + ox, tap (i, j) at that plus i * dh * wp + j * dw, one vector loop over the
    plane (the columns past the output's width computed and dropped). A 14-wide output
    row is a vector and a remainder; ShuffleNet's 3x3 over 272 x 14 x 14 took 49 us as
    rows and 36 on the grid, a 7x7 over 768 x 7 x 7 318 and 250 (one Zen 3 core); from
    56 wide, rows were faster (94 against 109 us for 64 x 56 x 56)."""
    dh, dw = k.dilation
    wp = padded_extent(k)[1]
    terms = _tap_sum(k, lambda i, j: f"xp[p + {i * dh * wp + j * dw}]")
    return [
        f"float sums[{k.oh * wp}];  /* output (oy, ox) at oy * {wp} + ox */",
        "#pragma omp simd",
        f"for (int64_t p = 0; p < {(k.oh - 1) * wp + k.ow}; p++)",
        f"{INDENT}sums[p] = {terms};",
    ]


def _conv_tile_rows(coutg: int, oh: int, ow: int, kdim: int) -> int:
    """Output rows per GEMM tile of a convolution: about GEMM_TILES tiles when the
    work is large enough to share, else one tile (always, for symbolic sizes)."""
    if any(isinstance(v, Dim) for v in (coutg, oh, ow, kdim)):
        return oh
    if 2 * coutg * oh * ow * kdim < SMALL_GEMM_FLOPS:
        return oh
    return max(1, -(-oh // GEMM_TILES))


def _pool_body(plan: Plan, k: kir.Pool) -> str:
    """Max or average pooling over 2 or 3 spatial dims (1-D comes as 2-D of height 1): one
    axis at a time (`pool_rows`) for a static 2-D window, else a row of outputs at a time
    (`_pool_row_lines`) when the last axis is static, else one output at a time."""
    if k.layout:
        return onednn_pool_body(k)
    rank = len(k.in_spatial)
    axes = _POOL_AXES[-rank:]
    windows = list(
        zip(axes, _POOL_TAPS[-rank:], k.in_spatial, k.kernel, k.strides, k.pads, k.dilations)
    )
    work = k.n * k.c * math.prod(k.out_spatial) * math.prod(k.kernel)
    lines = [
        _parallel(work) or "/* small: one thread */",
        f"for (int64_t nc = 0; nc < {render_dim(k.n * k.c)}; nc++) {{",
        f"{INDENT}const float *x = {k.x} + nc * {math.prod(k.in_spatial)};",
    ]
    separable = separable_pool_lines(k)
    if separable:
        lines += [INDENT + x for x in separable] + ["}"]
        return "\n".join(INDENT + x for x in lines)
    rows = _pool_row_lines(k, windows)
    depth = 1
    for a, n in zip(axes[:-1] if rows else axes, k.out_spatial):
        lines.append(f"{INDENT * depth}for (int64_t o{a} = 0; o{a} < {n}; o{a}++) {{")
        depth += 1
    # window bounds are computed, not tested per element (see _conv_body)
    lines += [INDENT * depth + x for x in rows or _pool_output_lines(k, windows)]
    while depth > 0:
        depth -= 1
        lines.append(f"{INDENT * depth}}}")
    return "\n".join(INDENT + x for x in lines)


def _pool_terms(k: kir.Pool, windows: list, at: str) -> tuple[str, str, str, str]:
    """(initial value, update by `v`, result, accumulator declaration suffix) of the
    accumulator `acc{at}` (and NaN flag `nan{at}` of a max pool)."""
    acc, nan = f"acc{at}", f"nan{at}"
    if k.kind == "max":
        # max without a branch per tap (a NaN is remembered, not tested for in the
        # compare): a branchy max mispredicts on real activations, 6x slower
        return (
            "-INFINITY",
            f"{acc} = v > {acc} ? v : {acc}; {nan} |= v != v;",
            f"{nan} ? NAN : {acc}",
            "nan",
        )
    if k.count_include_pad:  # positions inside the padded input count, the overhang not
        counts = " * ".join(
            f"mdsl_window_count(o{a}, {s}, {d}, {kk}, {n + 2 * p})"
            for a, _, n, kk, s, p, d in windows
        )
        return "0.0f", f"{acc} += v;", f"{acc} / (float)({counts})", ""
    divisor = " * ".join(f"({a}1 - {a}0)" for a, *_ in windows)
    return "0.0f", f"{acc} += v;", f"{acc} / (float)({divisor})", ""


def _pool_rows_start(windows: list) -> str:
    """Where the taps of the outer axes put the row the last axis' taps read, minus the
    last axis' padding (a Horner sum over the outer axes)."""
    *outer, (_, _, w, _, _, pw, _) = windows
    row = ""
    for a, t, n, _, s, p, d in outer:
        row = f"{f'({row}) * {n} + ' if row else ''}o{a} * {s} - {p} + {t} * {d}"
    return f"({row}) * {w} - {pw}"


def _pool_outer_taps(windows: list) -> tuple[list[str], list[str]]:
    """The window bounds of the outer axes and the loops over their taps (opened)."""
    *outer, _ = windows
    bounds = [f"int64_t {a}0, {a}1;" for a, *_ in outer]
    bounds += [
        f"mdsl_window(o{a}, {s}, {p}, {d}, {kk}, {n}, &{a}0, &{a}1);"
        for a, _, n, kk, s, p, d in outer
    ]
    loops = [
        f"{INDENT * i}for (int64_t {t} = {a}0; {t} < {a}1; {t}++) {{"
        for i, (a, t, *_) in enumerate(outer)
    ]
    return bounds, loops


def _pool_output_lines(k: kir.Pool, windows: list) -> list[str]:
    """One output: its window's bounds on every axis, its taps, its value."""
    (ax, tx, w, kw, sw, pw, dw) = windows[-1]
    init, update, result, flag = _pool_terms(k, windows, "")
    bounds, loops = _pool_outer_taps(windows)
    depth = len(loops)
    return [
        *bounds,
        f"int64_t {ax}0, {ax}1;",
        f"mdsl_window(o{ax}, {sw}, {pw}, {dw}, {kw}, {w}, &{ax}0, &{ax}1);",
        f"float acc = {init};" + (" int nan = 0;" if flag else ""),
        *loops,
        f"{INDENT * depth}const float *xrow = x + {_pool_rows_start(windows)} + o{ax} * {sw};",
        f"{INDENT * depth}for (int64_t {tx} = {ax}0; {tx} < {ax}1; {tx}++) {{",
        f"{INDENT * (depth + 1)}const float v = xrow[{tx} * {dw}];",
        f"{INDENT * (depth + 1)}{update}",
        f"{INDENT * depth}}}",
        *(f"{INDENT * i}}}" for i in reversed(range(depth))),
        f"{k.out}[{_pool_out_index(k, windows)}] = {result};",
    ]


def _pool_row_lines(k: kir.Pool, windows: list) -> list[str]:
    """A row of outputs along the last axis at once, accumulated in an array: each tap
    of the outer axes and of the last axis is one loop over the outputs whose window
    holds it whole (vectorized; stride-2 windows read every other float), the outputs at
    the row's ends taking their window's bounds. Empty when the last axis is symbolic or
    long (the accumulators live on the stack)."""
    (ax, tx, w, kw, sw, pw, dw) = windows[-1]
    ow = k.out_spatial[-1]
    if not all(isinstance(v, int) for v in (w, kw, sw, pw, dw, ow)) or ow > _POOL_ROW_MAX:
        return []
    lo, hi = window_interior(ow, w, kw, sw, pw, dw)
    init, update, result, flag = _pool_terms(k, windows, f"[o{ax}]")
    bounds, loops = _pool_outer_taps(windows)
    depth = len(loops)
    inner = INDENT * (depth + 1)
    lines = [
        *bounds,
        f"float acc[{ow}];" + (f" int nan[{ow}];" if flag else ""),
        f"for (int64_t o{ax} = 0; o{ax} < {ow}; o{ax}++) {{",
        f"{INDENT}acc[o{ax}] = {init};" + (f" nan[o{ax}] = 0;" if flag else ""),
        "}",
        *loops,
        f"{INDENT * depth}const float *xrow = x + {_pool_rows_start(windows)};",
    ]
    if hi > lo:
        lines += [
            f"{INDENT * depth}for (int64_t {tx} = 0; {tx} < {kw}; {tx}++) {{",
            f"{inner}#pragma omp simd",
            f"{inner}for (int64_t o{ax} = {lo}; o{ax} < {hi}; o{ax}++) {{",
            f"{inner}{INDENT}const float v = xrow[o{ax} * {sw} + {tx} * {dw}];",
            f"{inner}{INDENT}{update}",
            f"{inner}}}",
            f"{INDENT * depth}}}",
        ]
    for first, end in ((0, lo), (hi, ow)):  # the row's ends: windows cut by the padding
        if end > first:
            lines += [
                f"{INDENT * depth}for (int64_t o{ax} = {first}; o{ax} < {end}; o{ax}++) {{",
                f"{inner}int64_t {ax}0, {ax}1;",
                f"{inner}mdsl_window(o{ax}, {sw}, {pw}, {dw}, {kw}, {w}, &{ax}0, &{ax}1);",
                f"{inner}for (int64_t {tx} = {ax}0; {tx} < {ax}1; {tx}++) {{",
                f"{inner}{INDENT}const float v = xrow[o{ax} * {sw} + {tx} * {dw}];",
                f"{inner}{INDENT}{update}",
                f"{inner}}}",
                f"{INDENT * depth}}}",
            ]
    lines += [f"{INDENT * i}}}" for i in reversed(range(depth))]
    bounded = f"{ax}0" in result  # the divisor of an average that excludes the padding
    lines += [
        f"for (int64_t o{ax} = 0; o{ax} < {ow}; o{ax}++) {{",
        *(
            [
                f"{INDENT}int64_t {ax}0, {ax}1;",
                f"{INDENT}mdsl_window(o{ax}, {sw}, {pw}, {dw}, {kw}, {w}, &{ax}0, &{ax}1);",
            ]
            if bounded
            else []
        ),
        f"{INDENT}{k.out}[{_pool_out_index(k, windows)}] = {result};",
        "}",
    ]
    return lines


_POOL_ROW_MAX = 2048  # longest row of outputs pooled at once (its accumulators on the stack)


def _pool_out_index(k: kir.Pool, windows: list) -> str:
    out = "nc"
    for (a, *_), n in zip(windows[:-1], k.out_spatial[:-1]):
        out = f"({out} * {n} + o{a})"
    return f"{out} * {k.out_spatial[-1]} + o{windows[-1][0]}"


_POOL_AXES = ("z", "y", "x")  # output positions oz, oy, ox; window bounds z0..z1, ...
_POOL_TAPS = ("kk", "ki", "kj")  # the window's taps along each axis


def _callback_body(plan: Plan, k: kir.Callback) -> str:
    buffers = [b or "0" for b in k.inputs] + list(k.outputs)
    return (
        f"{INDENT}void *buffers[] = {{{', '.join(f'(void *){b}' for b in buffers)}}};\n"
        f"{INDENT}if (callback({k.index}, buffers)) return 1;"
    )


_BODY = {
    kir.Pointwise: _pointwise_body,
    kir.Rowwise: _rowwise_body,
    kir.Gemm: _gemm_body,
    kir.Conv: _conv_body,
    kir.Pool: _pool_body,
    kir.Callback: _callback_body,
    kir.CustomCall: render_call_body,
    kir.Indexed: render_indexed_body,
}
