"""One export, checked and parsed once: `make_plan` turns `export_all`'s (and `keras-vit-export`'s) arguments into a
frozen `ExportPlan`, which every later step reads instead of relaying arguments.

Every check that needs neither a conversion nor the data runs here, before any work: the formats and modes
(`export.modes`), the int8 input/output type, the opset, the batch, the input range, the image size (parsed once,
against the model), the labels file (read once), the browser runtime, the output folder and every file the export
would write or replace.
"""

import dataclasses
import os

from keras_vit.common import files as _files
from export.contract import read_labels_file
from export.input_range import parse_input_range
from export.modes import FLOAT32, ONNX, TFLITE
from export.onnx import check_opset
from export.onnx_fusion import check_fusion
from export.onnx_quantization import ONNX_QUANTIZATIONS
from export.output_folder import FORMATS, artifact_file, earlier_files
from export.sizes import parse_image_size
from export.tflite import IO_TYPES, QUANTIZATIONS, check_dynamic_size_quantization, check_quantization
from export.web_check import check_available as check_web_available


@dataclasses.dataclass(frozen=True)
class ExportPlan:
    """What one export makes, from what, and how: `make_plan`'s result, read by `export.pipeline`.

    Attributes:
        model: the Keras model as given (`export.pipeline` resizes it to `image_size` when that differs).
        output_dir: str, the folder the artifacts, labels.txt and report.json land in.
        image_size: None (the model's own), a `(height, width)` tuple of pixels, or "dynamic" (.tflite files of
            dynamic height and width): `export.sizes.parse_image_size`'s result.
        formats: tuple of "saved_model", "tflite", "onnx".
        tflite_modes, onnx_modes: tuples of `export.modes` names (empty for a format not asked for).
        artifacts: `((format, mode), ...)` in the order they are made; the SavedModel's mode is "float32".
        targets: the final path of each artifact, in the same order.
        calibration_data: as given: "digits", an image folder, a TFDS name, an array, a tf.data pipeline or None.
        labels: None, or the class names the files are to carry (a --labels file, read once).
        include_preprocessing: bool, artifacts take raw pixels in [0, 255].
        int8_io_type: "float32", "int8" or "uint8": the input and output type of the modes that take it.
        opset: int, the ONNX opset.
        overwrite, measure_latency, profile, mediapipe, web_check: bool.
        batch_size: 1 or None (a dynamic batch) for .tflite files.
        scores: "probabilities" or "logits".
        input_range: None (read from the model) or the `(lo, hi)` pixel range the model takes.
    """

    model: object
    output_dir: str
    image_size: object
    formats: tuple
    tflite_modes: tuple
    onnx_modes: tuple
    artifacts: tuple
    targets: tuple
    calibration_data: object = None
    labels: tuple = None
    include_preprocessing: bool = False
    int8_io_type: str = FLOAT32
    opset: int = 17
    overwrite: bool = False
    measure_latency: bool = True
    profile: bool = False
    batch_size: object = 1
    scores: str = "probabilities"
    mediapipe: bool = True
    web_check: bool = False
    input_range: tuple = None

    def io_type(self, mode):
        """The input and output type of the .tflite file of `mode`: `int8_io_type` where the mode takes it."""
        return self.int8_io_type if self.int8_io_type in TFLITE[mode].io_types else FLOAT32

    @property
    def report_path(self):
        return os.path.join(self.output_dir, "report.json")

    @property
    def labels_path(self):
        return os.path.join(self.output_dir, "labels.txt")


def parse_list(value, allowed, name):
    """Splits "a,b" (or takes a list) and checks each item is in `allowed`; returns the items, each once, in order.

    Raises:
        ValueError: an empty list or an item outside `allowed`, naming it (a refused TFLite mode with its reason).
    """
    items = [v.strip() for v in value.split(",")] if isinstance(value, str) else list(value)
    items = [v for v in items if v]
    if not items:
        raise ValueError(f"`{name}` is empty; choose from {', '.join(allowed)}")
    for item in items:
        if item not in allowed:
            if name == "quantization":
                check_quantization(item)
            raise ValueError(f"unknown {name} {item!r}; choose from {', '.join(allowed)}")
    return list(dict.fromkeys(items))


def make_plan(model, output_dir, *, formats, quantizations, calibration_data, labels, include_preprocessing,
              int8_io_type, opset, overwrite, measure_latency, profile, batch_size, scores, mediapipe,
              onnx_quantization, image_size, input_range, web_check, flags=None):
    """Checks `export_all`'s arguments against `model` and returns the `ExportPlan`; nothing is written.

    Args: those of `export.pipeline.export_all` (which holds their defaults and calls this first), and
        flags: None, or {parameter: the name messages give it}, e.g. keras-vit-export's flags
            (`export._cli_text.FLAGS`: "image_size" -> "--image-size").

    Returns:
        An `ExportPlan`.

    Raises:
        ValueError: an unknown format or mode, an int8 I/O type without a file that takes it, an opset or batch
            size out of range, an output path that is a file, a bad `input_range` or `image_size` (names it and the
            patch size), "dynamic" with a TFLite mode that cannot keep a dynamic size, a labels file that does not
            exist or has a blank line.
        export.web_check.WebCheckUnavailable: `web_check` without the browser runtime.
        FileExistsError: an artifact, labels.txt or report.json exists, or an earlier export's artifact that this
            one does not make, and `overwrite` is False.
    """
    formats = tuple(parse_list(formats, FORMATS, "format"))
    tflite_modes = tuple(parse_list(quantizations, QUANTIZATIONS, "quantization")) if "tflite" in formats else ()
    onnx_modes = tuple(parse_list(onnx_quantization, ONNX_QUANTIZATIONS, "onnx_quantization")) \
        if "onnx" in formats else ()
    if int8_io_type not in IO_TYPES:
        raise ValueError(f"`int8_io_type` must be one of {', '.join(IO_TYPES)}. Received: int8_io_type={int8_io_type!r}")
    takers = [m for m in TFLITE if int8_io_type in TFLITE[m].io_types]
    for q in tflite_modes:
        check_quantization(q, int8_io_type if q in takers else FLOAT32)
    if "onnx" in formats:
        check_opset(opset)
    if any(ONNX[q].converter == "onnxruntime_transformers" for q in onnx_modes):
        check_fusion(opset)
    if int8_io_type != FLOAT32 and not set(takers) & set(tflite_modes):
        raise ValueError(f"int8_io_type={int8_io_type!r} applies to the {' or '.join(map(repr, takers))} TFLite file, "
                         "which is not requested")
    if batch_size not in (None, 1):
        raise ValueError(f"`batch_size` must be 1 or None (dynamic). Received: batch_size={batch_size!r}")
    for q in tflite_modes if batch_size is None else ():
        if not TFLITE[q].dynamic_batch:  # refused before any conversion, not when its turn comes
            raise ValueError(f"quantization {q!r} needs a .tflite batch of 1: {TFLITE[q].batch_refused}. Received: a "
                             "dynamic batch (batch_size=None)")
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise ValueError(f"output_dir {output_dir!r} is a file, not a folder")
    _files.check_writable_folder(output_dir, "output_dir")
    flags = flags or {}
    input_range = parse_input_range(input_range, flags.get("input_range", "input_range (--input-range)"))
    size = parse_image_size(image_size, model, argument=flags.get("image_size", "image_size"))
    if isinstance(labels, (str, os.PathLike)):
        labels = read_labels_file(labels)
    if web_check:
        check_web_available()
    if size == "dynamic":
        for q in tflite_modes:
            check_dynamic_size_quantization(q)
    modes = {"tflite": tflite_modes, "onnx": onnx_modes}
    artifacts = tuple((f, q) for f in formats for q in modes.get(f, [FLOAT32]))
    targets = tuple(os.path.join(output_dir, artifact_file(f, q, include_preprocessing)) for f, q in artifacts)
    for path in [*targets, os.path.join(output_dir, "report.json"), os.path.join(output_dir, "labels.txt")]:
        _files.check_target(path, overwrite)
    earlier = earlier_files(output_dir, [os.path.basename(t) for t in targets])
    if earlier and not overwrite:
        raise FileExistsError(f"{output_dir} holds an earlier export's {', '.join(earlier)}, which this export would "
                              "not replace; pass overwrite=True (--overwrite) to remove them, or give another folder")
    return ExportPlan(
        model=model, output_dir=output_dir, image_size=size, formats=formats, tflite_modes=tflite_modes,
        onnx_modes=onnx_modes, artifacts=artifacts, targets=targets, calibration_data=calibration_data,
        labels=None if labels is None else tuple(labels), include_preprocessing=include_preprocessing,
        int8_io_type=int8_io_type, opset=opset, overwrite=overwrite, measure_latency=measure_latency, profile=profile,
        batch_size=batch_size, scores=scores, mediapipe=mediapipe, web_check=web_check, input_range=input_range,
    )
