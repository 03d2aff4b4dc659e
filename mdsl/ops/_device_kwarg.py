"""Every op builder takes `device=`: the per-op form of `with mdsl.device(...)`.

Builders are many and varied (one-line families, hand-written wrappers with ONNX-style
keywords), so the keyword is added here once, around each public builder, instead of in
each signature.

>>> import mdsl
>>> with mdsl.Graph() as g:
...     x = g.input("x", (4,))
...     y = mdsl.ops.relu(x, device="npu:0")
...     g.output(y, "y")
>>> y.producer.device
'npu:0'
"""

from __future__ import annotations

import functools
import inspect


def with_device(builder):
    """`builder` accepting `device=`: its nodes are placed there (None: the scope's)."""

    @functools.wraps(builder)
    def build(*args, device: str | None = None, **kwargs):
        if device is None:
            return builder(*args, **kwargs)
        from mdsl.ops.scopes import device as device_scope

        with device_scope(device):
            return builder(*args, **kwargs)

    for key in ("opdef", "op_type"):
        if hasattr(builder, key):
            setattr(build, key, getattr(builder, key))
    build.__signature__ = _with_device_parameter(inspect.signature(builder, follow_wrapped=False))
    return build


def _with_device_parameter(sig: inspect.Signature) -> inspect.Signature:
    params = [p for p in sig.parameters.values() if p.name != "device"]
    device = inspect.Parameter("device", inspect.Parameter.KEYWORD_ONLY, default=None)
    at = next((i for i, p in enumerate(params) if p.kind == p.VAR_KEYWORD), len(params))
    return sig.replace(parameters=[*params[:at], device, *params[at:]])


def add_device_keyword(namespace: dict) -> None:
    """Wrap every public builder function of `namespace` (the `mdsl.ops` module)."""
    for name, value in list(namespace.items()):
        if name.startswith("_") or not inspect.isfunction(value):
            continue
        if getattr(value, "__module__", "").startswith("mdsl.ops."):
            namespace[name] = with_device(value)
