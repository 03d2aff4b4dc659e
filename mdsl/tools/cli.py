"""The `mdsl` command line (also `python -m mdsl`).

A model file is a Python file defining `build() -> mdsl.Graph` (keyword arguments come
from `--arg NAME=VALUE`); wherever a model is expected, an ONNX model (`.onnx`) or a
graph saved with `mdsl build -o model.mdsl` works too.

    mdsl summary examples/bert.py --depth 2      # nodes and op types per layer
    mdsl build examples/bert.py -O 2 -o bert.mdsl
    mdsl run examples/bert.py --random --dim B=2 --dim S=16 -o out.npz
    mdsl viz examples/bert.py -o bert.svg --collapse-depth 2
    mdsl diff examples/bert.py                    # the graph against its optimized self
    mdsl compare examples/bert.py --random --bisect
    mdsl emit examples/bert.py --target c --dim B=1 --dim S=128 -o build/bert_c
    mdsl profile examples/bert.py --random --dim B=2 --dim S=64 --runs 20 --trace bert.json
    mdsl convert model.onnx model.mdsl            # (or .mdsl/.py -> .onnx)

Exit status: 0 success, 1 error (one line on stderr; `--debug` shows the traceback),
2 bad usage, 3 `compare` found a mismatch.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections import Counter

from mdsl.ir.errors import MdslError
from mdsl.ir.graph import CONST, INPUT, OUTPUT, Graph
from mdsl.ir.text import WIDTH
from mdsl.targets.registry import target_names
from mdsl.tools.model_inputs import (
    load_feeds,
    load_graph,
    parse_assignments,
    random_feeds,
    save_outputs,
)

EXIT_ERROR, EXIT_USAGE, EXIT_MISMATCH = 1, 2, 3
TOP_OPS = 5


class UsageError(MdslError):
    """The command line asked for something it cannot do."""


# -- progress --------------------------------------------------------------------------------
class Progress:
    """One stderr line per stage of work: `mdsl: optimize (level 2): 566 -> 353 nodes
    (0.03 s)`; on a terminal the stage shows while it runs."""

    def __init__(self, quiet: bool, stream=None):
        self.quiet = quiet
        self.stream = stream or sys.stderr

    def update(self, what: str, detail: str) -> None:
        """Show `detail` of the running stage (terminals only)."""
        if not self.quiet and self.stream.isatty():
            print(f"mdsl: {what}: {detail}\x1b[K", end="\r", file=self.stream, flush=True)

    @contextlib.contextmanager
    def stage(self, what: str):
        """`with progress.stage("build x.py") as done: ...; done("566 nodes")`."""
        notes: list[str] = []
        live = not self.quiet and self.stream.isatty()
        if live:
            print(f"mdsl: {what} ...", end="\r", file=self.stream, flush=True)
        start = time.perf_counter()
        yield notes.append
        if not self.quiet:
            detail = f": {notes[-1]}" if notes else ""
            took = time.perf_counter() - start
            clear = "\x1b[K" if live else ""
            print(f"mdsl: {what}{detail} ({took:.2f} s){clear}", file=self.stream, flush=True)


# -- shared steps ----------------------------------------------------------------------------
def _graph(args, path: str | None = None, progress: Progress | None = None) -> Graph:
    path = path or args.model
    with (progress or args.progress).stage(f"build {path}") as done:
        g = load_graph(path, parse_assignments(args.arg, "--arg"))
        done(f"{len(g)} nodes")
    return g


def _optimized(args, g: Graph, level: int | None) -> Graph:
    if not level:
        return g
    from mdsl.passes.manager import optimize

    with args.progress.stage(f"optimize {g.name!r} at level {level}") as done:
        g2 = optimize(g, level=level)
        groups = {n.fusion_group for n in g2 if n.fusion_group}
        done(f"{len(g)} -> {len(g2)} nodes" + (f", {len(groups)} fusion groups" if groups else ""))
    return g2


def _feeds(args, g: Graph) -> dict:
    if args.feeds and args.random:
        raise UsageError("give --feeds FILE or --random, not both")
    if args.feeds:
        return load_feeds(args.feeds, g)
    if args.random:
        symbols = _dim_sizes(args)
        known = {s for t in g.inputs.values() for s in _free_symbols(t.shape)}
        unknown = sorted(set(symbols) - known)
        if unknown:
            dims = ", ".join(sorted(known)) or "none"
            raise UsageError(
                f"--dim {unknown[0]}: not a dim of graph {g.name!r} (its dims: {dims})"
            )
        return random_feeds(g, symbols, seed=args.seed)
    names = ", ".join(g.inputs) or "none"
    raise UsageError(f"give --feeds FILE.npz (inputs: {names}) or --random")


def _print(text: str) -> None:
    print(text, flush=True)


# -- subcommands -----------------------------------------------------------------------------
def _summary(args) -> int:
    g = _optimized(args, _graph(args), args.opt_level)
    _print(g.summary())
    _print(layer_table(g, args.depth))
    return 0


def layer_table(g: Graph, depth: int = 1, width: int = WIDTH) -> str:
    """Nodes and the most common op types of every layer down to `depth`.

    >>> import mdsl
    >>> @mdsl.layer
    ... def head(x):
    ...     return mdsl.ops.relu(x * 2.0)
    >>> with mdsl.Graph("g") as g:
    ...     g.output(head(g.input("x", (3,))), "y")
    >>> print(layer_table(g))
    layer    ops  op types
    head       2  Mul 1, Relu 1
    """
    ops: dict[str, Counter] = {"": Counter()}
    for node in g:
        if node.op_type in (INPUT, CONST, OUTPUT):
            continue
        parts = node.layer.split("/") if node.layer else []
        keys = ["/".join(parts[:i]) for i in range(1, min(len(parts), depth) + 1)] or [""]
        for key in keys:
            ops.setdefault(key, Counter())[node.op_type] += 1
    layers = sorted(
        (p for p in {*g.layers, *ops} if p and p.count("/") < depth), key=_layer_order(g)
    )
    paths = ["", *layers] if ops[""] or not layers else layers
    name_width = min(max(len("layer"), *(_label_width(p) for p in paths)), width // 2)
    lines = [f"{'layer':<{name_width}}  {'ops':>5}  op types"]
    for path in paths:
        counts = ops.get(path, Counter())
        label = "(top)" if not path else "  " * path.count("/") + path.rpartition("/")[2]
        shown = ", ".join(f"{op} {k}" for op, k in counts.most_common(TOP_OPS))
        if len(counts) > TOP_OPS:
            shown += f", +{len(counts) - TOP_OPS} more"
        line = f"{label[:name_width]:<{name_width}}  {sum(counts.values()):>5}  {shown}"
        lines.append(line.rstrip()[:width])
    return "\n".join(lines)


def _label_width(path: str) -> int:
    return 2 * path.count("/") + len(path.rpartition("/")[2]) if path else len("(top)")


def _layer_order(g: Graph):
    """Layers in the order their first node appears (parents before children)."""
    first: dict[str, int] = {}
    for i, node in enumerate(g):
        parts = node.layer.split("/") if node.layer else []
        for j in range(1, len(parts) + 1):
            first.setdefault("/".join(parts[:j]), i)
    return lambda path: (first.get(path, len(first)), path)


def _build(args) -> int:
    g = _graph(args)
    g2 = _optimized(args, g, args.opt_level)
    for entry in g2.pass_log:
        if entry.changed:
            _print(str(entry))
    if args.output:
        from mdsl.ir.serialize import save

        with args.progress.stage(f"save {args.output}"):
            save(g2, args.output)
    return 0


def _run(args) -> int:
    from mdsl.targets.python.interpreter import interpret

    g = _optimized(args, _graph(args), args.opt_level)
    feeds = _feeds(args, g)
    with args.progress.stage(f"run {g.name!r} ({len(g)} nodes)"):
        outputs = interpret(g, feeds, impl=args.impl)
    for name, value in outputs.items():
        _print(_describe_array(name, value))
    if args.output:
        with args.progress.stage(f"write {args.output}"):
            save_outputs(args.output, outputs)
    return 0


def _describe_array(name: str, value) -> str:
    import numpy as np

    head = f"{name}: {value.dtype}[{','.join(map(str, value.shape))}]"
    if value.size == 0 or value.dtype == np.bool_:
        return head
    v = value.astype(np.float64)
    return f"{head}  mean {v.mean():.4g}  std {v.std():.4g}  min {v.min():.4g}  max {v.max():.4g}"


def _viz(args) -> int:
    from mdsl.tools import viz

    g = _optimized(args, _graph(args), args.opt_level)
    options = dict(
        collapse_depth=args.collapse_depth,
        only_layer=args.only,
        show_constants=args.constants,
        rankdir="LR" if args.left_right else "TB",
    )
    if not args.output:
        sys.stdout.write(viz.to_dot(g, **options))
        return 0
    with args.progress.stage(f"draw {args.output}"):
        viz.render(g, args.output, **options)
    return 0


def _diff(args) -> int:
    from mdsl.tools.diff import diff

    a = _graph(args, args.model)
    if args.other is None:
        b = _optimized(args, a, args.opt_level if args.opt_level is not None else 2)
    else:
        b = _graph(args, args.other)
        if args.opt_level:
            a, b = _optimized(args, a, args.opt_level), _optimized(args, b, args.opt_level)
    _print(diff(a, b).table(width=args.width))
    return 0


def _compare(args) -> int:
    from mdsl.tools.compare import compare

    g = _graph(args)
    feeds = _feeds(args, g)
    options = dict(
        backend=args.backend,
        reference=args.reference,
        rtol=args.rtol,
        atol=args.atol,
        reference_dtype=args.reference_dtype,
    )
    what = f"{'bisect the passes of' if args.bisect else 'compare'} {g.name!r}"
    with args.progress.stage(what) as done:
        if args.bisect:
            from mdsl.tools.bisection import bisect

            def show(step) -> None:
                args.progress.update(what, f"step {step.index} {step.pass_name}")

            level = args.opt_level if args.opt_level is not None else 2
            report = bisect(g, feeds, level, on_step=show, **options)
        else:
            report = compare(g, feeds, **options)
        done("ok" if report.ok else "MISMATCH")
    _print(report.to_markdown() if args.markdown else report.table(width=args.width))
    return 0 if report.ok else EXIT_MISMATCH


def _dim_sizes(args) -> dict[str, int]:
    """The --dim assignments, each a non-negative integer."""
    sizes: dict[str, int] = {}
    for name, value in parse_assignments(args.dim, "--dim").items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise UsageError(f"--dim {name}: sizes are non-negative integers")
        sizes[name] = value
    return sizes


def _symbol_sizes(args, g: Graph) -> dict[str, int]:
    """--dim sizes for every symbolic dim of `g`'s inputs (code is generated per size)."""
    sizes = _dim_sizes(args)
    needed = sorted({s for t in g.inputs.values() for s in _free_symbols(t.shape)})
    missing = [s for s in needed if s not in sizes]
    if missing:
        dims = " ".join(f"--dim {s}=SIZE" for s in missing)
        raise UsageError(f"graph {g.name!r} has symbolic dims; give {dims}")
    unknown = sorted(set(sizes) - set(needed))
    if unknown:
        raise UsageError(f"--dim {unknown[0]}: not a dim of graph {g.name!r}")
    return sizes


def _free_symbols(shape) -> set[str]:
    return {s for d in shape if not isinstance(d, int) for s in d.free_symbols}


def _emit(args) -> int:
    from mdsl.runtime.emit import emit

    g = _graph(args)
    sizes = _symbol_sizes(args, g)
    level = args.opt_level
    with args.progress.stage(f"emit {g.name!r} for {args.target} at level {level}") as done:
        files = emit(g, target=args.target, out_dir=args.output, symbols=sizes, opt_level=level)
        done(f"{len(files)} files in {args.output}")
    for path in files:
        _print(str(path))
    return 0


def _profile(args) -> int:
    from mdsl.runtime.compile import compile

    g = _graph(args)
    feeds = _feeds(args, g)
    level = args.opt_level
    with args.progress.stage(f"compile {g.name!r} for {args.backend} at level {level}") as done:
        exe = compile(g, args.backend, opt_level=level, threads=args.threads)
        done(f"{len(exe.graph)} nodes")
    with args.progress.stage(f"profile {g.name!r} ({args.runs} runs)") as done:
        prof = exe.profile(feeds, runs=args.runs, warmup=args.warmup)
        done(f"{len(prof.kernels)} {prof.unit}, {prof.wall_mean * 1e3:.3f} ms a run")
    _print(prof.table(top=args.top, depth=args.depth, width=args.width))
    if args.trace:
        with args.progress.stage(f"write {args.trace}"):
            prof.to_chrome_trace(args.trace)
    return 0


# -- the parser ------------------------------------------------------------------------------
def _model_args(p: argparse.ArgumentParser, name: str = "model") -> None:
    p.add_argument(
        name,
        help="a Python file defining build() -> mdsl.Graph, an ONNX model (.onnx) "
        "or a saved graph (.mdsl)",
    )
    p.add_argument(
        "--arg",
        action="append",
        metavar="NAME=VALUE",
        help="keyword argument for build() (a Python literal, else a string); repeatable",
    )


def _opt_arg(p: argparse.ArgumentParser, default: int | None, what: str) -> None:
    p.add_argument(
        "-O",
        "--opt-level",
        type=int,
        choices=range(4),
        default=default,
        metavar="LEVEL",
        help=f"{what} (0-3)" + ("" if default is None else f"; default {default}"),
    )


def _feed_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--feeds", metavar="FILE", help=".npz with one array per input, or .npy")
    p.add_argument("--random", action="store_true", help="random feeds (see --dim, --seed)")
    p.add_argument(
        "--dim",
        action="append",
        metavar="SYMBOL=SIZE",
        help="size of a symbolic dim for --random (default 2); repeatable",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of --random (default 0)")


def _add(sub, name: str, run, help: str, description: str = "") -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help, description=description or help)
    p.set_defaults(run=run)
    return p


def _version() -> str:
    from mdsl import __version__

    return __version__


def _convert(args) -> int:
    g = _graph(args)
    target = args.output
    with args.progress.stage(f"write {target}") as done:
        if target.endswith(".onnx"):
            from mdsl.frontends import onnx

            onnx.export(g, target)
        elif target.endswith(".mdsl"):
            from mdsl.ir.serialize import save

            save(g, target)
        else:
            raise UsageError(f"{target}: convert writes a saved graph (.mdsl) or ONNX (.onnx)")
        done(f"{len(g)} nodes")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="mdsl",
        description="mdsl: build, inspect, run and compare graphs defined in Python.",
        epilog="Exit status: 0 ok, 1 error, 2 bad usage, 3 compare found a mismatch.",
    )
    p.add_argument("--version", action="version", version=f"mdsl {_version()}")
    p.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    s = _add(sub, "summary", _summary, "node count and op types per layer")
    _model_args(s)
    s.add_argument("--depth", type=int, default=1, help="layer depth of the table (default 1)")
    _opt_arg(s, 0, "summarize the graph optimized at this level")

    s = _add(sub, "build", _build, "build and optimize a model; save the graph with -o")
    _model_args(s)
    _opt_arg(s, 2, "optimization level")
    s.add_argument("-o", "--output", metavar="FILE.mdsl", help="save the optimized graph")

    s = _add(sub, "run", _run, "run a model with the reference interpreter")
    _model_args(s)
    _feed_args(s)
    _opt_arg(s, 0, "optimize first at this level")
    s.add_argument(
        "--impl",
        choices=("auto", "python", "expr"),
        default="auto",
        help="which implementation of each op the interpreter runs: its numpy reference "
        "(python), its scalar expression (expr), or the reference where there is one (auto; "
        "the default)",
    )
    s.add_argument("-o", "--output", metavar="FILE.npz", help="write the outputs")

    s = _add(
        sub,
        "viz",
        _viz,
        "draw a model (SVG, PNG, PDF, DOT or HTML)",
        "Draw a model's graph. Without -o, print DOT. PNG and PDF need Graphviz; SVG needs "
        "Graphviz or the viz extra; an HTML page needs neither (it lays the graph out).",
    )
    _model_args(s)
    s.add_argument("-o", "--output", metavar="FILE", help=".svg .png .pdf .dot or .html")
    s.add_argument("--collapse-depth", type=int, metavar="D", help="layers at depth D as boxes")
    s.add_argument("--only", metavar="LAYER", help="draw only this layer path")
    s.add_argument("--constants", action="store_true", help="draw constants as nodes")
    s.add_argument("--left-right", action="store_true", help="lay out left to right")
    _opt_arg(s, 0, "draw the graph optimized at this level")

    s = _add(
        sub,
        "diff",
        _diff,
        "structural diff of two models, or of a model and its optimized graph",
        "Diff A and B. Without B, diff A against A optimized at -O (default 2); with B, "
        "-O optimizes both.",
    )
    _model_args(s)
    s.add_argument("other", nargs="?", help="second model file or saved graph")
    _opt_arg(s, None, "optimization level")
    s.add_argument("--width", type=int, default=WIDTH, help=f"columns (default {WIDTH})")

    s = _add(
        sub,
        "compare",
        _compare,
        "per-node accuracy of a backend against a reference; --bisect finds the pass",
        "Compare every tensor of a backend's run with a reference run (exit status 3 on "
        "a mismatch). --bisect applies the optimization passes one at a time and names "
        "the first after which the outputs differ; with a compiled --backend (c, numba) "
        "it then bisects that graph's fusion groups and names the one whose fusion makes "
        "them differ.",
    )
    _model_args(s)
    _feed_args(s)
    s.add_argument("--backend", default="python", help="run compared (default python)")
    s.add_argument("--reference", default="python", help="reference run (default python)")
    s.add_argument("--rtol", type=float, default=1e-3, help="relative tolerance (default 1e-3)")
    s.add_argument("--atol", type=float, default=1e-5, help="absolute tolerance (default 1e-5)")
    s.add_argument(
        "--reference-dtype",
        choices=("float32", "float64"),
        help="run the reference in this dtype (tells precision from logic errors)",
    )
    s.add_argument("--bisect", action="store_true", help="find the first divergent pass")
    _opt_arg(s, None, "level whose passes --bisect applies (default 2)")
    s.add_argument("--markdown", action="store_true", help="print Markdown")
    s.add_argument("--width", type=int, default=WIDTH, help=f"columns (default {WIDTH})")

    s = _add(
        sub,
        "emit",
        _emit,
        "write the generated code (C, numba or AscendC) to a folder",
        "Optimize a model and write the code a target generates for it (sources, build "
        "files, constants) into -o DIR. Code is generated for concrete sizes: give --dim "
        "for each symbolic dim.",
    )
    _model_args(s)
    emit_targets = ", ".join(target_names("emit"))
    s.add_argument("--target", default="c", help=f"one of {emit_targets} (default c)")
    s.add_argument("-o", "--output", metavar="DIR", required=True, help="folder to write")
    s.add_argument("--dim", action="append", metavar="SYMBOL=SIZE", help="size of a symbolic dim")
    _opt_arg(s, 2, "optimization level")

    s = _add(
        sub,
        "profile",
        _profile,
        "time every kernel of a compiled model: table and Chrome trace",
        "Compile a model, run it --runs times with each kernel timed, and print the time, "
        "GFLOP/s and GB/s by kernel, op type and layer. --trace writes a Chrome trace "
        "(open it in ui.perfetto.dev or chrome://tracing).",
    )
    _model_args(s)
    _feed_args(s)
    s.add_argument("--backend", choices=target_names("build"), default="c", help="default c")
    s.add_argument("--runs", type=int, default=10, help="timed runs (default 10)")
    s.add_argument("--warmup", type=int, default=1, help="untimed runs first (default 1)")
    s.add_argument("--threads", type=int, help="OpenMP/BLAS threads (default: all cores)")
    s.add_argument("--trace", metavar="FILE.json", help="write a Chrome trace")
    s.add_argument("--top", type=int, default=15, help="rows per table (default 15)")
    s.add_argument("--depth", type=int, default=2, help="layer depth (default 2)")
    s.add_argument("--width", type=int, default=WIDTH, help=f"columns (default {WIDTH})")
    _opt_arg(s, 2, "optimization level")

    s = _add(
        sub,
        "convert",
        _convert,
        "convert a model to a saved graph (.mdsl) or to ONNX (.onnx)",
        "Build or import MODEL (.py, .onnx or .mdsl) and write it to OUTPUT: a saved "
        "mdsl graph when OUTPUT ends in .mdsl, an ONNX model when it ends in .onnx.",
    )
    _model_args(s)
    s.add_argument("output", help="the file to write (.mdsl or .onnx)")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the command line on `argv` (default: sys.argv[1:]); returns the exit status."""
    p = parser()
    try:
        args = p.parse_args(argv)
    except SystemExit as e:  # --help, or a usage error argparse already printed
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    if not getattr(args, "run", None):
        p.print_help()
        return EXIT_USAGE
    args.progress = Progress(args.quiet)
    try:
        return args.run(args)
    except MdslError as e:
        if args.debug:
            raise
        message = " ".join(str(e).split())  # one line, whatever the message holds
        print(f"mdsl: error: {type(e).__name__}: {message}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("mdsl: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
