"""The checkpoint side of `VisionTransformer(weights=NAME|FILE)`, registered in `keras_vit.models.checkpoint_hook`.

Imported by `keras_vit.weights`' `__init__`, so the builders can load checkpoints while `keras_vit.models`
never imports this package (it builds models: the import runs `weights` -> `models` only).
"""

from keras_vit.models import checkpoint_hook
from keras_vit.models.variants import find_variant
from keras_vit.weights.loader import load_pretrained
from keras_vit.weights.registry import CHECKPOINTS, resolve


def is_name(weights):
    """True when `weights` is a name of `keras_vit.weights.CHECKPOINTS` (a str)."""
    return isinstance(weights, str) and weights in CHECKPOINTS


def pretrained_checkpoint(weights, config, input_shape, resnet_num_layers):
    """Returns the registry `Checkpoint` a name means for this configuration.

    Args:
        weights: "imagenet", "imagenet21k" or a name of `CHECKPOINTS`.
        config: `(patch_size, hidden_size, num_layers, num_heads, mlp_dim)` of the model being built.
        input_shape: its `(height, width, channels)`; only 3-channel models have published weights.
        resnet_num_layers: the hybrid's ResNet stage depths, or None.

    Raises:
        ValueError: no published checkpoint for that name and configuration (`registry.resolve`).
    """
    variant = find_variant(*config, resnet_num_layers) if input_shape[2] == 3 else None
    return resolve(weights, variant)


checkpoint_hook.register(is_name=is_name, resolve=pretrained_checkpoint, load=load_pretrained)
