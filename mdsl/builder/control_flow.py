"""Control flow in the builder: `mdsl.cond`, `mdsl.switch` and `mdsl.while_loop`.

Each call traces its Python functions, once, into subgraphs of one If, Case or While node
(the layout is documented in `mdsl.ops.control_flow`). While a function is traced, its
subgraph is the graph being built and the current scope is the node's scope plus the
subgraph's name, so nodes, layers and parameters built inside are named like any others:
`Detector/cond/then/Resize`, `while/body/Add`.

A function may read tensors of the enclosing graphs (closures); after tracing, each such
tensor becomes an explicit input of the node and an Input node of every subgraph, named
`<subgraph path>/captured/<tensor name>`. The finished subgraphs are self-contained.

Branch results and loop-carried values must agree in dtype and shape. A dim that may
differ (an image resized to different sizes, a sequence growing in a loop) is declared
with `shapes=`: a new symbol there (`("S", 4)`, or `mdsl.Dim("S", max=64)` with a range)
is bound from the arrays at run time.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from mdsl.ir import context
from mdsl.ir.dim import Dim
from mdsl.ir.errors import GraphError, MdslError, ShapeError
from mdsl.ir.graph import OUTPUT, Graph, Layer, Node, Tensor
from mdsl.ir.rewrite import all_graphs, mark_changed
from mdsl.ir.source import user_source
from mdsl.ir.tensor_type import TensorType
from mdsl.ir.tracebacks import api_boundary
from mdsl.ir.verify import MAX_SUBGRAPH_DEPTH
from mdsl.ops import control_flow as cf
from mdsl.ops.apply import building_graph, scalar_const
from mdsl.ops.dynamic import dynamic_symbols
from mdsl.ops.registry import get_op
from mdsl.ops.scopes import scope

_SCALARS = (bool, int, float, np.number, np.bool_)


# -- public builders ---------------------------------------------------------------------------
@api_boundary
def cond(
    pred,
    then_fn: Callable,
    else_fn: Callable,
    *,
    shapes=None,
    name: str | None = None,
):
    """An If node: `then_fn()` when `pred` is true, else `else_fn()`; only one runs.

    `pred` is a bool tensor holding one element (or a Python bool). Both functions take
    no arguments and return a tensor or a tuple of tensors of the same dtypes and
    shapes; they may use any tensor of the enclosing graph. `shapes` (one shape, or one
    per result, None where the branches agree) declares dims that differ between the
    branches, each a new symbol bound at run time. Nodes built inside are named
    `<scope>/cond/then/...` and `<scope>/cond/else/...` (`name=` replaces "cond").

    >>> import numpy as np, mdsl
    >>> with mdsl.Graph() as g:
    ...     x = g.input("x", ("N",))
    ...     y = mdsl.cond(x.sum() > 0.0, lambda: x * 2.0, lambda: -x)
    ...     g.output(y, "y")
    >>> [n.name for n in g.nodes if n.subgraphs]
    ['cond/If']
    >>> mdsl.interpret(g, {"x": np.array([1.0, -3.0], np.float32)})["y"]
    array([-1.,  3.], dtype=float32)
    """
    fns = [
        ("branch 'then'", cf.THEN_BRANCH, "then", then_fn),
        ("branch 'else'", cf.ELSE_BRANCH, "else", else_fn),
    ]
    return _branching(cf.IF, pred, fns, shapes, name or "cond", "mdsl.cond")


@api_boundary
def switch(index, branches: Sequence[Callable], *, shapes=None, name: str | None = None):
    """A Case node: runs `branches[index]()` only; an index outside the list is an
    ExecutionError at run time.

    `index` is an int32/int64 tensor holding one element (or a Python int). The branch
    functions follow `mdsl.cond`'s rules; nodes inside are named
    `<scope>/switch/branch_<i>/...`.

    >>> import numpy as np, mdsl
    >>> with mdsl.Graph() as g:
    ...     x = g.input("x", (2,))
    ...     k = g.input("k", (), "int64")
    ...     g.output(mdsl.switch(k, [lambda: x + 1.0, lambda: x * 10.0, lambda: -x]), "y")
    >>> mdsl.interpret(g, {"x": np.ones(2, np.float32), "k": np.int64(1)})["y"]
    array([10., 10.], dtype=float32)
    """
    if isinstance(branches, (str, bytes)) or not isinstance(branches, Sequence) or not branches:
        raise GraphError(
            f"mdsl.switch needs a non-empty list of branch functions, got {branches!r:.60}",
            source=user_source(),
        )
    fns = [
        (f"branch {i}", cf.case_branch_key(i), cf.case_branch_key(i), fn)
        for i, fn in enumerate(branches)
    ]
    return _branching(cf.CASE, index, fns, shapes, name or "switch", "mdsl.switch")


@api_boundary
def while_loop(
    cond_fn: Callable,
    body_fn: Callable,
    loop_vars,
    *,
    max_iterations: int | None = None,
    shapes=None,
    bounds: Mapping[str, object] | None = None,
    name: str | None = None,
):
    """A While node: `v = loop_vars; while cond_fn(*v): v = body_fn(*v)`; returns the
    final values (a tuple, or one tensor when `loop_vars` is one tensor).

    `cond_fn` returns a bool tensor holding one element; `body_fn` returns as many
    values as there are loop vars, each of its loop var's dtype and shape. `shapes`
    (like `mdsl.cond`'s) declares dims that change between iterations, each a new symbol.
    `bounds` maps such a symbol to its upper bound, an int or a dim expression of
    symbols known before the loop runs (a feed's, a value dim): compiled backends size
    its buffers by it where the Dim declares no max. With `max_iterations`, a loop still
    running after that many iterations is an ExecutionError. Nodes inside are named `<scope>/while/cond/...` and
    `<scope>/while/body/...`.

    >>> import numpy as np, mdsl
    >>> with mdsl.Graph() as g:
    ...     n = g.input("n", (), "int64")
    ...     i, acc = mdsl.while_loop(
    ...         lambda i, acc: i < n, lambda i, acc: (i + 1, acc * 2.0),
    ...         (g.const("i0", np.int64(0)), g.const("one", 1.0)))
    ...     g.output(acc, "acc")
    >>> mdsl.interpret(g, {"n": np.int64(5)})["acc"]
    array(32., dtype=float32)
    """
    g = building_graph("mdsl.while_loop")
    source = user_source()
    single = not isinstance(loop_vars, (tuple, list))
    values = [loop_vars] if single else list(loop_vars)
    inits = [_as_tensor(g, v, f"loop var {k}", source) for k, v in enumerate(values)]
    with _node_scope(g, name or "while", "mdsl.while_loop") as path:
        where = {"node": f"{path}/{cf.WHILE}", "op_type": cf.WHILE, "source": source}
        if not inits:
            raise GraphError("mdsl.while_loop needs at least one loop var", **where)
        try:
            _check_max_iterations(max_iterations)
            declared = _declared_shapes(shapes, len(inits), single)
            carried, dynamic = _loop_carried_types(g, inits, declared)
            _check_bounds(bounds or {}, dynamic)
            names = _param_names(body_fn, len(inits))
            params = list(zip(names, carried))
            _check_arity("cond_fn", cond_fn, len(inits))
            _check_arity("body_fn", body_fn, len(inits))
        except MdslError as e:
            raise e.with_context(**where) from None
        try:
            traced = [
                _trace(g, f"{path}/cond", "cond_fn", cf.COND, cond_fn, params),
                _trace(g, f"{path}/body", "body_fn", cf.BODY, body_fn, params),
            ]
            cf.check_loop_condition(traced[0].results)
            _check_body_results(traced[1].results, carried, names, dynamic)
        except MdslError as e:
            raise e.with_context(**where) from None
        captures = _capture_outer_reads(traced)
        attrs = {
            "num_loop_vars": len(inits),
            "max_iterations": max_iterations,
            "dynamic": tuple(sorted(dynamic)),
            "bounds": cf.bounds_attr(tuple(sorted(dynamic)), bounds or {}),
        }
        node = _control_flow_node(g, cf.WHILE, inits + captures, attrs, carried, traced, source)
    return node.outputs[0] if single else tuple(node.outputs)


def result_types(
    fn: Callable, param_types: list[TensorType], path: str, *, bound_inside: set | None = None
) -> list[TensorType]:
    """The types `fn` returns on parameters of `param_types`, traced into a throwaway
    subgraph `path` of the graph being built (nothing reaches that graph): what a loop
    body gives before the loop is built (ONNX Loop's scan outputs). `bound_inside`, when
    given, receives the symbols nodes of the traced body bind when they run (sizes it
    computes, which may change every time it runs).

    >>> import mdsl
    >>> with mdsl.Graph() as g:
    ...     x = g.input("x", (3,))
    ...     found = result_types(lambda i: (x * 2.0, i), [TensorType((), "int64")], "probe")
    ...     g.output(x, "y")
    >>> [t.shape for t in found], [n.op_type for n in g]
    ([(3,), ()], ['Input', 'Output'])
    """
    g = building_graph("result_types")
    names = [f"arg{k}" for k in range(len(param_types))]
    traced = _trace(g, path, "fn", cf.BODY, fn, list(zip(names, param_types)))
    if bound_inside is not None:
        inside = all_graphs(traced.graph)
        bound_inside |= {s for sub in inside for n in sub for s in dynamic_symbols(n)}
    return [t.type for t in traced.results]


@contextlib.contextmanager
def _node_scope(g: Graph, name: str, function: str):
    """The scope of a control-flow node; if building the node fails, it is forgotten."""
    with scope(name) as path:
        g.layers[path].function = function
        try:
            yield path
        except BaseException:
            g.layers.pop(path, None)
            g.layer_names.release(path)
            raise


# -- If and Case ---------------------------------------------------------------------------------
def _branching(op_type: str, selector, fns: list, shapes, name: str, function: str):
    g = building_graph(function)
    source = user_source()
    what = "pred" if op_type == cf.IF else "index"
    selector = _as_tensor(g, selector, what, source)
    with _node_scope(g, name, function) as path:
        where = {"node": f"{path}/{op_type}", "op_type": op_type, "source": source}
        try:
            cf.check_selector(op_type, selector.type, what)
            for label, _, _, fn in fns:
                _check_arity(label, fn, 0)
            traced = [
                _trace(g, f"{path}/{leaf}", label, key, fn, []) for label, key, leaf, fn in fns
            ]
            types, dynamic = _branch_types(g, traced, shapes)
        except MdslError as e:
            raise e.with_context(**where) from None
        captures = _capture_outer_reads(traced)
        attrs = {"dynamic": tuple(sorted(dynamic))}
        node = _control_flow_node(g, op_type, [selector, *captures], attrs, types, traced, source)
    return node.outputs[0] if traced[0].single else tuple(node.outputs)


def _branch_types(g: Graph, traced: list, shapes) -> tuple[list[TensorType], set[str]]:
    results = [(tr.label, [t.type for t in tr.results]) for tr in traced]
    cf.check_result_counts(results)
    declared = _declared_shapes(shapes, len(results[0][1]), traced[0].single)
    dynamic = _dynamic_symbols(g, declared)
    return cf.branch_result_types(results, declared, dynamic), dynamic


# -- While -------------------------------------------------------------------------------------
def _check_max_iterations(value) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise GraphError(f"max_iterations must be None or an int >= 0, got {value!r}")


def _check_bounds(bounds: Mapping[str, object], dynamic: set[str]) -> None:
    for symbol, bound in bounds.items():
        if symbol not in dynamic:
            raise GraphError(f"bounds names {symbol!r}, which is no new symbol of shapes=")
        if not isinstance(bound, Dim) and (
            isinstance(bound, bool) or not isinstance(bound, int) or bound < 0
        ):
            raise GraphError(f"the bound of {symbol} must be an int >= 0 or a Dim, got {bound!r}")
        if isinstance(bound, Dim) and bound.free_symbols & dynamic:
            raise GraphError(f"the bound of {symbol} ({bound}) uses a symbol the loop binds")


def _loop_carried_types(g: Graph, inits: list[Tensor], declared: list) -> tuple[list, set]:
    """The loop-carried types (declared shapes, else the initial values') and the new
    symbols among them; each initial value must fit its loop var's type."""
    dynamic = _dynamic_symbols(g, declared)
    carried = []
    for k, (init, shape) in enumerate(zip(inits, declared)):
        ttype = init.type if shape is None else TensorType(shape, init.dtype, init.format)
        why = cf.shape_misfit(init.shape, ttype.shape, dynamic)
        if why is not None:
            raise ShapeError(
                f"loop var {k}: the initial value {init.type.describe()} does not fit the "
                f"declared shape [{','.join(map(str, ttype.shape))}]: {why}"
            )
        carried.append(ttype)
    return carried, dynamic


def _check_body_results(results: list, carried: list, names: list, dynamic: set) -> None:
    if len(results) != len(carried):
        raise GraphError(f"body_fn returns {len(results)} values for {len(carried)} loop vars")
    for k, (t, want) in enumerate(zip(results, carried)):
        error = cf.type_misfit(t.type, want, dynamic)
        if error is None:
            continue
        hint = ""
        if isinstance(error, ShapeError):
            hint = "; declare the dims that change with shapes= (a new symbol there)"
        raise type(error)(
            f"loop var {k} ({names[k]}): body_fn returns {t.type.describe()}, the loop "
            f"carries {want.describe()}: {error.message}{hint}"
        )


def _param_names(fn: Callable, count: int) -> list[str]:
    """Names for the loop vars: `fn`'s parameter names where it has them, else var<k>."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    names = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    names = names[:count] + [f"var{k}" for k in range(len(names), count)]
    return [n if n.isidentifier() else f"var{k}" for k, n in enumerate(names)]


# -- declared shapes and new symbols -------------------------------------------------------------
def _declared_shapes(shapes, count: int, single: bool) -> list[tuple | None]:
    """`shapes=` as one normalized shape (or None) per result."""
    if shapes is None:
        return [None] * count
    if not isinstance(shapes, (tuple, list)):
        raise GraphError(f"shapes= must be a shape or a list of shapes, got {shapes!r:.60}")
    per_result = all(s is None or isinstance(s, (tuple, list)) for s in shapes) and not (
        single and len(shapes) == 0
    )
    entries = list(shapes) if per_result else [shapes]
    if len(entries) != count:
        raise GraphError(f"shapes= gives {len(entries)} shapes for {count} values")
    return [None if s is None else TensorType(s).shape for s in entries]


def _dynamic_symbols(g: Graph, declared: list) -> set[str]:
    """The declared dims that are new symbols: bare symbols no enclosing graph uses. A
    declared expression may only use symbols the enclosing graphs know."""
    known = _symbols_in_scope(g)
    dynamic = set()
    for shape in declared:
        for d in shape or ():
            if not isinstance(d, Dim):
                continue
            if d.name is not None and d.name not in known:
                dynamic.add(d.name)
            elif d.name is None and not d.free_symbols <= known:
                raise ShapeError(
                    f"declared dim {d} uses a new symbol; a dim that may differ must be a "
                    "new symbol by itself (bound at run time from the array)"
                )
    return dynamic


def _symbols_in_scope(g: Graph) -> set[str]:
    names: set[str] = set()
    graph: Graph | None = g
    while graph is not None:
        for node in graph:
            for t in node.outputs:
                for d in t.shape:
                    if isinstance(d, Dim):
                        names |= d.free_symbols
        graph = graph.parent
    return names


# -- tracing -------------------------------------------------------------------------------------
class _Traced:
    """One traced function: its subgraph, the results it returned and how."""

    __slots__ = ("graph", "key", "label", "results", "single")

    def __init__(self, label: str, key: str, graph: Graph, results: list, single: bool):
        self.label, self.key, self.graph = label, key, graph
        self.results, self.single = results, single


@contextlib.contextmanager
def _building(sub: Graph, path: str):
    """Make `sub` the graph being built, with `path` as the current scope."""
    graph_token = context.graph_stack.set((*context.graph_stack.get(), sub))
    scope_token = context.scope_path.set(tuple(path.split("/")))
    try:
        yield
    finally:
        context.scope_path.reset(scope_token)
        context.graph_stack.reset(graph_token)


def _trace(outer: Graph, path: str, label: str, key: str, fn: Callable, params: list) -> _Traced:
    """Run `fn` on Input tensors of a new subgraph `path`; its results become Outputs."""
    _check_depth(outer, path)
    sub = Graph(path)
    sub.parent = outer
    function = f"{getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', '')}"
    sub.layers[path] = Layer(path, function)
    sub.layer_names.reserve(path)
    with _building(sub, path):
        args = cf.add_params(sub, params, captured=False, source=user_source())
        returned = fn(*args)
        results, single = _as_results(sub, returned, label)
        for i, t in enumerate(results):
            sub._new_node(
                OUTPUT, [t], {"name": str(i)}, name=f"Output_{i}", types=[], exact_name=True
            )
    return _Traced(label, key, sub, results, single)


def _check_depth(outer: Graph, path: str) -> None:
    depth, g = 1, outer
    while g.parent is not None:
        depth, g = depth + 1, g.parent
    if depth > MAX_SUBGRAPH_DEPTH:
        raise GraphError(
            f"control flow nests {depth} deep at {path}; the limit is {MAX_SUBGRAPH_DEPTH}"
        )


def _as_results(sub: Graph, returned, label: str) -> tuple[list[Tensor], bool]:
    single = not isinstance(returned, (tuple, list))
    values = [returned] if single else list(returned)
    if not values:
        raise GraphError(f"{label} returned nothing; it must return a tensor or a tuple")
    return [_as_tensor(sub, v, f"{label} result {i}", None) for i, v in enumerate(values)], single


def _as_tensor(g: Graph, value, what: str, source: str | None) -> Tensor:
    """`value` as a tensor `g` may read: scalars and arrays become constants."""
    if isinstance(value, _SCALARS) or (isinstance(value, np.ndarray) and value.ndim == 0):
        return scalar_const(g, value.item() if isinstance(value, np.ndarray) else value, None)
    if isinstance(value, np.ndarray):
        return g.const("Const", value)
    if not isinstance(value, Tensor):
        raise GraphError(
            f"{what} must be a Tensor, got {type(value).__name__}", source=source or user_source()
        )
    g.check_owns(value, what)
    return value


def _check_arity(what: str, fn, count: int) -> None:
    if not callable(fn):
        raise GraphError(f"{what} must be a function, got {type(fn).__name__}")
    try:
        inspect.signature(fn).bind(*range(count))
    except TypeError:
        raise GraphError(f"{what} must take {count} argument(s)") from None
    except ValueError:  # no signature to inspect (a builtin): the call will tell
        pass


# -- captures ------------------------------------------------------------------------------------
def _capture_outer_reads(traced: list[_Traced]) -> list[Tensor]:
    """Make the traced subgraphs self-contained: every tensor of an enclosing graph that
    one of them reads becomes a trailing Input of each; returns those tensors, in order."""
    captured: dict[Tensor, None] = {}
    for tr in traced:
        for node in tr.graph:
            for t in node.inputs:
                if t is not None and t.producer.graph is not tr.graph:
                    captured.setdefault(t)
    for tr in traced:
        _add_params(tr.graph, list(captured))
    return list(captured)


def _add_params(sub: Graph, tensors: list[Tensor]) -> None:
    params = cf.add_params(sub, [(t.name, t.type) for t in tensors], source=user_source())
    mapping = dict(zip(tensors, params))
    for node in sub:
        node.inputs = [None if t is None else mapping.get(t, t) for t in node.inputs]
    mark_changed(sub)


def _control_flow_node(
    g: Graph, op_type: str, inputs: list, attrs: dict, types: list, traced: list, source
) -> Node:
    attrs = get_op(op_type).check_attrs(attrs)
    node = g._new_node(op_type, inputs, attrs, name=op_type, types=types, source=source)
    node.subgraphs = {tr.key: tr.graph for tr in traced}
    return node
