"""Every AscendC project the tests emit compiles against the official CANN 8.5 headers
(`check_ascendc.sh`: kernels per SoC in CANN's CPU-debug mode, host tiling and runner):
the goldens, the test graphs covering every template, the examples' fused groups, for
SoC 220 (Ascend910B family) and 200 (Ascend310P). Where mdsl cannot generate a kernel for
a SoC it rejects the project at emit time, naming the kernel, its nodes and the SoC.

Needs the header pack (`../shared/ascend`) or `$ASCEND_HOME_PATH`; see cann.py.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import subprocess
from pathlib import Path

import numpy as np
import pytest

import mdsl
from mdsl.targets.ascendc import Emulator, TilingError, build_project
from tests.codegen.ascendc import cann, golden_graphs, graphs, pch
from tests.codegen.ascendc.conftest import example, needs_cxx
from tests.codegen.ascendc.test_emulation import assert_same

# the SoC family check_ascendc.sh compiles for -> the part mdsl plans for
SOCS = {"220": "Ascend910B3", "200": "Ascend310P3"}


def _examples():
    return {
        "resnet_block": (lambda: example("resnet_block").build(channels=8, size=10), {"N": 2}),
        "bert": (lambda: example("bert").bert(2, 64, 4, masked=True), {"B": 2, "S": 16}),
    }


def _graph(name: str):
    if name in golden_graphs.GOLDEN:
        return getattr(golden_graphs, name)(), None
    if hasattr(graphs, name):
        return getattr(graphs, name)(), None
    build, shapes = _examples()[name]
    return build(), shapes


PROJECTS = [*golden_graphs.GOLDEN, "vector_mix", "rows", "cube", "epilogues", *_examples()]
CASES = [(name, family) for name in PROJECTS for family in sorted(SOCS)] + [("soc_310p", "200")]


@pytest.mark.parametrize("name, family", CASES)
def test_project_passes_the_cann_header_check(name, family):
    cann.require()
    g, shapes = _graph(name)
    try:
        project = build_project(g, shapes=shapes, soc=SOCS[family])
    except TilingError as e:
        # rejected at emit time: only for what the SoC cannot run, and said so
        assert family == "200", f"{name} rejected for {SOCS[family]}: {e}"
        for d in e.diagnostics:
            assert SOCS[family] in d.message and d.kernel and d.nodes, str(d)
        pytest.skip(f"mdsl rejects {name} for {SOCS[family]}: {e.diagnostics[0].message}")
    result = cann.check_project(project, family)
    assert result.ok, f"{name} for {SOCS[family]}:\n{result.output}"


def test_the_310p_graph_is_accepted_and_checked():
    """At least one project of every kernel kind the 310P takes is checked for SoC 200."""
    project = build_project(graphs.soc_310p(), soc=SOCS["200"])
    kinds = {type(k.kernel).__name__ for k in project.device_kernels}
    assert {"VectorKernel", "RowKernel", "MatmulKernel"} <= kinds
    assert not project.host_kernels


def test_the_check_fails_on_a_broken_kernel():
    """The oracle can fail: a misspelt API in a generated kernel is reported."""
    cann.require()
    project = build_project(golden_graphs.golden_softmax())
    files = dict(project.files)
    # the first op_kernel file that calls DataCopy (the kernels share mdsl_kernel_common.h)
    kernel = next(
        n for n in sorted(files) if n.startswith("op_kernel/") and "DataCopy(" in files[n]
    )
    files[kernel] = files[kernel].replace("DataCopy(", "DataCopyy(", 1)
    result = cann.check_files(files, "220")
    assert not result.ok
    assert "DataCopyy" in result.output


@needs_cxx
@pytest.mark.parametrize("family", sorted(SOCS))
def test_kernels_are_checked_with_the_cann_headers_precompiled(family, tmp_path):
    """g++ takes the precompiled headers for the script's own kernel flags (`-H` marks a
    header it used with `!`): a change to the flags that left them unused would make the
    suite's cold run several minutes longer without failing anything else."""
    found = cann.require()
    project = build_project(graphs.soc_310p(), soc=SOCS[family])  # one both SoCs take
    assert pch.applies(project.files)
    for name, text in project.files.items():
        if name.startswith("op_kernel/"):
            (tmp_path / Path(name).name).write_text(text)
    kernel = next(tmp_path.glob("k*.cpp"))
    include = pch.include_flags(found.script, found.root, family).split()
    flags = pch.kernel_flags(found.script, found.root, family)
    done = subprocess.run(
        [
            *shlex.split(os.environ.get("CXX", "g++")),
            *flags,
            "-fsyntax-only",
            "-H",
            *include,
            str(kernel),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    used = [line for line in done.stderr.splitlines() if line.startswith("! ")]
    assert used and used[0].endswith(f"{family}.gch"), done.stderr[:2000]


def test_the_precompiled_headers_apply_only_where_a_kernel_includes_them_first():
    files = dict(build_project(golden_graphs.golden_softmax()).files)
    assert pch.applies(files)
    kernel = next(n for n in sorted(files) if n.startswith("op_kernel/k"))
    first = '#include "mdsl_kernel_common.h"'
    assert not pch.applies(
        {**files, kernel: files[kernel].replace(first, "#include <cstdint>\n" + first)}
    )
    common = files[pch.COMMON_HEADER]
    assert not pch.applies({**files, pch.COMMON_HEADER: '#include "lib/matmul_intf.h"\n' + common})
    assert not pch.applies({**files, "CMakePresets.json": "{}"})


# -- the real headers and the emulation agree --------------------------------------------------------
def _golden_feeds(g, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {
        name: rng.standard_normal(tuple(int(d) for d in t.shape)).astype(t.dtype.np)
        for name, t in g.inputs.items()
    }


@needs_cxx
@pytest.mark.parametrize("name", golden_graphs.GOLDEN)
def test_goldens_pass_the_cann_headers_and_the_emulation(name):
    cann.require()
    g = getattr(golden_graphs, name)()
    project = build_project(g)
    result = cann.check_project(project, "220")
    assert result.ok, result.output
    feeds = _golden_feeds(g)
    assert_same(Emulator(project).run(feeds), mdsl.interpret(g, feeds))


# mistakes the real headers reject; the emulation must reject them too (not compile)
MISTAKES = {
    "GET_TILING_DATA outside an op package": (
        "golden_softmax",
        "op_kernel/k4_mul_softmax.cpp",
        "K4MulSoftmaxTilingData tilingData;\n    MdslCopyTiling(&tilingData, tiling);",
        "GET_TILING_DATA_WITH_STRUCT(K4MulSoftmaxTilingData, tilingData, tiling);",
    ),
    "a private tiling field read directly": (
        "golden_dense",
        "op_host/golden_dense_tiling.cpp",
        "tiling.cubeTiling.get_singleCoreM()",
        "tiling.cubeTiling.singleCoreM",
    ),
    "a misspelt API": (
        "golden_pointwise",
        "op_kernel/mdsl_kernel_common.h",
        "DataCopy(",
        "DataCopyy(",
    ),
}


@needs_cxx
@pytest.mark.parametrize("mistake", sorted(MISTAKES))
def test_what_the_cann_headers_reject_the_emulation_rejects(mistake):
    cann.require()
    name, path, good, bad = MISTAKES[mistake]
    project = build_project(getattr(golden_graphs, name)())
    assert good in project.files[path], (path, good)
    broken = dataclasses.replace(
        project, files={**project.files, path: project.files[path].replace(good, bad, 1)}
    )
    assert not cann.check_project(broken, "220").ok
    with pytest.raises(mdsl.CompileError):
        Emulator(broken)
