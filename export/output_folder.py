"""The files an export writes in its output folder, by name, and those an earlier export left there.

`artifact_file` names each artifact (`saved_model`, `model_<mode>.tflite`, `model*.onnx`, `_pixels` for files
that take raw pixels). `earlier_files` finds, for `--overwrite` into a folder that holds an earlier export,
the artifacts the new report does not list, so that `export_all` removes them: a folder's files are always the
ones its `report.json` names (issue 43: `model_dynamic_int8.tflite`, `model.onnx` and `saved_model` of model A
stayed beside model B's report).
"""

import json
import os

from export.onnx_quantization import ONNX_QUANTIZATIONS, onnx_file
from export.tflite import QUANTIZATIONS

FORMATS = ("saved_model", "tflite", "onnx")


def artifact_file(fmt, quantization="float32", pixels=False):
    """The final file name of an artifact inside the output folder.

    `pixels`: the export put the scaling of raw pixels into the graph
    (`include_preprocessing`): "_pixels" ends the name (`saved_model_pixels`,
    `model_float32_pixels.tflite`, `model_pixels.onnx`), so the file is not
    taken for the one that takes scaled images.
    """
    suffix = "_pixels" if pixels else ""
    if fmt == "saved_model":
        return "saved_model" + suffix
    if fmt == "onnx":
        return onnx_file(quantization).replace(".onnx", suffix + ".onnx")  # model.onnx, model_int8.onnx, ...
    return f"model_{quantization}{suffix}.tflite"


def manifest_file(path):
    """The calibration manifest beside a calibrated file (`export.calibration`): `model_int8.tflite` ->
    `model_int8.tflite.calibration.json` (a path gives a path)."""
    return f"{path}.calibration.json"


def earlier_files(output_dir, keep):
    """Names of the export files in `output_dir` that `keep` (the new report's artifact names) does not hold.

    An export file is any name `artifact_file` gives (every format, mode and `pixels`), a TFLite or ONNX file's
    calibration manifest (`manifest_file`), or an artifact that the folder's earlier `report.json` lists. The user's
    own other files are never named. Returns a sorted list.
    """
    if not os.path.isdir(output_dir):
        return []
    modes = {"saved_model": ["float32"], "tflite": QUANTIZATIONS, "onnx": ONNX_QUANTIZATIONS}
    names = {artifact_file(f, q, p) for f in FORMATS for q in modes[f] for p in (False, True)}
    names |= {manifest_file(artifact_file(f, q, p)) for f in ("tflite", "onnx") for q in modes[f] for p in (False, True)}
    try:
        with open(os.path.join(output_dir, "report.json")) as f:
            names |= {row["name"] for row in json.load(f).get("artifacts", []) if isinstance(row.get("name"), str)}
    except (OSError, ValueError, AttributeError, TypeError, KeyError):  # no report, or not one of ours
        pass
    names = {n for n in names if os.path.basename(n) == n}  # a name, never a path out of the folder
    return sorted(n for n in names - set(keep) if os.path.lexists(os.path.join(output_dir, n)))
