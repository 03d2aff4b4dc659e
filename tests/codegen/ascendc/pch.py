"""The CANN kernel headers precompiled once per machine, for the header check.

Every generated kernel starts with `#include "mdsl_kernel_common.h"`, whose first lines
include `kernel_operator.h` and (in CANN's CPU-debug mode) `tikicpulib.h`. Parsing those
two takes about 5 of the 5.5 s that `g++ -fsyntax-only` spends on a kernel, so the check
of BERT's 40 kernels took 7 minutes of a cold suite run. Here they are precompiled with
exactly the flags `check_ascendc.sh` gives a kernel compile (read off the script by
running it once with a recording compiler), and passed back as `-include` of a header
that includes the same two files. For a kernel that includes them first anyway this is
the same compile: g++ uses a precompiled header only where its flags and macros match,
and parses the header from source where they do not. `applies` checks that a project's
kernels do include them first; anything else is checked without it.

The precompiled headers live in the build cache, one per SoC family in a `.gch` folder
(g++ takes the one whose flags match), built under a file lock so parallel test workers
build each once.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import os
import re
import shlex
import subprocess
import tempfile
from pathlib import Path

from mdsl.codegen.toolchain import cache_dir

COMMON_HEADER = "op_kernel/mdsl_kernel_common.h"
# what mdsl_kernel_common.h includes first; the precompiled header includes the same
FIRST_INCLUDES = ("kernel_operator.h", "tikicpulib.h")
HEADER_TEXT = (
    '#include "kernel_operator.h"\n#ifdef ASCENDC_CPU_DEBUG\n#include "tikicpulib.h"\n#endif\n'
)
HEADER_NAME = "mdsl_cann_kernel.h"
RECORDER = '#!/bin/sh\nprintf "%s\\n" "$@" > "$MDSL_PCH_RECORD"\n'
_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.MULTILINE)


def applies(files: dict[str, str | bytes]) -> bool:
    """Whether every kernel of a project includes the precompiled headers before anything
    else: its first include is mdsl_kernel_common.h, whose first includes are those.
    Op projects (msopgen layout) pre-include their tiling header, so never."""
    common = files.get(COMMON_HEADER)
    kernels = [
        text
        for name, text in files.items()
        if name.startswith("op_kernel/") and name.endswith(".cpp")
    ]
    if not isinstance(common, str) or not kernels or "CMakePresets.json" in files:
        return False
    if tuple(_INCLUDE.findall(common)[: len(FIRST_INCLUDES)]) != FIRST_INCLUDES:
        return False
    return all(
        isinstance(text, str) and _INCLUDE.findall(text)[:1] == ["mdsl_kernel_common.h"]
        for text in kernels
    )


def include_flags(script: Path, root: Path, socs: str) -> str:
    """`-include` of the precompiled header, built first for each of `socs` if missing;
    "" where it cannot be built or named in the script's space-separated flags (the
    check then parses the headers from source, as slowly as before)."""
    cxx = shlex.split(os.environ.get("CXX", "g++"))
    folder = _folder(script, root, tuple(cxx))
    if " " in str(folder):
        return ""
    try:
        for soc in socs.split(","):
            _build(folder, script, root, cxx, soc)
    except (OSError, subprocess.CalledProcessError):
        return ""
    return f"-include {folder / HEADER_NAME}"


@functools.cache
def _folder(script: Path, root: Path, cxx: tuple[str, ...]) -> Path:
    version = subprocess.run([*cxx, "--version"], capture_output=True, text=True).stdout
    h = hashlib.sha256()
    for part in (script.read_text(), str(root), version, HEADER_TEXT):
        h.update(part.encode() + b"\0")
    folder = cache_dir() / "cann-pch" / h.hexdigest()[:24]
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _build(folder: Path, script: Path, root: Path, cxx: list[str], soc: str) -> None:
    target = folder / f"{HEADER_NAME}.gch" / f"{soc}.gch"
    if target.is_file():
        return
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.is_file():  # another worker built it while this one waited
            return
        flags = kernel_flags(script, root, soc)
        (folder / HEADER_NAME).write_text(HEADER_TEXT)
        target.parent.mkdir(exist_ok=True)
        part = target.with_suffix(f".{os.getpid()}.tmp")
        subprocess.run(
            [*cxx, *flags, "-x", "c++-header", str(folder / HEADER_NAME), "-o", str(part)],
            check=True,
            capture_output=True,
        )
        part.replace(target)


def kernel_flags(script: Path, root: Path, soc: str) -> list[str]:
    """The flags `check_ascendc.sh` compiles a kernel with for `soc`, less -fsyntax-only:
    the script is run over a one-kernel project with a compiler that records its
    arguments."""
    with tempfile.TemporaryDirectory(prefix="cann-pch-") as tmp:
        recorder, record = Path(tmp, "record-cxx"), Path(tmp, "record.txt")
        recorder.write_text(RECORDER)
        recorder.chmod(0o700)
        Path(tmp, "project", "op_kernel").mkdir(parents=True)
        Path(tmp, "project", "op_kernel", "probe.cpp").write_text("")
        env = {**os.environ, "ASCEND_HOME_PATH": str(root), "CXX": str(recorder)}
        env.update(MDSL_PCH_RECORD=str(record), ASCENDC_CHECK_KERNEL_FLAGS="", JOBS="1")
        subprocess.run(
            ["bash", str(script), str(Path(tmp, "project")), soc],
            env=env,
            capture_output=True,
            check=True,
        )
        args = record.read_text().splitlines()
    return [a for a in args[:-1] if a and a != "-fsyntax-only"]
