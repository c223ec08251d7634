"""Pre-LayerNorm Transformer encoder block (ViT paper, Eq. 2-3)."""

import math

import keras
from keras import ops

from keras_vit.common.validation import check_bool, check_positive_int, check_rate
from keras_vit.layers.normalization import LayerNormalization
from keras_vit.layers.quantized_sublayers import QuantizedSublayers

_INV_SQRT2 = 1.0 / math.sqrt(2.0)


def _gelu(x, approximate):
    """GELU (Hendrycks & Gimpel 2016) in a form every export target runs.

    The exact form is written as 0.5 * x * (1 + erf(x / sqrt(2))): TFLite's
    converter fuses that pattern into its builtin GELU op and tf2onnx maps
    `Erf` to ONNX `Erf`, whereas `keras.activations.gelu` lowers to `Erfc`,
    which tf2onnx 1.17 cannot convert (see docs/traps.md). The tanh form is the
    approximation of the original JAX/Flax ViT; the two differ by up to
    4.7e-4 per activation.
    """
    if approximate:
        return keras.activations.gelu(x, approximate=True)
    return 0.5 * x * (1.0 + ops.erf(x * _INV_SQRT2))


@keras.saving.register_keras_serializable(package="keras_vit")
class TransformerBlock(QuantizedSublayers, keras.layers.Layer):
    """One pre-LayerNorm Transformer encoder block of ViT.

    Computes Eq. 2-3 of the ViT paper (arXiv:2010.11929), following the
    reference `Encoder1DBlock` (google-research/vision_transformer,
    `models_vit.py`):

        z' = z + DropPath(Dropout(MSA(LN(z))))
        z'' = z' + DropPath(MLP(LN(z')))
        MLP(y) = Dropout(Dense_2(Dropout(GELU(Dense_1(y)))))

    with multi-head self-attention of `num_heads` heads of size
    head_dim = hidden_size / num_heads (Keras `MultiHeadAttention`, whose
    query/key/value kernels are (hidden_size, num_heads, head_dim) and output
    kernel (num_heads, head_dim, hidden_size), the layout of Google's
    checkpoints), MLP hidden_size -> mlp_dim -> hidden_size, and LayerNorm
    with epsilon 1e-6 (Keras' default is 1e-3). DropPath is stochastic depth
    (Huang et al. 2016): during training each example's residual branch is
    dropped with probability `stochastic_depth_rate` and kept ones are scaled
    by 1 / (1 - rate).

    Sublayers: `norm_1`, `attention`, `norm_2`, `mlp_dense_1`, `mlp_dense_2`.

    Args:
        num_heads: int >= 1; must divide the input's hidden_size.
        mlp_dim: int >= 1, width of the MLP's hidden layer.
        dropout_rate: float in [0, 1), default 0. Dropout after attention and
            inside the MLP.
        attention_dropout_rate: float in [0, 1), default 0. Dropout on the
            attention probabilities.
        stochastic_depth_rate: float in [0, 1), default 0. DropPath rate.
        layer_norm_epsilon: float > 0, default 1e-6 (the reference value).
        approximate_gelu: bool, default False. False: exact GELU
            0.5 x (1 + erf(x / sqrt 2)), as timm, Hugging Face and Keras;
            True: the tanh approximation of the original JAX ViT. Both
            export to builtin TFLite ops and to standard ONNX ops.
        quantized_sublayers: None (default), or the dict `get_config` writes
            after `model.quantize(...)`: {sublayer path: dtype policy},
            so that a `.keras` file rebuilds the quantised sublayers
            (`keras_vit.layers.quantized_sublayers`). Not set by hand.
        **kwargs: standard `keras.layers.Layer` arguments.

    Call arguments:
        inputs: `(batch, seq_len, hidden_size)` float tensor.
        training: bool, enables dropout and stochastic depth.
        return_attention_scores: bool, default False. Also return the
            attention probabilities.

    Input shape:
        `(batch, seq_len, hidden_size)`.

    Output shape:
        `(batch, seq_len, hidden_size)` in the compute dtype (bfloat16 or
        float16 under mixed precision, weights float32); with
        `return_attention_scores=True` a tuple of that and the attention
        weights `(batch, num_heads, seq_len, seq_len)`, rows summing to 1.

    Raises:
        ValueError: an argument is outside the range given above; the input
            is not rank 3 with a known hidden_size; hidden_size is not
            divisible by `num_heads`.

    Example:

    >>> import numpy as np
    >>> block = TransformerBlock(num_heads=4, mlp_dim=64)
    >>> y, scores = block(np.zeros((2, 17, 32), "float32"), return_attention_scores=True)
    >>> tuple(y.shape), tuple(scores.shape)
    ((2, 17, 32), (2, 4, 17, 17))
    """

    def __init__(
        self,
        num_heads,
        mlp_dim,
        dropout_rate=0.0,
        attention_dropout_rate=0.0,
        stochastic_depth_rate=0.0,
        layer_norm_epsilon=1e-6,
        approximate_gelu=False,
        quantized_sublayers=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self._init_quantized_sublayers(quantized_sublayers)
        num_heads = check_positive_int("num_heads", num_heads)
        mlp_dim = check_positive_int("mlp_dim", mlp_dim)
        check_rate("dropout_rate", dropout_rate)
        check_rate("attention_dropout_rate", attention_dropout_rate)
        check_rate("stochastic_depth_rate", stochastic_depth_rate)
        check_bool("approximate_gelu", approximate_gelu)
        if isinstance(layer_norm_epsilon, bool) or not isinstance(layer_norm_epsilon, (int, float)) or layer_norm_epsilon <= 0:
            raise ValueError(
                "`layer_norm_epsilon` must be a positive float. "
                f"Received: layer_norm_epsilon={layer_norm_epsilon!r}"
            )
        self.num_heads = num_heads
        self.mlp_dim = mlp_dim
        self.dropout_rate = dropout_rate
        self.attention_dropout_rate = attention_dropout_rate
        self.stochastic_depth_rate = stochastic_depth_rate
        self.layer_norm_epsilon = layer_norm_epsilon
        self.approximate_gelu = approximate_gelu
        self.seed_generator = keras.random.SeedGenerator()

    def build(self, input_shape):
        if len(input_shape) != 3 or input_shape[-1] is None:
            raise ValueError(
                "TransformerBlock expects a sequence of shape (batch, seq_len, hidden_size) "
                f"with hidden_size known. Received: input_shape={tuple(input_shape)}"
            )
        hidden_size = input_shape[-1]
        if hidden_size % self.num_heads:
            raise ValueError(
                f"hidden_size must be divisible by num_heads. Received: hidden_size={hidden_size}, "
                f"num_heads={self.num_heads}"
            )
        policy = self.dtype_policy
        eps = self.layer_norm_epsilon
        self.norm_1 = LayerNormalization(epsilon=eps, dtype=policy, name="norm_1")
        self.attention = keras.layers.MultiHeadAttention(
            num_heads=self.num_heads,
            key_dim=hidden_size // self.num_heads,
            dropout=self.attention_dropout_rate,
            dtype=policy,
            name="attention",
        )
        self.norm_2 = LayerNormalization(epsilon=eps, dtype=policy, name="norm_2")
        self.mlp_dense_1 = keras.layers.Dense(self.mlp_dim, dtype=policy, name="mlp_dense_1")
        self.mlp_dense_2 = keras.layers.Dense(hidden_size, dtype=policy, name="mlp_dense_2")
        self.dropout = keras.layers.Dropout(self.dropout_rate, dtype=policy, name="dropout")

        self.norm_1.build(input_shape)
        self.attention.build(input_shape, input_shape)
        self.norm_2.build(input_shape)
        self.mlp_dense_1.build(input_shape)
        self.mlp_dense_2.build((*input_shape[:-1], self.mlp_dim))
        self._quantize_sublayers_as_saved()
        self.input_spec = keras.layers.InputSpec(ndim=3, axes={-1: hidden_size})

    def _drop_path(self, x, training):
        rate = self.stochastic_depth_rate
        if not training or rate == 0.0:
            return x
        keep = 1.0 - rate
        noise = keras.random.uniform((ops.shape(x)[0], 1, 1), seed=self.seed_generator)
        mask = ops.cast(noise < keep, x.dtype)
        return x * mask / ops.cast(keep, x.dtype)

    def call(self, inputs, training=None, return_attention_scores=False):
        y = self.norm_1(inputs)
        if return_attention_scores:
            y, scores = self.attention(y, y, training=training, return_attention_scores=True)
        else:
            y = self.attention(y, y, training=training)
        y = self.dropout(y, training=training)
        x = inputs + self._drop_path(y, training)

        y = self.norm_2(x)
        y = _gelu(self.mlp_dense_1(y), self.approximate_gelu)
        y = self.dropout(y, training=training)
        y = self.dropout(self.mlp_dense_2(y), training=training)
        x = x + self._drop_path(y, training)
        if return_attention_scores:
            return x, scores
        return x

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def compute_output_spec(self, inputs, training=None, return_attention_scores=False):
        outputs = keras.KerasTensor(inputs.shape, dtype=self.compute_dtype)
        if not return_attention_scores:
            return outputs
        batch, seq_len = inputs.shape[0], inputs.shape[1]
        scores = keras.KerasTensor((batch, self.num_heads, seq_len, seq_len), dtype=self.compute_dtype)
        return outputs, scores

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "mlp_dim": self.mlp_dim,
                "dropout_rate": self.dropout_rate,
                "attention_dropout_rate": self.attention_dropout_rate,
                "stochastic_depth_rate": self.stochastic_depth_rate,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "approximate_gelu": self.approximate_gelu,
                **self._quantized_sublayers_config(),
            }
        )
        return config
