"""PyTorch frontend: `from_module(module, example_inputs)` imports an nn.Module as a Graph.

See `mdsl.frontends.torch_fx` for how modules are traced and `mdsl.frontends.torch_ops`
for the torch functions and modules it maps.
"""

from mdsl.frontends.torch_fx import StaticTraceWarning, from_module, layer_path

__all__ = ["StaticTraceWarning", "from_module", "layer_path"]
