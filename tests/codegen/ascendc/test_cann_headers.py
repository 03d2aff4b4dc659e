"""Every AscendC project the tests emit compiles against the official CANN 8.5 headers
(`check_ascendc.sh`: kernels per SoC in CANN's CPU-debug mode, host tiling and runner):
the goldens, the test graphs covering every template, the examples' fused groups, for
SoC 220 (Ascend910B family) and 200 (Ascend310P). Where mdsl cannot generate a kernel for
a SoC it rejects the project at emit time, naming the kernel, its nodes and the SoC.

Needs the header pack (`../shared/ascend`) or `$ASCEND_HOME_PATH`; see cann.py.
"""

from __future__ import annotations

import pytest

from mdsl.codegen.ascendc import TilingError, build_project
from tests.codegen.ascendc import cann, golden_graphs, graphs
from tests.codegen.ascendc.conftest import example

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


PROJECTS = [*golden_graphs.GOLDEN, "vector_mix", "rows", "cube", "soc_310p", *_examples()]


@pytest.mark.parametrize("family", sorted(SOCS))
@pytest.mark.parametrize("name", PROJECTS)
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
    (kernel,) = [n for n in files if n.startswith("op_kernel/k") and n.endswith(".cpp")]
    files[kernel] = files[kernel].replace("DataCopy(", "DataCopyy(", 1)
    result = cann.check_files(files, "220")
    assert not result.ok
    assert "DataCopyy" in result.output
