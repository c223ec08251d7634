"""Input scaling and ImageNet label decoding, as `keras.applications` has them."""

import keras
import numpy as np


def preprocess_input(x, data_format=None):
    """Scales pixels from [0, 255] to [-1, 1]: x / 127.5 - 1.

    The scaling of the reference input pipeline (google-research/
    vision_transformer, `input_pipeline.py`: `(x - 127.5) / 127.5`), which
    all the published ViT checkpoints expect; the same as mean = std = 0.5
    in timm and Hugging Face and as `keras.applications`' mode "tf", whose
    implementation this calls.

    Args:
        x: images, NumPy array or tensor of shape `(..., height, width,
            channels)`, any real or integer dtype, pixels in [0, 255].
            Integer NumPy input is converted to float32 (a float NumPy array
            is scaled in place by Keras, as `keras.applications` does).
        data_format: unused for this scaling; accepted for the
            `keras.applications` signature.

    Returns:
        The scaled images, same shape, float, values in [-1, 1].

    Raises:
        ValueError: `x` is not an array, tensor or list of numbers.

    Example:

    >>> import numpy as np
    >>> preprocess_input(np.array([0, 127.5, 255.0])).tolist()
    [-1.0, 0.0, 1.0]
    """
    if isinstance(x, (str, bytes)) or not hasattr(x, "shape") and not isinstance(x, (list, tuple)):
        raise ValueError(f"`x` must be an array or tensor of pixels in [0, 255]. Received: x of type {type(x).__name__}")
    if isinstance(x, (list, tuple)):
        x = np.asarray(x, dtype="float32")
    if hasattr(x, "dtype") and hasattr(x, "astype") and x.dtype.kind in "iub":
        x = x.astype("float32")
    return keras.applications.imagenet_utils.preprocess_input(x, data_format=data_format, mode="tf")


def decode_predictions(preds, top=5):
    """Decodes ImageNet-1k predictions into (class_id, name, score) tuples.

    Delegates to `keras.applications.imagenet_utils.decode_predictions`,
    which downloads Keras' `imagenet_class_index.json` once (through
    `keras.utils.get_file`, with its hash checked) into `~/.keras/models`.

    Args:
        preds: NumPy array of shape `(batch, 1000)`, probabilities or logits.
        top: int, number of top guesses per image, default 5.

    Returns:
        A list of `batch` lists of `top` tuples `(wordnet_id, class_name,
        score)`, highest score first.

    Raises:
        ValueError: `preds` is not of shape `(batch, 1000)`.
    """
    shape = getattr(preds, "shape", None)
    if shape is None or len(shape) != 2 or shape[1] != 1000:
        raise ValueError(
            "`decode_predictions` expects ImageNet-1k predictions of shape (batch, 1000). "
            f"Received: preds with shape {shape}"
        )
    return keras.applications.imagenet_utils.decode_predictions(preds, top=top)
