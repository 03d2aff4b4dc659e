"""Cases for the transfer ops (device copies, pipeline Send/Recv): each returns its input
bit for bit, whatever the dtype; a copy without its device attrs is refused when built."""

from __future__ import annotations

import mdsl
from mdsl import ops
from tests.ops.op_table import OpCase, rand

CASES = [
    OpCase(
        "MemcpyHostToDevice",
        lambda x: ops.memcpy_host_to_device(x, dst="npu:0"),
        {"x": rand(3, 5)},
        numpy_ref=lambda x: x.copy(),
    ),
    OpCase(
        "MemcpyHostToDevice",
        lambda x: ops.memcpy_host_to_device(x, dst="npu:0"),
        {"x": rand(2, 7, dtype="int64", lo=-50, hi=50)},
        numpy_ref=lambda x: x.copy(),
        symbolic={"x": ("N", 7)},
        id="int64-symbolic",
    ),
    OpCase(
        "MemcpyHostToDevice",
        lambda x: ops.memcpy_host_to_device(x),
        {"x": rand(3)},
        raises=mdsl.GraphError,
        id="no-dst",
    ),
    OpCase(
        "MemcpyDeviceToHost",
        lambda x: ops.memcpy_device_to_host(x, src="npu:0"),
        {"x": rand(4, 2, dtype="float16")},
        numpy_ref=lambda x: x.copy(),
    ),
    OpCase(
        "MemcpyDeviceToDevice",
        lambda x: ops.memcpy_device_to_device(x, src="npu:0", dst="npu:1"),
        {"x": rand(2, 3, 4, dtype="bool")},
        numpy_ref=lambda x: x.copy(),
    ),
    OpCase(
        "Send",
        lambda x: ops.send(x, key="h", src_stage=0, dst_stage=1),
        {"x": rand(2, 6)},
        numpy_ref=lambda x: x.copy(),
    ),
    OpCase(
        "Recv",
        lambda x: ops.recv(x, key="h", src_stage=0, dst_stage=1),
        {"x": rand(5, dtype="int32", lo=-9, hi=9)},
        numpy_ref=lambda x: x.copy(),
    ),
    OpCase(
        "Recv",
        lambda x: ops.recv(x, key="h", src_stage="zero", dst_stage=1),
        {"x": rand(5)},
        raises=mdsl.GraphError,
        id="bad-stage-attr",
    ),
]
