"""Small models shared by the tests."""

from dataclasses import dataclass

import torch
from torch import nn


class MLP(nn.Module):
    def __init__(self, width=16, depth=4):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(width, width), nn.GELU()) for _ in range(depth))
        self.head = nn.Linear(width, 2)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


class Block(nn.Module):
    """A pre-norm transformer block."""

    def __init__(self, width=32, heads=4):
        super().__init__()
        self.norm1 = nn.LayerNorm(width)
        self.attn = nn.MultiheadAttention(width, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class Transformer(nn.Module):
    def __init__(self, width=32, depth=2, heads=4, vocab=64):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(depth))
        self.out = nn.Linear(width, vocab)

    def forward(self, tokens):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.out(x)


@dataclass
class Output:
    logits: torch.Tensor
    hidden: torch.Tensor


class DataclassOut(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        h = self.lin(x).relu()
        return Output(logits=h.sum(-1), hidden=h)


class DictOut(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, x, scale):
        return {"y": self.lin(x) * scale, "count": 3, "parts": [x.sum(), torch.zeros(1)]}


class GraphBreak(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)

    def forward(self, x):
        h = self.a(x).tanh()
        if h.sum().item() > -1e9:  # data-dependent: Dynamo breaks the graph here
            h = h * 2
        return self.b(h).sigmoid()
