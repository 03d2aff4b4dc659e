"""Custom ops: declare a prototype, bind implementations, rebind without touching a graph.

An int8 linear layer from two custom ops:

- `QuantizeSymmetric(x, scale) -> int8`, elementwise: `clip(round(x / scale), -127, 127)`;
- `QLinearMatMul(a, b, scale_a, scale_b, trans_a)`, exactly as API.md "Custom ops".

Each prototype (`@mdsl.op_proto`) declares the allowed dtypes and attrs; the decorated
function is the InferShape and becomes the builder. Implementations live in a separate
table keyed by (op type, backend): the graph never names one. The script runs the graph on
the numpy ("python") bindings, then binds an `mdsl.expr` implementation of the quantize
step (backend="expr", the form code generators can fuse) and runs the same, untouched
graph again: the result is identical.

Which binding the interpreter runs (`mdsl.targets.python.kernels`): with `impl="auto"` (the
default) the most recently registered of an op's "python" and "expr" bindings, so
registering the expr implementation switches to it and registering a numpy one again
switches back; `impl="python"` / `impl="expr"` ask for one kind explicitly (falling back
to the other where an op has only one). An expr binding is a scalar expression applied
elementwise, so only the quantize step gets one: QLinearMatMul is a contraction and keeps
its numpy binding under every `impl`. The C backend runs QLinearMatMul's C binding
(backend="c", `QLINEAR_MATMUL_C`) and the quantize step's expression, so the compiled
layer calls no Python (`exe.plan.fallbacks` is empty once the expr binding is in place).

    python examples/custom_op.py
"""

from __future__ import annotations

import numpy as np

import mdsl


@mdsl.op_proto(
    "QLinearMatMul",
    inputs={
        "a": ["float16", "int8"],
        "b": ["float16", "int8"],
        "scale_a": ["float16", "float32"],
        "scale_b": ["float16", "float32"],
    },
    outputs={"y": ["float32"]},
    attrs={"trans_a": mdsl.Attr(bool, default=False)},
)
def qlinear_matmul(a, b, scale_a, scale_b, *, trans_a):
    """(a * scale_a) @ (b * scale_b) in float32, a (M, K) or, with trans_a, (K, M).

    >>> import mdsl
    >>> with mdsl.Graph() as g:
    ...     a, b = g.input("a", ("M", 8), "int8"), g.input("b", (8, 4), "int8")
    ...     s = g.const("s", np.float32(0.1))
    ...     g.output(qlinear_matmul(a, b, s, s), "y")
    >>> g.outputs["y"].shape, g.outputs["y"].dtype == mdsl.float32
    ((Dim('M'), 4), True)
    """
    mdsl.check(a.rank == 2 and b.rank == 2, f"a and b must be matrices, got {a.shape}, {b.shape}")
    m, k = a.shape[::-1] if trans_a else a.shape
    k2, n = b.shape
    mdsl.check(k == k2, f"K of a ({k}) != K of b ({k2})")  # raises ShapeError with node + line
    return mdsl.TensorType((m, n), "float32")


@mdsl.register_op_impl("QLinearMatMul")  # backend="python": numpy in, numpy out
def qlinear_matmul_ref(a, b, scale_a, scale_b, *, trans_a):
    a = a.T if trans_a else a
    return (a.astype(np.float32) * scale_a) @ (b.astype(np.float32) * scale_b)


# The compiled form: C code the C backend calls instead of the numpy reference (the
# interpreter keeps the reference, so mdsl.compare checks one against the other). Shapes
# are read at run time, so one build serves every M. An int8 product is summed exactly
# in int32 and scaled once; float16 inputs are summed in float.
QLINEAR_MATMUL_C = r"""
static float qmm_value(const mdsl_tensor *t, int64_t at) {
    switch (t->dtype) {
    case MDSL_DTYPE_INT8: return (float)((const int8_t *)t->data)[at];
    case MDSL_DTYPE_FLOAT16: return (float)((const _Float16 *)t->data)[at];
    default: return ((const float *)t->data)[at];
    }
}

int qlinear_matmul_c(const mdsl_tensor *in, int n_in, mdsl_tensor *out, int n_out,
                     const double *attrs, int n_attrs) {
    const mdsl_tensor *a = &in[0], *b = &in[1];
    const int trans_a = attrs[0] != 0.0;
    const int64_t m = a->shape[trans_a ? 1 : 0], k = a->shape[trans_a ? 0 : 1];
    const int64_t n = b->shape[1];
    const float scale_a = qmm_value(&in[2], 0), scale_b = qmm_value(&in[3], 0);
    const int exact = a->dtype == MDSL_DTYPE_INT8 && b->dtype == MDSL_DTYPE_INT8;
    float *y = (float *)out[0].data;
    for (int64_t i = 0; i < m; i++) {
        for (int64_t j = 0; j < n; j++) {
            int32_t whole = 0;
            float sum = 0.0f;
            for (int64_t p = 0; p < k; p++) {
                const int64_t at = trans_a ? p * m + i : i * k + p;
                if (exact)
                    whole += (int32_t)((const int8_t *)a->data)[at] *
                             (int32_t)((const int8_t *)b->data)[p * n + j];
                else
                    sum += qmm_value(a, at) * qmm_value(b, p * n + j);
            }
            y[i * n + j] = exact ? (float)whole * scale_a * scale_b : sum * scale_a * scale_b;
        }
    }
    return 0;
}
"""
mdsl.register_op_impl(
    "QLinearMatMul", backend="c", source=QLINEAR_MATMUL_C, symbol="qlinear_matmul_c"
)


@mdsl.op_proto(
    "QuantizeSymmetric",
    inputs={"x": ["float16", "float32"], "scale": ["float16", "float32"]},
    outputs={"y": ["int8"]},
)
def quantize_symmetric(x, scale):
    """Symmetric int8 quantization with one scale: clip(round(x / scale), -127, 127);
    halves round to even.

    >>> import mdsl
    >>> with mdsl.Graph() as g:
    ...     q = quantize_symmetric(g.input("x", ("N", 3)), g.const("s", np.float32(0.5)))
    ...     g.output(q, "q")
    >>> out = mdsl.interpret(g, {"x": np.array([[0.25, -1.0, 100.0]], np.float32)})
    >>> out["q"]
    array([[   0,   -2,  127]], dtype=int8)
    """
    mdsl.check(scale.rank == 0, f"scale must be a scalar, got shape {scale.shape}")
    return mdsl.TensorType(x.shape, "int8", x.format)


@mdsl.register_op_impl("QuantizeSymmetric")
def quantize_symmetric_ref(x, scale):
    return np.clip(np.rint(x / scale), -127, 127).astype(np.int8)


def quantize_symmetric_expr(x, scale):
    """The same quantization as a scalar expression over `mdsl.expr` variables.

    >>> import mdsl
    >>> print(quantize_symmetric_expr(mdsl.expr.var("x"), mdsl.expr.var("scale")))
    cast(min(max(round(x / scale), -127.0), 127.0), "int8")
    """
    e = mdsl.expr
    return e.cast(e.min(e.max(e.round(x / scale), -127.0), 127.0), "int8")


def bind_expr_quantize() -> None:
    """Rebind QuantizeSymmetric to its expression; every graph using it runs that now."""
    mdsl.register_op_impl("QuantizeSymmetric", quantize_symmetric_expr, backend="expr")


@mdsl.layer(name="Int8Linear")
def int8_linear(x, weight_q, scale_x: float, scale_w: float):
    """x (M, K) float -> int8 -> QLinearMatMul with int8 weights (K, N) -> float32 (M, N).

    >>> import mdsl
    >>> with mdsl.Graph() as g:
    ...     x = g.input("x", ("M", 4))
    ...     g.output(int8_linear(x, int8_weights(4, 2), scale_x=0.1, scale_w=0.01), "y")
    >>> g.layers["Int8Linear"].node_names
    ['Int8Linear/scale_x', 'Int8Linear/scale_w', 'Int8Linear/weight', 'Int8Linear/Quantize', 'Int8Linear/QLinearMatMul']
    """
    sx = mdsl.param("scale_x", (), init=np.array(scale_x, np.float32))
    sw = mdsl.param("scale_w", (), init=np.array(scale_w, np.float32))
    w = mdsl.param("weight", weight_q.shape, "int8", init=weight_q)
    xq = quantize_symmetric(x, sx, name="Quantize")
    return qlinear_matmul(xq, w, sx, sw, trans_a=False, name="QLinearMatMul")


def int8_weights(k: int, n: int, seed: int = 0) -> np.ndarray:
    """Deterministic int8 weights in [-127, 127].

    >>> w = int8_weights(3, 2)
    >>> w.dtype, w.shape, bool((w == int8_weights(3, 2)).all())
    (dtype('int8'), (3, 2), True)
    """
    return np.random.default_rng(seed).integers(-127, 128, (k, n)).astype(np.int8)


def build(m="M", k: int = 32, n: int = 16) -> mdsl.Graph:
    """The int8 linear layer as a graph: input `x` (m, k) float32, output `y` (m, n).

    >>> g = build()
    >>> [n.name for n in g.nodes if n.op_type not in ("Const", "Input", "Output")]
    ['Int8Linear/Quantize', 'Int8Linear/QLinearMatMul']
    """
    with mdsl.Graph("int8_linear") as g:
        x = g.input("x", (m, k), "float32")
        g.output(int8_linear(x, int8_weights(k, n), scale_x=0.05, scale_w=0.01), "y")
    return g


def _show_shape_error() -> None:
    try:
        with mdsl.Graph("bad") as g:
            a, b = g.input("a", (4, 8), "int8"), g.input("b", (6, 2), "int8")
            s = g.const("s", np.float32(1.0))
            g.output(qlinear_matmul(a, b, s, s), "y")
    except mdsl.ShapeError as e:
        print(f"ShapeError: {e}")


def main() -> None:
    g = build()
    print(g.summary())
    before = g.to_json()
    x = np.random.default_rng(1).standard_normal((5, 32), dtype=np.float32)
    numpy_result = mdsl.interpret(g, {"x": x})["y"]

    bind_expr_quantize()
    expr_result = mdsl.interpret(g, {"x": x})["y"]  # "auto": the newest binding, the expr
    assert g.to_json() == before, "rebinding must not touch the graph"
    assert np.array_equal(expr_result, numpy_result)
    assert np.array_equal(mdsl.interpret(g, {"x": x}, impl="expr")["y"], numpy_result)
    print(f"y {expr_result.dtype}{list(expr_result.shape)}: identical with the numpy and the")
    print(f"expr binding of QuantizeSymmetric ({quantize_symmetric_expr(*_vars('x', 'scale'))})")
    _show_shape_error()


def _vars(*names):
    return [mdsl.expr.var(n) for n in names]


if __name__ == "__main__":
    main()
