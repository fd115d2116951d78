"""Committed notebooks: the course as the README lists it, each clean, small, pinned, with a picture
that survives a static render, predictions to make, and exercises with worked answers.

Running them is the README test command's `pytest --nbval-lax --nbval-current-env notebooks/`.
"""

import ast
import re
from pathlib import Path

import nbformat
import pytest

from bwd_widgets.jupyter.course import answer_sections

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
PICTURES = ("image/svg+xml", "image/png", "image/jpeg")

COURSE = {
    "01_first_backward_graph": [
        "_saved_self",
        "_saved_result",
        "model.eval()",
        "torch.no_grad()",
        "torch.inference_mode()",
    ],
    "02_what_autograd_saves": [
        "saved_tensors_hooks",
        "save_on_cpu",
        "retain_graph=True",
        'mode="fake"',
        "_raw_saved_self.register_hooks",
        "THRESHOLD",
    ],
    "03_partitioners": [
        "bw.plot.timeline",
        "peak_activation_bytes",
        "saved_tensors_hooks",
        "memory_viz",
        "bw.plot.pareto",
    ],
    "04_min_cut": [
        "x.cos().cos()",
        "not in recomputable allowlist",
        "materialized in backward",
        "torch_reason",
        "decisions",
        "torch_budget_ratio",
        "torch.utils.benchmark",
        "compute intensive op",
        "random op",
        "reduction op",
        "aot_eager_default_partitioner",
        '"inductor"',
        "networkx.minimum_cut",
        "aot_function",
        "partition_fn=",
        "TORCH_LOGS",
        "AOT_PARTITIONER_DEBUG",
    ],
    "05_activation_checkpointing": [
        "PREFER_RECOMPUTE",
        "PREFER_SAVE",
        "sqrt(n)",
        "preserve_rng_state",
        "use_reentrant=False",
        "torch.autocast",
        "torch.bfloat16",
        "scaled_dot_product_attention",
        "apply_activation_checkpointing",
        "checkpoint_sequential",
    ],
    "06_big_models_fake_mode": ['mode="fake"', "scaled_dot_product_attention", "peak_activation_bytes", "At least"],
    "07_fit_it_on_a_gpu": [
        "FSDP",
        "bw.sweep",
        "bw.advise",
        "advice.best",
        ".measure()",
        "max_memory_allocated",
        "_record_memory_history",
        "memory_viz",
        "Inductor",
    ],
    "08_what_you_choose_to_save": [
        "_version",
        "detect_anomaly",
        "torch.autograd.Function",
        "save_for_backward",
        "once_differentiable",
        "gradcheck",
        "saved_tensors_hooks",
        "float8_e4m3fn",
        "set_logs(aot_graphs=True)",
        "TORCH_LOGS=aot_graphs",
        '"inductor"',
        "ban_recompute_materialized_backward",
        "region_activation_memory_budget",
        "MUST_CPU_OFFLOAD",
        "PREFER_CPU_OFFLOAD",
        "hasattr(",
    ],
    "09_an_oom_end_to_end": [
        "DefaultCPUAllocator",
        "RLIMIT_AS",
        "profile_memory=True",
        "export_memory_timeline",
        "torch.autocast",
        "scaled_dot_product_attention",
        "create_selective_checkpoint_contexts",
        "activation_memory_budget",
        "save_on_cpu",
        "micro_batches",
        "register_post_accumulate_grad_hook",
        "fully_shard",
        "expandable_segments",
        "bw.extract",
    ],
    "10_the_whole_bill": [
        "torch.autocast",
        "torch.bfloat16",
        "exp_avg_sq",
        "foreach=False",
        "fused=True",
        "saved_tensors_hooks",
        "profile_memory=True",
        "export_memory_timeline",
        "big_transformer_on_meta",
        "int8",
        "bitsandbytes",
        "bw.extract",
        'optimizer="adamw"',
    ],
    "11_appendix_graphnet_samples": ["load_graphnet_sample", "save_graphnet", '"-m", "bwd_widgets"'],
}
"""Each notebook in order, with what it must teach (text its cells must contain)."""


def cells(path: Path, kind: str | None = None) -> list:
    notebook = nbformat.read(path, as_version=4)
    return [c for c in notebook.cells if kind is None or c.cell_type == kind]


def test_the_course_is_its_notebooks_in_order_then_the_appendix():
    assert [p.stem for p in NOTEBOOKS] == list(COURSE)
    assert cells(NOTEBOOKS[-1], "markdown")[0].source.startswith("# Appendix")


def test_the_readme_lists_the_course_in_order():
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Teaching notebooks", 1)[1].split("\n## ", 1)[0]
    assert re.findall(r"`(\d\d_\w+)`", section) == list(COURSE)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_clean_small_and_pinned(path):
    assert path.stat().st_size < 200_000
    notebook = nbformat.read(path, as_version=4)
    assert "widgets" not in notebook.metadata, "strip widget state: scripts/strip_notebooks.py"
    outputs = [o for c in notebook.cells if c.cell_type == "code" for o in c.outputs]
    assert not any(WIDGET_VIEW in o.get("data", {}) for o in outputs)
    assert not any(o.get("output_type") == "error" for o in outputs)
    pinned = [c for c in notebook.cells if c.cell_type == "code" and c.source.startswith("# NBVAL_CHECK_OUTPUT")]
    assert len(pinned) >= 3 and all(c.outputs for c in pinned), "pinned cells need their expected outputs stored"
    for cell in pinned:
        text = "".join(o.get("text", "") + str(o.get("data", {}).get("text/plain", "")) for o in cell.outputs)
        assert not re.search(r"0x[0-9a-f]{6,}|/work/|/tmp/|\.venv", text), (
            f"machine-specific pinned output: {text[:200]}"
        )
        assert not any(mime in o.get("data", {}) for o in cell.outputs for mime in PICTURES), (
            "pin numbers, not pictures"
        )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_has_a_picture_a_static_render_shows(path):
    outputs = [o for c in cells(path, "code") for o in c.outputs]
    svg_outputs = [o["data"]["image/svg+xml"] for o in outputs if "image/svg+xml" in o.get("data", {})]
    in_markdown = any("<svg" in c.source or "![" in c.source for c in cells(path, "markdown"))
    assert in_markdown or any(mime in o.get("data", {}) for o in outputs for mime in PICTURES)
    assert all("".join(svg).lstrip().startswith("<svg") for svg in svg_outputs)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_teaches_its_topics(path):
    text = "\n".join(c.source for c in cells(path))
    missing = [topic for topic in COURSE[path.stem] if topic not in text]
    assert not missing, f"{path.name} no longer teaches {missing}"


def reveal_blocks(notebook: list) -> list[tuple[list, object]]:
    """Each prediction's reveal: the code cells after a `my_guess = ...` cell, up to the markdown that follows."""
    blocks = []
    for i, cell in enumerate(notebook):
        if cell.cell_type == "code" and cell.source.startswith("my_guess = ..."):
            end = next(k for k in range(i + 1, len(notebook)) if notebook[k].cell_type == "markdown")
            blocks.append((notebook[i + 1 : end], notebook[end]))
    return blocks


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_predictions_come_before_the_reveal(path):
    """A guess cell, then a cell that checks it with `check` (one line with a hint when wrong), its last statement,
    so a guessed run of the cell does all its work before the verdict."""
    code = cells(path, "code")
    assert "raise Guess(" in code[0].source and "def check(" in code[0].source, "the first code cell defines check()"
    blocks = reveal_blocks(cells(path))
    assert blocks, "at least one prediction"
    for reveal, _ in blocks:
        last = ast.parse(reveal[0].source).body[-1]
        assert isinstance(last, ast.Expr) and isinstance(last.value, ast.Call), reveal[0].source
        assert ast.unparse(last.value).startswith("check(my_guess,"), reveal[0].source


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_a_reader_on_github_sees_no_answer_before_running_its_cell(path):
    """The cells that reveal a prediction are saved without outputs (so none is pinned), and the
    explanation after them is collapsed: the answer shows only once the reader runs or opens it."""
    for reveal, explanation in reveal_blocks(cells(path)):
        for cell in reveal:
            assert not cell.outputs, f"a saved answer under a prediction: {cell.source[:80]!r}"
            assert not cell.source.startswith("# NBVAL_CHECK_OUTPUT"), "a pinned cell would need its answer saved"
        assert explanation.source.startswith("<details>") and explanation.source.rstrip().endswith("</details>")


def worked_answers(path: Path) -> list:
    notebook = cells(path)
    headings = [i for i, c in enumerate(notebook) if c.cell_type == "markdown" and "### Worked answers" in c.source]
    exercises = [i for i, c in enumerate(notebook) if c.cell_type == "markdown" and "## Exercises" in c.source]
    assert len(headings) == 1 and len(exercises) == 1 and exercises[0] <= headings[0]
    return notebook[headings[0] + 1 :]


BUILDS = {
    "02_what_autograd_saves": "check_offload(my_pack, my_unpack)",
    "05_activation_checkpointing": "check_policy(my_policy)",
    "07_fit_it_on_a_gpu": "check_budget(my_budget)",
}
"""The exercises that ask the learner to build something, and the checker each is run through."""


@pytest.mark.parametrize("stem", BUILDS)
def test_build_exercises_have_a_checker_and_a_worked_answer_that_passes_it(stem):
    """The learner's cell, then a checker that says pass or fail (saved saying it awaits an attempt), and
    a worked answer that asserts the checker passes, so nbval fails if the answer stops meeting it."""
    notebook = cells(ROOT / "notebooks" / f"{stem}.ipynb")
    checker = next(i for i, c in enumerate(notebook) if BUILDS[stem] in c.source)
    assert notebook[checker - 1].source.startswith("my_") and "None" in notebook[checker - 1].source
    assert "'pass' if passed else 'fail'" in notebook[checker].source
    assert "yet" in "".join(o.get("text", "") for o in notebook[checker].outputs)
    name = BUILDS[stem].split("(")[0]
    assert f"assert {name}(" in answers_file(ROOT / "notebooks" / f"{stem}.ipynb").read_text(encoding="utf-8")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_exercises_have_worked_answers_each_interpreted(path):
    answers = worked_answers(path)
    worked = [i for i, c in enumerate(answers) if c.cell_type == "code"]
    assert len(worked) >= 2
    for i in worked:
        follower = answers[i + 1] if i + 1 < len(answers) else None
        assert follower is not None and follower.cell_type == "markdown", "each worked answer ends with what it means"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_worked_answers_are_hidden(path):
    """A worked answer's code lives in answers/<notebook>.py, not in the saved notebook: its cell is only the call
    that runs it (tests/test_worked_answers.py), saved without output, and what it means is collapsed in markdown.
    Each call names the next section of the notebook's own answers file, and every section is called."""
    calls = []
    for cell in worked_answers(path):
        if cell.cell_type == "code":
            assert not cell.outputs, cell.source[:80]
            calls.append(cell.source)
        else:
            assert cell.source.startswith("<details>") and cell.source.rstrip().endswith("</details>")
    _, sections = answer_sections(answers_file(path).read_text(encoding="utf-8"))
    assert calls == [f'worked_answer("answers/{path.stem}.py", {n})' for n in range(1, len(sections) + 1)]
    assert list(sections) == list(range(1, len(sections) + 1))


def answers_file(path: Path) -> Path:
    return path.parent / "answers" / f"{path.stem}.py"


def _text(cell) -> str:
    return "".join(cell["source"]) + "".join("".join(o.get("text", "")) for o in cell.get("outputs", []))


def test_notebook_7_quotes_notebook_6s_activation_peak_as_notebook_6_prints_it():
    """The peak NB7 builds on is the one NB6's pinned output shows (nbval holds that output to a live run)."""
    six, seven = (next(p for p in NOTEBOOKS if p.name.startswith(n)) for n in ("06", "07"))
    printed = re.findall(r"peak activation memory ([\d.]+) GB", "".join(_text(c) for c in cells(six, "code")))
    quoted = re.findall(
        r"activation peak of notebook 6 \(([\d.]+) GB", "".join(_text(c) for c in cells(seven, "markdown"))
    )
    assert printed and quoted == printed[:1]


# --- issue 46's learner breakages: no answer before it is asked; Run All stops at a prediction; one label form ---

PREDICTIONS = {
    "01_first_backward_graph": [
        ({"a", "b"}, [r"Backward0 keeps \[", r"keeps \['a'"]),
        ("output", [r"^\['result'\]$"]),
        (
            {"training", "model.eval()"},
            [r"model\.eval\(\)\s+\d+ bytes saved", r"bars \(Saved for backward by one forward pass"],
        ),
    ],
    "02_what_autograd_saves": [
        ("more", [r"batch\s+2, seq 128", r"sequence x k \(batch 2\)"]),
        (False, [r"second backward failed", r"KeyError"]),
    ],
    "03_partitioners": [
        (
            "min-cut budget 0.5",
            [
                r"\d B peak",
                r"peak activation memory against",
                r"peaks above budget",
                r"budget 0 buys nothing",
                r"bars \(Saved bytes against peak memory",
                r"timeline: default peak",
            ],
        ),
    ],
    "04_min_cut": [(0, [r"min_cut\s+saves\s+\d+ B beyond x"])],
    "05_activation_checkpointing": [
        (True, [r"recomputes matmuls: (True|False)", r"under PREFER_RECOMPUTE everywhere saves"]),
        (4, [r"segments of\s+\d+: saved", r"lines \(16 sin layers"]),
    ],
    "06_big_models_fake_mode": [
        ("by less than half", [r"min-cut budget 0\.5\s+saved", r"27\.2 GB", r"timeline: default peak"]),
    ],
    "07_fit_it_on_a_gpu": [
        ({0.2, 0.4}, [r"budget 0\.\d+:[^\n]*B peak", r"Sweep\(\d+ points\)", r"peak activation memory against"]),
        ("min-cut budget 0.5", [r"min-cut budget 0\.5", r"min-cut budget 0\.2", r"best plan recomputes"]),
    ],
    "08_what_you_choose_to_save": [
        (False, [r"add_ on its result then backward fails: (True|False)"]),
        ("saving output", [r"saving (input|output)\s+keeps\s+\d+ B", r"torch\.sigmoid\s+keeps"]),
        ("fewer", [r"\d+ B in [\d.]+ s:", r"le: b8\["]),
    ],
    "09_an_oom_end_to_end": [
        ("none", [r"gradients\s+0 B at the peak", r"lines \(One training step of the plain model"]),
        ("nothing", [r"\+ offload\s+peak", r"lowered the peak by"]),
    ],
    "10_the_whole_bill": [
        (16, [r"^dtypes: torch", r"autocast \(fp32 master\), AdamW\s+\d+ B/param"]),
        (2, [r"80 GB cards: \d", r"[\d,]+ parameters; GB for"]),
        ("foreach", [r"extra during step\(\)\s+[\d,]+ B", r"depth \d: for-loop [\d,]+ B"]),
    ],
    "11_appendix_graphnet_samples": [(None, [r"bars \(The backward sample's arguments"])],
}
"""Each prediction of each notebook, in order: its answer (what `check` accepts; None where it depends on the sample),
and what would give it away if a saved output, a stored plot (its SVG, its title) or a plot's title in a cell's
source showed it: the form in which its reveal prints or draws the predicted quantity."""


def prediction_cells(path: Path) -> list[int]:
    return [i for i, c in enumerate(cells(path)) if c.cell_type == "code" and c.source.startswith("my_guess = ...")]


ALL_PREDICTIONS = [(p, n) for p in NOTEBOOKS for n in range(len(prediction_cells(p)))]


def shown(cell) -> str:
    """What a reader sees of a code cell before running anything: its saved outputs (text, HTML, SVG and the
    titles inside) and the titles its source gives plots."""
    parts = [m.group(1) for m in re.finditer(r"title=(\"[^\"]*\"|'[^']*')", cell.source)]
    for output in cell.get("outputs", []):
        parts.append("".join(output.get("text", "")))
        parts += ["".join(v) if isinstance(v, list) else str(v) for v in output.get("data", {}).values()]
        parts += output.get("traceback", [])
    return "\n".join(parts)


def test_every_prediction_has_its_answer_and_giveaways_listed():
    assert {p.stem: len(prediction_cells(p)) for p in NOTEBOOKS} == {s: len(v) for s, v in PREDICTIONS.items()}


@pytest.mark.parametrize(("path", "number"), ALL_PREDICTIONS, ids=lambda x: x.stem if isinstance(x, Path) else str(x))
def test_no_saved_output_or_title_gives_a_prediction_away(path, number):
    """Nothing a reader sees in the saved notebook (outputs, stored plots, plot titles) shows a prediction's answer:
    not before the guess, not in the reveal, and not later in the notebook, where a reader scrolling sees it first."""
    notebook = cells(path)
    answer, giveaways = PREDICTIONS[path.stem][number]
    at = prediction_cells(path)[number]
    if isinstance(answer, str):  # a named choice is one of those the guess cell (or the question above it) offers
        offered = notebook[at].source + notebook[at - 1].source
        assert f'"{answer}"' in offered, offered
    for i, cell in enumerate(notebook):
        if cell.cell_type != "code":
            continue
        text = shown(cell)
        for pattern in giveaways:
            found = re.search(pattern, text, re.MULTILINE)
            assert not found, f"cell {i} shows {found.group(0)!r}, the answer to prediction {number + 1}"


def guess_and_check(path: Path) -> dict:
    """The first code cell's `Guess` and `check`, run alone (not its imports and models)."""
    tree = ast.parse(cells(path, "code")[0].source)
    keep = [n for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef)) and n.name in ("Guess", "check")]
    namespace: dict = {}
    exec(compile(ast.Module(body=keep, type_ignores=[]), str(path), "exec"), namespace)
    return namespace


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_run_all_stops_at_each_unguessed_prediction_in_one_line(path):
    """In JupyterLab, Run All stops at the first cell that raises: a check cell raises while its guess is `...`, and
    shows one line, no traceback. nbval, which runs the saved notebook with its guesses unmade, is told by the cell's
    `nbval-raises-exception` tag (a tag JupyterLab ignores; `raises-exception` would make Run All go on)."""
    namespace = guess_and_check(path)
    for guess, answer in ((..., 1), (2, 1)):
        with pytest.raises(namespace["Guess"]) as raised:
            namespace["check"](guess, answer, "a hint")
        lines = raised.value._render_traceback_()
        assert len(lines) == 1 and "\n" not in lines[0], lines
    assert lines == ["Not this time. Hint: a hint"]
    namespace["check"](1, 1, "a hint")
    for reveal, _ in reveal_blocks(cells(path)):
        tags = reveal[0].metadata.get("tags", [])
        assert "nbval-raises-exception" in tags and "raises-exception" not in tags, reveal[0].source[:80]


def test_run_all_in_a_kernel_stops_at_the_unguessed_prediction():
    """What JupyterLab's Run All does, against a real kernel: every cell is sent at once with stop_on_error, so the
    requests after the failing check are aborted; the failure is one line. The kernel aborts the requests that
    have reached it when the error comes (ipykernel's `stop_on_error_timeout`, 0 by default): a request still on its
    way under load ran instead. The window here is a few seconds, so that the test holds what Run All does on a
    quiet machine whatever the load."""
    from jupyter_client.manager import start_new_kernel

    manager, client = start_new_kernel(kernel_name="python3", extra_arguments=["--Kernel.stop_on_error_timeout=5"])
    try:
        setup = ast.unparse(ast.parse(cells(NOTEBOOKS[0], "code")[0].source))
        definitions = "\n".join(
            ast.unparse(n) for n in ast.parse(setup).body if isinstance(n, (ast.ClassDef, ast.FunctionDef))
        )
        sent = [client.execute(source) for source in (definitions, "my_guess = ...", "check(my_guess, 1, 'h')", "1")]
        replies = {}
        for _ in sent:
            reply = client.get_shell_msg(timeout=60)
            replies[reply["parent_header"]["msg_id"]] = reply["content"]
        assert [replies[m]["status"] for m in sent] == ["ok", "ok", "error", "aborted"]
        error = None
        while error is None:
            message = client.get_iopub_msg(timeout=10)
            if message["msg_type"] == "error":
                error = message["content"]
        assert error["traceback"] == ["No guess yet: write one in the cell above, then run both cells again."]
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


LABEL = re.compile(r"min[ _-]?cut,? (?:at )?budget", re.IGNORECASE)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_budget_plans_are_labelled_one_way(path):
    """ "min-cut budget 0.5", as the advisor labels its plans: in every cell's source, saved output and worked
    answer (notebook 3 once asked for "min_cut budget 0.5" where notebook 7 asked for "min-cut budget 0.5")."""
    texts = [c.source for c in cells(path)] + [shown(c) for c in cells(path, "code")]
    texts.append(answers_file(path).read_text(encoding="utf-8"))
    forms = {m.group(0).lower() for text in texts for m in LABEL.finditer(text)} - {"min-cut at budget"}
    assert forms <= {"min-cut budget"}, forms


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_cells_that_would_answer_are_saved_without_outputs(path):
    for cell in cells(path, "code"):
        if "hide-answer" in cell.metadata.get("tags", []):
            assert not cell.outputs and not cell.source.startswith("# NBVAL_CHECK_OUTPUT"), cell.source[:80]
