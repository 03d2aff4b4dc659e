"""Small Hugging Face models built from their configs (random weights, no downloads),
wrapped so that `forward(input_ids[, attention_mask])` returns the last hidden state."""

from __future__ import annotations

import torch

VOCAB = 50


def _configs():
    import transformers as T

    small = {"vocab_size": VOCAB}
    bert_like = {
        **small, "hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2,
        "intermediate_size": 32, "max_position_embeddings": 40,
    }  # fmt: skip
    return {
        "bert": lambda: T.BertModel(T.BertConfig(**bert_like)),
        "distilbert": lambda: T.DistilBertModel(
            T.DistilBertConfig(**small, dim=16, n_layers=2, n_heads=2, hidden_dim=32,
                               max_position_embeddings=40)
        ),
        "roberta": lambda: T.RobertaModel(T.RobertaConfig(**bert_like)),
        "gpt2": lambda: T.GPT2Model(T.GPT2Config(**small, n_embd=16, n_layer=2, n_head=2,
                                                 n_positions=40)),
        "t5-encoder": lambda: T.T5EncoderModel(
            T.T5Config(**small, d_model=16, d_kv=8, d_ff=32, num_layers=2, num_heads=2)
        ),
        "llama": lambda: T.LlamaModel(
            T.LlamaConfig(**small, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                          num_attention_heads=2, num_key_value_heads=1,
                          max_position_embeddings=40)
        ),
    }  # fmt: skip


MODEL_NAMES = ("bert", "distilbert", "roberta", "gpt2", "t5-encoder", "llama")


class LastHiddenState(torch.nn.Module):
    def __init__(self, model, with_mask: bool):
        super().__init__()
        self.model, self.with_mask = model, with_mask

    def forward(self, input_ids, attention_mask=None):
        if self.with_mask:
            return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return self.model(input_ids=input_ids).last_hidden_state


def build(name: str, with_mask: bool) -> LastHiddenState:
    torch.manual_seed(0)
    return LastHiddenState(_configs()[name](), with_mask).eval()
