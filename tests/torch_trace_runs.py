"""Real TORCH_TRACE folders made here: the course's models run once under `torch.compile` in a fresh process with
`TORCH_TRACE=<dir>` set, and the pack-hook count of that very run (`compiled_saves.counted_saves`).

Shared by the tests of what reads a trace (test files never import one another): `bw.load_trace`'s, and the
magic's and the command line's `--trace`.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent

RUN = """
import json, sys, torch
import torch._dynamo
from compiled_saves import counted_saves
from bwd_widgets.examples import MLP, Transformer

class Broken(torch.nn.Module):
    '''The course's MLP with a graph break between its halves: Dynamo compiles two regions.'''
    def __init__(self):
        super().__init__()
        self.first, self.second = MLP(width=32, depth=2, out=32), MLP(width=32, depth=2, out=4)
    def forward(self, x):
        h = self.first(x)
        torch._dynamo.graph_break()
        return self.second(h)

name, backend, budget, backward = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4] == "backward"
torch.manual_seed(0)
if name == "transformer":
    model, x = Transformer(), torch.randint(0, 64, (2, 8))
else:
    model, x = Broken(), torch.randn(4, 32, requires_grad=True)
saves = counted_saves(model, (x,), backend=backend, budget=budget, backward=backward)
print(json.dumps({"bytes": saves.bytes, "tensors": saves.tensors}))
"""
STEP_WITH_SNAPSHOT = """
import pickle, sys, torch
from torch.cuda import _memory_viz
from bwd_widgets.examples import Transformer

backend, budget, out = sys.argv[1], float(sys.argv[2]), sys.argv[3]
torch.manual_seed(0)
model, tokens = Transformer(), torch.randint(0, 64, (2, 8))
torch._functorch.config.activation_memory_budget = budget
compiled = torch.compile(model, backend=backend)
compiled(tokens).sum().backward()  # compiles: the trace's region
model.zero_grad(set_to_none=True)
with torch.profiler.profile(profile_memory=True, record_shapes=True, with_stack=True) as profile:
    compiled(tokens).sum().backward()
with open(out, "wb") as f:
    pickle.dump(_memory_viz._profile_to_snapshot(profile), f)
"""
"""The course Transformer compiled (the trace's region), then its next training step recorded as the memory snapshot
torch makes of a CPU run (`_memory_viz._profile_to_snapshot`, pickled as `_dump_snapshot` writes it), as a user
records one: argv backend, budget, the snapshot's path."""
MODELS = ("transformer", "broken")
"""transformer: the course Transformer, one region; broken: the course MLP with a graph break, two regions."""


def traced_run(
    folder: Path,
    name: str,
    backend: str,
    budget: float,
    *,
    debug: bool = False,
    cache: Path | None = None,
    backward: bool = False,
) -> dict:
    """Run the model `name` once under torch.compile in a fresh process with TORCH_TRACE=folder; the bytes and
        tensors its pack hook counted. `debug`: with AOT_PARTITIONER_DEBUG=1, torch's switch that writes min-cut's
        knapsack into the trace (`min_cut_information`). `cache`: Inductor's cache folder (TORCHINDUCTOR_CACHE_DIR;
        else torch's default, shared by every run of this machine). `backward`: run backward too, as a training step does
    (torch compiles the backward graph then, and AOT Autograd's cache keeps the region only after it)."""
    env = {"AOT_PARTITIONER_DEBUG": "1"} if debug else {}
    env.update({"TORCHINDUCTOR_CACHE_DIR": str(cache)} if cache is not None else {})
    printed = run_traced(folder, RUN, name, backend, str(budget), "backward" if backward else "forward", env=env)
    counted: dict = json.loads(printed.strip().splitlines()[-1])
    return counted


def run_traced(folder: Path, script: str, *args: str, env: dict[str, str] | None = None) -> str:
    """Run `script` with `args` in a fresh process with TORCH_TRACE=folder (the tests' folder on its path, and
    `env` besides); what it printed."""
    environment = {"TORCH_TRACE": str(folder), "PYTHONPATH": str(TESTS), "PATH": "/usr/bin:/bin"}
    environment.update({"HOME": str(folder.parent), **(env or {})})
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=TESTS.parent,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


_HEADER = re.compile(r"^([VIWEC]\d{4} [\d:.]+ +\d+ [^\]]*\] )(\{.*\})\s*$")


def copied_regions(log: Path, out: Path, size: float, ranks: int = 1) -> int:
    """A long run's trace made from a short one: copies of `log`'s entries, each copy's compile ids under a new
    frame id, spread over `ranks` logs named as torch names a rank's, until `size` bytes are written. The copies."""
    lines = log.read_text().splitlines(keepends=True)
    out.mkdir(parents=True)
    files = [(out / f"dedicated_log_torch_trace_rank_{r}_copied.log").open("w") for r in range(ranks)]
    written, copies = 0, 0
    while written < size:
        rank = copies % ranks
        for line in lines:
            match = _HEADER.match(line)
            if match is not None:
                entry = json.loads(match.group(2))
                if isinstance(entry.get("frame_id"), int):
                    entry["frame_id"] = copies // ranks
                entry["rank"] = rank
                line = match.group(1) + json.dumps(entry) + "\n"
            files[rank].write(line)
            written += len(line)
        copies += 1
    for file in files:
        file.close()
    return copies
