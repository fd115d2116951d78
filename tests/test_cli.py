"""`bwd-extract`: the batch command line."""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from bwd_widgets.cli import _status_line
from bwd_widgets.cli import main as bwd_extract
from bwd_widgets.core.partitioners import registered_partitioners
from bwd_widgets.graphnet.writer import STAGING_OWNER, is_complete, sample_path

from _batch_util import checksums, summary_of, tiny_sample


def test_cli_batch_isolates_failures_and_resumes(conv_bn_dir, tmp_path, capsys):
    broken = tmp_path / "broken"
    broken.mkdir()
    out = tmp_path / "out"
    assert bwd_extract([str(conv_bn_dir), str(broken), "--out", str(out), "--workers", "1"]) == 1
    root = os.path.commonpath([conv_bn_dir.parent, broken.parent])  # names are relative to the common parent
    conv_bn, broken_name = os.path.relpath(conv_bn_dir, root), os.path.relpath(broken, root)
    summary = summary_of(out)
    status = {r["name"]: r for r in summary["samples"]}
    assert status[conv_bn]["status"] == "ok" and status[conv_bn]["backward_nodes"] == 16
    assert status[conv_bn]["saved_activation_bytes"] == 2 * 8 * 16 * 16 * 4
    assert status[broken_name]["status"] == "error" and "model.py" in status[broken_name]["reason"]
    assert "\n" not in status[broken_name]["reason"]
    assert summary["counts"] == {"ok": 1, "error": 1, "crash": 0, "timeout": 0, "skipped": 0}
    assert is_complete(out, conv_bn, summary["settings"])
    assert not any(
        (out / split / broken_name).exists() for split in ("eval_forward", "train_forward", "train_backward")
    )
    err = capsys.readouterr().err
    assert f"ok      {conv_bn}" in err and f"error   {broken_name}" in err

    # a resume skips what is complete with the same settings, keeps its figures, retries failures
    assert bwd_extract([str(conv_bn_dir), str(broken), "--out", str(out), "--resume", "--workers", "1"]) == 1
    status = {r["name"]: r for r in summary_of(out)["samples"]}
    assert status[conv_bn]["status"] == "skipped"
    assert status[conv_bn]["backward_nodes"] == 16
    assert status[broken_name]["status"] == "error"

    # another budget: the resume redoes it, and every output says how it was made; --root keeps the names
    command = [str(conv_bn_dir), "--root", root, "--out", str(out), "--budget", "0", "--resume", "--workers", "1"]
    assert bwd_extract(command) == 0
    summary = summary_of(out)
    assert summary["settings"]["partitioner"] == "min_cut" and summary["settings"]["memory_budget"] == 0.0
    record = {r["name"]: r for r in summary["samples"]}[conv_bn]
    assert record["status"] == "ok" and record["settings"] == summary["settings"]
    info = json.loads((out / sample_path("train_backward", conv_bn) / "graph_net.json").read_text())
    assert info["bwd_widgets"]["settings"] == summary["settings"]


def test_cli_resume_redoes_torn_writes_and_cleans_stale_staging(tmp_path):
    first, second = tiny_sample(tmp_path / "s" / "first"), tiny_sample(tmp_path / "s" / "second")
    out = tmp_path / "out"
    command = [str(first), str(second), "--out", str(out), "--workers", "1"]
    assert bwd_extract(command) == 0
    # as if killed between two renames: one split from another write
    graph_net = out / sample_path("train_backward", "first") / "graph_net.json"
    info = json.loads(graph_net.read_text())
    info["bwd_widgets"]["run"] = "another-write"
    graph_net.write_text(json.dumps(info))
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = out / ".bwd_widgets_tmp_killed"
    stale.mkdir()
    (stale / STAGING_OWNER).write_text(json.dumps({"pid": int(finished.stdout), "host": os.uname().nodename}))

    third = tiny_sample(tmp_path / "s" / "third")
    users = out / sample_path("train_forward", "third")
    users.mkdir(parents=True)
    (users / "notes.txt").write_text("the user's own")

    assert bwd_extract([*command, str(third), "--resume"]) == 1
    records = {r["name"]: r for r in summary_of(out)["samples"]}
    assert {name: r["status"] for name, r in records.items()} == {"first": "ok", "second": "skipped", "third": "error"}
    assert is_complete(out, "first", summary_of(out)["settings"])
    assert not stale.exists()
    assert "did not write" in records["third"]["reason"] and (users / "notes.txt").read_text() == "the user's own"
    assert not (out / sample_path("train_backward", "third")).exists()

    assert bwd_extract([*command, "--resume"]) == 0  # nothing left to do: no worker is started
    assert {r["name"]: r["status"] for r in summary_of(out)["samples"]} == {
        "first": "skipped",
        "second": "skipped",
        "third": "error",
    }


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["{samples}/a", "--out", "{samples}/a/out"], "is inside the input sample"),
        (["{samples}/a", "--out", "{file}"], "is a file"),
        (["{out}/train_forward/a", "--out", "{out}"], "which this batch writes"),
        (["{samples}/a", "{samples}/a/../a", "--out", "{out}"], "is listed twice"),
        (["{samples}/a", "{samples}/a/inner", "--out", "{out}"], "is inside the sample"),
        (["{samples}/a", "--root", "{samples}/b", "--out", "{out}"], "is not inside the samples root"),
        (["--out", "{out}"], "no samples given"),
        (["--list", "{samples}/missing.txt", "--out", "{out}"], "is not a file"),
        (["{samples}/a", "--out", "{out}", "--partitioner", "nope"], "unknown partitioner"),
        (["{samples}/a", "--out", "{out}", "--backend", "inductor", "--partitioner", "default"], "min-cut only"),
        (["{samples}/a", "--out", "{foreign}"], "not a summary that bwd-extract wrote"),
        (["{samples}/a", "--out", "{corrupt}", "--resume"], "not a summary that bwd-extract wrote"),
        (["{samples}/a", "--out", "{file}/below"], "cannot write to the output folder"),
        (["{samples}/a", "--out", "{out}", "--scheduler", "tcp://127.0.0.1:1"], "cannot reach the Dask scheduler"),
    ],
)
def test_cli_refuses_bad_input_in_one_line_before_any_work(tmp_path, capsys, arguments, message):
    samples = tmp_path / "samples"
    tiny_sample(samples / "a")
    tiny_sample(samples / "b")
    tiny_sample(samples / "a" / "inner")
    out = tmp_path / "out"
    tiny_sample(out / "train_forward" / "a")
    (tmp_path / "file").write_text("a file")
    for name, text in (("foreign", '{"samples": []}'), ("corrupt", "{not json")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "summary.json").write_text(text)
    before = checksums(tmp_path)
    paths = {key: tmp_path / key for key in ("out", "file", "foreign", "corrupt")}
    argv = [a.format(samples=samples, **paths) for a in arguments]
    assert bwd_extract(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and err.startswith("bwd-extract: error: ") and len(err.splitlines()) == 1
    assert checksums(tmp_path) == before, "nothing may be written before the batch starts"


def test_cli_rejects_malformed_options(tmp_path, capsys):
    for option in (["--workers", "0"], ["--timeout", "-1"], ["--mode", "both"]):
        with pytest.raises(SystemExit) as exit_info:
            bwd_extract([str(tmp_path), "--out", str(tmp_path / "out"), *option])
        assert exit_info.value.code == 2
    assert not (tmp_path / "out").exists()


def test_cli_crash_and_timeout_cost_one_sample_each(tmp_path):
    samples = tmp_path / "samples"
    for name in ("good_1", "good_2"):
        tiny_sample(samples / name)
    tiny_sample(samples / "aborts", prelude="import os\nos.abort()")
    tiny_sample(samples / "hangs", prelude="import time\ntime.sleep(10**6)")
    tiny_sample(samples / "exits", prelude="import sys\nsys.exit(3)")
    tiny_sample(samples / "exits_hard", prelude="import os\nos._exit(7)")
    out = tmp_path / "out"
    names = ["good_1", "aborts", "hangs", "exits", "exits_hard", "good_2"]
    # 60 s: a good sample's worker (torch's import, the extraction) stays well inside it on a loaded 2-core machine
    code = bwd_extract([str(samples / n) for n in names] + ["--out", str(out), "--workers", "2", "--timeout", "60"])
    assert code == 1
    records = {r["name"]: r for r in summary_of(out)["samples"]}
    assert {n: r["status"] for n, r in records.items()} == {
        "good_1": "ok",
        "aborts": "crash",
        "hangs": "timeout",
        "exits": "crash",
        "exits_hard": "crash",
        "good_2": "ok",
    }
    assert "SIGABRT" in records["aborts"]["reason"]
    assert "sys.exit(3)" in records["exits"]["reason"]
    assert "exited with code 7" in records["exits_hard"]["reason"]
    assert "60 s timeout" in records["hangs"]["reason"]
    assert all("\n" not in r.get("reason", "") for r in records.values())
    for name in ("good_1", "good_2"):
        assert is_complete(out, name, summary_of(out)["settings"])
    for name in ("aborts", "hangs", "exits", "exits_hard"):
        assert not (out / "train_forward" / name).exists()


def _done(out: Path) -> int:
    return len(summary_of(out)["samples"]) if (out / "summary.json").exists() else 0


@pytest.fixture
def ctrl_c_as_at_a_terminal():
    """Ctrl-C as a terminal delivers it: Python's KeyboardInterrupt handler in this process, so the default
    disposition in the processes it starts. A process started in the background of a non-interactive shell (as
    CI may start the suite: `bash .ci/run &`) inherits SIGINT ignored, Python then installs no handler, and a
    batch rightly goes on through a Ctrl-C it was told to ignore: CI saw these tests hang so, twice."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def _stop_mid_batch(command: list[str], out: Path, gate: Path, how: signal.Signals) -> subprocess.CompletedProcess:
    """Run a batch in its own process group, open `gate` (the next sample may start), and send `how` to the group
    once it has done a sample more: it is then waiting on a gate the test has not opened, so it cannot finish
    first, however slowly this machine runs the test's polling."""
    before = _done(out)
    env = {**os.environ, "PYTHONFAULTHANDLER": "1"}  # a SIGABRT prints every thread's stack: where a hang hangs
    batch = subprocess.Popen(
        command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, start_new_session=True, env=env
    )
    try:
        gate.touch()
        while batch.poll() is None and _done(out) <= before:
            time.sleep(0.05)
        if batch.poll() is None:
            os.killpg(batch.pid, how)
        try:
            _, err = batch.communicate(timeout=120)
        except subprocess.TimeoutExpired:  # CI saw this once: say where each process of the batch was
            os.killpg(batch.pid, signal.SIGABRT)
            _, err = batch.communicate(timeout=60)
            pytest.fail(f"the batch did not stop within 120 s of {how.name}; its stacks:\n{err[-6000:]}")
    finally:
        if batch.poll() is None:
            os.killpg(batch.pid, signal.SIGKILL)
            batch.wait()
    return subprocess.CompletedProcess(command, batch.returncode, "", err)


def test_interrupted_or_killed_batch_keeps_its_summary_and_resume_finishes_it(tmp_path, ctrl_c_as_at_a_terminal):
    # each sample waits, as its model.py is imported, for its gate: a file the test makes when that sample may
    # run (CI saw a batch of one-second samples finish before the test's polling saw the first one done, on a
    # loaded machine, so no Ctrl-C was sent)
    names = [f"slow_{i}" for i in range(4)]
    gates = [tmp_path / "gates" / name for name in names]
    gates[0].parent.mkdir()
    for name, gate in zip(names, gates):
        waits = f"import pathlib, time\nwhile not pathlib.Path({str(gate)!r}).exists():\n    time.sleep(0.02)"
        tiny_sample(tmp_path / "samples" / name, prelude=waits)
    out = tmp_path / "out"
    command = [sys.executable, "-m", "bwd_widgets", *(str(tmp_path / "samples" / n) for n in names), "--out", str(out)]
    command += ["--workers", "1"]

    interrupted = _stop_mid_batch(command, out, gates[0], signal.SIGINT)  # Ctrl-C, waiting on the second gate
    assert interrupted.returncode == 130 and "rerun with --resume" in interrupted.stderr
    assert "Traceback" not in interrupted.stderr
    first = {r["name"]: r for r in summary_of(out)["samples"]}
    assert list(first) == ["slow_0"] and first["slow_0"]["status"] == "ok"

    killed = _stop_mid_batch([*command, "--resume"], out, gates[1], signal.SIGKILL)  # as an out-of-memory kill would
    assert killed.returncode == -signal.SIGKILL
    second = {r["name"]: r for r in summary_of(out)["samples"]}
    assert set(second) == {"slow_0", "slow_1"}, "the killed run kept what it did, and what the first one did"

    for gate in gates:
        gate.touch()
    resumed = subprocess.run([*command, "--resume"], capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    records = {r["name"]: r for r in summary_of(out)["samples"]}
    assert sorted(records) == sorted(names)
    for name, record in second.items():
        assert records[name]["status"] == "skipped" and records[name]["seconds"] == record["seconds"]
    assert all(records[n]["status"] == "ok" for n in names if n not in second)
    assert all(is_complete(out, n, summary_of(out)["settings"]) for n in names)
    assert not list(out.glob(".bwd_widgets_*"))


def test_ctrl_c_landing_on_another_thread_stops_the_batch(tmp_path, capfd, ctrl_c_as_at_a_terminal):
    """Ctrl-C is delivered to whichever thread of the process the kernel picks (tqdm's monitor thread, for one), and
    Python runs its handler in the main thread only when that thread wakes: the batch, waiting on a worker whose
    sample waits on a gate, must still stop at once (it slept until the sample ended: CI saw it hang)."""
    gate, on_it = tmp_path / "gate", tmp_path / "on the sample"
    waits = (
        f"import pathlib, time\npathlib.Path({str(on_it)!r}).touch()\n"
        f"while not pathlib.Path({str(gate)!r}).exists():\n    time.sleep(0.02)"
    )
    sample = tiny_sample(tmp_path / "samples" / "waits", prelude=waits)
    bystander = threading.Event()
    other = threading.Thread(target=bystander.wait, name="another thread", daemon=True)
    other.start()
    sent: list[float] = []

    def interrupt() -> None:
        for _ in range(1200):  # the worker is on the sample (however slowly this machine got it there)
            if on_it.exists():
                break
            time.sleep(0.05)
        time.sleep(0.5)  # and the batch waits on it
        sent.append(time.monotonic())
        signal.pthread_kill(other.ident, signal.SIGINT)
        time.sleep(30)
        gate.touch()  # a batch that slept through Ctrl-C ends with the sample, and the test fails on its time

    threading.Thread(target=interrupt, daemon=True).start()
    try:
        code = bwd_extract([str(sample), "--out", str(tmp_path / "out"), "--workers", "1"])
    finally:
        gate.touch()
        bystander.set()
    assert sent and time.monotonic() - sent[0] < 15, "the batch woke for Ctrl-C only when its sample ended"
    assert code == 130 and "rerun with --resume" in capfd.readouterr().err


BIDI_CONTROLS = re.compile("[\u202a-\u202e\u2066-\u2069]")
"""Unicode's bidirectional embeddings, overrides and isolates: printed raw, they reorder the line around them."""


def test_cli_prints_no_raw_bidirectional_controls_in_sample_names(tmp_path, capfd):
    """Issue 44 item 18: a sample named with a right-to-left override (U+202E) is printed with the override
    escaped, in its status line, in an error line, and in the summary's path."""
    samples = tmp_path / "samples\u2067"
    sample = tiny_sample(samples / "report\u202egpj.exe")
    broken = samples / "broken\u2066\u202a"
    broken.mkdir()
    out = tmp_path / "out\u202d"
    assert bwd_extract([str(sample), str(broken), "--out", str(out), "--workers", "1"]) == 1
    printed = capfd.readouterr()
    assert not BIDI_CONTROLS.search(printed.out + printed.err), ascii(printed.err)
    assert "ok      report\\u202egpj.exe" in printed.err and "error   broken\\u2066\\u202a" in printed.err
    assert "out\\u202d" in printed.err  # the summary's path

    assert bwd_extract([str(sample), str(sample), "--out", str(out)]) == 2  # refused before any work, naming it
    refused = capfd.readouterr()
    assert not BIDI_CONTROLS.search(refused.out + refused.err) and "report\\u202egpj.exe" in refused.err


# Issue 43, item 13: what the command line says.


@pytest.mark.parametrize("folders, outcome", [(1, "passed"), (2, "passed"), (10, "passed"), (10, "failed")])
def test_a_samples_line_counts_the_folders_its_validation_checked(folders, outcome):
    """One sample writes a forward and a backward folder per compiled region; the line said "(10 samples)" for one
    sample. It counts what was validated, by its name."""
    record = {
        "status": "ok",
        "name": "one_sample",
        "seconds": 1.0,
        "forward_nodes": 3,
        "backward_nodes": 5,
        "saved_activation_bytes": 64,
        "validation": outcome,
        "validated_folders": folders,
    }
    line = _status_line(record)
    noun = "folder" if folders == 1 else "folders"
    assert f"validation {outcome} ({folders} written {noun})" in line and "samples)" not in line


def test_one_validated_sample_says_how_many_folders_it_wrote_and_checked(tmp_path, capsys):
    sample = tiny_sample(tmp_path / "samples" / "one")
    out = tmp_path / "out"
    assert bwd_extract([str(sample), "--out", str(out), "--validate", "--workers", "1"]) == 0
    written = sorted(out.rglob("graph_hash.txt"))
    err = capsys.readouterr().err
    assert len(written) == 2 and f"validation passed ({len(written)} written folders)" in err, err
    assert "1 of 1 samples ok; 1 validated" in err


def test_the_help_names_every_partitioner_and_each_alias(capsys):
    """`--partitioner mincut` runs min_cut: the help shows each alias beside the name it stands for."""
    with pytest.raises(SystemExit):
        bwd_extract(["--help"])
    text = re.sub(r"-\s+", "-", " ".join(capsys.readouterr().out.split()))  # argparse may wrap at a hyphen
    for entry in registered_partitioners():
        assert entry.name in text
        if entry.aliases:
            assert f"{entry.name} (also {', '.join(entry.aliases)})" in text
