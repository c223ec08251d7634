"""Write-then-move helpers: nothing half-written ever sits under a final name.

Used by `keras-vit-train` and by the `export` package.
"""

import contextlib
import os
import shutil
import tempfile


def check_target(path, overwrite):
    """Raises FileExistsError if `path` exists and `overwrite` is False."""
    if os.path.lexists(path) and not overwrite:
        raise FileExistsError(f"{path} exists; pass overwrite=True (--overwrite) to replace it")


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
    try:
        yield tmp
        _default_permissions(tmp)
        promote(tmp, path, overwrite)
    finally:
        remove(tmp)


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
    """Removes a file or folder if it exists."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        os.remove(path)
