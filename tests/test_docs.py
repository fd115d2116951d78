"""The docs a newcomer reads stay true to the tree (issue 42).

- docs/architecture.md names every module of the package by its path inside bwd_widgets/ (a package's
  `__init__.py` may be named by its folder, `studio/`; the façade is `__init__.py`), and every `*.py` it
  names exists, so the page can neither miss a new module nor keep one that is gone.
- README.md stays short: what it is, install, examples, links; the rest lives in docs/guide/.
- Every relative link in README.md, CHANGELOG.md and docs/ points to a file that exists.
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "bwd_widgets"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").rglob("*.md"))]
README_LINES = 200


def _code_spans(text: str) -> set[str]:
    """Everything written in backticks on the page."""
    return set(re.findall(r"`([^`\n]+)`", text))


def _modules() -> list[str]:
    return sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py"))


def test_the_architecture_page_names_every_module():
    named = _code_spans(ARCHITECTURE.read_text())
    missing = []
    for module in _modules():
        folder = str(Path(module).parent)
        if module.endswith("/__init__.py") and f"{folder}/" in named:
            continue  # a package named by its folder
        if module not in named:
            missing.append(module)
    assert not missing, f"docs/architecture.md: name these modules and what they own: {missing}"


def test_the_architecture_page_names_no_module_that_is_gone():
    named = [s for s in _code_spans(ARCHITECTURE.read_text()) if s.endswith(".py") and " " not in s]
    gone = [s for s in named if not (PACKAGE / s).exists() and not (ROOT / s).exists()]
    assert not gone, f"docs/architecture.md names files that do not exist: {gone}"


def test_the_readme_is_short():
    lines = len((ROOT / "README.md").read_text().splitlines())
    assert lines < README_LINES, f"README.md has {lines} lines: move detail to docs/guide/"


def _links(text: str) -> list[str]:
    """Targets of Markdown links and images, outside code blocks and code spans."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    return re.findall(r"\]\(([^)\s]+)\)", text)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_to_files_that_exist(page):
    targets = [t.split("#", 1)[0] for t in _links(page.read_text()) if not re.match(r"[a-z]+:", t)]
    broken = [t for t in targets if t and not (page.parent / t).exists()]
    assert not broken, f"{page.relative_to(ROOT)} links to missing files: {broken}"
