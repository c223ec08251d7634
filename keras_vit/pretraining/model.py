"""Self-supervised pre-training by masked patch prediction (ViT paper, Sec. 4.6 and Appendix B.1.2).

The paper's BERT-like objective (arXiv:2010.11929, Sec. 4.6 "Self-supervision",
Appendix B.1.2): 50% of the patch embeddings of each image are corrupted; of
those, 80% are replaced by one learnable `[mask]` embedding, 10% by the
embedding of another random patch and 10% are left as they are. From the
final representation of each corrupted patch the model predicts a target of
that patch: its 3-bit mean colour (512 classes for RGB, cross-entropy; the
paper's reported setting and the default), or, as the issue asks, with L2
regression its 4x4 area-downsized version or the full patch.

Limitations:
    Hybrid backbones: the `[mask]` (or another patch's embedding) replaces a
    token *after* the ResNet, whose convolutions and GroupNorm statistics
    have already seen the clean image, so a corrupted patch's colour can
    leak into its neighbours' tokens (and, through GroupNorm, into every
    token). Measured: changing the pixels of one 8-px cell of a 32 x 32
    image changed the ResNet features of all 16 tokens of a hybrid
    (`resnet_num_layers=(1, 1)`, patch 1), against exactly 1 token of a pure
    ViT (`tests/test_pretraining.py::
    test_a_hybrid_spreads_one_cells_pixels_over_many_tokens_a_pure_vit_over_one`).
    The paper ran masked patch prediction on pure ViTs only (Sec. 4.6,
    ViT-B/16); on a hybrid the task is easier than it looks.
    Targets: with a 4-px cell the "downsized" (4 x 4) target equals "full";
    with cells smaller than 4 px it is upsampled (area weights: a 2-px
    cell's pixels are each repeated twice a side).

Pieces, used together by `keras-vit-pretrain`:
    `patch_targets`: the targets of each patch of a batch of images.
    `corruption`: the seeded, stateless corruption mask.
    `masked_patch_dataset`: a `tf.data` map from `keras_vit.data` batches
        (labels dropped) to `(inputs, targets, sample_weights)`.
    `MaskedPatchPrediction`: the model around any keras_vit backbone; its
        `.backbone` is a plain keras_vit model to save and fine-tune.
    `compile_pretraining`: the paper's optimiser (Adam, linear warm-up then
        cosine decay), the loss over the corrupted patches only, XLA checked.

Example:

>>> import numpy as np
>>> import keras_vit
>>> from keras_vit import pretraining
>>> backbone = keras_vit.VisionTransformer(patch_size=4, hidden_size=32, num_layers=1,
...     num_heads=2, mlp_dim=32, input_shape=(16, 16, 3), include_top=False)
>>> model = pretraining.MaskedPatchPrediction(backbone)
>>> kind, source = pretraining.corruption(np.array([0, 1]), 2, 16)
>>> model({"images": np.zeros((2, 16, 16, 3), "float32"), "corruption": kind, "source": source}).shape
TensorShape([2, 16, 512])
"""

import keras
from keras import ops

from keras_vit.pretraining.masked_patches import MASKED, REPLACED, TARGETS, target_size
from keras_vit.common.validation import check_choice, is_int


def _backbone_layers(backbone):
    """Returns (patches, encoder, blocks, norm) of a keras_vit ViT; raises ValueError naming `backbone` otherwise."""
    from keras_vit.layers import PatchEncoder, Patches

    what = f"backbone={getattr(backbone, 'name', backbone)!r} of type {type(backbone).__name__}"
    names = {layer.name: layer for layer in backbone.layers} if isinstance(backbone, keras.Model) else {}
    patches, encoder, norm = names.get("patches"), names.get("patch_encoder"), names.get("encoder_norm")
    blocks = []
    while f"transformer_block_{len(blocks)}" in names:
        blocks.append(names[f"transformer_block_{len(blocks)}"])
    if not isinstance(patches, Patches) or not isinstance(encoder, PatchEncoder) or norm is None or not blocks:
        raise ValueError(
            "`backbone` must be a keras_vit Vision Transformer (a functional keras.Model with layers 'patches' "
            "(Patches), 'patch_encoder' (PatchEncoder), 'transformer_block_0'... and 'encoder_norm'), as "
            f"VisionTransformer, the variant builders and keras_vit .keras files give. Received: {what}"
        )
    if len(backbone.inputs) != 1:
        raise ValueError(f"`backbone` must have one image input. Received: {what} with {len(backbone.inputs)} inputs")
    return patches, encoder, blocks, norm


def backbone_cell_size(backbone):
    """The side in pixels of the image cell under one patch token of a keras_vit ViT.

    `patch_size` for a pure ViT; `patch_size` x the ResNet's output stride
    for a hybrid (paper Sec. 3.1), e.g. 16 for ViT-B/16 and R50+ViT-B/16.

    Args:
        backbone: a keras_vit Vision Transformer (`keras.Model`).

    Returns:
        int >= 1.

    Raises:
        ValueError: `backbone` is not a keras_vit Vision Transformer.

    Example:

    >>> import keras_vit
    >>> backbone_cell_size(keras_vit.VisionTransformer(patch_size=4, hidden_size=32, num_layers=1,
    ...     num_heads=2, mlp_dim=32, input_shape=(16, 16, 3)))
    4
    """
    from keras_vit.weights.loader import cell_size

    _backbone_layers(backbone)  # raises ValueError unless a keras_vit ViT
    return cell_size(backbone)


@keras.saving.register_keras_serializable(package="keras_vit")
class MaskedPatchPrediction(keras.Model):
    """Masked patch prediction around a keras_vit backbone (paper Sec. 4.6, Appendix B.1.2).

    The forward pass reuses the backbone's own layers: its input up to the
    `patches` layer (with the image-size check and the hybrid's ResNet), then
    `patch_encoder.project` (the patch embedding E), the corruption of the
    projected tokens (kind 1: the `[mask]` embedding; kind 2: the projected
    embedding of patch `source`; kinds 0 and 3: unchanged), then
    `patch_encoder.embed` (class token and position embeddings added after
    the corruption, as BERT adds positions to its [MASK] token), the
    `transformer_block_{i}` layers and `encoder_norm`; the class token (when
    the backbone has one) is dropped and a per-patch Dense head predicts the
    target. The backbone's own head or pooling, if any, is not used. With no
    corruption the patch representations equal the backbone's `encoder_norm`
    output (patch tokens).

    Hybrid backbones: the corruption acts on the tokens after the ResNet,
    whose convolutions and GroupNorm statistics have seen the clean image,
    so a masked patch's colour can leak into its neighbours' tokens
    (measured: one changed 8-px cell of a 32 x 32 image moved the ResNet
    features of all 16 tokens of a small hybrid, against exactly 1 token of
    a pure ViT). The paper ran masked patch prediction on pure ViTs only
    (Sec. 4.6, ViT-B/16); a hybrid's pre-training accuracy overstates what
    it learnt. With a 4-px cell the "downsized" target equals "full".

    Weights of its own (not in the backbone): `mask_embedding`
    (hidden_size,), float32, normal stddev 0.02 (BERT's embeddings' and
    MAE's mask token's initialiser), cast to the compute dtype; `head`, a
    float32 Dense (hidden_size -> outputs), Keras' default initialiser.
    `.backbone` is the backbone model object itself (shared weights), so
    `model.backbone.save("backbone.keras")` saves a plain keras_vit model.

    Args:
        backbone: any keras_vit Vision Transformer: with or without head,
            pure or hybrid, any `position_embedding`, fixed size or any
            resolution (`input_shape=(None, None, C)`).
        target: "mean_color" (default: 8 ** C logits per patch), "downsized"
            (16 * C values) or "full" (cell ** 2 * C values); see
            `patch_targets`.
        channels: None (default: the backbone's input channels) or that
            same int; the C of the targets.
        name: model name, default "masked_patch_prediction".
        **kwargs: other `keras.Model` arguments.

    Input:
        a dict: "images" float `(batch, height, width, channels)` in
        [-1, 1]; "corruption" int `(batch, N)` kinds and "source" int
        `(batch, N)` indices as `corruption` returns them (both optional:
        without "corruption" nothing is corrupted; without "source" a kind 2
        patch keeps its own embedding). N = the backbone's patch count for
        these images.

    Output:
        float32 `(batch, N, outputs)` (logits for "mean_color"), float32
        also under mixed precision.

    Raises:
        ValueError: `backbone` is not a keras_vit ViT (no 'patches' /
            'patch_encoder' layers), an unknown `target`, `channels` other
            than the backbone's.
    """

    def __init__(self, backbone, target="mean_color", channels=None, name="masked_patch_prediction", **kwargs):
        patches, encoder, blocks, norm = _backbone_layers(backbone)
        check_choice("target", target, TARGETS)
        backbone_channels = backbone.input_shape[-1]
        if channels is not None and (not is_int(channels) or channels != backbone_channels):
            raise ValueError(
                f"`channels` must be None or the backbone's input channels ({backbone_channels}). "
                f"Received: channels={channels!r}"
            )
        super().__init__(name=name, **kwargs)
        self.backbone = backbone
        self.target = target
        self.channels = int(backbone_channels)
        self.cell_size = backbone_cell_size(backbone)
        self.outputs_per_patch = target_size(target, self.cell_size, self.channels)
        self._patch_grid = keras.Model(backbone.inputs[0], patches.output, name=f"{backbone.name}_patch_grid")
        self._encoder, self._blocks, self._norm = encoder, blocks, norm
        self.mask_embedding = self.add_weight(
            name="mask_embedding",
            shape=(encoder.hidden_size,),
            initializer=keras.initializers.RandomNormal(stddev=0.02),
            dtype="float32",
        )
        self.head = keras.layers.Dense(self.outputs_per_patch, dtype="float32", name="head")
        self.head.build((None, None, encoder.hidden_size))
        self.built = True  # every weight exists (the backbone's, [mask], head): saving needs no call first

    def patch_representations(self, inputs, training=None):
        """The final representation of every patch token, after corruption (before the head).

        Args:
            inputs: the dict of `call`.
            training: enables the backbone's dropout and stochastic depth.

        Returns:
            `(batch, N, hidden_size)` in the compute dtype: the backbone's
            `encoder_norm` output without the class token.
        """
        grid = self._patch_grid(inputs["images"], training=training)
        tokens, rows, cols = self._encoder.project(grid)
        kind = inputs.get("corruption")
        if kind is not None:
            kind = ops.cast(kind, "int32")[..., None]
            source = inputs.get("source")
            if source is not None:
                replaced = ops.take_along_axis(tokens, ops.cast(source, "int32")[..., None], axis=1)
                tokens = ops.where(kind == REPLACED, replaced, tokens)
            mask = ops.cast(self.mask_embedding, tokens.dtype)
            tokens = ops.where(kind == MASKED, mask[None, None, :], tokens)
        x = self._encoder.embed(tokens, rows, cols, training=training)
        for block in self._blocks:
            x = block(x, training=training)
        x = self._norm(x)
        return x[:, self._encoder.prefix_tokens:]

    def call(self, inputs, training=None):
        """Per-patch predictions, float32 `(batch, N, outputs)`; see the class docstring."""
        return self.head(self.patch_representations(inputs, training=training))

    def get_config(self):
        """The constructor arguments, with the backbone serialised (`.keras` round trip)."""
        return {
            "backbone": keras.saving.serialize_keras_object(self.backbone),
            "target": self.target,
            "channels": self.channels,
            "name": self.name,
            "trainable": self.trainable,
        }

    @classmethod
    def from_config(cls, config):
        """Rebuilds the model from `get_config()`."""
        config = dict(config)
        config["backbone"] = keras.saving.deserialize_keras_object(config["backbone"])
        return cls(**config)


def compile_pretraining(
    model,
    *,
    total_steps,
    learning_rate=2e-4,
    warmup_steps=0,
    weight_decay=0.0,
    global_clipnorm=1.0,
    jit_compile="auto",
):
    """Compiles a `MaskedPatchPrediction` model with the paper's pre-training recipe; checks XLA holds.

    Appendix B.1.2 (arXiv:2010.11929): "We use Adam, with a base learning rate
    of 2e-4, warmup of 10k steps and cosine learning rate decay"; gradients
    clipped at global norm 1 (Appendix B.1). The optimiser is
    `keras_vit.training.AdamW` (beta_1 0.9, beta_2 0.999; with the default
    `weight_decay=0` exactly Adam; it clips after the cross-replica sum),
    with `keras_vit.training.learning_rate_schedule` (linear warm-up, then
    cosine decay to 0). Loss: sparse categorical cross-entropy on the logits
    for "mean_color", mean squared error for "downsized" and "full"; both
    are averaged over the corrupted patches only (the dataset's weights,
    reduction "mean_with_sample_weight": sum(w * loss) / sum(w)). Metric for
    "mean_color": "accuracy" over the corrupted patches (a weighted
    metric). A `mixed_float16` model gets loss scaling, and 16-bit weights
    are refused, as in `keras_vit.training.compile_model`.

    Args:
        model: a `MaskedPatchPrediction`.
        total_steps: int >= 1, optimiser steps of the whole run.
        learning_rate: float > 0, peak learning rate, default 2e-4 (the
            paper's, for batch 4096).
        warmup_steps: int in [0, total_steps), default 0 (the paper: 10k).
        weight_decay: float >= 0, decoupled weight decay (not on biases,
            norms, class token, position and mask embeddings), default 0.
        global_clipnorm: float > 0 or None, default 1.0.
        jit_compile: "auto" (default: XLA on TensorFlow and JAX, none on
            PyTorch, as `keras_vit.training.compile_model`) or a bool.

    Returns:
        The same `model`, compiled. Feed it `masked_patch_dataset(...)`.

    Raises:
        ValueError: `model` is not a `MaskedPatchPrediction`, an argument
            outside the ranges above, or 16-bit weights.
        RuntimeError: `jit_compile=True` while op determinism is on, or
            Keras fell back to running without XLA.
    """
    from keras_vit import training

    if not isinstance(model, MaskedPatchPrediction):
        raise ValueError(
            "`model` must be a keras_vit.pretraining.MaskedPatchPrediction. "
            f"Received: model={getattr(model, 'name', model)!r} of type {type(model).__name__}"
        )
    jit_compile = training.resolve_jit_compile(jit_compile)
    if isinstance(weight_decay, bool) or not isinstance(weight_decay, (int, float)) or weight_decay < 0:
        raise ValueError(f"`weight_decay` must be a float >= 0. Received: weight_decay={weight_decay!r}")
    if global_clipnorm is not None and (
        isinstance(global_clipnorm, bool) or not isinstance(global_clipnorm, (int, float)) or global_clipnorm <= 0
    ):
        raise ValueError(
            f"`global_clipnorm` must be None or a positive float. Received: global_clipnorm={global_clipnorm!r}"
        )
    schedule = training.learning_rate_schedule(learning_rate, total_steps, warmup_steps)
    training._check_float32_weights(model)
    if jit_compile and training.op_determinism_enabled():
        raise RuntimeError(
            "XLA was requested (jit_compile=True) but TensorFlow's op determinism is on, and Keras never compiles "
            f"with XLA then: {model.name!r} would train without it. Pass jit_compile=False."
        )
    optimizer = training.AdamW(
        schedule, weight_decay=float(weight_decay), beta_1=0.9, beta_2=0.999, global_clipnorm=global_clipnorm
    )
    optimizer.exclude_from_weight_decay(var_names=[*training.NO_WEIGHT_DECAY, "mask_embedding"])
    if training._computes_in_float16(model):
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer, name="loss_scale_optimizer")
    if model.target == "mean_color":
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="mean_with_sample_weight")
        metrics = [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]
    else:
        loss = keras.losses.MeanSquaredError(reduction="mean_with_sample_weight")
        metrics = []
    model.compile(optimizer=optimizer, loss=loss, weighted_metrics=metrics, jit_compile=jit_compile)
    if jit_compile and not model.jit_compile:
        raise RuntimeError(
            f"XLA was requested (jit_compile=True) but Keras fell back to running {model.name!r} without it: "
            "a layer of the model does not support XLA. Pass jit_compile=False to train without XLA."
        )
    return model
