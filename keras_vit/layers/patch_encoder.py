"""Patch embedding, class token and position embeddings (ViT paper, Eq. 1)."""

import keras
from keras import ops

from keras_vit._validation import check_bool, check_positive_int, check_rate


@keras.saving.register_keras_serializable(package="keras_vit")
class PatchEncoder(keras.layers.Layer):
    """Projects flattened patches, prepends the class token, adds positions.

    Computes Eq. 1 of the ViT paper (arXiv:2010.11929):
    z_0 = [x_class; x_p^1 E; ...; x_p^N E] + E_pos, followed by dropout as in
    the reference implementation (google-research/vision_transformer,
    `models_vit.py`: `Encoder` applies dropout after adding the position
    embeddings).

    Weights:
        `projection` (Dense): kernel (patch_dim, hidden_size), LeCun-normal
            init as the reference's embedding convolution; bias zeros.
        `class_token`: (1, 1, hidden_size), zeros init (reference `cls`);
            only when `class_token=True`.
        `position_embedding`: (1, seq_len, hidden_size), normal stddev 0.02
            (reference `posembed_input`), with
            seq_len = num_patches + 1 (class token) or num_patches.

    Args:
        hidden_size: int >= 1, the width D of every token.
        class_token: bool, default True. Prepend a learnable class token.
            Models with `classifier="gap"` are built without one.
        dropout_rate: float in [0, 1), default 0. Dropout on the embedded
            sequence, active only when `training=True`.
        **kwargs: standard `keras.layers.Layer` arguments.

    Input shape:
        `(batch, num_patches, patch_dim)` float, e.g. the output of
        `Patches`; `num_patches` and `patch_dim` must be known at build.

    Output shape:
        `(batch, seq_len, hidden_size)` in the compute dtype; weights stay
        float32 under mixed precision.

    Raises:
        ValueError: `hidden_size` is not a positive int; `dropout_rate` is
            not in [0, 1); `class_token` is not a bool; the input is not
            rank 3 with known `num_patches` and `patch_dim`.

    Example:

    >>> import numpy as np
    >>> encoder = PatchEncoder(hidden_size=32)
    >>> encoder(np.zeros((2, 16, 48), "float32")).shape
    TensorShape([2, 17, 32])
    """

    def __init__(self, hidden_size, class_token=True, dropout_rate=0.0, **kwargs):
        super().__init__(**kwargs)
        hidden_size = check_positive_int("hidden_size", hidden_size)
        check_rate("dropout_rate", dropout_rate)
        check_bool("class_token", class_token)
        self.hidden_size = hidden_size
        self.class_token = class_token
        self.dropout_rate = dropout_rate
        self.projection = keras.layers.Dense(
            hidden_size, kernel_initializer="lecun_normal", dtype=self.dtype_policy, name="projection"
        )
        self.dropout = keras.layers.Dropout(dropout_rate, dtype=self.dtype_policy, name="dropout")

    def build(self, input_shape):
        if len(input_shape) != 3 or input_shape[1] is None or input_shape[2] is None:
            raise ValueError(
                "PatchEncoder expects patches of shape (batch, num_patches, patch_dim) with "
                f"num_patches and patch_dim known. Received: input_shape={tuple(input_shape)}"
            )
        self.projection.build(input_shape)
        if self.class_token:
            self.cls = self.add_weight(
                name="class_token", shape=(1, 1, self.hidden_size), initializer="zeros"
            )
        seq_len = input_shape[1] + int(self.class_token)
        self.position_embedding = self.add_weight(
            name="position_embedding",
            shape=(1, seq_len, self.hidden_size),
            initializer=keras.initializers.RandomNormal(stddev=0.02),
        )
        self.input_spec = keras.layers.InputSpec(ndim=3, axes={1: input_shape[1], 2: input_shape[2]})

    def call(self, inputs, training=None):
        x = self.projection(inputs)
        if self.class_token:
            batch = ops.shape(x)[0]
            cls = ops.broadcast_to(ops.cast(self.cls, x.dtype), (batch, 1, self.hidden_size))
            x = ops.concatenate([cls, x], axis=1)
        x = x + ops.cast(self.position_embedding, x.dtype)
        return self.dropout(x, training=training)

    def compute_output_shape(self, input_shape):
        num_patches = input_shape[1]
        seq_len = None if num_patches is None else num_patches + int(self.class_token)
        return (input_shape[0], seq_len, self.hidden_size)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "hidden_size": self.hidden_size,
                "class_token": self.class_token,
                "dropout_rate": self.dropout_rate,
            }
        )
        return config
