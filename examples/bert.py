"""A BERT encoder built from nested layers: tiny and BERT-base from the same functions.

Post-LayerNorm blocks like the original BERT (`LN(x + Attention(x))`, then
`LN(x + FFN(x))`), exact-erf GELU, inference mode (no dropout). Every node is named by
its layer path, e.g. `EncoderBlock_3/SelfAttention/MatMul_QK`, so profiles and diffs read
like the model. Parameters are deterministic: each is drawn from a seed derived from its
path, and only when first needed, so building BERT-base costs no random numbers.

    python examples/bert.py          # tiny model: summary and a run; BERT-base: summary

The `mdsl` command line builds the graph through `build()` (the tiny variant).
"""

from __future__ import annotations

import math
import time

import numpy as np

import mdsl
from mdsl import ops

MASK_FILL = -10000.0  # added to attention scores of padded positions, as in BERT


def dense(x, out_features: int, prefix: str, name: str):
    """`x @ W + b` with W `(in_features, out_features)` (`ops.linear`'s layout), parameters
    `<layer path>/<prefix>_weight` and `<prefix>_bias`; the MatMul and Add sit in scope
    `name`.

    >>> import mdsl
    >>> with mdsl.Graph() as g:
    ...     g.output(dense(g.input("x", ("B", 4)), 3, "proj", name="Proj"), "y")
    >>> g.outputs["y"].shape, g.node("proj_weight").const_value().shape
    ((Dim('B'), 3), (4, 3))
    >>> [n.name for n in g.nodes if n.op_type in ("MatMul", "Add")]
    ['Proj/MatMul', 'Proj/Add']
    """
    weight = mdsl.param(f"{prefix}_weight", (x.shape[-1], out_features))
    bias = mdsl.param(f"{prefix}_bias", (out_features,), init="zeros")
    return ops.linear(x, weight, bias, name=name)


def layer_norm(x, name: str = "LayerNorm"):
    """LayerNorm over the last axis (eps 1e-12 as in BERT), parameters `gamma` and `beta`.

    >>> import mdsl
    >>> with mdsl.Graph() as g:
    ...     g.output(layer_norm(g.input("x", ("B", 8))), "y")
    >>> g.node("gamma").const_value().sum()
    np.float32(8.0)
    """
    hidden = x.shape[-1]
    gamma = mdsl.param("gamma", (hidden,), init="ones")
    beta = mdsl.param("beta", (hidden,), init="zeros")
    return ops.layer_norm(x, gamma, beta, axis=-1, epsilon=1e-12, name=name)


def _split_heads(x, heads: int, label: str):
    """(B, S, H) -> (B, heads, S, H / heads)."""
    x = ops.reshape(x, shape=(0, 0, heads, x.shape[-1] // heads), name=f"{label}_SplitHeads")
    return ops.transpose(x, perm=(0, 2, 1, 3), name=f"{label}_Transpose")


@mdsl.layer(name="SelfAttention")
def self_attention(x, heads: int, mask_bias=None):
    """Multi-head self-attention over `x` (B, S, H); `mask_bias` (B, 1, 1, S) is added to
    the scores (0 to keep a position, MASK_FILL to drop it).

    >>> import mdsl
    >>> with mdsl.Graph() as g:
    ...     g.output(self_attention(g.input("x", ("B", "S", 16)), heads=2), "y")
    >>> g.node("SelfAttention/MatMul_QK").outputs[0].shape
    (Dim('B'), 2, Dim('S'), Dim('S'))
    """
    hidden = x.shape[-1]
    q = _split_heads(dense(x, hidden, "query", name="Q"), heads, "Q")
    k = _split_heads(dense(x, hidden, "key", name="K"), heads, "K")
    v = _split_heads(dense(x, hidden, "value", name="V"), heads, "V")
    k_t = ops.transpose(k, perm=(0, 1, 3, 2), name="K_T")
    scores = ops.matmul(q, k_t, name="MatMul_QK")
    scores = ops.mul(scores, 1.0 / math.sqrt(hidden // heads), name="Scale")
    if mask_bias is not None:
        scores = ops.add(scores, mask_bias, name="AddMask")
    probs = ops.softmax(scores, axis=-1, name="Softmax")
    context = ops.matmul(probs, v, name="MatMul_AV")
    context = ops.transpose(context, perm=(0, 2, 1, 3), name="MergeHeads_Transpose")
    context = ops.reshape(context, shape=(0, 0, hidden), name="MergeHeads")
    return dense(context, hidden, "output", name="Output")


@mdsl.layer(name="FFN")
def ffn(x, intermediate: int):
    """Position-wise feed-forward: dense to `intermediate`, exact-erf GELU, dense back.

    >>> import mdsl
    >>> with mdsl.Graph() as g:
    ...     g.output(ffn(g.input("x", ("B", "S", 8)), 32), "y")
    >>> g.node("FFN/GELU").attrs["approximate"]
    'none'
    """
    h = dense(x, intermediate, "intermediate", name="Intermediate")
    h = ops.gelu(h, approximate="none", name="GELU")
    return dense(h, x.shape[-1], "output", name="Output")


@mdsl.layer(name="AddNorm")
def add_norm(x, residual):
    """`LayerNorm(x + residual)`: the post-LN residual connection of BERT.

    >>> import mdsl
    >>> with mdsl.Graph() as g:
    ...     x = g.input("x", ("B", 8))
    ...     g.output(add_norm(x * 2.0, x), "y")
    >>> g.layers["AddNorm"].node_names
    ['AddNorm/Residual', 'AddNorm/gamma', 'AddNorm/beta', 'AddNorm/LayerNorm']
    """
    return layer_norm(ops.add(x, residual, name="Residual"))


@mdsl.layer(name="EncoderBlock")
def encoder_block(x, heads: int, intermediate: int, mask_bias=None):
    """One post-LN encoder block: attention and FFN, each with its AddNorm.

    >>> import mdsl
    >>> with mdsl.Graph() as g:
    ...     x = g.input("x", ("B", "S", 16))
    ...     g.output(encoder_block(encoder_block(x, 2, 64), 2, 64), "y")
    >>> [p for p in g.layers if p.count("/") == 1 and p.startswith("EncoderBlock_1/")]
    ['EncoderBlock_1/SelfAttention', 'EncoderBlock_1/AddNorm', 'EncoderBlock_1/FFN', 'EncoderBlock_1/AddNorm_1']
    """
    x = add_norm(self_attention(x, heads, mask_bias), x)
    return add_norm(ffn(x, intermediate), x)


@mdsl.layer(name="Embeddings")
def embeddings(input_ids, position_ids, vocab: int, max_positions: int, hidden: int):
    """Word plus position embeddings (token types omitted), then LayerNorm.

    >>> import mdsl
    >>> with mdsl.Graph() as g:
    ...     ids = g.input("ids", ("B", "S"), "int64")
    ...     g.output(embeddings(ids, ids, vocab=100, max_positions=16, hidden=8), "y")
    >>> g.outputs["y"].shape
    (Dim('B'), Dim('S'), 8)
    """
    words = ops.gather(mdsl.param("word_embeddings", (vocab, hidden)), input_ids, axis=0)
    positions = ops.gather(
        mdsl.param("position_embeddings", (max_positions, hidden)), position_ids, axis=0
    )
    return layer_norm(ops.add(words, positions, name="Sum"))


@mdsl.layer(name="AttentionMask")
def attention_mask_bias(mask):
    """(B, S) mask of 1 (keep) / 0 (padding) -> (B, 1, 1, S) additive score bias.

    >>> import numpy as np, mdsl
    >>> with mdsl.Graph() as g:
    ...     g.output(attention_mask_bias(g.input("mask", ("B", "S"))), "bias")
    >>> mdsl.interpret(g, {"mask": np.array([[1, 0]], np.float32)})["bias"]
    array([[[[     0., -10000.]]]], dtype=float32)
    """
    bias = ops.mul(ops.sub(mask, 1.0), -MASK_FILL, name="Bias")  # 0 or MASK_FILL
    return ops.unsqueeze(bias, axes=(1, 2), name="Broadcastable")


def bert(
    depth: int,
    hidden: int,
    heads: int,
    seq="S",
    batch="B",
    *,
    intermediate: int | None = None,
    masked: bool = False,
    vocab: int | None = None,
    max_positions: int = 512,
) -> mdsl.Graph:
    """A BERT encoder graph of `depth` blocks; output `y` is (batch, seq, hidden).

    Inputs: `x` (batch, seq, hidden) float32 hidden states, or with `vocab` set,
    `input_ids` and `position_ids` (batch, seq) int64 through an Embeddings layer; with
    `masked`, also `mask` (batch, seq) float32, 1 for tokens and 0 for padding.
    `intermediate` defaults to 4 * hidden. `seq` and `batch` are ints or symbolic names.

    >>> g = bert(2, 64, 4)
    >>> g.node("EncoderBlock_1/SelfAttention/MatMul_QK").op_type
    'MatMul'
    >>> g.outputs["y"].shape, len(g.layers)
    ((Dim('B'), Dim('S'), 64), 22)
    """
    if hidden % heads:
        raise mdsl.ShapeError(f"bert: hidden ({hidden}) must be divisible by heads ({heads})")
    intermediate = intermediate or 4 * hidden
    name = f"bert_L{depth}_H{hidden}_A{heads}"
    with mdsl.Graph(name) as g:
        if vocab is None:
            x = g.input("x", (batch, seq, hidden), "float32")
        else:
            input_ids = g.input("input_ids", (batch, seq), "int64")
            position_ids = g.input("position_ids", (batch, seq), "int64")
            x = embeddings(input_ids, position_ids, vocab, max_positions, hidden)
        mask_bias = attention_mask_bias(g.input("mask", (batch, seq))) if masked else None
        for _ in range(depth):
            x = encoder_block(x, heads, intermediate, mask_bias)
        g.output(x, "y")
    return g


def build(depth: int = 2, hidden: int = 64, heads: int = 4) -> mdsl.Graph:
    """The tiny variant (2 blocks, hidden 64, 4 heads) for the CLI; BERT-base is
    `mdsl summary examples/bert.py --arg depth=12 --arg hidden=768 --arg heads=12`."""
    return bert(depth, hidden, heads)


def main() -> None:
    g = build()
    print(g.summary())
    x = np.random.default_rng(0).standard_normal((2, 16, 64), dtype=np.float32)
    y = mdsl.interpret(g, {"x": x})["y"]
    print(f"tiny: y {y.dtype}{list(y.shape)}, per-token mean {y.mean(-1).std():.2e}\n")
    start = time.perf_counter()
    base = bert(12, 768, 12)
    took = time.perf_counter() - start
    print(base.summary().splitlines()[0], f"(built in {took * 1000:.0f} ms)")


if __name__ == "__main__":
    main()
