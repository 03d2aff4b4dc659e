"""Layout transformation: NHWC conv chains with explicit TransData conversions, their
cancellation, interpreter results, and the verifier's format rule."""

from __future__ import annotations

import numpy as np
import pytest

import mdsl
from mdsl import ops
from mdsl.ops.storage import from_storage, to_storage
from mdsl.passes.layout import cancel_conversions

RNG = np.random.default_rng(0)


def nhwc(g: mdsl.Graph) -> mdsl.Graph:
    return mdsl.passes.run(g, ["layout_nhwc"])


def op_types(g: mdsl.Graph) -> list[str]:
    return [n.op_type for n in g if n.op_type not in ("Input", "Const", "Output")]


def conversions(g: mdsl.Graph) -> list[tuple[str, str, str]]:
    """(input tensor, src, dst) of every TransData node."""
    return [
        (n.inputs[0].name, n.attrs["src_format"], n.attrs["dst_format"])
        for n in g
        if n.op_type == "TransData"
    ]


def storage(g: mdsl.Graph, name: str):
    return g.node(name).outputs[0].type.storage_format


def bn(y, c):
    ones, zeros = mdsl.param("gamma", (c,), init="ones"), mdsl.param("beta", (c,))
    return ops.batch_norm(
        y, ones, zeros, mdsl.param("mean", (c,)), mdsl.param("var", (c,), init="ones")
    )


@mdsl.layer
def conv_bn_relu(x, cout):
    w = mdsl.param("weight", (cout, x.shape[1], 3, 3))
    return ops.relu(bn(ops.conv2d(x, w, pads=1), cout))


def assert_same_results(g, g2, feeds, rtol=1e-5, atol=1e-6):
    want, got = mdsl.interpret(g, feeds), mdsl.interpret(g2, feeds)
    assert want.keys() == got.keys()
    for name in want:
        assert got[name].shape == want[name].shape
        np.testing.assert_allclose(got[name], want[name], rtol=rtol, atol=atol)


def conv_chain():
    with mdsl.Graph("chain") as g:
        x = g.input("x", ("N", 3, 8, 8))
        y = conv_bn_relu(conv_bn_relu(x, 4), 4)
        g.output(y, "y")
    return g


# -- conversions around conv chains --------------------------------------------------------------
def test_a_conv_chain_gets_one_conversion_in_and_one_out():
    g = conv_chain()
    g2 = nhwc(g)
    assert op_types(g2) == [
        "TransData", "Conv", "BatchNormalization", "Relu",
        "Conv", "BatchNormalization", "Relu", "TransData",
    ]  # fmt: skip
    assert conversions(g2) == [
        ("x", "NCHW", "NHWC"),
        ("conv_bn_relu_1/Relu", "NHWC", "NCHW"),
    ]
    for name in ("conv_bn_relu/Conv", "conv_bn_relu/BatchNormalization", "conv_bn_relu_1/Relu"):
        assert storage(g2, name) == mdsl.NHWC
        assert g2.node(name).outputs[0].shape == g.node(name).outputs[0].shape  # origin kept
    assert g2.outputs["y"].type.storage_format is None
    assert all(t.type.storage_format is None for n in g for t in n.outputs)  # argument intact
    x = RNG.standard_normal((2, 3, 8, 8)).astype(np.float32)
    assert_same_results(g, g2, {"x": x})


def test_the_interpreter_holds_nhwc_tensors_in_nhwc():
    g = conv_chain()
    g2 = nhwc(g)
    x = RNG.standard_normal((2, 3, 8, 8)).astype(np.float32)
    before = mdsl.interpret(g, {"x": x}, capture=True)
    after = mdsl.interpret(g2, {"x": x}, capture=True)
    conv = "conv_bn_relu_1/Conv"
    assert before[conv].shape == (2, 4, 8, 8)
    assert after[conv].shape == (2, 8, 8, 4)
    np.testing.assert_allclose(
        after[conv], before[conv].transpose(0, 2, 3, 1), rtol=1e-5, atol=1e-6
    )


def test_a_residual_block_reuses_the_input_conversion():
    with mdsl.Graph("block") as g:
        x = g.input("x", ("N", 4, 6, 6))
        y = conv_bn_relu(conv_bn_relu(x, 4), 4)
        g.output(ops.relu(y + x), "y")
    g2 = nhwc(g)
    assert conversions(g2) == [("x", "NCHW", "NHWC"), ("Relu", "NHWC", "NCHW")]
    add = g2.node("Add")
    assert [t.producer.op_type for t in add.inputs] == ["Relu", "TransData"]
    assert storage(g2, "Add") == mdsl.NHWC
    x = RNG.standard_normal((1, 4, 6, 6)).astype(np.float32)
    assert_same_results(g, g2, {"x": x})


def test_pooling_follows_and_flatten_converts_back():
    with mdsl.Graph("head") as g:
        x = g.input("x", (2, 3, 8, 8), format="NCHW")
        y = ops.max_pool(conv_bn_relu(x, 4), kernel_shape=2, strides=2)
        z = ops.flatten(ops.global_average_pool(y))
        g.output(ops.matmul(z, mdsl.param("fc", (4, 5))), "logits")
    g2 = nhwc(g)
    assert op_types(g2) == [
        "TransData", "Conv", "BatchNormalization", "Relu", "MaxPool",
        "GlobalAveragePool", "TransData", "Flatten", "MatMul",
    ]  # fmt: skip
    assert storage(g2, "GlobalAveragePool") == mdsl.NHWC
    assert storage(g2, "Flatten") is None
    x = RNG.standard_normal((2, 3, 8, 8)).astype(np.float32)
    assert_same_results(g, g2, {"x": x})


def test_a_per_channel_operand_of_lower_rank_keeps_the_add_in_origin_layout():
    with mdsl.Graph("bias") as g:
        x = g.input("x", (1, 3, 5, 5))
        y = ops.conv2d(x, mdsl.param("w", (4, 3, 3, 3)), pads=1)
        g.output(ops.relu(y + mdsl.param("b", (4, 1, 1))), "y")
    g2 = nhwc(g)
    assert op_types(g2) == ["TransData", "Conv", "TransData", "Add", "Relu"]
    assert storage(g2, "Add") is None
    assert_same_results(g, g2, {"x": RNG.standard_normal((1, 3, 5, 5)).astype(np.float32)})


def test_scalars_broadcast_in_any_layout():
    with mdsl.Graph("scale") as g:
        x = g.input("x", (1, 3, 5, 5))
        y = ops.conv2d(x, mdsl.param("w", (4, 3, 1, 1))) * 0.5
        g.output(y, "y")
    g2 = nhwc(g)
    assert op_types(g2) == ["TransData", "Conv", "Mul", "TransData"]
    assert storage(g2, "Mul") == mdsl.NHWC


def test_graphs_without_convolutions_are_left_alone():
    with mdsl.Graph("mlp") as g:
        x = g.input("x", (2, 3, 4, 4))
        g.output(ops.relu(x) + 1.0, "y")
    g2 = nhwc(g)
    assert op_types(g2) == op_types(g)
    assert g2.pass_log[-1].changed is False


def test_the_pass_is_idempotent():
    g2 = nhwc(conv_chain())
    g3 = nhwc(g2)
    assert g3.pass_log[-1].changed is False
    assert conversions(g3) == conversions(g2)


def test_level_3_optimizes_layout_before_fusion_and_level_2_does_not():
    g = conv_chain()
    assert "TransData" not in op_types(mdsl.optimize(g, level=2))
    g3 = mdsl.optimize(g, level=3)
    assert op_types(g3).count("TransData") == 2
    kinds = [grp.kind for grp in mdsl.passes.fusion.fusion_groups(g3)]
    assert kinds == ["opaque", "extern_epilogue", "extern_epilogue", "opaque"]
    x = RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)
    assert_same_results(g, g3, {"x": x}, rtol=1e-4, atol=1e-5)


# -- cancelling conversions ----------------------------------------------------------------------
def test_adjacent_inverse_conversions_cancel():
    with mdsl.Graph("pair") as g:
        x = g.input("x", (1, 3, 4, 4), format="NCHW")
        y = ops.trans_data(x, src_format="NCHW", dst_format="NHWC")
        z = ops.trans_data(y, src_format="NHWC", dst_format="NCHW")
        g.output(ops.relu(z), "y")
    g2 = nhwc(g)
    assert op_types(g2) == ["Relu"]
    assert g2.node("Relu").inputs[0].name == "x"
    assert_same_results(g, g2, {"x": RNG.standard_normal((1, 3, 4, 4)).astype(np.float32)})


def test_a_chain_of_three_conversions_back_to_the_start_cancels():
    with mdsl.Graph("triple") as g:
        x = g.input("x", (1, 20, 4, 4), format="NCHW")
        y = ops.trans_data(x, src_format="NCHW", dst_format="NHWC")
        y = ops.trans_data(y, src_format="NHWC", dst_format="NC1HWC0")
        g.output(ops.trans_data(y, src_format="NC1HWC0", dst_format="NCHW"), "y")
    g2 = mdsl.ir.rewrite.clone_graph(g)
    assert cancel_conversions(g2) == 3
    assert op_types(g2) == []
    assert_same_results(g, g2, {"x": RNG.standard_normal((1, 20, 4, 4)).astype(np.float32)})


def test_a_round_trip_through_another_format_after_a_conv_chain_collapses():
    with mdsl.Graph("to_5hd") as g:
        x = g.input("x", (1, 3, 6, 6))
        y = conv_bn_relu(x, 20)
        packed = ops.trans_data(y, src_format="NCHW", dst_format="NC1HWC0")
        g.output(ops.trans_data(packed, src_format="NC1HWC0", dst_format="NCHW"), "y")
    g2 = nhwc(g)
    # NHWC->NCHW (inserted), NCHW->NC1HWC0, NC1HWC0->NCHW compose into one NHWC->NCHW
    assert conversions(g2) == [("x", "NCHW", "NHWC"), ("conv_bn_relu/Relu", "NHWC", "NCHW")]
    assert_same_results(g, g2, {"x": RNG.standard_normal((1, 3, 6, 6)).astype(np.float32)})


# -- the verifier's format rule -----------------------------------------------------------------
def nhwc_input_graph(consume) -> mdsl.Graph:
    with mdsl.Graph("wrong") as g:
        x = g.input("x", (1, 3, 4, 4), format="NCHW")
        y = ops.trans_data(x, src_format="NCHW", dst_format="NHWC")
        out = consume(y, x)
        g.output(out if out is not None else x, "y")
    return g


def test_an_op_reading_a_format_it_does_not_accept_is_rejected():
    g = nhwc_input_graph(lambda y, x: ops.reduce_sum(y, axes=[1]))
    with pytest.raises(
        mdsl.GraphError,
        match=r"ReduceSum.*input 0 \(TransData\) is stored as NHWC.*origin layout only",
    ):
        mdsl.ir.verify(g)


def test_an_op_reading_nhwc_at_an_input_that_takes_only_origin_is_rejected():
    def conv_with_nhwc_weights(y, x):
        w = ops.trans_data(mdsl.param("w", (2, 3, 1, 1)), src_format="NCHW", dst_format="NHWC")
        return ops.conv2d(x, w)

    g = nhwc_input_graph(conv_with_nhwc_weights)
    with pytest.raises(mdsl.GraphError, match=r"Conv.*input 1 .*stored as NHWC.*at inputs \(0,\)"):
        mdsl.ir.verify(g)


def test_a_pointwise_op_with_inputs_in_different_layouts_is_rejected():
    g = nhwc_input_graph(lambda y, x: ops.add(y, x))
    with pytest.raises(mdsl.GraphError, match="different layouts"):
        mdsl.ir.verify(g)


def test_an_op_writing_a_layout_other_than_its_inputs_is_rejected():
    g = nhwc_input_graph(lambda y, x: ops.relu(y))  # built by hand: Relu's type says origin
    with pytest.raises(mdsl.GraphError, match="Relu writes NHWC"):
        mdsl.ir.verify(g)


def test_a_graph_output_stored_nhwc_is_rejected():
    def leave_nhwc(y, x):
        return y

    g = nhwc_input_graph(leave_nhwc)
    with pytest.raises(mdsl.GraphError, match="graph outputs are returned in origin layout"):
        mdsl.ir.verify(g)


def test_a_trans_data_whose_source_format_lies_is_rejected():
    def twice(y, x):
        return ops.trans_data(
            ops.trans_data(y, src_format="NCHW", dst_format="NHWC"),  # y is NHWC already
            src_format="NHWC",
            dst_format="NCHW",
        )

    g = nhwc_input_graph(twice)
    with pytest.raises(
        mdsl.GraphError, match="converts from NCHW, but its input is stored as NHWC"
    ):
        mdsl.ir.verify(g)


def test_valid_conversions_pass_the_verifier():
    g = nhwc_input_graph(lambda y, x: ops.trans_data(y, src_format="NHWC", dst_format="NCHW"))
    mdsl.ir.verify(g)


def test_trans_data_refuses_impossible_layouts_at_build_time():
    with mdsl.Graph("bad") as g:
        x = g.input("x", (3, 4))
        with pytest.raises(mdsl.ShapeError, match="TransData"):
            ops.trans_data(x, src_format="ND", dst_format="NHWC")
        with pytest.raises(mdsl.GraphError, match="dst_format"):
            ops.trans_data(x, src_format="ND", dst_format="HWCN")
        g.output(x, "y")


# -- storage arrays ------------------------------------------------------------------------------
def test_nc1hwc0_and_fractal_nz_arrays_follow_their_definitions():
    x = RNG.standard_normal((2, 20, 3, 4)).astype(np.float32)
    t = mdsl.TensorType(x.shape, "float32", "NCHW", storage_format="NC1HWC0")
    packed = to_storage(x, t)
    assert packed.shape == t.storage_shape == (2, 2, 3, 4, 16)
    n, c, h, w = 1, 17, 2, 3  # channel 17 = block 1, lane 1
    assert packed[n, c // 16, h, w, c % 16] == x[n, c, h, w]
    assert np.all(packed[:, 1, :, :, 4:] == 0)  # channels 20..31 are padding
    np.testing.assert_array_equal(from_storage(packed, t), x)

    m = RNG.standard_normal((3, 20, 35)).astype(np.float32)
    t = mdsl.TensorType(m.shape, "float32", storage_format="FRACTAL_NZ")
    tiles = to_storage(m, t)
    assert tiles.shape == t.storage_shape == (3, 3, 2, 16, 16)
    b, i, j = 2, 18, 33  # row 18 = tile row 1 / 2; column 33 = tile column 2 / 1
    assert tiles[b, j // 16, i // 16, i % 16, j % 16] == m[b, i, j]
    np.testing.assert_array_equal(from_storage(tiles, t), m)


def test_nhwc_storage_of_a_symbolic_batch_runs_with_any_batch():
    g2 = nhwc(conv_chain())
    for batch in (1, 3):
        x = RNG.standard_normal((batch, 3, 8, 8)).astype(np.float32)
        assert mdsl.interpret(g2, {"x": x})["y"].shape == (batch, 4, 8, 8)
