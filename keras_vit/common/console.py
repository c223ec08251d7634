"""Quiet, honest start-up for the `keras-vit-*` command lines.

On every start TensorFlow 2.21 prints lines that a new user reads as faults
(measured on this project's CPU machines; docs/traps.md):

    WARNING: All log messages before absl::InitializeLog() is called are written to STDERR
    I0000 00:00:... port.cc:153] oneDNN custom operations are on. You may see slightly different ...
    I0000 00:00:... cudart_stub.cc:31] Could not find cuda drivers on your machine, GPU will not be used.
    E0000 00:00:... cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error: ...

The first three are written during `import tensorflow` (twice: once by each
of two TensorFlow libraries) by absl's C++ logging before absl is
initialised; they go straight to file descriptor 2 whatever
TF_CPP_MIN_LOG_LEVEL says. The last one, written when the devices are first
listed on a machine without an NVIDIA driver, is an ERROR, hidden only by
TF_CPP_MIN_LOG_LEVEL=3, which hides real errors too; CUDA_VISIBLE_DEVICES=""
or "-1" does not avoid it. Hence two steps:

1. `quiet_start()`, called by `keras_vit/__init__.py` before TensorFlow is
   imported, does nothing unless this process is one of the command lines.
   There it sets TF_CPP_MIN_LOG_LEVEL=1 unless the user set it (TensorFlow's
   INFO lines off, its WARNINGs and ERRORs on) and points file descriptor 2
   at a temporary file.
2. `start(prog, verbose)`, first thing in each command line's `main()`,
   lists the devices while descriptor 2 still points at the file, restores
   descriptor 2, writes back every captured line that is not in `NOISE`
   (Python warnings, errors, any other C++ line), and prints one line that
   names the devices.

With `--verbose 2` nothing is captured or filtered and TF_CPP_MIN_LOG_LEVEL
is left as it is: TensorFlow prints what it always prints.

A command line whose work goes on writing known noise (`keras-vit-export`:
the TFLite converter's and LiteRT's lines in `CONVERTER_NOISE`, written by
C++ straight to descriptor 2) wraps its `main()` in `output_filter(noise)`:
from `start()` on, descriptor 2 is a pipe read by a small filter process
(`forward_lines`) that writes every other line to the real stderr as it
comes. A process of its own: it never waits for this one's GIL, and what a
crash writes last still gets through.
"""

import atexit
import contextlib
import faulthandler
import os
import re
import subprocess
import sys
import tempfile
import warnings

PROGRAMS = ("keras-vit-train", "keras-vit-export", "keras-vit-convert", "keras-vit-pretrain")  # setup.cfg scripts
# python -m MODULE -> the program it runs
MODULES = {"keras_vit.train": "keras-vit-train", "export": "keras-vit-export", "export.__main__": "keras-vit-export",
           "keras_vit.weights.convert": "keras-vit-convert", "keras_vit.pretrain": "keras-vit-pretrain"}

_ABSL = rb"[IWEF]\d{4} \d\d:\d\d:[\d.]+ +\d+ "  # absl's prefix: level, date, time, thread id
NOISE = (
    # absl/log: printed by each library that logs before absl::InitializeLog() (TensorFlow never calls it).
    re.compile(rb"WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"),
    # tensorflow/core/util/port.cc, at import: oneDNN's CPU kernels are on by default on x86.
    re.compile(_ABSL + rb"port\.cc:\d+\] oneDNN custom operations are on\. "),
    # xla/tsl/cuda/cudart_stub.cc, at import: TensorFlow found no CUDA runtime library (libcudart), as on a CPU
    # machine. A GPU skipped for want of CUDA libraries gets its own WARNING (gpu_device.cc: "Cannot dlopen some
    # GPU libraries"), which is kept.
    re.compile(_ABSL + rb"cudart_stub\.cc:\d+\] Could not find cuda drivers on your machine, GPU will not be used\."),
)
# xla/stream_executor/cuda/cuda_platform.cc, when the devices are first listed. Noise only where no NVIDIA
# driver is installed: with a driver, a failed cuInit is a real fault and is shown.
NO_DRIVER_NOISE = (re.compile(_ABSL + rb"cuda_platform\.cc:\d+\] failed call to cuInit: "),)

# Written while a command line works, on every run, by TensorFlow 2.21's TFLite converter and LiteRT 2.x (measured on
# `keras-vit-export --quantization float32,int8,int16x8 --calibration-data FOLDER`): facts about the converter's
# internals, none about the user's model or files.
CONVERTER_NOISE = (
    # tf_tfl_flatbuffer_helpers.cc, each TFLiteConverter.convert(): TF1-era converter flags the MLIR converter ignores.
    re.compile(_ABSL + rb"tf_tfl_flatbuffer_helpers\.cc:\d+\] Ignored (output_format|drop_control_dependency)\.$"),
    # The TFLite quantiser (printf to stderr), each quantised conversion: the types it was asked for.
    re.compile(rb"fully_quantize: \d+, inference_type: \d+, input_inference_type: \w+, output_inference_type: \w+$"),
    # flatbuffer_export.cc, each quantised conversion: the converter writes the runtime version metadata later itself.
    re.compile(_ABSL + rb"flatbuffer_export\.cc:\d+\] Skipping runtime version metadata in the model\. "),
    # LiteRT, its first interpreter in a process: XNNPACK is its default CPU delegate.
    re.compile(rb"INFO: Created TensorFlow Lite XNNPACK delegate for CPU\.$"),
    # LiteRT, when LiteRT Quantizer loads its in-memory flatbuffers (int16x8): their buffers are not 8-byte aligned,
    # so LiteRT copies them. The written .tflite files load without this warning (measured, from path and bytes).
    re.compile(rb"WARNING: Read-only tensor #\d+ \(.*\) has an unaligned buffer \(0x[0-9a-fA-F]+, required "
               rb"alignment \d+\); copying to an aligned heap buffer\. "),
    # TensorFlow's executor, when a tf.data decode op fails on a corrupt image: keras_vit.data names the file itself.
    re.compile(_ABSL + rb"local_rendezvous\.cc:\d+\] Local rendezvous is aborting with status: "),
)
# Dropped too under `--verbose 0` (errors only): absl's INFO and WARNING lines, LiteRT's "INFO:" and "WARNING:" lines.
QUIET_NOISE = (re.compile(rb"[IW]\d{4} \d\d:\d\d:[\d.]+ +\d+ "), re.compile(rb"(INFO|WARNING): "))

_capture = None  # the _Capture that quiet_start() began, until start() or the exit ends it
_filter = None  # the _OutputFilter that output_filter() prepared, started by start()


def cli_name(argv=None, orig_argv=None):
    """The command line this process runs (an entry of `PROGRAMS`), or None for any other program.

    Args:
        argv: `sys.argv` (default). pip's console scripts put the script's
            path in argv[0]; while `python -m MODULE` imports MODULE's
            packages, argv[0] is "-m".
        orig_argv: `sys.orig_argv` (default), where "-m" and MODULE are.

    Returns:
        str or None: e.g. "keras-vit-train" for `keras-vit-train ...` and
        `python -m keras_vit.train ...`.
    """
    argv = sys.argv if argv is None else argv
    orig_argv = getattr(sys, "orig_argv", []) if orig_argv is None else orig_argv
    if not argv:
        return None
    name = re.sub(r"(-script\.pyw?|\.exe)$", "", os.path.basename(argv[0]))  # Windows wrappers
    if name in PROGRAMS:
        return name
    if argv[0] == "-m" and len(orig_argv) >= len(argv):
        module = orig_argv[len(orig_argv) - len(argv)]  # the program's arguments follow MODULE
        module = module[2:] if module.startswith("-m") else module  # "-mMODULE" or "MODULE" after "-m"
        return MODULES.get(module)
    return None


def requested_verbosity(args):
    """The value of the last `--verbose N` / `--verbose=N` in `args` (a list of str), or None."""
    value = None
    for i, arg in enumerate(args):
        if arg == "--":
            break
        if arg == "--verbose" and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith("--verbose="):
            value = arg.split("=", 1)[1]
    return value


def nvidia_driver_present():
    """True where an NVIDIA driver is installed: the kernel module (/proc/driver/nvidia) or libcuda (WSL)."""
    import ctypes.util

    return os.path.exists("/proc/driver/nvidia") or ctypes.util.find_library("cuda") is not None


def filter_noise(data, driver_present):
    """Drops the known start-up noise from captured output.

    Args:
        data: bytes written to file descriptor 2, lines ending in b"\\n".
        driver_present: bool; when True the cuInit line is kept (a real fault).

    Returns:
        bytes: the other lines, unchanged and in order.
    """
    patterns = NOISE if driver_present else NOISE + NO_DRIVER_NOISE
    lines = data.splitlines(keepends=True)
    return b"".join(line for line in lines if not any(p.match(line) for p in patterns))


class _Capture:
    """Points file descriptor 2 (C, C++ and Python writes alike) at an unlinked temporary file."""

    def __init__(self):
        self.file = tempfile.TemporaryFile()  # a file never blocks a writer, unlike a pipe nobody reads yet
        self.saved = os.dup(2)
        # A crash inside TensorFlow while captured still leaves a Python traceback on the real stderr.
        self.faulthandler_was_on = faulthandler.is_enabled()
        self.fault_file = os.fdopen(os.dup(self.saved), "w")
        faulthandler.enable(self.fault_file)
        sys.stderr.flush()
        os.dup2(self.file.fileno(), 2)  # last: nothing above can leave descriptor 2 redirected

    def stop(self):
        """Restores file descriptor 2 and returns the bytes written to it meanwhile."""
        sys.stderr.flush()
        os.dup2(self.saved, 2)
        os.close(self.saved)
        if self.faulthandler_was_on:
            faulthandler.enable(sys.stderr)
        else:
            faulthandler.disable()
        self.fault_file.close()
        self.file.seek(0)
        data = self.file.read()
        self.file.close()
        return data


def quiet_start():
    """Begins the quiet start of a `keras-vit-*` command line; a no-op in any other program.

    Called by `keras_vit/__init__.py` before TensorFlow is imported. Leaves
    everything alone under `--verbose 2`. Never raises: where file
    descriptor 2 cannot be redirected, the start is simply not quiet.
    """
    global _capture
    if _capture is not None or cli_name() is None or requested_verbosity(sys.argv[1:]) == "2":
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")  # INFO off; WARNING and ERROR on
    try:
        _capture = _Capture()
    except (OSError, ValueError, AttributeError):  # no writable temporary folder, no fd 2, a replaced sys.stderr
        return
    atexit.register(_release)  # --help, a bad argument or a crash before start(): still write back what matters


def _release(raw=False):
    """Ends the capture, if any, and writes back what it caught (all of it when `raw`, else without noise)."""
    global _capture
    if _capture is None:
        return
    capture, _capture = _capture, None
    data = capture.stop()
    if not raw:
        cuinit_failed = any(p.search(data) for p in NO_DRIVER_NOISE)
        data = filter_noise(data, driver_present=cuinit_failed and nvidia_driver_present())
    if data:
        os.write(2, data)


def device_summary(cpu_cores, gpu_names=(), num_tpus=0):
    """Names the devices in a few words.

    Args:
        cpu_cores: int >= 1, CPU cores this process may use.
        gpu_names: the GPUs' names, e.g. ["NVIDIA H200", "NVIDIA H200"].
        num_tpus: int >= 0, TPU devices found.

    Returns:
        str, e.g. "CPU (2 cores)", "2 GPUs: NVIDIA H200 x2", "TPU (8 devices)".
    """
    if num_tpus:
        return f"TPU ({num_tpus} device{'s' if num_tpus > 1 else ''})"
    if gpu_names:
        counts = {}
        for name in gpu_names:
            counts[name] = counts.get(name, 0) + 1
        names = ", ".join(name if n == 1 else f"{name} x{n}" for name, n in counts.items())
        return f"{len(gpu_names)} GPU{'s' if len(gpu_names) > 1 else ''}: {names}"
    return f"CPU ({cpu_cores} core{'s' if cpu_cores > 1 else ''})"


def describe_devices():
    """`device_summary` of the devices TensorFlow finds (lists them: the first device initialisation); without
    TensorFlow installed, of the GPUs the Keras backend (JAX or PyTorch) finds."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    try:
        import tensorflow as tf
    except ImportError:
        return device_summary(cores, _backend_gpu_names(), 0)
    gpus = tf.config.list_physical_devices("GPU")
    names = [tf.config.experimental.get_device_details(g).get("device_name", g.name) for g in gpus]
    return device_summary(cores, names, len(tf.config.list_physical_devices("TPU")))


def _backend_gpu_names():
    import keras

    if keras.backend.backend() == "jax":
        import jax

        return [d.device_kind for d in jax.devices() if d.platform == "gpu"]
    if keras.backend.backend() == "torch":
        import torch

        return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return []


def add_verbose_argument(parser, help=None):
    """Adds `--verbose {0,1,2}` (default 1) to an `argparse.ArgumentParser`; read it with `start`.

    Args:
        parser: the `argparse.ArgumentParser`.
        help: str, the flag's help text; default: what `start` does with each level.
    """
    parser.add_argument("--verbose", type=int, choices=[0, 1, 2], default=1,
                        help=help or "0: no device line; 1: one line naming the devices (default); 2: TensorFlow's "
                        "own start-up log, unfiltered")


def start(prog, verbose=1):
    """First thing in a command line's `main()`: ends the quiet start and says which devices run.

    Lists the devices while `quiet_start`'s capture still holds file
    descriptor 2, writes back what was captured (without `NOISE`, or all of
    it when `verbose` is 2), then prints one line to stderr, e.g.
    "keras-vit-train: running on CPU (2 cores)". Inside `output_filter`,
    its filter then starts (unless `verbose` is 2).

    Args:
        prog: str, the program's name, e.g. "keras-vit-train".
        verbose: 0 (no device line), 1 (default) or 2 (nothing filtered).
    """
    try:
        summary = describe_devices() if verbose >= 1 or _capture is not None else None
    finally:  # an error listing the devices is written back too, with what came before it
        _release(raw=verbose >= 2)
    if verbose >= 1:
        print(f"{prog}: running on {summary}", file=sys.stderr, flush=True)
    if _filter is not None and verbose < 2:
        _filter.start(quiet=verbose == 0)


def forward_lines(source, target, patterns):
    """Copies the lines read from file descriptor `source` to `target`, less those that match a pattern, until EOF.

    A line ends in b"\\n", or in b"\\r" (a progress bar redrawn in place: it
    goes through at once); a last line without either is written at EOF.
    What `output_filter`'s process runs.

    Args:
        source, target: int file descriptors (a pipe's read end, stderr).
        patterns: compiled bytes regular expressions, matched at a line's start.
    """
    pending = b""
    while True:
        try:
            chunk = os.read(source, 65536)
        except InterruptedError:  # pragma: no cover - retried by Python itself since 3.5
            continue
        pieces = re.split(rb"(?<=[\r\n])", pending + chunk)
        pending = pieces.pop() if chunk else b""
        for piece in pieces:
            if piece and not any(p.match(piece) for p in patterns):
                while piece:
                    piece = piece[os.write(target, piece):]
        if not chunk:
            return


# The filter process: Python without site-packages, loading this file by path (no TensorFlow), never stopped by a
# Ctrl-C or SIGTERM meant for the command line: it ends when the last writer closes the pipe, after writing it all.
_FILTER_PROCESS = """
import importlib.util, re, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
spec = importlib.util.spec_from_file_location("_console", sys.argv[1])
console = importlib.util.module_from_spec(spec)
spec.loader.exec_module(console)
console.forward_lines(0, 1, [re.compile(p.encode("latin-1")) for p in sys.argv[2:]])
"""


class _Terminal:
    """A stream whose `isatty()` answers for the terminal behind the filter (progress bars stay on), else as it."""

    def __init__(self, stream):
        self._stream = stream

    def isatty(self):
        return True

    def __getattr__(self, name):
        return getattr(self._stream, name)


class _OutputFilter:
    """Points file descriptor 2 at a filter process (and, quiet, descriptor 1 at /dev/null) between start and stop."""

    def __init__(self, noise):
        self.noise = tuple(noise)
        self.process = None

    def start(self, quiet=False):
        """Starts filtering; does nothing where no filter process can start (no Python executable, no pipes)."""
        patterns = NOISE + self.noise + (QUIET_NOISE if quiet else ())
        sys.stdout.flush()
        sys.stderr.flush()
        opened = []
        try:
            tty = os.isatty(2)
            read, write = os.pipe()
            opened += [read, write]
            self.saved = os.dup(2)
            opened.append(self.saved)
            self.process = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _FILTER_PROCESS, os.path.abspath(__file__),
                 *(p.pattern.decode("latin-1") for p in patterns)],
                stdin=read, stdout=self.saved, stderr=self.saved)
        except (OSError, ValueError):  # no Python executable (embedded), no descriptor 2: not filtered
            for fd in opened:
                os.close(fd)
            self.process = None
            return
        os.close(read)
        os.dup2(write, 2)
        os.close(write)
        self.streams = (sys.stdout, sys.stderr)
        if tty and sys.stderr is sys.__stderr__:  # LiteRT Quantizer shows its bars on a terminal only
            sys.stderr = _Terminal(sys.stderr)
        self.devnull = None
        if quiet:  # --verbose 0: errors only; no stdout, no Python warning unless asked for (-W)
            self.devnull, self.stdout = os.open(os.devnull, os.O_WRONLY), os.dup(1)
            os.dup2(self.devnull, 1)
            self.warnings = warnings.catch_warnings()
            self.warnings.__enter__()
            if not sys.warnoptions:
                warnings.simplefilter("ignore")

    def stop(self):
        """Restores the descriptors and waits (10 s at most) until the filter process has written everything."""
        if self.process is None:
            return
        sys.stdout.flush()
        sys.stderr.flush()
        sys.stdout, sys.stderr = self.streams
        if self.devnull is not None:
            os.dup2(self.stdout, 1)
            os.close(self.stdout)
            os.close(self.devnull)
            self.warnings.__exit__(None, None, None)
        os.dup2(self.saved, 2)  # the pipe's last write end here: the filter process reads to its end and exits
        os.close(self.saved)
        with contextlib.suppress(subprocess.TimeoutExpired):  # a child process still holding the pipe
            self.process.wait(timeout=10)
        self.process = None


@contextlib.contextmanager
def output_filter(noise):
    """Within the block, from `start()` on, drops `noise` (and `NOISE`) from everything written to stderr.

    For a command line whose work writes known noise to file descriptor 2
    from C++ (`CONVERTER_NOISE`), around its `main()`. Every other line
    reaches stderr unchanged and in order, as it is written. Under
    `--verbose 0` (`start(prog, 0)`) absl's and LiteRT's INFO and WARNING
    lines are dropped too, stdout goes to /dev/null and Python warnings are
    ignored (unless -W or PYTHONWARNINGS asks for them): only errors show.
    Under `--verbose 2` nothing is filtered.

    Args:
        noise: compiled bytes regular expressions, matched at a line's start.
    """
    global _filter
    previous, _filter = _filter, _OutputFilter(noise)
    try:
        yield
    finally:
        current, _filter = _filter, previous
        current.stop()
