"""Artifacts made once per test run and shared by the processes of `make test` (issue 42).

`make test` runs the suite in several pytest processes (`tests/run_suite.py`). A model that tests of
several modules need (the export tests' trained ViT, the demo's model) is made once per run: the first
process to ask makes it into a temporary folder under a lock and moves it into place; the others wait
for the lock, then read it. The folder is `KERAS_VIT_TEST_CACHE` (`tests/run_suite.py` sets a new one for
each run, so no run reads another run's files); a plain `python -m pytest` without it gets a folder of its
own pytest session (`tmp_path_factory`), as before.
"""

import os
import pathlib
import shutil

import filelock

CACHE_VARIABLE = "KERAS_VIT_TEST_CACHE"


def folder(key, make, tmp_path_factory):
    """The folder `key` of this run's cache, made by `make(path)` when it is not there yet.

    Args:
        key: str, a file-name-safe name of the artifact, e.g. "demo".
        make: callable taking a `pathlib.Path` (an empty folder) and filling it; called at most once a run.
        tmp_path_factory: pytest's factory, for the session's own folder when `KERAS_VIT_TEST_CACHE` is unset.

    Returns:
        str: the folder, complete. A `make` that raises leaves nothing under `key`: the next caller tries again.
    """
    root = os.environ.get(CACHE_VARIABLE) or str(tmp_path_factory.getbasetemp() / "shared_cache")
    os.makedirs(root, exist_ok=True)
    done = os.path.join(root, key)
    with filelock.FileLock(done + ".lock"):
        if not os.path.isdir(done):
            partial = done + ".partial"
            shutil.rmtree(partial, ignore_errors=True)
            os.makedirs(partial)
            make(pathlib.Path(partial))
            os.replace(partial, done)
    return done
