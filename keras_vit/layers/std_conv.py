"""Weight-standardised convolution for the hybrid ViT's ResNet (BiT; ViT paper Sec. 3.1 "Hybrid Architecture")."""

import keras
from keras import ops

from keras_vit.common.validation import check_channels_last


@keras.saving.register_keras_serializable(package="keras_vit")
class StdConv2D(keras.layers.Conv2D):
    """A `keras.layers.Conv2D` whose kernel is standardised on every call.

    Weight standardisation (Qiao et al. 2019), as in Big Transfer (BiT,
    Kolesnikov et al. 2020) and the hybrid ViT of the reference code
    (google-research/vision_transformer `models_resnet.StdConv`): each output
    filter of the (kh, kw, in, out) kernel is shifted to mean 0 and scaled to
    variance 1 over its (kh, kw, in) entries,

        w_hat = (w - mean(w)) / sqrt(var(w) + epsilon),

    before the convolution. This is the form of timm's `StdConv2dSame` and
    Hugging Face's `WeightStandardizedConv2d` (epsilon 1e-8); the reference
    Flax code divides by std(w) + 1e-5 instead, which differs by less than
    1e-5 relative and is absorbed by the GroupNorm that follows every
    convolution of the network.

    Args:
        filters, kernel_size, strides, padding, use_bias, ...: as
            `keras.layers.Conv2D`. `data_format` must be "channels_last",
            given or (None) taken from `keras.config.image_data_format()`.
        epsilon: float > 0, default 1e-8.

    Input shape: `(batch, height, width, in_channels)`, float.
    Output shape: `(batch, new_height, new_width, filters)`, same dtype.

    Raises:
        ValueError: `epsilon` not a positive number; a `data_format` other
            than "channels_last" (also `data_format=None` while the global
            format is "channels_first"); the other arguments as `Conv2D`.

    Example:

    >>> import numpy as np
    >>> layer = StdConv2D(4, 3, padding="same", use_bias=False)
    >>> tuple(layer(np.ones((1, 8, 8, 2), "float32")).shape)
    (1, 8, 8, 4)
    """

    def __init__(self, *args, epsilon=1e-8, **kwargs):
        super().__init__(*args, **kwargs)
        if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or epsilon <= 0:
            raise ValueError(f"`epsilon` must be a positive number. Received: epsilon={epsilon!r}")
        check_channels_last("StdConv2D", self.data_format)  # the global format when data_format=None
        self.epsilon = float(epsilon)

    def convolution_op(self, inputs, kernel):
        kernel = ops.cast(kernel, "float32")
        mean = ops.mean(kernel, axis=(0, 1, 2), keepdims=True)
        var = ops.mean(ops.square(kernel - mean), axis=(0, 1, 2), keepdims=True)
        kernel = (kernel - mean) / ops.sqrt(var + self.epsilon)
        return super().convolution_op(inputs, ops.cast(kernel, inputs.dtype))

    def get_config(self):
        return {**super().get_config(), "epsilon": self.epsilon}
