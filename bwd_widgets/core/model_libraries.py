"""What model libraries do lazily on a model's first call, done before the capture instead.

transformers installs its output-capturing forward hooks (for `output_router_logits`, hidden states,
attentions) the first time a model is asked for those outputs, under a lock: inside a trace that first
call breaks the graph in several places, so a fresh model would give other graphs than the same model a
moment later. Installing them first is what the model's own first call does; nothing else changes.
"""

from __future__ import annotations

import sys

import torch


def settle(model: object) -> None:
    """Do now what `model`'s first call would do to itself (transformers' capturing hooks)."""
    capturing = sys.modules.get("transformers.utils.output_capturing")
    install = getattr(capturing, "maybe_install_capturing_hooks", None)
    registry = getattr(capturing, "_CAN_RECORD_REGISTRY", None)
    if install is None or not isinstance(registry, dict) or not isinstance(model, torch.nn.Module):
        return
    for module in model.modules():
        if registry.get(str(type(module))) and not getattr(module, "_output_capturing_hooks_installed", False):
            install(module)
