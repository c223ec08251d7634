"""Reduce the encoder's token sequence to one vector per image."""

import keras
from keras import ops

from keras_vit.common.validation import check_choice

POOLING_MODES = ("token", "avg", "max", "tokens")


@keras.saving.register_keras_serializable(package="keras_vit")
class SequencePooling(keras.layers.Layer):
    """Pools `(batch, seq_len, hidden_size)` tokens into `(batch, hidden_size)`.

    `"token"` takes the class token's final state (paper Eq. 4: y = LN(z_L^0);
    the LayerNorm is the model's `encoder_norm`). `"avg"` is global average
    pooling over the patch tokens, the reference code's `classifier="gap"`;
    `"max"` is global max pooling over them. The class token, when present,
    is excluded from `"avg"` and `"max"` (as in timm's `global_pool="avg"`).

    With DeiT's distillation token (position 1, `distillation_token=True`):
    `"token"` is the mean of the class and distillation tokens' states (the
    features of timm's `VisionTransformerDistilled.forward_head(pre_logits=True)`),
    `"tokens"` keeps both, `(batch, 2, hidden_size)`, for the two heads of
    `keras_vit.layers.DistilledHead`, and `"avg"` / `"max"` exclude both.

    Args:
        mode: "token", "avg", "max" or "tokens" (needs `distillation_token`).
        class_token: bool, default True. Whether position 0 of the sequence
            is a class token. `mode="token"` needs one.
        distillation_token: bool, default False. Whether position 1 is DeiT's
            distillation token (needs `class_token`).
        **kwargs: standard `keras.layers.Layer` arguments.

    Input shape:
        `(batch, seq_len, hidden_size)`, float.

    Output shape:
        `(batch, hidden_size)`, same dtype as the input; `(batch, 2,
        hidden_size)` for `"tokens"`.

    Raises:
        ValueError: unknown `mode`; `mode="token"` with `class_token=False`;
            a distillation token without a class token; `"tokens"` without a
            distillation token; an input that is not rank 3.

    Example:

    >>> import numpy as np
    >>> x = np.arange(12, dtype="float32").reshape(1, 3, 4)
    >>> SequencePooling("avg")(x).numpy().tolist()
    [[6.0, 7.0, 8.0, 9.0]]
    """

    def __init__(self, mode, class_token=True, distillation_token=False, **kwargs):
        super().__init__(**kwargs)
        check_choice("mode", mode, POOLING_MODES)
        if mode == "token" and not class_token:
            raise ValueError(
                "SequencePooling(mode='token') needs a class token. Received: class_token=False"
            )
        if distillation_token and not class_token:
            raise ValueError("SequencePooling(distillation_token=True) needs a class token (the distillation token "
                             "follows it). Received: class_token=False")
        if mode == "tokens" and not distillation_token:
            raise ValueError("SequencePooling(mode='tokens') keeps the class and distillation tokens' states and needs "
                             "distillation_token=True. Received: distillation_token=False")
        self.mode = mode
        self.class_token = bool(class_token)
        self.distillation_token = bool(distillation_token)

    def build(self, input_shape):
        if len(input_shape) != 3:
            raise ValueError(
                "SequencePooling expects tokens of shape (batch, seq_len, hidden_size). "
                f"Received: input_shape={tuple(input_shape)}"
            )

    def call(self, inputs):
        if self.mode == "tokens":
            return inputs[:, :2]
        if self.mode == "token":
            return (inputs[:, 0] + inputs[:, 1]) / 2 if self.distillation_token else inputs[:, 0]
        tokens = inputs[:, int(self.class_token) + int(self.distillation_token):]
        if self.mode == "avg":
            return ops.mean(tokens, axis=1)
        return ops.max(tokens, axis=1)

    def compute_output_shape(self, input_shape):
        if self.mode == "tokens":
            return (input_shape[0], 2, input_shape[-1])
        return (input_shape[0], input_shape[-1])

    def get_config(self):
        config = super().get_config()
        config.update({"mode": self.mode, "class_token": self.class_token,
                       "distillation_token": self.distillation_token})
        return config
