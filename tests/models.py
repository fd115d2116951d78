"""Small models shared by the tests."""

from dataclasses import dataclass

import torch
from torch import nn

from bwd_widgets.examples import MLP, Transformer  # noqa: F401


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
        torch._dynamo.graph_break()
        return self.b(h).sigmoid()


class ScalarSetting(nn.Module):
    """Scales by a tensor read with .item(), as GraphNet samples pass momentum or eps."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x, scale):
        return self.lin(x) * scale.item()


class WideInForward(nn.Module):
    """A broadcast add makes a temporary 256 times the activations, which the sum right after frees: the
    peak is in forward, at an op backward neither saves nor runs under its own name."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(16, 16)
        self.spread = nn.Parameter(torch.randn(256))

    def forward(self, x):
        return (self.proj(x).unsqueeze(-1) + self.spread).sum(-1).tanh()


class Chain(torch.nn.Module):
    """Notebook 4's `depth` layers of x = cos(cos(x @ W))."""

    def __init__(self, width=512, depth=4):
        super().__init__()
        self.weights = torch.nn.ParameterList(torch.randn(width, width) / width**0.5 for _ in range(depth))

    def forward(self, x):
        for w in self.weights:
            x = (x @ w).cos().cos()
        return x


def _transformers_asks() -> bool:
    from transformers.utils import is_torchdynamo_compiling

    return is_torchdynamo_compiling()


ASKS_WHETHER_COMPILING = {
    "torch.compiler.is_compiling": lambda: torch.compiler.is_compiling(),
    "torch.compiler.is_dynamo_compiling": lambda: torch.compiler.is_dynamo_compiling(),
    "torch._dynamo.is_compiling": lambda: torch._dynamo.is_compiling(),
    "torch._utils.is_compiling": lambda: torch._utils.is_compiling(),
    "transformers.utils.is_torchdynamo_compiling": _transformers_asks,  # catches any exception, answers False
}
"""Each way model code asks whether torch.compile is tracing it."""


class AsksWhetherCompiling(nn.Module):
    """Takes another path when torch.compile traces it, as transformers' models and torch's region budgets do:
    compiled it saves one ReLU output, eagerly a sine and a cosine besides."""

    def __init__(self, asks: str = "torch.compiler.is_compiling", width: int = 16):
        super().__init__()
        self.asks = ASKS_WHETHER_COMPILING[asks]
        self.a = nn.Linear(width, width)
        self.b = nn.Linear(width, width)

    def forward(self, x):
        h = self.a(x)
        if self.asks():
            return self.b(h.relu())
        return self.b(h.sin().cos())
