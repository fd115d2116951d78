"""`%bwd_extract --trace PATH` and `bwd-extract --trace PATH`: a TORCH_TRACE a real `torch.compile` run wrote here
(`torch_trace_runs.traced_run`), read through the magic in IPython's shell and through the command line as a
process. What they print is held against `bw.load_trace` of the same folder, and the bytes against the pack-hook
count of the run that wrote it; bad input and options that cannot apply to a trace are one sentence each."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest
from IPython.utils.capture import capture_output
from ipython_shell import notebook_shell
from torch_trace_runs import copied_regions, traced_run

import bwd_widgets as bw
from bwd_widgets.cli import build_parser, main
from bwd_widgets.core.errors import BwdWidgetsError
from bwd_widgets.extraction.loaded_trace import region_line
from bwd_widgets.jupyter.magic import _NOT_WITH_TRACE, SHOWN_REGIONS, BwdMagics

if TYPE_CHECKING:
    from pathlib import Path

BUDGET = 0.5


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict]]:
    """Each model of `torch_trace_runs` traced once with aot_eager at a budget below 1: its folder and the run's
    own count of what it saved (Inductor's runs compile C++ for a minute: test_load_trace.py covers them)."""
    made = {}
    for name in ("transformer", "broken"):
        folder = tmp_path_factory.mktemp(name) / "trace"
        made[name] = (folder, traced_run(folder, name, "aot_eager", BUDGET))
    return made


def _cli(*arguments: object) -> subprocess.CompletedProcess[str]:
    """`bwd-extract` as a user runs it: its own process."""
    command = [sys.executable, "-m", "bwd_widgets", *map(str, arguments)]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


@pytest.mark.parametrize("name", ["transformer", "broken"])
def test_the_command_line_prints_a_line_per_region(traces: dict, name: str) -> None:
    folder, _ = traces[name]
    load = bw.load_trace(folder)
    expected = [region_line(region) for region in load]
    assert len(expected) == (2 if name == "broken" else 1)  # a graph break: two regions
    for path in (folder, next(folder.iterdir())):  # the folder, or its one log
        done = _cli("--trace", path)
        assert done.returncode == 0, done.stderr
        assert _lines(done.stdout) == expected and "Traceback" not in done.stderr
    for region, line in zip(load, expected, strict=True):
        assert region.compile_id in line and "aot_eager" in line and f"budget {BUDGET:g}" in line
        assert f"saved {len(region.saved_tensors)} values" in line


def _written_alone(load: bw.TraceLoad, out: Path) -> list[str] | str:
    """What `save_graphnet` of each region writes under `out`, called here directly: the files, relative to
    `out`, or the one sentence it refuses with. The entry points must do the same."""
    try:
        for region in load:
            region.save_graphnet(out)
    except BwdWidgetsError as error:
        return str(error)
    return _files(out)


def _files(out: Path) -> list[str]:
    return sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())


@pytest.mark.parametrize("name", ["transformer", "broken"])
def test_the_command_line_writes_what_save_graphnet_writes(traces: dict, tmp_path: Path, name: str) -> None:
    folder, counted = traces[name]
    load = bw.load_trace(folder)
    alone = _written_alone(load, tmp_path / "alone")
    out = tmp_path / "out"
    done = _cli("--trace", folder, "--out", out)
    written = json.loads((out / "trace_summary.json").read_text())
    assert [(r["compile_id"], r["saved_activation_bytes"]) for r in written["regions"]] == [
        (r.compile_id, r.saved_activation_bytes) for r in load
    ]
    if name == "transformer":  # one region: what it saves is what the run's own pack hook counted
        assert written["regions"][0]["saved_activation_bytes"] == counted["bytes"]
    assert all(r["backend"] == "aot_eager" and r["memory_budget"] == BUDGET for r in written["regions"])
    assert written["refused"] == []
    if isinstance(alone, str):  # refused: one sentence, said once, and exit 1, as the user asked for the samples
        refusals = [line for line in _lines(done.stderr) if "not written" in line]
        assert done.returncode == 1 and refusals == [f"bwd-extract: GraphNet samples not written: {alone}"]
        assert _files(out) == ["trace_summary.json"]
    else:
        assert done.returncode == 0, done.stderr
        assert _files(out) == sorted([*alone, "trace_summary.json"])
        assert [p for p in alone if p.endswith("model.py")], alone  # GraphNet samples, not an empty write


@pytest.mark.parametrize("what", ["missing", "a folder without *.log", "a file that is no log"])
def test_a_path_without_a_trace_is_one_sentence(tmp_path: Path, what: str) -> None:
    (tmp_path / "notes.txt").write_text("not a trace")
    path = {"missing": tmp_path / "missing", "a folder without *.log": tmp_path}.get(what, tmp_path / "notes.txt")
    done = _cli("--trace", path)
    (line,) = _lines(done.stderr)
    assert done.returncode == 2 and line.startswith("bwd-extract: error: ") and "TORCH_TRACE" in line
    assert done.stdout == ""


EXAMPLE_VALUES = {
    "samples": ["some_sample"],
    "list": ["--list", "samples.txt"],
    "root": ["--root", "samples"],
    "partitioner": ["--partitioner", "min_cut"],
    "budget": ["--budget", "0"],
    "backend": ["--backend", "inductor"],
    "mode": ["--mode", "fake"],
    "resume": ["--resume"],
    "device": ["--device", "meta"],
    "workers": ["--workers", "1"],
    "timeout": ["--timeout", "5"],
    "scheduler": ["--scheduler", "local"],
    "tls_ca_file": ["--tls-ca-file", "ca.pem"],
    "tls_cert": ["--tls-cert", "c.pem"],
    "tls_key": ["--tls-key", "c.key"],
}
"""A value for each option that chooses, partitions or runs samples: none applies to a trace."""
WRITING = {"validate": ["--validate"], "layout": ["--layout", "flat"]}
"""Options that say how samples are written: with --trace, they need --out."""


def test_every_option_of_the_command_line_is_sorted_for_trace() -> None:
    """A new option must be put in one of the lists above, so the tests below cover it."""
    parser = build_parser()
    dests = {action.dest for action in parser._actions} - {"help", "trace", "out"}  # noqa: SLF001
    assert dests == set(EXAMPLE_VALUES) | set(WRITING)


@pytest.mark.parametrize("dest", sorted(EXAMPLE_VALUES))
def test_an_option_that_cannot_apply_to_a_trace_is_one_sentence(
    traces: dict, dest: str, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, _ = traces["broken"]
    assert main(["--trace", str(folder), *EXAMPLE_VALUES[dest]]) == 2
    captured = capsys.readouterr()
    (line,) = _lines(captured.err)
    flag = EXAMPLE_VALUES[dest][0] if dest != "samples" else "sample folders"
    assert line.startswith("bwd-extract: error: --trace ") and flag in line and captured.out == ""


@pytest.mark.parametrize("dest", sorted(WRITING))
def test_a_writing_option_without_out_is_one_sentence(
    traces: dict, dest: str, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, _ = traces["broken"]
    assert main(["--trace", str(folder), *WRITING[dest]]) == 2
    (line,) = _lines(capsys.readouterr().err)
    assert WRITING[dest][0] in line and "--out" in line


def test_the_help_names_trace_and_every_backend(capsys: pytest.CaptureFixture[str]) -> None:
    from bwd_widgets.core.kinds import BACKENDS

    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    assert "--trace PATH" in text and f"--backend {{{','.join(BACKENDS)}}}" in text and "TORCH_TRACE" in text


def test_without_trace_the_output_folder_is_still_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["some_sample"])
    assert exit_.value.code == 2 and "--out" in capsys.readouterr().err


# --- the magic --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shell():
    with notebook_shell() as ip:
        yield ip


def _run(shell, code: str):
    with capture_output() as captured:
        result = shell.run_cell(code)
    return result, captured


@pytest.mark.parametrize("name", ["transformer", "broken"])
def test_the_magic_shows_every_region_headed_by_its_line(shell, traces: dict, name: str) -> None:
    folder, _ = traces[name]
    result, captured = _run(shell, f"run = %bwd_extract --trace {folder}")
    assert result.success, result.error_in_exec
    load = shell.user_ns["run"]
    assert isinstance(load, bw.TraceLoad) and [r.compile_id for r in load] == [
        r.compile_id for r in bw.load_trace(folder)
    ]
    widgets = [o for o in captured.outputs if "BackwardGraph(bw_nodes=" in str(o.data.get("text/plain", ""))]
    assert len(widgets) == len(load)
    for region in load:
        assert region_line(region) in captured.stdout


def test_a_long_runs_trace_draws_the_first_regions_and_names_the_rest(shell, traces: dict, tmp_path: Path) -> None:
    """Twelve regions (the broken model's two, copied six times): the first SHOWN_REGIONS drawn, each headed by
    its line, the rest named from the index, not built; the same line shows any of them."""
    folder, _ = traces["broken"]
    (log,) = folder.iterdir()
    copies = copied_regions(log, tmp_path / "long", log.stat().st_size * 5.5)  # each copy a little longer
    result, captured = _run(shell, f"run = %bwd_extract --trace {tmp_path / 'long'}")
    assert result.success, result.error_in_exec
    load = shell.user_ns["run"]
    assert len(load) == 2 * copies == 12 and not load.refused
    assert repr(load).startswith(
        "TraceLoad(12 regions: rank 0 0/0_1, rank 0 0/0, "
    ) and " and 2 more; 0 refused)" in repr(load)
    widgets = [o for o in captured.outputs if "BackwardGraph(bw_nodes=" in str(o.data.get("text/plain", ""))]
    assert len(widgets) == SHOWN_REGIONS
    lines = _lines(captured.stdout)
    assert lines[:SHOWN_REGIONS] == [region_line(load[i]) for i in range(SHOWN_REGIONS)]
    assert (
        lines[SHOWN_REGIONS].startswith(f"{12 - SHOWN_REGIONS} more regions, not drawn: rank 0 4/0") and len(lines) == 9
    )


def test_the_magic_without_display_prints_the_lines_only(shell, traces: dict) -> None:
    folder, _ = traces["broken"]
    result, captured = _run(shell, f"run = %bwd_extract --trace '{folder}' --no-display")
    assert result.success and not captured.outputs
    assert _lines(captured.stdout) == [region_line(r) for r in shell.user_ns["run"]]


def test_the_magic_saves_what_save_graphnet_saves(shell, traces: dict, tmp_path: Path) -> None:
    folder, _ = traces["broken"]
    alone = _written_alone(bw.load_trace(folder), tmp_path / "alone")
    out = tmp_path / "out"
    result, captured = _run(shell, f"run = %bwd_extract --trace {folder} --save {out} --no-display")
    assert result.success, result.error_in_exec
    if isinstance(alone, str):  # refused: one line, said once, nothing written
        assert _lines(captured.stderr) == [f"bwd_extract: not saved: {alone}"] and not out.exists()
    else:
        assert _files(out) == alone and captured.stderr == ""
        assert sum(line.startswith("saved ") for line in _lines(captured.stdout)) == len(shell.user_ns["run"])


MAGIC_VALUES = {
    "partitioner": "--partitioner min_cut",
    "budget": "--budget 0.5",
    "fake": "--fake",
    "backend": "--backend inductor",
    "name": "--name mine",
    "fit": "--fit 1GB",
    "time": "--time",
    "output": "--output loss",
    "requires_grad": "--requires-grad floating",
}


def test_every_option_of_the_magic_is_sorted_for_trace() -> None:
    """Each option the magic takes either goes with --trace (saving, not displaying) or is refused with it, and
    each refused one has a case below."""
    parser = BwdMagics.bwd_extract.parser  # type: ignore[attr-defined]
    dests = {action.dest for action in parser._actions} - {"help", "call", "trace"}  # noqa: SLF001
    assert dests == set(_NOT_WITH_TRACE) | {"save", "no_display"}
    assert set(MAGIC_VALUES) == set(_NOT_WITH_TRACE)


@pytest.mark.parametrize(
    "line",
    [
        *(f"%bwd_extract --trace {{folder}} {option}" for option in MAGIC_VALUES.values()),
        "%bwd_extract --trace {folder} model(x)",
        "%%bwd_extract --trace {folder}\nmodel(x).sum()",
        "%bwd_extract --trace {missing}",
        "%bwd_extract --trace {empty}",
        "%bwd_extract --trace {notes}",
    ],
)
def test_mistakes_with_trace_are_one_usage_error_line(shell, traces: dict, tmp_path: Path, line: str) -> None:
    folder, _ = traces["broken"]
    (tmp_path / "notes.txt").write_text("not a trace")  # a folder without *.log, and a file that is no log
    paths = {"missing": tmp_path / "missing", "empty": tmp_path, "notes": tmp_path / "notes.txt"}
    result, captured = _run(shell, line.format(folder=folder, **paths))
    assert not result.success
    text = captured.stdout + captured.stderr
    assert "UsageError" in text and "Traceback" not in text
    assert len(_lines(text)) == 1
