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

from mdsl.ir.errors import GraphError, MdslError
from mdsl.ir.source import user_source
from mdsl.ir.tracebacks import api_boundary
from mdsl.ops.signature import misuse_message


def with_device(builder):
    """`builder` accepting `device=`: its nodes are placed there (None: the scope's)."""

    @functools.wraps(builder)
    @api_boundary
    def build(*args, device: str | None = None, **kwargs):
        try:
            if device is None:
                return builder(*args, **kwargs)
            from mdsl.ops.scopes import device as device_scope

            with device_scope(device):
                return builder(*args, **kwargs)
        except MdslError:  # DTypeError is a TypeError too: it is the builder's own answer
            raise
        except TypeError as e:  # a call that does not fit the signature: say how to fix it
            raise _misuse_error(builder, args, kwargs) or e from None

    for key in ("opdef", "op_type"):
        if hasattr(builder, key):
            setattr(build, key, getattr(builder, key))
    build.__signature__ = _with_device_parameter(_signature(builder))
    return build


def _signature(builder) -> inspect.Signature:
    """The builder's signature, its string annotations evaluated where they can be."""
    try:
        return inspect.signature(builder, follow_wrapped=False, eval_str=True)
    except Exception:  # an annotation naming something only a type checker sees
        return inspect.signature(builder, follow_wrapped=False)


def _with_device_parameter(sig: inspect.Signature) -> inspect.Signature:
    params = [p for p in sig.parameters.values() if p.name != "device"]
    device = inspect.Parameter(
        "device", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=str | None
    )
    at = next((i for i, p in enumerate(params) if p.kind == p.VAR_KEYWORD), len(params))
    return sig.replace(parameters=[*params[:at], device, *params[at:]])


def add_device_keyword(namespace: dict) -> None:
    """Wrap every public builder function of `namespace` (the `mdsl.ops` module)."""
    for name, value in list(namespace.items()):
        if name.startswith("_") or not inspect.isfunction(value):
            continue
        if getattr(value, "__module__", "").startswith("mdsl.ops."):
            namespace[name] = with_device(value)


def _misuse_error(builder, args, kwargs) -> GraphError | None:
    """A GraphError for a call not fitting `builder`'s signature, or None if it fits."""
    message = misuse_message(builder, args, kwargs)
    if message is None:
        return None
    from mdsl.ops.apply import prospective_name

    leaf = getattr(builder, "op_type", None) or builder.__name__
    return GraphError(
        message,
        node=prospective_name(leaf, kwargs.get("name")),
        op_type=getattr(builder, "op_type", None),
        source=user_source(),
    )
