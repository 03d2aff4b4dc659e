"""Global-memory bytes a kernel moves per call, estimated from its Kernel IR, next to the
minimum (every input read once, every output written once).

A row kernel streams its row through the UB once per phase that reads it (softmax: the
maximum, the sum of exponentials, the normalized store), so its traffic is a multiple of
the minimum; the README lists both so a reviewer sees what a fused kernel costs.

>>> import mdsl
>>> from mdsl.targets.ascendc import build_project
>>> with mdsl.Graph("sm") as g:
...     g.output(mdsl.ops.softmax(g.input("x", (4, 64)), axis=-1), "y")
>>> p = build_project(g)
>>> (pk,) = p.kernels
>>> gm_bytes(pk.kernel), minimum_bytes(pk.kernel, p.plan)
(4096, 2048)
"""

from __future__ import annotations

from mdsl import expr as E
from mdsl.codegen import kir
from mdsl.targets.ascendc.kernels import (
    Im2colKernel,
    MatmulKernel,
    RowKernel,
    RowStorePhase,
    ScalarStorePhase,
    Stream,
    VectorKernel,
)


def _stream_bytes(s: Stream, rows: int, row_length: int) -> int:
    return rows * (row_length if s.is_tile else 1) * s.dtype.itemsize


def _names(value, lets: dict) -> set[str]:
    """Variables `value` reads, through the lets it uses."""
    seen, todo = set(), list(E.variables(value))
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in lets:
            todo += list(E.variables(lets[name]))
    return seen


def gm_bytes(k) -> int:
    """Bytes read and written in global memory by one call of kernel `k` (an estimate:
    matmul operands counted once)."""
    if isinstance(k, VectorKernel):
        loads = sum(_stream_bytes(s, k.rows, k.row_length) for s in k.loads.values())
        return loads + sum(_stream_bytes(s, k.rows, k.row_length) for s, _ in k.stores)
    if isinstance(k, RowKernel):
        return _row_bytes(k)
    if isinstance(k, MatmulKernel):
        size = k.dtype.itemsize
        total = (
            k.batch * (k.m * k.k + k.k * k.n) * size + k.batch * k.m * k.n * k.out_dtype.itemsize
        )
        if k.epilogue is not None:  # C goes to GM, the epilogue reads it back
            total += gm_bytes(k.epilogue)
        return total
    if isinstance(k, Im2colKernel):
        return k.units * k.width * 4 + k.col_elements * 4
    return 0


def _row_bytes(k: RowKernel) -> int:
    lets: dict = {}
    total = 0
    for phase in k.phases:
        if isinstance(phase, kir.Reduce):
            lets.update({let.var: let.value for let in phase.lets})
            value = phase.value
        elif isinstance(phase, kir.Let):
            lets[phase.var] = phase.value
            continue
        else:
            value = phase.value
        read = _names(value, lets)
        total += sum(
            _stream_bytes(s, k.rows, k.row_length) for n, s in k.loads.items() if n in read
        )
        if isinstance(phase, (RowStorePhase, ScalarStorePhase)):
            total += _stream_bytes(phase.stream, k.rows, k.row_length)
    return total


def minimum_bytes(k, plan) -> int:
    """Every global buffer the kernel touches, once (im2col: its columns too)."""
    from mdsl.targets.ascendc.render import kernel_buffers

    total = 0
    for name in kernel_buffers(k):
        spec = plan.buffers[name]
        total += spec.elements * spec.dtype.itemsize
    if isinstance(k, Im2colKernel):
        total += k.col_elements * 4
    return total
