"""One batch at a time per output folder, no record lost, nothing left by a killed run, Dask over TLS.

Issue 23, findings 12 (TLS and pickled results from the scheduler), 13 (two batches on one --out) and 14
(kill -9 leaves a sample copy and a worker log in the temporary folder).
"""

import importlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bwd_widgets.batch import plan, run
from bwd_widgets.cli import main as bwd_extract
from bwd_widgets.graphnet.writer import is_complete

from _batch_util import checksums, summary_of, tiny_sample

batch_run = importlib.import_module("bwd_widgets.batch.run")  # the package's `run` is the function
LOCK = ".bwd_widgets.lock"
IN_PROCESS = {"scheduler": "in-process", "progress": False}


def _dead_pid() -> int:
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(finished.stdout)


def _batch_command(samples: list[Path], out: Path, *options: str) -> list[str]:
    return [sys.executable, "-m", "bwd_widgets", *map(str, samples), "--out", str(out), *options]


def _wait_for(condition, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"waited {seconds} s for {what}"
        time.sleep(0.1)


def _group_alive(pgid: int) -> bool:
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def test_a_second_batch_on_the_same_out_is_refused_naming_the_holder_and_no_record_is_lost(tmp_path, capsys):
    slow = [tiny_sample(tmp_path / "samples" / f"slow_{i}", prelude="import time\ntime.sleep(2)") for i in range(3)]
    other = tiny_sample(tmp_path / "samples" / "other")
    out = tmp_path / "out"
    first = subprocess.Popen(
        _batch_command(slow, out, "--workers", "1"), stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        _wait_for(lambda: (out / "summary.json").exists() or first.poll() is not None, 120, "the first sample")
        assert first.poll() is None, f"the first batch ended before a second one could start: {first.communicate()}"
        assert bwd_extract([str(other), "--out", str(out), "--workers", "1"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith("bwd-extract: error: "), err
        assert f"is in use by another batch (pid {first.pid} on {socket.gethostname()}" in err
        assert "bwd_widgets" in err and "wait for it to end" in err and "another --out" in err
        _, first_err = first.communicate(timeout=300)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()
    assert first.returncode == 0, first_err
    assert sorted(r["name"] for r in summary_of(out)["samples"]) == ["slow_0", "slow_1", "slow_2"]
    assert not (out / LOCK).exists(), "the lock goes when its batch ends"

    assert bwd_extract([str(other), "--root", str(tmp_path / "samples"), "--out", str(out), "--workers", "1"]) == 0
    assert sorted(r["name"] for r in summary_of(out)["samples"]) == ["other", "slow_0", "slow_1", "slow_2"]


def test_a_batch_without_resume_keeps_records_of_samples_it_did_not_redo(tmp_path):
    samples = [tiny_sample(tmp_path / "samples" / name) for name in ("a", "b", "c")]
    out = tmp_path / "out"
    assert [r["status"] for r in run(plan(samples, out), **IN_PROCESS).records] == ["ok"] * 3
    before = {r["name"]: r for r in summary_of(out)["samples"]}

    def interrupt_after_one(record):
        raise KeyboardInterrupt  # Ctrl-C as the first redone sample is written

    again = run(plan(samples, out), on_record=interrupt_after_one, **IN_PROCESS)
    assert again.interrupted and len(again.records) == 1, "the summary returned is this batch's own"
    redone = again.records[0]["name"]
    after = {r["name"]: r for r in summary_of(out)["samples"]}
    assert sorted(after) == ["a", "b", "c"], "records of samples not redone yet must not vanish"
    assert all(after[name] == before[name] for name in after if name != redone)
    assert after[redone]["seconds"] == again.records[0]["seconds"]
    assert all(is_complete(out, name, after[name]["settings"]) for name in after)
    assert not (out / LOCK).exists(), "the lock goes on an interrupt too"


def test_the_lock_goes_on_error_a_stale_one_is_taken_over_and_a_foreign_one_is_kept(tmp_path, capsys, monkeypatch):
    sample = tiny_sample(tmp_path / "samples" / "net")
    out = tmp_path / "out"
    out.mkdir()

    def failing(*args):
        raise RuntimeError("a bug in the batch")

    with monkeypatch.context() as patched:
        patched.setattr(batch_run, "_extract", failing)
        with pytest.raises(RuntimeError, match="a bug"):
            run(plan([sample], out), **IN_PROCESS)
    assert not (out / LOCK).exists(), "the lock goes on an error too"

    host = socket.gethostname()
    stale = {"written_by": "bwd-extract", "pid": _dead_pid(), "host": host, "started": "then", "command": "bwd-extract"}
    (out / LOCK).write_text(json.dumps(stale))
    capsys.readouterr()
    assert [r["status"] for r in run(plan([sample], out), **IN_PROCESS).records] == ["ok"]
    err = capsys.readouterr().err
    assert f"pid {stale['pid']} on {host}" in err and "taken over" in err and len(err.strip().splitlines()) == 1
    assert not (out / LOCK).exists()

    elsewhere = {**stale, "host": "another-host", "pid": os.getpid()}
    (out / LOCK).write_text(json.dumps(elsewhere))
    before = checksums(out)
    assert bwd_extract([str(sample), "--out", str(out), "--workers", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "on another-host" in err and f"delete {out / LOCK}" in err and len(err.splitlines()) == 1
    assert checksums(out) == before, "a lock of another host's batch is never taken over"

    (out / LOCK).write_text("the user's own file\n")
    assert bwd_extract([str(sample), "--out", str(out), "--workers", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "is not a lock that bwd-extract wrote" in err and len(err.splitlines()) == 1
    assert (out / LOCK).read_text() == "the user's own file\n"


def test_kill_9_of_the_client_leaves_nothing_that_the_next_run_does_not_clean(tmp_path):
    """The temporary folder is the test's own, so anything left in it is a leftover of the batch."""
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    env = {**os.environ, "TMPDIR": str(temporary)}
    names = [f"slow_{i}" for i in range(4)]
    samples = [tiny_sample(tmp_path / "samples" / n, prelude="import time\ntime.sleep(3)") for n in names]
    out = tmp_path / "out"
    command = _batch_command(samples, out, "--workers", "2")
    batch = subprocess.Popen(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        copies = lambda: list(temporary.rglob("model.py"))  # noqa: E731
        _wait_for(lambda: copies() or batch.poll() is not None, 120, "a worker to start a sample")
        assert batch.poll() is None, f"the batch ended (exit code {batch.returncode}) before a worker started a sample"
        os.kill(batch.pid, signal.SIGKILL)  # the client only: its workers notice and stop on their own
        batch.wait()
        _wait_for(lambda: not _group_alive(batch.pid), 30, "the killed client's workers to stop")
    finally:
        if _group_alive(batch.pid):
            os.killpg(batch.pid, signal.SIGKILL)
    assert list(temporary.rglob("model.py")), "the killed run left a sample copy, as the issue found"

    resumed = subprocess.run([*command, "--resume"], env=env, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    leftovers = [p for p in temporary.rglob("*") if "bwd_widgets" in str(p.relative_to(temporary))]
    assert leftovers == [], leftovers
    assert not list(temporary.rglob("model.py")) and not list(temporary.rglob("*.log"))
    assert "taken over" in resumed.stderr, "the killed client's lock is taken over with a message"
    records = {r["name"]: r for r in summary_of(out)["samples"]}
    assert sorted(records) == names and all(r["status"] in ("ok", "skipped") for r in records.values())
    assert all(is_complete(out, n, summary_of(out)["settings"]) for n in names)
    assert not list(out.glob(".bwd_widgets*")), "no lock or staging folder is left in --out"


def _self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 that is its own CA: the scheduler, the worker and the client share it."""
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost"]
        + ["-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )
    return cert, key


def _dask(arguments: list[str], log: Path) -> subprocess.Popen:
    dask = Path(sys.executable).with_name("dask")
    return subprocess.Popen(
        [str(dask), *arguments], stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True
    )


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl makes the test's certificate")
def test_dask_over_tls_with_the_tls_options_and_one_sentence_without_them(tmp_path, capsys):
    pytest.importorskip("distributed")
    cert, key = _self_signed(tmp_path)
    tls = ["--tls-ca-file", str(cert), "--tls-cert", str(cert), "--tls-key", str(key)]
    scheduler_file = tmp_path / "scheduler.json"
    started = [
        _dask(
            ["scheduler", "--protocol", "tls", "--host", "127.0.0.1", "--port", "0", "--no-dashboard"]
            + ["--scheduler-file", str(scheduler_file), *tls],
            tmp_path / "scheduler.log",
        )
    ]
    try:
        _wait_for(lambda: scheduler_file.exists() and scheduler_file.stat().st_size, 60, "the TLS scheduler")
        address = json.loads(scheduler_file.read_text())["address"]
        assert address.startswith("tls://")
        worker = ["worker", address, "--nthreads", "1", "--host", "127.0.0.1", "--no-dashboard", *tls]
        started.append(_dask(worker, tmp_path / "worker.log"))
        sample = tiny_sample(tmp_path / "samples" / "net")
        out = tmp_path / "out"

        assert bwd_extract([str(sample), "--out", str(out), "--scheduler", address]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "--tls-ca-file" in err, err
        assert bwd_extract([str(sample), "--out", str(out), "--scheduler", address.replace("tls", "tcp"), *tls]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "tls://" in err, err

        assert bwd_extract([str(sample), "--out", str(out), "--scheduler", address, *tls]) == 0
        assert [(r["name"], r["status"]) for r in summary_of(out)["samples"]] == [("net", "ok")]
        assert is_complete(out, "net", summary_of(out)["settings"])
    finally:
        for process in reversed(started):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def test_the_scheduler_option_says_results_come_back_pickled(capsys):
    with pytest.raises(SystemExit):
        bwd_extract(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "pickled" in text and "--tls-ca-file" in text and "distributed.comm.tls" in text
