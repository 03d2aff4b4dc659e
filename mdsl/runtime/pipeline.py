"""Micro-batched pipeline execution on Ray: one actor per pipeline stage.

`mdsl.passes.pipeline_stages(g, n)` cuts a graph into stages; `RayPipeline(stages)`
starts one Ray actor per stage, each compiling its stage graph with an ordinary backend
(`mdsl.compile`). Running micro-batches submits, for each one, a task to every stage
actor, the Recv inputs of stage j being the Ray object references of what earlier
stages sent it: Ray starts a stage's task as soon as its inputs exist, so while stage 1
works on micro-batch m, stage 0 already works on m + 1. Only what a Send carries moves
between actors (one object per pair of stages and micro-batch); results come back to the
driver.

The same code runs on one machine and on a cluster: the driver connects with
`ray.init()` before building the pipeline (locally: `ray.init(num_cpus=2)`; a cluster
started with `ray start --head` on one node and `ray start --address=<head>:6379` on the
others: `ray.init(address="auto")`); see docs/distributed.md. Every node needs mdsl (and
the modules defining custom ops, loaded by `setup=`) installed.

Failures surface as `mdsl.ExecutionError` naming the stage: a stage whose graph raises
(the stage's error, with its micro-batch), an actor that dies, a stage that cannot start,
or one that does not finish within `timeout` seconds (its actors are then stopped and the
pipeline closed, rather than left hanging).

    import numpy as np, ray, mdsl
    from mdsl.runtime.pipeline import RayPipeline
    ray.init(num_cpus=2)
    stages = mdsl.passes.pipeline_stages(g, 2)
    with RayPipeline(stages, backend="c", threads=1) as pipe:
        outs = pipe.run([{"x": batch} for batch in micro_batches])   # one dict per micro-batch
        y = pipe({"x": big_batch}, micro_batches=4)["y"]              # split, run, join
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from mdsl.ir.errors import ExecutionError, MdslError
from mdsl.passes.pipeline import PipelineStages, Stage

DEFAULT_TIMEOUT = 300.0


def _ray():
    try:
        import ray
    except ImportError:
        raise ExecutionError(
            "the pipeline runtime runs on Ray, which is not installed: pip install ray"
        ) from None
    return ray


class StageWorker:
    """One pipeline stage, compiled once, run once per micro-batch (a Ray actor's body).

    `routes`: (destination stage, keys of the Sends it receives) in destination order;
    `outputs`: graph output name -> stage graph output name.
    """

    def __init__(
        self,
        index: int,
        name: str,
        graph,
        backend: str,
        opt_level: int,
        threads: int | None,
        routes: list[tuple[int, list[str]]],
        outputs: dict[str, str],
        setup: Callable[[], object] | None = None,
    ):
        from mdsl.runtime.compile import compile

        self.index, self.name = index, name
        self.routes, self.outputs = routes, outputs
        try:
            if setup is not None:
                setup()
            self.exe = compile(graph, backend=backend, opt_level=opt_level, threads=threads)
        except Exception as e:
            raise ExecutionError(f"{self._label()} failed to compile: {_describe(e)}") from None

    def _label(self) -> str:
        return f"pipeline stage {self.index} ({self.name})"

    def ready(self) -> int:
        return os.getpid()

    def run(self, micro_batch: int, feeds: dict, *received: dict):
        """The stage's results for one micro-batch: one dict per route, then the graph
        outputs it produces (a tuple when there are several)."""
        env = dict(feeds)
        for part in received:
            env.update(part)
        try:
            out = self.exe.run(env)
        except Exception as e:
            raise ExecutionError(
                f"{self._label()} failed on micro-batch {micro_batch}: {_describe(e)}"
            ) from None
        parts = [{key: out[key] for key in keys} for _, keys in self.routes]
        parts.append({o: out[s] for o, s in self.outputs.items()})
        return tuple(parts) if len(parts) > 1 else parts[0]


def _describe(e: BaseException) -> str:
    return str(e) if isinstance(e, MdslError) else f"{type(e).__name__}: {e}"


class RayPipeline:
    """The stages of `stages` as Ray actors (see the module doc); a context manager.

    `backend`, `opt_level`, `threads`: how each stage compiles (`mdsl.compile`);
    `num_cpus`: CPUs Ray reserves per stage actor; `timeout`: seconds a run may take
    before the stage still busy is reported; `start_timeout`: the same for starting the
    actors and compiling the stages; `setup`: a function each actor calls before
    compiling (to import modules that register custom ops); `actor_options`: more Ray
    actor options (`resources=`, `scheduling_strategy=`, ...), one dict for every stage or
    a list with one per stage (to put stage i on a given node of a cluster).
    Ray must be initialized (`ray.init(...)`) first.
    """

    def __init__(
        self,
        stages: PipelineStages,
        *,
        backend: str = "c",
        opt_level: int = 2,
        threads: int | None = 1,
        num_cpus: float = 1,
        timeout: float = DEFAULT_TIMEOUT,
        start_timeout: float = DEFAULT_TIMEOUT,
        setup: Callable[[], object] | None = None,
        actor_options: Mapping | Sequence[Mapping] | None = None,
    ):
        ray = _ray()
        if not ray.is_initialized():
            raise ExecutionError(
                "Ray is not initialized: call ray.init() first (a local cluster: "
                "ray.init(num_cpus=2); an existing cluster: ray.init(address='auto'))"
            )
        if not isinstance(stages, PipelineStages):
            raise ExecutionError(
                f"RayPipeline takes mdsl.passes.pipeline_stages(...), got {type(stages).__name__}"
            )
        self.stages = stages
        self.timeout = float(timeout)
        self.start_timeout = float(start_timeout)
        self._routes = [_routes(stages, s) for s in stages]
        self._sources = [sorted({src for src in s.recvs.values()}) for s in stages]
        actor = ray.remote(StageWorker)
        options = _actor_options(actor_options, len(stages), num_cpus)
        self._actors = [
            actor.options(**options[s.index]).remote(
                s.index,
                s.name,
                s.graph,
                backend,
                opt_level,
                threads,
                self._routes[s.index],
                dict(s.outputs),
                setup,
            )
            for s in stages
        ]
        self._closed = False
        self._await_ready()

    # -- starting and stopping --------------------------------------------------------------------
    def _await_ready(self) -> None:
        ray = _ray()
        deadline = time.monotonic() + self.start_timeout
        refs = [a.ready.remote() for a in self._actors]
        for stage, ref in zip(self.stages, refs):
            try:
                ray.get(ref, timeout=max(0.0, deadline - time.monotonic()))
            except ray.exceptions.GetTimeoutError:
                self.close()
                raise ExecutionError(
                    f"{_label(stage)} did not start within {self.start_timeout:g} s (is there a "
                    "free CPU for each stage in the Ray cluster?)"
                ) from None
            except ray.exceptions.RayError as e:
                self.close()
                raise self._error(stage, e, "failed to start") from None

    def close(self) -> None:
        """Stop the stage actors (also on leaving a `with` block)."""
        if getattr(self, "_closed", True):
            return
        ray = _ray()
        for a in self._actors:
            with contextlib.suppress(Exception):  # already dead: nothing to stop
                ray.kill(a)
        self._closed = True

    def __enter__(self) -> RayPipeline:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- running ------------------------------------------------------------------------------------
    def run(self, micro_batches: Sequence[Mapping[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        """The graph outputs of each micro-batch (a list of feed dicts), in order."""
        if self._closed:
            raise ExecutionError(
                "this pipeline is closed (after a failure or close()); build a new one"
            )
        pending = {}
        for m, feeds in enumerate(micro_batches):
            for stage, ref in zip(self.stages, self._submit(m, feeds)):
                pending[ref] = (m, stage)
        results: list[dict] = [self._direct_outputs(feeds) for feeds in micro_batches]
        self._collect(pending, results)
        return results

    def __call__(self, feeds: Mapping[str, np.ndarray], *, micro_batches: int = 1, axis: int = 0):
        """Split `feeds` into `micro_batches` along `axis`, run them, and join the outputs."""
        outs = self.run(split_batch(feeds, micro_batches, axis))
        return {name: np.concatenate([o[name] for o in outs], axis=axis) for name in outs[0]}

    def _submit(self, m: int, feeds: Mapping[str, np.ndarray]) -> list:
        """Submit micro-batch `m` to every stage; returns each stage's outputs reference."""
        missing = sorted({f for s in self.stages for f in s.feeds} - set(feeds))
        if missing:
            raise ExecutionError(f"micro-batch {m}: missing feeds {', '.join(missing)}")
        sent: dict[tuple[int, int], object] = {}
        output_refs = []
        for stage, actor, routes in zip(self.stages, self._actors, self._routes):
            received = [sent[(src, stage.index)] for src in self._sources[stage.index]]
            stage_feeds = {name: feeds[name] for name in stage.feeds}
            refs = actor.run.options(num_returns=len(routes) + 1).remote(m, stage_feeds, *received)
            refs = refs if isinstance(refs, list) else [refs]
            for (dst, _), ref in zip(routes, refs):
                sent[(stage.index, dst)] = ref
            output_refs.append(refs[-1])
        return output_refs

    def _direct_outputs(self, feeds: Mapping[str, np.ndarray]) -> dict:
        out = {}
        for name, (kind, value) in self.stages.direct_outputs.items():
            out[name] = np.asarray(feeds[value]) if kind == "feed" else value
        return out

    def _collect(self, pending: dict, results: list[dict]) -> None:
        ray = _ray()
        deadline = time.monotonic() + self.timeout
        while pending:
            remaining = deadline - time.monotonic()
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=max(0.0, remaining))
            if not ready:
                self._fail_on_timeout(pending)
            for ref in ready:  # in submission order: an upstream failure comes first
                m, stage = pending.pop(ref)
                try:
                    results[m].update(ray.get(ref))
                except ray.exceptions.RayError as e:
                    raise self._error(stage, e, f"failed on micro-batch {m}") from None

    def _fail_on_timeout(self, pending: dict) -> None:
        # the oldest micro-batch's first unfinished stage: what every later one waits on
        m, stage = min(pending.values(), key=lambda ms: (ms[0], ms[1].index))
        self.close()
        raise ExecutionError(
            f"{_label(stage)} did not finish micro-batch {m} within {self.timeout:g} s; "
            "the pipeline's actors were stopped"
        )

    def _error(self, stage: Stage, e: Exception, what: str) -> ExecutionError:
        """The error to raise for Ray error `e` met while waiting on `stage`: the stage's
        own message when it raised (it names itself), else one naming `stage`."""
        ray = _ray()
        cause = getattr(e, "cause", None)
        if isinstance(cause, ExecutionError) and "pipeline stage" in cause.message:
            return ExecutionError(cause.message)
        if isinstance(e, ray.exceptions.RayActorError):
            self.close()
            return ExecutionError(f"{_label(stage)} died ({what}): {_first_line(e)}")
        return ExecutionError(f"{_label(stage)} {what}: {_first_line(cause or e)}")


def _actor_options(given, n_stages: int, num_cpus: float) -> list[dict]:
    if given is None or isinstance(given, Mapping):
        per_stage = [dict(given or {}) for _ in range(n_stages)]
    else:
        per_stage = [dict(o) for o in given]
        if len(per_stage) != n_stages:
            raise ExecutionError(
                f"actor_options lists {len(per_stage)} dicts for {n_stages} stages"
            )
    return [{"num_cpus": num_cpus, **o} for o in per_stage]


def _label(stage: Stage) -> str:
    return f"pipeline stage {stage.index} ({stage.name})"


def _first_line(e) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _routes(stages: PipelineStages, stage: Stage) -> list[tuple[int, list[str]]]:
    """(destination stage, keys sent there), by destination."""
    by_dst: dict[int, list[str]] = {}
    for key, dst in stage.sends.items():
        by_dst.setdefault(dst, []).append(key)
    return sorted(by_dst.items())


def split_batch(
    feeds: Mapping[str, np.ndarray], micro_batches: int, axis: int = 0
) -> list[dict[str, np.ndarray]]:
    """`feeds` cut into `micro_batches` parts along `axis` (sizes differ by at most one).

    >>> import numpy as np
    >>> parts = split_batch({"x": np.arange(10).reshape(5, 2)}, 2)
    >>> [p["x"].shape for p in parts]
    [(3, 2), (2, 2)]
    """
    if isinstance(micro_batches, bool) or not isinstance(micro_batches, int) or micro_batches < 1:
        raise ExecutionError(f"micro_batches must be a positive int, got {micro_batches!r}")
    arrays = {name: np.asarray(a) for name, a in feeds.items()}
    for name, a in arrays.items():
        if a.ndim <= axis or a.shape[axis] < micro_batches:
            raise ExecutionError(
                f"feed {name!r} of shape {a.shape} cannot be split into {micro_batches} "
                f"micro-batches along axis {axis}"
            )
    pieces = {name: np.array_split(a, micro_batches, axis=axis) for name, a in arrays.items()}
    return [
        {name: np.ascontiguousarray(p[i]) for name, p in pieces.items()}
        for i in range(micro_batches)
    ]
