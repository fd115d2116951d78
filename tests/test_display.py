"""Rich display as IPython reaches it: `_repr_mimebundle_` on the results, answered by the Jupyter layer.

Importing bwd_widgets installs nothing into IPython; a result that ends a cell in a kernel draws as the
widget, in a terminal as its text.
"""

import subprocess
import sys

import pytest
import torch

import bwd_widgets as bw
from bwd_widgets.examples import Transformer


@pytest.fixture(scope="module")
def reference(conv_bn_dir):
    return bw.extract(bw.load_graphnet_sample(conv_bn_dir))


@pytest.fixture
def shell():
    """IPython's shell, its display hooks and kernel marker restored afterwards."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    printers = dict(shell.display_formatter.mimebundle_formatter.type_printers)
    yield shell
    shell.display_formatter.mimebundle_formatter.type_printers = printers
    if "kernel" in vars(shell):
        del shell.kernel


def test_results_show_as_the_widget_in_a_kernel_and_as_text_in_a_terminal(shell, reference):
    shell.execution_count += 1  # a new cell: what earlier tests drew belongs to theirs
    data, _ = shell.display_formatter.format(reference)  # a terminal
    assert set(data) == {"text/plain"} and data["text/plain"] == repr(reference)
    shell.kernel = object()  # what a Jupyter kernel's shell has
    torch.manual_seed(0)
    model, x = Transformer(width=16, depth=1), torch.randint(0, 64, (2, 4))
    for result in (
        reference,
        bw.compare(reference, partitioners=["default", 0.0]),
        bw.sweep(model, x, budgets=[1.0], progress=False),
    ):
        data, _ = shell.display_formatter.format(result)
        assert "application/vnd.jupyter.widget-view+json" in data and "image/svg+xml" in data, type(result)
        assert data["text/plain"] == repr(result), "the text stays the result's own"


def test_a_result_the_cell_already_drew_is_not_drawn_twice(shell, reference):
    shell.kernel = object()
    bw.BackwardGraphWidget(reference)._repr_mimebundle_()  # what %bwd_extract shows before returning
    data, _ = shell.display_formatter.format(reference)
    assert set(data) == {"text/plain"}


def test_importing_the_package_changes_no_ipython_formatter():
    """Inside a kernel-like shell, `import bwd_widgets` leaves IPython's formatters as they were."""
    code = (
        "from IPython.core.interactiveshell import InteractiveShell\n"
        "shell = InteractiveShell.instance(); shell.kernel = object()\n"
        "formatters = shell.display_formatter.formatters.values()\n"
        "before = [dict(f.type_printers) for f in formatters] + [dict(shell.display_formatter.mimebundle_formatter.type_printers)]\n"
        "import bwd_widgets\n"
        "after = [dict(f.type_printers) for f in formatters] + [dict(shell.display_formatter.mimebundle_formatter.type_printers)]\n"
        "assert before == after, 'a formatter changed'\n"
        "assert 'bwd_widgets.jupyter.widget' not in __import__('sys').modules, 'the widget loaded at import'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
