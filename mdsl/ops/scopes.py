"""Naming scopes, `@mdsl.layer`, `mdsl.param` and `mdsl.device`."""

from __future__ import annotations

import contextlib
import functools

import numpy as np

from mdsl.ir import context
from mdsl.ir.dtype import DType
from mdsl.ir.errors import GraphError, MdslError
from mdsl.ir.graph import Layer, Tensor
from mdsl.ir.initializer import INIT_KINDS, ParamInit, seed_for
from mdsl.ir.source import user_source
from mdsl.ir.tensor_type import TensorType
from mdsl.ir.tracebacks import api_boundary
from mdsl.ops.apply import building_graph


@contextlib.contextmanager
def _enter_layer(name: str, function: str):
    g = building_graph(f"layer {name!r}")
    if not isinstance(name, str) or not name or "/" in name:
        raise GraphError(
            f"a layer or scope name must be a non-empty string without '/': {name!r}",
            source=user_source(),
        )
    parent = context.current_scope()
    path = g.layer_names.unique(f"{parent}/{name}" if parent else name)
    g.layers[path] = Layer(path, function)
    token = context.scope_path.set(tuple(path.split("/")))
    try:
        yield path
    finally:
        context.scope_path.reset(token)


def scope(name: str):
    """A name scope: nodes built inside are named `<scope path>/<name>/...`.

    >>> import mdsl
    >>> with mdsl.Graph() as g:
    ...     x = g.input("x", (2,))
    ...     with mdsl.scope("Head"):
    ...         y = x + 1.0
    ...     g.output(y, "y")
    >>> y.name
    'Head/Add'
    """
    return _enter_layer(name, function="")


def layer(fn=None, *, name: str | None = None):
    """Make a function a layer: each call records its nodes under a nested scope.

    The scope is the function's name (or `name=`); a second call in the same parent gets
    `_1`, then `_2`, ... Layers nest without limit and never change what a graph computes.

    >>> import mdsl
    >>> @mdsl.layer
    ... def ffn(x):
    ...     return x * 2.0
    >>> with mdsl.Graph() as g:
    ...     x = g.input("x", (4,))
    ...     g.output(ffn(ffn(x)), "y")
    >>> [n.name for n in g.nodes if n.op_type == "Mul"]
    ['ffn/Mul', 'ffn_1/Mul']
    """
    if fn is None:
        return lambda f: layer(f, name=name)
    scope_name = name or fn.__name__
    qualname = f"{fn.__module__}.{fn.__qualname__}"

    @functools.wraps(fn)
    @api_boundary
    def wrapper(*args, **kwargs):
        with _enter_layer(scope_name, qualname):
            return fn(*args, **kwargs)

    vars(wrapper)["__mdsl_layer__"] = scope_name  # marks a layer function (its scope name)
    return wrapper


@api_boundary
def param(
    name: str, shape, dtype="float32", init="normal", seed: int | None = None, scale: float = 0.02
) -> Tensor:
    """A trainable-style parameter: a constant named `<layer path>/<name>`.

    `init` is "normal" (std `scale`), "uniform" (±`scale`), "zeros", "ones" or an ndarray.
    Values are deterministic: drawn from `seed` and the parameter's path, generated only
    when first needed (so building a BERT-sized graph costs no random numbers).

    >>> import mdsl
    >>> with mdsl.Graph() as g:
    ...     x = g.input("x", (3, 4))
    ...     w = mdsl.param("weight", (4, 2), init="ones")
    ...     g.output(x @ w, "y")
    >>> w.name, g.node("weight").const_value().sum()
    ('weight', np.float32(8.0))
    """
    g = building_graph(f"param {name!r}")
    try:
        dt = DType.of(dtype)
        if isinstance(init, np.ndarray):
            return _param_from_array(g, name, shape, dt, init)
        if init not in INIT_KINDS:
            raise GraphError(f"param {name!r}: init must be an ndarray or one of {INIT_KINDS}")
        ttype = TensorType(shape, dt)
        if not ttype.is_static:
            raise GraphError(f"param {name!r}: shape {shape} must be static")
    except MdslError as e:
        raise e.with_context(node=_path(name), op_type="Const", source=user_source()) from None
    path = _path(name)
    value = ParamInit(ttype.shape, dt, init, seed_for(path, seed), scale)
    node = g._new_node("Const", [], {"value": value}, name=name, types=[ttype])
    return node.outputs[0]


def _param_from_array(g, name, shape, dt, array) -> Tensor:
    if tuple(array.shape) != tuple(shape):
        raise GraphError(f"param {name!r}: init array shape {array.shape} != shape {tuple(shape)}")
    value = np.array(array, dtype=dt.np)
    value.setflags(write=False)
    node = g._new_node(
        "Const", [], {"value": value}, name=name, types=[TensorType(value.shape, dt)]
    )
    return node.outputs[0]


def _path(name: str) -> str:
    scope_path = context.current_scope()
    return f"{scope_path}/{name}" if scope_path else name


@contextlib.contextmanager
def device(name: str):
    """Place the nodes built inside on device `name` ("cpu", "npu:0", ...)."""
    if not isinstance(name, str) or not name:
        raise GraphError(f"a device name must be a non-empty string, got {name!r}")
    token = context.device_stack.set((*context.device_stack.get(), name))
    try:
        yield name
    finally:
        context.device_stack.reset(token)
