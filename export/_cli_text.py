"""`keras-vit-export`'s own words: its flags for `export_all`'s parameters, TensorFlow-style aliases of its modes,
the checks that need no data, and what to try when a quantised file fails its bar (`keras_vit.common.cli_text` does the rest)."""

import os

from keras_vit.common import cli_text as _cli
from export.calibration import STABILITY_HALF
from export.modes import FLOAT32, FORMATS, aliases, names
from export.verify import decision_failure

# export_all's (and its helpers') parameters -> keras-vit-export's flags, for `keras_vit.common.cli_text.flag_names`
FLAGS = {
    "formats": "--formats", "format": "--formats", "quantization": "--quantization", "quantizations": "--quantization",
    "onnx_quantization": "--onnx-quantization", "calibration_data": "--calibration-data",
    "representative_data": "--calibration-data", "labels": "--labels", "output_dir": "--output-dir",
    "include_preprocessing": "--include-preprocessing", "int8_io_type": "--int8-io-type", "io_type": "--int8-io-type",
    "opset": "--opset", "batch_size": "--batch-size", "scores": "--scores", "image_size": "--image-size",
    "overwrite": "--overwrite", "profile": "--profile", "directory": "--calibration-data", "input_range": "--input-range",
    "batch_size=None": "--batch-size dynamic",
}
# Names other tools (TensorFlow's converter and docs, onnxruntime, ML Kit) give the modes, and common typos of kind:
# each mode's record (`export.modes`)
QUANTIZATION_ALIASES = aliases("tflite")
ONNX_QUANTIZATION_ALIASES = aliases("onnx")
FORMAT_ALIASES = {"savedmodel": "saved_model", "tf": "saved_model", "litert": "tflite", "lite": "tflite"}


def flag_names(error):
    """The text of an error from `export_all` or its helpers with keras-vit-export's flags for the parameters."""
    return _cli.flag_names(error, FLAGS)


def check_arguments(args, formats, quantizations, refused, onnx_quantizations):
    """The checks of keras-vit-export's arguments that need neither the model nor the data, in its own words.

    Args:
        args: the parsed `argparse.Namespace`.
        formats, quantizations, onnx_quantizations: the valid values of
            --formats, --quantization and --onnx-quantization.
        refused: {mode: reason} for --quantization (`export.tflite.REFUSED`).

    Raises:
        ValueError: an unknown value of --formats, --quantization or
            --onnx-quantization (with "did you mean"), an empty list, a
            --labels file that does not exist, a --calibration-data path
            that is no folder.
    """
    _cli.check_list(args.formats, formats, "--formats", "format", FORMAT_ALIASES)
    _cli.check_list(args.quantization, quantizations, "--quantization", "mode", QUANTIZATION_ALIASES, refused)
    _cli.check_list(args.onnx_quantization, onnx_quantizations, "--onnx-quantization", "mode",
                    ONNX_QUANTIZATION_ALIASES)
    if args.labels is not None and not os.path.isfile(args.labels):
        raise ValueError(f"labels file not found: {args.labels!r} (--labels)")
    data = args.calibration_data
    looks_like_path = data is not None and (data.startswith(("/", "./", "../", "~")) or data.endswith(os.sep))
    if looks_like_path and not os.path.isdir(os.path.expanduser(data)):  # no TFDS name looks like that
        raise ValueError(f"--calibration-data {data!r}: neither an existing folder nor a data set TFDS knows; give "
                         "'digits', an existing image folder or a TFDS name")


def _measured_causes(found, failed_tflite):
    """The tips for the causes `export.calibration.diagnose` measured, most telling first; [] when it found none."""
    tips = []
    if found.get("near_chance"):
        return [f"train the model first: its held-out accuracy is {found['keras_accuracy']:.1%}, near chance "
                f"({found['chance_accuracy']:.1%}), so its decisions are close everywhere and any rounding flips them"]
    if found.get("outlier_channels"):
        cpu = [m for m in names("tflite", activations="int8_matmuls") if m not in failed_tflite]
        npu = [m for m in names("tflite", activations="int8_int16") if m not in failed_tflite]
        fixes = [f"{m} (phone CPUs: float32 LayerNorms, int8 matrix products after the exact LayerNorm rewrite)"
                 for m in cpu] + [f"{m} (NPUs with int16 activations)" for m in npu]
        tips.append(f"the model has outlier channels after its LayerNorms (the widest {found['outlier_ratio']:.0f}x "
                    "the median one, export.reparameterize.outlier_ratio), which one int8 scale per tensor cannot hold"
                    + (f": use {' or '.join(fixes)}" if fixes else ""))
    count = found.get("calibration_images") or 0
    if found.get("unstable") or 0 < count < 2 * STABILITY_HALF:
        tips.append(f"calibrate on more images, like the ones the model will classify (--calibration-data FOLDER): "
                    f"{count} calibrated it" + (f", and {', '.join(found['unstable'])} changed with the half of them "
                                                "used" if found.get("unstable") else ""))
    return tips


def what_to_try(report):
    """One sentence naming what to try when quantised files failed verification, or "" when none did.

    Args:
        report: `export_all`'s report (`report.json`): each artifact's
            format, quantization, passed and failures.

    Returns:
        str, e.g. "what to try: train the model longer ...; calibrate on more
        or other images ... (--calibration-data FOLDER); or leave int8 out:
        --quantization float32,float16". The calibration tip comes for a
        calibrated mode that missed a decision bar; failed float32 files (a
        fault, not a mode to tune) add nothing.
    """
    rows = report.get("artifacts", [])
    seen = [f for r in rows for f in r["failures"] if " verification files as another picture than keras_vit.data" in f]
    if seen:  # export.app_files: an app opens the files otherwise, float32 included; no mode or calibration changes that
        clear = ", as RGB without transparency" if any("transparent pixels" in f for f in seen) else ""
        return ("what to try: save the verification files as apps open them: upright, with no EXIF orientation tag "
                f"(PIL's ImageOps.exif_transpose, then save){clear}; or leave the app's check out (--no-mediapipe, "
                "or no --web-check) and make the app read the files as docs/app_contract.md (Photos) says")
    constant = [r for r in rows if not r["passed"] and any(f.startswith("outputs are the same for every image")
                                                           for f in r["failures"])]
    if constant and all(r.get("keras_constant_outputs") for r in constant):  # the model itself, not a mode to tune
        return ("what to try: train the model first: its own outputs are the same for every image, so no file can "
                "decide anything")
    failed = [r for r in rows if not r["passed"] and r["quantization"] != FLOAT32]
    if not failed:
        return ""
    tips = []
    decisions = [r for r in failed if decision_failure(r)]
    found = report.get("quantization_diagnosis") or {}  # what the export measured (export.calibration.diagnose)
    measured = _measured_causes(found, [r["quantization"] for r in decisions if r["format"] == "tflite"])
    tips.extend(measured)
    if decisions and not measured:
        tips.append("train the model longer or on more data (a model whose decisions are close flips more of them "
                    "when quantised)")
    if not measured and any(FORMATS[r["format"]][r["quantization"]].calibrated for r in decisions
                            if r["format"] in FORMATS):
        tips.append("calibrate on more or other images, like the ones the model will classify "
                    "(--calibration-data FOLDER)")
    count = report.get("num_verification_images") or 0
    if decisions and 0 < count < 100:  # a folder's 20% held out: one flip is more than a bar's margin
        source = ("were held out (20% of a --calibration-data folder)" if report.get("calibration_data") else
                  "were seeded noise images (no --calibration-data: give a folder of real images)")
        tips.append(f"verify on more images: {count} {source}, so one flip costs {100 / count:.1f} points of "
                    "agreement")
    left_out, kept = [], []
    for fmt, flag in (("tflite", "--quantization"), ("onnx", "--onnx-quantization")):
        bad = list(dict.fromkeys(r["quantization"] for r in failed if r["format"] == fmt))
        if bad:
            keep = [r["quantization"] for r in rows if r["format"] == fmt and r["quantization"] not in bad]
            left_out.append(f"{', '.join(bad)}{' (ONNX)' if fmt == 'onnx' else ''}")
            kept.append(f"{flag} {','.join(keep or [FLOAT32])}")
    tips.append(f"leave {' and '.join(left_out)} out: {' '.join(kept)}")
    return "what to try: " + "; ".join(tips[:-1]) + ("; or " if len(tips) > 1 else "") + tips[-1]
