"""The models of the exported-model benchmark, written in PyTorch with random weights.

Blocks (`BLOCKS`) are written here in `torch.nn`: a BERT-base encoder layer, a GPT-2
decoder block, a ResNet basic block, a MobileNetV2 inverted residual and a ViT block.
The zoo (`ZOO`) holds whole architectures: some written here (ResNet-18, MobileNetV2,
VGG-11, a 1-D conv audio net, a small transformer LM), the rest built from code by
`transformers` when it is installed (`config -> Model`, random weights; nothing is
downloaded). torchvision and timm are not used: their PyPI wheels are built against a
CUDA torch and do not load beside the CPU torch the project pins.

Each entry is a function returning `Case(module, example inputs, input names)`; every
module is in eval mode with seeded weights.

>>> case = BLOCKS["resnet-block-b1"]()
>>> tuple(case.inputs[0].shape)
(1, 64, 56, 56)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F


@dataclass
class Case:
    module: nn.Module
    inputs: tuple  # torch tensors
    names: tuple[str, ...]
    note: str = ""


def _case(module: nn.Module, *inputs, names=None, note: str = "") -> Case:
    module.eval()
    names = names or tuple(f"x{i}" if i else "x" for i in range(len(inputs)))
    return Case(module, tuple(inputs), tuple(names), note)


def _seeded(fn):
    def make() -> Case:
        torch.manual_seed(0)
        with torch.no_grad():
            case = fn()
            for p in case.module.parameters():  # non-trivial biases and norms
                if p.dim() == 1:
                    p.add_(0.05 * torch.randn_like(p))
        return case

    make.__name__ = fn.__name__
    make.__doc__ = fn.__doc__
    return make


# -- blocks --------------------------------------------------------------------------------------------
class BertLayer(nn.Module):
    """One post-LN BERT encoder layer (self-attention, add & norm, GELU FFN, add & norm)."""

    def __init__(self, hidden=768, heads=12, ffn=3072):
        super().__init__()
        self.heads = heads
        self.query, self.key, self.value = (nn.Linear(hidden, hidden) for _ in range(3))
        self.attn_out = nn.Linear(hidden, hidden)
        self.norm1 = nn.LayerNorm(hidden, eps=1e-12)
        self.up, self.down = nn.Linear(hidden, ffn), nn.Linear(ffn, hidden)
        self.norm2 = nn.LayerNorm(hidden, eps=1e-12)

    def split(self, t):
        b, s, h = t.shape
        return t.view(b, s, self.heads, h // self.heads).transpose(1, 2)

    def forward(self, x):
        q, k, v = self.split(self.query(x)), self.split(self.key(x)), self.split(self.value(x))
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        ctx = (scores.softmax(-1) @ v).transpose(1, 2).reshape(x.shape)
        h = self.norm1(x + self.attn_out(ctx))
        return self.norm2(h + self.down(F.gelu(self.up(h))))


class Gpt2Block(nn.Module):
    """A pre-LN GPT-2 decoder block: fused QKV projection, causal mask, tanh GELU MLP."""

    def __init__(self, hidden=768, heads=12, seq=128):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.qkv, self.proj = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
        self.fc, self.out = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)
        self.register_buffer("mask", torch.tril(torch.ones(seq, seq, dtype=torch.bool)))

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(h, dim=-1)
        q, k, v = (t.view(b, s, self.heads, h // self.heads).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-1, -2) / math.sqrt(h // self.heads)
        scores = scores.masked_fill(~self.mask[:s, :s], float("-inf"))
        ctx = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, s, h)
        x = x + self.proj(ctx)
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class BasicBlock(nn.Module):
    """ResNet basic block: conv-BN-ReLU, conv-BN, residual add, ReLU."""

    def __init__(self, cin=64, cout=64, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x):
        y = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        return F.relu(y + (x if self.down is None else self.down(x)))


class InvertedResidual(nn.Module):
    """MobileNetV2 block: 1x1 expand, ReLU6, 3x3 depthwise, ReLU6, 1x1 project (+ x)."""

    def __init__(self, cin=32, cout=32, stride=1, expand=6):
        super().__init__()
        mid = cin * expand
        self.residual = stride == 1 and cin == cout
        self.body = nn.Sequential(
            nn.Conv2d(cin, mid, 1, bias=False),
            nn.BatchNorm2d(mid),
            nn.ReLU6(),
            nn.Conv2d(mid, mid, 3, stride, 1, groups=mid, bias=False),
            nn.BatchNorm2d(mid),
            nn.ReLU6(),
            nn.Conv2d(mid, cout, 1, bias=False),
            nn.BatchNorm2d(cout),
        )

    def forward(self, x):
        y = self.body(x)
        return x + y if self.residual else y


class VitBlock(nn.Module):
    """A pre-LN ViT-B encoder block on nn.MultiheadAttention (197 tokens)."""

    def __init__(self, hidden=768, heads=12):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(hidden, eps=1e-6), nn.LayerNorm(hidden, eps=1e-6)
        self.attn = nn.MultiheadAttention(hidden, heads, batch_first=True)
        self.mlp = nn.Sequential(
            nn.Linear(hidden, 4 * hidden), nn.GELU(), nn.Linear(4 * hidden, hidden)
        )

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


BLOCKS: dict[str, Callable[[], Case]] = {
    "bert-layer-b1": _seeded(lambda: _case(BertLayer(), torch.randn(1, 128, 768))),
    "bert-layer-b8": _seeded(lambda: _case(BertLayer(), torch.randn(8, 128, 768))),
    "gpt2-block-b1": _seeded(lambda: _case(Gpt2Block(), torch.randn(1, 128, 768))),
    "resnet-block-b1": _seeded(lambda: _case(BasicBlock(), torch.randn(1, 64, 56, 56))),
    "resnet-block-b8": _seeded(lambda: _case(BasicBlock(), torch.randn(8, 64, 56, 56))),
    "mobilenetv2-block-b1": _seeded(lambda: _case(InvertedResidual(), torch.randn(1, 32, 56, 56))),
    "vit-block-b1": _seeded(lambda: _case(VitBlock(), torch.randn(1, 197, 768))),
}


# -- whole architectures written here ------------------------------------------------------------
def _resnet18(classes=1000) -> nn.Module:
    layers, cin = [], 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout)]
        cin = cout
    return nn.Sequential(
        nn.Conv2d(3, 64, 7, 2, 3, bias=False),
        nn.BatchNorm2d(64),
        nn.ReLU(),
        nn.MaxPool2d(3, 2, 1),
        *layers,
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(512, classes),
    )


def _mobilenet_v2(classes=1000) -> nn.Module:
    settings = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1))
    settings += ((6, 160, 3, 2), (6, 320, 1, 1))
    layers = [nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU6()]
    cin = 32
    for t, c, n, s in settings:
        for i in range(n):
            layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
            cin = c
    layers += [nn.Conv2d(cin, 1280, 1, bias=False), nn.BatchNorm2d(1280), nn.ReLU6()]
    return nn.Sequential(
        *layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2), nn.Linear(1280, classes)
    )


def _vgg11(classes=1000) -> nn.Module:
    layers, cin = [], 3
    for v in (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"):
        if v == "M":
            layers.append(nn.MaxPool2d(2))
        else:
            layers += [nn.Conv2d(cin, v, 3, padding=1), nn.ReLU()]
            cin = v
    return nn.Sequential(
        *layers,
        nn.Flatten(),
        nn.Linear(512 * 7 * 7, 4096),
        nn.ReLU(),
        nn.Linear(4096, 4096),
        nn.ReLU(),
        nn.Linear(4096, classes),
    )


class AudioConvNet(nn.Module):
    """A 1-D convolutional keyword spotter (M5-like) over 1 s of 16 kHz audio."""

    def __init__(self, classes=35):
        super().__init__()
        chans = (1, 32, 32, 64, 64)
        self.convs = nn.ModuleList(
            nn.Conv1d(chans[i], chans[i + 1], 80 if i == 0 else 3, 16 if i == 0 else 1)
            for i in range(4)
        )
        self.norms = nn.ModuleList(nn.BatchNorm1d(c) for c in chans[1:])
        self.fc = nn.Linear(64, classes)

    def forward(self, x):
        for conv, norm in zip(self.convs, self.norms):
            x = F.max_pool1d(F.relu(norm(conv(x))), 4 if x.shape[-1] > 64 else 1)
        return self.fc(x.mean(-1)).log_softmax(-1)


class TinyLM(nn.Module):
    """A 4-layer transformer language model: token and position embeddings (Gather),
    nn.TransformerEncoder with a causal mask, tied output projection."""

    def __init__(self, vocab=8000, hidden=256, heads=4, layers=4, seq=64):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, hidden), nn.Embedding(seq, hidden)
        layer = nn.TransformerEncoderLayer(hidden, heads, 4 * hidden, 0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.register_buffer("mask", torch.triu(torch.full((seq, seq), float("-inf")), 1))

    def forward(self, ids):
        s = ids.shape[1]
        h = self.tok(ids) + self.pos(torch.arange(s, device=ids.device))
        h = self.encoder(h, mask=self.mask[:s, :s], is_causal=False)
        return h @ self.tok.weight.T


def _image(batch=1, size=224):
    return torch.randn(batch, 3, size, size)


LOCAL_ZOO: dict[str, Callable[[], Case]] = {
    "resnet18": _seeded(lambda: _case(_resnet18(), _image())),
    "mobilenet_v2": _seeded(lambda: _case(_mobilenet_v2(), _image())),
    "vgg11": _seeded(lambda: _case(_vgg11(), _image())),
    "audio-conv1d": _seeded(lambda: _case(AudioConvNet(), torch.randn(1, 1, 16000))),
    "tiny-lm": _seeded(lambda: _case(TinyLM(), torch.randint(0, 8000, (1, 64)), names=("ids",))),
}


# -- whole architectures from transformers (config -> model, random weights) ---------------------------
class _Logits(nn.Module):
    """The first output of a transformers model, as a tensor (the ONNX graph's output)."""

    def __init__(self, model, key: str):
        super().__init__()
        self.model, self.key = model, key

    def forward(self, *args):
        return getattr(self.model(*args, return_dict=True), self.key)


def _hf(config_name: str, model_name: str, key: str, make_input, **config):
    def make() -> Case:
        import transformers

        cfg = getattr(transformers, config_name)(**config)
        cfg._attn_implementation = "eager"
        model = getattr(transformers, model_name)(cfg)
        inputs = make_input(cfg)
        return _case(_Logits(model, key), *inputs, names=("x",) if len(inputs) == 1 else None)

    return _seeded(make)


def _ids(seq=128, batch=1):
    return lambda cfg: (torch.randint(0, cfg.vocab_size, (batch, seq)),)


def _pixels(size=224):
    return lambda cfg: (torch.randn(1, 3, size, size),)


HF_ZOO: dict[str, Callable[[], Case]] = {
    "bert-base": _hf("BertConfig", "BertModel", "last_hidden_state", _ids()),
    "distilbert": _hf("DistilBertConfig", "DistilBertModel", "last_hidden_state", _ids()),
    "roberta-base": _hf("RobertaConfig", "RobertaModel", "last_hidden_state", _ids()),
    "albert-base": _hf(
        "AlbertConfig",
        "AlbertModel",
        "last_hidden_state",
        _ids(),
        hidden_size=768,
        num_attention_heads=12,
        intermediate_size=3072,
    ),
    "gpt2": _hf("GPT2Config", "GPT2Model", "last_hidden_state", _ids()),
    "vit-b16": _hf("ViTConfig", "ViTModel", "last_hidden_state", _pixels()),
    "deit-small": _hf(
        "ViTConfig",
        "ViTModel",
        "last_hidden_state",
        _pixels(),
        hidden_size=384,
        num_attention_heads=6,
        intermediate_size=1536,
    ),
    "resnet50": _hf("ResNetConfig", "ResNetModel", "pooler_output", _pixels()),
    "convnext-tiny": _hf("ConvNextConfig", "ConvNextModel", "pooler_output", _pixels()),
    "mobilenet_v2-hf": _hf("MobileNetV2Config", "MobileNetV2Model", "pooler_output", _pixels()),
    "efficientnet-b0": _hf("EfficientNetConfig", "EfficientNetModel", "pooler_output", _pixels()),
    "regnet-y-040": _hf("RegNetConfig", "RegNetModel", "pooler_output", _pixels()),
    "swin-tiny": _hf("SwinConfig", "SwinModel", "pooler_output", _pixels()),
    "mobilevit-small": _hf("MobileViTConfig", "MobileViTModel", "pooler_output", _pixels(256)),
    "segformer-b0": _hf("SegformerConfig", "SegformerModel", "last_hidden_state", _pixels()),
    "t5-small-encoder": _hf("T5Config", "T5EncoderModel", "last_hidden_state", _ids()),
    "wav2vec2-base": _hf(
        "Wav2Vec2Config", "Wav2Vec2Model", "last_hidden_state", lambda cfg: (torch.randn(1, 16000),)
    ),
}

ZOO: dict[str, Callable[[], Case]] = {**LOCAL_ZOO, **HF_ZOO}
