"""README.md and the guides in docs/ (issue 28): every relative link points at a file of the repository,
every guide is linked from the README, and every Python block runs (tests/doc_blocks.py; the blocks that
need `make demo`'s files run in tests/test_demo_browser.py)."""

import ast
import pathlib
import re

import pytest

from tests import doc_blocks

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
    assert len(doc_blocks.blocks(page)) == len(BLOCK.findall(page.read_text()))  # every block seen, directives read


RUN_HERE = [page for page in PAGES if any(not block.after_demo for block in doc_blocks.blocks(page))]


@pytest.mark.slow
@pytest.mark.parametrize("page", RUN_HERE, ids=_ids(RUN_HERE))
def test_every_python_block_runs(page, tmp_path):
    """A page's blocks in order, as a reader runs them, with the stand-ins and tiny sizes its comments name."""
    doc_blocks.run([block for block in doc_blocks.blocks(page) if not block.after_demo], tmp_path)


def test_a_replacement_that_finds_nothing_fails(tmp_path):
    page = tmp_path / "guide.md"
    page.write_text("<!-- test\nreplace: epochs=60 => epochs=1\ncheck: x == 2\n-->\n```python\nx = 1 + 1\n```\n")
    (block,) = doc_blocks.blocks(page)
    assert block.check == ["x == 2"] and block.replace == [("epochs=60", "epochs=1")] and block.line == 6
    with pytest.raises(AssertionError, match="finds nothing"):
        block.runnable()
