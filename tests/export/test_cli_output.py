"""What keras-vit-export prints: no converter noise, every real warning, everything under --verbose 2, only errors
under --verbose 0 (keras_vit/common/console.py, `output_filter`)."""

import os
import re
import subprocess
import sys

import keras
import numpy as np
import pytest

pytestmark = pytest.mark.export

# keras-vit-export as pip's console script runs it, with a deliberate Python warning, C++ warning and C++ error
# written to fd 2 in the middle of the work (on the first TFLite conversion): the user must see each of them.
EXPORT_WITH_WARNINGS = """
import os, sys, warnings
sys.argv[0] = "keras-vit-export"
import export.tflite
from export.__main__ import main

convert, said = export.tflite.convert, []

def convert_and_warn(*args, **kwargs):
    if not said:
        said.append(1)
        warnings.warn("a deliberate Python warning")
        os.write(2, b"W0000 00:00:1796057586.734741    9423 deliberate.cc:1] a deliberate C++ warning\\n")
        os.write(2, b"E0000 00:00:1796057586.734741    9423 deliberate.cc:2] a deliberate C++ error\\n")
    return convert(*args, **kwargs)

export.tflite.convert = convert_and_warn
sys.exit(main())
"""
# What the export printed before the filter (measured, TF 2.21): one marker per kind of line.
NOISE = ["Ignored output_format.", "Ignored drop_control_dependency.", "fully_quantize: 0, inference_type:",
         "Skipping runtime version metadata", "INFO: Created TensorFlow Lite XNNPACK delegate for CPU.",
         "has an unaligned buffer", "files for training.", "files for validation.",
         "absl::InitializeLog", "oneDNN custom operations", "Could not find cuda drivers"]
WARNINGS = ["UserWarning: a deliberate Python warning", "deliberate.cc:1] a deliberate C++ warning"]
ERROR = "deliberate.cc:2] a deliberate C++ error"


@pytest.fixture(scope="module")
def image_folder(trained_vit, tmp_path_factory):
    """The 96 held-out digits as a folder of PNG files, one sub-folder per class."""
    folder = tmp_path_factory.mktemp("digits_folder")
    for i, (image, label) in enumerate(zip(trained_vit[2], trained_vit[3])):
        os.makedirs(folder / str(label), exist_ok=True)
        keras.utils.save_img(str(folder / str(label) / f"{i}.png"), np.round((image + 1) * 127.5).astype("uint8"))
    return str(folder)


def _export(trained_vit, image_folder, out, *flags):
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}  # as a user runs it
    run = subprocess.run([sys.executable, "-c", EXPORT_WITH_WARNINGS, trained_vit[1], "--formats", "tflite",
                          # full_integer_int8: TensorFlow's quantising converter, whose lines (fully_quantize)
                          # the filter hides; int8 and int16x8: LiteRT Quantizer's
                          "--quantization", "float32,int8,full_integer_int8,int16x8",
                          "--calibration-data", image_folder,
                          "--output-dir", str(out), "--no-latency", *flags],
                         capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stdout, run.stderr


def test_no_converter_noise_and_every_real_warning(trained_vit, image_folder, tmp_path):
    out, err = _export(trained_vit, image_folder, tmp_path / "export")
    assert [m for m in NOISE if m in out + err] == [], (out + err)[-3000:]
    assert [m for m in WARNINGS + [ERROR] if m not in err] == [], err[-3000:]
    assert len(re.findall(r"^keras-vit-export: running on ", err, re.MULTILINE)) == 1
    assert "exporting model_int16x8.tflite ..." in out and "| model_int8.tflite |" in out
    assert sorted(os.listdir(tmp_path / "export")) == [
        "labels.txt", "model_float32.tflite", "model_full_integer_int8.tflite",
        "model_full_integer_int8.tflite.calibration.json", "model_int16x8.tflite",
        "model_int16x8.tflite.calibration.json", "model_int8.tflite", "model_int8.tflite.calibration.json",
        "report.json"]


def test_verbose_2_shows_everything(trained_vit, image_folder, tmp_path):
    out, err = _export(trained_vit, image_folder, tmp_path / "export", "--verbose", "2")
    shown = NOISE[:6] + ["absl::InitializeLog"]  # the converter's and LiteRT's lines, TensorFlow's start-up
    assert [m for m in shown if m not in err] == [], err[-3000:]
    assert [m for m in WARNINGS + [ERROR] if m not in err] == []


def test_verbose_0_shows_errors_only(trained_vit, image_folder, tmp_path):
    out, err = _export(trained_vit, image_folder, tmp_path / "export", "--verbose", "0")
    assert out == ""
    assert err.splitlines() == [f"E0000 00:00:1796057586.734741    9423 {ERROR}"], err[-3000:]
    assert os.path.exists(tmp_path / "export" / "report.json")
