"""Every hostile input of `hostile.py`, each in its own process with a timeout and a
memory limit: the outcome must be the expected one (a clear MdslError, or correct
results), never a crash, a hang or a foreign exception."""

from __future__ import annotations

import re
import shutil

import pytest

from tests.robustness import hostile
from tests.robustness.sandbox import probe_env, run_probe

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")

OK = ("ok", None)


def refused(error: str, match: str) -> tuple[str, str]:
    return "refused", f"{error}: .*{match}"


EXPECTED = {
    # the build cache
    "cache_entry_writable_by_others_is_rebuilt": OK,
    "world_writable_cache_root_is_refused": refused("CompileError", "group or others can write"),
    "cache_dir_that_is_a_file": refused("CompileError", "cannot use the build cache"),
    "truncated_cache_library_with_matching_sidecar": OK,
    "failed_source_does_not_follow_a_planted_symlink": OK,
    "bad_cc_quoting": refused("CompileError", r"\$CC is not a valid command line"),
    "bad_cflags_quoting": refused("CompileError", r"\$MDSL_CFLAGS is not a valid command line"),
    # saved executables
    "unsigned_executable_is_refused": refused("CompileError", "is not signed"),
    "foreign_signed_executable_is_refused": refused("CompileError", "signed with another key"),
    "rewritten_library_and_digests_are_refused": refused("CompileError", "is not signed"),
    "swapped_library_of_another_graph_even_when_trusted": refused(
        "CompileError", "not built from this graph's source"
    ),
    "signed_executable_round_trips": OK,
    "fifo_member_does_not_hang": refused("CompileError", "not a regular file"),
    "fifo_digest_file_does_not_hang": refused("CompileError", "not a regular file"),
    "zip_bomb_member_is_refused": refused("CompileError", "manifest.sha256 inflates to"),
    "custom_library_pointing_at_dev_zero": refused("CompileError", "not a regular file"),
    "deeply_nested_manifest": refused("CompileError", "nests deeper than"),
    "manifest_threads_100000": refused("CompileError", r"threads must be in \[1, 1024\]"),
    "compile_threads_100000": refused("CompileError", r"threads must be in \[1, 1024\]"),
    "compile_threads_2_pow_31": refused("CompileError", r"threads must be in \[1, 1024\]"),
    # graph files
    "graph_json_zip_bomb": refused("GraphError", "graph.json inflates to"),
    "graph_with_100k_nodes_loads_in_seconds": OK,
    "deeply_nested_graph_json": refused("GraphError", "JSON nests 100000 deep"),
    "200_deep_if_nest_in_a_file": refused("GraphError", "JSON nests 811 deep"),
    "40_deep_if_nest_in_a_file": refused("GraphError", "subgraphs nest 33 deep"),
    "200_deep_if_nest_built_in_python": refused("GraphError", "control flow nests 33 deep"),
    "32_deep_if_nest_runs_everywhere": OK,
    "dim_name_with_trailing_newline": refused("ShapeError", "N"),
    "hostile_fusion_groups": refused("CompileError", "fusion groups recorded on its nodes"),
    "npy_header_lies_about_its_size": refused("GraphError", "header announces"),
    # native calls and sizes
    "keyboard_interrupt_in_a_callback_propagates": OK,
    "three_symbolic_dims_of_2_pow_22": refused("ExecutionError", "make buffer"),
    "static_dims_past_int64": refused("ShapeError", "would overflow int64"),
    "custom_op_int_attr_of_10_pow_400": refused(
        "GraphError", r"expects int, got an int of 1329 bits \(beyond int64\)"
    ),
    # ONNX
    "onnx_missing_external_data": refused("GraphError", "external data .* is missing"),
    "onnx_external_data_outside_the_folder": refused("GraphError", "outside the model's directory"),
    "onnx_negative_initializer_dims": refused("GraphError", "negative dims"),
    "onnx_if_nest_past_the_parser_limit": refused("GraphError", "nest deeper than the ONNX parser"),
    "onnx_import_time_matmul_chain_is_bounded": OK,
    # generated code (docs/generated-code-ub.md)
    "integer_division_by_zero_and_int_min_by_minus_one": OK,
    "integer_remainder_by_zero_and_int_min_by_minus_one": OK,
    "signed_overflow_wraps": OK,
    "integer_sums_wrap": OK,
    "float_to_int_of_nan_and_out_of_range_saturates": OK,
    "integer_mean_computes_its_fraction_in_float": OK,
    "sign_of_nan_is_nan": OK,
    "reduce_l2_neither_overflows_nor_underflows": OK,
    "empty_axis_reductions_give_the_identity": OK,
    "python_backend_returns_fresh_arrays": OK,
}


def test_every_probe_has_an_expectation():
    assert sorted(EXPECTED) == sorted(hostile.probe_names())


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("robustness")
    return probe_env(root / "cache", root / "config")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_probe(name, env, tmp_path):
    outcome = run_probe(name, tmp_path, env)
    kind, pattern = EXPECTED[name]
    assert outcome.kind == kind, outcome.describe()
    if pattern is not None:
        assert re.search(pattern, f"{outcome.error}: {outcome.message}", re.S), outcome.describe()
