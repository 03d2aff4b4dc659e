"""Code generation targets, one folder each (`c`, `numba`, `ascendc`, `python`), and what
they share: binding feeds to a graph's inputs (`feeds`) and per-signature memory of
symbolic builds (`signatures`)."""
