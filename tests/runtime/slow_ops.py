"""A custom op that sleeps, for pipeline timeout tests. Ray actors import this module
(through `RayPipeline(setup=register_slow_op)`) to register it in their own process."""

from __future__ import annotations

import time

import mdsl

SLOW_OP = "TestSlowIdentity"
SLEEP_SECONDS = 60.0


def register_slow_op():
    """Register `TestSlowIdentity` (x -> x after SLEEP_SECONDS); returns its builder."""

    @mdsl.op_proto(SLOW_OP, inputs={"x": "float"}, outputs={"y": "float"})
    def slow_identity(x):
        return x

    @mdsl.register_op_impl(SLOW_OP)
    def _slow_identity(x):
        time.sleep(SLEEP_SECONDS)
        return x.copy()

    return slow_identity
