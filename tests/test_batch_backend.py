"""`bwd-extract --backend` and `extract_many(backend=...)`: a batch over GraphNet samples extracts with the backend
asked for, records it in each output's marker, and `resume` treats another backend as other settings (an output
that names none was made by the old default, aot_eager, and stays complete for it)."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

import bwd_widgets as bw
from bwd_widgets.batch import DEFAULT_BACKEND, extract_many, plan
from bwd_widgets.batch.records import backend_of
from bwd_widgets.core.errors import BwdWidgetsError
from bwd_widgets.core.kinds import BACKENDS
from bwd_widgets.core.partitioners import allowed_on, partitioner_names, registered_partitioners
from bwd_widgets.graphnet.sample import load_graphnet_sample
from bwd_widgets.graphnet.writer import is_complete, sample_path

from _batch_util import summary_of, tiny_sample

if TYPE_CHECKING:
    from pathlib import Path


def _markers(out: Path, name: str) -> list[dict]:
    return [
        json.loads((out / sample_path(split, name) / "graph_net.json").read_text())["bwd_widgets"]["settings"]
        for split in ("train_forward", "train_backward")
    ]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_batch_extracts_with_its_backend_and_resume_tells_backends_apart(tmp_path: Path, backend: str) -> None:
    sample = tiny_sample(tmp_path / "samples" / "tiny")
    out = tmp_path / "out"
    summary = extract_many([sample], out, backend=backend, client="in-process", progress=False)
    (record,) = summary.records
    assert record["status"] == "ok", record
    # the figures are those of bw.extract with that backend, on the same sample, here
    alone = bw.extract(load_graphnet_sample(sample), backend=backend, cache=False)
    assert record["saved_activation_bytes"] == alone.saved_activation_bytes
    assert record["backward_nodes"] == alone.backward_node_count
    settings = summary_of(out)["settings"]
    assert backend_of(settings) == backend == alone.backend
    assert ("backend" in settings) == (backend != DEFAULT_BACKEND)  # the default is written as outputs always were
    assert _markers(out, "tiny") == [settings, settings] and is_complete(out, "tiny", settings)
    for other in BACKENDS:
        again = extract_many([sample], out, backend=other, resume=True, client="in-process", progress=False)
        assert again.records[0]["status"] == ("skipped" if other == backend else "ok")
        backend = other
    assert backend_of(_markers(out, "tiny")[0]) == BACKENDS[-1]


def test_the_backends_partition_the_sample_differently(tmp_path: Path) -> None:
    """The test above would pass with the backend dropped on the way if both saved alike: here they do not."""
    sample = load_graphnet_sample(tiny_sample(tmp_path / "tiny"))
    figures = {
        (e.saved_activation_bytes, e.backward_node_count)
        for e in (bw.extract(sample, backend=backend, cache=False) for backend in BACKENDS)
    }
    assert len(figures) == len(BACKENDS)


@pytest.mark.parametrize(("backend", "partitioner"), list(itertools.product(BACKENDS, partitioner_names())))
def test_a_partitioner_the_backend_never_uses_is_refused_before_any_work(
    tmp_path: Path, backend: str, partitioner: str
) -> None:
    sample = tiny_sample(tmp_path / "samples" / "tiny")
    registered = next(p for p in registered_partitioners() if partitioner in (p.name, *p.aliases))
    if allowed_on(backend, registered):
        batch = plan([sample], tmp_path / "out", partitioner=partitioner, backend=backend)
        assert backend_of(batch.settings) == backend
    else:
        with pytest.raises(BwdWidgetsError) as error:
            plan([sample], tmp_path / "out", partitioner=partitioner, backend=backend)
        assert "\n" not in str(error.value) and "min_cut" in str(error.value)
    assert not (tmp_path / "out").exists()


def test_the_command_line_carries_backend_to_the_outputs(conv_bn_dir: Path, tmp_path: Path) -> None:
    """`bwd-extract --backend inductor` on a shared GraphNet sample, as its own process: the written outputs hold
    Inductor's partition (the figures `bw.extract` gives with that backend) and say so."""
    out = tmp_path / "out"
    command = [sys.executable, "-m", "bwd_widgets", str(conv_bn_dir), "--out", str(out), "--workers", "1"]
    done = subprocess.run([*command, "--backend", "inductor"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    (record,) = summary_of(out)["samples"]
    inductor = bw.extract(load_graphnet_sample(conv_bn_dir), backend="inductor", cache=False)
    assert record["saved_activation_bytes"] == inductor.saved_activation_bytes
    assert record["backward_nodes"] == inductor.backward_node_count
    assert _markers(out, record["name"])[0]["backend"] == "inductor"
    assert summary_of(out)["settings"]["partitioner"] == "min_cut"
    refused = subprocess.run(
        [*command, "--backend", "inductor", "--partitioner", "default"], capture_output=True, text=True, timeout=300
    )
    (line,) = refused.stderr.strip().splitlines()
    assert refused.returncode == 2 and line.startswith("bwd-extract: error: ") and "min-cut" in line
