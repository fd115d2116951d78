"""IPython's one shell, set up as a notebook's first cells would be: the tests of the magic and of what users type
first (tests/test_magic.py, test_first_steps.py, test_training_step.py, test_keyword_inputs.py, test_batch.py)
share this, differing only by their setup cell."""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING

from IPython.core.interactiveshell import InteractiveShell

if TYPE_CHECKING:
    from collections.abc import Iterator


@contextmanager
def notebook_shell(setup: str = "", **names: object) -> Iterator[InteractiveShell]:
    """IPython's shell with `%load_ext bwd_widgets` run, then the cell `setup`, and `names` pushed into the user's
    namespace; the extension is unloaded afterwards. A setup cell that fails fails here, not in a later test."""
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "bwd_widgets")
    try:
        if setup:
            result = shell.run_cell(setup)
            assert result.success, f"the setup cell failed: {result.error_in_exec or result.error_before_exec}"
        shell.push(names)
        yield shell
    finally:
        shell.run_line_magic("unload_ext", "bwd_widgets")
