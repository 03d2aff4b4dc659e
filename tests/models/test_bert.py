"""The BERT example against torch.nn.TransformerEncoderLayer holding the same weights.

`TransformerEncoderLayer(norm_first=False, activation="gelu")` is exactly a post-LN BERT
block (exact-erf GELU, LayerNorm after each residual add); its attention packs the Q, K, V
projections into one `in_proj` matrix, which the test assembles from the three mdsl
parameters. Tolerances: float32, rtol 1e-4 / atol 1e-4 (outputs are LayerNorm-scaled,
~N(0, 1); observed differences are ~1e-6).
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
import torch
from torch import nn

import mdsl
from examples import bert
from tests.models.params import param, params_named, set_param

RTOL, ATOL = 1e-4, 1e-4
TINY = {"depth": 2, "hidden": 64, "heads": 4}
BLOCK_LAYERS = (  # inside each EncoderBlock, in build order; Q, K, ... are `ops.linear` scopes
    "SelfAttention",
    "SelfAttention/Q",
    "SelfAttention/K",
    "SelfAttention/V",
    "SelfAttention/Output",
    "AddNorm",
    "FFN",
    "FFN/Intermediate",
    "FFN/Output",
    "AddNorm_1",
)
OPS_PER_BLOCK = {
    "Const": 12 + 4 + 1,  # 6 linear weights and biases, 2 LayerNorms, the 1/sqrt(d) scale
    "MatMul": 6 + 2,  # 6 linears, QK and AV
    "Add": 6 + 2,  # 6 linear biases, 2 residuals
    "Transpose": 5,
    "Reshape": 4,
    "LayerNormalization": 2,
    "Mul": 1,
    "Softmax": 1,
    "Gelu": 1,
}


def block_prefix(i: int) -> str:
    return "EncoderBlock" if i == 0 else f"EncoderBlock_{i}"


def params_per_block(hidden: int, intermediate: int) -> int:
    attention = 4 * (hidden * hidden + hidden)
    feed_forward = 2 * hidden * intermediate + intermediate + hidden
    norms = 2 * 2 * hidden
    return attention + feed_forward + norms


def randomize_params(g: mdsl.Graph, seed: int = 0) -> None:
    """Trained-looking values: weights ~ N(0, 1/fan_in), non-zero biases, LN off identity.

    The example's BERT init (std 0.02, zero biases, identity LayerNorm) would make every
    attention distribution nearly uniform and leave biases untested.
    """
    rng = np.random.default_rng(seed)
    for name in params_named(g, "weight"):
        shape = g.node(name).const_value().shape
        set_param(g, name, rng.normal(0, 1.5 / math.sqrt(shape[0]), shape))
    for name in params_named(g, "bias") + params_named(g, "beta"):
        set_param(g, name, rng.normal(0, 0.1, g.node(name).const_value().shape))
    for name in params_named(g, "gamma"):
        set_param(g, name, rng.uniform(0.5, 1.5, g.node(name).const_value().shape))


def torch_block(g: mdsl.Graph, i: int, heads: int) -> nn.TransformerEncoderLayer:
    """Block `i` of `g` as a PyTorch layer (mdsl's linear weights are (in, out): transpose)."""
    p = block_prefix(i)
    attn, ffn = f"{p}/SelfAttention", f"{p}/FFN"
    hidden, intermediate = g.node(f"{ffn}/intermediate_weight").const_value().shape
    layer = nn.TransformerEncoderLayer(
        hidden,
        heads,
        intermediate,
        dropout=0.0,
        activation="gelu",
        layer_norm_eps=1e-12,
        batch_first=True,
        norm_first=False,
    ).eval()
    values = {
        "self_attn.in_proj_weight": torch.cat(
            [param(g, f"{attn}/{w}_weight").T for w in ("query", "key", "value")]
        ),
        "self_attn.in_proj_bias": torch.cat(
            [param(g, f"{attn}/{w}_bias") for w in ("query", "key", "value")]
        ),
        "self_attn.out_proj.weight": param(g, f"{attn}/output_weight").T,
        "self_attn.out_proj.bias": param(g, f"{attn}/output_bias"),
        "linear1.weight": param(g, f"{ffn}/intermediate_weight").T,
        "linear1.bias": param(g, f"{ffn}/intermediate_bias"),
        "linear2.weight": param(g, f"{ffn}/output_weight").T,
        "linear2.bias": param(g, f"{ffn}/output_bias"),
        "norm1.weight": param(g, f"{p}/AddNorm/gamma"),
        "norm1.bias": param(g, f"{p}/AddNorm/beta"),
        "norm2.weight": param(g, f"{p}/AddNorm_1/gamma"),
        "norm2.bias": param(g, f"{p}/AddNorm_1/beta"),
    }
    layer.load_state_dict(values, strict=True)
    return layer


def torch_encoder(g: mdsl.Graph, depth: int, heads: int, x, padding=None):
    """The reference forward pass; `padding` is a bool (B, S) mask, True at padding."""
    blocks = [torch_block(g, i, heads) for i in range(depth)]
    # Autograd on keeps PyTorch on its plain (non-fused) path; the math is the same.
    with torch.enable_grad():
        for block in blocks:
            x = block(x, src_key_padding_mask=padding)
    return x.detach().numpy()


@pytest.fixture(scope="module")
def tiny():
    g = bert.bert(**TINY)
    randomize_params(g)
    return g


@pytest.mark.parametrize(("batch", "seq"), [(2, 5), (3, 9)])
def test_tiny_matches_torch_for_any_batch_and_length(tiny, batch, seq):
    x = np.random.default_rng(seq).standard_normal((batch, seq, 64), dtype=np.float32)
    y = mdsl.interpret(tiny, {"x": x})["y"]
    expected = torch_encoder(tiny, 2, 4, torch.from_numpy(x))
    assert y.shape == (batch, seq, 64)
    np.testing.assert_allclose(y, expected, rtol=RTOL, atol=ATOL)


def test_attention_is_not_uniform(tiny):
    """Guards the test itself: with near-uniform attention a wrong softmax axis or a
    missing scale would still match."""
    x = np.random.default_rng(0).standard_normal((2, 6, 64), dtype=np.float32)
    probs = mdsl.interpret(tiny, {"x": x}, capture=True)["EncoderBlock/SelfAttention/Softmax"]
    assert probs.shape == (2, 4, 6, 6)
    assert probs.max() > 2.0 / 6


def test_masked_matches_torch_key_padding():
    g = bert.bert(**TINY, masked=True)
    randomize_params(g, seed=1)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 7, 64), dtype=np.float32)
    lengths = np.array([7, 4, 1])
    mask = (np.arange(7)[None, :] < lengths[:, None]).astype(np.float32)
    y = mdsl.interpret(g, {"x": x, "mask": mask})["y"]
    expected = torch_encoder(g, 2, 4, torch.from_numpy(x), torch.from_numpy(mask == 0))
    np.testing.assert_allclose(y, expected, rtol=RTOL, atol=ATOL)
    unmasked = mdsl.interpret(g, {"x": x, "mask": np.ones_like(mask)})["y"]
    assert not np.allclose(unmasked[1], y[1], atol=1e-3)  # the mask changes padded rows
    np.testing.assert_allclose(unmasked[0], y[0], rtol=RTOL, atol=ATOL)


def test_embeddings_match_torch():
    g = bert.bert(**TINY, vocab=50, max_positions=16)
    randomize_params(g, seed=3)
    rng = np.random.default_rng(4)
    ids = rng.integers(0, 50, (2, 6)).astype(np.int64)
    positions = np.tile(np.arange(6, dtype=np.int64), (2, 1))
    y = mdsl.interpret(g, {"input_ids": ids, "position_ids": positions})["y"]
    words = param(g, "Embeddings/word_embeddings")[torch.from_numpy(ids)]
    where = param(g, "Embeddings/position_embeddings")[torch.from_numpy(positions)]
    x = nn.functional.layer_norm(
        words + where,
        (64,),
        param(g, "Embeddings/gamma"),
        param(g, "Embeddings/beta"),
        eps=1e-12,
    )
    np.testing.assert_allclose(y, torch_encoder(g, 2, 4, x), rtol=RTOL, atol=ATOL)


def test_layer_paths_and_functions(tiny):
    expected = []
    for i in range(2):
        p = block_prefix(i)
        expected += [p, *(f"{p}/{s}" for s in BLOCK_LAYERS)]
    assert list(tiny.layers) == expected
    assert tiny.layers["EncoderBlock_1"].function == "examples.bert.encoder_block"
    assert tiny.layers["EncoderBlock_1/SelfAttention"].function == "examples.bert.self_attention"
    assert tiny.layers["EncoderBlock_1/AddNorm_1"].node_names == [
        "EncoderBlock_1/AddNorm_1/Residual",
        "EncoderBlock_1/AddNorm_1/gamma",
        "EncoderBlock_1/AddNorm_1/beta",
        "EncoderBlock_1/AddNorm_1/LayerNorm",
    ]
    assert tiny.layers["EncoderBlock/FFN/Intermediate"].node_names == [
        "EncoderBlock/FFN/Intermediate/MatMul",
        "EncoderBlock/FFN/Intermediate/Add",
    ]


def test_named_nodes_read_like_the_model(tiny):
    attn = "EncoderBlock_1/SelfAttention"
    expected_ops = {
        f"{attn}/query_weight": "Const",
        f"{attn}/Q/MatMul": "MatMul",
        f"{attn}/Q_SplitHeads": "Reshape",
        f"{attn}/MatMul_QK": "MatMul",
        f"{attn}/Scale": "Mul",
        f"{attn}/Softmax": "Softmax",
        f"{attn}/MatMul_AV": "MatMul",
        f"{attn}/MergeHeads": "Reshape",
        "EncoderBlock_1/FFN/GELU": "Gelu",
        "EncoderBlock_1/AddNorm/LayerNorm": "LayerNormalization",
    }
    assert {name: tiny.node(name).op_type for name in expected_ops} == expected_ops
    b, s = mdsl.Dim("B"), mdsl.Dim("S")
    assert tiny.node(f"{attn}/Q_Transpose").outputs[0].shape == (b, 4, s, 16)
    assert tiny.node(f"{attn}/MatMul_QK").outputs[0].shape == (b, 4, s, s)
    assert tiny.node(f"{attn}/Softmax").attrs["axis"] == -1
    assert tiny.node("EncoderBlock_1/FFN/GELU").attrs["approximate"] == "none"
    assert tiny.node("EncoderBlock_1/AddNorm/LayerNorm").attrs["epsilon"] == pytest.approx(1e-12)
    assert tiny.outputs["y"].shape == (b, s, 64)
    mdsl.ir.verify(tiny)


def tensor_params(g: mdsl.Graph) -> int:
    """Scalars held by the model's parameters (Const nodes of rank >= 1)."""
    return sum(math.prod(n.outputs[0].shape) for n in g.constants if n.outputs[0].shape)


def test_tiny_parameter_count():
    g = bert.build()
    assert tensor_params(g) == 2 * params_per_block(64, 256) == 99_968
    assert g.parameter_count()[0] == 99_968  # 0-d constants (the 1/sqrt(d) scales) excluded


def test_same_layer_code_gives_same_weights():
    a, b = bert.bert(**TINY), bert.bert(3, 64, 4, seq=8, batch=1)
    name = "EncoderBlock_1/SelfAttention/key_weight"
    np.testing.assert_array_equal(a.node(name).const_value(), b.node(name).const_value())
    other = a.node("EncoderBlock/SelfAttention/key_weight").const_value()
    assert not np.array_equal(a.node(name).const_value(), other)


def ops_in(g: mdsl.Graph, prefix: str) -> Counter:
    return Counter(n.op_type for n in g if n.name.startswith(prefix + "/"))


def test_bert_base_builds_with_the_expected_structure():
    base = bert.bert(12, 768, 12)
    assert tensor_params(base) == 12 * params_per_block(768, 3072) == 85_054_464
    for i in range(12):
        assert ops_in(base, block_prefix(i)) == OPS_PER_BLOCK, block_prefix(i)
    assert len(base) == 2 + 12 * sum(OPS_PER_BLOCK.values())  # plus x and Output_y
    assert list(base.layers)[-11:] == ["EncoderBlock_11"] + [
        f"EncoderBlock_11/{s}" for s in BLOCK_LAYERS
    ]
    assert len(base.layers) == 12 * (1 + len(BLOCK_LAYERS))
    b, s = mdsl.Dim("B"), mdsl.Dim("S")
    assert base.node("EncoderBlock_11/SelfAttention/MatMul_QK").outputs[0].shape == (b, 12, s, s)
    assert base.node("EncoderBlock_11/FFN/intermediate_weight").outputs[0].shape == (768, 3072)
    assert base.outputs["y"].shape == (b, s, 768)


def test_tiny_has_the_same_structure_per_block(tiny):
    assert ops_in(tiny, "EncoderBlock") == ops_in(tiny, "EncoderBlock_1") == OPS_PER_BLOCK


def test_hidden_not_divisible_by_heads_is_a_shape_error():
    with pytest.raises(mdsl.ShapeError, match=r"hidden \(64\) must be divisible by heads \(5\)"):
        bert.bert(1, 64, 5)
