"""Per-thread building state: the graph being built and the current layer path.

Context variables (not globals) so two threads can build two graphs at once.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mdsl.ir.graph import Graph

graph_stack: ContextVar[tuple[Graph, ...]] = ContextVar("mdsl_graph_stack", default=())
scope_path: ContextVar[tuple[str, ...]] = ContextVar("mdsl_scope_path", default=())
device_stack: ContextVar[tuple[str, ...]] = ContextVar("mdsl_device_stack", default=())


def current_graph() -> Graph | None:
    stack = graph_stack.get()
    return stack[-1] if stack else None


def current_scope() -> str:
    return "/".join(scope_path.get())


def current_device() -> str | None:
    stack = device_stack.get()
    return stack[-1] if stack else None
