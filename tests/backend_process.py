"""Python processes on another Keras backend, for the tests that compare backends (tests/test_backends*.py)."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OTHERS = ("jax", "torch")


def start(code_or_module, backend, *args):
    """Starts a Python process on `backend` running a `tests.` module or a line of code; its output is piped."""
    env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=ROOT)
    command = [sys.executable, *(["-m", code_or_module] if code_or_module.startswith("tests.") else ["-c", code_or_module]), *args]
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(process, timeout=900):
    """Waits for a process of `start` (killed after `timeout` s); returns a `CompletedProcess`."""
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        stdout, stderr = process.communicate()
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def run(code_or_module, backend, *args, timeout=900):
    return finish(start(code_or_module, backend, *args), timeout)
