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
