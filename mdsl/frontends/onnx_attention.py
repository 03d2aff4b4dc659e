"""ONNX's Attention (opsets 23 to 25) as `mdsl.ops.attention`, and back.

mdsl's op has ONNX's inputs, outputs and attributes (the module doc of
`mdsl.ops.attention` gives the semantics); `softmax_precision` (an ONNX element type)
becomes an mdsl dtype. The exporter writes the op as the MatMul/Softmax graph of the
`lower_attention` pass (any opset; runtimes without Attention-23 kernels run it).
"""

from __future__ import annotations

from mdsl.frontends.onnx_ops import dtype_from_onnx
from mdsl.frontends.onnx_rules import rule
from mdsl.ir.errors import GraphError

_INPUTS = 7  # Q, K, V, attn_mask, past_key, past_value, nonpad_kv_seqlen
_INT_ATTRS = ("q_num_heads", "kv_num_heads", "qk_matmul_output_mode")


@rule("Attention")
def attention(ctx, node) -> list:
    attrs = {name: int(node.attrs[name]) for name in _INT_ATTRS if name in node.attrs}
    attrs["is_causal"] = bool(node.attrs.get("is_causal", 0))
    for name in ("scale", "softcap"):
        if name in node.attrs:
            attrs[name] = float(node.attrs[name])
    for name in ("left_window_size", "right_window_size"):
        attrs[name] = int(node.attrs.get(name, -1))
    if "softmax_precision" in node.attrs:
        precision = dtype_from_onnx(int(node.attrs["softmax_precision"]))
        if precision is None or not precision.is_float:
            raise GraphError(
                f"Attention softmax_precision {node.attrs['softmax_precision']} is not a float "
                "type mdsl has"
            )
        attrs["softmax_precision"] = precision
    inputs = [ctx.input_tensor(node, i) for i in range(_INPUTS)]
    with ctx.scope_of(node) as leaf:
        return ctx.emit("Attention", inputs, attrs, name=leaf)
