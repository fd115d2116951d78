"""FLOP estimates per fx node, from torch's FLOP counter run on fake tensors."""

from __future__ import annotations

from typing import Any

import torch
import torch.fx

from .compat import FakeTensorMode, detect_fake_mode
from .interrupts import interrupts_held


def node_flops(gm: torch.fx.GraphModule) -> dict[str, int]:
    from torch.utils.flop_counter import FlopCounterMode

    values = [n.meta.get("val") for n in gm.graph.find_nodes(op="placeholder")]
    fake_mode = detect_fake_mode([v for v in values if isinstance(v, torch.Tensor)]) or FakeTensorMode()
    flops: dict[str, int] = {}

    class Counting(torch.fx.Interpreter):
        def run_node(self, node: torch.fx.Node) -> Any:
            before = counter.get_total_flops()
            result = super().run_node(node)
            flops[node.name] = counter.get_total_flops() - before
            return result

    counter = FlopCounterMode(display=False)
    with interrupts_held(), fake_mode, counter, torch.no_grad():  # Ctrl-C inside an __enter__ left fake mode on
        Counting(gm).run(*values)
    return flops
