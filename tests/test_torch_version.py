"""Which torch: one declared range (bwd_widgets/core/compat.py), a warning outside it, private torch APIs in one place."""

import ast
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from bwd_widgets.core import compat

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "bwd_widgets"
COMPAT = "core/compat.py"
PRIVATE_ROOTS = ("torch", "functorch")


# -- the declared range ---------------------------------------------------------------------------------------


def test_pyproject_declares_the_range_compat_holds():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    declared = [d.replace(" ", "") for d in dependencies if re.match(r"torch\b", d)]
    assert declared == [compat.TORCH_REQUIREMENT], declared


def test_the_range_spans_what_is_tested():
    oldest, newest = compat._release(compat.TESTED_TORCH[0]), compat._release(compat.TESTED_TORCH[-1])
    assert compat.TORCH_MIN == compat.TESTED_TORCH[0]
    # the upper bound is one minor release past the newest tested: 2.15.x tested, 2.16.x admitted, 2.17 not
    assert compat._release(compat.TORCH_BELOW) == (newest[0], newest[1] + 2, 0)
    assert all(compat.torch_is_tested(v) for v in compat.TESTED_TORCH)
    assert oldest <= newest


def test_the_scripts_install_the_tested_versions():
    """setup.sh installs the oldest tested torch (from local disk), the newer-torch CI jobs each newer one."""
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    assert f'"torch=={compat.TORCH_MIN}"' in setup
    newest = (ROOT / "scripts" / "test_newest_torch.sh").read_text()
    jobs = re.search(r"^NEWER_TORCH=\((.*)\)$", newest, re.M)
    assert jobs is not None and tuple(jobs.group(1).split()) == compat.TESTED_TORCH[1:]
    assert "bash scripts/test_newest_torch.sh" in (ROOT / "scripts" / "test.sh").read_text()


# -- the import-time check ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "version", ["2.13.0", "2.13.0+cpu", "2.13.0a0+git1234", "2.14.1", "2.14.1+cu128", "2.15.0+cu132", "2.16.9"]
)
def test_a_tested_torch_imports_without_a_warning(version, monkeypatch):
    monkeypatch.setattr(torch, "__version__", version)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert compat.check_torch_version() is True


@pytest.mark.parametrize("version", ["2.12.1", "2.17.0", "2.17.0.dev20261101+cu130", "3.0.0"])
def test_an_untested_torch_gets_one_sentence(version, monkeypatch):
    monkeypatch.setattr(torch, "__version__", version)
    with pytest.warns(compat.UntestedTorchWarning) as caught:
        assert compat.check_torch_version() is False
    assert len(caught) == 1
    message = str(caught[0].message)
    assert f"torch {version} is installed" in message
    assert compat.TORCH_REQUIREMENT in message and all(v in message for v in compat.TESTED_TORCH)
    assert "pip install" in message  # what to do
    assert ". " not in message and "\n" not in message, "one sentence"
    assert issubclass(compat.UntestedTorchWarning, UserWarning)


def _python(code: str, folder: Path) -> subprocess.CompletedProcess:
    """`code` run by a fresh Python in `folder` (so the source tree is not on its path), which must succeed."""
    done = subprocess.run([sys.executable, "-c", code], cwd=folder, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done


def test_importing_under_an_untested_torch_warns_once_and_still_works(tmp_path):
    code = (
        "import warnings; warnings.simplefilter('always')\n"
        "import torch; torch.__version__ = '2.99.0'\n"
        "import bwd_widgets as bw\n"
        "print('gradients', len(bw.extract(torch.nn.Linear(3, 2), torch.randn(4, 3)).gradients))\n"
    )
    done = _python(code, tmp_path)
    assert done.stdout.split()[0] == "gradients" and int(done.stdout.split()[1]) >= 2, done.stdout  # it works
    assert done.stderr.count("UntestedTorchWarning") == 1, done.stderr
    assert "torch 2.99.0 is installed" in done.stderr


def test_a_script_extracts_without_importing_ipython(tmp_path):
    """Outside a kernel nothing of Jupyter is needed: a plain script (the CLI, a GPU machine's image without
    IPython) extracts, and is spared IPython's import."""
    code = (
        "import sys, torch, bwd_widgets as bw\n"
        "from bwd_widgets.examples import MLP\n"
        "g = bw.extract(MLP(), torch.randn(2, 16))\n"
        "print(len(g.saved_tensors) > 0, 'IPython' in sys.modules)\n"
    )
    done = _python(code, tmp_path)
    assert done.stdout.split() == ["True", "False"], done.stdout


def test_dynamos_cache_entries_are_counted_where_torch_only_lists_them(monkeypatch):
    """Before 2.13 Dynamo had no entry count, only `_debug_get_cache_entry_list`: the count read from the list
    equals the count read from torch's counter."""

    def twice(x):
        return x * 2

    compiled = torch.compile(twice, backend="eager")
    compiled(torch.randn(3))
    compiled(torch.randn(3, 3))  # a second entry: another rank
    counted = compat.dynamo_cache_entries(twice.__code__)
    monkeypatch.delattr(compat.dynamo_frames, "_get_total_cache_entry_count")
    assert compat.dynamo_cache_entries(twice.__code__) == counted >= 2
    compat.dynamo.reset()


def test_our_compile_isolates_its_recompiles_wherever_torch_compile_can():
    import inspect

    from bwd_widgets.core import capture

    takes = "isolate_recompiles" in inspect.signature(torch.compile).parameters
    assert capture._ISOLATED == ({"isolate_recompiles": True} if takes else {})
    assert takes or not compat.torch_is_tested()  # every tested torch takes it


# -- private torch APIs only in compat.py ---------------------------------------------------------------------


def _private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def _private_module(name: str) -> bool:
    parts = name.split(".")
    if parts[0] == "functorch":  # torch's legacy front end: re-exports of torch._functorch
        return True
    return parts[0] == "torch" and parts[1:2] != ["ops"] and any(_private(p) for p in parts[1:])


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else None


def private_torch_uses(source: str) -> set[str]:
    """Private torch names a module uses: imports of `torch._x`, `torch.a._b`, `functorch...`, imported names
    `_x` from torch modules, and attribute chains such as `torch._dynamo.config` (through the name `torch`;
    `import torch as t` aliases are not followed, and `torch.ops.aten._x` operators are not private APIs).
    Imports under `if TYPE_CHECKING:` count too."""
    tree = ast.parse(source)
    inner = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if _private_module(alias.name))
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if _private_module(node.module):
                found.add(node.module)
            elif node.module.split(".")[0] in PRIVATE_ROOTS:
                found.update(f"{node.module}.{alias.name}" for alias in node.names if _private(alias.name))
        elif isinstance(node, ast.Attribute) and id(node) not in inner:
            chain = _dotted(node)
            if chain and chain.split(".")[0] in PRIVATE_ROOTS and _private_module(chain):
                found.add(chain)
    return found


def test_the_scan_sees_each_kind_of_private_use():
    source = (
        "import torch\nimport torch.utils._pytree as pytree\nimport torch.fx\nfrom functorch.compile import f\n"
        "from torch.nn.utils.stateless import _reparametrize_module\nfrom torch.fx import _lazy_graph_module\n"
        "def g():\n    torch._dynamo.config.patch(x=1)\n    return torch.ops.aten._softmax, torch.__version__\n"
    )
    assert private_torch_uses(source) == {
        "torch.utils._pytree",
        "functorch.compile",
        "torch.nn.utils.stateless._reparametrize_module",
        "torch.fx._lazy_graph_module",
        "torch._dynamo.config.patch",
    }
    assert "torch._functorch.partitioners" in private_torch_uses((PACKAGE / COMPAT).read_text())


def test_private_torch_apis_are_imported_only_in_compat():
    offenders = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(PACKAGE).as_posix()
        if name == COMPAT:
            continue
        if uses := private_torch_uses(path.read_text()):
            offenders[name] = sorted(uses)
    assert not offenders, f"import these through bwd_widgets/core/compat.py (with a comment why): {offenders}"
