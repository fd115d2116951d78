"""Worked answers as a learner meets them: a real IPython kernel runs a notebook's `worked_answer` call, which
must run the answer in the notebook's namespace, show its output, and put the answer's code into the cell (the
`set_next_input` payload with `replace`, which JupyterLab and Notebook 7 apply as they do for `%load`). A failing
answer must fail the cell, so nbval catches an answer that stops working."""

from __future__ import annotations

import pytest
from jupyter_client.manager import start_new_kernel

from bwd_widgets.jupyter.course import answer_sections

ANSWERS = '''"""Worked answers for a test notebook."""

from collections import Counter

# %% 1
print("counted", Counter(word)["a"], "from", word)

# %% 2
assert len(word) == 99, "this answer no longer holds"
'''


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    folder = tmp_path_factory.mktemp("course")
    (folder / "answers").mkdir()
    (folder / "answers" / "demo.py").write_text(ANSWERS, encoding="utf-8")
    manager, client = start_new_kernel(kernel_name="python3", cwd=str(folder))
    # the notebook's own cells, run once for every test here: pytest-xdist's worksteal may run them apart
    client.execute_interactive('from bwd_widgets.jupyter.course import worked_answer\nword = "banana"', timeout=60)
    yield client
    client.stop_channels()
    manager.shutdown_kernel(now=True)


ERRORS: list[dict] = []
"""Every error message the kernel published, in order."""


def run(client, code: str) -> tuple[dict, str]:
    """The execute reply's content and everything the cell printed."""
    printed: list[str] = []

    def hook(message):
        if message["msg_type"] == "stream":
            printed.append(message["content"]["text"])
        elif message["msg_type"] == "error":
            ERRORS.append(message["content"])
            printed.append(message["content"]["evalue"])

    reply = client.execute_interactive(code, output_hook=hook, timeout=60)
    return reply["content"], "".join(printed)


def test_an_answer_runs_in_the_notebooks_namespace_and_replaces_the_cell_with_its_code(kernel):
    reply, printed = run(kernel, 'worked_answer("answers/demo.py", 1)')
    assert reply["status"] == "ok"
    assert printed == "counted 3 from banana\n"
    [payload] = reply["payload"]
    assert payload["source"] == "set_next_input" and payload["replace"] is True
    assert payload["text"] == (
        "# worked answer 1, loaded from answers/demo.py\n"
        "from collections import Counter\n\n"
        'print("counted", Counter(word)["a"], "from", word)\n'
    )


def test_a_failing_answer_fails_its_cell_with_one_traceback_and_still_shows_its_code(kernel):
    ERRORS.clear()
    reply, printed = run(kernel, 'worked_answer("answers/demo.py", 2)')
    assert reply["status"] == "error" and reply["ename"] == "WorkedAnswerFailed"
    assert "this answer no longer holds" in printed
    assert [e["ename"] for e in ERRORS] == ["AssertionError", "WorkedAnswerFailed"]
    assert len(ERRORS[1]["traceback"]) == 1, "the answer's traceback is shown once, above"
    assert "assert len(word) == 99" in reply["payload"][0]["text"]


def test_a_missing_answer_says_which_there_are(kernel):
    reply, printed = run(kernel, 'worked_answer("answers/demo.py", 3)')
    assert reply["status"] == "error"
    assert "answers/demo.py has no worked answer 3; it has [1, 2]." in printed
    reply, printed = run(kernel, 'worked_answer("answers/nothing.py", 1)')
    assert reply["ename"] == "FileNotFoundError" and "run the notebook from the notebooks/ folder" in printed


def test_sections_keep_their_code_as_written():
    preamble, sections = answer_sections(ANSWERS)
    assert preamble == "from collections import Counter"
    assert sections == {
        1: 'print("counted", Counter(word)["a"], "from", word)\n',
        2: 'assert len(word) == 99, "this answer no longer holds"\n',
    }
