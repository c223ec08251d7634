"""Exact rewrites of a ViT's weights that make its activations easier to quantise to per-tensor int8.

A full-integer int8 file quantises each activation tensor with one scale
(TensorFlow's converter, LiteRT Quantizer). After a LayerNorm the channels
of a trained ViT have very different ranges, set by the learned gamma and
beta, so one scale spends most of the 256 levels on a few wide channels
(RepQ-ViT, Li et al., ICCV 2023, Sec. 3.2, "post-LayerNorm activations").

`balance_layer_norms` moves each channel's centre and spread out of the
LayerNorm's affine parameters and into the linear layers that read it, in
the manner of RepQ-ViT's scale reparameterisation (per-channel scale s_j
and centre c_j taken from calibration images):

    y_j  = LN(x)_j                  (in [lo_j, hi_j] on the calibration images)
    c_j  = (hi_j + lo_j) / 2,   s_j = (hi_j - lo_j) / 2 / mean_j((hi_j - lo_j) / 2)
    LN:     gamma'_j = gamma_j / s_j,   beta'_j = (beta_j - c_j) / s_j          (so y'_j = (y_j - c_j) / s_j)
    next:   W'_j. = s_j W_j.,           b' = b + c W                            (so y' W' + b' = y W + b)

The model computes the same function in exact arithmetic. Every channel of
y' then spans about the same symmetric range. Rewritten pairs, for each
encoder block: `norm_1` -> the attention's query, key and value kernels
(one s for the three, they read the same tensor); `norm_2` -> `mlp_dense_1`;
and `encoder_norm` -> the head `predictions` or `pre_logits` (through the
class token's slice or the token mean, which keep channels). `check_exact` proves the copy equal to the
original within a relative 1e-5 of the largest output before anything is
quantised.
"""

import keras
import numpy as np

from export.input_range import scale
from export.signature import ServingGraph
from keras_vit.layers import TransformerBlock

EXACT_TOLERANCE = 1e-5  # max |new - old| / max |old| over the images, float32


def _stats(values):
    """`(centre, spread)` per channel of float values `(..., channels)`: midpoint and half-range over all others."""
    flat = np.asarray(values, "float64").reshape(-1, values.shape[-1])
    lo, hi = flat.min(0), flat.max(0)
    return (hi + lo) / 2, np.maximum((hi - lo) / 2, 1e-12)


def _scales(spread):
    """Per-channel scale s: the spread relative to its mean over channels (so the tensor keeps its overall size)."""
    return spread / spread.mean()


def _fold(norm, centre, scale, readers):
    """Applies one rewrite: `norm`'s gamma and beta, then each reader Dense / EinsumDense (kernel's first axis the
    channels, bias over the rest) takes the centre and scale."""
    gamma, beta = (np.asarray(w, "float64") for w in norm.get_weights())
    norm.set_weights([(gamma / scale).astype("float32"), ((beta - centre) / scale).astype("float32")])
    for reader in readers:
        kernel, bias = (np.asarray(w, "float64") for w in reader.get_weights())
        shift = np.tensordot(centre, kernel, axes=([0], [0]))
        kernel = kernel * scale.reshape((-1,) + (1,) * (kernel.ndim - 1))
        reader.set_weights([kernel.astype("float32"), (bias + shift).astype("float32")])


def rewritable(model):
    """True if `balance_layer_norms` can rewrite `model`: a functional keras_vit ViT with encoder blocks,
    `encoder_norm`, `pooling` and a head `predictions` at its top level (not one nested in a wrapper model)."""
    names = {layer.name for layer in model.layers}
    return bool(_blocks(model)) and {"encoder_norm", "predictions", "pooling"} <= names


def _blocks(model):
    return [layer for layer in model.layers if isinstance(layer, TransformerBlock)]


def balance_layer_norms(model, images, batch_size=32):
    """A copy of a keras_vit ViT whose post-LayerNorm activations have balanced channel ranges (RepQ-ViT's
    reparameterisation, module doc), computing the same function.

    Args:
        model: a functional keras_vit ViT with a head (`keras_vit.VisionTransformer` or a variant builder's
            model, `include_top=True`): `TransformerBlock` layers, `encoder_norm`, `pooling` (class token or mean),
            an optional `pre_logits` and the head `predictions`.
        images: float32 calibration images `(n, height, width, channels)` in the range the model takes; the
            channel ranges are measured on them.
        batch_size: images per forward pass.

    Returns:
        A new model (same config and layer names) with rewritten weights; `model` is unchanged.

    Raises:
        ValueError: a model that is not of that form (no encoder blocks, no `encoder_norm`, `pooling` or
            `predictions` layer).
    """
    if not rewritable(model):
        raise ValueError("balance_layer_norms needs a keras_vit ViT with encoder blocks, `encoder_norm`, `pooling` and "
                         f"a Dense head `predictions`. Received: a model with layers {sorted(layer.name for layer in model.layers)}")
    copy = keras.models.clone_model(model)
    copy.set_weights(model.get_weights())
    images = np.asarray(images, "float32")
    # what each block reads, and what the first linear layer after encoder_norm reads (the pooled tokens: the class
    # token's slice and the token mean both keep channels, so the centre and scale pass through them exactly)
    taps = keras.Model(copy.inputs, [b.input for b in _blocks(copy)] + [copy.get_layer("pooling").output])
    inputs = taps.predict(images, batch_size=batch_size, verbose=0)
    for block, x in zip(_blocks(copy), inputs[:-1]):
        first = np.asarray(block.norm_1(x))
        mid = x + np.asarray(block.attention(first, first, training=False))
        attention = block.attention
        centre, spread = _stats(first)
        _fold(block.norm_1, centre, _scales(spread),
              [attention._query_dense, attention._key_dense, attention._value_dense])
        centre, spread = _stats(np.asarray(block.norm_2(mid)))
        _fold(block.norm_2, centre, _scales(spread), [block.mlp_dense_1])
    reader = copy.get_layer("pre_logits") if any(layer.name == "pre_logits" for layer in copy.layers) \
        else copy.get_layer("predictions")
    centre, spread = _stats(inputs[-1])
    _fold(copy.get_layer("encoder_norm"), centre, _scales(spread), [reader])
    return copy


def check_exact(original, rewritten, images, tolerance=EXACT_TOLERANCE, batch_size=32):
    """Proves a rewrite exact on the float model: max |rewritten - original| / max |original| over `images`.

    Returns:
        float, the relative difference.

    Raises:
        RuntimeError: it is above `tolerance` (the rewrite changed what the model computes).
    """
    a = np.asarray(original.predict(images, batch_size=batch_size, verbose=0), "float64")
    b = np.asarray(rewritten.predict(images, batch_size=batch_size, verbose=0), "float64")
    relative = float(np.abs(a - b).max() / max(np.abs(a).max(), 1e-12))
    if relative > tolerance:
        raise RuntimeError(f"the LayerNorm reparameterisation is not exact: outputs differ by {relative:.2e} of their "
                           f"largest value (allowed {tolerance:g})")
    return relative


def balanced_graph(graph, samples):
    """`(graph, owned)`: a `ServingGraph` of the same settings whose model has balanced LayerNorms, proven exact.

    Args:
        graph: an `export.signature.ServingGraph`.
        samples: float32 calibration images `(n, h, w, c)` in the artifact's input range (`graph.input_range`).

    Returns:
        `(new graph, True)` (the caller closes it), or `(graph, False)` where the model is not a ViT this rewrite
        knows (a ViT nested in a wrapper model): then nothing is rewritten.

    Raises:
        RuntimeError: the rewrite is not exact on the first 64 samples (`check_exact`).
    """
    model = graph.model
    if not rewritable(model):
        return graph, False
    images = np.asarray(scale(samples, graph.input_range, graph.model_range), "float32")
    balanced = balance_layer_norms(model, images)
    check_exact(model, balanced, images[:64])
    new = ServingGraph(balanced, graph.include_preprocessing, graph.batch_size, graph.scores, graph.image_shape[:2],
                       graph.dynamic_size, graph.model_range)
    new.source, new.source_policy, new.class_names = graph.source, graph.source_policy, graph.class_names
    return new, True
