"""A worked answer as a learner runs it, in a real JupyterLab and in Notebook 7: the cell that said only
`worked_answer(...)` shows the answer's code after it runs, and its output below, as `%load` does."""

import json

from jupyter_page import APP, open_and_run, write_notebook

ANSWERS = '"""Answers."""\n\n# %% 1\nprint("counted", word.count("a"))\n'
CALL = 'worked_answer("answers/course.py", 1)'
CELL = f"{APP}.shell.currentWidget.model.cells.get(1)"


def test_running_a_worked_answer_puts_its_code_in_the_cell(frontend, browser, artifacts):
    (frontend.root / "answers").mkdir(exist_ok=True)
    (frontend.root / "answers" / "course.py").write_text(ANSWERS, encoding="utf-8")
    write_notebook(
        frontend.root / "course.ipynb",
        ['from bwd_widgets.jupyter.course import worked_answer\nword = "banana"', CALL],
        {},
    )
    page = browser.new_page(viewport={"width": 1200, "height": 800})
    try:
        open_and_run(page, frontend.notebook("course.ipynb"), 0, frontend.shot(artifacts, "course-timeout.png"))
        page.wait_for_function(f"{CELL}.outputs.length > 0", timeout=60_000)
        page.wait_for_function(f"{CELL}.sharedModel.getSource() !== {json.dumps(CALL)}", timeout=10_000)
        source = page.evaluate(f"{CELL}.sharedModel.getSource()")
        output = page.evaluate(f"{CELL}.outputs.get(0).toJSON().text")
        page.screenshot(path=frontend.shot(artifacts, "worked-answer.png"))
    finally:
        page.close()
    assert source == '# worked answer 1, loaded from answers/course.py\nprint("counted", word.count("a"))\n'
    assert "".join(output) == "counted 3\n"
