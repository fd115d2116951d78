"""Imports point one way, folder by folder: core < graphnet < extraction < studio, batch < views < jupyter, the CLI
beside the views. No cycles.

Every import counts, inside functions and under `if TYPE_CHECKING:` too: a cycle of types is a cycle of meaning.
"""

import ast
import importlib
from pathlib import Path

import pytest

from bwd_widgets import MOVED_MODULES

PACKAGE = Path(__file__).resolve().parents[1] / "bwd_widgets"
# Each layer is a folder of the package (the CLI and `__main__` sit beside the views, the façade on top). A module
# imports its own folder and the layers below it; folders on one level (studio, batch) do not import each other.
LAYER = {
    "core": 0,
    "examples": 0,
    "graphnet": 1,
    "extraction": 2,
    "studio": 3,
    "batch": 3,
    "views": 4,
    "cli": 4,
    "jupyter": 5,
    "facade": 6,
}
LOOSE = {"__init__", "__main__", "cli"}  # the only modules outside a layer's folder
CORE_MAY_NOT_IMPORT = ("IPython", "ipywidgets", "anywidget", "traitlets", "graphviz", "tqdm")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _layer(module: str) -> str:
    parts = module.split(".")[1:]
    if not parts:
        return "facade"
    if parts[0] == "__main__":
        return "cli"
    assert parts[0] in LAYER, f"{module}: put it in a layer's folder ({', '.join(sorted(LAYER))})"
    return parts[0]


def _imports(path: Path, module: str) -> set[str]:
    """Package modules that `module` imports (the package's own modules only)."""
    tree = ast.parse(path.read_text())
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "bwd_widgets")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "bwd_widgets":
                continue
            for alias in node.names:
                candidate = f"{target}.{alias.name}"
                found.add(candidate if candidate in MODULES else target)
    return {name for name in found if name != module}


FILES = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
MODULES = set(FILES)
GRAPH = {module: _imports(path, module) for module, path in FILES.items()}


def _foreign_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_no_module_sits_loose():
    loose = {p.stem for p in PACKAGE.glob("*.py")} - LOOSE
    assert not loose, f"put these in a layer's folder: {sorted(loose)}"


def test_every_folder_is_a_layer():
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders == set(LAYER) - {"cli", "facade"}, folders


def test_the_walk_sees_the_layers():
    assert "bwd_widgets.core.capture" in GRAPH and "bwd_widgets.core.trace" in GRAPH["bwd_widgets.core.capture"]
    assert "bwd_widgets.views.payload" in GRAPH["bwd_widgets.jupyter.widget"]


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_imports_point_down(module):
    for imported in GRAPH[module]:
        if imported == "bwd_widgets":
            pytest.fail(f"{module} imports the package façade: import the module that defines the name")
        mine, theirs = _layer(module), _layer(imported)
        if mine == "cli":
            assert LAYER[theirs] < LAYER["views"] or theirs == "cli", (
                f"{module} imports {imported}: the CLI uses operations only"
            )
        elif theirs != mine:
            assert LAYER[theirs] < LAYER[mine], f"{module} ({mine}) imports {imported} ({theirs}): only layers below"


@pytest.mark.parametrize(
    "module", sorted(m for m in GRAPH if LAYER[_layer(m)] < LAYER["jupyter"] and _layer(m) != "cli")
)
def test_below_jupyter_nothing_imports_ipython(module):
    banned = {"IPython", "ipywidgets", "anywidget", "traitlets"}
    if _layer(module) in ("core", "examples"):
        banned |= set(CORE_MAY_NOT_IMPORT)
    assert not _foreign_imports(FILES[module]) & banned


def test_no_import_cycle():
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        path.append(module)
        for imported in sorted(GRAPH.get(module, ())):
            if imported not in GRAPH:
                continue
            if state.get(imported) == 1:
                cycle = path[path.index(imported) :] + [imported]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if imported not in state:
                visit(imported)
        path.pop()
        state[module] = 2

    for module in sorted(GRAPH):
        if module not in state:
            visit(module)


def _unannotated(path: Path) -> list[str]:
    """Public functions and methods (module level or in public classes) with a parameter or return unannotated."""
    missing = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef) and not child.name.startswith("_"):
                visit(child)
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if child.name.startswith("_") and child.name not in ("__init__", "__call__", "__repr__"):
                    continue
                arguments = child.args.posonlyargs + child.args.args + child.args.kwonlyargs
                arguments += [a for a in (child.args.vararg, child.args.kwarg) if a is not None]
                missing.extend(
                    f"{child.name}({a.arg})" for a in arguments if a.arg not in ("self", "cls") and a.annotation is None
                )
                if child.returns is None and child.name != "__init__":
                    missing.append(f"{child.name} -> ?")

    visit(ast.parse(path.read_text()))
    return missing


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_public_api_is_annotated(module):
    assert not _unannotated(FILES[module]), f"{module}: annotate {', '.join(_unannotated(FILES[module]))}"


@pytest.mark.parametrize("old", sorted(MOVED_MODULES))
def test_a_moved_module_keeps_its_old_path(old):
    """What users typed before the layers became folders still imports, as the module that moved."""
    moved = importlib.import_module(old)
    assert moved is importlib.import_module(MOVED_MODULES[old])
    where = PACKAGE.joinpath(*old.split(".")[1:])
    assert not where.with_suffix(".py").exists() and not where.is_dir(), (
        f"{old} is not moved: drop it from MOVED_MODULES"
    )


def test_the_old_sample_pass_path_gives_the_file_graphnets_driver_loads():
    import bwd_widgets.graphnet_pass as sample_pass  # the README's command before the move

    assert Path(sample_pass.__file__) == PACKAGE / "batch" / "sample_pass.py"
