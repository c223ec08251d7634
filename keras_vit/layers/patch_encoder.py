"""Patch embedding, class token (and DeiT's distillation token) and position embeddings (ViT paper, Eq. 1; D.4)."""

import keras
from keras import ops

from keras_vit.common.validation import check_bool, check_choice, check_grid, check_positive_int, check_rate, is_int
from keras_vit.layers.quantized_sublayers import QuantizedSublayers
from keras_vit.layers.position_embedding import (
    INTERPOLATIONS,
    POSITION_EMBEDDINGS,
    resample_axis,
    resample_grid,
    sincos_2d,
)


@keras.saving.register_keras_serializable(package="keras_vit")
class PatchEncoder(QuantizedSublayers, keras.layers.Layer):
    """Projects flattened patches, prepends the class token, adds positions.

    Computes Eq. 1 of the ViT paper (arXiv:2010.11929):
    z_0 = [x_class; x_p^1 E; ...; x_p^N E] + E_pos, followed by dropout as in
    the reference implementation (google-research/vision_transformer,
    `models_vit.py`: `Encoder` applies dropout after adding the position
    embeddings).

    Position embeddings E_pos (`position_embedding`, the choices of the
    paper's Appendix D.4, Table 8):
        "learned" (default): the paper's learned 1D table, one row per token
            (class token included), weight `position_embedding`
            (1, prefix + rows * cols, hidden_size), normal stddev 0.02
            (reference `posembed_input`).
        "learned_2d": the paper's 2D variant: an X table
            `position_embedding_x` (cols, hidden_size / 2) and a Y table
            `position_embedding_y` (rows, hidden_size / 2); the patch at
            (row y, column x) gets concat(X[x], Y[y]). `hidden_size` must be
            even.
        "sincos_2d": fixed 2D sine-cosine embeddings of big_vision and MAE
            (`keras_vit.layers.position_embedding.sincos_2d`), no weights;
            `hidden_size` must be a multiple of 4, at least 8.
        "none": nothing is added.
    With the three kinds other than "learned" the class token gets no
    position embedding (a learned constant added to the learned class token
    would change nothing).

    Distillation token (DeiT, Touvron et al., ICML 2021, Sec. 4 and Fig. 2;
    the reference `DistilledVisionTransformer` of facebookresearch/deit
    `models.py`): with `distillation_token=True` a second learned token
    follows the class token, z_0 = [x_class; x_distil; x_p^1 E; ...] + E_pos,
    with its own row of the learned position table; the model's
    distillation head reads its final state. The class token and
    distillation token are the sequence's prefix (`prefix_tokens`, 1 or 2).

    Any resolution: given patches as a grid `(batch, rows, cols, patch_dim)`
    (`Patches(flatten=False)`), the layer accepts any rows and cols, also
    unknown until call time. When they differ from the table's grid
    `grid_size`, it resamples the learned table(s) to the input's grid with
    `interpolation` (paper Sec. 3.2; the same rule as
    `keras_vit.weights.resample_position_embedding`, in `keras.ops`, so the
    result equals a table resampled once offline); the class-token row is
    kept. Sine-cosine tables are computed at the input's grid. Under XLA each
    new input shape compiles once.

    Weights:
        `projection` (Dense): kernel (patch_dim, hidden_size), LeCun-normal
            init as the reference's embedding convolution; bias zeros.
        `class_token`: (1, 1, hidden_size), zeros init (reference `cls`);
            only when `class_token=True`.
        `distillation_token`: (1, 1, hidden_size), truncated normal stddev
            0.02 (DeiT's `dist_token`); only when `distillation_token=True`.
        the position-embedding weights above, all float32.

    Args:
        hidden_size: int >= 1, the width D of every token.
        class_token: bool, default True. Prepend a learnable class token.
            Models with `classifier="gap"` are built without one.
        distillation_token: bool, default False. Put DeiT's learned
            distillation token after the class token (needs `class_token`).
        dropout_rate: float in [0, 1), default 0. Dropout on the embedded
            sequence, active only when `training=True`.
        position_embedding: "learned" (default), "learned_2d", "sincos_2d"
            or "none".
        grid_size: None or (rows, cols) ints >= 1: the patch grid the tables
            are built for. None takes the grid of the input at build time
            (rank 4 with known rows and cols; rank 3: any token count for
            "learned", a square count for the 2D kinds).
        interpolation: "bilinear" (default, the reference rule) or "bicubic".
        quantized_sublayers: None (default), or the dict `get_config` writes
            after `model.quantize(...)`: {sublayer path: dtype policy},
            so that a `.keras` file rebuilds the quantised sublayers
            (`keras_vit.layers.quantized_sublayers`). Not set by hand.
        **kwargs: standard `keras.layers.Layer` arguments.

    Input shape:
        `(batch, num_patches, patch_dim)` float with `num_patches` known and
        equal to rows * cols of `grid_size` (fixed resolution), or
        `(batch, rows, cols, patch_dim)` (any resolution; `patch_dim` known).

    Output shape:
        `(batch, seq_len, hidden_size)` in the compute dtype, seq_len =
        rows * cols + `prefix_tokens` (1 with a class token, 2 with the
        distillation token too, 0 without); weights stay float32 under
        mixed precision.

    Raises:
        ValueError: `hidden_size` is not a positive int; `dropout_rate` is
            not in [0, 1); `class_token` or `distillation_token` is not a
            bool, or a distillation token without a class token; an unknown
            `position_embedding` or `interpolation`; a `hidden_size` the kind
            cannot split; a bad `grid_size`; an input that is not rank 3 with
            known `num_patches` and `patch_dim` matching `grid_size`, or
            rank 4 with known `patch_dim` (and known rows and cols when
            `grid_size` is None).

    Example:

    >>> import numpy as np
    >>> encoder = PatchEncoder(hidden_size=32)
    >>> encoder(np.zeros((2, 16, 48), "float32")).shape
    TensorShape([2, 17, 32])
    >>> encoder = PatchEncoder(hidden_size=32, grid_size=(4, 4))
    >>> encoder(np.zeros((2, 6, 8, 48), "float32")).shape
    TensorShape([2, 49, 32])
    """

    def __init__(
        self,
        hidden_size,
        class_token=True,
        dropout_rate=0.0,
        position_embedding="learned",
        grid_size=None,
        interpolation="bilinear",
        quantized_sublayers=None,
        distillation_token=False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self._init_quantized_sublayers(quantized_sublayers)
        hidden_size = check_positive_int("hidden_size", hidden_size)
        check_rate("dropout_rate", dropout_rate)
        check_bool("class_token", class_token)
        check_bool("distillation_token", distillation_token)
        if distillation_token and not class_token:
            raise ValueError("`distillation_token=True` puts DeiT's distillation token after the class token and "
                             "needs one. Received: class_token=False")
        check_choice("position_embedding", position_embedding, POSITION_EMBEDDINGS)
        check_choice("interpolation", interpolation, INTERPOLATIONS)
        if position_embedding == "learned_2d" and hidden_size % 2:
            raise ValueError(
                "`position_embedding='learned_2d'` splits hidden_size into X and Y halves; it must be even. "
                f"Received: hidden_size={hidden_size}"
            )
        if position_embedding == "sincos_2d" and (hidden_size % 4 or hidden_size < 8):
            raise ValueError(
                "`position_embedding='sincos_2d'` needs hidden_size a multiple of 4 and at least 8. "
                f"Received: hidden_size={hidden_size}"
            )
        self.hidden_size = hidden_size
        self.class_token = class_token
        self.distillation_token = distillation_token
        self.dropout_rate = dropout_rate
        self.position_embedding_kind = position_embedding
        self.grid_size = check_grid("grid_size", grid_size)
        self.interpolation = interpolation
        self.projection = keras.layers.Dense(
            hidden_size, kernel_initializer="lecun_normal", dtype=self.dtype_policy, name="projection"
        )
        self.dropout = keras.layers.Dropout(dropout_rate, dtype=self.dtype_policy, name="dropout")

    def build(self, input_shape):
        input_shape = tuple(input_shape)
        rank3 = len(input_shape) == 3 and input_shape[1] is not None and input_shape[2] is not None
        rank4 = len(input_shape) == 4 and input_shape[3] is not None
        if not (rank3 or rank4):
            raise ValueError(
                "PatchEncoder expects patches of shape (batch, num_patches, patch_dim) with num_patches and "
                "patch_dim known, or a patch grid (batch, rows, cols, patch_dim) with patch_dim known. "
                f"Received: input_shape={input_shape}"
            )
        patch_dim = input_shape[-1]
        if rank3:
            num_patches = input_shape[1]
            if self.grid_size is None and self.position_embedding_kind != "learned":
                side = int(round(num_patches ** 0.5))
                if side * side != num_patches:
                    raise ValueError(
                        f"`position_embedding={self.position_embedding_kind!r}` needs the patch grid: pass "
                        f"`grid_size=(rows, cols)` (or patches of shape (batch, rows, cols, patch_dim)). "
                        f"Received: input_shape={input_shape}"
                    )
                self.grid_size = (side, side)
            if self.grid_size is not None and self.grid_size[0] * self.grid_size[1] != num_patches:
                raise ValueError(
                    f"PatchEncoder with grid_size={self.grid_size} expects {self.grid_size[0] * self.grid_size[1]} "
                    f"patches. Received: input_shape={input_shape} (pass the patch grid (batch, rows, cols, "
                    "patch_dim) for another resolution)"
                )
            self.input_spec = keras.layers.InputSpec(ndim=3, axes={1: num_patches, 2: patch_dim})
        else:
            if self.grid_size is None:
                if input_shape[1] is None or input_shape[2] is None:
                    raise ValueError(
                        "PatchEncoder on a patch grid of unknown size needs `grid_size=(rows, cols)`, the grid "
                        f"of its position embeddings. Received: input_shape={input_shape}, grid_size=None"
                    )
                self.grid_size = (int(input_shape[1]), int(input_shape[2]))
            self.input_spec = keras.layers.InputSpec(ndim=4, axes={3: patch_dim})
        self.projection.build((None, None, patch_dim))
        self._quantize_sublayers_as_saved()
        if self.class_token:
            self.cls = self.add_weight(name="class_token", shape=(1, 1, self.hidden_size), initializer="zeros")
        if self.distillation_token:
            self.dist = self.add_weight(name="distillation_token", shape=(1, 1, self.hidden_size),
                                        initializer=keras.initializers.TruncatedNormal(stddev=0.02))
        init = keras.initializers.RandomNormal(stddev=0.02)
        kind = self.position_embedding_kind
        if kind == "learned":
            rows = input_shape[1] if self.grid_size is None else self.grid_size[0] * self.grid_size[1]
            self.position_embedding = self.add_weight(
                name="position_embedding", shape=(1, rows + self.prefix_tokens, self.hidden_size), initializer=init
            )
        elif kind == "learned_2d":
            half = self.hidden_size // 2
            self.position_embedding_x = self.add_weight(
                name="position_embedding_x", shape=(self.grid_size[1], half), initializer=init
            )
            self.position_embedding_y = self.add_weight(
                name="position_embedding_y", shape=(self.grid_size[0], half), initializer=init
            )

    @property
    def prefix_tokens(self):
        """int: the tokens before the patches: 1 for the class token, 2 with the distillation token, 0 for none."""
        return int(self.class_token) + int(self.distillation_token)

    def position_table(self, rows=None, cols=None):
        """Returns E_pos for a rows x cols patch grid, float32 (prefix + rows * cols, hidden_size), or None.

        `rows`/`cols` default to the table's grid (`grid_size`) and may be
        scalar int tensors. The first `prefix_tokens` rows are the class
        token's (and the distillation token's): zeros for the kinds other
        than "learned"; None for "none".
        """
        kind = self.position_embedding_kind
        if kind == "none":
            return None
        grid = self.grid_size
        if grid is None:  # "learned" on a non-square token count: one table, nothing to resample
            return ops.cast(self.position_embedding[0], "float32")
        rows = grid[0] if rows is None else rows
        cols = grid[1] if cols is None else cols
        same = (is_int(rows) and is_int(cols) and (rows, cols) == tuple(grid))
        prefix = self.prefix_tokens
        if kind == "learned":
            table = ops.cast(self.position_embedding[0], "float32")
            if same:
                return table
            patches = resample_grid(table[prefix:], grid, (rows, cols), self.interpolation)
            return ops.concatenate([table[:prefix], patches], axis=0)
        if kind == "learned_2d":
            x_table, y_table = self.position_embedding_x, self.position_embedding_y
            if not same:
                x_table = resample_axis(x_table, cols, self.interpolation)
                y_table = resample_axis(y_table, rows, self.interpolation)
            half = self.hidden_size // 2
            x_part = ops.broadcast_to(ops.cast(x_table, "float32")[None, :, :], (rows, cols, half))
            y_part = ops.broadcast_to(ops.cast(y_table, "float32")[:, None, :], (rows, cols, half))
            patches = ops.reshape(ops.concatenate([x_part, y_part], axis=-1), (rows * cols, self.hidden_size))
        else:
            patches = sincos_2d(rows, cols, self.hidden_size)
        return ops.concatenate([ops.zeros((prefix, self.hidden_size), "float32"), patches], axis=0)

    def call(self, inputs, training=None):
        tokens, rows, cols = self.project(inputs)
        return self.embed(tokens, rows, cols, training=training)

    def project(self, inputs):
        """The linear projection E of each flattened patch (paper Eq. 1), before the class token and positions.

        Args:
            inputs: the layer's input, `(batch, num_patches, patch_dim)` or a
                patch grid `(batch, rows, cols, patch_dim)`, in the compute dtype.

        Returns:
            `(tokens, rows, cols)`: tokens `(batch, rows * cols, hidden_size)`
            in the compute dtype, and the grid's rows and cols (scalar tensors
            for a patch grid, None for rank-3 input: the table's own grid).
            `embed(tokens, rows, cols)` finishes the layer's computation;
            masked patch prediction (`keras_vit.pretraining`) corrupts the
            tokens in between.
        """
        if len(inputs.shape) == 4:
            shape = ops.shape(inputs)
            rows, cols = shape[1], shape[2]
            inputs = ops.reshape(inputs, (-1, rows * cols, inputs.shape[-1]))
        else:
            rows = cols = None
        return self.projection(inputs), rows, cols

    def embed(self, x, rows=None, cols=None, training=None):
        """Prepends the class (and distillation) token, adds the position embeddings, applies dropout (paper Eq. 1).

        Args:
            x: projected patch tokens `(batch, rows * cols, hidden_size)`, as
                `project` returns them.
            rows, cols: the patch grid (None: the table's `grid_size`).
            training: enables dropout.

        Returns:
            `(batch, rows * cols + prefix_tokens, hidden_size)`, compute dtype.
        """
        if self.class_token:
            batch = ops.shape(x)[0]
            tokens = [self.cls, self.dist] if self.distillation_token else [self.cls]
            prefix = [ops.broadcast_to(ops.cast(t, x.dtype), (batch, 1, self.hidden_size)) for t in tokens]
            x = ops.concatenate(prefix + [x], axis=1)
        table = self.position_table(rows, cols)
        if table is not None:
            x = x + ops.cast(table, x.dtype)[None]
        return self.dropout(x, training=training)

    def compute_output_shape(self, input_shape):
        if len(input_shape) == 4:
            rows, cols = input_shape[1], input_shape[2]
            num_patches = None if rows is None or cols is None else rows * cols
        else:
            num_patches = input_shape[1]
        seq_len = None if num_patches is None else num_patches + self.prefix_tokens
        return (input_shape[0], seq_len, self.hidden_size)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "hidden_size": self.hidden_size,
                "class_token": self.class_token,
                "distillation_token": self.distillation_token,
                "dropout_rate": self.dropout_rate,
                "position_embedding": self.position_embedding_kind,
                "grid_size": None if self.grid_size is None else list(self.grid_size),
                "interpolation": self.interpolation,
                **self._quantized_sublayers_config(),
            }
        )
        return config

