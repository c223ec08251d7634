"""The command lines' words (keras_vit/common/cli_text.py): flags for parameters, "did you mean", every default in --help."""

import re

import pytest

from keras_vit.common import cli_text as _cli

QUANTIZATIONS = ("float32", "float16", "dynamic_int8", "int8", "full_integer_int8", "int16x8", "weight_only_int8",
                 "weight_only_int4", "dynamic_int4")


@pytest.mark.parametrize("typed,meant", [
    ("fp16", ["float16"]), ("FP32", ["float32"]), ("int8-dynamic", ["dynamic_int8"]), ("Dynamic-Int8", ["dynamic_int8"]),
    ("flaot16", ["float16"]), ("int4", ["dynamic_int4", "weight_only_int4"]), ("16x8", ["int16x8"]), ("bogus", []),
    ("uint8", ["full_integer_int8"]), ("full-int8", ["full_integer_int8"]),
])
def test_did_you_mean_with_aliases(typed, meant):
    from export._cli_text import QUANTIZATION_ALIASES

    assert _cli.did_you_mean(typed, QUANTIZATIONS, QUANTIZATION_ALIASES) == meant


def test_check_list_names_the_flag_and_what_was_meant():
    assert _cli.check_list("tflite, onnx,tflite", ("saved_model", "tflite", "onnx"), "--formats") == ["tflite", "onnx"]
    with pytest.raises(ValueError) as e:
        _cli.check_list("tflit", ("saved_model", "tflite", "onnx"), "--formats", "format")
    assert str(e.value) == "--formats: unknown format 'tflit'; did you mean 'tflite'? Choose from saved_model, tflite, onnx"
    with pytest.raises(ValueError, match=r"^--formats: unknown format 'coreml'; choose from saved_model, tflite, onnx$"):
        _cli.check_list("tflite,coreml", ("saved_model", "tflite", "onnx"), "--formats", "format")
    with pytest.raises(ValueError, match=r"^--quantization is empty; choose from a, b$"):
        _cli.check_list(" , ", ("a", "b"), "--quantization")
    with pytest.raises(ValueError, match=r"^--quantization 16x8 is refused: it is called b here\. Choose from a, b$"):
        _cli.check_list("16x8", ("a", "b"), "--quantization", refused={"16x8": "it is called b here"})


FLAGS = {"opset": "--opset", "calibration_data": "--calibration-data", "overwrite": "--overwrite",
         "image_size": "--image-size", "int8_io_type": "--int8-io-type", "quantization": "--quantization",
         "onnx_quantization": "--onnx-quantization", "labels": "--labels", "output_dir": "--output-dir",
         "format": "--formats", "include_top=False": "--no-top", "output": "OUTPUT"}


@pytest.mark.parametrize("message,expected", [
    ("`opset` must be an int in [13, 18] (tf2onnx 1.17). Received: opset=11",
     "--opset must be an int in [13, 18] (tf2onnx 1.17). Received: --opset 11"),
    ("calibration_data='photos/' (--calibration-data): an image folder is split into calibration images",
     "--calibration-data photos/: an image folder is split into calibration images"),
    ("out/model.onnx exists; pass overwrite=True (--overwrite) to replace it",
     "out/model.onnx exists; pass --overwrite to replace it"),
    ("image_size (--image-size) 24,24 resizes a keras_vit ViT itself", "--image-size 24,24 resizes a keras_vit ViT itself"),
    ("quantization='int8' with image_size='dynamic' is refused; export it at a fixed image_size (--image-size H,W)",
     "--quantization int8 with --image-size dynamic is refused; export it at a fixed --image-size H,W"),
    ("int8_io_type='uint8' applies to the 'full_integer_int8' TFLite file",
     "--int8-io-type uint8 applies to the 'full_integer_int8' TFLite file"),
    ("unknown onnx_quantization 'float16'", "unknown --onnx-quantization float16"),
    ("output_dir 'a b' is a file, not a folder", "--output-dir 'a b' is a file, not a folder"),
    ("pass real images (calibration_data / --calibration-data)", "pass real images (--calibration-data)"),
    ("the data set has 10 classes; pass labels", "the data set has 10 classes; pass --labels"),
    ("head='load' but the model has no head (include_top=False)", "head='load' but the model has no head (--no-top)"),
    ("`output` must end in '.keras'. Received: output='a.h5'", "OUTPUT must end in '.keras'. Received: 'a.h5'"),
    # prose that merely holds a parameter's name is left alone
    ("unknown format 'coreml'; the labels of a format", "unknown format 'coreml'; the labels of a format"),
    ("a model of image_size=(16, 24) is not", "a model of --image-size 16,24 is not"),
])
def test_flag_names(message, expected):
    assert _cli.flag_names(message, FLAGS) == expected


def _parser():
    parser = _cli.ArgumentParser(prog="prog")
    parser.add_argument("--calibration-data", default=None, help="images (default: noise)")
    parser.add_argument("--scores", choices=["probabilities", "logits"], default="probabilities")
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--overwrite", action="store_true", help="replace")
    parser.add_argument("--no-latency", action="store_false", dest="latency")
    parser.add_argument("--opset", type=int, default=17, help="ONNX opset")
    parser.add_argument("--labels", default=None)
    return _cli.complete_help(parser)


@pytest.mark.parametrize("argv,said", [
    (["--output-dir", "o", "--calibraton-data", "x"],
     "unrecognized arguments: --calibraton-data x; --calibraton-data: did you mean --calibration-data?"),
    (["--output-dir", "o", "--scores", "logit"],
     "argument --scores: invalid choice: 'logit' (choose from 'probabilities', 'logits'); did you mean 'logits'?"),
    (["--output-dir", "o", "--zzz"], "unrecognized arguments: --zzz (usage: prog --help)\n"),  # nothing is close
])
def test_argparse_errors_say_what_was_meant(argv, said, capsys):
    with pytest.raises(SystemExit) as e:
        _parser().parse_args(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert said in err and "usage: prog [" not in err and err.count("\n") == 1  # one line, not argparse's usage block


def test_complete_help_states_every_default():
    helps = {a.option_strings[-1]: a.help for a in _parser()._actions if a.option_strings}
    assert helps == {"--help": "show this help message and exit", "--calibration-data": "images (default: noise)",
                     "--scores": "(default: probabilities)", "--output-dir": "(required)",
                     "--overwrite": "replace (default: off)", "--no-latency": "(default: on)",
                     "--opset": "ONNX opset (default: 17)", "--labels": "(default: none)"}


def test_keras_vit_convert_help_states_every_default(capsys):
    from keras_vit.weights.convert import main

    with pytest.raises(SystemExit):
        main(["--help"])
    entries = re.split(r"\n  (?=-)", capsys.readouterr().out.split("options:", 1)[1])[1:]  # one per flag
    entries = {e.split()[0].rstrip(","): " ".join(e.split()) for e in entries}
    assert sorted(entries) == ["--antialias", "--classes", "--head", "--image-size", "--interpolation", "--no-top",
                               "--num-heads", "--overwrite", "--verbose", "-h"]
    assert [flag for flag, text in entries.items() if "default" not in text and flag != "-h"] == []


def test_keras_vit_convert_checks_classes_before_reading_the_checkpoint(tmp_path, capsys):
    from keras_vit.weights.convert import main

    assert main([str(tmp_path / "missing.npz"), str(tmp_path / "a.keras"), "--classes", "0"]) == 2
    assert "--classes must be a positive int. Received: --classes 0" in capsys.readouterr().err
