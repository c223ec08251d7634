"""The ResNet feature extractor of the hybrid ViT (paper Sec. 3.1 "Hybrid Architecture").

Follows the reference code (google-research/vision_transformer `models_vit.py`
with `models_resnet.ResNetStage`/`ResidualUnit`): a BiT-style ResNet with
weight-standardised convolutions and GroupNorm (32 groups) after every
convolution, truncated after `len(num_layers)` stages:

    conv_root (7x7/2, StdConv) -> gn_root -> relu -> max pool 3x3/2 (SAME)
    block1: num_layers[0] bottleneck units, width 64 * width_factor, stride 1
    block{s}: num_layers[s-1] units, width 64 * 2^(s-1) * width_factor, stride 2

Each unit: conv1 1x1 -> gn1 -> relu -> conv2 3x3/stride -> gn2 -> relu ->
conv3 1x1 (4x width) -> gn3, plus the shortcut (conv_proj 1x1/stride ->
gn_proj when the shape changes), then relu. The output stride is
4 * 2^(len(num_layers) - 1): 16 for R50's three stages (3, 4, 9), 32 for
four. Layer names follow the checkpoint names with "_" for "/"
(`block1_unit1_conv1` is `block1/unit1/conv1`).
"""

import keras

from keras_vit.common.validation import check_channels_last
from keras_vit.layers import GroupNormalization, StdConv2D

GROUPS = 32
GROUP_NORM_EPSILON = 1e-6  # flax.linen.GroupNorm's default, used by the reference code


def output_stride(num_layers):
    """Total downsampling of the ResNet part: 4 * 2^(stages - 1)."""
    return 4 * 2 ** (len(num_layers) - 1)


def _conv(filters, kernel_size, name, strides=1, padding="valid"):
    # data_format given, so that no layer follows keras.config.image_data_format()
    return StdConv2D(filters, kernel_size, strides=strides, padding=padding, use_bias=False,
                     data_format="channels_last", name=name)


def _group_norm(name, epsilon):
    return GroupNormalization(GROUPS, epsilon=epsilon, name=name)


def _unit(x, width, strides, name, epsilon):
    out = 4 * width
    shortcut = x
    if x.shape[-1] != out or strides != 1:
        shortcut = _conv(out, 1, f"{name}_conv_proj", strides=strides)(x)
        shortcut = _group_norm(f"{name}_gn_proj", epsilon)(shortcut)
    y = _conv(width, 1, f"{name}_conv1")(x)
    y = keras.layers.ReLU(name=f"{name}_relu1")(_group_norm(f"{name}_gn1", epsilon)(y))
    y = _conv(width, 3, f"{name}_conv2", strides=strides, padding="same")(y)
    y = keras.layers.ReLU(name=f"{name}_relu2")(_group_norm(f"{name}_gn2", epsilon)(y))
    y = _conv(out, 1, f"{name}_conv3")(y)
    y = _group_norm(f"{name}_gn3", epsilon)(y)
    y = keras.layers.Add(name=f"{name}_add")([shortcut, y])
    return keras.layers.ReLU(name=f"{name}_out")(y)


def resnet_features(x, num_layers, width_factor=1, group_norm_epsilon=GROUP_NORM_EPSILON):
    """Applies the hybrid's ResNet to a Keras tensor of images.

    Args:
        x: Keras tensor `(batch, height, width, channels)`, float.
        num_layers: tuple of units per stage, e.g. (3, 4, 9) for R50's
            first three stages, (2, 2, 2, 2) for R26.
        width_factor: int >= 1, widens every stage (BiT's width factor).
        group_norm_epsilon: float, default 1e-6 (the reference code's).

    Returns:
        Keras tensor `(batch, ceil(height / s), ceil(width / s), 256 *
        width_factor * 2^(stages - 1))` with s = `output_stride(num_layers)`.

    Raises:
        ValueError: `keras.config.image_data_format()` is "channels_first"
            (every layer here is channels-last, whatever the global format).
    """
    check_channels_last("The hybrid's ResNet (resnet_features)")
    width = 64 * width_factor
    x = _conv(width, 7, "conv_root", strides=2, padding="same")(x)
    x = keras.layers.ReLU(name="relu_root")(_group_norm("gn_root", group_norm_epsilon)(x))
    x = keras.layers.MaxPooling2D(3, strides=2, padding="same", data_format="channels_last", name="pool_root")(x)
    for s, units in enumerate(num_layers):
        for u in range(units):
            strides = 2 if (s > 0 and u == 0) else 1
            x = _unit(x, width * 2**s, strides, f"block{s + 1}_unit{u + 1}", group_norm_epsilon)
    return x
