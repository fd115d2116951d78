"""One training step under FSDP2 (`fully_shard`), run by the capstone (notebook 9) with
`torchrun --standalone --nproc_per_node 2 09_fsdp2_step.py`: two processes on this CPU (the gloo backend), as
two GPUs would run it (NCCL). Rank 0 prints one JSON line: each rank's bytes of parameters, gradients and AdamW's
state after the step, against the whole model's: what sharding divides."""

import json
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import fully_shard


def local_bytes(tensors):
    """Bytes this rank holds: a sharded tensor (DTensor) counts its own shard."""
    total = 0
    for t in tensors:
        t = t.to_local() if hasattr(t, "to_local") else t
        total += t.numel() * t.element_size()
    return total


def main():
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 256)) for _ in range(4)])
    whole = sum(p.numel() * p.element_size() for p in model.parameters())
    for block in model:
        fully_shard(block)  # each block's parameters gathered only while it computes
    fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    torch.manual_seed(dist.get_rank())  # each rank its own micro-batch
    loss = model(torch.randn(8, 256)).square().mean()
    loss.backward()
    optimizer.step()
    state = [t for s in optimizer.state.values() for t in s.values() if torch.is_tensor(t) and t.dim() > 0]
    report = {
        "rank": dist.get_rank(),
        "world": dist.get_world_size(),
        "whole_parameters": whole,
        "parameters": local_bytes(model.parameters()),
        "gradients": local_bytes(p.grad for p in model.parameters()),
        "optimizer_state": local_bytes(state),
    }
    reports = [None] * dist.get_world_size()
    dist.all_gather_object(reports, report)  # one line from rank 0: two ranks printing at once could interleave
    if dist.get_rank() == 0:
        print(json.dumps(reports), flush=True)
    dist.barrier()  # both ranks done with gloo before either tears it down
    dist.destroy_process_group()
    # leave without running C++ destructors at interpreter exit: gloo's threads there can abort a finished process
    # ("terminate called without an active exception"), which torchrun reports as a failed rank
    os._exit(0)


if __name__ == "__main__":
    main()
