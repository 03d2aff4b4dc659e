"""Transfer ops: device copies (partitioning) and Send/Recv (pipeline stages).

Every one of them passes its input through unchanged; what differs is where the data
lives before and after. The partition pass (`mdsl.passes.partition`) inserts a copy on
each edge that crosses devices:

- `MemcpyHostToDevice`   host memory -> accelerator memory (attrs `src`, `dst`);
- `MemcpyDeviceToHost`   accelerator memory -> host memory;
- `MemcpyDeviceToDevice` one accelerator's memory -> another's.

`mdsl.passes.pipeline_stages` inserts a `Send` (in the producing stage) and a `Recv` (in
the consuming stage) on each edge between pipeline stages, paired by attr `key`.

In one process (the interpreter, a compiled graph) each op is a copy of its input; the
heterogeneous runtime and the pipeline runtime carry out the transfers themselves.

>>> import mdsl
>>> from mdsl.ops import transfer
>>> with mdsl.Graph("demo") as g:
...     x = g.input("x", (4,))
...     y = transfer.memcpy_host_to_device(x, dst="npu:0")
...     g.output(transfer.memcpy_device_to_host(y * 2.0, src="npu:0"), "y")
>>> [n.op_type for n in g.nodes]
['Input', 'MemcpyHostToDevice', 'Const', 'Mul', 'MemcpyDeviceToHost', 'Output']
"""

from __future__ import annotations

import numpy as np

from mdsl.ops.bindings import register_builtin_impl, register_op_impl
from mdsl.ops.proto import op_proto
from mdsl.ops.registry import Attr

HOST_TO_DEVICE = "MemcpyHostToDevice"
DEVICE_TO_HOST = "MemcpyDeviceToHost"
DEVICE_TO_DEVICE = "MemcpyDeviceToDevice"
COPY_OPS = frozenset({HOST_TO_DEVICE, DEVICE_TO_HOST, DEVICE_TO_DEVICE})
SEND, RECV = "Send", "Recv"
PIPELINE_OPS = frozenset({SEND, RECV})
TRANSFER_OPS = COPY_OPS | PIPELINE_OPS
HOST = "cpu"


def is_host(device: str | None) -> bool:
    """Whether `device` names host memory: "cpu" or "cpu:<i>" (None: the host too)."""
    return device is None or device == HOST or device.startswith(HOST + ":")


def copy_op_type(src: str, dst: str) -> str:
    """The copy op moving data from device `src` to device `dst`.

    >>> copy_op_type("cpu", "npu:0"), copy_op_type("npu:0", "cpu"), copy_op_type("npu:0", "npu:1")
    ('MemcpyHostToDevice', 'MemcpyDeviceToHost', 'MemcpyDeviceToDevice')
    """
    if is_host(src) and not is_host(dst):
        return HOST_TO_DEVICE
    if not is_host(src) and is_host(dst):
        return DEVICE_TO_HOST
    return DEVICE_TO_DEVICE


@op_proto(
    HOST_TO_DEVICE,
    inputs={"x": "any"},
    outputs={"y": "any"},
    attrs={"src": Attr(str, default=HOST), "dst": Attr(str, required=True)},
    category="data_movement",
)
def memcpy_host_to_device(x, *, src, dst):
    """Copy `x` from host memory `src` into the memory of device `dst`."""
    return x


@op_proto(
    DEVICE_TO_HOST,
    inputs={"x": "any"},
    outputs={"y": "any"},
    attrs={"src": Attr(str, required=True), "dst": Attr(str, default=HOST)},
    category="data_movement",
)
def memcpy_device_to_host(x, *, src, dst):
    """Copy `x` from the memory of device `src` into host memory `dst`."""
    return x


@op_proto(
    DEVICE_TO_DEVICE,
    inputs={"x": "any"},
    outputs={"y": "any"},
    attrs={"src": Attr(str, required=True), "dst": Attr(str, required=True)},
    category="data_movement",
)
def memcpy_device_to_device(x, *, src, dst):
    """Copy `x` from the memory of device `src` into the memory of device `dst`."""
    return x


@op_proto(
    SEND,
    inputs={"x": "any"},
    outputs={"y": "any"},
    attrs={
        "key": Attr(str, required=True),
        "src_stage": Attr(int, required=True),
        "dst_stage": Attr(int, required=True),
    },
    category="data_movement",
)
def send(x, *, key, src_stage, dst_stage):
    """Hand `x` to pipeline stage `dst_stage` under `key` (the matching Recv's key)."""
    return x


@op_proto(
    RECV,
    inputs={"x": "any"},
    outputs={"y": "any"},
    attrs={
        "key": Attr(str, required=True),
        "src_stage": Attr(int, required=True),
        "dst_stage": Attr(int, required=True),
    },
    category="data_movement",
)
def recv(x, *, key, src_stage, dst_stage):
    """Take the tensor pipeline stage `src_stage` sent under `key`. In a whole graph its
    input is the Send's output; in a stage graph it is the stage's input `key`."""
    return x


def _copy(x, **_attrs):
    return np.array(x, copy=True)


def _same(x, **_attrs):
    return x


for _op in sorted(TRANSFER_OPS):
    register_op_impl(_op, _copy)  # the reference: a copy, as the data moves
    register_builtin_impl(_op, _same, backend="expr")  # compiled code: a copy kernel
