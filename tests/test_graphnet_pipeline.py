"""GraphNet's own tools on what we write: its validator, its extractor's output tree, its sample-pass driver.

The tools run from ../shared/peer (GraphNet's package, live, unchanged), each in its own process as GraphNet
runs them.
"""

import base64
import json
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

import bwd_widgets as bw
from bwd_widgets.batch.sample_pass import BackwardGraphExtractorPass
from bwd_widgets.cli import main as bwd_extract
from bwd_widgets.core.errors import SamplePassError
from bwd_widgets.graphnet.validate import GRAPHNET_DYNAMO_CONFIG, HASH_FILE, validate_sample
from bwd_widgets.graphnet.writer import TRAIN_SPLITS, sample_path

from _batch_util import summary_of, tiny_sample
from shared_data import shared_path

THREE = ["torchvision/mobilenet_v2", "timm/test_efficientnet.r160_in1k", "timm/rexnet_100.nav_in1k"]
"""Samples GraphNet's extractor extracts on this CPU machine, of three model families."""
PASS_FILE = Path(__file__).resolve().parents[1] / "bwd_widgets" / "batch" / "sample_pass.py"


@pytest.fixture(scope="module")
def peer_dir():
    return shared_path("peer")


def _graphnet(peer_dir: Path, *arguments: str, timeout: float = 900) -> subprocess.CompletedProcess:
    """Run one of GraphNet's tools as GraphNet's README does: `python -m graph_net...` from its folder."""
    return subprocess.run(
        [sys.executable, *arguments],
        cwd=peer_dir,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def _sample_folders(out: Path) -> list[Path]:
    """Every sample folder written under the train splits (`subgraph_N` folders counted one by one)."""
    return [path.parent for split in TRAIN_SPLITS for path in sorted((out / split).rglob("graph_net.json"))]


def _files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def validated(samples_dir, tmp_path_factory):
    """`bwd-extract --validate` on the 16 shared samples, as the README shows it."""
    out = tmp_path_factory.mktemp("validated") / "out"
    command = ["--list", str(samples_dir / "dev_list.txt"), "--out", str(out), "--workers", "2", "--validate"]
    return out, bwd_extract(command)


def test_validate_checks_every_sample_written_from_the_16_shared_samples(validated):
    out, exit_code = validated
    summary = summary_of(out)
    assert exit_code == 0, summary["samples"]
    assert summary["layout"] == "graphnet" and summary["counts"]["ok"] == 16
    assert summary["validation"] == {"passed": 16, "failed": 0}
    for record in summary["samples"]:
        folders = [
            f
            for f in _sample_folders(out)
            if f.relative_to(out).as_posix().split("/", 1)[1].startswith(record["name"] + "/")
        ]
        assert record["validation"] == "passed" and record["validated_folders"] == len(folders) >= 2, record
    for folder in _sample_folders(out):
        assert re.fullmatch(r"[0-9a-f]{64}", (folder / HASH_FILE).read_text()), folder
        assert HASH_FILE in json.loads((folder / "graph_net.json").read_text())["bwd_widgets"]["files"]


def _one_kind_per_sample(out: Path) -> dict[str, list[Path]]:
    """Of each sample (by name), its forward folders or its backward ones, the kind alternating by sample."""
    chosen = {}
    for index, record in enumerate(summary_of(out)["samples"]):
        split = TRAIN_SPLITS[index % len(TRAIN_SPLITS)]
        below = f"{split}/{record['name']}/"
        chosen[record["name"]] = [f for f in _sample_folders(out) if f.relative_to(out).as_posix().startswith(below)]
    return chosen


def test_graphnet_validator_passes_every_sample_and_writes_our_hash(validated, peer_dir, tmp_path):
    """GraphNet's validator (three processes per sample) on each of the 16 samples, its forward graphs or its
    backward ones, each kind eight times; it rewrites graph_hash.txt. (Every folder of each is validated by
    `--validate` above, with GraphNet's own extractor and loaders: GraphNet's command line on all of them took 15
    minutes of CI's 90, this half of them.)"""
    out, _ = validated
    chosen = _one_kind_per_sample(out)
    assert len(chosen) == 16 and all(chosen.values())
    folders = [folder for kind in chosen.values() for folder in kind]
    assert {f.relative_to(out).parts[0] for f in folders} == set(TRAIN_SPLITS)

    def validate(indexed: tuple[int, Path]) -> tuple[Path, Path, subprocess.CompletedProcess]:
        index, folder = indexed
        copy = tmp_path / str(index) / folder.name
        shutil.copytree(folder, copy)
        (copy / HASH_FILE).unlink()  # the hash it finds afterwards is the one it wrote
        arguments = ["--model-path", str(copy), "--no-check-redundancy", "--workspace", str(tmp_path / f"ws{index}")]
        return folder, copy, _graphnet(peer_dir, "-m", "graph_net.torch.validate", *arguments)

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(validate, enumerate(folders)))
    failed = [(folder, run.stderr[-600:]) for folder, _, run in results if run.returncode != 0]
    assert not failed, failed
    for folder, copy, run in results:
        assert "Validation success" in run.stdout, folder
        assert (copy / HASH_FILE).read_text() == (folder / HASH_FILE).read_text(), folder


def test_output_tree_is_graphnet_extractors_tree(samples_dir, peer_dir, tmp_path):
    """Same paths, file names, graph_net.json keys and values, model.py text as GraphNet's extractor writes."""
    peer_out, ours = tmp_path / "peer", tmp_path / "ours"
    for rel in THREE:
        run = _graphnet(
            peer_dir, "run_backward_extractor.py", str(samples_dir), rel, str(peer_out), "--cuda-metas-to-cpu"
        )
        assert '"status": "ok"' in run.stdout, run.stdout[-400:] + run.stderr[-400:]
    assert (
        bwd_extract([*(str(samples_dir / rel) for rel in THREE), "--root", str(samples_dir), "--out", str(ours)]) == 0
    )

    assert _files(ours) - {"summary.json"} == _files(peer_out)
    for relative in sorted(_files(peer_out)):
        theirs, mine = peer_out / relative, ours / relative
        if relative.endswith("graph_net.json"):
            their_info, my_info = json.loads(theirs.read_text()), json.loads(mine.read_text())
            assert {key: my_info[key] for key in their_info} == their_info, relative
            assert set(my_info) - set(their_info) == {"bwd_widgets"}, relative  # our marker, GraphNet's tools ignore it
        elif relative.endswith("model.py"):
            assert mine.read_text() == theirs.read_text(), relative
        elif relative.startswith("eval_forward/"):  # the input as it is (the peer's run copies it with cpu metas)
            assert mine.read_bytes() == (samples_dir / relative.removeprefix("eval_forward/")).read_bytes(), relative
    for rel in THREE:  # and each written sample loads back and runs
        for split in TRAIN_SPLITS:
            sample = bw.load_graphnet_sample(ours / sample_path(split, rel))
            with torch.no_grad():
                sample.module(*sample.inputs)


def test_graphnet_driver_runs_our_sample_pass(samples_dir, peer_dir, tmp_path):
    """`python -m graph_net.apply_sample_pass` with our class in place of GraphNet's BackwardGraphExtractorPass."""
    listing = tmp_path / "list.txt"
    chosen = [THREE[0], THREE[1], "torchgeometric/RECT_L"]  # RECT_L: one GraphNet's own pass cannot extract here
    listing.write_text("\n".join(chosen) + "\n")
    out = tmp_path / "out"

    def drive(**config) -> subprocess.CompletedProcess:
        encoded = base64.b64encode(json.dumps(config).encode()).decode()
        return _graphnet(
            peer_dir,
            "-m",
            "graph_net.apply_sample_pass",
            "--sample-pass-file-path",
            str(PASS_FILE),
            "--sample-pass-class-name",
            "BackwardGraphExtractorPass",
            "--sample-pass-config",
            encoded,
            "--model-path-list",
            str(listing),
        )

    base = {"model_path_prefix": str(samples_dir), "output_dir": str(out), "device": "auto"}
    run = drive(**base)
    assert run.returncode == 0 and "apply_sample_pass failed" not in run.stdout, run.stdout[-800:] + run.stderr[-800:]
    for rel in chosen:
        assert f"bwd_widgets: ok {rel}" in run.stdout
        for split in TRAIN_SPLITS:
            assert (out / sample_path(split, rel) / "model.py").is_file()
        assert (out / "eval_forward" / rel / "model.py").read_bytes() == (samples_dir / rel / "model.py").read_bytes()
    assert [(r["name"], r["status"]) for r in summary_of(out)["samples"]] == [(rel, "ok") for rel in chosen]

    again = drive(**base, resume=True)
    assert again.returncode == 0 and all(f"bwd_widgets: skipped {rel}" in again.stdout for rel in chosen)
    assert [r["status"] for r in summary_of(out)["samples"]] == ["skipped"] * 3

    wrong = drive(**base, budget=0.5)
    assert "unknown sample pass config key(s) budget: use " in wrong.stderr


def test_sample_pass_refuses_bad_config_in_one_sentence(tmp_path):
    for config, message in (
        ({"output_dir": str(tmp_path)}, "needs model_path_prefix"),
        ({"model_path_prefix": str(tmp_path), "output_dir": str(tmp_path)}, "is model_path_prefix"),
        ({"model_path_prefix": "a", "output_dir": "b", "workers": 2}, "unknown sample pass config key"),
    ):
        with pytest.raises(SamplePassError, match=message) as error:
            BackwardGraphExtractorPass(config)
        assert "\n" not in str(error.value) and isinstance(error.value, bw.BwdWidgetsError)


def test_our_graph_hash_is_graphnets_and_leaves_torch_as_it_was(validated, peer_dir, monkeypatch):
    """GraphNet's own extractor and loaders (importable from ../shared/peer) give the hash ours wrote."""
    out, _ = validated
    monkeypatch.syspath_prepend(str(peer_dir))
    before = {key: getattr(torch._dynamo.config, key) for key in GRAPHNET_DYNAMO_CONFIG}
    for folder in [out / sample_path(split, THREE[1]) for split in TRAIN_SPLITS]:
        theirs = validate_sample(folder, write_hash=False, use_graphnet=True)
        ours = validate_sample(folder, write_hash=False, use_graphnet=False)
        assert (theirs.by, ours.by) == ("graph_net", "bwd_widgets")
        assert theirs.passed and ours.passed
        assert theirs.graph_hash == ours.graph_hash == (folder / HASH_FILE).read_text()
    assert {key: getattr(torch._dynamo.config, key) for key in GRAPHNET_DYNAMO_CONFIG} == before
    assert not torch.compiler.is_compiling()


def test_our_copies_of_graphnets_rules_equal_its_own(peer_dir):
    """The code rewrites, the model.py template and the Dynamo settings, compared with GraphNet's in its process."""
    probe = """
import json, types, torch
from graph_net.torch.fx_graph_serialize_util import serialize_graph_module_to_str
from graph_net.torch.utils import apply_templates
from bwd_widgets.graphnet.validate import STABLE_API_REPLACEMENTS, GRAPHNET_DYNAMO_CONFIG, serialize_code, graphnet_model_code
calls = [pattern.replace("\\\\", "").replace("(", "(x)") for pattern, _ in STABLE_API_REPLACEMENTS]
code = "def forward(self, x):\\n" + "".join(f"    y = {call}\\n" for call in calls) + "    z = device('cpu'), inf\\n"
print(json.dumps({
    "serialized": serialize_graph_module_to_str(types.SimpleNamespace(code=code)) == serialize_code(code),
    "changed": serialize_code(code) != code,
    "template": apply_templates(code) == graphnet_model_code(code),
    "config": {k: getattr(torch._dynamo.config, k) for k in GRAPHNET_DYNAMO_CONFIG} == GRAPHNET_DYNAMO_CONFIG,
}))
"""
    run = _graphnet(peer_dir, "-c", probe, timeout=300)
    assert run.returncode == 0, run.stderr[-600:]
    assert json.loads(run.stdout.strip().splitlines()[-1]) == {
        "serialized": True,
        "changed": True,
        "template": True,
        "config": True,
    }


def test_list_entries_relative_to_the_current_folder_or_root_and_errors_say_where(tmp_path, monkeypatch, capsys):
    samples = tmp_path / "samples"
    tiny_sample(samples / "a" / "net")
    tiny_sample(samples / "b" / "net")
    listing = tmp_path / "lists" / "list.txt"
    listing.parent.mkdir()
    listing.write_text("a/net\nb/net\n")  # relative to where one stands, as `tar -T` lists are

    monkeypatch.chdir(samples)
    assert bwd_extract(["--list", str(listing), "--out", str(tmp_path / "here"), "--workers", "1"]) == 0
    assert [r["name"] for r in summary_of(tmp_path / "here")["samples"]] == ["a/net", "b/net"]

    monkeypatch.chdir(tmp_path)
    assert bwd_extract(["--list", str(listing), "--out", str(tmp_path / "lost"), "--workers", "1"]) == 1
    reason = summary_of(tmp_path / "lost")["samples"][0]["reason"]
    assert f"a/net from the list {listing} is not a folder under {listing.parent}" in reason and "--root" in reason
    assert "\n" not in reason

    command = ["--list", str(listing), "--model-path-prefix", str(samples), "--out", str(tmp_path / "rooted")]
    assert bwd_extract([*command, "--workers", "1"]) == 0  # GraphNet's name for --root
    assert [r["status"] for r in summary_of(tmp_path / "rooted")["samples"]] == ["ok", "ok"]
    capsys.readouterr()


def test_an_output_folder_keeps_its_layout_and_validator_hashes_do_not_lock_it(tmp_path):
    sample = tiny_sample(tmp_path / "samples" / "net")
    out = tmp_path / "out"
    assert bwd_extract([str(sample), "--out", str(out), "--layout", "flat", "--workers", "1"]) == 0
    assert (out / "train_backward" / "net" / "model.py").is_file() and summary_of(out)["layout"] == "flat"
    # a later run without --layout keeps the folder's layout: the resume finds its outputs complete
    assert bwd_extract([str(sample), "--out", str(out), "--resume", "--workers", "1"]) == 0
    assert summary_of(out)["samples"][0]["status"] == "skipped" and summary_of(out)["layout"] == "flat"

    nested = tmp_path / "nested"
    assert bwd_extract([str(sample), "--out", str(nested), "--workers", "1"]) == 0
    folder = nested / "train_backward" / "net" / "net_train_backward"
    (folder / HASH_FILE).write_text("0" * 64)  # GraphNet's validator adds one to a sample it checks
    assert bwd_extract([str(sample), "--out", str(nested), "--workers", "1"]) == 0  # still ours: replaced
    assert not (folder / HASH_FILE).exists()


def test_save_graphnet_validates_or_writes_nothing(conv_bn_dir, tmp_path):
    extraction = bw.extract(bw.load_graphnet_sample(conv_bn_dir))
    written = extraction.save_graphnet(tmp_path / "out", "conv_bn", validate=True)
    for folder in written.values():
        assert re.fullmatch(r"[0-9a-f]{64}", (folder / HASH_FILE).read_text())
        assert HASH_FILE in json.loads((folder / "graph_net.json").read_text())["bwd_widgets"]["files"]

    broken = tmp_path / "broken"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("bwd_widgets.graphnet.validate._first_output", _raise)
        with pytest.raises(bw.BwdWidgetsError, match="failed GraphNet's validation: could not run it") as error:
            extraction.save_graphnet(broken, "conv_bn", validate=True)
    assert "\n" not in str(error.value)
    assert not (broken / "train_forward").exists() and not (broken / "train_backward").exists()


def _raise(model, inputs):
    raise RuntimeError("boom")


def _token_models() -> dict[str, tuple[torch.nn.Module, torch.Tensor]]:
    """Models whose input is integer token ids, indexing an embedding table: the course's Transformer and
    transformers' GPT-2 (a small config), called as their docs call them."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from bwd_widgets.examples import Transformer

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=2, n_head=2, bos_token_id=1, eos_token_id=2)
    return {
        "course Transformer": (Transformer(), torch.randint(0, 64, (2, 8))),
        "GPT-2": (GPT2LMHeadModel(config).eval(), torch.randint(0, 64, (2, 8))),
    }


@pytest.mark.parametrize("model_name", ["course Transformer", "GPT-2"])
def test_fake_mode_samples_of_token_models_run_under_graphnets_validator(model_name, peer_dir, tmp_path):
    """Fake mode holds no values: an integer input's meta gives a range (the embedding table it indexes where it
    is passed straight to one, else 0), without which GraphNet's loaders draw it as floats and its runner fails."""
    model, tokens = _token_models()[model_name]
    written = bw.extract(model, tokens, mode="fake").save_graphnet(tmp_path / "out", "tokens")
    for split, sample in written.items():
        metas = (sample / "weight_meta.py").read_text()
        assert "max_val = 63" in metas or (
            model_name == "GPT-2" and split == "train_forward" and "max_val = 0" in metas
        )
        arguments = ["--model-path", str(sample), "--no-check-redundancy", "--workspace", str(tmp_path / split)]
        run = _graphnet(peer_dir, "-m", "graph_net.torch.validate", *arguments)
        assert run.returncode == 0 and "Validation success" in run.stdout, run.stdout[-800:] + run.stderr[-800:]
