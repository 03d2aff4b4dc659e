"""Hugging Face models through `mdsl.frontends.torch.from_module`, matching PyTorch.

BERT, DistilBERT, RoBERTa, GPT-2, T5 (encoder) and LLaMA, built from small configs with
random weights (tests/models/hf_models.py), with and without an attention mask. torch.fx
cannot trace any of them (they branch on shapes and values), so the concrete tracer
imports them; its calls include addmm (GPT-2's Conv1D), all/any and advanced indexing
(the mask functions), cumsum and gather (RoBERTa's position ids), in-place ops,
masked_fill and scaled_dot_product_attention with grouped-query heads (LLaMA).

A graph imported with a mask takes the mask as a real input: a second, different mask
runs on the same graph and still matches torch. Tolerances: float32, rtol/atol 1e-5
(observed ~5e-7).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import mdsl
from mdsl.frontends.torch import from_module
from tests.models.hf_models import MODEL_NAMES, VOCAB, build

TOL = {"rtol": 1e-5, "atol": 1e-5}
BATCH, SEQ = 2, 7


def _inputs(seed: int, padded_from: int):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)
    mask = torch.ones(BATCH, SEQ, dtype=torch.long)
    mask[1, padded_from:] = 0
    return ids, mask


def _import(model, args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mdsl.frontends.torch.StaticTraceWarning)
        return from_module(model, args)


def _torch(model, *args):
    with torch.no_grad():
        return model(*args).numpy()


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_without_mask_matches_torch_on_interpreter_and_c(name):
    model = build(name, with_mask=False)
    ids, _ = _inputs(1, SEQ)
    g = _import(model, (ids,))
    want = _torch(model, ids)
    np.testing.assert_allclose(mdsl.interpret(g, {"input_ids": ids.numpy()})["output"], want, **TOL)
    exe = mdsl.compile(g, backend="c")
    np.testing.assert_allclose(exe(input_ids=ids.numpy())["output"], want, **TOL)


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_attention_mask_is_an_input(name):
    model = build(name, with_mask=True)
    ids, mask = _inputs(2, 5)
    g = _import(model, (ids, mask))
    assert set(g.inputs) == {"input_ids", "attention_mask"}
    exe = mdsl.compile(g, backend="c")
    for ids, mask in (_inputs(2, 5), _inputs(3, 2)):
        feeds = {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}
        want = _torch(model, ids, mask)
        np.testing.assert_allclose(mdsl.interpret(g, feeds)["output"], want, **TOL)
        np.testing.assert_allclose(exe(**feeds)["output"], want, **TOL)
