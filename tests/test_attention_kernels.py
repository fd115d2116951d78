"""What attention saves on the stand-in device, as docs/guide/extract.md says ("Fake mode, attention and a GPU").

bwd_widgets traces on the CPU, in real and in fake mode: `F.scaled_dot_product_attention` runs there as torch
chooses on the CPU, and what it saves is what the CPU's kernel saves. Without attention dropout that is torch's
CPU flash kernel (`_scaled_dot_product_flash_attention_for_cpu`) and its log-sum-exp row, as a GPU's fused kernels
save; under attention dropout the CPU runs the math kernel, which saves the seq x seq probabilities and the dropout
mask, where a GPU's fused kernels would not. Held here on a real transformers GPT-2 with SDPA attention, called as
its docs call it, read from the graphs torch traced, in both modes, on every tested torch. (What a GPU's kernels
save cannot be traced without a GPU: the guide says why.)"""

from __future__ import annotations

import pytest
import torch

import bwd_widgets as bw
from bwd_widgets.core.kinds import MODES

SEQ, LAYERS, HEADS, BATCH = 64, 2, 2, 2


def _gpt2(training: bool) -> tuple[torch.nn.Module, torch.Tensor]:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=64, n_positions=SEQ, n_embd=32, n_layer=LAYERS, n_head=HEADS, bos_token_id=1, eos_token_id=2
    )
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return GPT2LMHeadModel(config).train(training), torch.randint(3, 64, (BATCH, SEQ))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("training", [False, True], ids=["eval", "train (attention dropout)"])
def test_attention_saves_what_the_cpus_kernel_saves(mode: str, training: bool) -> None:
    model, ids = _gpt2(training)
    g = bw.extract(model, input_ids=ids, labels=ids, mode=mode)
    ops = [str(n.target) for n in g.forward.graph.nodes if n.op == "call_function"]
    flash = [op for op in ops if "_scaled_dot_product_flash_attention_for_cpu" in op]
    square = [s for s in g.saved_tensors if tuple(s.shape[-2:]) == (SEQ, SEQ)]
    log_sum_exp = [s for s in g.saved_tensors if tuple(s.shape) == (BATCH, HEADS, SEQ) and s.dtype == "torch.float32"]
    if training:
        assert flash == [], "under attention dropout the CPU runs the math kernel"
        assert (
            sorted(s.dtype for s in square if len(s.shape) == 4) == ["torch.bool"] * LAYERS + ["torch.float32"] * LAYERS
        )
        assert log_sum_exp == []
    else:
        assert len(flash) == LAYERS, "torch's CPU flash kernel, one per layer"
        assert square == [] and len(log_sum_exp) == LAYERS
