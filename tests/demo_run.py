"""`make demo`'s job for the tests, run once per `make test` run and shared by the demo's three test modules.

`tests/test_demo.py` trains as `make demo` does (the Makefile's `DEMO_TRAIN_FLAGS`) and checks the
training's bars, `tests/test_demo_export.py` exports that model as `make demo` does (`DEMO_EXPORT_FLAGS`)
and checks every file's bars, `tests/test_demo_browser.py` checks the files in the browser and runs the
guides' blocks that need `make demo`'s files. The training and the export are each made once per run
(`tests/shared_cache.py`); `tests/run_suite.py` keeps the three modules in one process, one after another
(issue 42: the one test that did it all took 5.2 minutes, over the 5-minute budget of a module).
"""

import json
import os
import re
import shlex
import subprocess
import sys

from tests import shared_cache

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(args, timeout):
    """Runs `python ARGS` as `make demo` does; asserts exit 0; returns its standard output."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    result = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=timeout)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return result.stdout


def _makefile_flags(name):
    makefile = open(os.path.join(ROOT, "Makefile")).read()
    return shlex.split(re.search(rf"^{name} := (.*)$", makefile, re.M).group(1))


def demo_export_flags():
    """`keras-vit-export`'s flags in `make demo`, read from the Makefile so the test runs exactly that job."""
    return _makefile_flags("DEMO_EXPORT_FLAGS")


def demo_train_flags():
    """`keras-vit-train`'s flags in `make demo` (its recipe), read from the Makefile."""
    return _makefile_flags("DEMO_TRAIN_FLAGS")


def _train(folder):
    run(["-m", "keras_vit.train", *demo_train_flags(), "--output-dir", str(folder / "demo"), "--verbose", "0"],
        timeout=1500)


def trained(tmp_path_factory):
    """The demo's training output folder (model.keras, metrics.json, ...), as `make demo`'s runs/demo."""
    return shared_cache.folder("demo", _train, tmp_path_factory) / "demo"


def exported(tmp_path_factory):
    """(the export folder, keras-vit-export's printed table) of the demo model, as `make demo`'s runs/demo/export;
    the page of `--web` beside it (the export folder's parent / "web", as runs/demo/web)."""
    out = trained(tmp_path_factory)

    def export(folder):
        table = run(["-m", "export", str(out / "model.keras"), *demo_export_flags(), "--output-dir",
                     str(folder / "export"), "--web", str(folder / "web")], timeout=1500)  # as the Makefile's demo
        (folder / "table.txt").write_text(table)

    folder = shared_cache.folder("demo_export", export, tmp_path_factory)
    return folder / "export", (folder / "table.txt").read_text()


def report_rows(export_folder):
    """export's report.json, and its artifacts by name."""
    report = json.loads((export_folder / "report.json").read_text())
    return report, {r["name"]: r for r in report["artifacts"]}
