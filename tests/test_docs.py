"""README.md and the guides in docs/ (issue 28): every relative link points at a file of the repository,
every guide is linked from the README, and every Python block is valid Python."""

import ast
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
BLOCK = re.compile(r"^```python\n(.*?)^```", re.M | re.S)


def _ids(pages):
    return [str(p.relative_to(ROOT)) for p in pages]


def test_the_readme_is_a_front_page():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 250


@pytest.mark.parametrize("page", PAGES, ids=_ids(PAGES))
def test_every_relative_link_points_at_a_file(page):
    missing = [target for target in LINK.findall(page.read_text())
               if not re.match(r"[a-z]+:", target) and not (page.parent / target).exists()]
    assert not missing, missing


def test_every_guide_is_linked_from_the_readme():
    linked = {(ROOT / target).resolve() for target in LINK.findall((ROOT / "README.md").read_text())}
    unlinked = [p.name for p in PAGES[1:] if p.resolve() not in linked and p.name != "sha256_sources.md"]
    assert not unlinked, unlinked


@pytest.mark.parametrize("page", PAGES, ids=_ids(PAGES))
def test_every_python_block_parses(page):
    for block in BLOCK.findall(page.read_text()):
        ast.parse(block)
