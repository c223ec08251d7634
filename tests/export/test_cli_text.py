"""keras-vit-export's words: errors name flags, typos get a "did you mean", checks that need no data come first,
--help states every default, and a quantised file that fails its bar says what to try (export/_cli_text.py)."""

import importlib
import os
import re

import pytest

from export import __main__ as cli
from export import _cli_text
from export.tolerances import TOLERANCES

pytestmark = pytest.mark.export
pipeline = importlib.import_module("export.pipeline")


@pytest.fixture
def no_data(monkeypatch):
    """Makes reading the calibration data fail the test: what is checked with it was not checked first."""
    def load_data(*args, **kwargs):
        raise AssertionError("the data was read before a check that needs none")

    monkeypatch.setattr(pipeline, "load_data", load_data)


@pytest.mark.parametrize("flags,message", [
    (["--quantization", "float32,fp16"], "--quantization: unknown mode 'fp16'; did you mean 'float16'? Choose from "
                                         "float32, float16, dynamic_int8, int8, full_integer_int8, int16x8, "
                                         "weight_only_int8"),
    # TensorFlow's and NPU vendors' names of the full-integer file lead to it, not to the phone-CPU int8 (issue 45)
    (["--quantization", "uint8"], "--quantization: unknown mode 'uint8'; did you mean 'full_integer_int8'?"),
    (["--quantization", "full-int8"], "did you mean 'full_integer_int8'?"),
    (["--quantization", "int8-cpu"], "did you mean 'int8'?"),
    (["--quantization", "int8-dynamic"], "did you mean 'dynamic_int8'?"),
    (["--quantization", "fp32"], "did you mean 'float32'?"),
    (["--quantization", "flaot16"], "did you mean 'float16'?"),
    (["--formats", "tflit"], "--formats: unknown format 'tflit'; did you mean 'tflite'? Choose from saved_model, "
                             "tflite, onnx"),
    (["--onnx-quantization", "qdq"], "--onnx-quantization: unknown mode 'qdq'; did you mean 'int8'?"),
    (["--calibraton-data", "digits"], "unrecognized arguments: --calibraton-data digits; --calibraton-data: did you "
                                      "mean --calibration-data?"),
    (["--int8-io-type", "unit8"], "argument --int8-io-type: invalid choice: 'unit8'"),
    (["--labels", "missing.txt", "--calibration-data", "digits"], "labels file not found: 'missing.txt' (--labels)"),
    (["--calibration-data", "./photos_typo/"], "--calibration-data './photos_typo/': neither an existing folder nor "
                                               "a data set TFDS knows; give 'digits', an existing image folder or a "
                                               "TFDS name"),
    (["--opset", "11", "--calibration-data", "digits"], "--opset must be an int in [13, 18] (tf2onnx 1.17). "
                                                        "Received: --opset 11"),
    (["--quantization", "float16", "--int8-io-type", "uint8", "--calibration-data", "digits"],
     "--int8-io-type uint8 applies to the 'full_integer_int8' TFLite file, which is not requested"),
    (["--quantization", "float32,int8", "--int8-io-type", "uint8", "--calibration-data", "digits"],
     "--int8-io-type uint8 applies to the 'full_integer_int8' TFLite file, which is not requested"),
])
def test_bad_flags_name_the_flag_and_what_was_meant_before_the_data_is_read(trained_vit, tmp_path, capsys, no_data,
                                                                            flags, message):
    out = tmp_path / "export"
    with pytest.raises(SystemExit) as exit_info:
        cli.main([trained_vit[1], *flags, "--output-dir", str(out), "--no-latency"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err, err
    assert not re.search(r"\b(calibration_data|onnx_quantization|int8_io_type|output_dir|image_size)\b|`\w+`", err), err
    assert not out.exists()


def test_help_states_every_default():
    parser = cli.build_parser()
    missing = [a.option_strings[-1] for a in parser._actions if a.option_strings and a.option_strings != ["-h", "--help"]
               and "default" not in a.help and "(required)" not in a.help]
    assert missing == []
    text = " ".join(parser.format_help().split())
    assert "--int8-io-type {float32,int8,uint8} (default: float32)" in text
    assert "--output-dir OUTPUT_DIR (required)" in text and "--overwrite replace existing artifacts (default: off)" in text


def test_a_quantised_file_that_misses_its_bar_exits_1_and_says_what_to_try(trained_vit, tmp_path, capsys,
                                                                            monkeypatch):
    """int8 and int16x8 held to a bar no file meets (agreement >= 101%): they fail, the others land."""
    for mode in ("int8", "int16x8"):
        monkeypatch.setitem(TOLERANCES, mode, {"decisive_top1_agreement": 1.01})
    out = tmp_path / "export"
    with pytest.raises(SystemExit) as exit_info:
        cli.main([trained_vit[1], "--formats", "tflite", "--quantization", "float32,float16,int8,int16x8",
                  "--calibration-data", "digits", "--output-dir", str(out), "--no-latency", "--no-mediapipe"])
    assert exit_info.value.code == 1
    captured = capsys.readouterr()
    err = captured.err
    # issue 27: a mode that cannot be fast on a CPU says so in one line, before the export
    assert ("note: int16x8 is slow on a CPU (int16x8: XNNPACK has no int16 kernels, "
            "so a CPU runs every op on LiteRT's reference kernels); for a phone's CPU pick int8, dynamic_int8 or "
            "dynamic_int4") in captured.out.splitlines()
    assert re.search(r"model_int8.tflite: decisive_top1_agreement = [\d.]+ \(needs >= 1.01\) \| "
                     r"model_int16x8.tflite: decisive_top1_agreement = [\d.]+ \(needs >= 1.01\)", err), err
    tip = err.strip().splitlines()[-1]
    assert tip == ("keras-vit-export: what to try: train the model longer or on more data (a model whose decisions "
                   "are close flips more of them when quantised); calibrate on more or other images, like the ones "
                   "the model will classify (--calibration-data FOLDER); or leave int8, int16x8 out: --quantization "
                   "float32,float16"), tip
    assert sorted(os.listdir(out)) == ["labels.txt", "model_float16.tflite", "model_float32.tflite", "report.json"]


def _row(fmt, quantization, passed, failures=()):
    return {"format": fmt, "quantization": quantization, "passed": passed, "failures": list(failures)}


def test_modes_slow_on_a_cpu_are_named_in_one_line():
    from export.fast_path import FAST_PATH, slow_on_cpu
    from export.tflite import QUANTIZATIONS

    assert slow_on_cpu(["float32", "int8", "dynamic_int8", "dynamic_int4", "float16", "weight_only_int8"]) == ""
    line = slow_on_cpu(["int8", "weight_only_int4", "int16x8"])
    assert line.startswith("note: weight_only_int4, int16x8 are slow on a CPU (")
    assert "int8_mixed16: its int16 LayerNorm" in slow_on_cpu(["int8_mixed16"])
    assert "\n" not in line and "dynamic_int4 keeps them inside XNNPACK" in line
    assert {q for fmt, q in FAST_PATH if fmt == "tflite"} == set(QUANTIZATIONS)  # every mode has its label


def test_what_to_try_fits_what_failed():
    bar = ["decisive_top1_agreement = 0.9 (needs >= 0.99)"]
    assert _cli_text.what_to_try({"artifacts": [_row("tflite", "float32", True), _row("tflite", "int8", True)]}) == ""
    # a float32 file that fails is a fault, not a mode to tune
    assert _cli_text.what_to_try({"artifacts": [_row("onnx", "float32", False, ["relative_max_abs_diff = 1"])]}) == ""
    # float16 is not calibrated: no calibration tip
    assert _cli_text.what_to_try({"artifacts": [_row("tflite", "float32", True), _row("tflite", "float16", False, bar)]}) \
        == ("what to try: train the model longer or on more data (a model whose decisions are close flips more of "
            "them when quantised); or leave float16 out: --quantization float32")
    # a conversion that failed: only leaving the mode out helps; ONNX modes by their own flag
    report = {"artifacts": [_row("tflite", "full_integer_int8", False,
                                 ["the full_integer_int8 file is not integer-only"]),
                            _row("onnx", "float32", True), _row("onnx", "int8", False, bar)]}
    assert _cli_text.what_to_try(report) == (
        "what to try: train the model longer or on more data (a model whose decisions are close flips more of them "
        "when quantised); calibrate on more or other images, like the ones the model will classify "
        "(--calibration-data FOLDER); or leave full_integer_int8 and int8 (ONNX) out: --quantization float32 "
        "--onnx-quantization float32")


def test_what_to_try_files_an_app_opens_as_another_picture():
    """From a fresh-user review (issue 43): when MediaPipe or the --web page opened the verification files as
    other pictures (EXIF orientation, transparency), every .tflite file failed, float32 too, and the advice was to
    leave the quantised modes out: no mode changes how an app opens a file."""
    from export.app_files import _failure

    seen = _failure("MediaPipe", [("photos/a/1.jpg", "MediaPipe reads 12x20 pixels")], 4)
    report = {"artifacts": [_row("tflite", q, False, [seen]) for q in ("float32", "int8")]}
    tip = _cli_text.what_to_try(report)
    assert tip.startswith("what to try: save the verification files as apps open them: upright, with no EXIF")
    assert "--no-mediapipe" in tip and "docs/app_contract.md (Photos)" in tip and "--quantization" not in tip
    assert "transparency" not in tip and "transparency" not in seen  # only where a file has transparent pixels
    clear = _failure("The browser (the --web page)", [("p.png", "... (it has transparent pixels: the browser ...)")], 4)
    assert "(and as RGB without transparency)" in clear
    assert ", as RGB without transparency;" in _cli_text.what_to_try({"artifacts": [_row("tflite", "int8", False, [clear])]})


def test_what_to_try_an_untrained_model_and_few_verification_images():
    """From a fresh-user review: every file of an untrained model failed, float32 too, yet the advice was to leave
    int8 out; a folder's 29 held-out images made one flip fail the 97% bar, and nothing said so."""
    same = ["outputs are the same for every image (the Keras model's too: ...): nothing an app could decide on"]
    untrained = {"artifacts": [dict(_row("tflite", q, False, same), keras_constant_outputs=True)
                               for q in ("float32", "int8")]}
    assert _cli_text.what_to_try(untrained).startswith("what to try: train the model first")
    few = {"num_verification_images": 29, "calibration_data": "photos", "artifacts": [
        _row("tflite", "float32", True), _row("tflite", "int8", False, ["decisive_top1_agreement = 0.9655"])]}
    assert "verify on more images: 29 were held out (20% of a --calibration-data folder), so one flip costs 3.4 points" \
        in _cli_text.what_to_try(few)
    noise = {**few, "calibration_data": None}  # a fresh-user review (issue 44): no folder was given to hold out from
    assert ("verify on more images: 29 were seeded noise images (no --calibration-data: give a folder of real images)"
            in _cli_text.what_to_try(noise))
