"""Graph passes: the registry, the PassManager and the built-in passes.

A pass is `fn(g: Graph) -> PassResult`, registered by name with `@mdsl.passes.register`;
`mdsl.passes.run(g, names)` runs passes by name and `mdsl.optimize(g, level)` runs the
standard pipeline of a level. See `mdsl.passes.manager` for the contract.

>>> import mdsl
>>> with mdsl.Graph("demo") as g:
...     x = g.input("x", (2, 3))
...     g.output(mdsl.ops.identity(x) + 0.0, "y")
>>> g2 = mdsl.passes.run(g, ["simplify"])
>>> [n.op_type for n in g2.nodes], len(g)
(['Input', 'Output'], 5)
"""

from mdsl.ir.rewrite import clone_graph

# Built-in passes register themselves on import (their order: manager.BUILTIN_ORDER).
from mdsl.passes import (
    conv3d,
    conv_transpose,
    cse,
    dce,
    fold,
    fold_bn,
    group_norm,
    lower_attention,
    lower_einsum,
    simplify,
)
from mdsl.passes.edit import (
    add_input,
    add_output,
    extract_layer,
    inline_graph,
    remove_output,
    rename_input,
    rename_output,
    replace_with_op,
)
from mdsl.passes.fold import fold_constants
from mdsl.passes.fold_bn import fold_conv_bn, fuse_matmul_add
from mdsl.passes.fold_pad import fold_pad_into_conv
from mdsl.passes.manager import (
    BUILTIN_ORDER,
    PassError,
    PassInfo,
    PassLogEntry,
    PassManager,
    PassResult,
    get_pass,
    optimize,
    register,
    registered_passes,
    run,
)
from mdsl.passes.partition import (
    Partitioned,
    TransferReport,
    compare_placements,
    partition_by_device,
)
from mdsl.passes.pattern import Match, Pat, PatternMatcher, PatternRewrite, rewrite_pass
from mdsl.passes.pipeline import PipelineStages, Stage, pipeline_stages
from mdsl.passes.placement import DeviceSpec, PlacementPolicy, place

# isort: off
# The passes of their own modules register after those above (registration order is
# the order of passes outside BUILTIN_ORDER within a phase).
from mdsl.passes import layout, fusion, control_flow
# isort: on

# Names of the built-in passes (the modules simplify, cse and dce hold functions of the
# same name; `mdsl.passes.run(g, ["simplify"])` is the way to call them).
PASS_NAMES = BUILTIN_ORDER
