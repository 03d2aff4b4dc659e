"""Small ONNX models written with `onnx.helper` (independent of mdsl's exporter) and
ONNX's own reference evaluator as the expected result."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

FLOAT = TensorProto.FLOAT


def value(name: str, shape, elem=FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def init(name: str, array) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(array), name)


def model(nodes, inputs, outputs, *, initializers=(), opset: int = 18, name: str = "m"):
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=list(initializers))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = helper.find_min_ir_version_for(list(m.opset_import), ignore_unknown=True)
    return m


def reference(m, feeds: dict) -> list[np.ndarray]:
    """ONNX's reference implementation's outputs."""
    return ReferenceEvaluator(m).run(None, feeds)


def ort_run(m, feeds: dict) -> list[np.ndarray]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(
        m.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return session.run(None, feeds)
