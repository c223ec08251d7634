"""Write-then-move helpers: nothing half-written ever sits under a final name.

Used by `keras-vit-train` and by the `export` package.
"""

import contextlib
import os
import shutil
import signal
import sys
import tempfile
import threading

# The temporary paths this process is writing; a SIGTERM removes them before the process exits.
_LIVE = set()
# exit_on_sigterm's handler: how many sigterm_deferred blocks are open, and the signal that waits for them.
_SIGTERM = {"deferring": 0, "pending": None}


def check_target(path, overwrite):
    """Raises FileExistsError if `path` exists and `overwrite` is False."""
    if os.path.lexists(path) and not overwrite:
        raise FileExistsError(f"{path} exists; pass overwrite=True (--overwrite) to replace it")


def check_writable_folder(path, argument):
    """Raises ValueError naming `argument` (a flag or parameter) unless `path` is, or can be made, a folder this
    process can write in: its nearest existing ancestor is a folder where a file can be made (tried, then
    removed; a read-only file system and a folder of another owner are both caught, root's too)."""
    full = os.path.abspath(path)
    while not os.path.exists(full):
        full = os.path.dirname(full)
    if not os.path.isdir(full):
        raise ValueError(f"{argument} {path!r} cannot be a folder: {full!r} is a file")
    try:
        handle, probe = tempfile.mkstemp(dir=full, prefix=".tmp-writable-")
    except OSError as e:
        raise ValueError(f"{argument} {path!r}: {full!r} is not writable ({e.strerror}); give a folder you can "
                         f"write in") from None
    os.close(handle)
    os.remove(probe)


@contextlib.contextmanager
def staged(path, overwrite=False, directory=False):
    """Yields a temporary path beside `path`; moves it into place if the block succeeds.

    The temporary name starts with ".tmp-" in the same folder, so the final
    move is a rename on the same file system, and a file's name ends with
    the final name, so writers that check extensions (".weights.h5") accept it. On any exception the temporary
    file or folder is removed and `path` is left as it was.
    """
    check_target(path, overwrite)
    if not directory and os.path.isdir(path):
        raise IsADirectoryError(f"{path} is a folder; give a file name (a folder is never replaced by a file)")
    parent = os.path.dirname(os.path.abspath(path)) or "."
    base = os.path.basename(path.rstrip("/"))
    try:
        os.makedirs(parent, exist_ok=True)
        if directory:
            tmp = tempfile.mkdtemp(dir=parent, prefix=f".tmp-{base}-")
            os.rmdir(tmp)  # writers want to create the folder themselves
        else:
            fd, tmp = tempfile.mkstemp(dir=parent, prefix=".tmp-", suffix=f"-{base}")  # keeps ".weights.h5"
            os.close(fd)
    except OSError as e:
        raise type(e)(e.errno, f"cannot write {path}: {e.strerror}") from None
    track(tmp)
    try:
        yield tmp
        _default_permissions(tmp)
        promote(tmp, path, overwrite)
    finally:
        remove(tmp)


def write_text(path, text, overwrite=True):
    """Writes `text` (UTF-8) to `path` through a temporary file in the same folder, then a rename; returns `path`.

    Raises:
        FileExistsError: `path` exists and `overwrite` is False.
    """
    with staged(path, overwrite) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def track(path):
    """Registers a temporary file or folder for `exit_on_sigterm`'s handler until `remove(path)`; returns `path`."""
    _LIVE.add(path)
    return path


@contextlib.contextmanager
def temporary_directory(prefix):
    """`tempfile.TemporaryDirectory(prefix=prefix)` whose folder a SIGTERM removes too (`track`); yields its path."""
    work = track(tempfile.mkdtemp(prefix=prefix))
    try:
        yield work
    finally:
        remove(work)


def untrack(path):
    """Forgets a path `track` registered (it stays on disk)."""
    _LIVE.discard(path)


@contextlib.contextmanager
def exit_on_sigterm():
    """While the block runs, a SIGTERM (a job scheduler's kill) removes every temporary path and exits 143.

    The handler removes what `staged` and `track` registered,
    flushes stdout and stderr and ends the process with `os._exit(128 +
    signum)`, the shell's status for a killed process. It does not raise
    SystemExit and unwind: Python runs signal handlers between bytecodes,
    also inside a `__del__` (TensorFlow has many), where a raised SystemExit
    is printed as "Exception ignored" and the export went on to finish
    (docs/traps.md). The previous handler is restored when the block ends.
    Outside the main thread (where Python allows no handlers) it does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        if _SIGTERM["deferring"]:
            _SIGTERM["pending"] = signum
        else:
            _terminate(signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        _SIGTERM["pending"] = None


def _terminate(signum):
    for path in list(_LIVE):
        with contextlib.suppress(OSError):
            remove(path)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(128 + signum)


@contextlib.contextmanager
def sigterm_deferred():
    """A SIGTERM that arrives while the block runs (under `exit_on_sigterm`) takes effect when the block ends.

    For a run's last writes (a model and its metrics): a kill between them
    would leave a model without its metrics, while the backup to resume
    from is already gone. The block should take seconds, not minutes.
    """
    _SIGTERM["deferring"] += 1
    try:
        yield
    finally:
        _SIGTERM["deferring"] -= 1
        if not _SIGTERM["deferring"] and _SIGTERM["pending"] is not None:
            _terminate(_SIGTERM["pending"])


def _default_permissions(path):
    """mkstemp/mkdtemp create 0600/0700; give the result what the umask allows, like open() would."""
    umask = os.umask(0)
    os.umask(umask)
    if os.path.isdir(path):
        for folder, dirs, files in os.walk(path):
            os.chmod(folder, 0o777 & ~umask)
            for f in files:
                os.chmod(os.path.join(folder, f), 0o666 & ~umask)
    elif os.path.exists(path):
        os.chmod(path, 0o666 & ~umask)


def promote(tmp, path, overwrite=False):
    """Moves `tmp` to `path`, replacing an existing `path` only when `overwrite`."""
    check_target(path, overwrite)
    if os.path.isdir(path) and not os.path.islink(path):
        if not os.path.isdir(tmp):
            raise IsADirectoryError(f"{path} is a folder; give a file name (a folder is never replaced by a file)")
        shutil.rmtree(path)
    os.replace(tmp, path)


def remove(path):
    """Removes a file or folder if it exists (and forgets it, if `track` registered it)."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        os.remove(path)
    _LIVE.discard(path)
