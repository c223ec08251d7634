"""TFLite model metadata with tflite-support's metadata writers.

docs/traps.md: tflite-support 0.4.4 pins protobuf<4, so it is installed with
`--no-deps`, and only its metadata modules are imported (after TensorFlow);
its top-level package (the Task Library) does not import beside TF 2.21.
Its extension needs the Debian package `libusb-1.0-0`.
"""

import json
import os

from keras_vit import _files

# preprocess_input's scaling, (x - 127.5) / 127.5, as the metadata's normalization options.
NORM_MEAN = 127.5
NORM_STD = 127.5
LABEL_FILE = "labels.txt"


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
    None: "scores of the classes in labels.txt (the Keras model's outputs)",
}


def write_metadata(content, labels, include_preprocessing=False, scores=None, default_size=None):
    """Returns `content` (a .tflite flatbuffer) with image-classifier metadata.

    Built with tflite-support's `image_classifier.MetadataWriter` from its
    metadata-info classes, as `create_for_inference` does, plus the input
    size: input normalization mean 127.5, std 127.5 (the `preprocess_input`
    scaling; mean 0, std 1 when the scaling is inside the graph), RGB colour
    space, `ImageProperties.default_size` = the model's width and height,
    and `labels.txt` packed into the file as the output's label file.

    Args:
        content: bytes of a .tflite model with one (1, height, width, 3)
            image input and one (1, classes) output.
        labels: list of class names, one per model output.
        include_preprocessing: bool, whether the graph scales raw pixels.
        scores: what the output holds, recorded as its description:
            "probabilities", "logits", "outputs" or None (unstated).
        default_size: None, or (height, width) in pixels: the
            `default_size` of a file whose input height and width are
            dynamic (its input tensor reads (1, 1, 1, 3) until resized).

    Raises:
        ValueError: `labels` is empty or not a list of strings, or `scores`
            is not one of the above.
    """
    if not labels or not all(isinstance(label, str) for label in labels):
        raise ValueError(f"`labels` must be a non-empty list of class names. Received: labels={labels!r}")
    if scores not in SCORE_DESCRIPTIONS:
        raise ValueError(f"`scores` must be one of {list(SCORE_DESCRIPTIONS)}. Received: scores={scores!r}")
    image_classifier, _, metadata_info, writer_utils, schema = _modules()
    mean, std = (0.0, 1.0) if include_preprocessing else (NORM_MEAN, NORM_STD)
    buffer = bytearray(content)
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
        description=f"RGB image, {size_text}; (x - {mean}) / {std} is applied by the app",
        norm_mean=[mean],
        norm_std=[std],
        color_space_type=schema.ColorSpaceType.RGB,
        tensor_type=writer_utils.get_input_tensor_types(buffer)[0],
    )
    with _files.temporary_directory("keras_vit_labels_") as work:
        label_path = os.path.join(work, LABEL_FILE)
        with open(label_path, "w") as f:
            f.write("\n".join(labels) + "\n")
        output_md = metadata_info.ClassificationTensorMd(
            name=image_classifier.OUTPUT_NAME,
            description=SCORE_DESCRIPTIONS[scores],
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


def read_metadata(content_or_path):
    """Reads metadata back with tflite-support's `MetadataDisplayer`.

    Returns:
        A dict with `metadata` (the parsed metadata JSON), `labels` (from the
        packed label file, or None), and `associated_files`.
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
