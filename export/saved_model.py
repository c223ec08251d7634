"""SavedModel export with a stable serving signature."""

from keras_vit import _files
from export.signature import INPUT_NAME, OUTPUT_NAME, image_shape, write_saved_model


def export_saved_model(model, path, include_preprocessing=False, overwrite=False):
    """Writes `model` as a TensorFlow SavedModel folder at `path`.

    Built with Keras' own `keras.export.ExportArchive` (docs/traps.md: wrapping a
    Keras 3 model in a `tf.Module` loses its weights in later conversions).
    The `serving_default` (and `serve`) signature takes `images`, float32
    `(batch, height, width, channels)` with a dynamic batch, and returns
    `{"predictions": float32 (batch, classes)}`. Reload with
    `tf.saved_model.load(path).signatures["serving_default"]` or
    `keras.layers.TFSMLayer(path, call_endpoint="serving_default")`.

    Args:
        model: a built keras_vit model (any Keras model with one image input).
        path: folder to write; written as a temporary folder beside it and
            renamed into place.
        include_preprocessing: bool, default False. True: `images` are raw
            pixels in [0, 255] and x / 127.5 - 1 runs inside the graph;
            False: `images` are already in [-1, 1].
        overwrite: bool, default False. Replace an existing `path`.

    Returns:
        `path`.

    Raises:
        FileExistsError: `path` exists and `overwrite` is False.
        ValueError: the model has no single fully known image input.
    """
    image_shape(model)
    with _files.staged(path, overwrite, directory=True) as tmp:
        write_saved_model(model, tmp, include_preprocessing)
    return path


__all__ = ["export_saved_model", "INPUT_NAME", "OUTPUT_NAME"]
