"""A library planted in the build cache by another user never runs as you.

Needs root, to act as a second user (one is created for the test when missing): the
attacker writes into a cache folder the victim uses, the victim compiles the graph the
planted entry was made for, and the planted constructor must not run."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.robustness import hostile
from tests.robustness.sandbox import ROOT, probe_env, run_probe

ATTACKER = "mdsl-probe"

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="acting as a second user needs root"),
    pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler"),
]


@pytest.fixture(scope="module")
def attacker() -> int:
    try:
        return pwd.getpwnam(ATTACKER).pw_uid
    except KeyError:
        pass
    if shutil.which("useradd") is None:
        pytest.skip("no useradd to create a second user")
    subprocess.run(["useradd", "--system", "--no-create-home", ATTACKER], check=True)
    return pwd.getpwnam(ATTACKER).pw_uid


@pytest.fixture
def world(tmp_path):
    """A folder outside root's private tmp, reachable by the attacker."""
    folder = Path(tempfile.mkdtemp(prefix="mdsl-second-user-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _entry_for(cache: Path, env: dict) -> tuple[Path, str]:
    code = (
        "from tests.robustness import hostile\n"
        "entry, name = hostile._tiny_entry()\nprint(entry, name)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**env, "MDSL_CACHE_DIR": str(cache)},
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return Path(out[-2]), out[-1]


def _as(uid: int, *command: str) -> None:
    subprocess.run(command, user=uid, group=uid, check=True)


def test_a_shared_cache_with_a_planted_library_is_refused(attacker, world, tmp_path):
    shared = world / "shared-cache"
    shared.mkdir()
    shared.chmod(0o1777)  # a cache folder everyone may write: /tmp style
    env = probe_env(shared, tmp_path / "config")
    entry, file_name = _entry_for(shared, env)
    evil = hostile.build_evil_library(world)
    evil.chmod(0o644)
    sidecar = world / "sidecar"
    sidecar.write_text(hostile._sha256(evil.read_bytes()))
    _as(attacker, "mkdir", str(entry))  # the attacker plants the entry, sidecar included
    _as(attacker, "cp", str(evil), str(entry / file_name))
    _as(attacker, "cp", str(sidecar), str(entry / "library.sha256"))
    marker = world / "marker"
    outcome = run_probe("victim_compiles_tiny2", tmp_path / "victim", env | _marker(marker))
    assert outcome.kind == "refused", outcome.describe()
    assert "refusing the build cache" in outcome.message
    assert not marker.exists()


def test_an_entry_owned_by_another_user_is_rebuilt_not_loaded(attacker, world, tmp_path):
    cache = world / "own-cache"
    cache.mkdir(mode=0o755)
    env = probe_env(cache, tmp_path / "config")
    entry, file_name = _entry_for(cache, env)
    hostile.plant_entry(entry, file_name, hostile.build_evil_library(world))
    for path in (entry, entry / file_name, entry / "library.sha256"):
        os.chown(path, attacker, attacker)  # as if the attacker had written it
    marker = world / "marker"
    outcome = run_probe("victim_compiles_tiny2", tmp_path / "victim", env | _marker(marker))
    assert outcome.kind == "ok", outcome.describe()
    assert not marker.exists()


def _marker(path: Path) -> dict:
    return {"MDSL_PROBE_MARKER": str(path)}
