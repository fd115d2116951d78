"""The 16 real GraphNet development samples: extract, write, reload and run."""

import pytest

import bwd_widgets as bw

from _batch_util import run_written_sample
from shared_data import graphnet_sample_names


@pytest.mark.parametrize("name", graphnet_sample_names())
def test_sample_extracts_and_written_samples_run(name, samples_dir, tmp_path):
    try:
        sample = bw.load_graphnet_sample(samples_dir / name)
        extraction = bw.extract(sample, name=name)
    except bw.BwdWidgetsError as error:
        pytest.fail(f"{name}: {error}")
    written = extraction.save_graphnet(tmp_path, name)
    for partition in extraction.partitions:
        suffix = "" if len(extraction.partitions) == 1 else f"subgraph_{partition.index}"
        run_written_sample(written["train_backward"] / suffix, partition.backward)
        run_written_sample(written["train_forward"] / suffix, partition.forward)
    assert extraction.saved_tensors and extraction.gradients
