"""Random well-typed graphs over the op library, as a hypothesis strategy.

`random_graphs(config)` draws a `RandomGraph`: an `mdsl.Graph` plus feeds for it. Graphs are
built step by step from a pool of tensors; each step picks an op family and operands that
fit (so every drawn graph builds), with shapes that may hold a symbolic dim `N`:

- pointwise unary and binary ops, with broadcasting against constants and other tensors;
- reductions, reshape chains, transposes (pairs too), squeeze/unsqueeze, flatten;
- matmul against constant weights, matmul + bias (2-D: a Gemm candidate);
- constants, subgraphs of constants only (fold candidates), neutral ops (x+0, x*1,
  Identity, Cast round trips, Dropout, neutral Slice/Pad) and look-alikes that must stay
  (0-x, 1/x, a zero that widens x), repeated computations (CSE candidates),
  Shape-derived values, dead branches (results no output reads);
- "cube" inputs (all dims equal), where a wrong axis permutation keeps the shape and
  only the values show it;
- optionally Conv + BatchNormalization blocks (NCHW).

Reuse it for anything that must preserve results (passes, backends):

    @given(random_graphs(GraphConfig(symbolic=False)))
    def test_backend(rg): compare(run(rg.graph, rg.feeds), mdsl.interpret(rg.graph, rg.feeds))
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

import mdsl
from mdsl import ops
from mdsl.ir.dim import Dim

FAMILIES = (
    "unary",
    "binary",
    "binary_const",
    "neutral",
    "reduce",
    "reshape",
    "transpose",
    "squeeze",
    "matmul",
    "const_subgraph",
    "repeat",
    "shape",
    "cast",
    "conv_bn",
)

settings.register_profile(
    "mdsl-random-graphs",
    derandomize=True,
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
PROFILE = settings.get_profile("mdsl-random-graphs")


@dataclass(frozen=True)
class GraphConfig:
    """What the generator may draw. `families` selects op families (see FAMILIES);
    `symbolic` lets input shapes hold the symbolic dim N (bound to 1..`max_symbol`)."""

    max_steps: int = 12
    max_inputs: int = 3
    max_rank: int = 4
    dims: tuple[int, ...] = (1, 2, 3, 4)
    symbolic: bool = True
    max_symbol: int = 3
    dtypes: tuple[str, ...] = ("float32",)
    families: tuple[str, ...] = FAMILIES
    max_outputs: int = 3


@dataclass
class RandomGraph:
    """A drawn graph, feeds for its inputs, the symbol values they bind, and the op
    families its steps used (shown when a property fails)."""

    graph: mdsl.Graph
    feeds: dict[str, np.ndarray]
    symbols: dict[str, int] = field(default_factory=dict)
    steps: list[str] = field(default_factory=list)

    def __repr__(self):
        return f"RandomGraph({len(self.graph)} nodes, steps={self.steps}, symbols={self.symbols})"


class _Builder:
    """The state of one drawn graph: the tensor pool and the draw function."""

    def __init__(self, draw, config: GraphConfig, g: mdsl.Graph, dtype: str):
        self.draw, self.config, self.g, self.dtype = draw, config, g, dtype
        self.pool: list = []
        self.history: list[tuple] = []  # (builder, args) of earlier steps, for "repeat"
        self.rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
        self.n_const = 0

    def pick(self, candidates=None):
        pool = self.pool if candidates is None else candidates
        return pool[self.draw(st.integers(0, len(pool) - 1))] if pool else None

    def choice(self, options):
        return self.draw(st.sampled_from(list(options)))

    def const(self, shape, *, value=None, dtype=None) -> mdsl.Tensor:
        dtype = dtype or self.dtype
        if value is None:
            array = self.rng.uniform(-1.5, 1.5, size=shape)
        else:
            array = np.full(shape, value)
        self.n_const += 1
        return self.g.const(f"c{self.n_const}", np.asarray(array, dtype=mdsl.DType.of(dtype).np))

    def float_pool(self):
        return [t for t in self.pool if t.dtype.is_float]


# -- shapes ---------------------------------------------------------------------------------
def _static(shape) -> bool:
    return all(isinstance(d, int) for d in shape)


def _safe_broadcast(a, b) -> bool:
    """Broadcasting that needs no run-time check: aligned dims equal, or one is 1."""
    for x, y in zip(reversed(a), reversed(b)):
        if not (x == y or (isinstance(x, int) and x == 1) or (isinstance(y, int) and y == 1)):
            return False
    return True


def _broadcast_operand_shape(b: _Builder, shape) -> tuple:
    """A static shape broadcasting against `shape`: a suffix with some dims set to 1."""
    keep = b.draw(st.integers(0, len(shape)))
    suffix = shape[len(shape) - keep :]
    return tuple(1 if isinstance(d, Dim) or b.draw(st.booleans()) else d for d in suffix)


# -- op families ----------------------------------------------------------------------------
UNARY = ("neg", "abs", "relu", "tanh", "sigmoid", "exp", "sqrt_abs", "identity")


def _unary(b: _Builder):
    x = b.pick(b.float_pool())
    if x is None:
        return None
    kind = b.choice(UNARY)
    if kind == "sqrt_abs":
        return ops.sqrt(ops.abs(x))
    if kind == "exp":
        return ops.exp(ops.tanh(x))  # bounded, so long chains stay finite
    return getattr(ops, kind)(x)


BINARY = ("add", "sub", "mul", "div")


def _binary(b: _Builder):
    x = b.pick(b.float_pool())
    if x is None:
        return None
    partners = [
        t for t in b.float_pool() if t.dtype == x.dtype and _safe_broadcast(x.shape, t.shape)
    ]
    y = b.pick(partners)
    kind = b.choice(BINARY)
    if kind == "div":  # a divisor kept away from zero
        return x / (ops.abs(y) + 0.5) if b.draw(st.booleans()) else y / (ops.abs(x) + 0.5)
    return getattr(ops, kind)(x, y) if b.draw(st.booleans()) else getattr(ops, kind)(y, x)


def _binary_const(b: _Builder):
    x = b.pick(b.float_pool())
    if x is None:
        return None
    c = b.const(_broadcast_operand_shape(b, x.shape), dtype=x.dtype.value)
    kind = b.choice(BINARY)
    if kind == "div":
        return x / (ops.abs(c) + 0.5)
    return getattr(ops, kind)(x, c)


def _scalar(b: _Builder, x, value):
    return b.const((), value=value, dtype=x.dtype.value)


# Neutral ops the simplifier should remove, and look-alikes it must keep (marked "keep").
_NEUTRAL_FLOAT = {
    "add0": lambda b, x: (
        x + b.const(_broadcast_operand_shape(b, x.shape), value=0, dtype=x.dtype.value)
    ),
    "zero_left": lambda b, x: _scalar(b, x, 0) + x,
    "mul1": lambda b, x: x * _scalar(b, x, 1),
    "one_left": lambda b, x: _scalar(b, x, 1) * x,
    "sub0": lambda b, x: x - _scalar(b, x, 0),
    "div1": lambda b, x: x / _scalar(b, x, 1),
    "dropout": lambda b, x: ops.dropout(x, ratio=0.1),
    "neg_neg": lambda b, x: ops.neg(ops.neg(x)),
    "keep: zero_minus": lambda b, x: _scalar(b, x, 0) - x,
    "keep: one_div": lambda b, x: _scalar(b, x, 1) / (ops.abs(x) + 0.5),
    "keep: widening_zero": lambda b, x: (
        x + b.const((2, *[1] * x.ndim), value=0, dtype=x.dtype.value)
    ),
    "keep: almost_one": lambda b, x: x * b.const((2,), value=1, dtype=x.dtype.value)[1:] * 2.0,
}
_NEUTRAL_ANY = {
    "identity": lambda b, x: ops.identity(x),
    "slice": lambda b, x: ops.slice(
        x, starts=[0], ends=[2**62], axes=[b.draw(st.integers(0, x.ndim - 1))]
    ),
    "pad": lambda b, x: ops.pad(x, [0] * (2 * x.ndim)),
    "keep: pad1": lambda b, x: ops.pad(x, [1] + [0] * (2 * x.ndim - 1)),
}


def _neutral(b: _Builder):
    x = b.pick([t for t in b.pool if t.ndim >= 1])
    if x is None:
        return None
    table = {**_NEUTRAL_ANY, **(_NEUTRAL_FLOAT if x.dtype.is_float else {})}
    return table[b.choice(sorted(table))](b, x)


def _reduce(b: _Builder):
    x = b.pick([t for t in b.float_pool() if t.ndim >= 1])
    if x is None:
        return None
    axes = sorted(b.draw(st.sets(st.integers(0, x.ndim - 1), min_size=1, max_size=x.ndim)))
    kind = b.choice(("sum", "mean", "max", "min"))
    return getattr(x, kind)(axis=tuple(axes), keepdims=b.draw(st.booleans()))


def _reshape(b: _Builder):
    x = b.pick([t for t in b.pool if t.ndim >= 1])
    if x is None:
        return None
    kind = b.choice(("flatten_all", "keep_first", "split_last", "chain"))
    if kind == "keep_first" and x.ndim >= 2:
        return x.reshape(0, -1)
    if kind == "split_last" and isinstance(x.shape[-1], int) and x.shape[-1] % 2 == 0:
        return x.reshape(*[0] * (x.ndim - 1), 2, -1)
    if kind == "chain":
        y = (
            x.reshape(-1)
            if _static(x.shape)
            else ops.flatten(x, axis=x.ndim - 1 if x.ndim > 1 else 0)
        )
        return y.reshape(*y.shape) if _static(y.shape) else y.reshape(0, -1)
    return ops.flatten(x, axis=b.draw(st.integers(0, x.ndim)))


def _transpose(b: _Builder):
    x = b.pick([t for t in b.pool if t.ndim >= 2])
    if x is None:
        return None
    perm = b.draw(st.permutations(range(x.ndim)))
    y = x.transpose(perm)
    if b.draw(st.booleans()):
        y = y.transpose(b.draw(st.permutations(range(x.ndim))))
    return y


def _squeeze(b: _Builder):
    x = b.pick([t for t in b.pool if t.ndim < b.config.max_rank])
    if x is None:
        return None
    axis = b.draw(st.integers(0, x.ndim))
    y = ops.unsqueeze(x, axes=[axis])
    return ops.squeeze(y, axes=[axis]) if b.draw(st.booleans()) else y


def _matmul(b: _Builder):
    x = b.pick([t for t in b.float_pool() if t.ndim >= 1 and isinstance(t.shape[-1], int)])
    if x is None:
        return None
    n = b.choice(b.config.dims)
    w = b.const((x.shape[-1], n), dtype=x.dtype.value)
    y = x @ w
    if b.draw(st.booleans()):  # matmul + bias (a Gemm candidate when 2-D)
        y = y + b.const((n,), dtype=x.dtype.value)
    return y


def _const_subgraph(b: _Builder):
    shape = tuple(b.draw(st.lists(st.sampled_from(b.config.dims), max_size=2)))
    c = b.const(shape)
    c = ops.exp(ops.tanh(c)) * 2.0 - b.const(shape)
    if b.draw(st.booleans()):
        c = c.transpose() if c.ndim >= 2 else ops.neg(c)
    x = b.pick([t for t in b.float_pool() if _safe_broadcast(t.shape, c.shape)])
    return c if x is None else x + c


def _repeat(b: _Builder):
    if not b.history:
        return None
    fn, args = b.history[b.draw(st.integers(0, len(b.history) - 1))]
    return fn(*args)


def _shape(b: _Builder):
    x = b.pick([t for t in b.pool if t.ndim >= 1])
    if x is None:
        return None
    s = ops.shape(x)
    picked = ops.gather(s, b.g.const("idx", np.array(b.draw(st.integers(0, x.ndim - 1)))))
    scale = ops.cast(picked, to="float32")
    target = b.pick(b.float_pool())
    return scale if target is None else target * ops.cast(scale, to=target.dtype)


def _cast(b: _Builder):
    x = b.pick(b.float_pool())
    if x is None:
        return None
    kind = b.choice(("same", "round_trip", "to_int"))
    if kind == "same":
        return x.astype(x.dtype)
    if kind == "round_trip":
        return x.astype("float64").astype(x.dtype)
    return (x * 4.0).astype("int32").astype(x.dtype)


def _conv_bn(b: _Builder):
    candidates = [
        t for t in b.float_pool() if t.ndim == 4 and _static(t.shape[1:]) and t.shape[2] >= 2
    ]
    x = b.pick(candidates)
    if x is None:
        return None
    cout = b.choice((1, 2, 3))
    k = b.choice((1, 3))
    w = b.const((cout, x.shape[1], k, k), dtype=x.dtype.value)
    bias = b.const((cout,), dtype=x.dtype.value) if b.draw(st.booleans()) else None
    y = ops.conv2d(x, w, bias, pads=k // 2)
    var = b.g.const("var", b.rng.uniform(0.5, 2.0, size=(cout,)).astype(x.dtype.np))
    return ops.batch_norm(
        y,
        b.const((cout,), dtype=x.dtype.value),
        b.const((cout,), dtype=x.dtype.value),
        b.const((cout,), dtype=x.dtype.value),
        var,
        epsilon=1e-3,
    )


_FAMILY_BUILDERS = {
    "unary": _unary,
    "binary": _binary,
    "binary_const": _binary_const,
    "neutral": _neutral,
    "reduce": _reduce,
    "reshape": _reshape,
    "transpose": _transpose,
    "squeeze": _squeeze,
    "matmul": _matmul,
    "const_subgraph": _const_subgraph,
    "repeat": _repeat,
    "shape": _shape,
    "cast": _cast,
    "conv_bn": _conv_bn,
}


# -- the strategy ---------------------------------------------------------------------------
def _input_shape(b: _Builder) -> tuple:
    rank = b.draw(st.integers(1, b.config.max_rank))
    if b.draw(st.booleans()):  # a cube: wrong axis permutations keep the shape, not values
        dims = [b.choice(b.config.dims)] * rank
    else:
        dims = list(b.draw(st.lists(st.sampled_from(b.config.dims), min_size=rank, max_size=rank)))
    if b.config.symbolic and b.draw(st.booleans()):
        dims[0] = "N"
    return tuple(dims)


@st.composite
def random_graphs(draw, config: GraphConfig = GraphConfig()) -> RandomGraph:
    """A random graph that builds and runs, with feeds (see the module docstring)."""
    dtype = draw(st.sampled_from(config.dtypes))
    g = mdsl.Graph("random")
    steps: list[str] = []
    with g:
        b = _Builder(draw, config, g, dtype)
        n_inputs = draw(st.integers(1, config.max_inputs))
        for i in range(n_inputs):
            b.pool.append(g.input(f"in{i}", _input_shape(b), dtype))
        if "conv_bn" in config.families and draw(st.booleans()):
            b.pool.append(g.input("img", ("N" if config.symbolic else 2, 2, 4, 4), dtype))
        for _ in range(draw(st.integers(1, config.max_steps))):
            family = draw(st.sampled_from(config.families))
            builder = _FAMILY_BUILDERS[family]
            out = _recorded(b, builder)
            if out is not None:
                b.pool.append(out)
                steps.append(family)
        _mark_outputs(b, g)
    feeds, symbols = _feeds(b, g)
    return RandomGraph(g, feeds, symbols, steps)


def _recorded(b: _Builder, builder):
    """Run a family builder; remember simple one-op steps so "repeat" can redo them."""
    before = len(b.g)
    out = builder(b)
    if out is None:
        return None
    node = out.producer
    if len(b.g) == before + 1 and node.inputs and all(t is not None for t in node.inputs):
        opdef_builder = _op_builder(node)
        if opdef_builder is not None:
            b.history.append((opdef_builder, list(node.inputs)))
    return out


def _op_builder(node):
    attrs = dict(node.attrs)

    def rebuild(*inputs):
        return mdsl.builder.apply_op(mdsl.ops.registry.get_op(node.op_type), list(inputs), attrs)

    return rebuild if node.op_type not in ("Input", "Const", "Output") else None


def _mark_outputs(b: _Builder, g: mdsl.Graph) -> None:
    """The last tensor and a few random others become outputs; the rest is dead code."""
    candidates = [t for t in b.pool if t.producer.op_type not in ("Input",)] or b.pool
    chosen = [candidates[-1]]
    extra = b.draw(st.integers(0, b.config.max_outputs - 1))
    for _ in range(extra):
        t = b.pick(candidates)
        if all(t is not c for c in chosen):
            chosen.append(t)
    for i, t in enumerate(chosen):
        g.output(t, f"out{i}")


def _feeds(b: _Builder, g: mdsl.Graph) -> tuple[dict, dict]:
    symbols = {"N": b.draw(st.integers(1, b.config.max_symbol))}
    feeds = {}
    for name, t in g.inputs.items():
        shape = [d if isinstance(d, int) else d.evaluate(symbols) for d in t.shape]
        feeds[name] = b.rng.uniform(-2, 2, size=shape).astype(t.dtype.np)
    return feeds, symbols


# Tolerances of 16-bit floats: rewrites that fold parameters (Conv+BN) round once more.
LOW_PRECISION_TOLERANCE = {"float16": 1e-2, "bfloat16": 5e-2}


def assert_same_outputs(got: dict, want: dict, *, rtol=1e-5, atol=1e-6, what="") -> None:
    """Equal output names, shapes, dtypes; values equal within tolerance (NaN == NaN);
    16-bit float outputs get LOW_PRECISION_TOLERANCE."""
    assert got.keys() == want.keys(), f"{what}: outputs {sorted(got)} != {sorted(want)}"
    for name in want:
        a, w = np.asarray(got[name]), np.asarray(want[name])
        low = LOW_PRECISION_TOLERANCE.get(w.dtype.name)
        rtol, atol = (max(rtol, low), max(atol, low)) if low else (rtol, atol)
        assert a.shape == w.shape, f"{what}: {name} shape {a.shape} != {w.shape}"
        assert a.dtype == w.dtype, f"{what}: {name} dtype {a.dtype} != {w.dtype}"
        np.testing.assert_allclose(
            a.astype(np.float64),
            w.astype(np.float64),
            rtol=rtol,
            atol=atol,
            err_msg=f"{what}: output {name}",
        )


__all__ = [
    "FAMILIES",
    "PROFILE",
    "GraphConfig",
    "RandomGraph",
    "assert_same_outputs",
    "random_graphs",
]
