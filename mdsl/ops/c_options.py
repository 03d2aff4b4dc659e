"""The options of a custom op's "c" binding (`register_op_impl(op, backend="c", ...)`),
checked when it is registered: `symbol=` a C identifier mdsl does not generate, plus
exactly one of `source=` (C text) or `library=` (an existing shared library, made
absolute). What the C target makes of them is `mdsl.targets.c.custom`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from mdsl.ir.errors import GraphError

C_OPTIONS = ("source", "symbol", "library")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_RESERVED = re.compile(r"(mdsl_|k[0-9]+_|main$)")  # generated names, and main


def checked_c_options(op_type: str, fn, options: dict) -> dict:
    """The options of a "c" binding, checked: `symbol` plus exactly one of `source` (C
    text) or `library` (a shared library path, made absolute)."""
    if fn is not None:
        raise GraphError(
            f"a 'c' binding of {op_type!r} takes source= and symbol= (or library= and "
            f"symbol=), not a Python function"
        )
    if not options:
        raise GraphError(
            f"a 'c' binding of {op_type} needs source= and symbol=, or library= and symbol="
        )
    unknown = sorted(set(options) - set(C_OPTIONS))
    if unknown:
        raise GraphError(
            f"unknown option {', '.join(unknown)} for the c binding of {op_type!r} "
            f"(known: {', '.join(C_OPTIONS)})"
        )
    symbol = options.get("symbol")
    if not isinstance(symbol, str) or not _IDENTIFIER.fullmatch(symbol):
        raise GraphError(
            f"the c binding of {op_type!r} needs symbol= a C identifier, got {symbol!r}"
        )
    if _RESERVED.match(symbol):
        raise GraphError(
            f"symbol {symbol!r} of the c binding of {op_type!r} is reserved for generated "
            "code (names starting with mdsl_ or k<digits>_, and main)"
        )
    has_source, has_library = "source" in options, "library" in options
    if has_source == has_library:
        raise GraphError(f"the c binding of {op_type!r} needs exactly one of source= or library=")
    if has_source:
        if not isinstance(options["source"], str) or not options["source"].strip():
            raise GraphError(f"source= of the c binding of {op_type!r} must be C source text")
        return {"source": options["source"], "symbol": symbol}
    return {"library": _checked_library(op_type, options["library"]), "symbol": symbol}


def _checked_library(op_type: str, library) -> str:
    text = os.fspath(library) if isinstance(library, (str, os.PathLike)) else None
    if not isinstance(text, str):
        raise GraphError(
            f"library= of the c binding of {op_type!r} must be a path, got {library!r}"
        )
    if any(c in text for c in "\n\r\0,"):  # "," would split -Wl,-rpath,dir
        raise GraphError(
            f"library path {text!r} of the c binding of {op_type!r} has a comma or a "
            "control character"
        )
    path = Path(text).expanduser().resolve()
    if not path.is_file():
        raise GraphError(f"library {str(path)!r} of the c binding of {op_type!r} does not exist")
    return str(path)
