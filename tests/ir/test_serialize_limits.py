"""Saving and loading at the edges (complements test_serialize.py): 0-d constants, arrays
whose .npy header lies about their size, zip members that cannot be decompressed, version
fields of the wrong type, numbers JSON allows but Python cannot convert, unwritable paths."""

from __future__ import annotations

import base64
import io
import json
import zipfile

import numpy as np
import pytest

import mdsl
from mdsl import ops


def small_graph() -> mdsl.Graph:
    with mdsl.Graph("small") as g:
        x = g.input("x", ("N", 4))
        with mdsl.scope("S"):
            y = ops.reshape(ops.relu(x) * mdsl.param("w", (4,)), shape=(-1,))
        g.output(y * 2.0, "y")  # the Python scalar becomes a 0-d constant
    return g


def _doc() -> dict:
    return json.loads(small_graph().to_json())


def _node(doc, name):
    return next(n for n in doc["graph"]["nodes"] if n["name"] == name)


def _refused(doc_or_text) -> mdsl.GraphError:
    text = doc_or_text if isinstance(doc_or_text, str) else json.dumps(doc_or_text)
    with pytest.raises(mdsl.GraphError) as e:
        mdsl.Graph.from_json(text)
    assert "\n" not in str(e.value)
    return e.value


@pytest.mark.parametrize(
    "value",
    [np.float32(2.5), np.array(7, np.int64), np.array(True), np.float16(-0.0)],
)
def test_zero_d_constants_keep_their_shape(value, tmp_path):
    with mdsl.Graph() as g:
        g.output(g.const("c", value), "c")
    for back in (mdsl.Graph.from_json(g.to_json()), _saved_and_loaded(g, tmp_path)):
        got = back.node("c").const_value()
        assert got.shape == () and got.dtype == np.asarray(value).dtype
        assert got.tobytes() == np.asarray(value).tobytes()


def _saved_and_loaded(g, tmp_path):
    mdsl.save(g, tmp_path / "g.mdsl")
    return mdsl.load(tmp_path / "g.mdsl")


def test_fortran_ordered_npy_is_read_in_the_right_order():
    doc = _doc()
    value = np.asfortranarray(np.arange(4, dtype=np.float32).reshape(2, 2))
    buf = io.BytesIO()
    np.save(buf, value)
    with mdsl.Graph() as g:
        g.output(g.const("m", np.zeros((2, 2), np.float32)), "m")
    doc = json.loads(g.to_json())
    _node(doc, "m")["attrs"]["value"]["array"]["npy"] = base64.b64encode(buf.getvalue()).decode()
    got = mdsl.Graph.from_json(json.dumps(doc)).node("m").const_value()
    np.testing.assert_array_equal(got, value)


def _header_claiming(shape) -> str:
    """.npy bytes of 4 float32s whose header claims `shape`."""
    buf = io.BytesIO()
    np.save(buf, np.ones(4, np.float32))
    raw = bytearray(buf.getvalue())
    start, end = raw.index(b"{"), raw.index(b"\n")
    header = f"{{'descr': '<f4', 'fortran_order': False, 'shape': {shape}, }}".encode()
    assert len(header) <= end - start
    raw[start:end] = header.ljust(end - start)
    return base64.b64encode(bytes(raw)).decode()


@pytest.mark.parametrize("shape", [(2**40,), (2**31, 2**31), (5,), (3,)])
def test_npy_header_announcing_another_size_is_refused_before_allocating(shape):
    doc = _doc()
    _node(doc, "S/w")["attrs"]["value"]["array"]["npy"] = _header_claiming(shape)
    assert "header announces" in str(_refused(doc))


@pytest.mark.parametrize(
    ("version", "shown"), [(True, "True"), (1.0, "1.0"), ([1], "[1]"), (None, "None")]
)
def test_version_must_be_the_integer_one(version, shown):
    doc = _doc()
    doc["version"] = version
    assert f"document version {shown} is not supported" in str(_refused(doc))


def test_float_attr_too_large_for_a_float():
    doc = _doc()
    _node(doc, "S/Reshape")["attrs"]["extra"] = {"float": 10**400}
    assert "malformed mdsl graph" in str(_refused(doc))


def test_bfloat16_declared_over_other_stored_bits():
    doc = _doc()
    value = _node(doc, "S/w")["attrs"]["value"]
    value["dtype"] = "bfloat16"  # stored bits are float32, not the uint16 bfloat16 uses
    assert "array stored as float32, declared bfloat16" in str(_refused(doc))


# -- zip members that cannot be read -------------------------------------------------------------
@pytest.fixture
def saved(tmp_path):
    path = tmp_path / "small.mdsl"
    mdsl.save(small_graph(), path)
    return path


def _members(path) -> dict:
    with zipfile.ZipFile(path) as z:
        return {n: z.read(n) for n in z.namelist()}


def _rewrite(path, members, compression=zipfile.ZIP_STORED):
    with zipfile.ZipFile(path, "w", compression) as z:
        for name, data in members.items():
            z.writestr(name, data)


def _load_refused(path) -> mdsl.GraphError:
    with pytest.raises(mdsl.GraphError) as e:
        mdsl.load(path)
    assert "\n" not in str(e.value)
    return e.value


def test_compressed_members_load_and_corrupted_ones_are_refused(saved):
    _rewrite(saved, _members(saved), zipfile.ZIP_DEFLATED)
    assert mdsl.load(saved).name == "small"
    raw = bytearray(saved.read_bytes())
    start = raw.index(b"graph.json") + len("graph.json")
    for i in range(start, start + 40):  # garble the deflate stream (zlib.error when read)
        raw[i] ^= 0x5A
    saved.write_bytes(bytes(raw))
    _load_refused(saved)


def test_unsupported_compression_method(saved):
    raw = bytearray(saved.read_bytes())
    for signature, offset in ((b"PK\x03\x04", 8), (b"PK\x01\x02", 10)):  # local, central
        at = raw.find(signature)
        while at >= 0:
            raw[at + offset : at + offset + 2] = (99).to_bytes(2, "little")
            at = raw.find(signature, at + 4)
    saved.write_bytes(bytes(raw))
    assert "cannot read graph.json" in str(_load_refused(saved))


def test_npz_archive_posing_as_a_constant(saved):
    members = _members(saved)
    buf = io.BytesIO()
    np.savez(buf, a=np.ones(4, np.float32))
    members["constants/c0.npy"] = buf.getvalue()
    _rewrite(saved, members)
    assert "not .npy data" in str(_load_refused(saved))


def test_saving_into_a_missing_folder(tmp_path):
    with pytest.raises(mdsl.GraphError, match=r"cannot write .*missing"):
        mdsl.save(small_graph(), tmp_path / "missing" / "g.mdsl")
    assert list(tmp_path.iterdir()) == []
