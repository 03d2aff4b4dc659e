"""Choosing and running a node's implementation for the interpreter.

The rule (`choose_binding`), for `impl`:

- "auto" (the default): of the op's "python" and "expr" bindings, the most recently
  registered one. Rebinding is how a user says "use this now": registering an expr
  implementation for an op that had a numpy one switches the interpreter to it, and
  registering a numpy one again switches back, all without touching any graph. The
  library's own expr lowerings of built-in ops count as older than every other
  registration, so built-ins run their numpy reference unless the user rebinds them.
- "python": the numpy binding, or the expr binding when the op has no numpy one.
- "expr": the expr binding, or the numpy binding when the op has none (MatMul, Reshape,
  ... are not elementwise and have no expression form).

A fixed priority (python over expr) would make registering an expr implementation for an
op with a numpy one a no-op for the interpreter, which surprises more than it helps; a
caller who wants one kind throughout says so with impl="python" or impl="expr".

An expr binding runs elementwise: every input must broadcast to the node's output shape;
the result is broadcast to that shape and cast to the node's output dtype (a float
becoming an integer saturates, as `mdsl.expr.cast` does). Inputs a binding lists in its
`axis_inputs` option are per-axis parameters: a 1-D one is laid along the output's `axis`
(how BatchNormalization's per-channel scale meets an NCHW input). Half-float
inputs are evaluated in float32 and rounded once at the end, the convention of the numpy
references (`mdsl.ops.precision`), so both kinds of binding agree on float16 graphs.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from mdsl import expr
from mdsl.expr.numpy_ops import saturating_astype
from mdsl.ir.dim import evaluate_dims
from mdsl.ir.errors import ExecutionError
from mdsl.ir.graph import Node
from mdsl.ops import registry
from mdsl.ops.bindings import Binding, expr_outputs, get_binding
from mdsl.ops.precision import widen
from mdsl.ops.storage import storage_kernel
from mdsl.targets.python.control_flow import control_flow_kernel

IMPLS = ("auto", "python", "expr")

# (input arrays, [(concrete output shape, numpy dtype)]) -> output arrays
Kernel = Callable[[list, list], list]


def choose_binding(op_type: str, impl: str = "auto") -> Binding | None:
    """The binding the interpreter runs for `op_type` under `impl` (see the module doc).

    >>> import mdsl
    >>> choose_binding("Relu").backend, choose_binding("Relu", "expr").backend
    ('python', 'expr')
    """
    if impl not in IMPLS:
        raise ExecutionError(f"impl must be one of {', '.join(IMPLS)}, got {impl!r}")
    python, expression = get_binding(op_type, "python"), get_binding(op_type, "expr")
    if impl == "python":
        return python or expression
    if impl == "expr":
        return expression or python
    present = [b for b in (python, expression) if b is not None]
    return max(present, key=lambda b: b.serial, default=None)


def node_kernel(
    node: Node, impl: str = "auto", symbols: dict | None = None
) -> tuple[Binding, Kernel]:
    """The binding chosen for `node` and a kernel running it; `symbols` (symbol -> size)
    turns symbolic dims in attrs (a Reshape target `(B, S, 64)`) into this run's ints.
    Control-flow nodes (If, Case, While) get a kernel running their subgraphs in the
    interpreter (`mdsl.targets.python.control_flow.control_flow_kernel`)."""
    if node.subgraphs:
        return Binding(node.op_type, "python", None), control_flow_kernel(node, impl, symbols)
    binding = choose_binding(node.op_type, impl)
    if binding is None:
        raise ExecutionError(
            _unbound_message(node.op_type, impl),
            node=node.name,
            op_type=node.op_type,
            source=node.source,
        )
    attrs = concrete_attrs(_without_dynamic(node.attrs), symbols or {})
    make = _python_kernel if binding.backend == "python" else _expr_kernel
    kernel = make(binding, node, attrs)
    return binding, storage_kernel(node, kernel)  # tensors stored NHWC etc. (layout pass)


def _unbound_message(op_type: str, impl: str) -> str:
    only_c = get_binding(op_type, "c") is not None
    why = "only a 'c' implementation, which the interpreter cannot run" if only_c else "none"
    return (
        f"no implementation of op {op_type!r} the interpreter can run (impl={impl!r}; "
        f"bound: {why}); register one with mdsl.register_op_impl({op_type!r}, fn) "
        f"(numpy) or mdsl.register_op_impl({op_type!r}, fn, backend='expr')"
    )


def _without_dynamic(attrs: dict) -> dict:
    """Implementations never see a data-dependent node's symbol names."""
    return {k: v for k, v in attrs.items() if k != "dynamic"} if "dynamic" in attrs else attrs


def concrete_attrs(attrs: dict, symbols: dict) -> dict:
    """`attrs` with every symbolic Dim (also inside tuples) evaluated with `symbols`."""
    if not symbols:
        return attrs
    return {k: evaluate_dims(v, symbols) for k, v in attrs.items()}


def _python_kernel(binding: Binding, node: Node, attrs: dict) -> Kernel:
    def run(args: list, out_specs: list) -> list:
        result = binding.fn(*args, **attrs)
        return list(result) if isinstance(result, (tuple, list)) else [result]

    return run


def _expr_kernel(binding: Binding, node: Node, attrs: dict) -> Kernel:
    names = input_names(node)

    def run(args: list, out_specs: list) -> list:
        present = [n if a is not None else None for n, a in zip(names, args)]
        exprs = expr_outputs(
            node.op_type, binding.fn, present, node.attrs, len(out_specs), ExecutionError
        )
        env = {n: widen(a) for n, a in zip(names, args) if a is not None}
        _align_axis_inputs(env, binding.options, node.attrs, len(out_specs[0][0]))
        _check_elementwise(node.op_type, env, out_specs)
        values = expr.evaluate(exprs, env)
        with np.errstate(all="ignore"):
            return [
                np.array(np.broadcast_to(saturating_astype(v, dtype), shape), order="C")
                for v, (shape, dtype) in zip(values, out_specs)
            ]

    return run


def input_names(node: Node) -> list[str]:
    """One name per node input: the prototype's input names (`x0`, `x1`, ... for the
    members of a variadic input)."""
    slots = registry.get_op(node.op_type).inputs if registry.has_op(node.op_type) else ()
    if not slots:
        return [f"x{i}" for i in range(len(node.inputs))]
    names: list[str] = []
    for slot in slots:
        if slot.variadic:
            members = len(node.inputs) - (len(slots) - 1)
            names += [f"{slot.name}{k}" for k in range(members)]
        else:
            names.append(slot.name)
    return names[: len(node.inputs)]


def _align_axis_inputs(env: dict, options: dict, attrs: dict, ndim: int) -> None:
    """Reshape per-axis parameters (1-D, one value per index of the axis) to broadcast
    along that axis of the output; one-element ones become scalars."""
    axis = options.get("axis")
    if isinstance(axis, str):
        axis = attrs[axis]
    for name in options.get("axis_inputs", ()):
        array = env.get(name)
        if array is None:
            continue
        if array.size == 1:
            env[name] = array.reshape(())
        elif array.ndim == 1 and ndim:
            shape = [1] * ndim
            shape[axis % ndim] = array.size
            env[name] = array.reshape(shape)


def _check_elementwise(op_type: str, env: dict, out_specs: list) -> None:
    for shape, _ in out_specs:
        for name, array in env.items():
            if not _broadcasts_to(array.shape, shape):
                raise ExecutionError(
                    f"the expr implementation of {op_type!r} is elementwise, but input "
                    f"{name!r} of shape {list(array.shape)} does not broadcast to the "
                    f"output shape {list(shape)}; bind a 'python' implementation for an op "
                    "that is not elementwise"
                )


def _broadcasts_to(shape: tuple, target: tuple) -> bool:
    if len(shape) > len(target):
        return False
    tail = target[len(target) - len(shape) :]
    return all(s in (1, t) for s, t in zip(shape, tail))
