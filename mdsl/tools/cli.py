"""The `mdsl` command line. Subcommands arrive with their issues; `summary` works now."""

from __future__ import annotations

import argparse
import importlib.util
import sys

from mdsl.ir.errors import MdslError


def _load_model(path: str):
    spec = importlib.util.spec_from_file_location("mdsl_model", path)
    if spec is None or spec.loader is None:
        raise MdslError(f"{path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except FileNotFoundError:
        raise MdslError(f"{path}: no such file") from None
    if not hasattr(module, "build"):
        raise MdslError(f"{path}: a model file defines build() -> mdsl.Graph")
    return module.build()


def _summary(args) -> int:
    print(_load_model(args.model).summary())
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="mdsl", description="mdsl: build, inspect and compile graphs defined in Python."
    )
    sub = p.add_subparsers(dest="command")
    s = sub.add_parser("summary", help="build MODEL.py's graph and print its summary")
    s.add_argument("model", help="a Python file defining build() -> mdsl.Graph")
    s.set_defaults(run=_summary)
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if not getattr(args, "run", None):
        p.print_help()
        return 0
    try:
        return args.run(args)
    except MdslError as e:
        print(f"mdsl: error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
