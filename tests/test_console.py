"""The keras-vit-* command lines start quietly, name their devices once, and hide no real warning (keras_vit/common/console.py)."""

import os
import platform
import re
import subprocess
import sys

import pytest
from tensorflow.python.util import _pywrap_util_port  # TensorFlow's own test of whether oneDNN is on

from keras_vit.common import console as _console

BIN = os.path.dirname(sys.executable)
# Exactly what `keras-vit-train` printed on this project's CPU machine (TF 2.21) before keras_vit/common/console.py.
MEASURED_NOISE = b"""\
WARNING: All log messages before absl::InitializeLog() is called are written to STDERR
I0000 00:00:1796057461.598801    8011 port.cc:153] oneDNN custom operations are on. You may see slightly different \
numerical results due to floating-point round-off errors from different computation orders. To turn them off, set the \
environment variable `TF_ENABLE_ONEDNN_OPTS=0`.
I0000 00:00:1796057461.599119    8011 cudart_stub.cc:31] Could not find cuda drivers on your machine, GPU will not be used.
"""
MEASURED_CUINIT = (b"E0000 00:00:1796057467.465266    8011 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA "
                   b"error: Failed call to cuInit: UNKNOWN ERROR (303)\n")
REAL = [  # lines that must survive the filter
    b"/work/x.py:3: UserWarning: a deliberate warning\n",
    b"  warnings.warn('a deliberate warning')\n",
    b"W0000 00:00:1796057586.734741    9423 tf_tfl_flatbuffer_helpers.cc:364] Ignored output_format.\n",
    b"E0000 00:00:1796057467.465266    8011 cuda_executor.cc:1] failed to allocate 1.0G\n",
    b"oneDNN custom operations are on. (quoted by someone, not TensorFlow's log line)\n",
    b"keras-vit-train: error: --epochs must be >= 1. Received: 0\n",
]
NOISE_MARKERS = ("absl::InitializeLog", "oneDNN custom operations", "Could not find cuda drivers", "cuInit")
DEVICE_LINE = re.compile(r"^keras-vit-(train|export|convert): running on (CPU \(\d+ cores?\)|\d+ GPUs?: .+|TPU \(\d+ devices?\))$",
                         re.MULTILINE)


def test_filter_drops_the_measured_noise_and_keeps_every_other_line():
    data = REAL[0] + MEASURED_NOISE + b"".join(REAL[1:4]) + MEASURED_CUINIT + MEASURED_NOISE + b"".join(REAL[4:])
    assert _console.filter_noise(data, driver_present=False) == b"".join(REAL)
    # With an NVIDIA driver installed a failed cuInit is a real fault: kept, in place.
    assert _console.filter_noise(data, driver_present=True) == b"".join(REAL[:4]) + MEASURED_CUINIT + b"".join(REAL[4:])
    assert _console.filter_noise(b"", driver_present=False) == b""


def test_capture_of_file_descriptor_2_writes_back_all_but_the_noise(capfd):
    """C++ writes to fd 2 and Python writes to sys.stderr alike are caught, filtered and written back in order."""
    assert _console._capture is None  # pytest is no keras-vit command line: importing keras_vit captured nothing
    for raw in (False, True):
        _console._capture = _console._Capture()
        try:
            os.write(2, REAL[0] + MEASURED_NOISE)
            print(REAL[5].decode(), end="", file=sys.__stderr__, flush=True)  # Python's own stderr, on fd 2
            os.write(2, MEASURED_CUINIT)
            assert capfd.readouterr().err == ""  # nothing reached the terminal yet
        finally:
            _console._release(raw=raw)
        assert _console._capture is None
        expected = REAL[0] + MEASURED_NOISE + REAL[5] + MEASURED_CUINIT if raw else REAL[0] + REAL[5]
        if not raw and _console.nvidia_driver_present():
            expected += MEASURED_CUINIT
        assert capfd.readouterr().err == expected.decode()
    os.write(2, b"after\n")  # descriptor 2 is the terminal again
    assert capfd.readouterr().err == "after\n"


@pytest.mark.parametrize(
    "argv,orig_argv,name",
    [
        (["/venv/bin/keras-vit-train", "--epochs", "1"], ["/venv/bin/python", "/venv/bin/keras-vit-train", "--epochs", "1"],
         "keras-vit-train"),
        (["/venv/Scripts/keras-vit-export.exe", "m.keras"], [], "keras-vit-export"),  # a Windows launcher
        (["-m", "--verbose", "2"], ["python", "-X", "utf8", "-m", "keras_vit.train", "--verbose", "2"], "keras-vit-train"),
        (["-m", "m.keras"], ["python", "-m", "export", "m.keras"], "keras-vit-export"),
        (["-m"], ["python", "-mexport.__main__"], "keras-vit-export"),
        (["-m", "a.npz"], ["python", "-m", "keras_vit.weights.convert", "a.npz"], "keras-vit-convert"),
        (["-m"], ["python", "-m", "keras_vit.pretrain"], "keras-vit-pretrain"),
        (["/venv/bin/keras-vit-pretrain"], ["python", "/venv/bin/keras-vit-pretrain"], "keras-vit-pretrain"),
        (["-m", "x"], ["python", "-m", "keras_vit.inspect", "x"], None),  # another module of the package
        (["-m", "tests"], ["python", "-m", "pytest", "tests"], None),
        (["/venv/bin/pytest", "tests"], ["python", "/venv/bin/pytest", "tests"], None),
        (["-c"], ["python", "-c", "import keras_vit"], None),  # a library user
        ([], [], None),
    ],
)
def test_cli_name_recognises_the_command_lines_only(argv, orig_argv, name):
    assert _console.cli_name(argv, orig_argv) == name


def test_requested_verbosity_is_the_last_one_given():
    assert _console.requested_verbosity(["--epochs", "2"]) is None
    assert _console.requested_verbosity(["--verbose", "2"]) == "2"
    assert _console.requested_verbosity(["--verbose=2", "--verbose", "0"]) == "0"
    assert _console.requested_verbosity(["--", "--verbose", "2"]) is None


def test_device_summary():
    assert _console.device_summary(2) == "CPU (2 cores)"
    assert _console.device_summary(1) == "CPU (1 core)"
    assert _console.device_summary(16, ["NVIDIA H200"]) == "1 GPU: NVIDIA H200"
    assert _console.device_summary(16, ["NVIDIA H200", "NVIDIA H200", "NVIDIA L4"]) == "3 GPUs: NVIDIA H200 x2, NVIDIA L4"
    assert _console.device_summary(96, [], num_tpus=8) == "TPU (8 devices)"


def test_a_crash_while_captured_still_reaches_the_terminal():
    """faulthandler writes to the real stderr during the capture (no TensorFlow: _console loaded by path)."""
    script = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('_console', {_console.__file__!r})\n"
        "console = importlib.util.module_from_spec(spec); spec.loader.exec_module(console)\n"
        "sys.argv[0] = 'keras-vit-train'\n"
        "console.quiet_start()\n"
        "assert console._capture is not None\n"
        "import faulthandler; faulthandler._sigsegv()\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "Fatal Python error: Segmentation fault" in result.stderr


def _run(cmd, tmp_path):
    """Runs a command line as a user without TF_CPP_MIN_LOG_LEVEL would; returns (exit status, stdout + stderr)."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    return result.returncode, result.stdout + result.stderr


# A console script as pip writes it, plus a Python warning and a C++ warning line written to fd 2 while the start-up
# is captured (after `import keras_vit`, before main()): both must reach the user.
CONVERT_WITH_WARNINGS = """
import os, sys, warnings
sys.argv[0] = "keras-vit-convert"
from keras_vit.weights.convert import main
warnings.warn("a deliberate Python warning")
os.write(2, b"W0000 00:00:1796057586.734741    9423 deliberate.cc:1] a deliberate C++ warning\\n")
sys.exit(main())
"""


@pytest.mark.parametrize(
    "cli,args,message",
    [
        ("train", [os.path.join(BIN, "keras-vit-train"), "--epochs", "0"], "keras-vit-train: error: --epochs must be >= 1"),
        ("export", [sys.executable, "-m", "export", "missing.keras", "--output-dir", "out"],
         "keras-vit-export: error: model file not found"),
        ("convert", [sys.executable, "-c", CONVERT_WITH_WARNINGS, "missing.npz", "out.keras"],
         "keras-vit-convert: error: Checkpoint file not found"),
    ],
)
def test_each_cli_starts_quietly_names_its_devices_once_and_keeps_warnings(cli, args, message, tmp_path):
    """Each run imports TensorFlow, lists the devices, then stops at bad input (exit 2)."""
    status, output = _run(args, tmp_path)
    assert status == 2, output[-3000:]
    assert message in output
    assert [m for m in NOISE_MARKERS if m in output] == [], output[-3000:]
    assert len(DEVICE_LINE.findall(output)) == 1, output[-3000:]
    if cli == "convert":
        assert "UserWarning: a deliberate Python warning" in output
        assert "deliberate.cc:1] a deliberate C++ warning" in output


def test_verbose_2_shows_tensorflow_unfiltered(tmp_path):
    status, output = _run([sys.executable, "-m", "keras_vit.train", "--epochs", "0", "--verbose", "2"], tmp_path)
    assert status == 2 and "--epochs must be >= 1" in output, output[-3000:]
    assert len(DEVICE_LINE.findall(output)) == 1
    # Measured on this project's x86-64 Linux CPU machines (TF 2.21): every start logs through absl before it is
    # initialised; oneDNN says it is on where TensorFlow turns it on by default (x86 CPUs with AVX512_VNNI, BF16 or
    # AMX; not on an AVX2-only AMD EPYC, 2026-12-06), and without an NVIDIA driver cuInit fails.
    raw = ["All log messages before absl::InitializeLog() is called are written to STDERR"]
    if platform.machine() in ("x86_64", "AMD64") and _pywrap_util_port.IsMklEnabled():
        raw.append("port.cc:153] oneDNN custom operations are on")
    if not _console.nvidia_driver_present():
        raw.append("failed call to cuInit")
    assert [line for line in raw if line not in output] == [], output[-3000:]


def test_every_console_script_and_its_module_are_known():
    """A command missing from PROGRAMS/MODULES prints TensorFlow's start-up noise (keras-vit-pretrain did at first)."""
    import configparser

    config = configparser.ConfigParser()
    config.read(os.path.join(os.path.dirname(__file__), "..", "setup.cfg"))
    scripts = dict(line.split(" = ") for line in config["options.entry_points"]["console_scripts"].strip().splitlines())
    assert sorted(scripts) == sorted(_console.PROGRAMS)
    for program, target in scripts.items():
        module = target.split(":")[0]
        assert _console.MODULES[module] == program


# Exactly what `keras-vit-export --quantization float32,int8,int16x8 --calibration-data FOLDER` wrote to fd 2 on this
# project's CPU machine (TF 2.21, LiteRT 2.x) before `_console.output_filter`.
MEASURED_CONVERTER_NOISE = b"""\
W0000 00:00:1796172597.189178    3913 tf_tfl_flatbuffer_helpers.cc:364] Ignored output_format.
W0000 00:00:1796172597.189238    3913 tf_tfl_flatbuffer_helpers.cc:367] Ignored drop_control_dependency.
fully_quantize: 0, inference_type: 6, input_inference_type: FLOAT32, output_inference_type: FLOAT32
W0000 00:00:1796172599.022291    3913 flatbuffer_export.cc:3851] Skipping runtime version metadata in the model. \
This will be generated by the exporter.
INFO: Created TensorFlow Lite XNNPACK delegate for CPU.
WARNING: Read-only tensor #3 (tiny_vit_1/transformer_block_0_1/attention_1/query_1/MatMul;tiny_vit_1/\
transformer_block_0_1/attention_1/query_1/Add) has an unaligned buffer (0x7fd5f5206a6c, required alignment 8); \
copying to an aligned heap buffer. Re-export the model to align buffers in the FlatBuffer and enable zero-copy mmap.
W0000 00:00:1796176671.192405   11657 local_rendezvous.cc:412] Local rendezvous is aborting with status: INVALID_ARGUMENT: Unknown image file format. One of JPEG, JPEG XL, PNG, GIF, BMP, WebP required.
"""
REAL_DURING_WORK = [  # lines written while a command line works that must reach the user
    b"/work/x.py:3: UserWarning: a deliberate warning\n",
    b"W0000 00:00:1796172597.189178    3913 tf_tfl_flatbuffer_helpers.cc:364] Ignored output_format: because of x.\n",
    b"W0000 00:00:1796172586.734741    9423 deliberate.cc:1] a deliberate C++ warning\n",
    b"E0000 00:00:1796172586.734741    9423 deliberate.cc:2] a deliberate C++ error\n",
    b"WARNING: Read-only tensor #3 is something else\n",
    b"INFO: Created TensorFlow Lite XNNPACK delegate for GPU.\n",
    b" 50%|#####     | 1/2\r",  # a progress bar redrawn in place
    b"keras-vit-export: error: --opset must be an int in [13, 18]. Received: --opset 11\n",
]


def _forward(data, patterns):
    """What forward_lines writes for `data` written to a pipe in two chunks (split inside a line)."""
    import tempfile

    read, write = os.pipe()
    os.write(write, data[:100])
    os.write(write, data[100:])
    os.close(write)
    with tempfile.TemporaryFile() as out:
        _console.forward_lines(read, out.fileno(), patterns)
        os.close(read)
        out.seek(0)
        return out.read()


def test_forward_lines_drops_the_converter_noise_and_keeps_every_other_line():
    patterns = _console.NOISE + _console.CONVERTER_NOISE
    data = MEASURED_CONVERTER_NOISE + b"".join(REAL_DURING_WORK[:4]) + MEASURED_CONVERTER_NOISE + \
        b"".join(REAL_DURING_WORK[4:]) + MEASURED_NOISE + b"a last line without a newline"
    assert _forward(data, patterns) == b"".join(REAL_DURING_WORK) + b"a last line without a newline"
    # --verbose 0: absl's and LiteRT's INFO and WARNING lines go too; errors stay
    quiet = _forward(data, patterns + _console.QUIET_NOISE)
    assert quiet == REAL_DURING_WORK[0] + REAL_DURING_WORK[3] + b"".join(REAL_DURING_WORK[6:]) + \
        b"a last line without a newline"
    assert _forward(b"", patterns) == b""


@pytest.mark.parametrize("verbose", [0, 1, 2])
def test_output_filter_filters_fd_2_from_start_on(verbose, capfd):
    """C++ writes to fd 2 filtered from start() on; stdout and Python warnings dropped under --verbose 0 only."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with _console.output_filter(_console.CONVERTER_NOISE):
            os.write(2, b"before start()\n")  # not filtered yet: start() ends the start-up, then filters
            _console.start("keras-vit-export", verbose)
            os.write(2, MEASURED_CONVERTER_NOISE + b"".join(REAL_DURING_WORK[2:4]))
            os.write(1, b"exporting model_int8.tflite ...\n")
            warnings.warn("a deliberate Python warning")
        assert len(caught) == (verbose >= 1)  # ignored under --verbose 0 (no -W / PYTHONWARNINGS given)
    out, err = capfd.readouterr()
    expected = "before start()\n" + ("keras-vit-export: running on CPU" if verbose >= 1 else "")
    assert err.startswith(expected)
    assert len(DEVICE_LINE.findall(err)) == (verbose >= 1)
    shown = {2: MEASURED_CONVERTER_NOISE + b"".join(REAL_DURING_WORK[2:4]), 1: b"".join(REAL_DURING_WORK[2:4]),
             0: REAL_DURING_WORK[3]}[verbose]  # an error shows at every level
    assert err.endswith(shown.decode()), err
    assert out == ("" if verbose == 0 else "exporting model_int8.tflite ...\n")
    os.write(2, b"after\n")  # descriptors 1 and 2 are the terminal again
    os.write(1, b"after\n")
    assert capfd.readouterr() == ("after\n", "after\n")
    assert _console._filter is None
