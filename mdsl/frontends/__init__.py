"""Frontends: ONNX import/export (`mdsl.frontends.onnx`) and PyTorch import
(`mdsl.frontends.torch`).

The submodules load on first use, so `import mdsl` needs neither onnx nor torch.

>>> import mdsl
>>> callable(mdsl.frontends.onnx.load), callable(mdsl.frontends.torch.from_module)
(True, True)
"""

from importlib import import_module as _import_module

_LAZY = {"onnx": "mdsl.frontends.onnx", "torch": "mdsl.frontends.torch"}


def __getattr__(name: str):
    if name in _LAZY:
        module = _import_module(_LAZY[name])
        globals()[name] = module
        return module
    raise AttributeError(f"module 'mdsl.frontends' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *_LAZY])
