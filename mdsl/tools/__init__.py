"""Tools that read graphs: `viz` (pictures), `diff` (structural diff), `bisection` (which
pass changed the results), `cli` (the `mdsl` command line) and `model_inputs` (model,
graph and feed files for the command line)."""
