"""Static tools (pyright, Pylance, mypy) see every op builder's real signature: the
checked-in `mdsl/ops/__init__.pyi` is what `mdsl.tools.op_stubs` renders from the
builders, and a type checker reading it accepts right calls and flags wrong ones."""

import textwrap

import pytest

from mdsl.tools.op_stubs import STUB_PATH, render_stub


def test_the_stub_is_current():
    assert STUB_PATH.read_text(encoding="utf-8") == render_stub(), (
        "mdsl/ops/__init__.pyi is stale: run `python -m mdsl.tools.op_stubs` (make stubs)"
    )


def test_every_public_builder_is_in_the_stub():
    import mdsl.ops

    text = STUB_PATH.read_text(encoding="utf-8")
    builders = [n for n, v in vars(mdsl.ops).items() if not n.startswith("_") and callable(v)]
    missing = [n for n in builders if f"\ndef {n}(" not in text]
    assert len(builders) > 100 and not missing


USER_CODE = """\
import mdsl
from mdsl import ops

with mdsl.Graph() as g:
    x = g.input("x", ("N", 8))
    y = ops.softmax(ops.layer_norm(x, mdsl.param("s", (8,)), axis=-1), axis=1)
    z = ops.transpose(ops.reshape(y, shape=(8, -1)), perm=(1, 0))
    parts = ops.split(z, axis=0, num_outputs=2)
    g.output(ops.matmul(parts[0], mdsl.param("w", (8, 4))), "y")
    ops.softmax(x, axs=1)  # line 10: unknown keyword
    ops.softmax(x, 1)  # line 11: attrs are keyword-only
    ops.gelu(x, approximate="fast")  # line 12: not one of the choices
    ops.transpose(x, perm=(1, 0)).no_such_method()  # line 13: a Tensor has no such attribute
"""


def test_a_type_checker_reads_the_signatures(tmp_path):
    api = pytest.importorskip("mypy.api", reason="mypy is a test extra")
    source = tmp_path / "user_model.py"
    source.write_text(textwrap.dedent(USER_CODE), encoding="utf-8")
    out, err, _ = api.run(
        [str(source), "--follow-imports=silent", "--ignore-missing-imports", "--no-incremental"]
    )
    flagged = {int(line.split(":")[1]) for line in out.splitlines() if ": error:" in line}
    assert flagged == {10, 11, 12, 13}, out + err
