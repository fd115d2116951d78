"""%load_ext bwd_widgets and %bwd_extract in a real IPython shell."""

import re

import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from ipython_shell import notebook_shell

import bwd_widgets as bw
from bwd_widgets.core.partitioners import registered_partitioners


@pytest.fixture(scope="module")
def shell():
    with notebook_shell(
        "%load_ext bwd_widgets\n"  # twice is harmless
        "import torch\nfrom bwd_widgets.examples import MLP, ConvBN\ntorch.manual_seed(0)\n"
        "model = MLP(width=8, depth=2)\nx = torch.randn(4, 8)\nconv = ConvBN()\nimage = torch.randn(2, 3, 16, 16)"
    ) as ip:
        yield ip


def _run(shell, code):
    with capture_output() as captured:
        result = shell.run_cell(code)
    return result, captured


def _run_loss_cell(shell, setup, code, mode):
    """`setup` run, then `%%bwd_extract` over `code` followed by `loss = model(x).sum()`, in `mode`."""
    shell.run_cell(setup)
    fake = " --fake" if mode == "fake" else ""
    return _run(shell, f"%%bwd_extract --no-display --output loss{fake}\n{code}\nloss = model(x).sum()")


def test_line_magic_returns_the_extraction_and_shows_the_widget(shell):
    result, captured = _run(shell, "g = %bwd_extract model(x)")
    assert result.success
    extraction = shell.user_ns["g"]
    assert isinstance(extraction, bw.BackwardExtraction) and extraction.partitioner == "default"
    assert any("BackwardGraph(bw_nodes=" in str(o.data.get("text/plain", "")) for o in captured.outputs)


def test_line_magic_options(shell, tmp_path):
    result, captured = _run(
        shell, f"g = %bwd_extract conv(image) --budget 0.0 --save {tmp_path} --name convbn --no-display"
    )
    assert result.success and not captured.outputs
    extraction = shell.user_ns["g"]
    assert extraction.partitioner == "min_cut" and extraction.memory_budget == 0.0
    assert (tmp_path / "train_backward" / "convbn" / "convbn_train_backward" / "graph_net.json").is_file()
    result, _ = _run(shell, "g = %bwd_extract model(x) --fake --no-display")
    assert result.success and shell.user_ns["g"].mode == "fake"


def test_cell_magic_last_expression_and_output(shell):
    result, _ = _run(shell, "%%bwd_extract --no-display\nh = model(x).relu()\nh.sum()")
    assert result.success
    extraction = result.result
    assert isinstance(extraction, bw.BackwardExtraction)
    # the cell is the user's own step: x, made without requires_grad, gets no gradient; the model's parameters do
    assert not any(g.grad_of == "x" for g in extraction.gradients)
    assert any(g.grad_of == "model.head.weight" for g in extraction.gradients)
    result, _ = _run(shell, "%%bwd_extract --no-display --requires-grad floating\nh = model(x).relu()\nh.sum()")
    assert any(g.grad_of == "x" for g in result.result.gradients)
    result, _ = _run(
        shell, "%%bwd_extract --no-display --output loss\nloss = model(x).square().mean()\nprint('side effect')"
    )
    assert result.success and result.result.tangents[0].shape == ()


@pytest.mark.parametrize(
    "line, message",
    [
        ("%bwd_extract undefined_model(x)", "name 'undefined_model' is not defined"),
        ("%bwd_extract model(x) --nope", "unrecognized arguments"),
        ("%bwd_extract model(x) --partitioner greedy", "unknown partitioner"),
        ("%bwd_extract model", "is not a call"),
        ("%bwd_extract", "give the forward call"),
        ("%bwd_extract (lambda t: t * 2)(torch.arange(3))", "no input or parameter requires grad"),
        ("%%bwd_extract\ny = model(x)", "end the cell with the forward result"),
        ('%bwd_extract model(x) --name "unclosed', "close every quote"),
        ("%bwd_extract model(x) stray --fake", "is not a call"),
    ],
)
def test_mistakes_print_one_usage_error_line(shell, line, message):
    result, captured = _run(shell, line)
    assert not result.success
    text = captured.stdout + captured.stderr
    assert "UsageError" in text and message in text
    assert "Traceback" not in text
    assert len([line for line in text.strip().splitlines() if line.strip()]) == 1


def test_help_shows_usage_and_example(shell):
    with capture_output() as captured:
        shell.run_cell("%bwd_extract?")
    text = captured.stdout
    for expected in (
        "%bwd_extract [--partitioner PARTITIONER] [--budget BUDGET] [--fake]",
        "--no-display",
        "--output NAME",
        "g = %bwd_extract model(x)",
        "%%bwd_extract --output loss",
    ):
        assert expected in text


def test_unload_removes_the_magics():
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "bwd_widgets")
    ip.run_line_magic("unload_ext", "bwd_widgets")
    assert "bwd_extract" not in ip.magics_manager.magics["line"]
    ip.run_line_magic("load_ext", "bwd_widgets")
    assert "bwd_extract" in ip.magics_manager.magics["line"]


def test_cell_magic_sees_module_parameters_rebinding_and_leaves_names_defined(shell):
    result, _ = _run(shell, "%%bwd_extract --no-display\nmodel(torch.randn(4, 8)).sum()")
    assert result.success, result.error_in_exec
    assert {g.grad_of for g in result.result.gradients} >= {"model.blocks.0.0.weight", "model.head.bias"}
    shell.user_ns.pop("doubled", None)
    cell = "x = x * 2\ndoubled = x\nloss = model(x).sum()"
    result, _ = _run(shell, f"%%bwd_extract --no-display --output loss --requires-grad x\n{cell}")
    assert result.success, result.error_in_exec
    assert {g.grad_of for g in result.result.gradients} >= {"x", "model.head.weight"}
    assert "doubled" in shell.user_ns and "loss" in shell.user_ns, "names the cell assigns exist afterwards"
    shell.run_cell("x = x / 2")


def test_options_are_checked_before_the_call_runs(shell):
    shell.run_cell("calls = []\ndef counted(t):\n    calls.append(1)\n    return model\n")
    for options, message in (("--budget 2", "[0, 1]"), ("--partitioner nonsense", "unknown partitioner")):
        result, captured = _run(shell, f"%bwd_extract counted(x)(x) {options}")
        assert not result.success and message in captured.stdout + captured.stderr
    assert shell.user_ns["calls"] == []


def test_negative_numbers_and_strings_in_the_call(shell):
    shell.run_cell("def scaled(t, k, label):\n    return (t * k).sin()\n")
    result, _ = _run(shell, "g = %bwd_extract scaled(x, -1, 'a --b') --no-display")
    assert result.success, result.error_in_exec
    assert shell.user_ns["g"].backward_node_count > 0


@pytest.mark.parametrize(
    "line",
    [
        "g = %bwd_extract --fake --no-display scaled(x, -1, 'a --b')",  # IPython's order: options first
        "g = %bwd_extract scaled(x, -1, 'a --b') --fake --no-display",  # 0.1's order: the call first
        "g = %bwd_extract --fake scaled(x, -1, 'a --b') --no-display",  # both
        "g = %bwd_extract --budget 0.5 --name 'my model' --fake --no-display scaled(x, -1, 'a --b')",
        "g = %bwd_extract --budget=0.5 --fake --no-display scaled( x , -1 , 'a --b' )",
    ],
)
def test_options_go_before_or_after_the_call(shell, line):
    shell.run_cell("def scaled(t, k, label):\n    return (t * k).sin()\n")
    shell.user_ns.pop("g", None)
    result, captured = _run(shell, line)
    assert result.success, result.error_in_exec
    assert not captured.outputs, "--no-display was read as an option wherever it stood"
    extraction = shell.user_ns["g"]
    assert extraction.mode == "fake" and extraction.backward_node_count > 0
    if "--budget" in line:
        assert extraction.partitioner == "min_cut" and extraction.memory_budget == 0.5
    if "--name" in line:
        assert extraction.model_name == "my model"


def test_an_option_value_that_looks_like_an_option_is_still_its_value(shell):
    result, captured = _run(shell, "%bwd_extract --budget -0.5 model(x)")
    assert not result.success and "[0, 1]" in captured.stdout + captured.stderr


def test_a_failed_save_is_one_line_and_keeps_the_extraction(shell, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    result, captured = _run(shell, f"g2 = %bwd_extract model(x) --save {blocker} --no-display")
    assert result.success, "the extraction is returned even when saving fails"
    assert isinstance(shell.user_ns["g2"], bw.BackwardExtraction)
    lines = [line for line in captured.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("bwd_extract: not saved:") and "Traceback" not in captured.stderr


def test_saving_twice_without_a_name_never_replaces_a_sample(shell, tmp_path):
    for _ in range(2):
        result, _ = _run(shell, f"%bwd_extract model(x) --save {tmp_path} --no-display")
        assert result.success
    assert sorted(p.name for p in (tmp_path / "train_backward").iterdir()) == ["model", "model_2"]


def test_cell_magic_reads_then_assigns_a_notebook_name_as_top_level_code_does(shell):
    shell.run_cell("counter = 1")
    result, captured = _run(
        shell, "%%bwd_extract --no-display --output loss\ncounter += 1\nloss = model(x).sum() * counter"
    )
    assert result.success, captured.stdout + captured.stderr
    assert shell.user_ns["counter"] == 2, "the cell ran once, after the extraction, as if it had run"


@pytest.mark.parametrize(
    "cell, message",
    [
        ("%%bwd_extract\nimport asyncio\nawait asyncio.sleep(0)\nmodel(x)", "the cell awaits"),
        ("%%bwd_extract\nyield model(x)", "the cell yields"),
    ],
)
def test_cell_magic_await_and_yield_are_one_usage_error(shell, cell, message):
    result, captured = _run(shell, cell)
    text = captured.stdout + captured.stderr
    assert not result.success and "UsageError" in text and message in text
    assert "Traceback" not in text and "SyntaxError" not in text


def test_fit_prints_the_advisors_plans_and_a_bad_size_is_one_usage_error(shell):
    result, captured = _run(shell, "g = %bwd_extract model(x) --fit 1GB --no-display")
    assert result.success and isinstance(shell.user_ns["g"], bw.BackwardExtraction)
    assert "Advice(target 1.00 GB" in captured.stdout and "best: " in captured.stdout
    result, captured = _run(shell, "%bwd_extract --fit 24parsecs model(x)")
    assert not result.success and "--fit: target='24parsecs' is not a size" in captured.stderr + captured.stdout


def test_time_adds_each_plans_step_time_to_the_fit_report_and_needs_fit_in_real_mode(shell):
    result, captured = _run(shell, "%bwd_extract --fit 1GB --time model(x) --no-display")
    assert result.success and "step time" in captured.stdout
    for line, message in [
        ("%bwd_extract --time model(x)", "--time times the plans of --fit"),
        ("%bwd_extract --fake --fit 1GB --time model(x)", "cannot be used with --fake"),
    ]:
        result, captured = _run(shell, line)
        text = captured.stdout + captured.stderr
        assert not result.success and message in text and "Traceback" not in text


# Issue 44, item 12: the cell's code runs exactly once per %%bwd_extract. The trace runs it over a sandbox whose
# effects are dropped (real mode, where the cell then runs once, for real) or applied once (fake mode, where
# nothing runs for real). `fx` cells: torch.fx cannot trace `[r for r in x]`, so Dynamo traces the cell again.
CELL_EFFECTS = {
    "a list append": ("calls = []", "calls.append(1)", "len(calls)"),
    "a dict counter": ("counts = {'runs': 0}", "counts['runs'] += 1", "counts['runs']"),
    "a Counter": ("from collections import Counter\ntally = Counter()", "tally['runs'] += 1", "tally['runs']"),
    "a print": ("", "print('the cell ran')", "printed"),
    "a global counter": ("runs = 0", "global runs\nruns += 1", "runs"),
    "a list append, in a cell torch.fx cannot trace": (
        "calls = []",
        "calls.append(1)\nrows = [r for r in x]\nx2 = torch.stack(rows)",
        "len(calls)",
    ),
}


@pytest.mark.parametrize("mode", ["real", "fake"])
@pytest.mark.parametrize("effect", list(CELL_EFFECTS))
def test_cell_magic_runs_the_cells_code_exactly_once(shell, mode, effect):
    setup, code, count = CELL_EFFECTS[effect]
    result, captured = _run_loss_cell(shell, setup, code, mode)
    assert result.success, captured.stdout + captured.stderr
    ran = captured.stdout.count("the cell ran") if count == "printed" else eval(count, shell.user_ns)
    assert ran == 1, f"{effect} happened {ran} times in {mode} mode"


def test_cell_magic_fit_runs_the_cells_code_once_too(shell):
    shell.run_cell("calls = []")
    result, captured = _run(
        shell, "%%bwd_extract --no-display --output loss --fit 1GB\ncalls.append(1)\nloss = model(x).sum()"
    )
    assert result.success, captured.stdout + captured.stderr
    assert "Advice(target 1.00 GB" in captured.stdout
    assert shell.user_ns["calls"] == [1], "the advisor traced the cell again, over the sandbox"


def test_cell_magic_in_fake_mode_binds_no_name_the_cell_assigns(shell):
    """Fake mode runs nothing for real: the cell's effects on the notebook's objects happen once (above), but a
    name it assigns at its top level (`runs += 1`, `loss = ...`) is not bound, as its value would be fake."""
    shell.run_cell("runs = 0")
    shell.user_ns.pop("fake_loss", None)
    result, captured = _run(
        shell, "%%bwd_extract --no-display --output fake_loss --fake\nruns += 1\nfake_loss = model(x).sum()"
    )
    assert result.success, captured.stdout + captured.stderr
    assert shell.user_ns["runs"] == 0 and "fake_loss" not in shell.user_ns


# Issue 44, item 13: a cell that reads a notebook name and then assigns it, in every way a cell does so.
REBINDING_CELLS = {
    "counter += 1": ("counter = 1", "counter += 1", {"real": "counter == 2", "fake": "counter == 1"}),
    "total = total + x.sum().item()": (
        "total = 0.0",
        "total = total + x.sum().item()",
        {"real": "total == float(x.sum())", "fake": "total == 0.0"},
    ),
    "items.append(...)": ("items = []", "items.append(len(items))", {"real": "items == [0]", "fake": "items == [0]"}),
    "a global statement": (
        "counter = 1",
        "global counter\ncounter = counter + 1",
        {"real": "counter == 2", "fake": "counter == 2"},
    ),
    "a global statement and +=": (
        "counter = 1",
        "global counter\ncounter += 1",
        {"real": "counter == 2", "fake": "counter == 2"},
    ),
}


@pytest.mark.parametrize("mode", ["real", "fake"])
@pytest.mark.parametrize("case", list(REBINDING_CELLS))
def test_cell_magic_reads_then_assigns_notebook_names_without_unbound_local_error(shell, mode, case):
    setup, code, expected = REBINDING_CELLS[case]
    result, captured = _run_loss_cell(shell, setup, code, mode)
    text = captured.stdout + captured.stderr
    assert result.success, text
    assert "UnboundLocalError" not in text and "Traceback" not in text
    assert result.result.backward_node_count > 0
    assert eval(expected[mode], shell.user_ns), f"{case} in {mode} mode"


# Issue 43, item 13: what the magic says besides its widget.

NAMES_TYPED = [(typed, entry.name) for entry in registered_partitioners() for typed in (entry.name, *entry.aliases)]


@pytest.mark.parametrize("typed, name", NAMES_TYPED)
def test_a_partitioner_typed_by_any_of_its_names_runs_and_shows_its_registered_name(shell, typed, name):
    """`--partitioner mincut` keeps working (never break what users type), but not silently: the help names each
    alias beside the partitioner it stands for, and the result and the widget say the registered name."""
    result, captured = _run(shell, f"g = %bwd_extract --partitioner {typed} model(x)")
    assert result.success, result.error_in_exec
    assert shell.user_ns["g"].partitioner == name
    assert any(f" \u00b7 {name} \u00b7 " in str(o.data.get("text/plain", "")) for o in captured.outputs)
    with capture_output() as shown:
        shell.run_cell("%bwd_extract?")
    help_text = re.sub(r"-\s+", "-", " ".join(shown.stdout.split()))  # argparse may wrap at a hyphen
    assert typed in help_text and f"{name} (also " in help_text if typed != name else name in help_text


@pytest.mark.parametrize("options", ["--no-display", "", "--fake --no-display", "--name saved_mlp --no-display"])
def test_a_successful_save_says_so_on_stdout(shell, tmp_path, options):
    """A save that worked is news, not an error: stdout (stderr is drawn red in JupyterLab); a failed one stays on
    stderr (test_a_failed_save_is_one_line_and_keeps_the_extraction)."""
    result, captured = _run(shell, f"g = %bwd_extract model(x) --save {tmp_path} {options}")
    assert result.success, result.error_in_exec
    assert captured.stderr == ""
    assert captured.stdout.startswith("saved ") and str(tmp_path / "train_backward") in captured.stdout


@pytest.mark.parametrize(
    "cell",
    [
        "%bwd_extract model(x)",
        "%bwd_extract --fake model(x)",
        "%bwd_extract --budget 0.5 model(x)",
        "y = 1\n%bwd_extract model(x)",
        "%bwd_extract model(x)\n%bwd_extract --fake conv(image)",
        "%bwd_extract model(x);",
        "%%bwd_extract\nmodel(x).relu().sum()",
    ],
)
def test_a_bare_line_shows_its_widget_and_no_out_prompt(shell, cell):
    """The widget is the only output of a bare `%bwd_extract` line ending a cell (or of a `%%bwd_extract` cell): no
    `Out[n]: BackwardExtraction(...)` under it; `_` and the cell's result are still the extraction."""
    result, captured = _run(shell, cell)
    assert result.success, result.error_in_exec
    assert "Out[" not in captured.stdout and "BackwardExtraction(" not in captured.stdout, captured.stdout
    widgets = [o for o in captured.outputs if "BackwardGraph(bw_nodes=" in str(o.data.get("text/plain", ""))]
    assert len(widgets) == cell.count("%bwd_extract")
    if not cell.endswith(";"):  # IPython's way to keep a value from `_` too
        assert isinstance(result.result, bw.BackwardExtraction) and shell.user_ns["_"] is result.result


@pytest.mark.parametrize(
    "cell, shown",
    [
        ("%bwd_extract model(x) --no-display", "BackwardExtraction("),  # no widget: the text is its output
        ("%bwd_extract model(x)\n1 + 1", "Out["),  # another value ends the cell: it is shown
        ("g = %bwd_extract model(x)\ng", "BackwardExtraction("),  # shown again on purpose, as the user asks
    ],
)
def test_what_ends_a_cell_otherwise_is_still_shown(shell, cell, shown):
    result, captured = _run(shell, cell)
    assert result.success, result.error_in_exec
    assert shown in captured.stdout
