"""Rich display as IPython reaches it: `_ipython_display_` on the results, answered by the Jupyter layer.

Importing bwd_widgets installs nothing into IPython; a result that ends a cell in a kernel draws as the
widget and a picture that follows it (no `Out[n]`), in a terminal as its text.
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


def test_results_show_as_the_widget_in_a_kernel_and_as_text_in_a_terminal(shell, reference, monkeypatch):
    shell.execution_count += 1  # a new cell: what earlier tests drew belongs to theirs
    data, _ = shell.display_formatter.format(reference)  # a terminal
    assert set(data) == {"text/plain"} and data["text/plain"] == repr(reference)
    shell.kernel = object()  # what a Jupyter kernel's shell has
    torch.manual_seed(0)
    model, x = Transformer(width=16, depth=1), torch.randint(0, 64, (2, 4))
    sent: list[dict] = []
    monkeypatch.setattr(shell.display_pub, "publish", lambda data, metadata=None, **kw: sent.append(data))
    for result in (
        reference,
        bw.compare(reference, partitioners=["default", 0.0]),
        bw.sweep(model, x, budgets=[1.0], progress=False),
    ):
        sent.clear()
        data, _ = shell.display_formatter.format(result)
        assert data == {}, "the result displays itself: no execute_result, no Out[n]"
        # a placeholder first (building a big model's view takes seconds), then the widget in its place
        assert set(sent[0]) == {"text/plain"} and sent[0]["text/plain"].startswith("Building the view of ")
        assert "application/vnd.jupyter.widget-view+json" in sent[1] and "image/svg+xml" in sent[1], type(result)
        assert "bwd-static" in sent[-1]["text/html"], "the static picture follows the widget"
        assert sent[-1]["text/plain"] == sent[1]["text/plain"] == repr(result), "the text stays the result's own"


def test_a_result_the_cell_already_drew_is_not_drawn_twice(shell, reference):
    shell.kernel = object()
    bw.BackwardGraphWidget(reference)._repr_mimebundle_()  # what %bwd_extract shows before returning
    data, _ = shell.display_formatter.format(reference)
    assert set(data) == {"text/plain"}, "its text, as Out[n]"


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


@pytest.fixture
def published(shell, monkeypatch):
    """What the kernel would send: every display_data published, in order."""
    sent = []
    monkeypatch.setattr(shell.display_pub, "publish", lambda data, metadata=None, **kw: sent.append(data))
    shell.kernel = object()
    shell.execution_count += 1
    return sent


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
# what JupyterLab's sanitizer keeps in an untrusted notebook, and the one style rule (dropped there)
SAFE_TAGS = {"div", "p", "strong", "em", "img", "table", "thead", "tbody", "tr", "th", "td", "style"}


def _tags(markup: str) -> list[tuple[str, dict]]:
    from html.parser import HTMLParser

    found = []

    class Tags(HTMLParser):
        def handle_starttag(self, tag, attrs):
            found.append((tag, dict(attrs)))

    Tags().feed(markup)
    return found


def test_a_result_in_a_kernel_is_the_widget_then_a_picture(shell, published, reference):
    assert shell.display_formatter.format(reference) == ({}, {}), "it displays itself"
    assert len(published) == 3, "a placeholder, then in its place the widget, then the picture"
    assert set(published[0]) == {"text/plain"} and published[0]["text/plain"].startswith("Building the view of ")
    widget, data = published[1], published[2]
    assert WIDGET_VIEW in widget and widget["text/html"] == "", "an untrusted notebook shows nothing in its place"
    assert widget["image/svg+xml"].startswith("<svg") and widget["text/plain"] == repr(reference)
    assert set(data) == {"text/html", "text/plain"} and 'class="bwd-static"' in data["text/html"]
    assert data["text/plain"] == repr(reference), "the result's text stays its own"
    tags = _tags(data["text/html"])
    assert {tag for tag, _ in tags} <= SAFE_TAGS
    images = [attrs for tag, attrs in tags if tag == "img"]
    assert len(images) == 2, "the graph's first view and the memory timeline"
    assert all(i["src"].startswith("data:image/svg+xml;base64,") and len(i["alt"]) > 40 for i in images)
    assert "max-width: 100%" in images[0]["style"], "never wider than the page"
    for words in ("peak activation memory", "largest of 8 saved values", "native_batch_norm_backward", "torch says"):
        assert words in data["text/html"], words


def test_a_widget_displayed_is_the_widget_then_a_picture(shell, published, reference):
    from IPython.display import display

    display(bw.show(reference))
    assert len(published) == 2
    assert WIDGET_VIEW in published[0] and published[0]["text/plain"].startswith("BackwardGraph(")
    assert "bwd-static" in published[1]["text/html"] and published[1]["text/plain"].startswith("conv_bn")


def test_the_picture_hides_itself_only_beside_a_drawn_widget():
    """The style rule: the picture hides while the output before it holds a drawn widget; that output
    hides while it holds none (loading, or "model not found" after a restart)."""
    from bwd_widgets.views.html import STATIC_STYLE

    rules = STATIC_STYLE.replace("\n", " ")
    assert ".jp-OutputArea-child:has(.bwd-root) + .jp-OutputArea-child:has(.bwd-static) { display: none; }" in rules
    assert (
        ".jp-OutputArea-child:not(:has(.bwd-root)):has(+ .jp-OutputArea-child .bwd-static) { display: none; }" in rules
    )


def test_the_picture_keeps_hostile_names_as_text():
    class Hostile(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.add_module("<img src=x onerror=alert(1)>", torch.nn.Linear(3, 3))

        def forward(self, x):
            return getattr(self, "<img src=x onerror=alert(1)>")(x).tanh()

    from bwd_widgets.views.html import fallback_html
    from bwd_widgets.views.payload import graph_payload
    from bwd_widgets.views.static import first_view

    data = graph_payload(bw.extract(Hostile(), torch.randn(2, 3)))
    markup = fallback_html(data, first_view(data), bw.plot.timeline(data["run"]["memory"]["timeline"]).svg)
    assert "&lt;img src=x onerror=alert(1)&gt;" in markup
    tags = _tags(markup)
    assert [attrs.get("src", "")[:26] for tag, attrs in tags if tag == "img"] == ["data:image/svg+xml;base64,"] * 2
    assert not any(name.startswith("on") for _, attrs in tags for name in attrs)


def test_charts_show_as_an_image_with_their_summary_as_alt_text(reference):
    chart = bw.plot.timeline(reference)
    (tag, attrs), *_ = _tags(chart._repr_html_())
    assert tag == "img" and attrs["alt"] == repr(chart) and attrs["src"].startswith("data:image/svg+xml;base64,")
    import base64

    assert base64.b64decode(attrs["src"].split(",", 1)[1]).decode() == chart.svg


def test_the_static_first_view_follows_the_widgets_rules(reference, monkeypatch):
    """js/firstview.ts: top to bottom when that reads well; a small drawing that does not is tried left to
    right and kept when that does; so a short, wide pane turns the graph on its side."""
    import shutil

    from bwd_widgets.views import static
    from bwd_widgets.views.payload import graph_payload

    if shutil.which("dot") is None:
        pytest.skip("Graphviz's dot is not installed")
    data = graph_payload(reference)
    tall = static.first_view(data)
    assert tall is not None and tall.rankdir == "TB" and tall.good
    monkeypatch.setattr(static, "NOMINAL_PANE", (3000.0, 100.0))
    wide = static.first_view(data)
    assert wide is not None and wide.rankdir == "LR" and wide.good, wide and (wide.rankdir, wide.scale, wide.span)
    # the figures are the payload's (views/grouping.py writes them once, for the widget and this picture)
    monkeypatch.setattr(static, "NOMINAL_PANE", (860.0, 560.0))
    assert data["views"]["max_scale"] == 2.0 and tall.scale <= 2.0
    capped = static.first_view({**data, "views": {**data["views"], "max_scale": tall.scale / 2}})
    assert capped is not None and capped.scale == tall.scale / 2
    never_across = {**data["views"], "min_span": 2.0, "try_across_below": 0}
    assert static.first_view({**data, "views": never_across}).rankdir == "TB"


def test_showing_a_model_says_what_it_is_doing_until_the_widget_can_appear(shell, published, monkeypatch):
    """`bw.show(model, x)` extracts first (tens of seconds on a big model): a line says so, then how long
    it took, as text; the widget follows."""
    import torch

    from bwd_widgets.jupyter import widget as widget_module

    seen_during = []
    original = widget_module.extract

    def watched(*args, **kwargs):
        seen_during.append(list(published))
        return original(*args, **kwargs)

    monkeypatch.setattr(widget_module, "extract", watched)
    widget = bw.show(torch.nn.Linear(4, 2), torch.randn(3, 4))
    assert isinstance(widget, bw.BackwardGraphWidget)
    during = seen_during[0]
    assert len(during) == 1 and during[0]["text/plain"].startswith("Extracting Linear (real mode): tracing")
    assert set(during[0]) == {"text/plain"}  # text only: the model's name is the user's
    assert published[-1]["text/plain"].startswith("Extracted Linear in ") and set(published[-1]) == {"text/plain"}


def test_the_magic_in_a_kernel_says_what_it_is_doing_then_how_long_it_took(shell, published, monkeypatch):
    import torch

    from bwd_widgets.jupyter import magic

    seen = []
    original = magic.extract
    monkeypatch.setattr(magic, "extract", lambda *a, **k: seen.append(list(published)) or original(*a, **k))
    shell.run_line_magic("load_ext", "bwd_widgets")
    shell.user_ns.update(lin=torch.nn.Linear(4, 2), x=torch.randn(3, 4))
    try:
        shell.run_line_magic("bwd_extract", "--no-display --name lin4 lin(x)")
    finally:
        shell.run_line_magic("unload_ext", "bwd_widgets")
    assert [d["text/plain"].split(":")[0] for d in seen[0]] == ["Extracting lin4 (real mode)"]
    assert published[-1]["text/plain"].startswith("Extracted lin4 in ")


def test_a_bare_extract_shows_its_stages_in_an_output_it_empties_at_the_end(shell, published, monkeypatch):
    """`g = bw.extract(model, x)` in a kernel: an output with no data, rewritten with the stage and seconds
    while the extraction runs, and emptied again at the end, also when it fails: the saved notebook keeps
    nothing, and nbval, which reads the first bundle of an output, compares nothing of it."""
    import time

    import torch

    from bwd_widgets.extraction import extract as extractor

    original = extractor.extract

    def slow(*args, **kwargs):
        time.sleep(1.2)  # long enough for the placeholder's first rewrite (jupyter/progress.py TICK_SECONDS)
        return original(*args, **kwargs)

    monkeypatch.setattr(extractor, "extract", slow)
    bw.extract(torch.nn.Linear(4, 2), torch.randn(3, 4), name="lin")
    assert published[0] == {} and published[-1] == {}
    during = [bundle["text/plain"] for bundle in published[1:-1]]
    assert during and during[0].startswith("Extracting lin (real mode) \u00b7 ") and "interrupt the kernel" in during[0]
    published.clear()
    with pytest.raises(bw.BwdWidgetsError):
        bw.extract(torch.nn.Linear(4, 2), "not a tensor")
    assert published[0] == {} and published[-1] == {}  # an error empties it too; the error says why


def test_a_bare_extract_outside_a_kernel_prints_nothing(capsys):
    import torch

    bw.extract(torch.nn.Linear(4, 2), torch.randn(3, 4))
    assert capsys.readouterr() == ("", "")


@pytest.fixture
def displays(shell, monkeypatch):
    """What the kernel would send, with its display ids: (data, display id, whether an update), in order."""
    sent = []

    def publish(data, metadata=None, *, transient=None, update=False, **kw):
        sent.append((data, (transient or {}).get("display_id"), update))

    monkeypatch.setattr(shell.display_pub, "publish", publish)
    shell.kernel = object()
    shell.execution_count += 1
    return sent


def _move_to_min_cut(widget, budget):
    """What the widget's own controls do: the partitioner's menu, then the budget's slider."""
    widget.partitioner = "min_cut"
    widget.memory_budget = budget
    assert widget.error == "" and widget.payload["partitioner"] == "min_cut"
    assert widget.payload["memory_budget"] == budget


def test_the_picture_follows_the_partition_the_widget_shows(displays, monkeypatch):
    """Issue 43, item 10: a saved notebook shows the partition its author left on screen. The picture after the
    widget is published under a display id and updated, once the widget pauses, with the partition shown: the
    front end puts the update in place of the output, and a save keeps it."""
    from IPython.display import display

    from bwd_widgets.jupyter.widget import BackwardGraphWidget

    # no pause ends until the test says (before this change the widget had no pause: the picture never followed)
    monkeypatch.setattr(BackwardGraphWidget, "PICTURE_PAUSE_S", 600.0, raising=False)
    torch.manual_seed(0)
    widget = bw.show(bw.extract(Transformer(width=16, depth=1), torch.randint(0, 64, (2, 8)), name="tiny"))
    displays.clear()  # the extraction's progress output
    display(widget)
    assert [bool(WIDGET_VIEW in data) for data, _, _ in displays] == [True, False]
    (first, picture_id, update) = displays[1]
    assert picture_id is not None and not update, "the picture is published under a display id"
    assert "tiny \u00b7 default" in first["text/plain"] and "tiny \u00b7 default" in first["text/html"]
    _move_to_min_cut(widget, 0.45)  # two partitions, in less than a pause
    assert [update for _, _, update in displays[2:]] == [], "nothing drawn before the widget pauses"
    assert widget.wait_for_picture(timeout=120, pause=False)
    updates = [(data, shown) for data, shown, update in displays[2:] if update]
    assert updates and all(shown == picture_id for _, shown in updates), "updates of the picture only"
    assert len(updates) == len(displays[2:]) == 1, "one picture for the moves made without a pause: the last one's"
    latest, _ = updates[-1]
    assert "tiny \u00b7 min_cut (budget 0.45)" in latest["text/plain"]
    assert "min_cut (budget 0.45)" in latest["text/html"] and 'class="bwd-static"' in latest["text/html"]
    assert latest == widget.picture_bundle(), "the picture of the partition shown"


def test_every_display_of_a_widget_follows_and_a_closed_one_stops(displays, monkeypatch):
    from IPython.display import display

    from bwd_widgets.jupyter.widget import BackwardGraphWidget

    monkeypatch.setattr(BackwardGraphWidget, "PICTURE_PAUSE_S", 0.05, raising=False)
    torch.manual_seed(0)
    widget = bw.show(bw.extract(Transformer(width=16, depth=1), torch.randint(0, 64, (2, 8)), name="twice"))
    displays.clear()
    display(widget)
    display(widget)
    ids = [shown for data, shown, _ in displays if WIDGET_VIEW not in data]
    assert len(ids) == 2 and len(set(ids)) == 2
    _move_to_min_cut(widget, 0.45)
    assert widget.wait_for_picture(timeout=120)
    updated = {shown: data for data, shown, update in displays if update}
    assert set(updated) == set(ids) and all("min_cut (budget 0.45)" in d["text/plain"] for d in updated.values())
    displays.clear()
    widget.close()
    widget.memory_budget = 1.0  # nothing runs a closed widget's controls; a change made in code draws nothing
    assert widget.wait_for_picture(timeout=120) and displays == []


def test_a_result_ending_a_cell_displays_itself_with_a_picture_that_follows(shell, displays, monkeypatch):
    """A cell's execute_result is never updated by display id, so a result that ends a cell displays itself
    (`_ipython_display_`): the widget, then a picture that follows the partition shown, and no result."""
    from bwd_widgets.jupyter.widget import BackwardGraphWidget

    monkeypatch.setattr(BackwardGraphWidget, "PICTURE_PAUSE_S", 600.0, raising=False)
    torch.manual_seed(0)
    extraction = bw.extract(Transformer(width=16, depth=1), torch.randint(0, 64, (2, 8)), name="itself")
    displays.clear()
    show = extraction._ipython_display_  # what IPython's display hook calls for the cell's last expression
    assert callable(show)
    widget = show()
    assert isinstance(widget, BackwardGraphWidget), "the widget shown for it"
    assert extraction._ipython_display_ is None, "a cell draws a result once: then its text"
    assert set(shell.display_formatter.format(extraction)[0]) == {"text/plain"}
    placeholder, shown, picture = displays
    assert placeholder[1] == shown[1] and shown[2] and WIDGET_VIEW in shown[0], "the placeholder becomes the widget"
    assert picture[1] not in (None, shown[1]) and not picture[2] and picture[0]["text/plain"] == repr(extraction)
    _move_to_min_cut(widget, 0.45)
    assert widget.wait_for_picture(timeout=120, pause=False)
    (latest, picture_id, update), *more = displays[3:]
    assert more == [] and update and picture_id == picture[1], "the picture only, once"
    assert "itself \u00b7 min_cut (budget 0.45)" in latest["text/html"] and latest["text/plain"] == repr(extraction)
