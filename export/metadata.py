"""TFLite model metadata with tflite-support's metadata writers.

docs/traps.md: tflite-support 0.4.4 pins protobuf<4, so it is installed with
`--no-deps`, and only its metadata modules are imported (after TensorFlow);
its top-level package (the Task Library) does not import beside TF 2.21.
Its extension needs the Debian package `libusb-1.0-0`.
"""

import json
import os

from keras_vit.common import files as _files
from export.scores import CLASSLESS, CLASSLESS_OUTPUTS, describe_output

# preprocess_input's scaling, (x - 127.5) / 127.5, as the metadata's normalization options.
NORM_MEAN = 127.5
NORM_STD = 127.5
LABEL_FILE = "labels.txt"


def normalization(input_range):
    """`(mean, std)` for the metadata's normalization options: (p - mean) / std maps pixels p in [0, 255] to
    `input_range` (`(lo, hi)`): 127.5, 127.5 for [-1, 1]; 0, 255 for [0, 1]; 0, 1 for [0, 255] (nothing to do)."""
    lo, hi = (float(v) for v in input_range)
    std = 255.0 / (hi - lo)
    return -lo * std + 0.0, std  # + 0.0: no -0.0 in the metadata


def app_preprocessing(input_range, dtype="float32"):
    """What an app does to RGB pixels p in [0, 255] before it feeds a file, in words (metadata, report, README).

    Args:
        input_range: `(lo, hi)`, the range the file's float input takes.
        dtype: the input tensor's dtype: "float32", "uint8" or "int8".
    """
    if dtype == "uint8":
        return "feed the uint8 RGB pixels as they are (the file's input quantisation holds the scaling)"
    if dtype == "int8":
        return "feed p - 128 as int8 (the file's input quantisation holds the rest of the scaling)"
    mean, std = normalization(input_range)
    if (mean, std) == (0.0, 1.0):
        return "feed the RGB pixels as float32 as they are, in [0, 255] (the scaling is inside the file)"
    if mean == 0.0:
        return f"feed p / {std:g} as float32, in [{input_range[0]:g}, {input_range[1]:g}]"
    return f"feed (p - {mean:g}) / {std:g} as float32, in [{input_range[0]:g}, {input_range[1]:g}]"


def _modules():
    import tensorflow  # noqa: F401  (must come first, docs/traps.md)
    from tensorflow_lite_support.metadata import metadata_schema_py_generated as schema
    from tensorflow_lite_support.metadata.python import metadata
    from tensorflow_lite_support.metadata.python.metadata_writers import image_classifier, metadata_info, writer_utils

    return image_classifier, metadata, metadata_info, writer_utils, schema


SCORE_DESCRIPTIONS = {
    "probabilities": "probabilities of the classes in labels.txt, in [0, 1] summing to 1 (softmax in the graph)",
    "logits": "logits of the classes in labels.txt (no softmax: the head's raw outputs)",
    "outputs": "the model's outputs (no softmax added: its head is not a Dense layer without activation)",
    "features": ("the feature vector (1, hidden_size): the backbone's pooled final state (the class token, or the "
                 "mean of the tokens), e.g. for MediaPipe's ImageEmbedder; no classes"),
    "tokens": ("the token sequence (1, tokens, hidden_size): the class token first (if the model has one), then one "
               "token per patch, row by row; no classes"),
    None: "scores of the classes in labels.txt (the Keras model's outputs)",
}


def write_metadata(content, labels, include_preprocessing=False, scores=None, default_size=None, input_range=None):
    """Returns `content` (a .tflite flatbuffer) with image-classifier metadata.

    Built with tflite-support's `image_classifier.MetadataWriter` from its
    metadata-info classes, as `create_for_inference` does, plus the input
    size: input normalization options that map pixels in [0, 255] to the
    range the file's input takes (`normalization`: mean 127.5, std 127.5 for
    [-1, 1], the `preprocess_input` scaling; mean 0, std 1 when the file
    takes raw pixels), RGB colour space, `ImageProperties.default_size` =
    the model's width and height, and `labels.txt` packed into the file as
    the output's label file. The input's description says what the app
    feeds (`app_preprocessing`): for a uint8 or int8 input, the pixels as
    they are (MediaPipe applies no normalization to them).

    A file whose output is a token sequence (`scores="tokens"`, `labels`
    None) or a feature vector (`scores="features"`) gets the same input
    metadata and an output described as the sequence or vector, with no
    label file (tflite-support's generic
    `metadata_writer.MetadataWriter`): MediaPipe's ImageClassifier does not
    take it, an app that reads features does.

    Args:
        content: bytes of a .tflite model with one (1, height, width, 3)
            image input and one (1, classes) output (or (1, tokens,
            hidden_size) with `scores="tokens"`, (1, hidden_size) with
            `scores="features"`).
        labels: list of class names, one per model output; None with
            `scores="tokens"` or `"features"`.
        include_preprocessing: bool, whether the graph scales raw pixels
            (the same as `input_range=(0, 255)`).
        scores: what the output holds, recorded as its description:
            "probabilities", "logits", "outputs", "features", "tokens" or
            None (unstated).
        default_size: None, or (height, width) in pixels: the
            `default_size` of a file whose input height and width are
            dynamic (its input tensor reads (1, 1, 1, 3) until resized).
        input_range: None ([0, 255] with `include_preprocessing`, else
            [-1, 1]) or the `(lo, hi)` range the file's float input takes.

    Raises:
        ValueError: `labels` is empty or not a list of strings, or `scores`
            is not one of the above.
    """
    if scores not in SCORE_DESCRIPTIONS:
        raise ValueError(f"`scores` must be one of {list(SCORE_DESCRIPTIONS)}. Received: scores={scores!r}")
    classless = scores in CLASSLESS
    if classless and labels is not None:
        what = describe_output(scores, shape=False)
        raise ValueError(f"{what} has no classes: `labels` must be None. Received: labels={labels!r}")
    if not classless and (not labels or not all(isinstance(label, str) for label in labels)):
        raise ValueError(f"`labels` must be a non-empty list of class names. Received: labels={labels!r}")
    image_classifier, _, metadata_info, writer_utils, schema = _modules()
    if input_range is None:
        input_range = (0.0, 255.0) if include_preprocessing else (-1.0, 1.0)
    mean, std = normalization(input_range)
    buffer = bytearray(content)
    dtype = _dtype_name(writer_utils.get_input_tensor_types(buffer)[0], writer_utils._schema_fb)
    _, height, width, _ = writer_utils.get_input_tensor_shape(buffer, 0)
    size_text = f"{width}x{height} pixels"
    if default_size is not None:
        height, width = default_size
        size_text = f"any height and width the model takes (resize the input tensor), {width}x{height} pixels by default"

    class SizedImageMd(metadata_info.InputImageTensorMd):
        def create_metadata(self):
            tensor = super().create_metadata()
            size = schema.ImageSizeT()
            size.width, size.height = int(width), int(height)
            tensor.content.contentProperties.defaultSize = size
            return tensor

    input_md = SizedImageMd(
        name=image_classifier.INPUT_NAME,
        description=f"RGB image, {size_text}; the app's pixels p in [0, 255]: {app_preprocessing(input_range, dtype)}",
        norm_mean=[mean],
        norm_std=[std],
        color_space_type=schema.ColorSpaceType.RGB,
        tensor_type=writer_utils.get_input_tensor_types(buffer)[0],
    )
    if classless:
        from tensorflow_lite_support.metadata.python.metadata_writers import metadata_writer

        output_md = metadata_info.TensorMd(name=scores, description=SCORE_DESCRIPTIONS[scores]
                                           + _integer_output_note(buffer, writer_utils))
        what = CLASSLESS_OUTPUTS[scores][0]
        general_md = metadata_info.GeneralMd(
            name="keras_vit Vision Transformer backbone",
            description=f"Image to {what} (arXiv:2010.11929) exported by keras_vit")
        return metadata_writer.MetadataWriter.create_from_metadata_info(
            buffer, general_md=general_md, input_md=[input_md], output_md=[output_md]).populate()
    with _files.temporary_directory("keras_vit_labels_") as work:
        label_path = os.path.join(work, LABEL_FILE)
        with open(label_path, "w") as f:
            f.write("\n".join(labels) + "\n")
        output_md = metadata_info.ClassificationTensorMd(
            name=image_classifier.OUTPUT_NAME,
            description=SCORE_DESCRIPTIONS[scores] + _integer_output_note(buffer, writer_utils),
            label_files=[metadata_info.LabelFileMd(file_path=label_path)],
            tensor_type=writer_utils.get_output_tensor_types(buffer)[0],
        )
        general_md = metadata_info.GeneralMd(
            name="keras_vit Vision Transformer", description="Image classifier (arXiv:2010.11929) exported by keras_vit"
        )
        writer = image_classifier.MetadataWriter.create_from_metadata_info(
            buffer, general_md=general_md, input_md=input_md, output_md=output_md
        )
        return writer.populate()


def _integer_output_note(buffer, writer_utils):
    """"; as uint8 (int8): score = (q - zero_point) * scale" for a file whose output is an integer tensor, else ""."""
    dtype = _dtype_name(writer_utils.get_output_tensor_types(buffer)[0], writer_utils._schema_fb)
    if dtype == "float32":
        return ""
    from ai_edge_litert.interpreter import Interpreter

    scale, zero = Interpreter(model_content=bytes(buffer)).get_output_details()[0]["quantization"]
    return f"; as {dtype}: score = (q - {zero}) * {scale:.6g} (the output's quantisation)"


def _dtype_name(tensor_type, schema_fb):
    """"float32", "uint8" or "int8" for a TFLite schema tensor type (`schema_fb`: tflite-support's TFLite schema)."""
    names = {schema_fb.TensorType.UINT8: "uint8", schema_fb.TensorType.INT8: "int8"}
    return names.get(tensor_type, "float32")


def read_metadata(content_or_path):
    """Reads a `.tflite` file's metadata back with tflite-support's `MetadataDisplayer`.

    What an app reads: the labels, the input's normalization options and
    description (what to feed), the output's description (probabilities or
    logits), the default image size.

    Args:
        content_or_path: the path of a `.tflite` file, or its bytes.

    Returns:
        A dict with `metadata` (the parsed metadata JSON, tflite-support's
        layout: `subgraph_metadata[0]["input_tensor_metadata"][0]` holds the
        input's `description` and its `process_units` normalization `mean`
        and `std`, `...["output_tensor_metadata"][0]` the output's),
        `labels` (from the packed label file, or None), and
        `associated_files`.

    Raises:
        ValueError: the file holds no metadata (tflite-support's message).

    Example (`runs/demo/export`, from `make demo`)::

        from export.metadata import read_metadata
        info = read_metadata("runs/demo/export/model_float32.tflite")
        info["labels"][:3]   # ['0', '1', '2']
        info["metadata"]["subgraph_metadata"][0]["input_tensor_metadata"][0]["description"]
    """
    _, metadata, _, _, _ = _modules()
    if isinstance(content_or_path, (str, os.PathLike)):
        displayer = metadata.MetadataDisplayer.with_model_file(str(content_or_path))
    else:
        displayer = metadata.MetadataDisplayer.with_model_buffer(bytes(content_or_path))
    files = displayer.get_packed_associated_file_list()
    labels = None
    if LABEL_FILE in files:
        labels = displayer.get_associated_file_buffer(LABEL_FILE).decode().splitlines()
    return {"metadata": json.loads(displayer.get_metadata_json()), "labels": labels, "associated_files": files}
