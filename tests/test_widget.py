"""The widget's kernel side: traits, reruns, repr, exports. The browser side is in tests/browser."""

import base64
import json
import re
import shutil
import threading
import time

import pytest
import torch
import zoo_models as zoo

import bwd_widgets as bw
from bwd_widgets.core.analysis import place_unowned
from bwd_widgets.core.compat import region_memory_budget_available
from bwd_widgets.examples import Transformer
from bwd_widgets.jupyter.widget import STATIC
from bwd_widgets.views.grouping import FIRST_VIEW_LIMIT, first_views, module_tree, visible_graph
from bwd_widgets.views.payload import STATE_DEFAULTS, TIMELINE_POINTS, graph_payload
from bwd_widgets.views.static import fallback_svg
from bwd_widgets.views.stretches import stretch_extremes, stretch_maxima


@pytest.fixture(scope="module")
def reference(conv_bn_dir):
    return bw.extract(bw.load_graphnet_sample(conv_bn_dir))


def test_payload_of_the_reference(reference):
    payload = graph_payload(reference)
    kinds = {n["id"]: n["kind"] for n in payload["nodes"]}
    assert len(kinds) == 16
    assert [k for k, v in kinds.items() if v == "saved"] == [
        "primals_1",
        "primals_2",
        "primals_4",
        "primals_5",
        "primals_6",
        "convolution",
        "getitem_1",
        "getitem_2",
    ]
    assert kinds["tangents_1"] == "tangent"
    gradients = {n["id"]: n["grad_of"] for n in payload["nodes"] if n["kind"] == "gradient"}
    assert gradients == {
        "getitem_4": ["bn.weight"],
        "getitem_5": ["bn.bias"],
        "getitem_6": ["x"],
        "getitem_7": ["conv.weight"],
    }
    modules = {n["id"]: n["module"] for n in payload["nodes"]}
    assert modules["convolution_backward"] == "conv" and modules["native_batch_norm_backward"] == "bn"
    lines = payload["code"]["backward"].splitlines()
    line = next(n["line"] for n in payload["nodes"] if n["id"] == "convolution_backward")
    assert lines[line - 1].strip().startswith("convolution_backward = ")
    assert ["getitem_3", "convolution_backward"] in payload["edges"]
    assert payload["partition"]["saved_activation_bytes"] == reference.saved_activation_bytes
    assert payload["run"]["saved_activation_bytes"] == reference.saved_activation_bytes, "one compiled region"
    forward = payload["code"]["forward"].splitlines()
    assert forward[payload["code"]["lines"]["forward"]["convolution"] - 1].strip().startswith("convolution = ")


def test_widget_repr_is_deterministic(reference, conv_bn_dir):
    expected = f"BackwardGraph(bw_nodes=16, saved=8, saved_activation_bytes={2 * 8 * 16 * 16 * 4})"
    again = bw.extract(bw.load_graphnet_sample(conv_bn_dir), cache=False)
    assert repr(bw.show(reference)) == repr(bw.show(again)) == repr(bw.show(reference)) == expected


def test_partitioner_traits_rerun_and_keep_the_previous_totals():
    torch.manual_seed(0)
    widget = bw.show(Transformer(width=32, depth=2), torch.randint(0, 64, (2, 16)))
    before = widget.data["partition"]
    widget.selected = "tangents_1"
    widget.memory_budget = 0.0  # no effect under the default partitioner...
    widget.partitioner = "min_cut"  # ...until min-cut uses it
    assert widget.data["partitioner"] == "min_cut" and widget.data["memory_budget"] == 0.0
    assert widget.previous == {"saved": before["saved"], "saved_activation_bytes": before["saved_activation_bytes"]}
    assert widget.data["partition"]["saved_activation_bytes"] < before["saved_activation_bytes"]
    assert widget.selected == "tangents_1" and widget.busy is False and widget.error == ""
    assert torch._functorch.config.activation_memory_budget == 1.0


def test_the_sweep_charts_current_point_follows_the_slider():
    torch.manual_seed(0)
    widget = bw.show(Transformer(width=32, depth=2), torch.randint(0, 64, (2, 16)))
    widget.run_sweep([0.0, 0.3, 1.0])
    assert widget.sweep_index == -1  # the default partitioner's plan is no point of the sweep
    widget.sweep_index = 1
    assert widget.data["partitioner"] == "min_cut" and widget.memory_budget == 0.3
    widget.memory_budget = 0.05  # the slider moves off every swept budget: no point is current
    assert widget.data["memory_budget"] == 0.05 and widget.sweep_index == -1
    widget.memory_budget = 1.0  # onto a swept budget: that point is current again
    assert widget.sweep_index == 2


def test_a_slider_move_to_a_swept_budget_shows_the_sweeps_partition_without_partitioning_again(monkeypatch):
    torch.manual_seed(0)
    widget = bw.show(Transformer(width=32, depth=2), torch.randint(0, 64, (2, 16)))
    widget.run_sweep([0.0, 0.3, 1.0])
    _join("bwd-widgets-prepare")  # a point a forked worker swept is partitioned here once, by the preparation
    widget.partitioner = "min_cut"

    def no_partitioning(*args, **kwargs):
        raise AssertionError("a swept budget is partitioned again")

    monkeypatch.setattr(bw.Trace, "partition", no_partitioning)
    widget.memory_budget = 0.3
    assert widget.extraction is widget.session.sweep.points[1].extraction and widget.sweep_index == 1
    assert widget.error == ""
    monkeypatch.undo()
    widget.memory_budget = 0.05  # not swept: partitioned from the kept joint graph
    assert (
        widget.data["memory_budget"] == 0.05
        and widget.extraction.partitions[0].trace is widget.session.sweep.points[1].extraction.partitions[0].trace
    )


def _course_transformer():
    torch.manual_seed(0)
    return Transformer(width=32, depth=2), (torch.randint(0, 64, (2, 16)),), {}


def _bert_classifier():
    """transformers' BertForSequenceClassification from a small config, called with keywords as its docs do."""
    model, inputs = next(e for e in zoo.TRANSFORMERS if e.name == "bert_classifier").make()
    return model, (), inputs


@pytest.mark.parametrize("make", [_course_transformer, _bert_classifier], ids=["course_transformer", "bert"])
def test_a_sweep_prepares_each_swept_payload_and_a_slider_move_sends_it_with_its_own_diff(monkeypatch, make):
    """After a sweep, a thread builds each swept partition's payload; a move to a swept budget sends that
    one (built nowhere else), with the diff against the partition shown before it, and a measurement made
    since the preparation is drawn, not the payload prepared before it."""
    model, args, kwargs = make()
    widget = bw.show(model, *args, **kwargs)
    widget.run_sweep([0.0, 0.3, 1.0])
    for thread in threading.enumerate():
        if thread.name == "bwd-widgets-prepare":
            thread.join()
    points = [p.extraction for p in widget.session.sweep.points]
    assert set(widget.session.ahead.prepared) == {id(e) for e in points}
    widget.memory_budget = 1.0
    widget.partitioner = "min_cut"
    assert widget.extraction is points[2]

    def no_building(*args, **kwargs):
        raise AssertionError("a prepared payload is built again")

    monkeypatch.setattr("bwd_widgets.jupyter.ahead.graph_payload", no_building)
    monkeypatch.setattr("bwd_widgets.views.payload.encode_without_diff", no_building)  # encoded ahead as well
    widget.memory_budget = 0.3
    wire = widget.get_state("data")["data"]
    monkeypatch.undo()
    assert widget.extraction is points[1] and widget.error == ""
    assert widget.data["diff"]["against"] == points[2].label and widget.data["diff"]["recomputed_now"]
    assert widget.data == graph_payload(points[1], 0, points[2])
    assert isinstance(wire, memoryview), "the payload goes as one binary buffer"
    assert json.loads(bytes(wire)) == json.loads(json.dumps(widget.data)), "the bytes sent are the payload shown"
    points[0].measure()
    widget.memory_budget = 0.0
    assert widget.data["run"]["memory"]["measured"] is not None
    assert widget.data == graph_payload(points[0], 0, points[1])


def _join(name):
    for thread in threading.enumerate():
        if thread.name == name:
            thread.join()


def test_a_slider_move_partitions_its_two_neighbouring_budgets_ahead_and_the_next_step_uses_them(monkeypatch):
    """After a move to budget b, b - step and b + step are partitioned (and their payloads built) in a thread;
    a step to either then neither partitions nor builds, and asks for its own neighbours in turn."""
    model, args, _ = _course_transformer()
    widget = bw.show(model, *args)
    widget.partitioner = "min_cut"
    widget.memory_budget = 0.5
    _join("bwd-widgets-neighbours")
    # the move to min-cut was at 1.0 (its neighbour 0.95 made too unless the move to 0.5 came first)
    assert {0.45, 0.5, 0.55, 1.0} <= set(widget.session.ahead.neighbours) <= {0.45, 0.5, 0.55, 0.95, 1.0}
    assert widget.session.ahead.neighbours[0.5] is widget.extraction
    shown = widget.extraction
    ahead = widget.session.ahead.neighbours[0.55]
    assert ahead.memory_budget == 0.55 and ahead.partitions[0].trace is shown.partitions[0].trace

    def no_work(*args, **kwargs):
        raise AssertionError("a neighbouring budget is partitioned or built again")

    with pytest.MonkeyPatch.context() as patched:
        patched.setattr("bwd_widgets.extraction.result.BackwardExtraction.rerun", no_work)
        patched.setattr("bwd_widgets.jupyter.ahead.graph_payload", no_work)
        asked = []
        patched.setattr(widget, "_partition_neighbours", asked.append)  # run below, with nothing patched
        widget.memory_budget = 0.55
    assert widget.error == "" and widget.extraction is ahead and asked == [ahead]
    assert widget.data == graph_payload(ahead, 0, shown)
    widget._partition_neighbours(ahead).join()
    assert {0.45, 0.5, 0.55, 0.6, 1.0} <= set(widget.session.ahead.neighbours)
    widget.memory_budget = 0.5  # back: the partition shown before is a neighbour too
    assert widget.extraction is shown


def test_payloads_made_ahead_are_sent_to_the_browser_once_each_and_forgotten_when_they_no_longer_hold(monkeypatch):
    """After a sweep each swept partition's payload goes to the browser (js/ahead.ts) as one custom message,
    keyed by the payload's own partitioner, budget and graph index, its buffer the bytes a move would send;
    a view that asks again gets them again; a measurement has the browser forget them, and those that still
    hold are sent again; past `AHEAD_BYTES` none is sent."""
    from bwd_widgets.jupyter import ahead as ahead_module

    model, args, _ = _course_transformer()
    widget = bw.show(model, *args)
    sent: list[tuple[dict, list]] = []
    monkeypatch.setattr(widget, "send", lambda content, buffers=None: sent.append((content, buffers or [])))
    widget.run_sweep([0.0, 0.3, 1.0])
    _join("bwd-widgets-prepare")
    points = [p.extraction for p in widget.session.sweep.points]
    assert sorted(c["ahead"]["memory_budget"] for c, _ in sent) == [0.0, 0.3, 1.0]
    for content, buffers in sent:
        point = points[[0.0, 0.3, 1.0].index(content["ahead"]["memory_budget"])]
        assert content == {"ahead": {"partitioner": "min_cut", "memory_budget": point.memory_budget, "graph_index": 0}}
        assert [json.loads(bytes(b)) for b in buffers] == [graph_payload(point, 0)]
    widget.session.ahead.send_ahead()
    assert len(sent) == 3, "each payload is sent once"
    widget._on_browser_message(widget, {"send_ahead": True}, [])
    assert len(sent) == 6, "a view loaded afresh asks for them again"
    encode = ahead_module.encode_payload  # slowed, so that threads sending at once overlap
    monkeypatch.setattr(ahead_module, "encode_payload", lambda *a: (time.sleep(0.02), encode(*a))[1])
    widget.session.ahead.sent = {}
    del sent[:]
    threads = [threading.Thread(target=widget.session.ahead.send_ahead) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(sent) == 3, "the kernel's, the preparation's and the neighbours' threads send each payload once"
    monkeypatch.setattr(ahead_module, "encode_payload", encode)
    widget.memory_budget, widget.partitioner = 0.3, "min_cut"
    del sent[:]
    widget.measure()
    assert sent[0] == ({"forget_ahead": True}, [])
    again = sorted(c["ahead"]["memory_budget"] for c, _ in sent[1:])
    assert again == [0.0, 1.0], "the measured partition's payload made ahead no longer holds"
    del sent[:]
    widget.session.ahead.sent = {}
    monkeypatch.setattr(ahead_module, "AHEAD_BYTES", len(widget.get_state("data")["data"]) // 2)
    widget.session.ahead.send_ahead()
    assert sent == [], "past AHEAD_BYTES a move waits for the kernel"


def test_the_neighbours_step_is_the_sliders():
    from bwd_widgets.jupyter.ahead import SLIDER_STEP

    header = (STATIC.parents[1] / "js" / "panes" / "header.ts").read_text()
    assert f'step: "{SLIDER_STEP}"' in header, "js/panes/header.ts's budget slider steps by SLIDER_STEP"


def test_a_failed_rerun_shows_one_line_and_keeps_the_graph():
    widget = bw.show(Transformer(width=32, depth=1), torch.randint(0, 64, (2, 8)))
    data = widget.data
    widget.partitioner = "nonsense"
    assert "unknown partitioner" in widget.error and "\n" not in widget.error
    assert widget.data is data


def _script(text, element_id):
    start = text.index(f'id="{element_id}">') + len(f'id="{element_id}">')
    return text[start : text.index("</script>", start)]


def test_html_export_is_self_contained(reference, tmp_path):
    text = bw.to_html(reference, tmp_path / "reference.html").read_text()
    bundle = base64.b64decode(_script(text, "bwd-esm"))
    assert bundle == (STATIC / "widget.js").read_bytes(), "the page carries the whole built bundle"
    assert b"WebAssembly" in bundle, "Graphviz's WebAssembly comes inside the bundle, not from the network"
    outside = re.compile(rb"""(?:src|href)\s*=\s*["']?(?:https?:)?//|import\s*\(\s*["']https?:|fetch\(\s*["']https?:""")
    for part in (text.encode(), bundle):
        assert not outside.search(part), outside.search(part)
    assert not re.search(r"<(script|link)[^>]+(src|href)=", text)
    state = json.loads(_script(text, "bwd-data"))
    assert len(state["data"]["nodes"]) == 16 and state["can_rerun"] is False
    assert set(state) == set(STATE_DEFAULTS) | {"data"}


def test_html_export_escapes_names(tmp_path):
    class Model(torch.nn.Module):
        def forward(self, x):
            return x.sin()

    extraction = bw.extract(Model(), torch.randn(3), name="</script><script>alert(1)</script>")
    text = bw.to_html(extraction, tmp_path / "x.html").read_text()
    assert "<script>alert(1)" not in text


def test_dot_and_svg(reference, tmp_path):
    dot = bw.to_dot(reference)
    assert sorted(re.findall(r'^    id="c\d+"; label="(\w+)";', dot, re.M)) == ["bn", "conv"], "a cluster per module"
    assert "\u2207 conv.weight" in dot and dot.count(' [id="v') == 16, "every node drawn, gradients say of what"
    if shutil.which("dot") is None:
        with pytest.raises(bw.BwdWidgetsError, match="apt install graphviz"):
            bw.save_svg(reference, tmp_path / "g.svg")
    else:
        svg = bw.save_svg(reference, tmp_path / "g.svg").read_text()
        assert "<svg" in svg and "convolution_backward" in svg


HOSTILE = [
    '<<TABLE><TR><TD HREF="javascript:alert(1)">x</TD></TR></TABLE>>',
    "ends in a backslash\\",
    'quote " and\nnewline',
]


def test_hostile_module_names_stay_text_in_dot_and_svg(tmp_path):
    class Hostile(torch.nn.Module):
        def __init__(self):
            super().__init__()
            for name in HOSTILE:
                self.add_module(name, torch.nn.Linear(3, 3))

        def forward(self, x):
            for name in HOSTILE:
                x = getattr(self, name)(x).tanh()
            return x

    extraction = bw.extract(Hostile(), torch.randn(2, 3))
    modules = {n["module"] for n in graph_payload(extraction)["nodes"]}
    assert set(HOSTILE) <= modules, "names are shown as written"
    if shutil.which("dot") is None:
        pytest.skip("Graphviz's dot is not installed: apt install graphviz")
    svg = bw.save_svg(extraction, tmp_path / "hostile.svg").read_text()
    assert "<a " not in svg and "xlink:href" not in svg and "<script" not in svg
    assert svg.count("javascript:") == len(re.findall(r"<text[^>]*>[^<]*javascript:", svg)), "only ever as text"
    assert "&lt;&lt;TABLE&gt;" in svg, "the HTML-like name is drawn as text"


def test_payload_carries_the_memory_picture():
    torch.manual_seed(0)
    extraction = bw.extract(Transformer(width=32, depth=2), torch.randint(0, 64, (2, 16)))
    memory = graph_payload(extraction)["run"]["memory"]
    timeline = extraction.memory_timeline()
    assert memory["steps"] == len(timeline) and len(memory["timeline"]) <= TIMELINE_POINTS
    assert memory["peak"]["live_bytes"] == extraction.peak_activation_bytes == max(p["live_bytes"] for p in timeline)
    assert memory["peak"]["node"] == extraction.peak.node and memory["peak"]["phase"] == "backward"
    assert memory["peak"]["step"] in {p["step"] for p in memory["timeline"]}, "the peak survives the thinning"
    assert sum(m["bytes"] for m in memory["by_module"]) == extraction.saved_activation_bytes
    assert memory["forward_steps"] == sum(1 for p in timeline if p["phase"] == "forward")
    assert memory["y_ticks"][0] == 0 and memory["y_ticks"][-1] >= memory["peak"]["live_bytes"]
    assert memory["x_ticks"] and memory["x_ticks"][-1] <= memory["steps"] - 1


def test_stretch_maxima_keeps_the_highest_of_each_stretch():
    values = [1, 5, 2, 2, 9, 3, 0, 4]
    assert stretch_maxima(values, 4) == [1, 2, 4, 7]
    assert stretch_maxima(values, 20) == list(range(8))
    assert stretch_maxima([], 3) == []
    assert stretch_extremes(values, 4) == [0, 1, 2, 4, 5, 6, 7], "the lowest and the highest of each, in order"


def _chain(blocks: int, ops: int) -> list[dict]:
    return [
        {"id": f"b{b}_{part}_{i}", "module": f"blocks.{b}.{part}", "kind": "op", "recomputed": False}
        for b in range(blocks)
        for part in ("attn", "mlp")
        for i in range(ops)
    ]


def test_first_views_open_level_by_level_within_the_limit_down_to_all_collapsed():
    big = _chain(32, 50)
    tree = module_tree(big)
    views = first_views(tree)
    counts = [len(visible_graph(big, [], set(open)).nodes) for open in views]
    assert (
        views[-1] == [] and all(n <= FIRST_VIEW_LIMIT for n in counts[:-1]) and counts == sorted(counts, reverse=True)
    )
    small = _chain(1, 3)
    assert len(visible_graph(small, [], set(first_views(module_tree(small))[0])).nodes) == len(small), (
        "small opens whole"
    )
    assert [row["size"] for row in tree[:3]] == [3200, 3200, 100], "the model, blocks, blocks.0"


def test_parameter_views_are_named_so_and_add_nothing():
    torch.manual_seed(0)
    payload = graph_payload(bw.extract(Transformer(width=32, depth=1), torch.randint(0, 64, (2, 8))))
    views = [row for row in payload["saved"] if row["alias_kind"] == "parameter"]
    assert views and all(row["activation_bytes"] == 0 and row["kind"] == "activation" for row in views)
    assert all(row["alias_of"].endswith(".weight") for row in views)
    activation_views = [row for row in payload["saved"] if row["alias_kind"] == "activation"]
    assert all(row["storage_op"] for row in activation_views)


def test_ops_without_a_module_join_the_module_their_neighbours_share():
    torch.manual_seed(0)
    payload = graph_payload(bw.extract(Transformer(width=32, depth=3), torch.randint(0, 64, (2, 8))))
    top_level_ops = [n["id"] for n in payload["nodes"] if not n["module"] and n["op"] != "placeholder"]
    assert top_level_ops == [], "the residual gradient sums go inside modules, so a collapsed model stays small"
    modules = {"a": "blocks.0.mlp", "sum": "", "b": "blocks.1.attn", "then": "", "tangents_1": ""}
    edges = [("a", "sum"), ("b", "sum"), ("sum", "then"), ("tangents_1", "a")]
    placed = place_unowned(modules, ["sum", "then"], edges)
    assert list(placed.values()) == ["blocks.0.mlp", "blocks", "blocks.1.attn", "blocks", ""]


def test_a_gradient_sum_goes_with_the_ops_that_read_it():
    """The sum at the residual stream between the final `norm` and `blocks.1` reads a gradient out of
    each and is read by `blocks.1`'s attention: it belongs there, not with the norm whose weight torch's
    fallback (the parameters an op reads) would find, nor at the top where a collapsed model shows it."""
    modules = {"norm_grad": "norm", "mlp_grad": "blocks.1.norm2", "sum": "", "attn": "blocks.1.attn"}
    edges = [("norm_grad", "sum"), ("mlp_grad", "sum"), ("sum", "attn")]
    assert place_unowned(modules, ["sum"], edges, {"sum"})["sum"] == "blocks.1.attn"
    assert place_unowned(modules, ["sum"], edges)["sum"] == "", "an op torch does not mark a sum: by its neighbours"


@pytest.mark.parametrize("budget", [None, 1.0, 0.5, 0.1])
def test_gradient_flow_between_collapsed_modules_goes_one_way(budget):
    import zoo_models

    torch.manual_seed(0)
    model = Transformer(width=32, depth=3)
    extraction = bw.extract(model, torch.randint(0, 64, (2, 8)))
    if budget is not None:
        extraction = extraction.rerun(budget)
    zoo_models.assert_one_direction(graph_payload(extraction), model)


def test_the_widget_carries_a_small_static_picture(reference):
    data, _ = bw.show(reference)._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in data and data["text/plain"].startswith("BackwardGraph(")
    svg = data["image/svg+xml"]
    assert svg.startswith("<svg") and len(svg.encode()) < 100_000
    assert "peak activation memory" in svg and "saved 8 values" in svg
    assert "this compiled region (graph 1 of 1)" in svg and "whole run: peak" in svg, "each number says what it counts"
    if shutil.which("dot") is not None:
        assert ">convolution_backward</text>" in svg, "the first view is drawn"


def test_static_picture_keeps_hostile_names_as_text(tmp_path):
    class Hostile(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.add_module("</svg><script>alert(1)</script>", torch.nn.Linear(3, 3))

        def forward(self, x):
            return getattr(self, "</svg><script>alert(1)</script>")(x).tanh()

    svg = fallback_svg(graph_payload(bw.extract(Hostile(), torch.randn(2, 3))))
    assert "<script" not in svg and "&lt;script&gt;" in svg


def test_the_sweep_button_streams_points_in_a_thread_and_cancel_stops_it_between_points(monkeypatch):
    """The `_sweep` command answers at once (the kernel stays free for Cancel); each point is drawn as it
    comes; Cancel stops before the next budget and leaves a widget that partitions as before."""
    import threading

    torch.manual_seed(0)
    widget = bw.show(Transformer(width=32, depth=2), torch.randint(0, 64, (2, 16)))
    drawn = []
    widget.observe(lambda change: drawn.append([p["budget"] for p in change["new"]]), "sweep_points")
    gate, real = threading.Event(), bw.BackwardExtraction.rerun

    def second_waits(extraction, partitioner="default", memory_budget=None):
        if memory_budget == 0.5 and threading.current_thread().name == "bwd-widgets-sweep":
            assert gate.wait(60), "the test never opened the gate"
        return real(extraction, partitioner, memory_budget)

    monkeypatch.setattr(bw.BackwardExtraction, "rerun", second_waits)
    monkeypatch.setattr("bwd_widgets.studio.forked.spare_cores", lambda: 0)  # a forked copy of the gate never opens
    reply, _ = widget._sweep({"budgets": [0.0, 0.5, 1.0, 0.2]}, [])
    assert reply == {"started": True, "error": ""} and widget.busy
    assert widget.start_sweep() is None, "one sweep at a time"
    with pytest.raises(bw.BwdWidgetsError, match="^the sweep cannot start while the sweep runs in this widget"):
        widget.run_sweep([0.0])  # nor one called here meanwhile
    while not drawn:
        threading.Event().wait(0.01)
    assert drawn == [[0.0]] and widget.sweep_progress == "1/4"
    widget.partitioner = "min_cut"  # the controls, while the sweep waits: partitioned at once
    widget.memory_budget = 0.05
    assert widget.data["memory_budget"] == 0.05 and widget.busy, "the sweep still runs"
    assert widget._cancel_sweep({}, []) == ({"cancelled": True}, [])
    gate.set()
    while widget.busy:
        threading.Event().wait(0.01)
    assert drawn[:2] == [[0.0], [0.0, 0.5]] and [p["budget"] for p in widget.sweep_points] == [0.0, 0.5]
    assert widget.sweep_progress == "2/4 (cancelled)" and widget.error == ""
    assert torch._functorch.config.activation_memory_budget == 1.0
    monkeypatch.undo()
    fresh = widget.extraction.rerun("min_cut", 0.05)
    assert str(widget.extraction.backward.graph) == str(fresh.backward.graph)
    widget.memory_budget = 0.5  # the swept budget: the sweep's own partition, marked current
    assert widget.extraction is widget.session.sweep.points[1].extraction and widget.sweep_index == 1
    assert widget.cancel_sweep() is False, "nothing runs to cancel"


@pytest.mark.parametrize("how", ["start_sweep", "run_sweep"])
def test_a_failed_sweep_says_so_in_one_sentence_and_leaves_the_widget_free(monkeypatch, how):
    """Whatever the job runner runs (jupyter/jobs.py), in its thread or here: an error is one sentence in the
    widget, the progress line empties, the busy flag drops, and the next job may start."""
    torch.manual_seed(0)
    widget = bw.show(Transformer(width=32, depth=1), torch.randint(0, 64, (2, 8)))

    def broken(*args, **kwargs):
        raise RuntimeError("the workers are gone\nand a second line")

    monkeypatch.setattr("bwd_widgets.jupyter.session.sweep", broken)
    if how == "start_sweep":
        widget.start_sweep([0.0, 1.0]).join()
    else:
        assert widget.run_sweep([0.0, 1.0]) is None
    assert widget.error == "the sweep failed: RuntimeError: the workers are gone"
    assert widget.sweep_progress == "" and not widget.busy and widget.sweep_points == []
    monkeypatch.undo()
    assert widget.start_sweep([0.0, 1.0]) is not None, "the runner is free again"
    _join("bwd-widgets-sweep")
    assert widget.error == "" and [p["budget"] for p in widget.sweep_points] == [0.0, 1.0]


ADVICE_TARGET = 300_000
"""Course Transformer, tokens 4 x 16 (tests/test_advisor.py): min-cut 1.0's activation-only peak is 337,920 B,
budget 0.5's 221,184 B: a target between them needs a plan."""


@pytest.fixture(scope="module")
def advised():
    """A widget opened on the model, advised from its field as the Advise button does, with its steps."""
    torch.manual_seed(0)
    model, tokens = Transformer(), torch.randint(0, 64, (4, 16))
    widget = bw.show(model, tokens)
    steps = []
    widget.observe(lambda change: steps.append(change["new"]), "advice_progress")
    thread = widget.start_advise(f"{ADVICE_TARGET} B")
    thread.join()
    return model, tokens, widget, steps


def test_the_advisor_field_lists_the_plans_and_marks_the_cheapest_that_fits(advised):
    model, tokens, widget, steps = advised
    rows = widget.advice_rows
    advice = widget.session.advice
    assert widget.can_advise and not widget.busy and widget.error == ""
    assert [r["label"] for r in rows] == [p.label for p in advice.plans + advice.offload + advice.regions]
    best = [r for r in rows if r["best"]]
    assert len(best) == 1 and best[0]["label"] == advice.best.label and best[0]["fits"]
    assert best[0]["verified_peak_bytes"] <= ADVICE_TARGET
    assert widget.advice_summary.startswith(f"best: {advice.best.label}")
    assert steps[0] == "starting" and any(s.startswith("1/") for s in steps) and steps[-1] == ""
    assert any("min-cut budget" in s for s in steps)  # each step says what it is doing
    assert widget.advice_index == -1  # advising does not change the graph under the user


def test_picking_a_plan_without_a_partition_shows_its_code_and_keeps_the_graph(advised):
    """Offload and region plans are rows too (their code is what the user pastes); picking one changes no graph."""
    _, _, widget, _ = advised
    advice = widget.session.advice
    unshown = advice.offload + advice.regions
    assert [p.kind for p in advice.regions] == (["region"] if region_memory_budget_available() else [])
    assert {p.kind for p in advice.offload} == {"offload"}
    rows = {r["label"]: (i, r) for i, r in enumerate(widget.advice_rows)}
    shown = widget.extraction
    for plan in unshown:
        index, row = rows[plan.label]
        assert (row["kind"], row["code"], row["selectable"]) == (plan.kind, plan.code, False)
        widget.advice_index = index
        assert widget.extraction is shown and widget.error == ""
    widget.advice_index = -1


def test_picking_a_plan_shows_its_partition_and_marks_its_row(advised):
    _, _, widget, _ = advised
    plans = widget.session.advice.plans
    index = next(i for i, p in enumerate(plans) if p.kind != "budget") if any(p.kind != "budget" for p in plans) else 0
    widget.advice_index = index
    assert widget.extraction is plans[index].extraction and widget.advice_index == index
    assert widget.payload["partition"]["saved_activation_bytes"] == plans[index].extraction.saved_activation_bytes
    best = next(i for i, r in enumerate(widget.advice_rows) if r["best"])
    widget.advice_index = best
    assert widget.extraction is widget.session.advice.best.extraction
    widget.partitioner = "default"  # another partition: no plan row is current
    assert widget.advice_index == -1


def test_a_bad_target_or_a_widget_without_its_model_says_so_in_one_sentence(reference):
    torch.manual_seed(0)
    widget = bw.show(Transformer(), torch.randint(0, 64, (4, 16)))
    assert widget.start_advise("lots") is None and widget.error.startswith("target='lots' is not a size")
    assert not widget.busy and widget.advice_rows == []
    bare = bw.show(reference)
    assert not bare.can_advise
    assert bare.start_advise("1GB") is None and "bw.show(model, inputs)" in bare.error


def test_cancel_stops_the_advisor_after_the_step_under_way():
    torch.manual_seed(0)
    widget = bw.show(Transformer(), torch.randint(0, 64, (4, 16)))

    def stop_after_the_trace(change):
        if change["new"].startswith("1/"):
            widget._cancel_advise({}, [])

    widget.observe(stop_after_the_trace, "advice_progress")
    thread = widget.start_advise(str(ADVICE_TARGET))
    thread.join()
    advice = widget.session.advice
    assert advice.interrupted and widget.advice_progress == "stopped" and not widget.busy
    assert widget.advice_summary.endswith(advice.target_means[1:]) and "stopped" in widget.advice_summary


def test_the_advise_command_times_each_plan_when_asked_and_a_fake_widget_says_it_cannot():
    """The partitions tab's "time each plan" box: `{"target": ..., "time": true}` to the `_advise` command."""
    torch.manual_seed(0)
    model, tokens = Transformer(), torch.randint(0, 64, (4, 16))
    widget = bw.show(model, tokens)
    reply, _ = widget._advise({"target": str(ADVICE_TARGET), "time": True}, [])
    assert reply == {"started": True, "error": ""}
    for thread in threading.enumerate():
        if thread.name == "bwd-widgets-advise":
            thread.join()
    timed = [r for r in widget.advice_rows if r["measured_seconds"] is not None]
    assert timed and all(r["kind"] != "offload" for r in timed) and widget.error == ""
    fake = bw.show(model, tokens, mode="fake")
    reply, _ = fake._advise({"target": str(ADVICE_TARGET), "time": True}, [])
    assert reply["started"] is False and "this widget's extraction is fake" in fake.error and not fake.busy


def test_show_advice_opens_on_the_best_plan_with_its_row_current():
    torch.manual_seed(0)
    model, tokens = Transformer(), torch.randint(0, 64, (4, 16))
    advice = bw.advise(model, tokens, target=ADVICE_TARGET, budgets=(1.0, 0.5), policies=(), every=(1,), progress=False)
    widget = bw.show(advice)
    current = widget.advice_rows[widget.advice_index]
    assert current["best"] and widget.extraction is advice.best.extraction and not widget.can_advise


def test_every_widget_of_a_live_models_extraction_offers_the_advisor():
    """`g = %bwd_extract model(x)` then `g` on the next line (issue 43, item 9): a widget opened on an
    extraction, or on a partition made again from it, of a model a widget was opened with offers the advisor
    while that model lives; an extraction whose model no widget was given, or whose model is gone, does not."""
    import gc

    from bwd_widgets.jupyter.advising import remembered_source

    torch.manual_seed(0)
    model, tokens = Transformer(width=32, depth=1), torch.randint(0, 64, (2, 8))
    g = bw.show(model, tokens).extraction
    for later in (g, g.rerun("min_cut", 0.5), g.rerun("default")):
        widget = bw.show(later)
        assert widget.can_advise and widget.session.source[0] is model
    assert not bw.show(bw.extract(Transformer(width=32, depth=1), tokens)).can_advise
    other = Transformer(width=32, depth=1)
    e = bw.extract(other, tokens)
    remembered_source(e, (other, (tokens,), {}))
    assert remembered_source(e.rerun("min_cut"), None)[0] is other
    del other
    bw.clear_trace_cache()  # the trace cache holds the model while it keeps its trace
    gc.collect()
    assert remembered_source(e, None) is None, "a gone model is not kept alive for the advisor"


@pytest.mark.parametrize("work", ["shown", "moved", "swept"])
def test_a_closed_widget_and_the_partitions_it_showed_are_freed(work):
    """ipywidgets keeps a widget until it is closed; after that nothing may keep it, nor what it showed (anywidget
    kept every widget made with its front end given as a path: issue 43, item 4)."""
    import gc
    import weakref

    torch.manual_seed(0)
    widget = bw.show(Transformer(width=32, depth=1), torch.randint(0, 64, (2, 8)))
    if work in ("moved", "swept"):
        widget.partitioner, widget.memory_budget = "min_cut", 0.5
        _join("bwd-widgets-neighbours")
    if work == "swept":
        widget.run_sweep([0.0, 1.0])
        _join("bwd-widgets-prepare")
    kept = [weakref.ref(widget), weakref.ref(widget.extraction)]
    widget.close()
    del widget
    bw.clear_trace_cache()  # the trace cache keeps the first extraction's trace by design
    gc.collect()
    assert [ref() for ref in kept] == [None, None]
