"""What the command line reads: model files (`build() -> mdsl.Graph`), saved graphs, feed
files and random feeds. Every failure is an `MdslError` naming the file.

>>> import mdsl
>>> with mdsl.Graph("g") as g:
...     g.output(g.input("x", ("N", 3)) * 2.0, "y")
>>> {k: (v.shape, v.dtype.name) for k, v in random_feeds(g, {"N": 4}).items()}
{'x': ((4, 3), 'float32')}
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import sys
import traceback
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from mdsl.ir.dim import Dim
from mdsl.ir.errors import MdslError
from mdsl.ir.graph import Graph

DEFAULT_SYMBOL_SIZE = 2
INT_FEED_RANGE = (0, 10)  # random integer feeds: small, so index inputs stay in range


class ModelFileError(MdslError):
    """A model, graph or feed file could not be read or did not give what was expected."""


# -- graphs ----------------------------------------------------------------------------------
def load_graph(path: str, build_args: Mapping[str, object] | None = None) -> Graph:
    """The graph of `path`: a saved graph (`.mdsl`), an ONNX model (`.onnx`) or a Python
    model file whose `build()` (called with `build_args`) returns an `mdsl.Graph`."""
    file = Path(path)
    if not file.is_file():
        raise ModelFileError(f"{path}: no such file")
    if file.suffix == ".mdsl":
        if build_args:
            raise ModelFileError(f"{path}: a saved graph takes no build arguments")
        from mdsl.ir.serialize import load

        return load(file)
    if file.suffix == ".onnx":
        if build_args:
            raise ModelFileError(f"{path}: an ONNX model takes no build arguments")
        from mdsl.frontends import onnx

        return onnx.load(str(file))
    if file.suffix != ".py":
        raise ModelFileError(
            f"{path}: expected a Python model file (.py), an ONNX model (.onnx) "
            "or a saved graph (.mdsl)"
        )
    build = _build_function(file)
    graph = _call_user_code(file, lambda: build(**dict(build_args or {})), "build()")
    if not isinstance(graph, Graph):
        raise ModelFileError(f"{path}: build() returned {type(graph).__name__}, not an mdsl.Graph")
    return graph


def _build_function(file: Path):
    digest = hashlib.sha1(str(file.resolve()).encode()).hexdigest()[:10]
    name = f"mdsl_model_{file.stem}_{digest}"
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise ModelFileError(f"{file}: cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look modules up by name
    folder = str(file.resolve().parent)
    sys.path.insert(0, folder)  # the model may import its neighbours
    try:
        _call_user_code(file, lambda: spec.loader.exec_module(module), "importing it")
    finally:
        if folder in sys.path:
            sys.path.remove(folder)
    build = getattr(module, "build", None)
    if not callable(build):
        raise ModelFileError(f"{file}: a model file defines build() -> mdsl.Graph")
    return build


def _call_user_code(file: Path, fn, doing: str):
    """Run `fn`; a non-mdsl exception becomes a ModelFileError naming the user's line."""
    try:
        return fn()
    except MdslError:
        raise
    except SyntaxError as e:
        raise ModelFileError(f"{e.filename}:{e.lineno}: SyntaxError: {e.msg}") from e
    except Exception as e:
        where = _user_frame(e, file)
        raise ModelFileError(
            f"{file}: {doing} raised {type(e).__name__}: {e}" + (f" (at {where})" if where else "")
        ) from e


def _user_frame(error: BaseException, file: Path) -> str | None:
    """`file:line` of the innermost traceback frame in `file` (else the innermost frame
    outside mdsl)."""
    frames = traceback.extract_tb(error.__traceback__)
    target = file.resolve()
    package = Path(__file__).resolve().parents[1]
    mine = [f for f in frames if Path(f.filename).resolve() == target]
    outside = [f for f in frames if package not in Path(f.filename).resolve().parents]
    frame = (mine or outside or [None])[-1]
    return None if frame is None else f"{frame.filename}:{frame.lineno}"


def parse_assignments(items: list[str] | None, what: str) -> dict[str, object]:
    """`["depth=2", "name=tiny"]` -> `{"depth": 2, "name": "tiny"}` (Python literals, else
    strings).

    >>> parse_assignments(["depth=2", "dims=(1, 2)", "name=tiny"], "--arg")
    {'depth': 2, 'dims': (1, 2), 'name': 'tiny'}
    """
    out: dict[str, object] = {}
    for item in items or []:
        key, sep, text = item.partition("=")
        if not sep or not key.strip().isidentifier():
            raise ModelFileError(f"{what} {item!r}: expected NAME=VALUE")
        try:
            out[key.strip()] = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            out[key.strip()] = text
    return out


# -- feeds -----------------------------------------------------------------------------------
def load_feeds(path: str, g: Graph) -> dict[str, np.ndarray]:
    """Feeds from an `.npz` (arrays named like the inputs) or an `.npy` (the one input)."""
    file = Path(path)
    if not file.is_file():
        raise ModelFileError(f"{path}: no such feed file")
    try:
        if file.suffix == ".npz":
            with np.load(file, allow_pickle=False) as archive:
                return {name: archive[name] for name in archive.files}
        if file.suffix == ".npy":
            array = np.load(file, allow_pickle=False)
        else:
            raise ModelFileError(f"{path}: feeds come from a .npz (one array per input) or .npy")
    except (OSError, ValueError, EOFError) as e:
        raise ModelFileError(f"{path}: not a readable numpy file ({e})") from None
    if len(g.inputs) != 1:
        names = ", ".join(g.inputs) or "none"
        raise ModelFileError(f"{path}: a .npy feeds one input; graph has {names}: use a .npz")
    return {next(iter(g.inputs)): array}


def random_feeds(
    g: Graph, symbols: Mapping[str, int] | None = None, seed: int = 0
) -> dict[str, np.ndarray]:
    """Random feeds for every input: floats standard normal, integers in [0, 10), bools
    fair. Symbolic dims take `symbols[name]`, else 2 (within the Dim's declared range)."""
    sizes = dict(symbols or {})
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, tensor in g.inputs.items():
        shape = tuple(_size(d, sizes) for d in tensor.type.shape)
        dtype = tensor.type.dtype
        if dtype.value == "bool":
            value = rng.random(shape) < 0.5
        elif dtype.is_float:
            value = rng.standard_normal(shape, dtype=np.float64)
        else:
            value = rng.integers(*INT_FEED_RANGE, size=shape)
        feeds[name] = np.asarray(value).astype(dtype.np)
    return feeds


def _size(dim, sizes: dict) -> int:
    if isinstance(dim, int):
        return dim
    for symbol in sorted(dim.free_symbols):
        if symbol not in sizes:
            sizes[symbol] = _default_size(dim) if dim.name == symbol else DEFAULT_SYMBOL_SIZE
    try:
        return int(dim.evaluate(sizes))
    except MdslError as e:
        raise ModelFileError(f"cannot size dim {dim}: {e.message}") from None


def _default_size(dim: Dim) -> int:
    size = max(DEFAULT_SYMBOL_SIZE, dim.min)
    return size if dim.max is None else min(size, dim.max)


def save_outputs(path: str, outputs: Mapping[str, np.ndarray]) -> None:
    file = Path(path)
    if file.suffix != ".npz":
        raise ModelFileError(f"{path}: outputs are written as .npz")
    try:
        np.savez(file, **{name: np.asarray(v) for name, v in outputs.items()})
    except OSError as e:
        raise ModelFileError(f"{path}: cannot write ({e.strerror or e})") from None
