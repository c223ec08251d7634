"""TFLite model metadata with tflite-support's metadata writers.

TRAPS.md: tflite-support 0.4.4 pins protobuf<4, so it is installed with
`--no-deps`, and only its metadata modules are imported (after TensorFlow);
its top-level package (the Task Library) does not import beside TF 2.21.
Its extension needs the Debian package `libusb-1.0-0`.
"""

import json
import os
import tempfile

# preprocess_input's scaling, (x - 127.5) / 127.5, as the metadata's normalization options.
NORM_MEAN = 127.5
NORM_STD = 127.5
LABEL_FILE = "labels.txt"


def _modules():
    import tensorflow  # noqa: F401  (must come first, TRAPS.md)
    from tensorflow_lite_support.metadata.python import metadata
    from tensorflow_lite_support.metadata.python.metadata_writers import image_classifier

    return image_classifier, metadata


def write_metadata(content, labels, include_preprocessing=False):
    """Returns `content` (a .tflite flatbuffer) with image-classifier metadata.

    Written with `image_classifier.MetadataWriter.create_for_inference`:
    input normalization mean 127.5, std 127.5 (the `preprocess_input`
    scaling; mean 0, std 1 when the scaling is inside the graph), the input
    size taken from the model, and `labels.txt` packed into the file.

    Args:
        content: bytes of a .tflite model with one image input.
        labels: list of class names, one per model output.
        include_preprocessing: bool, whether the graph scales raw pixels.

    Raises:
        ValueError: `labels` is empty or not a list of strings.
    """
    if not labels or not all(isinstance(label, str) for label in labels):
        raise ValueError(f"`labels` must be a non-empty list of class names. Received: labels={labels!r}")
    image_classifier, _ = _modules()
    mean, std = (0.0, 1.0) if include_preprocessing else (NORM_MEAN, NORM_STD)
    with tempfile.TemporaryDirectory(prefix="keras_vit_labels_") as work:
        label_path = os.path.join(work, LABEL_FILE)
        with open(label_path, "w") as f:
            f.write("\n".join(labels) + "\n")
        writer = image_classifier.MetadataWriter.create_for_inference(
            bytes(content), input_norm_mean=[mean], input_norm_std=[std], label_file_paths=[label_path]
        )
        return writer.populate()


def read_metadata(content_or_path):
    """Reads metadata back with tflite-support's `MetadataDisplayer`.

    Returns:
        A dict with `metadata` (the parsed metadata JSON), `labels` (from the
        packed label file, or None), and `associated_files`.
    """
    _, metadata = _modules()
    if isinstance(content_or_path, (str, os.PathLike)):
        displayer = metadata.MetadataDisplayer.with_model_file(str(content_or_path))
    else:
        displayer = metadata.MetadataDisplayer.with_model_buffer(bytes(content_or_path))
    files = displayer.get_packed_associated_file_list()
    labels = None
    if LABEL_FILE in files:
        labels = displayer.get_associated_file_buffer(LABEL_FILE).decode().splitlines()
    return {"metadata": json.loads(displayer.get_metadata_json()), "labels": labels, "associated_files": files}
