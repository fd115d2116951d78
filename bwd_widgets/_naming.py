"""Human names for graph inputs and module paths (`primals_3` -> `bn.weight`)."""

from __future__ import annotations

import re

_FLAT_SEGMENT = re.compile(r"_(modules|parameters|buffers)_")
_SOURCE_SEGMENT = re.compile(r"\.?_?(modules|parameters|buffers)\['([^']*)'\]")
_ROOT = re.compile(r"^L\['[^']*'\]")
_GETATTR = re.compile(r"^getattr\((.*), '([^']*)'\)$")
_KIND = {"parameters": "parameter", "buffers": "buffer", "modules": "input"}


def parse_flat_name(name: str) -> tuple[str, str]:
    """Read Dynamo's flat argument names, as GraphNet samples keep them.

    `L_self_modules_bn_parameters_weight_` -> ("parameter", "bn.weight"),
    `L_x_` -> ("input", "x"). Anything else is an input named as it is.
    """
    core = name[2:] if name[:2] in ("L_", "l_") else name
    core = core[:-1] if core.endswith("_") and core != "_" else core
    if core.startswith("self_"):
        parts = _FLAT_SEGMENT.split(core[4:])
        if len(parts) >= 3 and parts[0] == "":
            return _KIND[parts[-2]], ".".join(parts[2::2])
    return "input", core


def parse_source_name(source_name: str) -> tuple[str, str]:
    """Read a Dynamo source such as `L['self']._modules['l1']._parameters['weight']`."""
    segments = _SOURCE_SEGMENT.findall(source_name)
    if segments:
        return _KIND[segments[-1][0]], ".".join(name for _, name in segments)
    local = re.fullmatch(r"L\['([^']*)'\]", source_name)
    return "input", local.group(1) if local else source_name


def module_path(nn_module_stack) -> str | None:
    """The innermost module of an fx `nn_module_stack`, as a dotted path."""
    if not nn_module_stack:
        return None
    path = list(nn_module_stack.values())[-1][0]
    if not isinstance(path, str):
        return None
    while True:  # Dynamo spells names that are not identifiers getattr(L['self'], 'name')
        unwrapped = _GETATTR.sub(lambda m: f"{m.group(1)}._modules['{m.group(2)}']", path)
        if unwrapped == path:
            break
        path = unwrapped
    path = _ROOT.sub("", path)
    path = re.sub(r"\._modules\['([^']*)'\]", r".\1", path)
    path = re.sub(r"\[(\d+)\]", r".\1", path)
    path = re.sub(r"\[['\"]([^'\"]*)['\"]\]", r".\1", path)
    return path.lstrip(".") or None


def source_line(stack_trace: str | None) -> str | None:
    """`file.py:12: code` for the last frame of an fx stack trace."""
    if not stack_trace:
        return None
    lines = [line for line in stack_trace.strip().splitlines() if line.strip()]
    for i in range(len(lines) - 1, -1, -1):
        frame = re.match(r'\s*File "([^"]+)", line (\d+)', lines[i])
        if frame:
            code = lines[i + 1].strip() if i + 1 < len(lines) else ""
            return f"{frame.group(1)}:{frame.group(2)}: {code}".rstrip(": ")
    return None
