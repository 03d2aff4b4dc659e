"""The `mdsl` command line: every subcommand through `main([...])`, its output checked
against the library; bad input gives exit status 1 and one line on stderr; one
`python -m mdsl --help` through a subprocess."""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import mdsl
from mdsl.tools.cli import Progress, main
from mdsl.tools.model_inputs import load_graph, random_feeds
from tests.tools.conftest import needs_dot

MODEL = """
import mdsl
from mdsl import ops

@mdsl.layer(name="Block")
def block(x):
    with mdsl.scope("FFN"):
        h = ops.relu(x @ mdsl.param("w", (8, 8)) + 0.0)
    return ops.exp(h * 0.5) + x

def build(depth=2):
    with mdsl.Graph("tiny") as g:
        x = g.input("x", ("N", 8))
        for _ in range(depth):
            x = block(x)
        g.output(x, "y")
    return g
"""

SHAPE_ERROR = """
import mdsl
from mdsl import ops

def build():
    with mdsl.Graph("bad") as g:
        x = g.input("x", ("N", 8))
        y = ops.matmul(x, mdsl.param("w", (4, 2)), name="Proj")
        g.output(y, "y")
    return g
"""

BROKEN_PASS = """
import mdsl
from mdsl.passes import PassResult

@mdsl.passes.register("flip_add_cli", levels=(2,))
def flip_add_cli(g):
    adds = [n for n in g if n.op_type == "Add"]
    for n in adds:
        n.op_type = "Sub"
    return PassResult(g, changed=bool(adds))

def build():
    with mdsl.Graph("flipped") as g:
        x = g.input("x", (4,))
        g.output(mdsl.ops.exp(x) + 1.0, "y")
    return g
"""


def write(tmp_path, name: str, source: str):
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return str(path)


@pytest.fixture
def model(tmp_path):
    return write(tmp_path, "model.py", MODEL)


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(err: str) -> str:
    lines = err.strip().splitlines()
    errors = [line for line in lines if line.startswith("mdsl: error:")]
    assert len(errors) == 1 and errors[0] == lines[-1], err
    return errors[0]


# -- help --------------------------------------------------------------------------------------
COMMANDS = ("summary", "build", "run", "viz", "diff", "compare")


@pytest.mark.parametrize("command", COMMANDS)
def test_every_subcommand_has_help(capsys, command):
    code, out, _ = run(capsys, command, "--help")
    assert code == 0 and out.startswith(f"usage: mdsl {command}")
    assert "build() -> mdsl.Graph" in out


def test_no_command_prints_help_and_usage_errors_exit_2(capsys):
    code, out, _ = run(capsys)
    assert code == 2 and all(c in out for c in COMMANDS)
    code, _, err = run(capsys, "run")
    assert code == 2 and "the following arguments are required: model" in err


def test_python_dash_m_mdsl_help_in_a_subprocess():
    done = subprocess.run(
        [sys.executable, "-m", "mdsl", "--help"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: mdsl") and all(c in done.stdout for c in COMMANDS)


# -- subcommands -------------------------------------------------------------------------------
def test_summary_shows_op_types_per_layer(capsys, model):
    code, out, err = run(capsys, "summary", model, "--depth", "2", "--arg", "depth=3")
    assert code == 0
    assert out.startswith("Graph 'tiny': 29 nodes")  # 3 blocks of 9, the input, the output
    lines = out.splitlines()
    header = next(
        i for i, line in enumerate(lines) if line.split() == ["layer", "ops", "op", "types"]
    )
    table = [" ".join(line.split()) for line in lines[header:]]
    assert table[1:4] == [
        "Block 6 Add 2, MatMul 1, Relu 1, Mul 1, Exp 1",
        "FFN 3 MatMul 1, Add 1, Relu 1",
        "Block_1 6 Add 2, MatMul 1, Relu 1, Mul 1, Exp 1",
    ]
    assert [row.split()[0] for row in table[1:]] == [
        "Block",
        "FFN",
        "Block_1",
        "FFN",
        "Block_2",
        "FFN",
    ]
    assert lines[header + 2].startswith("  FFN ")  # sublayers are indented
    assert "mdsl: build" in err and "29 nodes" in err  # progress on stderr
    assert run(capsys, "-q", "summary", model)[2] == ""  # --quiet


def test_build_saves_the_optimized_graph(capsys, model, tmp_path):
    out_file = tmp_path / "tiny.mdsl"
    code, out, err = run(capsys, "build", model, "-O", "2", "-o", str(out_file))
    assert code == 0
    saved = mdsl.load(out_file)
    expected = mdsl.optimize(load_graph(model), level=2)
    assert [n.op_type for n in saved] == [n.op_type for n in expected]
    assert "* simplify" in out  # the passes that changed something
    assert "optimize 'tiny' at level 2" in err and f"save {out_file}" in err
    code, out, _ = run(capsys, "summary", str(out_file))
    assert code == 0 and f"Graph 'tiny': {len(saved)} nodes" in out


def test_run_with_random_or_file_feeds_writes_outputs(capsys, model, tmp_path):
    g = load_graph(model)
    out_file = tmp_path / "out.npz"
    code, out, _ = run(
        capsys, "run", model, "--random", "--dim", "N=3", "--seed", "7", "-o", str(out_file)
    )
    assert code == 0 and out.startswith("y: float32[3,8]  mean ")
    feeds = random_feeds(g, {"N": 3}, seed=7)
    want = mdsl.interpret(g, feeds)["y"]
    np.testing.assert_array_equal(np.load(out_file)["y"], want)

    np.savez(tmp_path / "feeds.npz", **feeds)
    np.save(tmp_path / "x.npy", feeds["x"])
    for feed_file in ("feeds.npz", "x.npy"):
        code, _, _ = run(
            capsys,
            "run",
            model,
            "--feeds",
            str(tmp_path / feed_file),
            "-o",
            str(out_file),
            "-O",
            "2",
        )
        assert code == 0
        np.testing.assert_allclose(np.load(out_file)["y"], want, rtol=1e-5, atol=1e-6)


def test_viz_prints_dot_or_draws_a_file(capsys, model, tmp_path):
    code, out, _ = run(capsys, "viz", model, "--collapse-depth", "1")
    assert code == 0 and out.startswith('digraph "tiny"') and out.count("box3d") == 2
    code, out, _ = run(capsys, "viz", model, "--only", "Block_1/FFN", "--left-right")
    assert "rankdir=LR" in out and "Block/FFN" not in out.replace("Block_1/FFN", "")
    code, _, _ = run(capsys, "viz", model, "-o", str(tmp_path / "g.dot"), "--constants")
    assert code == 0 and "shape=note" in (tmp_path / "g.dot").read_text()


@needs_dot
def test_viz_draws_svg_and_html(capsys, model, tmp_path):
    for name in ("g.svg", "g.html"):
        code, _, err = run(capsys, "viz", model, "-o", str(tmp_path / name), "-O", "2")
        assert code == 0 and f"draw {tmp_path / name}" in err
    assert "<svg" in (tmp_path / "g.svg").read_text()
    assert (tmp_path / "g.html").read_text().startswith("<!DOCTYPE html>")


def test_viz_writes_an_html_page_without_graphviz(capsys, model, tmp_path, monkeypatch):
    monkeypatch.setenv("MDSL_DOT", "mdsl-no-such-dot")
    code, _, err = run(capsys, "viz", model, "-o", str(tmp_path / "g.html"))
    text = (tmp_path / "g.html").read_text()
    assert code == 0 and f"draw {tmp_path / 'g.html'}" in err
    assert 'id="mdsl-model"' in text and "<svg" not in text.split("<script", 1)[0]


def test_diff_against_the_optimized_graph_or_another_model(capsys, model, tmp_path):
    code, out, _ = run(capsys, "diff", model)
    g = load_graph(model)
    assert code == 0 and out == mdsl.diff(g, mdsl.optimize(g, level=2)).table() + "\n"
    other = write(tmp_path, "other.py", MODEL.replace("ops.relu", "ops.sigmoid"))
    code, out, _ = run(capsys, "diff", model, other, "--width", "80")
    assert code == 0 and "2 added, 2 removed, 2 changed" in out
    assert "+ Block/FFN/Sigmoid" in out and "- Block_1/FFN/Relu" in out
    assert max(map(len, out.splitlines())) <= 80


def test_compare_prints_the_report_and_exits_3_on_a_mismatch(
    capsys, model, tmp_path, restored_passes
):
    code, out, err = run(capsys, "compare", model, "--random", "--backend", "expr")
    assert code == 0 and out.startswith("compare 'expr' against 'python'")
    assert "compare 'tiny': ok" in err
    code, out, _ = run(capsys, "compare", model, "--random", "--markdown")
    assert code == 0 and "| tensor | op | dtype |" in out

    broken = write(tmp_path, "broken.py", BROKEN_PASS)
    code, out, err = run(capsys, "compare", broken, "--random", "--bisect")
    assert code == 3 and "MISMATCH" in err
    assert "first divergent pass: flip_add_cli" in out and "op type: Add -> Sub" in out


# -- bad input ---------------------------------------------------------------------------------
def test_a_shape_error_is_one_line_naming_the_node_and_the_line(capsys, tmp_path):
    bad = write(tmp_path, "bad.py", SHAPE_ERROR)
    code, _, err = run(capsys, "summary", bad)
    line = one_line_error(err)
    assert code == 1
    assert line.startswith("mdsl: error: ShapeError: Proj (MatMul) at ")
    assert f"{bad}:8" in line  # the ops.matmul line of the model file
    with pytest.raises(mdsl.ShapeError):
        main(["--debug", "summary", bad])


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import mdsl\n", "a model file defines build() -> mdsl.Graph"),
        (
            "def build():\n    return undefined_name\n",
            "build() raised NameError: name 'undefined_name' is not defined (at ",
        ),
        ("def build(:\n", "SyntaxError"),
        ("def build():\n    return 42\n", "build() returned int, not an mdsl.Graph"),
        ("raise RuntimeError('at import')\n", "importing it raised RuntimeError: at import (at "),
    ],
)
def test_bad_model_files_give_one_line(capsys, tmp_path, source, expected):
    path = write(tmp_path, "m.py", source)
    code, _, err = run(capsys, "summary", path)
    assert code == 1 and expected in one_line_error(err)


def test_bad_files_and_feeds_give_one_line(capsys, model, tmp_path):
    cases = {
        ("summary", str(tmp_path / "missing.py")): "missing.py: no such file",
        ("summary", str(tmp_path)): "no such file",
        ("run", model): "give --feeds FILE.npz (inputs: x) or --random",
        ("run", model, "--random", "--feeds", "f.npz"): "give --feeds FILE or --random, not both",
        ("run", model, "--feeds", str(tmp_path / "none.npz")): "none.npz: no such feed file",
        ("run", model, "--random", "--dim", "N"): "--dim 'N': expected NAME=VALUE",
        ("run", model, "--random", "--dim", "N=-1"): "sizes are non-negative integers",
        (
            "summary",
            model,
            "--arg",
            "depth=2",
            "--arg",
            "width=3",
        ): "unexpected keyword argument 'width'",
        ("run", model, "--random", "-o", str(tmp_path / "out.txt")): "outputs are written as .npz",
        ("viz", model, "--only", "Nope"): "GraphError: graph 'tiny' has no layer 'Nope'",
    }
    (tmp_path / "corrupt.npz").write_bytes(b"not a zip file")
    cases[("run", model, "--feeds", str(tmp_path / "corrupt.npz"))] = "not a readable numpy file"
    np.savez(tmp_path / "wrong.npz", z=np.zeros(3, np.float32))
    cases[("run", model, "--feeds", str(tmp_path / "wrong.npz"))] = (
        "ExecutionError: graph 'tiny' feeds: missing x"
    )
    for argv, expected in cases.items():
        code, _, err = run(capsys, *argv)
        assert code == 1 and expected in one_line_error(err), (argv, err)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_redraws_one_line_on_a_terminal_and_logs_lines_elsewhere():
    screen = _Terminal()
    progress = Progress(quiet=False, stream=screen)
    with progress.stage("bisect 'g'") as done:
        progress.update("bisect 'g'", "step 3 cse")
        done("ok")
    text = screen.getvalue()
    assert text.startswith("mdsl: bisect 'g' ...\r")
    assert "mdsl: bisect 'g': step 3 cse\x1b[K\r" in text
    assert re.search(r"mdsl: bisect 'g': ok \(\d+\.\d\d s\)\x1b\[K\n$", text)
    log = io.StringIO()
    progress = Progress(quiet=False, stream=log)
    with progress.stage("build m.py") as done:
        progress.update("build m.py", "halfway")  # not shown off a terminal
        done("3 nodes")
    assert re.fullmatch(r"mdsl: build m\.py: 3 nodes \(\d+\.\d\d s\)\n", log.getvalue())


# -- emit and profile --------------------------------------------------------------------------
needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")


@pytest.mark.parametrize("command", ("emit", "profile"))
def test_emit_and_profile_have_help(capsys, command):
    code, out, _ = run(capsys, command, "--help")
    assert code == 0 and out.startswith(f"usage: mdsl {command}")
    assert "build() -> mdsl.Graph" in out and "--dim" in out
    assert command in run(capsys)[1]  # listed by `mdsl` without a command


@pytest.mark.parametrize("target", ("c", "numba"))
def test_emit_writes_what_mdsl_emit_writes(capsys, model, tmp_path, target):
    out_dir = tmp_path / "out"
    code, out, err = run(
        capsys, "emit", model, "--target", target, "--dim", "N=4", "-o", str(out_dir)
    )
    assert code == 0 and f"emit 'tiny' for {target} at level 2" in err
    expected = mdsl.emit(load_graph(model), target, tmp_path / "ref", symbols={"N": 4})
    written = out.splitlines()
    assert [p.relative_to(tmp_path / "ref") for p in expected] == [
        Path(p).relative_to(out_dir) for p in written
    ]
    for ref in expected:
        mine = out_dir / ref.relative_to(tmp_path / "ref")
        assert mine.read_bytes() == ref.read_bytes()
    source = out_dir / ("tiny.c" if target == "c" else "tiny.py")
    assert source.is_file() and "Generated by mdsl" in source.read_text()


def test_emit_errors_are_one_line(capsys, model, tmp_path):
    out_dir = str(tmp_path / "out")
    cases = {
        ("emit", model, "-o", out_dir): "graph 'tiny' has symbolic dims; give --dim N=SIZE",
        ("emit", model, "-o", out_dir, "--dim", "N=2", "--dim", "M=3"): "--dim M: not a dim",
        ("emit", model, "-o", out_dir, "--dim", "N=x"): "--dim N: sizes are non-negative",
        (
            "emit",
            model,
            "-o",
            out_dir,
            "--dim",
            "N=2",
            "--target",
            "nope",
        ): "CompileError: unknown emit target 'nope'; known: ",
    }
    for argv, expected in cases.items():
        code, _, err = run(capsys, *argv)
        assert code == 1 and expected in one_line_error(err), (argv, err)
    assert not (tmp_path / "out").exists()
    code, _, err = run(capsys, "emit", model, "--dim", "N=2")
    assert code == 2 and "the following arguments are required: -o/--output" in err


def _trace_events(path) -> list[dict]:
    doc = json.loads(Path(path).read_text())
    return [e for e in doc["traceEvents"] if e["ph"] == "X"]


@needs_cc
def test_profile_prints_the_table_and_writes_a_chrome_trace(capsys, model, tmp_path):
    trace = tmp_path / "trace.json"
    code, out, err = run(
        capsys, "profile", model, "--random", "--dim", "N=4", "--runs", "3", "--trace", str(trace)
    )
    assert code == 0
    lines = out.splitlines()
    kernels = int(re.fullmatch(r"profile 'tiny' \(c, N=4\): 3 runs, (\d+) kernels", lines[0])[1])
    exe = mdsl.compile(load_graph(model), "c")
    exe.run(random_feeds(exe.graph, {"N": 4}))
    assert kernels == len(exe.kernels) and max(map(len, lines)) <= 100
    assert sum(line.split()[:2] == ["op", "type"] for line in lines) == 1
    assert "compile 'tiny' for c at level 2" in err and "profile 'tiny' (3 runs)" in err
    assert f"write {trace}" in err
    events = [e for e in _trace_events(trace) if e["cat"] != "layer"]
    assert len(events) == 3 * (kernels + 1)
    assert {e["name"] for e in events if e["cat"] != "run"} == {k.name for k in exe.kernels}


def test_profile_on_the_interpreter_times_nodes(capsys, model):
    code, out, _ = run(
        capsys, "profile", model, "--random", "--backend", "python", "--runs", "2", "--top", "3"
    )
    assert code == 0 and re.match(r"profile 'tiny' \(python, N=2\): 2 runs, \d+ nodes", out)
    assert "(+" in out and max(map(len, out.splitlines())) <= 100


def test_profile_errors_are_one_line(capsys, model, tmp_path):
    cases = {
        ("profile", model): "give --feeds FILE.npz (inputs: x) or --random",
        ("profile", model, "--random", "--backend", "python", "--runs", "0"): (
            "ExecutionError: profile: runs must be an int >= 1"
        ),
    }
    for argv, expected in cases.items():
        code, _, err = run(capsys, *argv)
        assert code == 1 and expected in one_line_error(err), (argv, err)
    bad = write(tmp_path, "bad.py", SHAPE_ERROR)
    done = subprocess.run(
        [sys.executable, "-m", "mdsl", "profile", bad, "--random"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr
    line = one_line_error(done.stderr)
    assert line.startswith("mdsl: error: ShapeError: Proj (MatMul) at ") and f"{bad}:8" in line


PLANTED_FUSION_BUG = """
import mdsl
from mdsl import ops
from mdsl.codegen import plan

_lower_group = plan._lower_whole

def _buggy(ctx, group):  # a planted codegen bug: fused kernels with an Exp store 1.5x
    kernels = _lower_group(ctx, group)
    if len(group.nodes) > 1 and any(n.op_type == "Exp" for n in group.nodes):
        for k in kernels:
            k.stores[-1].value = k.stores[-1].value * 1.5
    return kernels

plan._lower_whole = _buggy

def build():
    with mdsl.Graph("planted") as g:
        x = g.input("x", ("N", 8))
        with mdsl.scope("A"):
            a = ops.tanh(x * 2.0 + 1.0)
        with mdsl.scope("B"):
            b = ops.exp(x * 0.5 - 1.0)
        g.output(a, "a")
        g.output(b, "b")
    return g
"""


@needs_cc
def test_compare_bisect_names_the_divergent_fusion_group_in_a_subprocess(tmp_path):
    planted = write(tmp_path, "planted.py", PLANTED_FUSION_BUG)  # patches mdsl: own process
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mdsl",
            "compare",
            planted,
            "--random",
            "--backend",
            "c",
            "--bisect",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 3, done.stderr
    assert "first divergent pass: fuse" in done.stdout
    assert "first divergent fusion group: fg1 (pointwise: Mul+Sub+Exp; group 2 of 2)" in done.stdout
    assert "first tensor it changes: B/Exp (Exp)" in done.stdout


# -- new user options --------------------------------------------------------------------------
def test_version(capsys):
    code, out, _ = run(capsys, "--version")
    assert code == 0 and out.strip() == f"mdsl {mdsl.__version__}"


@pytest.mark.parametrize("command", [*COMMANDS, "emit", "profile", "convert"])
def test_help_never_says_default_none_and_every_option_is_explained(capsys, command):
    code, out, _ = run(capsys, command, "--help")
    assert code == 0 and "default None" not in out
    options = out.split("options:", 1)[1]
    for line in options.splitlines():  # an option line with nothing after its flags
        flags = line.strip()
        if flags.startswith("-") and "  " not in flags and not flags.endswith(","):
            following = options.split(line, 1)[1].splitlines()[1:2]
            assert following and following[0].startswith(" " * 20), (command, line)


def test_an_unknown_dim_is_an_error(capsys, model):
    code, _, err = run(capsys, "run", model, "--random", "--dim", "M=3")
    assert code == 1, err
    assert "--dim M: not a dim of graph 'tiny' (its dims: N)" in one_line_error(err)


def test_build_arguments_reach_build(capsys, model):
    code, out, _ = run(capsys, "summary", model, "--arg", "depth=3")
    assert code == 0
    assert "Block_2" in out and "Block_3" not in out


def test_onnx_models_work_wherever_a_model_does(capsys, model, tmp_path):
    pytest.importorskip("onnx")
    onnx_file, saved = tmp_path / "tiny.onnx", tmp_path / "tiny.mdsl"
    assert run(capsys, "convert", model, str(onnx_file))[0] == 0
    code, out, _ = run(capsys, "summary", str(onnx_file))
    assert code == 0 and "MatMul" in out
    assert run(capsys, "convert", str(onnx_file), str(saved))[0] == 0
    from_onnx = mdsl.load(saved)
    feeds = random_feeds(from_onnx, {"N": 3})
    original = load_graph(model)
    np.testing.assert_allclose(
        mdsl.interpret(from_onnx, feeds)["y"], mdsl.interpret(original, feeds)["y"], rtol=1e-5
    )
    code, _, err = run(capsys, "run", str(onnx_file), "--random", "--dim", "N=2")
    assert code == 0, err


def test_convert_refuses_other_targets(capsys, model, tmp_path):
    code, _, err = run(capsys, "convert", model, str(tmp_path / "x.txt"))
    assert code != 0 and "convert writes a saved graph (.mdsl) or ONNX (.onnx)" in err
