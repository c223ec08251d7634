"""Which Keras backend runs, and TensorFlow only where TensorFlow is the point (issue 15).

The model side of keras_vit (layers, models, weights, inspect, training) is
written in `keras.ops` and runs on every Keras 3 backend: TensorFlow, JAX and
PyTorch. TensorFlow is needed only for `tf.data` pipelines
(`keras_vit.data`, `keras_vit.pretraining`'s data side), `tf.distribute`
(`keras_vit.distribute`, `keras-vit-train --strategy`) and the `export`
package; those parts call `tensorflow(purpose)`, which raises an ImportError
naming the extra to install when TensorFlow is missing.
"""

import keras

# the distribution (keras-vit-applications) is installed from its checkout; PyPI's keras-vit is another project
EXTRA = "pip install -e '.[tensorflow]' in the keras_vit checkout"


def backend():
    """The running Keras backend's name: "tensorflow", "jax", "torch" or "numpy"."""
    return keras.backend.backend()


def tensorflow(purpose):
    """Imports and returns the `tensorflow` module for `purpose`.

    Args:
        purpose: str, what needs TensorFlow (goes into the message).

    Returns:
        The `tensorflow` module.

    Raises:
        ImportError: TensorFlow is not installed; the message names `purpose`
            and the extra that installs it (`pip install -e '.[tensorflow]'`).
    """
    try:
        import tensorflow as tf
    except ImportError as error:
        raise ImportError(
            f"{purpose} needs TensorFlow, which is not installed here (Keras backend: {backend()!r}). "
            f"Install it with: {EXTRA}. The model side of keras_vit (layers, models, weights, inspect, "
            f"training) runs without it on the JAX and PyTorch backends."
        ) from error
    return tf
