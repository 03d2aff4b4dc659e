"""Hugging Face BERT and GPT-2 (small configs, random weights) exported by PyTorch with
dynamic batch and sequence axes: one import, one compile, several (batch, sequence)
sizes, each matching ONNX Runtime (docs/dynamic-shapes.md)."""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest

import mdsl
from mdsl.frontends import onnx as mo

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
ort = pytest.importorskip("onnxruntime")

SIZES = [(1, 5), (2, 8), (3, 13)]
POSITIONS = 32  # the models' position tables: the longest sequence they take


class _LastHidden(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids, mask):
        return self.model(input_ids=ids, attention_mask=mask).last_hidden_state


def _model(kind: str):
    torch.manual_seed(0)
    if kind == "bert":
        config = transformers.BertConfig(
            vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=64, max_position_embeddings=POSITIONS,
        )  # fmt: skip
        return transformers.BertModel(config).eval()
    config = transformers.GPT2Config(
        vocab_size=100, n_embd=32, n_layer=2, n_head=4, n_positions=POSITIONS,
        bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    return transformers.GPT2Model(config).eval()


def _export(kind: str) -> bytes:
    ids = torch.randint(0, 100, (2, 8))
    mask = torch.ones(2, 8, dtype=torch.long)
    axes = {0: "B", 1: "S"}
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            _LastHidden(_model(kind)), (ids, mask), buffer, input_names=["ids", "mask"],
            output_names=["out"], dynamic_axes={"ids": axes, "mask": axes, "out": axes},
            opset_version=17, dynamo=False,
        )  # fmt: skip
    return buffer.getvalue()


@pytest.fixture(scope="module", params=["bert", "gpt2"])
def exported(request):
    data = _export(request.param)
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    return request.param, data, session


def _feeds(batch: int, seq: int) -> dict:
    rng = np.random.default_rng(batch * 100 + seq)
    mask = np.ones((batch, seq), np.int64)
    mask[0, seq // 2 :] = 0  # a padded row
    return {"ids": rng.integers(0, 100, (batch, seq)).astype(np.int64), "mask": mask}


@pytest.mark.parametrize("backend", ["python", "c"])
def test_one_compile_runs_every_batch_and_sequence_size(exported, backend):
    kind, data, session = exported
    g = mo.load(data)
    assert g.inputs["ids"].shape == (mdsl.Dim("B"), mdsl.Dim("S"))
    run = (
        (lambda f: mdsl.interpret(g, f))
        if backend == "python"
        else mdsl.compile(g, backend=backend)
    )
    for batch, seq in SIZES:
        feeds = _feeds(batch, seq)
        want = session.run(None, feeds)[0]
        got = run(feeds)["out"]
        assert got.shape == (batch, seq, 32), (kind, backend)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=f"{kind} {batch}x{seq}")


def test_a_sequence_longer_than_the_position_table_is_an_execution_error(exported):
    kind, data, _ = exported
    g = mo.load(data)
    if kind == "bert":  # BERT slices its position table to S: S's range says so
        assert g.inputs["ids"].shape[1].max == POSITIONS
    too_long = _feeds(1, POSITIONS + 1)  # GPT-2 gathers from it: the index check fires
    why = r"S = 33 is outside its range \[0, 32\]|index (32 )?is out of range for axis 0 of size 32"
    with pytest.raises(mdsl.ExecutionError, match=why):
        mdsl.interpret(g, too_long)
    with pytest.raises(mdsl.ExecutionError, match=why):
        mdsl.compile(g, backend="c")(**too_long)
