"""Small reference models for notebooks, tests and benchmarks (torch only)."""

from __future__ import annotations

import torch
from torch import nn


class MLP(nn.Module):
    """`depth` blocks of Linear + GELU, then a linear head."""

    def __init__(self, width: int = 16, depth: int = 4, out: int = 2) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(width, width), nn.GELU()) for _ in range(depth))
        self.head = nn.Linear(width, out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        out: torch.Tensor = self.head(x)
        return out


class Attention(nn.Module):
    """Multi-head self-attention written out, so every op shows in the graph."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width, bias=False)
        self.proj = nn.Linear(width, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, width = x.shape
        q, k, v = self.qkv(x).view(batch, seq, 3, self.heads, width // self.heads).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-2, -1)) / (width // self.heads) ** 0.5
        out = scores.softmax(-1) @ v
        projected: torch.Tensor = self.proj(out.transpose(1, 2).reshape(batch, seq, width))
        return projected


class Block(nn.Module):
    """A pre-norm transformer block: attention and a 4x MLP, each with a residual."""

    def __init__(self, width: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(width)
        self.attn = Attention(width, heads)
        self.norm2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        out: torch.Tensor = x + self.mlp(self.norm2(x))
        return out


class Transformer(nn.Module):
    """Token embedding, `depth` blocks, output projection."""

    def __init__(self, width: int = 32, depth: int = 2, heads: int = 4, vocab: int = 64) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(depth))
        self.norm = nn.LayerNorm(width)
        self.out = nn.Linear(width, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        logits: torch.Tensor = self.out(self.norm(x))
        return logits


class ConvBN(nn.Module):
    """The reference case: a 3x3 convolution followed by batch norm."""

    def __init__(self, channels_in: int = 3, channels_out: int = 8) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels_in, channels_out, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(channels_out, eps=1e-3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.bn(self.conv(x))
        return out


def big_transformer_on_meta(depth: int = 32, width: int = 4096, heads: int = 32, vocab: int = 32000) -> Transformer:
    """About 6.4 B parameters at the defaults, built on the meta device: no memory."""
    with torch.device("meta"):
        return Transformer(width=width, depth=depth, heads=heads, vocab=vocab)
