"""The course's worked answers, kept out of the saved notebooks so a reader sees none before asking.

A notebook's worked answers live beside it in `answers/<notebook>.py`, one `# %% <number>` section each (the
percent format editors and jupytext read), after the imports above the first section. `worked_answer` runs a section in the notebook's namespace and puts its
code into the calling cell, as IPython's `%load` does, so the learner reads the answer where they asked for it and
nbval still runs every answer.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

_SECTION = re.compile(r"^# %% (\d+)\s*$", re.MULTILINE)


def answer_sections(text: str) -> tuple[str, dict[int, str]]:
    """An answers file's preamble (what precedes the first section, less the docstring: its imports) and its
    numbered `# %% <n>` sections, each without its marker line."""
    marks = list(_SECTION.finditer(text))
    head = text[: marks[0].start()] if marks else text
    body = ast.parse(head).body
    has_docstring = bool(body) and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
    preamble = "\n".join(head.splitlines()[(body[0].end_lineno or 0) if has_docstring else 0 :])
    ends = [m.start() for m in marks[1:]] + [len(text)]
    sections = {int(m.group(1)): text[m.end() : end].strip("\n") + "\n" for m, end in zip(marks, ends)}
    return preamble.strip("\n"), sections


def worked_answer(path: str | Path, number: int) -> None:
    """Run worked answer `number` from the answers file at `path` and show its code in this cell."""
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        raise RuntimeError("worked_answer runs inside IPython or Jupyter: call it from a notebook cell.")
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"No answers file at {file.resolve()}: run the notebook from the notebooks/ folder.")
    preamble, sections = answer_sections(file.read_text(encoding="utf-8"))
    if number not in sections:
        raise ValueError(f"{file} has no worked answer {number}; it has {sorted(sections)}.")
    code = f"{preamble}\n\n{sections[number]}" if preamble else sections[number]
    shell.set_next_input(f"# worked answer {number}, loaded from {file.as_posix()}\n{code}", replace=True)
    result = shell.run_cell(code, store_history=False)
    error = result.error_before_exec or result.error_in_exec
    if error is not None:  # its traceback is already shown: fail the cell (so nbval sees it) without a second
        raise WorkedAnswerFailed(f"worked answer {number} failed with {type(error).__name__}: its traceback is above.")


class WorkedAnswerFailed(Exception):
    """A worked answer raised. IPython showed its traceback; this fails the calling cell in one line."""

    def _render_traceback_(self) -> list[str]:
        return [f"WorkedAnswerFailed: {self}"]
