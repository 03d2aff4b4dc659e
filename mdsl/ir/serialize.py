"""Saving and loading graphs: a versioned JSON document, constants as .npy, no pickle.

`mdsl.save(g, path)` writes a zip holding `graph.json` and one `constants/<key>.npy` per
constant; `g.to_json()` inlines constants as base64 .npy bytes. Loading validates every
field, reads arrays with `allow_pickle=False` and verifies the rebuilt graph, so a
hostile or damaged file gets a GraphError, never a crash or a half-built graph.

Bounds, all checked before the work they bound: a zip member may inflate to at most
`mdsl.ir.safe_files.MAX_INFLATION` (64) times its compressed size, `graph.json` to at
most `MAX_JSON_BYTES` (512 MiB) and a constant to at most `MAX_MEMBER_BYTES` (4 GiB);
JSON nests at most `MAX_JSON_DEPTH` deep and subgraphs at most
`mdsl.ir.verify.MAX_SUBGRAPH_DEPTH`. Loading takes time linear in the file.
"""

from __future__ import annotations

import base64
import io
import json
import math
import os
import re
import tempfile
import zipfile
from collections import ChainMap
from typing import NoReturn

import numpy as np
from numpy.lib import format as npy_format

from mdsl.ir.dim import Dim, dim_from_json
from mdsl.ir.dtype import DType
from mdsl.ir.errors import GraphError, MdslError
from mdsl.ir.graph import Graph, Layer, Node, Tensor
from mdsl.ir.initializer import ParamInit
from mdsl.ir.safe_files import check_zip_member
from mdsl.ir.tensor_type import TensorType
from mdsl.ir.tracebacks import api_boundary

FORMAT = "mdsl-graph"
VERSION = 1
MAX_MEMBER_BYTES = 1 << 32  # a constant's .npy, inflated
MAX_JSON_BYTES = 1 << 29  # graph.json, inflated (10^5 nodes take about 30 MB)
MAX_JSON_DEPTH = 256  # [ and { nesting (a subgraph level takes 4)


# -- encoding -----------------------------------------------------------------------------
class _ArrayStore:
    """Where arrays go: inline base64 (JSON text) or separate zip members."""

    def __init__(self, inline: bool):
        self.inline = inline
        self.members: dict[str, np.ndarray] = {}

    def put(self, array: np.ndarray):
        if self.inline:
            return {"npy": base64.b64encode(_npy_bytes(array)).decode("ascii")}
        key = f"c{len(self.members)}"
        self.members[key] = array
        return {"ref": key}

    def describe(self, init: ParamInit):
        """What to write for a deferred parameter instead of its drawn value (None: the
        value; a fingerprint writes its recipe, `mdsl.runtime.compile_cache`)."""
        return None


def _npy_bytes(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    if array.dtype == DType.bfloat16.np:  # .npy cannot name bfloat16: store its bits
        array = array.view(np.uint16)
    # np.asarray, not np.ascontiguousarray: the latter turns a 0-d array into shape (1,)
    np.save(buf, np.asarray(array, order="C"), allow_pickle=False)
    return buf.getvalue()


def _encode_attr(value, store: _ArrayStore):
    if value is None:
        return None
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    if isinstance(value, float):
        return {"float": value}
    if isinstance(value, str):
        return {"str": value}
    if isinstance(value, DType):
        return {"dtype": value.value}
    if isinstance(value, Dim):
        return {"dim": value.to_json()}
    if isinstance(value, ParamInit):
        recipe = store.describe(value)
        if recipe is not None:
            return recipe
        value = value.materialize()
    if isinstance(value, np.ndarray):
        return {"array": store.put(value), "dtype": DType.of(value.dtype).value}
    if isinstance(value, (tuple, list)):
        return {"list": [_encode_attr(v, store) for v in value]}
    raise GraphError(f"cannot serialize attr value {value!r:.60}")


class _DimJson:
    """Each Dim object's JSON form, made once per document: BERT-base's 2,000 tensor
    types share 51 Dim objects, and making their forms was half the document's time.
    By identity, not equality: equal Dims may declare other ranges, which the form
    holds (each Dim is kept, so its id stays its own)."""

    def __init__(self):
        self._done: dict[int, tuple[Dim, object]] = {}

    def __call__(self, d: Dim):
        found = self._done.get(id(d))
        if found is None:
            found = self._done[id(d)] = (d, d.to_json())
        return found[1]


def _encode_graph(g: Graph, store: _ArrayStore, dims: _DimJson | None = None) -> dict:
    dims = dims or _DimJson()
    return {
        "name": g.name,
        "layers": [{"path": lay.path, "function": lay.function} for lay in g.layers.values()],
        "nodes": [_encode_node(n, store, dims) for n in g],
    }


def _encode_node(node: Node, store: _ArrayStore, dims: _DimJson) -> dict:
    doc = {
        "name": node.name,
        "op_type": node.op_type,
        "inputs": [None if t is None else t.name for t in node.inputs],
        "attrs": {k: _encode_attr(v, store) for k, v in node.attrs.items()},
        "outputs": [t.type.to_json(dims) for t in node.outputs],
        "layer": node.layer,
        "source": node.source,
    }
    for key in ("device", "fusion_group"):
        if getattr(node, key) is not None:
            doc[key] = getattr(node, key)
    if node.subgraphs:
        doc["subgraphs"] = {k: _encode_graph(s, store, dims) for k, s in node.subgraphs.items()}
    return doc


def graph_document(g: Graph, store) -> dict:
    """`g` as `graph_to_json` writes it, with `store.put(array)` and
    `store.describe(init)` (see `_ArrayStore`) deciding what stands for each array and
    deferred parameter (a fingerprint: their digests and recipes)."""
    return _encode_graph(g, store)


def graph_to_json(g: Graph) -> str:
    doc = {"format": FORMAT, "version": VERSION, "graph": _encode_graph(g, _ArrayStore(True))}
    return json.dumps(doc, separators=(",", ":"))


@api_boundary
def save(g: Graph, path) -> None:
    """Write `g` to `path` (a zip: `graph.json` + `constants/*.npy`), atomically."""
    store = _ArrayStore(inline=False)
    doc = {"format": FORMAT, "version": VERSION, "graph": _encode_graph(g, store)}
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".mdsl-", dir=folder)
    except OSError as e:
        raise GraphError(f"cannot write {path}: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "wb") as f, zipfile.ZipFile(f, "w", zipfile.ZIP_STORED) as z:
            z.writestr("graph.json", json.dumps(doc, separators=(",", ":")))
            for key, array in store.members.items():
                z.writestr(f"constants/{key}.npy", _npy_bytes(array))
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


# -- decoding -----------------------------------------------------------------------------
_MALFORMED = "malformed mdsl graph: "


def _fail(message: str) -> NoReturn:
    raise GraphError(_MALFORMED + message)


def _expect(value, kind, what: str):
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        _fail(f"{what} should be {getattr(kind, '__name__', kind)}, got {type(value).__name__}")
    return value


class _ArraySource:
    def __init__(self, zf: zipfile.ZipFile | None):
        self.zf = zf

    def get(self, spec) -> np.ndarray:
        _expect(spec, dict, "array")
        if "npy" in spec:
            raw = base64.b64decode(_expect(spec["npy"], str, "inline array"), validate=True)
        elif "ref" in spec and self.zf is not None:
            key = _expect(spec["ref"], str, "array ref")
            raw = self._member(f"constants/{key}.npy")
        else:
            _fail(f"bad array reference {spec!r:.60}")
        return _read_npy(raw)

    def _member(self, name: str) -> bytes:
        if self.zf is None:
            _fail(f"member {name} referenced by a document that is no zip")
        try:
            info = self.zf.getinfo(name)
        except KeyError:
            _fail(f"missing member {name}")
        _check_member_size(info, MAX_MEMBER_BYTES)
        return _read_member(self.zf, name)


def _check_member_size(info: zipfile.ZipInfo, cap: int) -> None:
    try:
        check_zip_member(info, cap=cap, error=GraphError)
    except GraphError as e:
        _fail(f"member {e.message}")


def _read_member(zf: zipfile.ZipFile, name: str) -> bytes:
    try:
        return zf.read(name)
    except Exception as e:  # zlib.error, NotImplementedError (method), RuntimeError (encrypted)...
        _fail(f"cannot read {name} ({type(e).__name__}: {e})")


def _read_npy(raw: bytes) -> np.ndarray:
    """An array from .npy bytes. Object dtypes (pickle) are refused, and the header's shape
    must match the data before anything is allocated (np.load would allocate first)."""
    buf = io.BytesIO(raw)
    try:
        version = npy_format.read_magic(buf)
        if version not in ((1, 0), (2, 0)):
            _fail(f".npy version {version} is not supported")
        read_header = (
            npy_format.read_array_header_1_0
            if version == (1, 0)
            else npy_format.read_array_header_2_0
        )
        shape, fortran_order, dtype = read_header(buf)
    except ValueError as e:
        _fail(f"not .npy data ({e})")
    if dtype.hasobject:
        _fail(f"array of dtype {dtype} holds Python objects (pickle), which are refused")
    count, start = math.prod(shape), buf.tell()
    if len(raw) - start != count * dtype.itemsize:
        _fail(f".npy header announces {dtype}{list(shape)}, data has {len(raw) - start} bytes")
    flat = np.frombuffer(raw, dtype, count, offset=start)
    if fortran_order:
        return np.asarray(flat.reshape(shape[::-1]).T, order="C")
    return flat.reshape(shape)


def _decode_attr(obj, source: _ArraySource):
    if obj is None:
        return None
    _expect(obj, dict, "attr value")
    if len(obj) == 2 and "array" in obj:
        dt = DType.of(_expect(obj["dtype"], str, "array dtype"))
        array = source.get(obj["array"])
        if dt == DType.bfloat16 and array.dtype == np.uint16:  # stored as its bits
            array = array.view(dt.np)
        if array.dtype != dt.np:
            _fail(f"array stored as {array.dtype}, declared {dt}")
        array.setflags(write=False)
        return array
    if len(obj) != 1:
        _fail(f"bad attr value {obj!r:.60}")
    ((tag, v),) = obj.items()
    decoders = {
        "bool": lambda: _expect(v, bool, "bool attr"),
        "int": lambda: _expect(v, int, "int attr"),
        "float": lambda: float(_expect(v, (int, float), "float attr")),
        "str": lambda: _expect(v, str, "str attr"),
        "dtype": lambda: DType.of(_expect(v, str, "dtype attr")),
        "dim": lambda: dim_from_json(v),
        "list": lambda: tuple(_decode_attr(x, source) for x in _expect(v, list, "list attr")),
    }
    if tag not in decoders:
        _fail(f"unknown attr tag {tag!r}")
    return decoders[tag]()


def _decode_graph(doc, source: _ArraySource, parent: Graph | None, outer) -> Graph:
    _expect(doc, dict, "graph")
    g = Graph(_expect(doc.get("name"), str, "graph name"))
    g.parent = parent
    for lay in _expect(doc.get("layers", []), list, "layers"):
        path = _expect(_expect(lay, dict, "layer").get("path"), str, "layer path")
        g.layers[path] = Layer(path, _expect(lay.get("function", ""), str, "layer function"))
        g.layer_names.reserve(path)
    tensors = ChainMap({}, outer)  # this graph's tensors over the enclosing ones'
    for ndoc in _expect(doc.get("nodes"), list, "nodes"):
        node = _decode_node(ndoc, source, g, tensors)
        g.append(node)
        for t in node.outputs:
            tensors[t.name] = t
    return g


def _decode_node(doc, source: _ArraySource, g: Graph, tensors) -> Node:
    _expect(doc, dict, "node")
    name = _expect(doc.get("name"), str, "node name")
    inputs: list[Tensor | None] = []
    for ref in _expect(doc.get("inputs", []), list, f"inputs of {name}"):
        if ref is None:
            inputs.append(None)
        elif _expect(ref, str, f"input of {name}") in tensors:
            inputs.append(tensors[ref])
        else:
            _fail(f"node {name} reads {ref!r}, which no earlier node produces")
    attrs = {
        _expect(k, str, "attr name"): _decode_attr(v, source)
        for k, v in _expect(doc.get("attrs", {}), dict, f"attrs of {name}").items()
    }
    node = Node(
        name,
        _expect(doc.get("op_type"), str, f"op type of {name}"),
        inputs,
        attrs,
        layer=_expect(doc.get("layer", ""), str, "layer"),
        source=_optional_str(doc, "source", name),
        device=_optional_str(doc, "device", name),
        fusion_group=_optional_str(doc, "fusion_group", name),
    )
    types = [TensorType.from_json(t) for t in _expect(doc.get("outputs", []), list, "outputs")]
    node.outputs = [Tensor(t, node, i) for i, t in enumerate(types)]
    subs = _expect(doc.get("subgraphs", {}), dict, f"subgraphs of {name}")
    if subs:  # a layer over the table, not a copy: loading stays linear in nodes
        visible = tensors.new_child({t.name: t for t in node.outputs})
        node.subgraphs = {k: _decode_graph(s, source, g, visible) for k, s in subs.items()}
    return node


def _optional_str(doc: dict, key: str, node: str) -> str | None:
    value = doc.get(key)
    return None if value is None else _expect(value, str, f"{key} of {node}")


def _decode_document(text, source: _ArraySource) -> Graph:
    from mdsl.ir.verify import verify

    if not isinstance(text, (str, bytes, bytearray)):
        _fail(f"expected JSON text, got {type(text).__name__}")
    depth = json_depth(text)
    if depth > MAX_JSON_DEPTH:
        _fail(f"JSON nests {depth} deep; the limit is {MAX_JSON_DEPTH}")
    try:
        doc = json.loads(text)
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        _fail(f"not JSON ({type(e).__name__}: {e})")
    _expect(doc, dict, "document")
    if doc.get("format") != FORMAT:
        _fail(f"not an mdsl graph document (format {doc.get('format')!r:.40})")
    version = doc.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version != VERSION:
        _fail(f"document version {doc.get('version')!r:.20} is not supported (this is {VERSION})")
    try:
        g = _decode_graph(doc.get("graph"), source, None, {})
    except MdslError as e:
        message = e.message if e.message.startswith(_MALFORMED) else _MALFORMED + e.message
        raise GraphError(message) from None
    except (
        ValueError,
        TypeError,
        KeyError,
        AttributeError,
        OSError,
        EOFError,
        zipfile.BadZipFile,
        RecursionError,
        ArithmeticError,
    ) as e:
        _fail(f"{type(e).__name__}: {e}")
    verify(g)
    return g


_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_DEPTH_STEP = np.zeros(256, np.int8)
_DEPTH_STEP[[ord("["), ord("{")]] = 1
_DEPTH_STEP[[ord("]"), ord("}")]] = -1


def json_depth(text: str | bytes | bytearray) -> int:
    """How deep the brackets of JSON `text` nest (strings skipped), in linear time and
    without recursion: the depth check that runs before `json.loads`.

    >>> json_depth('{"a": [1, {"b": "[[["}]}')
    3
    """
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else bytes(text)
    skeleton = np.frombuffer(_JSON_STRING.sub(b"", raw), np.uint8)
    if skeleton.size == 0:
        return 0
    return int(np.cumsum(_DEPTH_STEP[skeleton], dtype=np.int64).max(initial=0))


def graph_from_json(text: str | bytes) -> Graph:
    return _decode_document(text, _ArraySource(None))


@api_boundary
def load(path) -> Graph:
    """Read a graph written by `save`; GraphError on anything malformed."""
    try:
        with zipfile.ZipFile(path) as zf:
            if "graph.json" not in zf.namelist():
                _fail(f"{os.fspath(path)} has no graph.json")
            _check_member_size(zf.getinfo("graph.json"), MAX_JSON_BYTES)
            text = _read_member(zf, "graph.json")
            return _decode_document(text, _ArraySource(zf))
    except FileNotFoundError:
        raise GraphError(f"no such file: {os.fspath(path)}") from None
    except (zipfile.BadZipFile, EOFError, OSError, ValueError) as e:
        raise GraphError(f"{os.fspath(path)} is not a readable mdsl file ({e})") from None
