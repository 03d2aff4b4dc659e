"""Running graphs: `compile` and the Executable, heterogeneous and pipelined execution,
profiling and saving (comparing is `mdsl.tools.compare`); the reference interpreter is the
python target's."""

from mdsl.targets.python.interpreter import interpret
