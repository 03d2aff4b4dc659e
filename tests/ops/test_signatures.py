"""Every op builder shows a real signature and docstring derived from its op definition,
and builder misuse is a GraphError with the user's line and a suggestion."""

import inspect

import numpy as np
import pytest

import mdsl
from mdsl import ops
from mdsl.ops.registry import all_ops

P = inspect.Parameter
BUILDERS = {
    name: fn
    for name, fn in vars(ops).items()
    if not name.startswith("_") and inspect.isfunction(fn)
}


def test_there_are_builders_to_check():
    assert len(BUILDERS) > 100


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_every_builder_has_a_real_signature_and_doc(name):
    fn = BUILDERS[name]
    sig = inspect.signature(fn)
    kinds = {p.kind for p in sig.parameters.values()}
    assert P.VAR_KEYWORD not in kinds, f"{name}{sig} hides its attrs in **kwargs"
    for keyword in ("name", "device"):
        assert sig.parameters[keyword].kind == P.KEYWORD_ONLY
        assert sig.parameters[keyword].default is None
    assert fn.__doc__ and fn.__doc__.strip(), f"{name} has no docstring"


@pytest.mark.parametrize(
    "name", sorted(n for n, fn in BUILDERS.items() if getattr(fn, "opdef", None) is not None)
)
def test_definition_builders_follow_their_op_definition(name):
    fn = BUILDERS[name]
    opdef = all_ops()[fn.op_type]
    params = inspect.signature(fn).parameters
    inputs = [s.name for s in opdef.inputs]
    assert list(params) == [*inputs, *opdef.attrs, "name", "device"]
    assert P.VAR_POSITIONAL not in {p.kind for p in params.values()}
    for slot in opdef.inputs:
        assert params[slot.name].kind == P.POSITIONAL_OR_KEYWORD
        if slot.optional:
            assert params[slot.name].default is None
    for attr_name, attr in opdef.attrs.items():
        p = params[attr_name]
        assert p.kind == P.KEYWORD_ONLY
        assert p.annotation is not P.empty
        assert p.default is (P.empty if attr.required else attr.default)
    doc = fn.__doc__
    for slot in (*opdef.inputs, *opdef.outputs):
        assert f"    {slot.name}: " in doc
        assert all(d.value in doc for d in slot.allowed)
    for attr_name in opdef.attrs:
        assert f"    {attr_name}: " in doc


def test_keyword_inputs_and_attrs_build_the_same_node():
    with mdsl.Graph() as g:
        x = g.input("x", (2, 3))
        w = mdsl.param("w", (3, 4))
        y = ops.matmul(a=x, b=w)
        z = ops.softmax(x=y, axis=0)
        g.output(z, "z")
    assert y.producer.inputs[0] is x and z.producer.attrs["axis"] == 0


def test_user_op_proto_builder_has_signature_and_doc():
    @mdsl.op_proto(
        "ScaleBySig",
        inputs={"x": "float", "bias": mdsl.In("float", optional=True)},
        outputs={"y": "float"},
        attrs={"alpha": mdsl.Attr(float, default=2.0), "mode": mdsl.Attr(str, required=True)},
    )
    def scale_by(x, bias, *, alpha, mode):
        """Scale x by alpha."""
        return x

    sig = inspect.signature(scale_by)
    assert list(sig.parameters) == ["x", "bias", "alpha", "mode", "name"]
    assert sig.parameters["alpha"].default == 2.0
    assert sig.parameters["mode"].default is P.empty
    assert sig.parameters["alpha"].kind == P.KEYWORD_ONLY
    assert scale_by.__doc__.startswith("Scale x by alpha.")
    assert "alpha: float, default 2.0" in scale_by.__doc__
    assert "mode: str, required" in scale_by.__doc__
    assert scale_by.__name__ == "scale_by"
    with mdsl.Graph() as g:
        y = scale_by(g.input("x", (3,)), mode="fast")
        g.output(y, "y")
    assert y.producer.attrs == {"alpha": 2.0, "mode": "fast"}


def test_positional_attr_suggests_the_keyword():
    with pytest.raises(mdsl.GraphError) as info, mdsl.Graph() as g:
        x = g.input("x", (4, 4))
        ops.reshape(x, (16,))
    message = str(info.value)
    assert "pass the shape as `shape=`" in message
    assert message.startswith("Reshape (Reshape) at tests/ops/test_signatures.py:")


def test_misspelled_keyword_suggests_the_attr_for_hand_written_builders():
    with pytest.raises(mdsl.GraphError) as info, mdsl.Graph() as g:
        x = g.input("x", (1, 2, 8, 8))
        ops.conv(x, mdsl.param("w", (4, 2, 3, 3)), stride=2)
    assert "did you mean `strides=`?" in str(info.value)
    assert info.value.source.startswith("tests/ops/test_signatures.py:")


def test_misspelled_attr_suggests_the_attr():
    with pytest.raises(mdsl.GraphError, match=r"did you mean `axis=`\?"), mdsl.Graph() as g:
        ops.softmax(g.input("x", (2, 3)), axs=0)


def test_errors_inside_a_hand_written_builder_are_not_rewritten():
    with pytest.raises(mdsl.ShapeError, match="channels"), mdsl.Graph() as g:
        x = g.input("x", (1, 3, 8, 8))
        ops.conv(x, mdsl.param("w", (4, 2, 3, 3)))


def test_signature_builders_still_run():
    with mdsl.Graph() as g:
        x = g.input("x", (2, 3))
        g.output(ops.clip(ops.transpose(x, perm=(1, 0)), 0.0, 1.0), "y")
    y = mdsl.interpret(g, {"x": np.full((2, 3), 3.0, np.float32)})["y"]
    np.testing.assert_array_equal(y, np.ones((3, 2), np.float32))
