"""Layer and group normalization written so TFLite's int8 converter keeps them integer.

Keras 3.15's `LayerNormalization` and `GroupNormalization` compute
`x * inv + (-mean * inv + beta)`; TensorFlow 2.21's int8 converter leaves that
`-mean` as a float32 `NEG` op (and GroupNormalization's variance as a float32
`SQUARE`) with a `DEQUANTIZE` before and a `QUANTIZE` after it: no int8
kernel, so the full-integer file is not integer-only (docs/traps.md). Both
layers here compute `(x - mean) * (rsqrt(var + epsilon) * gamma) + beta`,
which lowers to int8 SUB, MEAN, SQUARED_DIFFERENCE / MUL, RSQRT, MUL, ADD.
"""

import keras
from keras import ops


def _normalize(x, axes, epsilon, gamma, beta):
    """`(x - mean) * (rsqrt(var + epsilon) * gamma) + beta` in float32 at least, over `axes` (keepdims).

    `gamma` and `beta` are None or already broadcastable to `x`.
    """
    dtype = keras.backend.result_type(x.dtype, "float32")
    x = ops.cast(x, dtype)
    mean = ops.mean(x, axis=axes, keepdims=True)
    centered = x - mean
    # centered * centered, not square(): TFLite has no int8 SQUARE kernel
    variance = ops.mean(centered * centered, axis=axes, keepdims=True)
    scale = ops.rsqrt(variance + epsilon)
    if gamma is not None:
        scale = scale * ops.cast(gamma, dtype)
    outputs = centered * scale
    if beta is not None:
        outputs = outputs + ops.cast(beta, dtype)
    return outputs


@keras.saving.register_keras_serializable(package="keras_vit")
class LayerNormalization(keras.layers.LayerNormalization):
    """`keras.layers.LayerNormalization` over the last axis, computed without a negation.

    Computes `(x - mean) * (rsqrt(var + epsilon) * gamma) + beta`, mean and
    biased variance over the last axis, in float32 at least (as Keras does
    for float16 / bfloat16 inputs), cast to the layer's compute dtype. The
    same value as Keras' layer up to float32 rounding (a few 1e-7 relative:
    Ba et al. 2016, Eq. 4), the same variables (`gamma`, `beta`), config and
    weight paths, so weight files and the checkpoint loaders read it like
    Keras' layer; `.keras` files that hold Keras' layer still load as Keras'
    layer. Any other `axis` or `rms_scaling=True` uses Keras' computation.

    Input shape: `(..., hidden_size)`, any float dtype. Output: the same
    shape, the layer's compute dtype.

    Args: those of `keras.layers.LayerNormalization` (ViT uses
    `epsilon=1e-6`, the reference value; Keras' default is 1e-3).

    Raises:
        ValueError: from Keras' layer, for a bad `axis` or input rank.
    """

    def call(self, inputs):
        axes = self.axis if isinstance(self.axis, (list, tuple)) else [self.axis]
        rank = len(inputs.shape)
        if self.rms_scaling or len(axes) != 1 or axes[0] % rank != rank - 1:
            return super().call(inputs)
        outputs = _normalize(inputs, -1, self.epsilon, self.gamma, self.beta)
        return ops.cast(outputs, self.compute_dtype)


@keras.saving.register_keras_serializable(package="keras_vit")
class GroupNormalization(keras.layers.GroupNormalization):
    """`keras.layers.GroupNormalization` computed without a negation (Wu & He 2018, Eq. 1-3).

    The hybrid's ResNet (BiT) normalization. Same variables, config and
    weight paths as Keras' layer; the value equals it up to float32 rounding.

    Input shape: `(batch, ..., channels)` with `channels` divisible by
    `groups` (channels last). Output: the same shape, the compute dtype.

    Args: those of `keras.layers.GroupNormalization`.

    Raises:
        ValueError: from Keras' layer, for a bad `groups` or `axis`.
    """

    def _apply_normalization(self, reshaped_inputs, input_shape):
        axes = list(range(1, len(reshaped_inputs.shape)))
        axes.pop(-2 if self.axis == -1 else self.axis - 1)
        shape = self._create_broadcast_shape(input_shape)
        gamma = ops.reshape(self.gamma, shape) if self.scale else None
        beta = ops.reshape(self.beta, shape) if self.center else None
        outputs = _normalize(reshaped_inputs, axes, self.epsilon, gamma, beta)
        return ops.cast(outputs, reshaped_inputs.dtype)
