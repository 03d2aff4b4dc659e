"""Running graphs: `compile` and the Executable, heterogeneous and pipelined execution,
profiling, saving and comparing; the reference interpreter is the python target's."""

from mdsl.targets.python.interpreter import interpret
