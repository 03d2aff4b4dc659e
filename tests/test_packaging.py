"""Packaging: the wheel builds without touching the checkout, carries the templates and
py.typed, declares the PEP 639 license and the extras, and runs the tutorial once installed
into a fresh virtual environment."""

import re
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _untracked_and_ignored() -> set[str]:
    out = subprocess.run(
        ["git", "status", "--porcelain", "--ignored", "--untracked-files=all"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    paths = {line[3:] for line in out.splitlines()}
    # only what a build writes: other tests running alongside make caches of their own
    return {p for p in paths if p.startswith(("build/", "dist/")) or ".egg-info" in p}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    before = _untracked_and_ignored()
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    after = _untracked_and_ignored()
    assert after <= before, f"the wheel build wrote into the checkout: {sorted(after - before)}"
    [built] = out.glob("mdsl-*.whl")
    return built


def test_the_wheel_holds_templates_types_and_metadata(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "mdsl/py.typed" in names
    assert "mdsl/ops/__init__.pyi" in names  # the op builders' static signatures
    assert any(n.startswith("mdsl/_templates/c/") for n in names)
    assert "License-Expression: Apache-2.0" in meta
    extras = set(re.findall(r"^Provides-Extra: (\S+)", meta, re.M))
    assert {"onnx", "torch", "distributed", "test"} <= extras


@pytest.mark.slow
def test_the_installed_wheel_runs_the_tutorial(wheel, tmp_path):
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    target = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    with zipfile.ZipFile(wheel) as z:  # a wheel is a zip laid out for site-packages
        z.extractall(target)
    # dependencies (numpy, numba, ...) from this environment, without its .pth files, so
    # an editable mdsl here cannot shadow the installed wheel
    deps = sysconfig.get_paths()["purelib"]
    script = tmp_path / "tutorial.py"
    tutorial = (ROOT / "docs" / "tutorial.md").read_text()
    script.write_text("\n".join(re.findall(r"^```python\n(.*?)^```", tutorial, re.S | re.M)))
    done = subprocess.run(
        [
            str(python),
            "-c",
            f"import mdsl; print(mdsl.__file__); exec(open({str(script)!r}).read())",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={"PYTHONPATH": deps, "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[0].startswith(target)
    assert "compare 'c' against 'python'" in done.stdout
