"""FLOP estimates per fx node, from torch's FLOP counter run on fake tensors."""

from __future__ import annotations

from typing import Any

import torch
import torch.fx

from .compat import FakeTensorMode, detect_fake_mode, run_and_save_rng_state, run_with_rng_state
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

        def call_function(self, target: Any, args: Any, kwargs: Any) -> Any:
            """The random ops a partition recomputes run wrapped in torch's rng-state operators, which the FLOP
            counter's mode cannot run (they answer NotImplemented): count the op they wrap, as it runs. Under
            fake tensors the generator's state changes nothing, so a saved state is a stand-in."""
            if target is run_with_rng_state:
                return args[1](*args[2:], **kwargs)
            if target is run_and_save_rng_state:
                return torch.empty(0, dtype=torch.uint8), args[0](*args[1:], **kwargs)
            return super().call_function(target, args, kwargs)

    counter = FlopCounterMode(display=False)
    with interrupts_held(), fake_mode, counter, torch.no_grad():  # Ctrl-C inside an __enter__ left fake mode on
        Counting(gm).run(*values)
    return flops
