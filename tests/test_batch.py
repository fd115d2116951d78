"""Batch extraction and GraphNet output paths: inputs never touched, outputs only where named, all-or-nothing.

Tiny samples built in tmp_path keep these fast; each batch starts real worker processes.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from IPython.utils.capture import capture_output
from ipython_shell import notebook_shell

import bwd_widgets as bw
import bwd_widgets.batch.transport as transport
import bwd_widgets.graphnet.writer as graphnet_writer
from bwd_widgets.batch import plan, run
from bwd_widgets.cli import main as bwd_extract
from bwd_widgets.core.errors import OutputError
from bwd_widgets.graphnet.writer import SPLITS, sample_path

from _batch_util import checksums, summary_of, tiny_sample, worker_processes


def test_inputs_by_absolute_dotdot_and_symlink_paths_extract_and_stay_untouched(tmp_path, conv_bn_dir):
    samples = tmp_path / "samples"
    tiny_sample(samples / "a" / "net")
    tiny_sample(samples / "b" / "net")  # same folder name, another output
    tiny_sample(tmp_path / "elsewhere" / "real")
    (samples / "c").mkdir()
    (samples / "c" / "linked").symlink_to(tmp_path / "elsewhere" / "real")
    tiny_sample(samples / "d" / "absolute")
    listing = tmp_path / "lists" / "dev" / "list.txt"
    listing.parent.mkdir(parents=True)
    listing.write_text(
        f"../../samples/a/net\n../../samples/b/net\n# a comment\n\n../../samples/c/linked\n{samples / 'd' / 'absolute'}\n"
    )
    out = tmp_path / "out"
    before = checksums(tmp_path, conv_bn_dir)

    assert bwd_extract(["--list", str(listing), "--out", str(out), "--workers", "2"]) == 0
    assert bwd_extract([str(conv_bn_dir), "--out", str(out), "--workers", "1"]) == 0

    assert checksums(tmp_path, conv_bn_dir, skip=out) == before, (
        "an input changed, or something was written outside --out"
    )
    names = ["a/net", "b/net", "c/linked", "d/absolute"]
    # the second batch keeps the first one's records: a summary covers every sample of the output folder
    assert [(r["name"], r["status"]) for r in summary_of(out)["samples"]] == [
        (name, "ok") for name in ["a/net", "b/net", "c/linked", "d/absolute", "conv_bn"]
    ]
    for name in [*names, "conv_bn"]:
        assert graphnet_writer.is_complete(out, name, summary_of(out)["settings"]), name
        folder = out / "train_backward" / name / f"{Path(name).name}_train_backward"  # as GraphNet nests it
        assert sorted(p.name for p in folder.iterdir()) == [
            "graph_net.json",
            "input_meta.py",
            "input_tensor_constraints.py",
            "model.py",
            "weight_meta.py",
        ]
    assert (out / "eval_forward" / "conv_bn" / "model.py").read_bytes() == (conv_bn_dir / "model.py").read_bytes()
    backward = bw.load_graphnet_sample(out / "train_backward" / "a" / "net" / "net_train_backward")
    with torch.no_grad():
        gradients = backward.module(*backward.inputs)
    assert [tuple(g.shape) for g in gradients] == [(4, 4), (2, 4)]
    assert sorted(p.name for p in out.iterdir()) == ["eval_forward", "summary.json", "train_backward", "train_forward"]


def test_save_graphnet_refuses_names_that_escape_and_folders_it_did_not_write(conv_bn_dir, tmp_path):
    extraction = bw.extract(bw.load_graphnet_sample(conv_bn_dir))
    out = tmp_path / "out"
    out.mkdir()
    before = checksums(tmp_path)
    for name in ("../escape", "a/../../escape", str(tmp_path / "absolute"), ".", "./"):
        with pytest.raises(OutputError) as error:
            extraction.save_graphnet(out, name)
        assert isinstance(error.value, bw.BwdWidgetsError) and "\n" not in str(error.value)
    assert checksums(tmp_path) == before

    mine = out / "train_forward" / "mine" / "mine_train_forward"
    mine.mkdir(parents=True)
    (mine / "notes.txt").write_text("the user's own file")
    with pytest.raises(OutputError, match="did not write"):
        extraction.save_graphnet(out, "mine")
    assert (mine / "notes.txt").read_text() == "the user's own file"
    assert not (out / "train_backward" / "mine").exists(), "no split may appear without the other"

    written = extraction.save_graphnet(out, "./nested//conv_bn")
    assert written["train_backward"] == out / "train_backward" / "nested" / "conv_bn" / "conv_bn_train_backward"
    first = json.loads((written["train_backward"] / "graph_net.json").read_text())["bwd_widgets"]["run"]
    extraction.save_graphnet(out, "nested/conv_bn")  # ours: replaced
    second = json.loads((written["train_backward"] / "graph_net.json").read_text())["bwd_widgets"]["run"]
    assert first != second
    (written["train_backward"] / "extra.txt").write_text("added by hand")
    with pytest.raises(OutputError, match="did not write"):
        extraction.save_graphnet(out, "nested/conv_bn")
    assert (written["train_backward"] / "extra.txt").is_file()
    flat = extraction.save_graphnet(out / "flat", "nested/conv_bn", layout="flat")
    assert flat["train_backward"] == out / "flat" / "train_backward" / "nested" / "conv_bn"
    with pytest.raises(OutputError, match="inside the sample"):
        extraction.save_graphnet(out / "flat", "nested/conv_bn/deeper", layout="flat")
    assert not list(out.glob(".bwd_widgets_tmp_*"))


def test_magic_refuses_save_names_that_escape(tmp_path):
    out = tmp_path / "out"
    with notebook_shell(
        "import torch\nfrom bwd_widgets.examples import MLP\nmodel = MLP(width=8, depth=1)\nx = torch.randn(2, 8)"
    ) as shell:
        for name, sentence in (
            ("../escape", "contains '..'"),
            ("/tmp/escape", "is an absolute path"),
            (".", "names no folder"),
        ):
            with capture_output() as captured:
                shell.run_cell(f"g = %bwd_extract model(x) --save {out} --name {name} --no-display")
            text = captured.stdout + captured.stderr
            assert sentence in text and "Traceback" not in text
            assert len([line for line in text.strip().splitlines() if line.strip()]) == 1
    assert not (tmp_path / "train_forward").exists() and not Path("/tmp/escape").exists()
    assert not list(out.rglob("model.py"))


def _owned_output(folder: Path, name: str, split: str, stamp: dict, text: str) -> None:
    """An output folder as bwd_widgets writes it: files listed in the marker of its graph_net.json."""
    folder.mkdir(parents=True)
    (folder / "model.py").write_text(text)
    marker = {"name": name, "split": split, **stamp, "files": ["model.py"]}
    (folder / "graph_net.json").write_text(json.dumps({"bwd_widgets": marker}))


def test_install_puts_every_split_back_when_one_swap_fails(tmp_path, monkeypatch):
    out = tmp_path / "out"
    old = graphnet_writer.new_stamp({"mode": "old"})
    for split in SPLITS:
        _owned_output(out / sample_path(split, "net"), "net", split, old, "old")
    before = checksums(out)
    real_rename = Path.rename

    failures = []

    def failing_rename(self, target):
        if Path(target) == out / sample_path("train_backward", "net") and not failures:
            failures.append(self)  # an interrupt as the last split's new folder moves in
            raise KeyboardInterrupt
        return real_rename(self, target)

    monkeypatch.setattr(Path, "rename", failing_rename)
    new = graphnet_writer.new_stamp({"mode": "new"})
    with pytest.raises(KeyboardInterrupt), graphnet_writer.staging(out) as stage:
        for split in SPLITS:
            _owned_output(stage / sample_path(split, "net"), "net", split, new, "new")
        graphnet_writer.install(out, stage, "net", SPLITS)
    assert failures and checksums(out) == before
    assert not list(out.glob(".bwd_widgets_tmp_*"))

    monkeypatch.setattr(Path, "rename", real_rename)
    with graphnet_writer.staging(out) as stage:
        for split in SPLITS:
            _owned_output(stage / sample_path(split, "net"), "net", split, new, "new")
        graphnet_writer.install(out, stage, "net", SPLITS)
    assert graphnet_writer.is_complete(out, "net", {"mode": "new"})
    assert all((out / sample_path(split, "net") / "model.py").read_text() == "new" for split in SPLITS)
    assert not list(out.glob(".bwd_widgets_tmp_*"))


def test_stale_staging_of_a_dead_run_is_cleaned_and_nothing_else(tmp_path):
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(finished.stdout)
    out = tmp_path / "out"
    stale, live, foreign = (out / f".bwd_widgets_tmp_{n}" for n in ("stale", "live", "foreign"))
    for folder, pid in ((stale, dead_pid), (live, os.getpid())):
        folder.mkdir(parents=True)
        owner = {"pid": pid, "host": os.uname().nodename}
        (folder / graphnet_writer.STAGING_OWNER).write_text(json.dumps(owner))
    foreign.mkdir()
    (foreign / "keep.txt").write_text("not ours")
    assert graphnet_writer.clean_stale_staging(out) == [stale]
    assert live.is_dir() and (foreign / "keep.txt").is_file() and not stale.exists()


def test_extract_many_returns_the_summary_as_a_table_on_workers_and_a_local_dask_cluster(tmp_path):
    first = tiny_sample(tmp_path / "samples" / "first")
    broken = tmp_path / "samples" / "broken"
    broken.mkdir()
    summary = bw.extract_many([first, broken], tmp_path / "out", workers=1, progress=False)
    assert summary.counts["ok"] == 1 and summary.counts["error"] == 1
    assert [r["name"] for r in summary.failed] == ["broken"]
    table = repr(summary).splitlines()
    assert table[0].split()[:3] == ["name", "status", "seconds"]
    assert table[1].split()[:2] == ["first", "ok"] and table[2].split()[:2] == ["broken", "error"]
    assert "1 ok, 1 error" in table[-1]

    on_dask = bw.extract_many([first], tmp_path / "dask_out", workers=1, client="local", progress=False)
    assert [(r["name"], r["status"]) for r in on_dask.records] == [("first", "ok")]
    assert graphnet_writer.is_complete(tmp_path / "dask_out", "first", on_dask.settings)
    assert worker_processes() == [], "every worker process is stopped when the batch ends"


def test_resume_is_decided_by_the_plan_and_run_resume_still_works_for_old_callers(tmp_path):
    sample = tiny_sample(tmp_path / "samples" / "net")
    out = tmp_path / "out"
    options = {"scheduler": "in-process", "progress": False}
    assert [r["status"] for r in run(plan([sample], out), **options).records] == ["ok"]
    assert [r["status"] for r in run(plan([sample], out, resume=True), **options).records] == ["skipped"]
    assert [r["status"] for r in run(plan([sample], out), resume=False, **options).records] == ["ok"]
    with pytest.warns(DeprecationWarning, match="pass resume to plan"):
        resumed = run(plan([sample], out), resume=True, **options)  # as callers of 0.1 wrote it
    assert [r["status"] for r in resumed.records] == ["skipped"] and resumed.records[0]["backward_nodes"] > 0


@pytest.mark.parametrize(
    "edit",
    [
        ("model.py", ".relu()", ".sigmoid()"),
        ("weight_meta.py", "std = 0.5", "std = 0.25"),
        ("input_meta.py", "", "# a note the sample's author added\n"),
    ],
    ids=["model.py", "weight_meta.py", "input_meta.py"],
)
def test_resume_redoes_a_sample_whose_input_files_changed_since_its_record(tmp_path, edit):
    """Issue 44, item 14: `--resume` compares a content hash of each sample's input files, kept in its record,
    with the files now; an edited sample is extracted again, an untouched one skipped."""
    samples = tmp_path / "samples"
    edited, untouched = tiny_sample(samples / "edited"), tiny_sample(samples / "untouched")
    out = tmp_path / "out"
    options = {"scheduler": "in-process", "progress": False}
    first = run(plan([edited, untouched], out), **options)
    assert [r["status"] for r in first.records] == ["ok", "ok"]
    assert all(len(r["inputs_digest"]) == 64 for r in summary_of(out)["samples"])
    file, old, new = edit
    text = (edited / file).read_text()
    (edited / file).write_text(text.replace(old, new, 1) if old else text + new)

    resumed = run(plan([edited, untouched], out, resume=True), **options)
    assert {r["name"]: r["status"] for r in resumed.records} == {"edited": "ok", "untouched": "skipped"}
    written = out / "eval_forward" / "edited" / file
    assert written.read_text() == (edited / file).read_text(), "the outputs are made from the edited files"
    if file == "model.py":
        forward = out / sample_path("train_forward", "edited") / "model.py"
        assert "sigmoid" in forward.read_text()
    again = run(plan([edited, untouched], out, resume=True), **options)
    assert [r["status"] for r in again.records] == ["skipped", "skipped"], "unchanged since: nothing is redone"


def test_resume_redoes_a_sample_whose_record_has_no_inputs_digest(tmp_path):
    """A record from before the digest existed (or none: a batch killed between its swap and its summary) cannot
    prove the outputs were made from these files: the sample is extracted again."""
    sample = tiny_sample(tmp_path / "samples" / "net")
    out = tmp_path / "out"
    options = {"scheduler": "in-process", "progress": False}
    run(plan([sample], out), **options)
    summary = summary_of(out)
    for record in summary["samples"]:
        del record["inputs_digest"]
    (out / "summary.json").write_text(json.dumps(summary))
    assert [r["status"] for r in run(plan([sample], out, resume=True), **options).records] == ["ok"]
    assert [r["status"] for r in run(plan([sample], out, resume=True), **options).records] == ["skipped"]


def _dask(*args: str, log: Path) -> subprocess.Popen:
    dask = Path(sys.executable).with_name("dask")
    return subprocess.Popen([str(dask), *args], stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def test_dask_cluster_loses_a_worker_mid_batch_and_writes_every_sample_once(tmp_path, monkeypatch):
    from distributed import Client

    names = [f"s{i}" for i in range(6)]
    for name in names:
        tiny_sample(tmp_path / "samples" / name, prelude="import time\ntime.sleep(2)")
    scheduler_file = tmp_path / "scheduler.json"
    started = [
        _dask(
            "scheduler",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--no-dashboard",
            "--scheduler-file",
            str(scheduler_file),
            log=tmp_path / "scheduler.log",
        )
    ]
    installs = []
    real_install = transport.install

    def counting_install(out, stage, name, splits, layout):
        installs.append(name)
        return real_install(out, stage, name, splits, layout)

    monkeypatch.setattr(transport, "install", counting_install)  # the client stores each result through it
    try:
        for _ in range(300):
            if scheduler_file.exists() and scheduler_file.stat().st_size:
                break
            time.sleep(0.1)
        address = json.loads(scheduler_file.read_text())["address"]
        workers = {}
        for label in ("w0", "w1"):
            workers[label] = _dask(
                "worker",
                address,
                "--nworkers",
                "1",
                "--nthreads",
                "1",
                "--name",
                label,
                "--host",
                "127.0.0.1",
                "--no-dashboard",
                log=tmp_path / f"{label}.log",
            )
            started.append(workers[label])
        with Client(address, timeout=60) as client:
            client.wait_for_workers(2, timeout=120)
            out = tmp_path / "out"
            outcome = {}
            runner = threading.Thread(
                target=lambda: outcome.setdefault(
                    "code",
                    bwd_extract(
                        [str(tmp_path / "samples" / n) for n in names] + ["--out", str(out), "--scheduler", address]
                    ),
                )
            )
            runner.start()
            killed = None
            while killed is None and runner.is_alive():
                busy = {w: keys for w, keys in client.processing().items() if keys}
                done = len(summary_of(out)["samples"]) if (out / "summary.json").exists() else 0
                if done >= 1 and busy:
                    address_of_busy = next(iter(busy))
                    killed = client.scheduler_info()["workers"][address_of_busy]["name"]
                    _stop(workers[killed])
                time.sleep(0.2)
            runner.join(timeout=600)
        assert killed is not None, "the batch ended before a worker could be killed mid-batch"
        assert outcome["code"] == 0
        assert sorted(installs) == names, "every sample written exactly once"
        records = summary_of(out)["samples"]
        assert sorted((r["name"], r["status"]) for r in records) == [(n, "ok") for n in names]
        for name in names:
            assert graphnet_writer.is_complete(out, name, summary_of(out)["settings"])
    finally:
        for process in reversed(started):
            _stop(process)


def test_a_module_in_the_current_folder_does_not_shadow_the_standard_library_in_workers(tmp_path, monkeypatch):
    """`python -c` puts the current folder first on sys.path; a user's select.py there must not be imported."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "select.py").write_text("raise SystemExit('the user select.py was imported')\n")
    sample = tiny_sample(tmp_path / "samples" / "linear")
    monkeypatch.chdir(work)
    summary = bw.extract_many([sample], tmp_path / "out", workers=1, progress=False)
    assert [(r["name"], r["status"]) for r in summary.records] == [("linear", "ok")], summary.records
    assert graphnet_writer.is_complete(tmp_path / "out", "linear", summary.settings)
    assert (work / "select.py").read_text().startswith("raise SystemExit"), "the user's file is untouched"


def test_a_worker_pauses_the_cycle_collector_while_a_sample_runs(tmp_path):
    """A worker process runs each sample with Python's cycle collector off and collects once the record is sent
    (the sample's own code reports what it sees); the process the user works in is left as it was."""
    import gc

    prelude = "import gc\nraise RuntimeError(f'collector enabled: {gc.isenabled()}')"
    sample = tiny_sample(tmp_path / "samples" / "reports", prelude=prelude)
    summary = bw.extract_many([sample], tmp_path / "out", workers=1, progress=False)
    assert [r["status"] for r in summary.records] == ["error"]
    assert "collector enabled: False" in summary.records[0]["reason"]
    assert gc.isenabled()
