"""A GraphNet sample pass running bwd_widgets' extractor: a drop-in for GraphNet's `BackwardGraphExtractorPass`.

GraphNet's driver loads this file by its path, so it imports bwd_widgets by absolute name:

    python -m graph_net.apply_sample_pass \\
        --sample-pass-file-path "$(python -c 'import bwd_widgets.graphnet_pass as p; print(p.__file__)')" \\
        --sample-pass-class-name BackwardGraphExtractorPass \\
        --sample-pass-config "$(printf '{"model_path_prefix": "samples", "output_dir": "out"}' | base64 -w0)" \\
        --model-path-list samples/list.txt

It takes GraphNet's config keys (`model_path_prefix`, `output_dir`, `device`, `resume`,
`limits_handled_models`) and writes what `bwd-extract` writes, GraphNet's layout and files, with
`summary.json` updated after each sample. Our own keys: `partitioner`, `memory_budget`, `mode`, `validate`,
`backend`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from bwd_widgets.batch import FAILED, plan, run
from bwd_widgets.batch.plan import checked_device
from bwd_widgets.batch.records import DEFAULT_BACKEND
from bwd_widgets.core.errors import BatchError, SamplePassError

GRAPHNET_KEYS = {
    "model_path_prefix": None,
    "output_dir": None,
    "device": "auto",
    "resume": False,
    "limits_handled_models": None,
}
"""The config of GraphNet's own `BackwardGraphExtractorPass`, with its defaults."""
OUR_KEYS = {
    "partitioner": None,
    "memory_budget": None,
    "mode": "real",
    "validate": False,
    "backend": DEFAULT_BACKEND,
}
REQUIRED = ("model_path_prefix", "output_dir")


class BackwardGraphExtractorPass:
    """Called by GraphNet's driver once per sample path (relative to `model_path_prefix`)."""

    def __init__(self, config: dict | None = None):
        config = dict(config or {})
        known = {**GRAPHNET_KEYS, **OUR_KEYS}
        unknown = sorted(set(config) - set(known))
        if unknown:
            raise SamplePassError(
                f"unknown sample pass config key(s) {', '.join(unknown)}: use {', '.join(sorted(known))}."
            )
        missing = [key for key in REQUIRED if not config.get(key)]
        if missing:
            raise SamplePassError(f"the sample pass config needs {' and '.join(missing)}: add them to its JSON.")
        self.config = {**known, **config}
        prefix, out = self.config["model_path_prefix"], self.config["output_dir"]
        if os.path.realpath(prefix) == os.path.realpath(out):
            raise SamplePassError(f"output_dir {out} is model_path_prefix: write the outputs to another folder.")
        self.device = _device(self.config["device"])
        self.num_handled_models = 0

    def __call__(self, rel_model_path: str) -> None:
        config = self.config
        prefix = Path(config["model_path_prefix"])
        batch = plan(
            [prefix / rel_model_path],
            config["output_dir"],
            root=prefix,
            partitioner=config["partitioner"],
            memory_budget=config["memory_budget"],
            mode=config["mode"],
            device=self.device,
            resume=bool(config["resume"]),
            validate=bool(config["validate"]),
            backend=config["backend"],
        )
        summary = run(batch, scheduler="in-process", progress=False)
        if summary.interrupted:
            raise KeyboardInterrupt
        record = summary.records[-1]
        print(f"bwd_widgets: {record['status']} {record['name']}", flush=True)
        if record["status"] in FAILED:
            raise SamplePassError(f"{record['name']}: {record.get('reason', record['status'])}")
        if record.get("validation") == "failed":
            raise SamplePassError(f"{record['name']} failed validation: {'; '.join(record['validation_failures'])}")
        if record["status"] != "skipped":
            self._count_handled()

    def _count_handled(self) -> None:
        """As GraphNet's resumable passes: stop the driver once `limits_handled_models` samples are done."""
        limit = self.config["limits_handled_models"]
        if limit is None:
            return
        self.num_handled_models += 1
        if self.num_handled_models >= limit:
            print("limits_handled_models expired.", flush=True)
            sys.exit(0)


def _device(device: object) -> str:
    """GraphNet's pass: "auto" is cuda where torch sees one, else cpu. Any other device is kept as named, its
    index too (`cuda:1`, `xpu`, `mps`), where GraphNet's own pass keeps only cpu and cuda and sends the rest to
    "auto"; the worker points the sample's `cuda` device strings at it. One torch cannot read is refused here."""
    if device == "auto":
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        return checked_device(device)
    except BatchError as error:
        raise SamplePassError(f"the sample pass config's {error}") from None
