"""Artifacts made once per test run and shared by the processes of `make test` (issue 42).

`make test` runs the suite in several pytest processes (`tests/run_suite.py`). A model that tests of
several modules need (the export tests' trained ViT, the demo's model) is made once per run: the first
process to ask makes it under a lock and marks it complete; the others wait for the lock, then read it.
The folder is `KERAS_VIT_TEST_CACHE` (`tests/run_suite.py` sets a new one for each run, so no run reads
another run's files); a plain `python -m pytest` without it gets a folder of its own pytest session
(`tmp_path_factory`), as before.
"""

import os
import pathlib
import shutil

import filelock

CACHE_VARIABLE = "KERAS_VIT_TEST_CACHE"
COMPLETE = ".complete"


def folder(key, make, tmp_path_factory):
    """The folder `key` of this run's cache, made by `make(path)` when it is not complete yet.

    Args:
        key: str, a file-name-safe name of the artifact, e.g. "demo".
        make: callable taking a `pathlib.Path` (an empty folder, where the artifact stays: paths written into
            its files remain true) and filling it; called once a run when it succeeds.
        tmp_path_factory: pytest's factory, for the session's own folder when `KERAS_VIT_TEST_CACHE` is unset.

    Returns:
        pathlib.Path: the folder, complete (it holds `COMPLETE`, written after `make` returned). A `make` that
        raises leaves no `COMPLETE`: the next caller empties the folder and tries again.
    """
    root = pathlib.Path(os.environ.get(CACHE_VARIABLE) or tmp_path_factory.getbasetemp() / "shared_cache")
    root.mkdir(parents=True, exist_ok=True)
    path = root / key
    with filelock.FileLock(str(root / f"{key}.lock")):
        if not (path / COMPLETE).exists():
            shutil.rmtree(path, ignore_errors=True)
            path.mkdir()
            make(path)
            (path / COMPLETE).write_text(key)
    return path
