"""PyTorch import: an `nn.Module` becomes an mdsl Graph, traced on example inputs.

`from_module(module, example_inputs)` traces with torch.fx first: fx keeps the module
structure (`call_module` of `layer1.0.conv1`, functions called inside `blocks.0`), and
every submodule becomes a layer named by its qualified name (`encoder.layer.0.attention`
becomes the layer `encoder/layer.0/attention`, a list index staying with its list).
Parameters and buffers become `Const` nodes named after them (`encoder/layer.0/
attention/query/weight`).

Where fx cannot trace a module (Python control flow on tensors, modules such as
`nn.TransformerEncoderLayer` whose forward checks its inputs), the module is run once on
the example inputs under a PyTorch function mode that records every torch call
instead; submodules are followed with forward hooks. That trace is static: a branch
taken on tensor *values* (`if x.sum() > 0:`) is fixed to the side the example inputs
took, and the importer says so with a warning (`mdsl.cond` expresses a real branch).

Either way shapes are those of the example inputs (`x.size(0)` is a number), the module
is traced in eval mode (inference: dropout off, batch norm on running statistics), and
ops the table (`mdsl.frontends.torch_ops`) lacks are reported together in one
`GraphError`.
"""

from __future__ import annotations

import contextlib
import inspect
import warnings
from collections import Counter

import numpy as np

from mdsl.frontends import torch_ops
from mdsl.ir import context
from mdsl.ir.dtype import DType
from mdsl.ir.errors import GraphError, MdslError
from mdsl.ir.graph import CONST, Graph, Layer, Tensor
from mdsl.ir.source import user_source
from mdsl.ir.tensor_type import TensorType
from mdsl.ops.apply import apply_op
from mdsl.ops.registry import get_op


class StaticTraceWarning(UserWarning):
    """The trace fixed data-dependent Python control flow to the example inputs' path."""


def from_module(module, example_inputs, *, name: str | None = None) -> Graph:
    """Import `module` as an mdsl Graph, traced on `example_inputs` (a tensor or a tuple).

    >>> import torch, mdsl
    >>> net = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU())
    >>> g = mdsl.frontends.torch.from_module(net, torch.randn(2, 4))
    >>> [n.name for n in g.nodes if n.op_type not in ("Input", "Output")]
    ['0/weight', '0/bias', '0/Gemm', '1/Relu']
    """
    import torch

    inputs = (
        tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    )
    if not isinstance(module, torch.nn.Module):
        raise GraphError(f"from_module() takes a torch.nn.Module, got {type(module).__name__}")
    if not all(isinstance(x, torch.Tensor) for x in inputs):
        raise GraphError("example_inputs must be a tensor or a tuple of tensors")
    graph_name = name or type(module).__name__
    was_training = module.training
    module.eval()
    try:
        return _trace(module, inputs, graph_name)
    finally:
        module.train(was_training)


def _trace(module, inputs, graph_name: str) -> Graph:
    try:
        gm = _fx_graph_module(module)
    except Exception as e:  # fx refuses many modules; the concrete trace takes them
        reason = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    else:
        values = _run_module(module, lambda: _record_values(gm, inputs))
        missing = _fx_unsupported(gm, values)
        if not missing:
            return _FxImporter(gm, values, module, graph_name).build(inputs)
        reason = f"ops torch.fx left opaque: {_listing(missing)}"
    warnings.warn(
        f"torch.fx could not trace {type(module).__name__} ({reason}); tracing it by running "
        "it on example_inputs instead",
        StaticTraceWarning,
        stacklevel=3,
    )
    return _ConcreteTracer(module, graph_name).build(inputs)


def _listing(counts: Counter) -> str:
    return ", ".join(f"{k} ({n})" for k, n in sorted(counts.items()))


def layer_path(qualified_name: str) -> tuple[str, ...]:
    """`encoder.layer.0.attention` -> ("encoder", "layer.0", "attention")."""
    segments: list[str] = []
    for part in qualified_name.split("."):
        if part.isdigit() and segments:
            segments[-1] = f"{segments[-1]}.{part}"
        elif part:
            segments.append(part)
    return tuple(segments)


# -- building --------------------------------------------------------------------------------
class _Builder:
    """What handlers see: tensor conversion, constants, ops, the current layer."""

    def __init__(self, g: Graph, module):
        self.g = g
        self.current_key = ""
        self._param_names = {id(t): n for n, t in _named_tensors(module)}
        self._consts: dict[int, Tensor] = {}
        self._keep: list = []  # torch tensors whose id keys `_consts`

    def is_tensor(self, value) -> bool:
        import torch

        return isinstance(value, (Tensor, torch.Tensor))

    def v(self, value):
        """An mdsl Tensor for a tensor argument (a Const for a torch tensor); Python
        scalars pass through (ops make them constants of the other operand's dtype)."""
        import torch

        if isinstance(value, torch.Tensor):
            return self._const_of(value)
        if (
            isinstance(value, (list, tuple))
            and value
            and all(isinstance(x, (int, float, bool)) for x in value)
        ):
            return self.const_array(np.array(value), "const")
        return value

    def _const_of(self, tensor) -> Tensor:
        key = id(tensor)
        if key not in self._consts:
            array = to_numpy(tensor)
            qualified = self._param_names.get(key)
            if qualified is None:
                self._consts[key] = self.const_array(array, "const")
            else:
                path = layer_path(qualified)
                self._consts[key] = self._new_const(array, path[:-1], path[-1])
            self._keep.append(tensor)
        return self._consts[key]

    def const_array(self, array, leaf: str) -> Tensor:
        """A Const in the current layer."""
        return self._new_const(np.asarray(array), tuple(context.scope_path.get()), leaf)

    def _new_const(self, array: np.ndarray, layer: tuple[str, ...], leaf: str) -> Tensor:
        array = np.array(array)
        array.setflags(write=False)
        ensure_layers(self.g, layer)
        node = self.g._new_node(
            CONST,
            [],
            {"value": array},
            name=leaf,
            types=[TensorType(array.shape, DType.of(array.dtype))],
            layer_path="/".join(layer),
        )
        return node.outputs[0]

    def op(self, op_type: str, *inputs, **attrs):
        """Record one node; its output (a tuple for several)."""
        opdef = get_op(op_type)
        args = [self.v(x) if not isinstance(x, list) else [self.v(t) for t in x] for x in inputs]
        return apply_op(opdef, args, attrs)

    def dtype(self, torch_dtype) -> DType:
        return torch_dtype_to_mdsl(torch_dtype)

    def torch_dtype_of(self, value):
        import torch

        return value.dtype if isinstance(value, torch.Tensor) else _mdsl_to_torch(value.dtype)

    @contextlib.contextmanager
    def layer(self, path: tuple[str, ...]):
        ensure_layers(self.g, path)
        token = context.scope_path.set(tuple(path))
        try:
            yield
        finally:
            context.scope_path.reset(token)

    def call(self, key: str, args, kwargs):
        """Run the handler of `key` (GraphError naming the call when it fails)."""
        handler = torch_ops.FUNCTIONS.get(key)
        if handler is None:
            raise GraphError(f"no mdsl mapping for torch call {key!r}")
        self.current_key = key
        try:
            return handler(self, *args, **kwargs)
        except MdslError:
            raise
        except TypeError as e:
            raise GraphError(f"torch call {key!r} with unexpected arguments: {e}") from None


def ensure_layers(g: Graph, path: tuple[str, ...]) -> None:
    for depth in range(1, len(path) + 1):
        prefix = "/".join(path[:depth])
        if prefix not in g.layers:
            g.layers[prefix] = Layer(prefix, "")
            g.layer_names.reserve(prefix)


def _named_tensors(module):
    yield from module.named_parameters(remove_duplicate=False)
    yield from module.named_buffers(remove_duplicate=False)


def to_numpy(tensor) -> np.ndarray:
    import torch

    t = tensor.detach().cpu()
    if t.dtype == torch.bfloat16:
        import ml_dtypes

        return t.float().numpy().astype(ml_dtypes.bfloat16)
    return t.numpy().copy()


_TORCH_DTYPES = {
    "float32": DType.float32,
    "float16": DType.float16,
    "bfloat16": DType.bfloat16,
    "float64": DType.float64,
    "int64": DType.int64,
    "int32": DType.int32,
    "int16": DType.int16,
    "int8": DType.int8,
    "uint8": DType.uint8,
    "bool": DType.bool_,
}


def torch_dtype_to_mdsl(torch_dtype) -> DType:
    name = str(torch_dtype).removeprefix("torch.")
    if name not in _TORCH_DTYPES:
        raise GraphError(f"torch dtype {torch_dtype} has no mdsl counterpart")
    return _TORCH_DTYPES[name]


def _mdsl_to_torch(dtype: DType):
    import torch

    return getattr(torch, dtype.value)


def _declare_input(g: Graph, name: str, example) -> Tensor:
    return g.input(name, tuple(example.shape), torch_dtype_to_mdsl(example.dtype))


def _declare_outputs(g: Graph, result, convert) -> None:
    if isinstance(result, dict):
        items = list(result.items())
    elif isinstance(result, (tuple, list)):
        items = (
            [(f"output_{i}", r) for i, r in enumerate(result)]
            if len(result) > 1
            else [("output", result[0])]
        )
    else:
        items = [("output", result)]
    for name, value in items:
        tensor = convert(value)
        if not isinstance(tensor, Tensor):
            raise GraphError(f"module output {name!r} is not a tensor computed from the inputs")
        g.output(tensor, str(name))


def _run_module(module, run):
    """`run()`, with an exception the module itself raises turned into a GraphError."""
    try:
        return run()
    except MdslError:
        raise
    except Exception as e:
        raise GraphError(
            f"{type(module).__name__} raised {type(e).__name__} when run on example_inputs: {e}"
        ) from e


# -- torch.fx ----------------------------------------------------------------------------------
def _fx_graph_module(module):
    import torch.fx as fx

    tracer = fx.Tracer()
    tracer.record_stack_traces = True  # errors then point at the user's line
    graph = tracer.trace(module)
    return fx.GraphModule(module, graph)


def _record_values(gm, inputs) -> dict:
    """fx node -> its value when the module runs on the example inputs."""
    import torch

    recorder = _Recorder(gm)
    with torch.no_grad():
        recorder.run(*inputs)
    return recorder.values


def _recorder_class():
    import torch.fx as fx

    class Recorder(fx.Interpreter):
        def __init__(self, gm):
            super().__init__(gm)
            self.values = {}

        def run_node(self, n):
            result = super().run_node(n)
            self.values[n] = result
            return result

    return Recorder


def _Recorder(gm):
    return _recorder_class()(gm)


def _holds_tensor(value) -> bool:
    import torch

    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, (tuple, list)):
        return any(_holds_tensor(v) for v in value)
    if isinstance(value, dict):
        return any(_holds_tensor(v) for v in value.values())
    return False


def _traced_nodes(gm, values) -> set:
    """fx nodes whose value depends on the graph inputs."""
    traced = set()
    for node in gm.graph.nodes:
        if node.op == "placeholder" or (
            node.op in ("call_function", "call_method", "call_module")
            and any(a in traced for a in node.all_input_nodes)
        ):
            traced.add(node)
    return traced


def _fx_key(node) -> str:
    return torch_ops.torch_key(node.target)


def _fx_unsupported(gm, values) -> Counter:
    missing: Counter = Counter()
    traced = _traced_nodes(gm, values)
    for node in gm.graph.nodes:
        if node not in traced or not _holds_tensor(values.get(node)):
            continue
        if node.op == "call_module":
            sub = gm.get_submodule(node.target)
            if torch_ops.module_key(sub) is None:
                missing[type(sub).__name__] += 1
        elif (
            node.op in ("call_function", "call_method") and _fx_key(node) not in torch_ops.FUNCTIONS
        ):
            missing[_fx_key(node)] += 1
    return missing


class _FxImporter:
    def __init__(self, gm, values, module, name: str):
        self.gm, self.values, self.module, self.name = gm, values, module, name
        self.env: dict = {}

    def build(self, inputs) -> Graph:
        traced = _traced_nodes(self.gm, self.values)
        examples = iter(inputs)
        with Graph(self.name) as g:
            b = _Builder(g, self.module)
            for node in self.gm.graph.nodes:
                if node.op == "placeholder":
                    self.env[node] = self._placeholder(g, node, examples)
                elif node.op == "output":
                    _declare_outputs(g, self._arg(node.args[0]), lambda v: v)
                elif node in traced and _holds_tensor(self.values.get(node)):
                    self.env[node] = self._convert(b, node)
                    self._rebind_in_place(node)
                else:  # a constant, or a Python value computed from shapes
                    self.env[node] = self.values[node]
        return g

    def _placeholder(self, g: Graph, node, examples):
        """A graph input for the next example input; past the examples, the argument's
        default (`forward(self, x, mask=None)` called with x only)."""
        example = next(examples, None)
        if example is not None:
            return _declare_input(g, node.target, example)
        if node.args:
            return node.args[0]
        raise GraphError(f"forward() argument {node.target!r} has no example input and no default")

    def _rebind_in_place(self, node) -> None:
        """After `x.add_(y)` later uses of x read the result (views of x are not followed)."""
        import torch.fx as fx

        in_place = isinstance(node.target, str) and torch_ops.in_place_base(node.target)
        if in_place and node.args and isinstance(node.args[0], fx.Node):
            self.env[node.args[0]] = self.env[node]

    def _arg(self, value):
        import torch.fx as fx

        return fx.node.map_arg(value, lambda n: self.env[n])

    def _convert(self, b: _Builder, node):
        args, kwargs = self._arg(node.args), self._arg(node.kwargs)
        try:
            if node.op == "call_module":
                sub = self.gm.get_submodule(node.target)
                with b.layer(layer_path(node.target)):
                    b.current_key = torch_ops.module_key(sub)
                    return torch_ops.MODULES[b.current_key](b, sub, *args, **kwargs)
            with b.layer(_fx_layer(node)):
                return b.call(_fx_key(node), args, kwargs)
        except MdslError as e:
            where = _fx_source(node) or e.source
            raise type(e)(e.message, node=e.node, op_type=e.op_type, source=where) from None


def _fx_layer(node) -> tuple[str, ...]:
    stack = node.meta.get("nn_module_stack")
    if not stack:
        return ()
    qualified = list(stack.values())[-1][0]
    return layer_path(qualified)


def _fx_source(node) -> str | None:
    """file:line of the user's code that made `node` (fx records a stack trace)."""
    import re

    trace = node.meta.get("stack_trace") or ""
    frames = re.findall(r'File "([^"]+)", line (\d+)', trace)
    if not frames:
        return None
    path, line = frames[-1]
    return f"{path.rsplit('/', 1)[-1]}:{line}"


# -- concrete tracing with a torch function mode -------------------------------------------------
class _ConcreteTracer:
    """Runs the module once, recording each torch call on tensors from the inputs."""

    def __init__(self, module, name: str):
        self.module, self.name = module, name
        self.mdsl: dict[int, Tensor | None] = {}  # id(torch tensor) -> mdsl Tensor
        self._alive: list = []
        self.unsupported: Counter = Counter()
        self.decisions: list[str] = []
        self.path: list[tuple[str, ...]] = [()]

    def build(self, inputs) -> Graph:
        import torch

        names = _input_names(self.module, len(inputs))
        inputs = tuple(x.detach().clone() for x in inputs)
        with Graph(self.name) as g:
            self.b = _Builder(g, self.module)
            for name, x in zip(names, inputs):
                self._bind(x, _declare_input(g, name, x))
            with self._module_hooks(), _FunctionMode(self), torch.no_grad():
                result = _run_module(self.module, lambda: self.module(*inputs))
            if self.unsupported:
                raise GraphError(
                    f"cannot import {type(self.module).__name__}: unsupported torch calls: "
                    f"{_listing(self.unsupported)}"
                )
            _declare_outputs(
                g, result, lambda t: self.mdsl.get(id(t)) if isinstance(t, torch.Tensor) else None
            )
        if self.decisions:
            warnings.warn(
                f"{type(self.module).__name__} was traced statically: "
                f"{len(self.decisions)} data-dependent decision(s) ({', '.join(self.decisions[:3])}) "
                "followed the path example_inputs took; the graph does not branch "
                "(use mdsl.cond for a real branch)",
                StaticTraceWarning,
                stacklevel=4,
            )
        return g

    def _bind(self, tensor, value) -> None:
        self.mdsl[id(tensor)] = value
        self._alive.append(tensor)

    def traced(self, value) -> bool:
        import torch

        if isinstance(value, torch.Tensor):
            return id(value) in self.mdsl
        if isinstance(value, (tuple, list)):
            return any(self.traced(v) for v in value)
        if isinstance(value, dict):
            return any(self.traced(v) for v in value.values())
        return False

    def convert(self, value):
        """Torch arguments as handlers take them (traced tensors -> mdsl Tensors)."""
        import torch

        if isinstance(value, torch.Tensor) and id(value) in self.mdsl:
            return self.mdsl[id(value)]
        if isinstance(value, (tuple, list)):
            return type(value)(self.convert(v) for v in value)
        if isinstance(value, dict):
            return {k: self.convert(v) for k, v in value.items()}
        return value

    def record(self, key: str, func, args, kwargs, result):
        if key not in torch_ops.FUNCTIONS:
            self.unsupported[key] += 1
        if self.unsupported:  # keep running to list every unsupported call, build nothing
            self._bind_results(result, None)
            return
        with self.b.layer(self.path[-1]):
            try:
                out = self.b.call(key, self.convert(args), self.convert(kwargs))
            except MdslError as e:
                raise e.with_context(source=_caller_line()) from None
        self._bind_results(result, out)

    def _bind_results(self, result, out) -> None:
        import torch

        if isinstance(result, torch.Tensor):
            self._bind(result, out if isinstance(out, Tensor) else None)
        elif isinstance(result, (tuple, list)):
            outs = out if isinstance(out, (tuple, list)) else [None] * len(result)
            for r, o in zip(result, outs):
                self._bind_results(r, o)

    def _enter_hook(self, path: tuple[str, ...]):
        def enter(module, args) -> None:
            self.path.append(path)

        return enter

    def _exit_hook(self, module, args, result) -> None:  # None: the result stays as it is
        self.path.pop()

    @contextlib.contextmanager
    def _module_hooks(self):
        handles = []
        for qualified, sub in self.module.named_modules():
            if not qualified:
                continue
            path = layer_path(qualified)
            handles.append(sub.register_forward_pre_hook(self._enter_hook(path)))
            handles.append(sub.register_forward_hook(self._exit_hook))
        try:
            yield
        finally:
            for h in handles:
                h.remove()


def _function_mode_class():
    from torch.overrides import TorchFunctionMode

    class FunctionMode(TorchFunctionMode):
        def __init__(self, tracer: _ConcreteTracer):
            super().__init__()
            self.tracer = tracer

        def __torch_function__(self, func, types_, args=(), kwargs=None):
            kwargs = kwargs or {}
            tracer = self.tracer
            if not tracer.traced((args, kwargs)):
                return func(*args, **kwargs)
            key = torch_ops.torch_key(func)
            if key in torch_ops.DATA_DEPENDENT:
                tracer.decisions.append(f"{key} at {_caller_line()}")
                return func(*args, **kwargs)
            if key in torch_ops.SHAPE_QUERIES or key in ("shape", "dtype", "device"):
                return func(*args, **kwargs)
            result = func(*args, **kwargs)
            tracer.record(key, func, args, kwargs, result)
            return result

    return FunctionMode


def _FunctionMode(tracer):
    return _function_mode_class()(tracer)


def _input_names(module, count: int) -> list[str]:
    try:
        params = [
            p.name
            for p in inspect.signature(module.forward).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        params = []
    names = params[:count]
    return names + [f"input_{i}" for i in range(len(names), count)]


def _caller_line() -> str:
    """file:line of the innermost frame in the user's code (outside mdsl and torch)."""
    import os
    import sys

    import torch

    torch_dir = os.path.dirname(torch.__file__) + os.sep
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(torch_dir) and not filename.startswith(_MDSL_DIR):
            return f"{os.path.basename(filename)}:{frame.f_lineno}"
        frame = frame.f_back
    return user_source() or "?"


_MDSL_DIR = __file__.rsplit("frontends", 1)[0]
