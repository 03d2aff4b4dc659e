"""Runnable example models; each defines `build() -> mdsl.Graph` for the `mdsl` CLI.

Run one as a script (`python examples/bert.py`) or import it (`import examples.bert`).
"""
