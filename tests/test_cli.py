"""`bwd-extract`: the batch command line."""

import json

import pytest

from bwd_widgets.cli import main as bwd_extract


def test_cli_batch_isolates_failures_and_resumes(conv_bn_dir, tmp_path, capsys):
    broken = tmp_path / "broken"
    broken.mkdir()
    out = tmp_path / "out"
    assert bwd_extract([str(conv_bn_dir), str(broken), "--out", str(out)]) == 1
    summary = json.loads((out / "summary.json").read_text())
    status = {r["name"]: r for r in summary["samples"]}
    assert status["conv_bn"]["status"] == "ok" and status["conv_bn"]["backward_nodes"] == 17
    assert status["conv_bn"]["saved_activation_bytes"] == 2 * 8 * 16 * 16 * 4
    assert status["broken"]["status"] == "error" and "model.py" in status["broken"]["reason"]
    assert "\n" not in status["broken"]["reason"]
    assert (out / "train_backward" / "conv_bn" / "graph_net.json").is_file()
    assert not (out / "train_backward" / "broken").exists()
    err = capsys.readouterr().err
    assert "ok      conv_bn" in err and "error   broken" in err

    assert bwd_extract([str(conv_bn_dir), "--out", str(out), "--resume"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["samples"][0]["status"] == "skipped"
    assert summary["samples"][0]["backward_nodes"] == 17

    low = tmp_path / "low"
    assert bwd_extract([str(conv_bn_dir), "--out", str(low), "--budget", "0"]) == 0
    summary = json.loads((low / "summary.json").read_text())
    assert summary["partitioner"] == "min_cut" and summary["memory_budget"] == 0.0
    info = json.loads((low / "train_backward" / "conv_bn" / "graph_net.json").read_text())
    assert info["partitioner"] == "min_cut" and info["memory_budget"] == 0.0


def test_cli_rejects_bad_arguments(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        bwd_extract(["--out", str(tmp_path)])
    assert exit_info.value.code == 2
    with pytest.raises(SystemExit):
        bwd_extract([str(tmp_path), "--out", str(tmp_path), "--partitioner", "nope"])
    assert "unknown partitioner" in capsys.readouterr().err
