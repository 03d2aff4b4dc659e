"""The Python graph builder: scopes, layers, parameters; Tensor operators live in
`mdsl.ops.tensor_methods`, installed by `import mdsl` once the op library is loaded."""

from mdsl.ops.apply import apply_op, building_graph
from mdsl.ops.scopes import device, layer, param, scope

__all__ = ["apply_op", "building_graph", "device", "layer", "param", "scope"]
