"""keras_vit.common.files: write-then-move, and what a SIGTERM leaves behind."""

import os
import signal
import subprocess
import sys

from keras_vit.common import files as _files

# A SIGTERM that Python delivers while a `__del__` runs (TensorFlow has many). A handler that raises SystemExit
# there is printed as "Exception ignored" and the program runs on: the CI failure of the export CLI's SIGTERM test.
KILLED_IN_DEL = r"""
import gc, os, signal, sys
from keras_vit.common import files as _files

class Finalised:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):  # Python runs the handler between these bytecodes
            pass

out = sys.argv[1]
with _files.exit_on_sigterm():
    stage = _files.track(out + "/.tmp-stage")
    os.makedirs(stage)
    open(stage + "/half-written.onnx", "w").write("partial")
    with _files.staged(out + "/model.keras") as tmp:
        open(tmp, "w").write("partial")
        print("STAGED", os.path.basename(tmp), flush=True)
        Finalised()
        gc.collect()
        print("STILL RUNNING", flush=True)
"""


def test_sigterm_inside_del_removes_temporary_paths_and_exits_143(tmp_path):
    run = subprocess.run([sys.executable, "-c", KILLED_IN_DEL, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 128 + signal.SIGTERM, run.stderr[-2000:]
    assert "STAGED .tmp-" in run.stdout and "STILL RUNNING" not in run.stdout
    assert os.listdir(tmp_path) == []


def test_handler_is_restored_and_paths_are_forgotten(tmp_path):
    before = signal.getsignal(signal.SIGTERM)
    with _files.exit_on_sigterm():
        assert signal.getsignal(signal.SIGTERM) is not before
        with _files.staged(str(tmp_path / "a.txt")) as tmp:
            assert tmp in _files._LIVE
            open(tmp, "w").write("done")
        assert tmp not in _files._LIVE
    assert signal.getsignal(signal.SIGTERM) is before
    assert (tmp_path / "a.txt").read_text() == "done" and os.listdir(tmp_path) == ["a.txt"]


KILLED_WHILE_DEFERRED = r"""
import os, signal, sys
from keras_vit.common import files as _files

out = sys.argv[1]
with _files.exit_on_sigterm():
    with _files.sigterm_deferred():
        with _files.staged(out + "/model.keras") as tmp:
            open(tmp, "w").write("model")
        os.kill(os.getpid(), signal.SIGTERM)  # waits for the block: the metrics still land
        for _ in range(1000):
            pass
        with _files.staged(out + "/metrics.json") as tmp:
            open(tmp, "w").write("{}")
        print("WROTE BOTH", flush=True)
    print("AFTER THE BLOCK", flush=True)
"""


def test_sigterm_in_a_deferred_block_lets_the_block_finish_then_exits_143(tmp_path):
    run = subprocess.run([sys.executable, "-c", KILLED_WHILE_DEFERRED, str(tmp_path)], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 128 + signal.SIGTERM, run.stderr[-2000:]
    assert "WROTE BOTH" in run.stdout and "AFTER THE BLOCK" not in run.stdout
    assert sorted(os.listdir(tmp_path)) == ["metrics.json", "model.keras"]
