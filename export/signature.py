"""The one serving function every format is converted from.

Input `images`: float32 `(batch, height, width, channels)`, in [-1, 1]
(`keras_vit.preprocess_input` scaling), or raw pixels in [0, 255] when
`include_preprocessing=True`, in which case the graph computes
x / 127.5 - 1 first. Output `predictions`: float32 `(batch, classes)`, what
the Keras model outputs (logits, or probabilities with a softmax head).
"""

import os
import zipfile

INPUT_NAME = "images"
OUTPUT_NAME = "predictions"


def image_shape(model):
    """Returns (height, width, channels) of a model's image input.

    Raises:
        ValueError: the model does not take one 4-D image input of known
            height, width and channels.
    """
    shape = model.input_shape
    if isinstance(shape, list) or len(shape) != 4 or any(d is None for d in shape[1:]):
        raise ValueError(
            "Export needs a model with one image input of shape (batch, height, width, channels), all but "
            f"batch known. Received: a model with input_shape={shape}"
        )
    return tuple(int(d) for d in shape[1:])


def serving_function(model, include_preprocessing=False, batch_size=None):
    """Returns a `tf.function` images -> {"predictions": outputs} and its input signature.

    Args:
        model: a built Keras model with one image input.
        include_preprocessing: bool; True: inputs are raw pixels in [0, 255].
        batch_size: None (dynamic batch) or a fixed int (1 for mobile
            TFLite files, see docs/traps.md: a dynamic batch splits XNNPACK
            partitions).
    """
    import tensorflow as tf

    spec = tf.TensorSpec((batch_size, *image_shape(model)), tf.float32, name=INPUT_NAME)

    @tf.function(input_signature=[spec])
    def serve(images):
        x = images / 127.5 - 1.0 if include_preprocessing else images
        return {OUTPUT_NAME: tf.cast(model(x, training=False), tf.float32)}

    return serve, spec


def write_saved_model(model, directory, include_preprocessing=False, batch_size=None):
    """Writes the serving function as a SavedModel with Keras' `ExportArchive`.

    docs/traps.md: a `tf.Module` wrapper or `from_concrete_functions` loses the
    Keras 3 weights; `ExportArchive` tracks them. Signatures
    `serving_default` and `serve` are the same function.
    """
    import keras

    serve, _ = serving_function(model, include_preprocessing, batch_size)
    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint("serving_default", serve)
    archive.add_endpoint("serve", serve)
    archive.write_out(directory, verbose=False)


def load_vit(path):
    """Loads a keras_vit `.keras` model file for export.

    Raises:
        ValueError: the file is missing, is not a Keras model file, or holds
            a model without keras_vit's `Patches` / `PatchEncoder` layers.
    """
    import keras

    import keras_vit  # noqa: F401  (registers the layers for deserialisation)
    from keras_vit.layers import PatchEncoder

    if not os.path.isfile(path):
        raise ValueError(f"model file not found: {path!r}")
    if not zipfile.is_zipfile(path):
        raise ValueError(f"{path!r} is not a Keras .keras model file (a .keras file is a zip archive)")
    try:
        model = keras.saving.load_model(path)
    except Exception as e:  # any reason the file is not a loadable Keras model
        raise ValueError(f"{path!r} is not a loadable Keras model file ({type(e).__name__}: {str(e)[:200]})") from None
    if not any(isinstance(layer, PatchEncoder) for layer in model.layers):
        raise ValueError(f"{path!r} holds a Keras model without keras_vit's PatchEncoder: not a keras_vit ViT")
    image_shape(model)
    return model
