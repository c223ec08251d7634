"""The Python blocks of README.md and the guides in docs/, run as a reader would run them (issue 28).

A page's blocks run in order, in one namespace, in a fresh Python process started in an empty folder,
so that a guide cannot rot. Where a block needs something a reader brings (their images, a downloaded
checkpoint, `make demo`'s files) or sizes too big for a 2-core test, an HTML comment right before the
block says so; a rendered page does not show it:

    <!-- test
    setup: one line of Python, run before the block in the same namespace (tests.doc_setup helps)
    replace: text in the block => what the test runs instead (tiny sizes; the text must be in the block)
    check: an expression that must be true after the block
    after: make demo      (run by tests/test_demo_browser.py, where runs/demo is that run's output)
    -->

Tracebacks name the page and its line: each block is compiled at its line in the page.
"""

import dataclasses
import json
import os
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_BLOCK = re.compile(r"(?:<!-- test\n(?P<directives>.*?)-->\n)?^```python\n(?P<code>.*?)^```", re.M | re.S)
_DIRECTIVE = re.compile(r"^(setup|replace|check|after): (.*)$")
_DRIVER = r"""
import json, sys
namespace = {"__name__": "__main__"}
for filename, source in json.load(open(sys.argv[1])):
    exec(compile(source, filename, "exec"), namespace)
print("doc blocks: all ran")
"""


@dataclasses.dataclass
class Block:
    """One ```python block of a page, with the directives of the comment before it."""

    page: str  # relative to the repository root
    line: int  # the block's first line of code in the page, from 1
    code: str
    setup: list
    replace: list
    check: list
    after_demo: bool

    def runnable(self):
        """The block's code with its replacements made; a replacement that finds nothing fails."""
        code = self.code
        for old, new in self.replace:
            if old not in code:
                raise AssertionError(f"{self.page}:{self.line}: 'replace: {old} => ...' finds nothing in the block")
            code = code.replace(old, new)
        return code

    def sources(self):
        """(filename, source) pairs to execute: setup, the block at its line in the page, checks."""
        out = [(f"{self.page}:{self.line} (test setup)", line) for line in self.setup]
        out.append((self.page, "\n" * (self.line - 1) + self.runnable()))
        out += [(f"{self.page}:{self.line} (test check)", f"assert ({check}), {check!r}") for check in self.check]
        return out


def blocks(page):
    """Every ```python block of `page` (a path), in order, with its directives."""
    page = pathlib.Path(page).resolve()
    text = page.read_text()
    name = str(page.relative_to(ROOT)) if page.is_relative_to(ROOT) else page.name
    found = []
    for match in _BLOCK.finditer(text):
        directives = {"setup": [], "replace": [], "check": [], "after": []}
        for line in (match.group("directives") or "").splitlines():
            parsed = _DIRECTIVE.match(line.strip())
            if not parsed:
                raise AssertionError(f"{name}: unreadable test directive {line!r}")
            directives[parsed.group(1)].append(parsed.group(2))
        for value in directives["after"]:
            if value != "make demo":
                raise AssertionError(f"{name}: 'after: {value}' (only 'after: make demo' is known)")
        replace = []
        for value in directives["replace"]:
            old, sep, new = value.partition(" => ")
            if not sep:
                raise AssertionError(f"{name}: 'replace: {value}' has no ' => '")
            replace.append((old, new))
        line = text[: match.start("code")].count("\n") + 1
        found.append(Block(name, line, match.group("code"), directives["setup"], replace,
                           directives["check"], bool(directives["after"])))
    return found


def run(page_blocks, cwd, timeout=900, env=None):
    """Runs `page_blocks` in order in one fresh Python process in `cwd`; returns the CompletedProcess.

    The process has the repository on its path (for `tests.doc_setup`), Keras' cache in `cwd/.keras`
    (nothing is downloaded from the network) and TensorFlow's log quiet. Raises AssertionError with the
    output's tail when a block fails.
    """
    cwd = pathlib.Path(cwd)
    cwd.mkdir(parents=True, exist_ok=True)
    script = cwd / ".doc_blocks.json"
    script.write_text(json.dumps([source for block in page_blocks for source in block.sources()]))
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "KERAS_HOME": str(cwd / ".keras"),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]), **(env or {})}
    result = subprocess.run([sys.executable, "-c", _DRIVER, str(script)], cwd=cwd, env=env, capture_output=True,
                            text=True, timeout=timeout)
    script.unlink()
    assert result.returncode == 0 and "doc blocks: all ran" in result.stdout, (
        result.stdout[-3000:] + result.stderr[-6000:])
    return result
