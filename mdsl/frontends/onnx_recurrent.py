"""ONNX's recurrent layers (LSTM, GRU, RNN) to and from `mdsl.ops.recurrent`.

mdsl's ops have ONNX's inputs and semantics; the importer only checks the attributes
mdsl has no counterpart for: LSTM and GRU run with ONNX's default activations (sigmoid,
tanh, tanh), RNN with one of Tanh, Relu or Sigmoid for every direction, and none of
them takes activation_alpha/beta. Before opset 14 there is no `layout` (it is 0).
"""

from __future__ import annotations

from mdsl.frontends.onnx_export import export_rule
from mdsl.frontends.onnx_rules import _text, rule
from mdsl.ir.errors import GraphError
from mdsl.ops.recurrent import RNN_ACTIVATIONS

_DEFAULT_ACTIVATIONS = {"LSTM": ("Sigmoid", "Tanh", "Tanh"), "GRU": ("Sigmoid", "Tanh")}
_OWN_ATTR = {"LSTM": "input_forget", "GRU": "linear_before_reset"}
_INPUTS = {"LSTM": 8, "GRU": 6, "RNN": 6}


@rule("LSTM", "GRU", "RNN")
def recurrent(ctx, node) -> list:
    attrs = _common_attrs(node)
    if node.op_type == "RNN":
        attrs["activation"] = _rnn_activation(node, attrs["direction"])
    else:
        _check_default_activations(node, attrs["direction"])
        own = _OWN_ATTR[node.op_type]
        attrs[own] = bool(node.attrs.get(own, 0))
    inputs = [ctx.input_tensor(node, i) for i in range(_INPUTS[node.op_type])]
    with ctx.scope_of(node) as leaf:
        return ctx.emit(node.op_type, inputs, attrs, name=leaf)


def _common_attrs(node) -> dict:
    if "activation_alpha" in node.attrs or "activation_beta" in node.attrs:
        raise GraphError(f"{node.op_type} activation_alpha/activation_beta are not supported")
    if "hidden_size" not in node.attrs:
        raise GraphError(f"{node.op_type} needs the hidden_size attribute")
    return {
        "hidden_size": int(node.attrs["hidden_size"]),
        "direction": _text(node.attrs.get("direction", "forward")),
        "layout": int(node.attrs.get("layout", 0)),
        "clip": float(node.attrs.get("clip", 0.0)),
    }


def _activations(node, direction: str) -> list[str]:
    """The activations of the first direction (a bidirectional node lists both)."""
    names = [_text(a) for a in node.attrs.get("activations", ())]
    if direction == "bidirectional" and names:
        half = len(names) // 2
        if names[:half] != names[half:]:
            raise GraphError(
                f"{node.op_type} with different activations per direction is not supported"
            )
        names = names[:half]
    return names


def _check_default_activations(node, direction: str) -> None:
    names = _activations(node, direction)
    default = _DEFAULT_ACTIVATIONS[node.op_type]
    if names and tuple(n.lower() for n in names) != tuple(d.lower() for d in default):
        raise GraphError(
            f"{node.op_type} activations {names} are not supported: mdsl runs {', '.join(default)}"
        )


def _rnn_activation(node, direction: str) -> str:
    names = _activations(node, direction) or ["Tanh"]
    by_lower = {a.lower(): a for a in RNN_ACTIVATIONS}
    if len(names) != 1 or names[0].lower() not in by_lower:
        raise GraphError(
            f"RNN activations {names} are not supported: mdsl runs one of "
            f"{', '.join(RNN_ACTIVATIONS)}"
        )
    return by_lower[names[0].lower()]


# -- export --------------------------------------------------------------------------------
@export_rule("LSTM", "GRU", "RNN")
def export_recurrent(ex, node) -> None:
    """mdsl's attrs as ONNX writes them: clip only when set, RNN's activation as the
    `activations` list (one per direction), layout only from opset 14 (where it exists)."""
    attrs = dict(node.attrs)
    if not attrs.get("clip"):
        attrs.pop("clip", None)
    if node.op_type == "RNN":
        dirs = 2 if attrs["direction"] == "bidirectional" else 1
        attrs["activations"] = [attrs.pop("activation")] * dirs
    for flag in ("input_forget", "linear_before_reset"):
        if flag in attrs:
            attrs[flag] = int(attrs[flag])
    if attrs["layout"] and ex.opset < 14:
        raise GraphError(f"{node.op_type} with layout=1 needs opset >= 14")
    if ex.opset < 14:
        attrs.pop("layout")
    ex.add(node.op_type, ex.input_names(node), ex.output_names(node), name=f"/{node.name}", **attrs)
