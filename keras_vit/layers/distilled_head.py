"""DeiT's two heads, on the class token and on the distillation token, averaged at inference."""

import keras
from keras import ops

from keras_vit.layers.classifier_head import ClassifierHead


@keras.saving.register_keras_serializable(package="keras_vit")
class DistilledHead(ClassifierHead):
    """The class head and the distillation head of a distilled ViT, averaged (DeiT, arXiv:2012.12877, Sec. 4).

    DeiT (Touvron et al., ICML 2021) adds a distillation token beside the
    class token; a linear head reads each token's final state. The class
    head learns from the labels, the distillation head from the teacher
    (`keras_vit.distillation`). At inference the two heads' logits are
    averaged and then the activation is applied, as the reference
    `DistilledVisionTransformer.forward` (facebookresearch/deit `models.py`:
    `(x + x_dist) / 2`) and Hugging Face's `DeiTForImageClassificationWithTeacher`
    do. So a distilled model has one output, and every export of it holds
    both heads: the distillation head is never dropped or exported alone.

    It is a `ClassifierHead` (a `keras.layers.Dense`, named `predictions` in
    a keras_vit model): `kernel` and `bias` are the class head (timm's
    `head`, Hugging Face's `cls_classifier`), and it keeps the class names
    and `classifier_activation` as the plain head does.

    Weights:
        `kernel` (hidden_size, units), `bias` (units,): the class head.
        `distillation_kernel` (hidden_size, units), `distillation_bias`
            (units,): the distillation head (timm's `head_dist`, Hugging
            Face's `distillation_classifier`); initialised as `kernel` and
            `bias` (zeros in a keras_vit model, paper Sec. 3.2).

    Args:
        units: int >= 1, the number of classes.
        class_names: None or a list of `units` distinct class names.
        **kwargs: `keras.layers.Dense`'s arguments (activation, initializers,
            dtype, name).

    Input shape:
        `(batch, 2, hidden_size)`: the class token's and the distillation
        token's final states (`SequencePooling("tokens", distillation_token=True)`).

    Output shape:
        `(batch, units)`: activation((class logits + distillation logits) / 2).

    Raises:
        ValueError: bad `class_names`; an input that is not
            `(batch, 2, hidden_size)`.

    Example:

    >>> import numpy as np
    >>> head = DistilledHead(3, kernel_initializer="ones")
    >>> head(np.ones((1, 2, 4), "float32")).numpy().tolist()
    [[4.0, 4.0, 4.0]]
    """

    def build(self, input_shape):
        input_shape = tuple(input_shape)
        if len(input_shape) != 3 or input_shape[1] != 2 or input_shape[2] is None:
            raise ValueError("DistilledHead expects the class and distillation tokens' states, (batch, 2, "
                             f"hidden_size). Received: input_shape={input_shape}")
        super().build((input_shape[0], input_shape[2]))
        self.input_spec = keras.layers.InputSpec(ndim=3, axes={1: 2, 2: input_shape[2]})
        self.distillation_kernel = self.add_weight(
            name="distillation_kernel", shape=(input_shape[2], self.units), initializer=self.kernel_initializer,
            regularizer=self.kernel_regularizer, constraint=self.kernel_constraint)
        self.distillation_bias = None
        if self.use_bias:
            self.distillation_bias = self.add_weight(
                name="distillation_bias", shape=(self.units,), initializer=self.bias_initializer,
                regularizer=self.bias_regularizer, constraint=self.bias_constraint)

    def head_logits(self, tokens):
        """The two heads' logits, before averaging and activation (what distillation trains).

        Args:
            tokens: `(batch, 2, hidden_size)`, as the layer's input.

        Returns:
            `(class_logits, distillation_logits)`, each `(batch, units)`, in
            the layer's compute dtype (float32 in a keras_vit model).
        """
        tokens = ops.cast(tokens, self.compute_dtype)
        cls_logits = ops.matmul(tokens[:, 0], ops.cast(self.kernel, self.compute_dtype))
        dist_logits = ops.matmul(tokens[:, 1], ops.cast(self.distillation_kernel, self.compute_dtype))
        if self.use_bias:
            cls_logits = cls_logits + ops.cast(self.bias, self.compute_dtype)
            dist_logits = dist_logits + ops.cast(self.distillation_bias, self.compute_dtype)
        return cls_logits, dist_logits

    def call(self, inputs, training=None):
        cls_logits, dist_logits = self.head_logits(inputs)
        logits = (cls_logits + dist_logits) / 2
        return logits if self.activation is None else self.activation(logits)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.units)

    def save_own_variables(self, store):
        """The four weights in order (Keras' Layer rule; Dense's own rule saves only `kernel` and `bias`)."""
        keras.layers.Layer.save_own_variables(self, store)

    def load_own_variables(self, store):
        keras.layers.Layer.load_own_variables(self, store)

    def quantize(self, mode=None, type_check=True, config=None):
        """Keeps both heads in float32 under `model.quantize` (2 x hidden_size x units weights; Dense's quantised
        call would read only the class head)."""
        return None
