"""GraphModule -> GraphNet `model.py` text."""

from __future__ import annotations

import re

import torch.fx

from .compat import FakeTensor, _LazyGraphModule

_EXTRA_IMPORTS = (
    (re.compile(r"\bdevice\("), "from torch import device"),
    (re.compile(r"\b(inf|nan)\b"), "from math import inf, nan"),
)


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


def graphnet_code(gm: torch.fx.GraphModule) -> str:
    """The module as GraphNet writes it: `import torch`, `class GraphModule`, `forward`."""
    body = gm.code
    for node in gm.graph.find_nodes(op="get_attr"):
        value = gm
        for part in str(node.target).split("."):
            value = getattr(value, part)
        if isinstance(value, torch.Tensor):
            body = body.replace(f"{node.name} = self.{node.target}", f"{node.name} = {_constant_expression(value)}")
    imports = ["import torch"] + [line for pattern, line in _EXTRA_IMPORTS if pattern.search(body)]
    indented = "".join("    " + line for line in body.splitlines(keepends=True))
    return "\n".join(imports) + "\n\nclass GraphModule(torch.nn.Module):\n" + indented
