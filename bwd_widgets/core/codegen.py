"""GraphModule -> GraphNet `model.py` text."""

from __future__ import annotations

import re

import torch.fx

from .compat import FakeTensor, _LazyGraphModule

_NAN = re.compile(r"\bnan\b")


def copy_graph_module(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A structural copy (node metadata shallow-copied), for graphs that get rewritten.

    Lazy: its Python code is generated only if something reads or runs it.
    """
    graph = torch.fx.Graph()
    output = graph.graph_copy(gm.graph, {})
    graph.output(output)
    result = _LazyGraphModule(gm, graph)
    result.meta.update(gm.meta)
    return result


def without_none_outputs(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy of gm whose returned tuple drops `None` (gradients of inputs that need none)."""
    result = copy_graph_module(gm)
    output = result.graph.output_node()
    values = output.args[0]
    if isinstance(values, (tuple, list)):
        output.args = (tuple(v for v in values if v is not None),)
    result.graph.eliminate_dead_code()
    result.recompile()
    return result


def _constant_expression(value: torch.Tensor) -> str:
    """Python that rebuilds a lifted tensor constant, so model.py needs no attributes."""
    shape = list(value.shape)
    if isinstance(value, FakeTensor) or value.device.type == "meta":
        return f"torch.zeros({shape}, dtype={value.dtype})"
    values = value.detach().cpu().reshape(-1).tolist()
    return f"torch.tensor({values!r}, dtype={value.dtype}).reshape({shape})"


def graphnet_model_code(code: str) -> str:
    """A forward's code as the `model.py` GraphNet's extractor writes (its `graph_net.torch.utils.apply_templates`,
    text for text: `from torch import device` and `from torch import inf` where the code has those words,
    as substrings), and `from torch import nan` where it has `nan`, which GraphNet's template leaves undefined.
    The one template: graphnet/validate.py writes its re-extractions with it too."""
    tab = "    "
    code = f"\n{tab}".join(code.split("\n"))
    imports = "import torch"
    if "device" in code:
        imports += "\n\nfrom torch import device"
    if "inf" in code:
        imports += "\n\nfrom torch import inf"
    if _NAN.search(code):
        imports += "\n\nfrom torch import nan"
    return f"{imports}\n\nclass GraphModule(torch.nn.Module):\n{tab}{code}"


def graphnet_code(gm: torch.fx.GraphModule) -> str:
    """The module as GraphNet writes it (`graphnet_model_code`), lifted tensor constants written inline."""
    body = gm.code
    for node in gm.graph.find_nodes(op="get_attr"):
        value = gm
        for part in str(node.target).split("."):
            value = getattr(value, part)
        if isinstance(value, torch.Tensor):
            body = body.replace(f"{node.name} = self.{node.target}", f"{node.name} = {_constant_expression(value)}")
    return graphnet_model_code(body)
