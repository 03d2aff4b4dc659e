"""Running graphs: the reference interpreter (and, later, executables and profilers)."""

from mdsl.runtime.interpreter import interpret
