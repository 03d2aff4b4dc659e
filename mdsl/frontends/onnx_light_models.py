"""ONNX's "light" model zoo: real architectures checked end to end against ONNX Runtime.

The `onnx` package ships ResNet-50, DenseNet-121, Inception v1/v2, ShuffleNet,
SqueezeNet, VGG-19, AlexNet and ZFNet in `onnx/backend/test/data/light/` with their
weights replaced by `ConstantOfShape` nodes (every weight one value), which makes the
networks' outputs constant. `with_random_weights` turns each such node into an
initializer of seeded random values (He-scaled for matrices and kernels, positive for
vectors, so batch-norm variances stay valid), giving a model whose output depends on
its input; mdsl and ONNX Runtime then run the same model on the same random input.

`check_light_model(name, backend=...)` imports, optimizes and runs one model through an
mdsl backend ("python" is the interpreter; "c" and "numba" go through `mdsl.compile`)
and returns what happened.
"""

from __future__ import annotations

import os
import time
import zlib
from dataclasses import dataclass

import numpy as np

from mdsl.ir.errors import MdslError


def light_model_dir() -> str:
    import onnx

    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


def light_model_names() -> list[str]:
    """Names of the light models the installed onnx package ships ("resnet50", ...)."""
    folder = light_model_dir()
    if not os.path.isdir(folder):
        return []
    names = [f[len("light_") : -len(".onnx")] for f in os.listdir(folder) if f.endswith(".onnx")]
    return sorted(names)


def load_light_model(name: str):
    import onnx

    return onnx.load(os.path.join(light_model_dir(), f"light_{name}.onnx"))


def with_random_weights(model, seed: int = 0):
    """A copy of `model` whose constant ConstantOfShape weights are seeded random
    initializers."""
    from onnx import numpy_helper

    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    out = type(model)()
    out.CopyFrom(model)
    kept = []
    for node in out.graph.node:
        shape = inits.get(node.input[0]) if node.op_type == "ConstantOfShape" else None
        if shape is None:
            kept.append(node)
            continue
        value = _random_weight(node.output[0], tuple(int(d) for d in shape), seed)
        out.graph.initializer.append(numpy_helper.from_array(value, node.output[0]))
    del out.graph.node[:]
    out.graph.node.extend(kept)
    return out


def logits_model(model):
    """A copy of `model` ending before its final Softmax: with random weights the
    probabilities saturate to one-hot vectors, the logits stay informative."""
    from onnx import helper

    last = model.graph.node[-1]
    if last.op_type != "Softmax" or last.output[0] != model.graph.output[0].name:
        return model
    out = type(model)()
    out.CopyFrom(model)
    del out.graph.node[-1]
    del out.graph.output[:]
    out.graph.output.append(helper.make_tensor_value_info(last.input[0], 1, None))
    return out


def _random_weight(name: str, shape: tuple, seed: int) -> np.ndarray:
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    if len(shape) <= 1:
        return rng.uniform(0.1, 1.0, size=shape).astype(np.float32)
    fan_in = int(np.prod(shape[1:]))
    weight = rng.standard_normal(shape, dtype=np.float32)
    weight *= np.float32(np.sqrt(2.0 / fan_in))
    return weight


def random_feeds(model, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded standard-normal values for the model's (non-initializer) float inputs."""
    inits = {i.name for i in model.graph.initializer}
    rng = np.random.default_rng(seed)
    feeds = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        shape = tuple(d.dim_value for d in vi.type.tensor_type.shape.dim)
        feeds[vi.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


@dataclass
class LightModelResult:
    """What happened to one light model: node counts, accuracy, times (seconds)."""

    name: str
    onnx_nodes: int
    imported_nodes: int = 0
    optimized_nodes: int = 0
    max_abs_error: float = float("nan")
    scale: float = float("nan")  # max |ONNX Runtime output|
    import_s: float = 0.0
    optimize_s: float = 0.0
    compile_s: float = 0.0
    mdsl_run_s: float = 0.0
    ort_run_s: float = 0.0
    error: str = ""

    @property
    def ok(self) -> bool:
        """Imported and ran without an error (see `matches` for the values)."""
        return not self.error

    @property
    def matches(self) -> bool:
        """The outputs agree with ONNX Runtime's: max abs error <= 1e-4 * max |logit|."""
        return self.ok and bool(self.max_abs_error <= 1e-4 * self.scale)


def check_light_model(
    name: str, *, backend: str = "python", seed: int = 0, level: int = 2, repeats: int = 1
) -> LightModelResult:
    """Import, optimize and run light model `name` on `backend`; compare with ONNX
    Runtime on the same random input and weights. Run times are the best of `repeats`
    runs after a first one (which, for a compiled backend, follows the compilation)."""
    import mdsl
    from mdsl.frontends.onnx_import import import_model, mdsl_name

    model = logits_model(with_random_weights(load_light_model(name), seed))
    result = LightModelResult(name, len(model.graph.node))
    feeds = random_feeds(model, seed)
    mdsl_feeds = {mdsl_name(k): v for k, v in feeds.items()}
    try:
        start = time.perf_counter()
        g = import_model(model, label=f"light_{name}")
        result.import_s, result.imported_nodes = time.perf_counter() - start, len(g)
        start = time.perf_counter()
        g = mdsl.optimize(g, level=level)
        result.optimize_s, result.optimized_nodes = time.perf_counter() - start, len(g)
        start = time.perf_counter()
        run = _runner(g, backend, level)
        result.compile_s = time.perf_counter() - start
        outputs = run(mdsl_feeds)
        result.mdsl_run_s = _best_time(
            lambda: run(mdsl_feeds), repeats if backend != "python" else 0
        )
    except MdslError as e:
        result.error = f"{type(e).__name__}: {e}"
        return result
    expected, result.ort_run_s = run_onnxruntime(model, feeds, repeats)
    got = outputs[mdsl_name(model.graph.output[0].name)]
    diff = np.abs(got.astype(np.float64) - expected.astype(np.float64))
    result.max_abs_error = float(diff.max())
    result.scale = float(np.abs(expected).max())
    return result


def _runner(g, backend: str, level: int):
    """feeds -> outputs on `backend` (compiled first for a compiled backend)."""
    import mdsl

    if backend == "python":
        return lambda feeds: mdsl.interpret(g, feeds)
    exe = mdsl.compile(g, backend=backend, opt_level=level)
    return exe.run


def _best_time(fn, repeats: int) -> float:
    """Seconds of the fastest of `repeats` calls (one timed call when repeats is 0)."""
    times = []
    for _ in range(max(repeats, 1)):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def run_onnxruntime(model, feeds: dict, repeats: int = 1) -> tuple[np.ndarray, float]:
    """(first output, seconds of the best of `repeats` runs after a warm-up run) under
    ONNX Runtime."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3  # the light models carry unused initializers
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    out = session.run(None, feeds)[0]
    return out, _best_time(lambda: session.run(None, feeds), repeats)
