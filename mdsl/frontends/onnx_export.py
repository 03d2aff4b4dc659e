"""ONNX export: an mdsl Graph becomes an ONNX model for a chosen opset.

- Every op of the ONNX table (`onnx_ops`) is written as that ONNX op; attributes mdsl
  holds that the target opset takes as inputs become initializers (a symbolic shape
  becomes a small Shape/Gather/Concat computation over the graph inputs).
- Ops mdsl has and ONNX lacks are spelled in standard ONNX where that is exact
  (Rsqrt = Reciprocal(Sqrt), Silu = x * Sigmoid(x), Gelu before opset 20 by its
  formula); every other op (TransData, user ops declared with `mdsl.op_proto`) is written
  in the custom domain `ai.mdsl`, which mdsl's importer reads back.
- Node names keep the layer path (`/encoder/attention/MatMul`), so the importer
  restores the layers; constants become initializers named after their Const node.
- The model passes `onnx.checker` (checked on export) and ONNX Runtime runs it.
"""

from __future__ import annotations

import os

import numpy as np

from mdsl.frontends.onnx_ops import BY_MDSL_TYPE, MDSL_DOMAIN, AttrInput, onnx_elem_type
from mdsl.ir.dim import Dim
from mdsl.ir.dtype import DType
from mdsl.ir.errors import GraphError, MdslError
from mdsl.ir.graph import CONST, INPUT, OUTPUT, Graph, Node, Tensor
from mdsl.ir.naming import Namespace
from mdsl.ir.rewrite import all_graphs, clone_graph
from mdsl.ops.control_flow import control_flow, subgraph_params, subgraph_results
from mdsl.ops.runtime_sizes import value_symbols

DEFAULT_OPSET = 21
# (mdsl op, attr) -> (first opset with the ONNX attribute, its ONNX default): before that
# opset the attribute can only be left out, which needs the value to be the default.
_ATTR_SINCE = {
    ("BatchNormalization", "training_mode"): (14, False),
    ("Reshape", "allowzero"): (14, False),
    ("ArgMax", "select_last_index"): (12, False),
    ("ArgMin", "select_last_index"): (12, False),
    ("Shape", "start"): (15, 0),
    ("Shape", "end"): (15, None),
    ("ScatterElements", "reduction"): (16, "none"),
    ("AveragePool", "dilations"): (19, None),
    ("TopK", "largest"): (11, True),
    ("TopK", "sorted"): (11, True),
    ("QuantizeLinear", "output_dtype"): (21, None),
    ("QuantizeLinear", "saturate"): (19, 1),
    ("Split", "num_outputs"): (18, None),
}
_DROPPED_ATTRS = {("Dropout", "seed")}  # ONNX's seed only matters in training


def export(g: Graph, path=None, *, opset: int = DEFAULT_OPSET, check: bool = True):
    """Write `g` as an ONNX model (to `path` when given) and return the ModelProto.

    >>> import mdsl
    >>> with mdsl.Graph("demo") as g:
    ...     x = g.input("x", ("N", 4))
    ...     g.output(mdsl.ops.reshape(mdsl.ops.relu(x), shape=(-1, 2)), "y")
    >>> model = mdsl.frontends.onnx.export(g)
    >>> [(n.op_type, list(n.input)) for n in model.graph.node]
    [('Relu', ['x']), ('Reshape', ['Relu', 'Reshape/shape'])]
    """

    model = to_model_proto(g, opset=opset)
    if check:
        check_exported(model)
    if path is not None:
        _save(model, os.fspath(path))
    return model


def check_exported(model) -> None:
    """onnx.checker on the model (GraphError if it fails), then ONNX shape inference:
    where ONNX infers another output shape than mdsl declared, a warning (ONNX's shape
    inference lags its own spec in places, e.g. pooling windows starting on padding)."""
    import warnings

    import onnx

    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as e:
        raise GraphError(f"the exported model fails onnx.checker: {e}") from None
    try:
        onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
    except onnx.shape_inference.InferenceError as e:
        if "Inferred shape and existing shape differ" not in str(e):
            raise GraphError(f"the exported model fails ONNX type checking: {e}") from None
        warnings.warn(f"ONNX shape inference disagrees with mdsl: {e}", stacklevel=3)


def _save(model, path: str) -> None:
    import onnx

    big = model.ByteSize() > 1_800_000_000  # protobuf cannot hold 2 GB in one message
    location = os.path.basename(path) + ".data"
    onnx.save_model(model, path, save_as_external_data=big, location=location)


def to_model_proto(g: Graph, *, opset: int = DEFAULT_OPSET):
    """The ONNX ModelProto of `g` (no checking, nothing written)."""
    import onnx

    if not isinstance(g, Graph):
        raise GraphError(f"export() takes an mdsl Graph, got {type(g).__name__}")
    newest = onnx.defs.onnx_opset_version()
    if not isinstance(opset, int) or not 9 <= opset <= newest:
        raise GraphError(f"opset must be an int from 9 to {newest}, got {opset!r}")
    exporter = _Exporter(_without_attention(g), opset)
    graph = exporter.run()
    opsets = [onnx.helper.make_opsetid("", opset)]
    if exporter.uses_mdsl_domain:
        opsets.append(onnx.helper.make_opsetid(MDSL_DOMAIN, 1))
    model = onnx.helper.make_model(graph, opset_imports=opsets, producer_name="mdsl")
    model.ir_version = onnx.helper.find_min_ir_version_for(opsets, ignore_unknown=True)
    return model


def _without_attention(g: Graph) -> Graph:
    """`g` with its Attention nodes as the MatMul/Softmax graph `lower_attention` makes
    (any opset, every ONNX runtime runs it), on a copy; `g` itself when it has none."""
    if not any(n.op_type == "Attention" for sub in all_graphs(g) for n in sub):
        return g
    from mdsl.passes.lower_attention import lower_attention

    return lower_attention(clone_graph(g)).graph


class _Exporter:
    def __init__(self, g: Graph, opset: int):
        self.g = g
        self.opset = opset
        self.nodes: list = []
        self.initializers: list = []
        self.names: dict[Tensor, str] = {}
        self.value_names = Namespace()
        self.uses_mdsl_domain = False
        self._dim_values: dict[str, str] = {}
        self._shapes: dict[str, str] = {}
        # "/<mdsl node name>" is kept for the node itself; helper nodes get unique names
        self._own_names = {f"/{n.name}" for n in _all_nodes(g)}
        self.node_names = Namespace(self._own_names)

    # -- graph ------------------------------------------------------------------------
    def run(self):
        from onnx import helper

        outputs = self._name_tensors()
        inputs = []
        for node in self.g:
            if node.op_type == INPUT:
                inputs.append(self._value_info(node.name, node.outputs[0]))
            elif node.op_type == CONST:
                self._initializer(node.name, node.const_value())
            elif node.op_type != OUTPUT:
                self._export_node(node)
        output_infos = [self._graph_output(name, t) for name, t in outputs.items()]
        return helper.make_graph(
            self.nodes, self.g.name, inputs, output_infos, initializer=self.initializers
        )

    def _name_tensors(self) -> dict[str, Tensor]:
        """Name every tensor; a graph output names the tensor it reads where it can."""
        outputs = self.g.outputs
        taken = set(outputs)
        for node in self.g:
            for t in node.outputs:
                name = t.name
                if name in taken and node.op_type not in (INPUT, CONST):
                    name = self.value_names.unique(f"{name}_value")
                self.names[t] = name
                self.value_names.reserve(name)
        for name in outputs:
            self.value_names.reserve(name)
        claimed = set()
        for name, t in outputs.items():
            if t.producer.op_type not in (INPUT, CONST) and t not in claimed:
                self.names[t] = name
                claimed.add(t)
        return outputs

    def _graph_output(self, name: str, t: Tensor):
        if self.names[t] != name:  # an input, a constant, or a tensor output twice
            self.add("Identity", [self.names[t]], [name], name=f"/Output_{name}")
        return self._value_info(name, t)

    def export_body(self, sub: Graph, params: list[str]) -> tuple[list, list, list[str]]:
        """The nodes, initializers and result names of subgraph `sub` exported with its
        parameters (Input nodes) reading the values named `params`.

        A subgraph may be exported more than once (a While's condition is): each time
        its tensors get fresh names."""
        saved = (self.nodes, self.initializers)
        self.nodes, self.initializers = [], []
        try:
            for t, name in zip(subgraph_params(sub), params):
                self.names[t] = name
            for node in sub:
                if node.op_type in (INPUT, OUTPUT):
                    continue
                for t in node.outputs:
                    self.names[t] = self.value_names.unique(t.name)
                if node.op_type == CONST:
                    self._initializer(self.names[node.outputs[0]], node.const_value())
                else:
                    self._export_node(node)
            results = [self._own_value(self.names[t], t.name) for t in subgraph_results(sub)]
            return self.nodes, self.initializers, results
        finally:
            self.nodes, self.initializers = saved

    def _own_value(self, name: str, hint: str) -> str:
        """`name`, or a copy of it if it is not produced by a node of the current body
        (ONNX subgraph outputs must be computed in the subgraph)."""
        if any(name in n.output for n in self.nodes):
            return name
        copy = self.temp(f"{hint}_result")
        self.add("Identity", [name], [copy], name=f"/{copy}")
        return copy

    def _value_info(self, name: str, t: Tensor):
        from onnx import helper

        dims = [d if isinstance(d, int) else str(d) for d in t.shape]
        return helper.make_tensor_value_info(name, onnx_elem_type(t.dtype), dims)

    # -- emitting ---------------------------------------------------------------------
    def add(
        self, op_type: str, inputs: list[str], outputs: list[str], *, name: str, domain="", **attrs
    ):
        from onnx import helper

        while inputs and not inputs[-1]:
            inputs = inputs[:-1]
        attrs = {k: v for k, v in attrs.items() if v is not None}
        if name in self._own_names:
            self._own_names.discard(name)
        else:
            name = self.node_names.unique(name)
        self.nodes.append(
            helper.make_node(op_type, inputs, outputs, name=name, domain=domain or None, **attrs)
        )

    def _initializer(self, name: str, value: np.ndarray) -> str:
        from onnx import numpy_helper

        self.initializers.append(numpy_helper.from_array(np.asarray(value), name=name))
        return name

    def constant(self, value: np.ndarray, hint: str) -> str:
        """A new initializer holding `value`, named after `hint`."""
        return self._initializer(self.value_names.unique(hint), value)

    def temp(self, hint: str) -> str:
        return self.value_names.unique(hint)

    def input_names(self, node: Node) -> list[str]:
        return ["" if t is None else self.names[t] for t in node.inputs]

    def output_names(self, node: Node) -> list[str]:
        return [self.names[t] for t in node.outputs]

    # -- nodes ------------------------------------------------------------------------
    def _export_node(self, node: Node) -> None:
        try:
            rule = EXPORT_RULES.get(node.op_type)
            if rule is not None:
                rule(self, node)
            elif node.op_type in BY_MDSL_TYPE:
                self._export_mapped(node)
            else:
                self._export_custom(node)
        except MdslError as e:
            raise e.with_context(node=node.name, op_type=node.op_type) from None

    def _export_mapped(self, node: Node, attrs: dict | None = None) -> None:
        mapping = BY_MDSL_TYPE[node.op_type]
        if self.opset < mapping.since:
            raise GraphError(
                f"ONNX has {mapping.onnx_type} with these semantics from opset {mapping.since}; "
                f"export with opset >= {mapping.since}"
            )
        attrs = dict(node.attrs if attrs is None else attrs)
        attrs.pop("dynamic", None)  # mdsl's names of run-time sizes (NonZero): not ONNX's
        placed: dict[int, str] = {}
        onnx_attrs = {}
        for spec in mapping.attr_inputs:
            value = attrs.pop(spec.attr, None)
            if self.opset >= spec.since:
                if value is not None:
                    placed[spec.index] = self._attr_input(node, spec, value)
            elif value is not None:
                onnx_attrs[spec.attr_before] = _onnx_attr(value)
        onnx_attrs.update(self._plain_attrs(node, attrs))
        inputs = _interleave(self.input_names(node), placed)
        self.add(
            mapping.onnx_type, inputs, self.output_names(node), name=f"/{node.name}", **onnx_attrs
        )

    def _plain_attrs(self, node: Node, attrs: dict) -> dict:
        out = {}
        for key, value in attrs.items():
            if value is None or (node.op_type, key) in _DROPPED_ATTRS:
                continue
            since, default = _ATTR_SINCE.get((node.op_type, key), (0, None))
            if self.opset < since:
                if value != default:
                    raise GraphError(f"attribute {key}={value!r} needs opset >= {since} in ONNX")
                continue
            out[key] = _onnx_attr(value)
        return out

    def _attr_input(self, node: Node, spec: AttrInput, value) -> str:
        hint = f"{node.name}/{spec.attr}"
        if spec.encoding == "int64s":
            return self.dims_input(value if isinstance(value, tuple) else (value,), hint)
        if isinstance(value, Dim):
            raise GraphError(f"attribute {spec.attr}={value} is symbolic; ONNX needs a constant")
        if spec.encoding == "int64":
            return self.constant(np.array(value, dtype=np.int64), hint)
        if spec.encoding == "float":
            return self.constant(np.array(value, dtype=np.float32), hint)
        dtype = node.inputs[0].dtype.np  # "like_data"
        return self.constant(np.array(value, dtype=dtype), hint)

    def _export_custom(self, node: Node) -> None:
        """An op ONNX lacks: written in the mdsl domain with its attrs."""
        self.uses_mdsl_domain = True
        attrs = {k: _onnx_attr(v) for k, v in node.attrs.items() if v is not None}
        self.add(
            node.op_type,
            self.input_names(node),
            self.output_names(node),
            name=f"/{node.name}",
            domain=MDSL_DOMAIN,
            **attrs,
        )

    # -- symbolic dims ----------------------------------------------------------------------
    def dims_input(self, dims, hint: str) -> str:
        """A 1-D int64 value holding `dims`: an initializer when all are ints, else a
        Concat of constants and dims read from the graph inputs' shapes."""
        dims = list(dims)
        if all(not isinstance(d, Dim) for d in dims):
            return self.constant(np.array(dims, dtype=np.int64), hint)
        pieces, run = [], []
        for d in dims:
            if isinstance(d, Dim):
                if run:
                    pieces.append(self.constant(np.array(run, dtype=np.int64), f"{hint}_part"))
                    run = []
                pieces.append(self.dim_value(d))
            else:
                run.append(int(d))
        if run:
            pieces.append(self.constant(np.array(run, dtype=np.int64), f"{hint}_part"))
        out = self.temp(hint)
        self.add("Concat", pieces, [out], name=f"/{hint}_Concat", axis=0)
        return out

    def dim_value(self, d: Dim) -> str:
        """A 1-D int64 value [d] computed from the graph inputs' shapes."""
        key = str(d)
        if key in self._dim_values:
            return self._dim_values[key]
        if d.name is not None:
            out = self._symbol_value(d.name)
        else:
            out = self._polynomial_value(d)
        self._dim_values[key] = out
        return out

    def _symbol_value(self, symbol: str) -> str:
        for name, t in self.g.inputs.items():
            for axis, dim in enumerate(t.shape):
                if isinstance(dim, Dim) and dim.name == symbol:
                    shape = self._shape_of(name)
                    index = self.constant(np.array([axis], dtype=np.int64), f"{symbol}_axis")
                    out = self.temp(f"dim_{symbol}")
                    self.add("Gather", [shape, index], [out], name=f"/dim_{symbol}_Gather", axis=0)
                    return out
        for node in self.g:
            if symbol in value_symbols(node):  # a value dim: an element of the node's input
                flat = self.temp(f"{symbol}_values")
                shape = self.constant(np.array([-1], dtype=np.int64), f"{symbol}_flat")
                self.add("Reshape", [self.names[node.inputs[0]], shape], [flat], name=f"/{flat}")
                index = value_symbols(node).index(symbol)
                at = self.constant(np.array([index], dtype=np.int64), f"{symbol}_index")
                out = self.temp(f"dim_{symbol}")
                self.add("Gather", [flat, at], [out], name=f"/dim_{symbol}_Gather", axis=0)
                return out
        raise GraphError(f"symbolic dim {symbol} is not a dim of any graph input; cannot export it")

    def _shape_of(self, input_name: str) -> str:
        if input_name not in self._shapes:
            out = self.temp(f"{input_name}_shape")
            self.add("Shape", [self.names[self.g.inputs[input_name]]], [out], name=f"/{out}")
            self._shapes[input_name] = out
        return self._shapes[input_name]

    def _polynomial_value(self, d: Dim) -> str:
        total = None
        for monomial, coeff in d.terms.items():
            term = self.constant(np.array([coeff], dtype=np.int64), "coeff")
            for atom in monomial:
                term = self._binary("Mul", term, self._atom_value(atom))
            total = term if total is None else self._binary("Add", total, term)
        return total

    def _atom_value(self, atom) -> str:
        if atom.kind == "sym":
            return self.dim_value(Dim(atom.name))
        den = self.constant(np.array([atom.den], dtype=np.int64), "den")
        return self._binary(
            "Div" if atom.kind == "floordiv" else "Mod", self.dim_value(atom.num), den
        )

    def _binary(self, op_type: str, a: str, b: str) -> str:
        out = self.temp(f"dim_{op_type}")
        self.add(op_type, [a, b], [out], name=f"/{out}")
        return out


def _all_nodes(g: Graph):
    for node in g:
        yield node
        for sub in node.subgraphs.values():
            yield from _all_nodes(sub)


def _interleave(tensor_inputs: list[str], placed: dict[int, str]) -> list[str]:
    """ONNX inputs: attr-inputs at their positions, tensor inputs filling the rest."""
    total = len(tensor_inputs) + len(placed)
    if placed:
        total = max(total, max(placed) + 1)
    out, rest = [], iter(tensor_inputs)
    for i in range(total):
        out.append(placed[i] if i in placed else next(rest, ""))
    return out


def _onnx_attr(value):
    """An mdsl attr value as an ONNX attribute value."""
    from onnx import numpy_helper

    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, DType):
        return onnx_elem_type(value)
    if isinstance(value, np.ndarray):
        return numpy_helper.from_array(value)
    if isinstance(value, Dim):
        raise GraphError(f"attribute value {value} is symbolic; ONNX attributes are constants")
    if isinstance(value, tuple):
        return [_onnx_attr(v) for v in value]
    return value


# -- export rules: ops whose ONNX form is not their table entry ---------------------------
EXPORT_RULES: dict = {}


def export_rule(*op_types: str):
    def register(fn):
        for op_type in op_types:
            EXPORT_RULES[op_type] = fn
        return fn

    return register


def _helper_name(node: Node, op: str) -> str:
    return f"/{node.name}_{op}"


@export_rule("Rsqrt")
def _rsqrt(ex: _Exporter, node: Node) -> None:
    root = ex.temp(f"{node.name}_sqrt")
    ex.add("Sqrt", ex.input_names(node), [root], name=_helper_name(node, "Sqrt"))
    ex.add("Reciprocal", [root], ex.output_names(node), name=f"/{node.name}")


@export_rule("Silu")
def _silu(ex: _Exporter, node: Node) -> None:
    (x,) = ex.input_names(node)
    gate = ex.temp(f"{node.name}_sigmoid")
    ex.add("Sigmoid", [x], [gate], name=_helper_name(node, "Sigmoid"))
    ex.add("Mul", [x, gate], ex.output_names(node), name=f"/{node.name}")


@export_rule("Gelu")
def _gelu(ex: _Exporter, node: Node) -> None:
    """Gelu is an ONNX op from opset 20; before, its formula."""
    if ex.opset >= 20:
        ex._export_mapped(node)
        return
    (x,) = ex.input_names(node)
    dtype = node.inputs[0].dtype.np

    def const(v, hint):
        return ex.constant(np.array(v, dtype=dtype), f"{node.name}/{hint}")

    def op(op_type, *args):
        out = ex.temp(f"{node.name}_{op_type}")
        ex.add(op_type, list(args), [out], name=_helper_name(node, op_type))
        return out

    if node.attrs["approximate"] == "tanh":
        cube = op("Mul", x, op("Mul", x, x))
        inner = op(
            "Mul",
            op("Add", x, op("Mul", cube, const(0.044715, "c"))),
            const(np.sqrt(2 / np.pi), "k"),
        )
        curve = op("Tanh", inner)
    else:
        curve = op("Erf", op("Mul", x, const(1 / np.sqrt(2), "k")))
    half = op("Mul", x, const(0.5, "half"))
    ex.add(
        "Mul",
        [half, op("Add", curve, const(1.0, "one"))],
        ex.output_names(node),
        name=f"/{node.name}",
    )


@export_rule("Softmax", "LogSoftmax")
def _softmax(ex: _Exporter, node: Node) -> None:
    """Before opset 13 softmax flattens at `axis`: the same only on the last axis."""
    rank = node.inputs[0].ndim
    axis = node.attrs["axis"] % max(rank, 1)
    if ex.opset < 13 and axis != rank - 1:
        raise GraphError(f"{node.op_type} over axis {axis} of {rank} needs opset >= 13")
    ex.add(
        node.op_type, ex.input_names(node), ex.output_names(node), name=f"/{node.name}", axis=axis
    )


@export_rule("Clip")
def _clip(ex: _Exporter, node: Node) -> None:
    if ex.opset >= 11:
        ex.add("Clip", ex.input_names(node), ex.output_names(node), name=f"/{node.name}")
        return
    bounds = {}
    for key, t in zip(("min", "max"), node.inputs[1:]):
        if t is None:
            continue
        if t.producer.op_type != CONST:
            raise GraphError("Clip bounds computed at run time need opset >= 11")
        bounds[key] = float(t.producer.const_value())
    ex.add("Clip", ex.input_names(node)[:1], ex.output_names(node), name=f"/{node.name}", **bounds)


@export_rule("Range")
def _range(ex: _Exporter, node: Node) -> None:
    dtype = node.attrs["dtype"]
    inputs = [
        _scalar_input(ex, node.attrs[k], dtype, f"{node.name}/{k}")
        for k in ("start", "limit", "delta")
    ]
    ex.add("Range", inputs, ex.output_names(node), name=f"/{node.name}")


@export_rule("DFT")
def _dft(ex: _Exporter, node: Node) -> None:
    """ONNX has DFT from opset 17; its axis became input 2 in opset 20."""
    if ex.opset < 17:
        raise GraphError("DFT needs opset >= 17")
    attrs = dict(node.attrs)
    axis, length = attrs.pop("axis") % node.inputs[0].ndim, attrs.pop("dft_length")
    inputs = [*ex.input_names(node), ""]
    if length:
        inputs[1] = ex.constant(np.array(length, dtype=np.int64), f"{node.name}/dft_length")
    if ex.opset >= 20:
        inputs.append(ex.constant(np.array(axis, dtype=np.int64), f"{node.name}/axis"))
    else:
        attrs["axis"] = axis
    ex.add("DFT", inputs, ex.output_names(node), name=f"/{node.name}", **attrs)


@export_rule("RoiAlign")
def _roi_align(ex: _Exporter, node: Node) -> None:
    """Before opset 16 RoiAlign has no coordinate_transformation_mode: it always computes
    "output_half_pixel"."""
    attrs = dict(node.attrs)
    if ex.opset < 16:
        if attrs.pop("coordinate_transformation_mode") != "output_half_pixel":
            raise GraphError("RoiAlign with half_pixel coordinates needs opset >= 16")
        if ex.opset < 10:
            raise GraphError("RoiAlign needs opset >= 10")
    ex.add("RoiAlign", ex.input_names(node), ex.output_names(node), name=f"/{node.name}", **attrs)


@export_rule("GridSample")
def _grid_sample(ex: _Exporter, node: Node) -> None:
    """Opset 20 renamed GridSample's bilinear and bicubic to linear and cubic (and
    allowed other than 2-D images)."""
    names = {"linear": "bilinear", "cubic": "bicubic"} if ex.opset < 20 else {}
    if ex.opset < 20 and node.inputs[0].ndim != 4:
        raise GraphError("GridSample of other than 2-D images needs opset >= 20")
    mode = node.attrs["mode"]
    if ex.opset >= 20:
        mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    ex._export_mapped(node, {**node.attrs, "mode": names.get(mode, mode)})


def _scalar_input(ex: _Exporter, value, dtype, hint: str) -> str:
    """A scalar input of `dtype` holding `value`, a number or a symbolic dim."""
    if not isinstance(value, Dim):
        return ex.constant(np.array(value, dtype=dtype.np), hint)
    scalar = ex.temp(hint)
    empty = ex.constant(np.array([], dtype=np.int64), f"{hint}_scalar")
    ex.add("Reshape", [ex.dim_value(value), empty], [scalar], name=f"/{scalar}")
    if dtype == DType.int64:
        return scalar
    out = ex.temp(f"{hint}_{dtype.name}")
    ex.add("Cast", [scalar], [out], name=f"/{out}", to=onnx_elem_type(dtype))
    return out


@export_rule("ValueDims")
def _value_dims(ex: _Exporter, node: Node) -> None:
    ex.add("Identity", ex.input_names(node), ex.output_names(node), name=f"/{node.name}")


@export_rule("DynamicSlice")
def _dynamic_slice(ex: _Exporter, node: Node) -> None:
    x, starts, ends = ex.input_names(node)
    count = node.inputs[1].shape[0]
    axes, steps = node.attrs.get("axes"), node.attrs.get("steps")
    axes = ex.constant(
        np.array(axes if axes is not None else range(count), np.int64), f"{node.name}/axes"
    )
    steps = ex.constant(
        np.array(steps if steps is not None else [1] * count, np.int64), f"{node.name}/steps"
    )
    ex.add("Slice", [x, starts, ends, axes, steps], ex.output_names(node), name=f"/{node.name}")


@export_rule("DynamicReshape")
def _dynamic_reshape(ex: _Exporter, node: Node) -> None:
    attrs = {"allowzero": 1} if node.attrs.get("allowzero") else {}
    ex.add("Reshape", ex.input_names(node), ex.output_names(node), name=f"/{node.name}", **attrs)


@export_rule("DynamicCrop")
def _dynamic_crop(ex: _Exporter, node: Node) -> None:
    """ONNX Pad by the negated crops (negative pads crop)."""
    x, crops = ex.input_names(node)
    pads = ex.temp(f"{node.name}_pads")
    ex.add("Neg", [crops], [pads], name=f"/{pads}")
    ex.add("Pad", [x, pads], ex.output_names(node), name=f"/{node.name}")


@export_rule("DynamicSliceAxes")
def _dynamic_slice_axes(ex: _Exporter, node: Node) -> None:
    ex.add("Slice", ex.input_names(node), ex.output_names(node), name=f"/{node.name}")


@export_rule("Split")
def _split(ex: _Exporter, node: Node) -> None:
    attrs = dict(node.attrs)
    count = attrs.get("num_outputs")
    if count is not None and ex.opset < 18:
        dim = node.inputs[0].shape[attrs["axis"]]
        if not isinstance(dim, int):
            raise GraphError("Split into num_outputs of a symbolic dim needs opset >= 18")
        attrs["num_outputs"] = None
        if dim % count:
            size = -(-dim // count)
            attrs["split"] = tuple(min(size, dim - i * size) for i in range(count))
    ex._export_mapped(node, attrs)


@export_rule("Resize")
def _resize(ex: _Exporter, node: Node) -> None:
    if ex.opset < 11:
        raise GraphError("Resize with mdsl's attributes needs opset >= 11")
    attrs = dict(node.attrs)
    x = node.inputs[0]
    scales, sizes, axes = attrs.pop("scales"), attrs.pop("sizes"), attrs.pop("axes")
    if axes is not None and ex.opset < 18:
        scales, sizes = _full_rank_resize(x, scales, sizes, axes)
        axes = None
    inputs = [ex.input_names(node)[0], ""]
    inputs.append(
        ex.constant(np.array(scales, np.float32), f"{node.name}/scales") if scales else ""
    )
    if sizes:
        inputs.append(ex.dims_input(sizes, f"{node.name}/sizes"))
    onnx_attrs = {k: _onnx_attr(v) for k, v in attrs.items()}
    if axes is not None:
        onnx_attrs["axes"] = list(axes)
    ex.add("Resize", inputs, ex.output_names(node), name=f"/{node.name}", **onnx_attrs)


def _full_rank_resize(x, scales, sizes, axes):
    axes = [a % x.ndim for a in axes]
    if scales is not None:
        full = [1.0] * x.ndim
        for a, s in zip(axes, scales):
            full[a] = s
        return tuple(full), None
    full = list(x.shape)
    for a, s in zip(axes, sizes):
        full[a] = s
    return None, tuple(full)


@export_rule("QuantizeLinear")
def _quantize(ex: _Exporter, node: Node) -> None:
    """Before opset 21 the output type comes from zero_point only: write a zero one."""
    out_dtype = node.attrs.get("output_dtype")
    attrs = dict(node.attrs)
    if attrs.get("saturate") == 1:  # the default: written only when it is 0 (opset 19+)
        attrs.pop("saturate")
    if node.inputs[2] is not None or out_dtype is None or ex.opset >= 21:
        ex._export_mapped(node, attrs)
        return
    scale = node.inputs[1]
    zero = np.zeros(tuple(scale.shape), dtype=out_dtype.np)
    names = [*ex.input_names(node)[:2], ex.constant(zero, f"{node.name}/zero_point")]
    attrs = {"axis": node.attrs["axis"], "saturate": attrs.get("saturate")}
    ex.add("QuantizeLinear", names, ex.output_names(node), name=f"/{node.name}", **attrs)


@export_rule("BatchNormalization")
def _batch_norm(ex: _Exporter, node: Node) -> None:
    ex._export_mapped(node, {k: v for k, v in node.attrs.items() if k != "training_mode" or v})


@export_rule("If")
def _if(ex: _Exporter, node: Node) -> None:
    """ONNX If: each branch a graph without inputs reading the captured values by name."""
    from onnx import helper

    cf = control_flow(node)
    captures = [ex.names[t] for t in cf.captures]
    branches = {}
    for key, sub in zip(("then_branch", "else_branch"), cf.branches):
        nodes, inits, results = ex.export_body(sub, captures)
        outputs = [ex._value_info(r, t) for r, t in zip(results, node.outputs)]
        branches[key] = helper.make_graph(
            nodes, f"{node.name}/{key}", [], outputs, initializer=inits
        )
    ex.add("If", [ex.names[cf.selector]], ex.output_names(node), name=f"/{node.name}", **branches)


@export_rule("While")
def _while(ex: _Exporter, node: Node) -> None:
    """ONNX Loop without a trip count: the condition is evaluated once before the loop
    and again at the end of each body. `max_iterations` (an error when exceeded) has no
    ONNX counterpart and is left out."""
    from onnx import TensorProto, helper

    cf = control_flow(node)
    captures = [ex.names[t] for t in cf.captures]
    start = [ex.names[t] for t in cf.loop_inputs]
    nodes, inits, (first_cond,) = ex.export_body(cf.cond, start + captures)
    ex.nodes.extend(nodes)
    ex.initializers.extend(inits)
    loop_vars = [ex.temp(f"{node.name}/var{i}") for i in range(len(start))]
    body_nodes, body_inits, results = ex.export_body(cf.body, loop_vars + captures)
    cond_nodes, cond_inits, (next_cond,) = ex.export_body(cf.cond, results + captures)
    iteration, cond_in = ex.temp(f"{node.name}/iteration"), ex.temp(f"{node.name}/cond_in")
    inputs = [
        helper.make_tensor_value_info(iteration, TensorProto.INT64, []),
        helper.make_tensor_value_info(cond_in, TensorProto.BOOL, None),
        *(ex._value_info(v, t) for v, t in zip(loop_vars, node.outputs)),
    ]
    outputs = [
        helper.make_tensor_value_info(next_cond, TensorProto.BOOL, None),
        *(ex._value_info(r, t) for r, t in zip(results, node.outputs)),
    ]
    body = helper.make_graph(
        body_nodes + cond_nodes,
        f"{node.name}/body",
        inputs,
        outputs,
        initializer=body_inits + cond_inits,
    )
    ex.add("Loop", ["", first_cond, *start], ex.output_names(node), name=f"/{node.name}", body=body)
