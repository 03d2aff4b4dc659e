"""Property tests: saved graphs, executable manifests and ONNX protobufs, mutated at
random, load with an `mdsl.MdslError` or load and work, nothing else.

JSON documents get structural mutations (a value anywhere replaced by any JSON value, a
key deleted, a list item duplicated), files and protobufs byte-level ones (flips,
truncation, insertion). Manifests are re-signed after the edit so that the edit reaches
validation instead of stopping at the signature. Examples are bounded and derandomized
(`MDSL_ROBUST_EXAMPLES=1000` runs more).
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import shutil

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mdsl
from mdsl import ops
from mdsl.runtime import saved

PROFILE = settings(
    max_examples=int(os.environ.get("MDSL_ROBUST_EXAMPLES", "40")),  # more to hunt for bugs
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)


def _paths(doc, prefix=()):
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _paths(v, (*prefix, i))


@st.composite
def mutated(draw, doc):
    """`doc` with one to three structural mutations."""
    doc = copy.deepcopy(doc)
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in _paths(doc) if p]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        action = draw(st.sampled_from(["replace", "delete", "duplicate"]))
        if action == "replace":
            parent[path[-1]] = draw(JSON_VALUES)
        elif action == "delete":
            del parent[path[-1]]
        elif isinstance(parent, list):
            parent.insert(path[-1], copy.deepcopy(parent[path[-1]]))
    return doc


@st.composite
def mutated_bytes(draw, data: bytes):
    data = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        action = draw(st.sampled_from(["flip", "truncate", "insert"]))
        at = draw(st.integers(0, max(0, len(data) - 1)))
        if action == "flip" and data:
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif action == "truncate":
            del data[at:]
        else:
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
    return bytes(data)


def rich_graph() -> mdsl.Graph:
    with mdsl.Graph("rich") as g:
        x = g.input("x", ("N", 4))
        with mdsl.scope("Block"):
            h = ops.relu(x @ mdsl.param("w", (4, 4), seed=1) + mdsl.param("b", (4,), seed=2))
            h = ops.reshape(ops.softmax(h), shape=(-1, 2, 2))
        y = mdsl.cond(x.sum() > 0.0, lambda: h * 2.0, lambda: h - 1.0)
        g.output(ops.reduce_sum(y, axes=(2,)), "y")
    return mdsl.optimize(g)


RICH = json.loads(rich_graph().to_json())


@PROFILE
@given(mutated(RICH))
def test_mutated_graph_documents_load_or_raise_graph_errors(doc):
    with contextlib.suppress(mdsl.MdslError):
        mdsl.Graph.from_json(json.dumps(doc))


@pytest.fixture(scope="module")
def saved_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("graph") / "rich.mdsl"
    mdsl.save(rich_graph(), path)
    return path.read_bytes()


@PROFILE
@given(data=st.data())
def test_mutated_graph_files_load_or_raise_graph_errors(saved_file, tmp_path, data):
    path = tmp_path / "mutated.mdsl"
    path.write_bytes(data.draw(mutated_bytes(saved_file)))
    with contextlib.suppress(mdsl.MdslError):
        mdsl.load(path)


# -- manifests ---------------------------------------------------------------------------------
X = np.arange(8, dtype=np.float32).reshape(2, 4)


@pytest.fixture(scope="module")
def saved_executable(tmp_path_factory):
    root = tmp_path_factory.mktemp("exe")
    with pytest.MonkeyPatch.context() as m:
        m.setenv("MDSL_CACHE_DIR", str(root / "cache"))
        m.setenv("MDSL_CONFIG_DIR", str(root / "config"))
        with mdsl.Graph("small") as g:
            x = g.input("x", (2, 4))
            g.output(ops.softmax(x * 2.0), "y")
        exe = mdsl.compile(g, backend="c")
        exe.save(root / "exe")
        yield root, exe(x=X)["y"]


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
@PROFILE
@given(data=st.data())
def test_mutated_manifests_load_and_run_right_or_raise(
    saved_executable, tmp_path, monkeypatch, data
):
    root, expected = saved_executable
    monkeypatch.setenv("MDSL_CACHE_DIR", str(root / "cache"))
    monkeypatch.setenv("MDSL_CONFIG_DIR", str(root / "config"))
    folder = tmp_path / "exe"
    if folder.exists():
        shutil.rmtree(folder)
    shutil.copytree(root / "exe", folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    text = json.dumps(data.draw(mutated(manifest))).encode()
    (folder / "manifest.json").write_bytes(text)
    (folder / "manifest.sha256").write_text(saved.signature_line(text))
    try:
        out = mdsl.load_executable(folder)(x=X)["y"]
    except mdsl.MdslError:
        return
    np.testing.assert_allclose(out, expected, rtol=1e-6)


# -- ONNX protobufs ----------------------------------------------------------------------------
def _onnx_model() -> bytes:
    import onnx
    import onnx.helper as oh
    from onnx import numpy_helper

    f, i64 = onnx.TensorProto.FLOAT, onnx.TensorProto.INT64
    nodes = [
        oh.make_node("MatMul", ["x", "w"], ["h"], name="/mm/MatMul"),
        oh.make_node("Relu", ["h"], ["r"], name="/act/Relu"),
        oh.make_node("Shape", ["r"], ["s"]),
        oh.make_node("Reshape", ["r", "shape"], ["flat"]),
        oh.make_node("ReduceSum", ["flat", "axes"], ["y"], keepdims=1),
        oh.make_node("Gather", ["s", "zero"], ["n"], axis=0),
    ]
    graph = oh.make_graph(
        nodes,
        "m",
        [oh.make_tensor_value_info("x", f, ["N", 4])],
        [oh.make_tensor_value_info("y", f, None), oh.make_tensor_value_info("n", i64, None)],
        initializer=[
            numpy_helper.from_array(np.ones((4, 3), np.float32), "w"),
            numpy_helper.from_array(np.array([-1], np.int64), "shape"),
            numpy_helper.from_array(np.array([0], np.int64), "axes"),
            numpy_helper.from_array(np.array(0, np.int64), "zero"),
        ],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)]).SerializeToString()


ONNX_MODEL = _onnx_model()


@PROFILE
@given(mutated_bytes(ONNX_MODEL))
def test_mutated_onnx_protobufs_import_or_raise_graph_errors(data):
    with contextlib.suppress(mdsl.MdslError):
        mdsl.frontends.onnx.load(data)
