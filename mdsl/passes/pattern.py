"""Local rewrites as data: node patterns, a pattern table, and user pattern passes.

Like tinygrad's `PatternMatcher`, a rewrite is a `(pattern, fn)` pair: `Pat` describes a
small tree of nodes over tensor variables, `fn(match)` returns the tensor that replaces
the matched root's output (an existing tensor, or new nodes built with `match.emit` or
the ordinary op builders), or None to decline. A `PatternMatcher` is a table of such
pairs; `Rewriter.sweep` applies one table to a whole graph.

Users write patterns the way they build graphs: `rewrite_pass` traces a small function
of ops over placeholder tensors into a `Pat`, and registers a pass that replaces every
match by what a replacement function builds:

>>> import numpy as np, mdsl
>>> from mdsl import ops
>>> def pattern(x):
...     return ops.relu(x * 2.0)
>>> def replacement(x):
...     return ops.relu(x) * 2.0
>>> _ = mdsl.passes.rewrite_pass("demo_scale_after_relu", pattern, replacement)
>>> with mdsl.Graph("demo") as g:
...     x = g.input("x", (3,))
...     g.output(ops.relu(x * 2.0), "y")
>>> g2 = mdsl.passes.run(g, ["demo_scale_after_relu"])
>>> [n.op_type for n in g2.nodes]
['Input', 'Relu', 'Const', 'Mul', 'Output']
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Sequence

import numpy as np

from mdsl.ir import context
from mdsl.ir.errors import GraphError, MdslError
from mdsl.ir.graph import CONST, INPUT, OUTPUT, Graph, Node, Tensor
from mdsl.ir.rewrite import (
    all_graphs,
    appended_since,
    attrs_equal,
    is_topological,
    mark_changed,
    prune_dead,
    toposort,
)
from mdsl.ir.rewrite import use_map as build_use_map
from mdsl.ir.tensor_type import TensorType
from mdsl.passes.edit import make_node
from mdsl.passes.manager import PassResult, register

# Ops whose two inputs may be swapped without changing the result.
# A scalar pattern constant matches constants up to this size whose elements all equal it.
MAX_SPLAT_ELEMENTS = 1 << 16
COMMUTATIVE = frozenset({"Add", "Mul", "Max", "Min", "Sum", "Mean", "And", "Or", "Xor", "Equal"})


# -- patterns -----------------------------------------------------------------------------
class Pat:
    """A pattern over one tensor: a variable, a constant, or a node with input patterns.

    `Pat("Add", Pat.var("x"), Pat.const(0))` matches `x + 0` (either input order: Add is
    commutative). `op` may be a tuple of op types. `attrs` must equal the node's attrs it
    names; `where(tensor) -> bool` adds any other condition. `name` binds the matched
    tensor in the Match; a name bound twice must match the same tensor.
    """

    __slots__ = ("attrs", "inputs", "name", "op", "value", "where")

    def __init__(self, op=None, *inputs, name=None, attrs=None, where=None, value=None):
        self.op = (op,) if isinstance(op, str) else (tuple(op) if op is not None else None)
        self.inputs = tuple(inputs) if inputs else None
        self.name = name
        self.attrs = dict(attrs or {})
        self.where = where
        self.value = value

    @staticmethod
    def var(name: str, where: Callable[[Tensor], bool] | None = None) -> Pat:
        """Any tensor (bound as `name`)."""
        return Pat(None, name=name, where=where)

    @staticmethod
    def cvar(name: str, where: Callable[[Tensor], bool] | None = None) -> Pat:
        """Any constant tensor (the output of a Const node), bound as `name`."""
        return Pat(CONST, name=name, where=where)

    @staticmethod
    def const(value, name: str | None = None) -> Pat:
        """A constant all of whose elements equal `value` (any shape, any dtype), or, for
        an array `value`, a constant equal to it element by element (same shape)."""
        return Pat(CONST, name=name, value=np.asarray(value))

    def __repr__(self):
        if self.op is None:
            return f"Pat.var({self.name!r})"
        args = ", ".join(map(repr, self.inputs or ()))
        return f"Pat({'|'.join(self.op)}{', ' if args else ''}{args})"


class Match:
    """A successful match: bound tensors by name (`m.x`, `m["x"]`), the root node, and
    the Rewriter to build replacement nodes with (`m.emit`, `m.const`)."""

    def __init__(self, root: Node, bindings: dict[str, Tensor], rewriter: Rewriter | None):
        self.root = root
        self.bindings = bindings
        self.rewriter = rewriter

    def __getitem__(self, name: str) -> Tensor:
        return self.bindings[name]

    def __getattr__(self, name: str) -> Tensor:
        try:
            return self.__dict__["bindings"][name]
        except KeyError:
            raise AttributeError(name) from None

    @property
    def output(self) -> Tensor:
        return self.root.outputs[0]

    def emit(self, op_type: str, inputs: list, attrs: dict | None = None, **kw) -> Tensor:
        """Build a node (types inferred) next to the root; returns its first output."""
        return self.rewriter.emit(op_type, inputs, attrs, like=self.root, **kw).outputs[0]

    def const(self, value, *, name: str = "Const") -> Tensor:
        return self.rewriter.const(value, like=self.root, name=name)

    def uses(self, tensor: Tensor) -> int:
        """How many inputs (in this graph and its subgraphs) read `tensor`."""
        return self.rewriter.n_uses(tensor)


def match_pattern(pat: Pat, tensor: Tensor, bindings: dict) -> bool:
    """Match `pat` against `tensor`, extending `bindings` (restored on failure)."""
    saved = dict(bindings)
    if _match(pat, tensor, bindings):
        return True
    bindings.clear()
    bindings.update(saved)
    return False


def _match(pat: Pat, t: Tensor, bindings: dict) -> bool:
    if t is None:
        return False
    if pat.name is not None and pat.name in bindings:
        return bindings[pat.name] is t
    node = t.producer
    if pat.op is not None and (node.op_type not in pat.op or t.index != 0):
        return False
    if pat.value is not None and not _const_equals(node, pat.value):
        return False
    if pat.attrs and not all(
        k in node.attrs and attrs_equal(node.attrs[k], v) for k, v in pat.attrs.items()
    ):
        return False
    if pat.inputs is not None and not _match_inputs(pat, node, bindings):
        return False
    if pat.where is not None and not pat.where(t):
        return False
    if pat.name is not None:
        bindings[pat.name] = t
    return True


def _match_inputs(pat: Pat, node: Node, bindings: dict) -> bool:
    if len(node.inputs) != len(pat.inputs):
        return False
    orders = [node.inputs]
    if len(node.inputs) == 2 and node.op_type in COMMUTATIVE:
        orders.append(node.inputs[::-1])
    for order in orders:
        trial = dict(bindings)
        if all(t is None if p is None else _match(p, t, trial) for p, t in zip(pat.inputs, order)):
            bindings.clear()
            bindings.update(trial)
            return True
    return False


def _const_equals(node: Node, value: np.ndarray) -> bool:
    if node.op_type != CONST:
        return False
    t = node.outputs[0].type
    if value.ndim == 0:
        if not t.is_static or t.numel > MAX_SPLAT_ELEMENTS:
            return False
    elif t.shape != value.shape:
        return False
    have = node.const_value()
    if have.dtype == np.bool_ or value.dtype == np.bool_:
        return bool(np.all(have == value))
    with np.errstate(all="ignore"):
        return bool(np.all(have.astype(np.float64) == value.astype(np.float64)))


# -- rule tables ----------------------------------------------------------------------------
Rule = tuple[Pat, Callable[[Match], "Tensor | None"]]


class PatternMatcher:
    """A table of `(Pat, fn)` rules, indexed by the root's op type.

    `rewrite(node, rewriter)` tries the rules whose pattern roots at `node`'s op type, in
    table order; the first `fn` returning a tensor of the root output's type wins.
    """

    def __init__(self, rules: Sequence[Rule]):
        self.rules = list(rules)
        self._by_op: dict[str, list[Rule]] = {}
        self._any: list[Rule] = []
        for pat, fn in self.rules:
            if pat.op is None:
                self._any.append((pat, fn))
            else:
                for op in pat.op:
                    self._by_op.setdefault(op, []).append((pat, fn))

    def __add__(self, other: PatternMatcher) -> PatternMatcher:
        return PatternMatcher(self.rules + other.rules)

    def rewrite(self, node: Node, rewriter: Rewriter) -> bool:
        if len(node.outputs) != 1:
            return False
        for pat, fn in self._by_op.get(node.op_type, []) + self._any:
            bindings: dict[str, Tensor] = {}
            if not match_pattern(pat, node.outputs[0], bindings):
                continue
            found = Match(node, bindings, rewriter)
            if rewriter.try_replace(node, lambda found=found, fn=fn: fn(found)):
                return True
        return False

    def sweep(self, g: Graph) -> int:
        """Apply the table once over `g` and its subgraphs; returns the rewrites made."""
        return sum(Rewriter(sub).sweep(self.rewrite) for sub in list(all_graphs(g)))


# -- the rewrite engine ---------------------------------------------------------------------
class Rewriter:
    """One sweep of local rewrites over one graph.

    Nodes are visited in order; new nodes (from `emit` or from op builders run inside
    `building_at`) are placed just before the node being visited, so topological order
    holds without re-sorting, and nodes visited later already read the rewritten tensors.
    Nodes left unused by a rewrite are removed at the end of the sweep.
    """

    def __init__(self, g: Graph):
        self.g = g
        self.uses = build_use_map(g)
        self.touched: list[Node] = []
        self.count = 0

    def n_uses(self, t: Tensor) -> int:
        return len(self.uses.get(t, ()))

    def emit(self, op_type, inputs, attrs=None, *, like: Node, name=None) -> Node:
        node = make_node(self.g, op_type, list(inputs), attrs or {}, like=like, name=name)
        self.g.append(node)
        return node

    def const(self, value, *, like: Node, name: str = "Const") -> Tensor:
        array = np.array(value)
        array.setflags(write=False)
        return self.emit(CONST, [], {"value": array}, like=like, name=name).outputs[0]

    def replace(self, old: Tensor, new: Tensor) -> None:
        """Make every reader of `old` read `new` (types must agree)."""
        if old is new:
            return
        for node, i in self.uses.pop(old, []):
            node.inputs[i] = new
            self.uses.setdefault(new, []).append((node, i))
        self.touched.append(old.producer)

    def try_replace(self, node: Node, build: Callable[[], Tensor | None]) -> bool:
        """Replace `node`'s single output by what `build()` returns, if it returns a
        tensor of the same shape and dtype; nodes built by a declined rule are dropped."""
        with building_at(self.g, node):
            new = build()
        if isinstance(new, (tuple, list)):
            new = new[0] if len(new) == 1 else None
        old = node.outputs[0]
        if not isinstance(new, Tensor) or new is old:
            return False
        if new.shape != old.shape or new.dtype != old.dtype:
            return False
        self.replace(old, new)
        self.count += 1
        return True

    def sweep(self, visit: Callable[[Node, Rewriter], bool]) -> int:
        """Call `visit(node, self)` on every node; returns the number of rewrites."""
        order: list[Node] = []
        built_any = False
        for node in self.g.nodes:
            start = len(self.g)
            if node.op_type not in (INPUT, OUTPUT, CONST) and node.graph is self.g:
                visit(node, self)
            if len(self.g) > start:
                built = appended_since(self.g, start)
                for new in built:
                    self._record_reads(new)
                order += built
                self.touched += built  # pruned if a declined rule built them
                built_any = True
            order.append(node)
        if self.count or built_any:
            self.g.replace_nodes(order)
            for sub in all_graphs(self.g):
                mark_changed(sub)
            prune_dead(self.g, self.touched)
            if not is_topological(self.g):  # a user rule returned a tensor made later
                toposort(self.g)
        return self.count

    def _record_reads(self, node: Node) -> None:
        for i, t in enumerate(node.inputs):
            if t is not None:
                self.uses.setdefault(t, []).append((node, i))


@contextlib.contextmanager
def building_at(g: Graph, like: Node):
    """Op builders called inside record nodes in `g`, in `like`'s layer and device (the
    nodes are appended; the Rewriter moves them into place)."""
    graph_token = context.graph_stack.set((*context.graph_stack.get(), g))
    scope_token = context.scope_path.set(tuple(like.layer.split("/")) if like.layer else ())
    device_token = context.device_stack.set((like.device,) if like.device else ())
    start = len(g)
    try:
        yield
    finally:
        context.device_stack.reset(device_token)
        context.scope_path.reset(scope_token)
        context.graph_stack.reset(graph_token)
        for node in appended_since(g, start):
            node.source = like.source  # replacement nodes stand for the user's code


# -- user pattern passes --------------------------------------------------------------------
DEFAULT_PLACEHOLDER = TensorType(("P0", "P1"), "float32")


class PatternRewrite:
    """A traced pattern with its condition and replacement (see `rewrite_pass`).

    `apply(g)` rewrites every match in `g` (and its subgraphs) in place and returns the
    number of rewrites.
    """

    def __init__(
        self,
        pattern: Callable,
        replacement: Callable,
        meet_requirements: Callable[[Match], bool] | None = None,
        *,
        types: dict | None = None,
        single_use: bool = True,
    ):
        self.params = list(inspect.signature(pattern).parameters)
        self.pat, self.interior = trace_pattern(pattern, self.params, types or {})
        self.replacement = replacement
        self.meet_requirements = meet_requirements
        self.single_use = single_use
        self.matcher = PatternMatcher([(self.pat, self._replace)])

    def _replace(self, m: Match):
        if self.single_use and not self._interior_private(m):
            return None
        if self.meet_requirements is not None and not self.meet_requirements(m):
            return None
        args = [m.bindings[p] for p in self.params]
        return self.replacement(*args)

    def _interior_private(self, m: Match) -> bool:
        """Interior matched nodes feed nothing outside the match (else rewriting would
        compute them twice)."""
        for name in self.interior:
            t = m.bindings.get(name)
            if t is not None and m.uses(t) > self.interior[name]:
                return False
        return True

    def apply(self, g: Graph) -> int:
        return self.matcher.sweep(g)


def trace_pattern(fn: Callable, params: list[str], types: dict) -> tuple[Pat, dict[str, int]]:
    """Build `fn` over placeholder inputs and turn the recorded graph into a Pat.

    Returns the pattern and, for each interior node's binding name, how many times the
    pattern itself reads it (uses beyond that count come from outside the match).
    """
    with Graph("pattern") as pg:
        placeholders = []
        for p in params:
            t = types.get(p, DEFAULT_PLACEHOLDER)
            t = t if isinstance(t, TensorType) else TensorType(*t)
            placeholders.append(pg.input(p, t.shape, t.dtype, t.format))
        try:
            out = fn(*placeholders)
        except MdslError as e:
            raise GraphError(
                f"tracing pattern {getattr(fn, '__name__', fn)!r} failed: {e}; pass "
                f"types={{name: mdsl.TensorType(...)}} for its placeholders"
            ) from None
        if isinstance(out, (tuple, list)) and len(out) == 1:
            out = out[0]
        if not isinstance(out, Tensor) or out.producer.op_type in (INPUT, CONST):
            raise GraphError("a pattern function must return the output of an op node")
        pg.output(out, "root")
    reads = build_use_map(pg)
    pats: dict[Tensor, Pat] = {}
    interior: dict[str, int] = {}
    for node in pg:
        if node.op_type in (OUTPUT,):
            continue
        if node.subgraphs:
            raise GraphError("patterns cannot contain control flow")
        for t in node.outputs:
            pats[t] = _pat_for(node, t, pats)
            if node.op_type not in (INPUT, CONST) and t is not out:
                interior[pats[t].name] = len(reads.get(t, ()))
    return pats[out], interior


def _pat_for(node: Node, t: Tensor, pats: dict) -> Pat:
    if node.op_type == INPUT:
        return Pat.var(node.name)
    if node.op_type == CONST:
        return Pat.const(node.const_value(), name=f"_const{id(t)}")
    inputs = [None if i is None else pats[i] for i in node.inputs]
    return Pat(node.op_type, *inputs, name=f"_n{len(pats)}", attrs=node.attrs)


def rewrite_pass(
    name: str,
    pattern: Callable,
    replacement: Callable,
    meet_requirements: Callable[[Match], bool] | None = None,
    *,
    types: dict | None = None,
    levels: Sequence[int] = (),
    single_use: bool = True,
) -> PatternRewrite:
    """Register pass `name` replacing every match of `pattern` by `replacement`.

    `pattern(*placeholders)` is traced with op builders over placeholder tensors (float32
    of shape (P0, P1) unless `types={"x": mdsl.TensorType(...)}` says otherwise); scalar
    constants in it match constants of any dtype holding that value. For each match,
    `meet_requirements(match)` (optional; `match.x` is the tensor bound to placeholder x,
    `match.root` the matched node) may decline, then `replacement(*tensors)` builds the
    new nodes with ordinary op builders and returns the tensor replacing the match's
    output (same shape and dtype; otherwise the match is left alone). With `single_use`,
    matches whose inner nodes are also read elsewhere are skipped. `levels` adds the pass
    to `mdsl.optimize` at those levels.

    >>> import mdsl
    >>> from mdsl import ops
    >>> rw = mdsl.passes.rewrite_pass(
    ...     "demo_double_neg", lambda x: ops.neg(ops.neg(x)), lambda x: ops.identity(x))
    >>> with mdsl.Graph("demo") as g:
    ...     g.output(ops.neg(ops.neg(g.input("x", (2,)))), "y")
    >>> [n.op_type for n in mdsl.passes.run(g, ["demo_double_neg"]).nodes]
    ['Input', 'Identity', 'Output']
    """
    rewrite = PatternRewrite(
        pattern, replacement, meet_requirements, types=types, single_use=single_use
    )

    def run_rewrite(g: Graph) -> PassResult:
        count = rewrite.apply(g)
        return PassResult(g, count > 0, f"rewrote {count} match(es)")

    run_rewrite.__name__ = name
    run_rewrite.__doc__ = f"Pattern rewrite {name} (traced from {pattern.__name__})."
    register(name, levels=levels)(run_rewrite)
    rewrite.pass_fn = run_rewrite
    return rewrite
