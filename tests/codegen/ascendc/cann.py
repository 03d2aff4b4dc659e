"""The real CANN headers as a test oracle: `check_ascendc.sh` over generated projects.

The header pack (CANN 8.5.0 headers from Huawei's open-source repositories and the
`check_ascendc.sh` script) lives beside the checkout at `../shared/ascend`; a real toolkit
is used instead when `$ASCEND_HOME_PATH` is set. Without either the tests skip with that
reason, except under `CI=true`, where a missing pack fails the run (CI always checks).

The script runs `g++ -fsyntax-only` in CANN's CPU-debug mode per kernel and SoC; results
are cached by content (project files, SoCs, script, header root), so an unchanged project
is checked once per machine. Kernels that include the CANN headers first (through
`mdsl_kernel_common.h`, as every generated kernel does) are checked with those headers
precompiled (`pch.py`): the same compile, five times faster. A pack checked out without
symlinks (each link stored as a small text file holding its target, as git does with
`core.symlinks=false`) is restored into a cached copy with real links first: the headers
reach each other through them.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from mdsl.codegen.toolchain import cache_dir
from tests.codegen.ascendc import pch

REPO = Path(__file__).resolve().parents[3]
PACK = REPO.parent / "shared" / "ascend"
SCRIPT_NAME = "check_ascendc.sh"
TIMEOUT = 1800


@dataclass(frozen=True, slots=True)
class Cann:
    script: Path  # check_ascendc.sh
    root: Path  # the CANN root it checks against ($ASCEND_HOME_PATH layout)


@dataclass(frozen=True, slots=True)
class CheckResult:
    returncode: int
    output: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def counts(self) -> tuple[int, int]:
        """(checks passed, checks run)."""
        m = re.search(r"(\d+) checks, (\d+) failed", self.output)
        if m is None:
            return 0, 0
        total, failed = int(m.group(1)), int(m.group(2))
        return total - failed, total


def _script_candidates() -> list[Path]:
    candidates = [PACK / SCRIPT_NAME]
    home = os.environ.get("ASCEND_HOME_PATH")
    if home:  # the pack's own root: the script sits one level up
        candidates.append(Path(home).resolve().parent / SCRIPT_NAME)
    return candidates


@functools.cache
def locate() -> Cann | str:
    """The check script and CANN root, or why there is none."""
    script = next((p for p in _script_candidates() if p.is_file()), None)
    if script is None:
        return (
            f"no CANN header pack ({SCRIPT_NAME} not found at {PACK} or beside $ASCEND_HOME_PATH)"
        )
    home = os.environ.get("ASCEND_HOME_PATH")
    if home:
        root = Path(home)
    else:
        versions = sorted(p.parent for p in script.parent.glob("*/*-linux"))
        if not versions:
            return f"the header pack at {script.parent} has no <version>/<arch>-linux folder"
        root = versions[-1]
    if not root.is_dir():
        return f"$ASCEND_HOME_PATH={home} is not a folder"
    return Cann(script, restore_links(root))


def require() -> Cann:
    """The pack, or a skip (a failure under CI=true) naming what is missing."""
    found = locate()
    if isinstance(found, Cann):
        return found
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true needs the CANN headers: {found}")
    pytest.skip(found)


# -- a pack checked out without symlinks -------------------------------------------------------------
def _link_target(path: Path, root: Path) -> str | None:
    """The relative target a flattened link file holds, when it names something in `root`."""
    if path.is_symlink() or path.stat().st_size > 256:
        return None
    try:
        text = path.read_text().strip()
    except (UnicodeDecodeError, OSError):
        return None
    if not text or "\n" in text or text.startswith("/"):
        return None
    target = (path.parent / text).resolve()
    return text if target.exists() and target.is_relative_to(root.resolve()) else None


def restore_links(root: Path) -> Path:
    """`root`, or a cached copy with its flattened links made real again."""
    if not (root / "include").is_file():  # `include` is a link in every CANN layout
        return root
    stamp = hashlib.sha256(f"{root.resolve()}:{root.stat().st_mtime_ns}".encode()).hexdigest()[:16]
    copy = cache_dir() / "cann-pack" / stamp / root.name
    if (copy.parent / ".complete").is_file():
        return copy
    work = Path(tempfile.mkdtemp(prefix="cann-pack-", dir=cache_dir()))
    staged = work / root.name
    shutil.copytree(root, staged, symlinks=True)
    changed = True
    while changed:  # a link may point through another link: repeat until none is left
        changed = False
        for path in sorted(p for p in staged.rglob("*") if p.is_file()):
            target = _link_target(path, staged)
            if target is not None:
                path.chmod(0o644)
                path.unlink()
                path.symlink_to(target)
                changed = True
    for path in staged.rglob("*"):
        if not path.is_symlink():
            path.chmod(path.stat().st_mode | 0o200)
    (work / ".complete").write_text("ok")
    copy.parent.parent.mkdir(parents=True, exist_ok=True)
    try:
        work.replace(copy.parent)
    except OSError:  # another process restored it first
        shutil.rmtree(work, ignore_errors=True)
    return copy


# -- running the check --------------------------------------------------------------------------------
CHECKED = (".cpp", ".h", ".hpp", "CMakePresets.json")  # what check_ascendc.sh reads


def check_files(files: dict[str, str | bytes], socs: str, kernel_flags: str = "") -> CheckResult:
    """`check_ascendc.sh` over a project given as {relative path: text}, for `socs`
    ("220", "200" or "220,200"), with `kernel_flags` added to every kernel compile (after
    the op build's own defines); cached by the content of the files it reads."""
    cann = require()
    files = {name: text for name, text in files.items() if name.endswith(CHECKED)}
    h = hashlib.sha256()
    for part in (socs, str(cann.root), cann.script.read_text(), kernel_flags):
        h.update(part.encode() + b"\0")
    for name in sorted(files):
        text = files[name]
        h.update(name.encode() + b"\0" + (text.encode() if isinstance(text, str) else text) + b"\0")
    entry = cache_dir() / "ascendc-check" / f"{h.hexdigest()[:32]}.json"
    if entry.is_file():
        return CheckResult(**json.loads(entry.read_text()))
    with tempfile.TemporaryDirectory(prefix="ascendc-check-") as tmp:
        for name, text in files.items():
            path = Path(tmp, name)
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(text, bytes):
                path.write_bytes(text)
            else:
                path.write_text(text)
        env = {**os.environ, "ASCEND_HOME_PATH": str(cann.root), "JOBS": "2", "ERRLINES": "6"}
        if not kernel_flags and pch.applies(files):
            kernel_flags = pch.include_flags(cann.script, cann.root, socs)
        env["ASCENDC_CHECK_KERNEL_FLAGS"] = kernel_flags
        done = subprocess.run(
            ["bash", str(cann.script), tmp, socs],
            capture_output=True,
            text=True,
            env=env,
            timeout=TIMEOUT,
        )
    result = CheckResult(done.returncode, (done.stdout + done.stderr).replace(tmp, "<project>"))
    if result.returncode in (0, 1):  # a verdict (2 is a usage error: not cached)
        entry.parent.mkdir(parents=True, exist_ok=True)
        part = entry.with_suffix(f".{os.getpid()}.tmp")
        part.write_text(json.dumps({"returncode": result.returncode, "output": result.output}))
        part.replace(entry)
    return result


def check_project(project, socs: str) -> CheckResult:
    return check_files(project.files, socs)
