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
class token's slice or the token mean, which keep channels; a distilled
model's `DistilledHead` has two heads, both rewritten). `check_exact` proves
the copy equal to the original within a relative 1e-5 of the largest output
before anything is quantised.
"""

import keras
import numpy as np

from export.input_range import scale
from export.signature import ServingGraph
from keras_vit.layers import TransformerBlock

EXACT_TOLERANCE = 1e-5  # max |new - old| / max |old| over the images, float32
# The rewrite from the weights alone (no images) shrinks only the channels whose reach |gamma| + |beta| is more than
# this many times the median channel's, down to that: on a model without outlier channels it changes nothing (a
# rescale of every channel to |gamma| took the tests' 16 px ViT's dynamic_int8 file under its 98% bar at 20x24 px:
# 97.5%), and `with_outlier_channels`' 30x channels come back to 4x (dynamic_int8 95.3% without the rewrite, over
# its 98% bar with it: tests/export/test_int8_cpu.py)
WEIGHT_OUTLIER = 4.0


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
    channels, bias over the rest) takes the centre and scale; a `DistilledHead` holds two (kernel, bias) pairs, the
    class head's and the distillation head's, each reading one token of the same LayerNorm."""
    gamma, beta = (np.asarray(w, "float64") for w in norm.get_weights())
    norm.set_weights([(gamma / scale).astype("float32"), ((beta - centre) / scale).astype("float32")])
    for reader in readers:
        weights = [np.asarray(w, "float64") for w in reader.get_weights()]
        new = []
        for kernel, bias in zip(weights[0::2], weights[1::2]):
            shift = np.tensordot(centre, kernel, axes=([0], [0]))
            kernel = kernel * scale.reshape((-1,) + (1,) * (kernel.ndim - 1))
            new += [kernel.astype("float32"), (bias + shift).astype("float32")]
        reader.set_weights(new)


def _weight_outliers(model):
    """`[(LayerNorm, readers, scale)]` for the rewrite from the weights alone, only the LayerNorms (of `_rewrites`)
    that have an outlier channel: LN(x)_j = gamma_j xhat_j + beta_j with xhat_j of unit scale reaches
    |gamma_j| + |beta_j|; a channel whose reach is over `WEIGHT_OUTLIER` x the median channel's is scaled down to
    that (scale_j > 1), every other channel keeps scale 1."""
    found = []
    for norm, readers in _rewrites(model):
        gamma, beta = (np.asarray(w, "float64") for w in norm.get_weights())
        reach = np.abs(gamma) + np.abs(beta)
        scale = np.maximum(reach / (WEIGHT_OUTLIER * max(np.median(reach), 1e-12)), 1.0)
        if (scale > 1).any():
            found.append((norm, readers, scale))
    return found


def rewritable(model):
    """True if `balance_layer_norms` can rewrite `model`: a functional keras_vit ViT with encoder blocks,
    `encoder_norm`, `pooling` and a head `predictions` at its top level (not one nested in a wrapper model)."""
    names = {layer.name for layer in model.layers}
    return bool(_blocks(model)) and {"encoder_norm", "predictions", "pooling"} <= names


def _blocks(model):
    return [layer for layer in model.layers if isinstance(layer, TransformerBlock)]


def _rewrites(model):
    """`[(LayerNorm, [the Dense / EinsumDense layers that read it])]` in depth order: each block's norm_1 (query, key
    and value), norm_2 (mlp_dense_1), then encoder_norm (pre_logits, else the head)."""
    pairs = []
    for block in _blocks(model):
        attention = block.attention
        pairs.append((block.norm_1, [attention._query_dense, attention._key_dense, attention._value_dense]))
        pairs.append((block.norm_2, [block.mlp_dense_1]))
    reader = model.get_layer("pre_logits") if any(layer.name == "pre_logits" for layer in model.layers) \
        else model.get_layer("predictions")
    return pairs + [(model.get_layer("encoder_norm"), [reader])]


def _run(model, images, batch_size):
    """`model`'s outputs on `images`, called batch by batch (NumPy; a list for several outputs). Called, not
    `predict`: an export measures the same model on image counts that differ (every calibrated file, the stability
    check's halves), and `predict` would retrace its function for each last batch and log TensorFlow's retracing
    WARNING, which `keras-vit-export --verbose 0` must not show."""
    images = np.asarray(images, "float32")
    parts = [model(images[i : i + batch_size], training=False) for i in range(0, len(images), batch_size)]
    if isinstance(parts[0], (list, tuple)):
        return [np.concatenate([keras.ops.convert_to_numpy(p[k]) for p in parts]) for k in range(len(parts[0]))]
    return np.concatenate([keras.ops.convert_to_numpy(p) for p in parts])


def _norm_outputs(model, images, batch_size):
    """Each LayerNorm output that the rewrite reads, on `images`, in `_rewrites` order: per block norm_1's and
    norm_2's, then what the first linear layer after encoder_norm reads (the pooled tokens: the class token's slice
    and the token mean both keep channels, so a centre and scale pass through them exactly)."""
    # model.input: the input structure the model was built with (a list here would make Keras warn at every call)
    taps = keras.Model(model.input, [b.input for b in _blocks(model)] + [model.get_layer("pooling").output])
    inputs = _run(taps, images, batch_size)
    outputs = []
    for block, x in zip(_blocks(model), inputs[:-1]):
        first = np.asarray(block.norm_1(x))
        mid = x + np.asarray(block.attention(first, first, training=False))
        outputs += [first, np.asarray(block.norm_2(mid))]
    return outputs + [inputs[-1]]


def balance_layer_norms(model, images, batch_size=32):
    """A copy of a keras_vit ViT whose post-LayerNorm activations have balanced channel ranges (RepQ-ViT's
    reparameterisation, module doc), computing the same function.

    Args:
        model: a functional keras_vit ViT with a head (`keras_vit.VisionTransformer` or a variant builder's
            model, `include_top=True`): `TransformerBlock` layers, `encoder_norm`, `pooling` (class token or mean),
            an optional `pre_logits` and the head `predictions`.
        images: float32 calibration images `(n, height, width, channels)` in the range the model takes; the
            channel ranges are measured on them. None: from the weights alone, only the outlier channels (reach
            |gamma| + |beta| over `WEIGHT_OUTLIER` x the median channel's) scaled down to that bound, nothing
            centred (exact as well; for a mode without calibration images, dynamic_int8).
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
    if images is None:  # from the weights alone: only the outlier channels move, every other weight stays as trained
        for norm, readers, scale in _weight_outliers(copy):
            _fold(norm, np.zeros_like(scale), scale, readers)
        return copy
    for (norm, readers), values in zip(_rewrites(copy), _norm_outputs(copy, images, batch_size)):
        centre, spread = _stats(values)
        _fold(norm, centre, _scales(spread), readers)
    return copy


def outlier_ratio(model, images, batch_size=32):
    """How uneven the channels after the model's LayerNorms are: over every LayerNorm the rewrite reads
    (`balance_layer_norms`), the largest ratio of a channel's half-range to the median channel's, on `images`
    (float32, the range the model takes). About 1-5 on a ViT without outlier channels; `with_outlier_channels`'
    factor 30 reads about 30 (an int8 tensor with one scale then spends most of its levels on those channels).

    Returns:
        float >= 1, or None for a model `rewritable` refuses.
    """
    if not rewritable(model):
        return None
    spreads = [_stats(values)[1] for values in _norm_outputs(model, images, batch_size)]
    return float(max(spread.max() / max(np.median(spread), 1e-12) for spread in spreads))


def with_outlier_channels(model, channels=(0, 1, 2, 3), factor=30.0):
    """A copy of a keras_vit ViT with a trained ViT's post-LayerNorm outlier channels, made exactly: the function is
    the same (within float32 rounding, `check_exact`), the int8 activations are not.

    For every LayerNorm the rewrite reads (`balance_layer_norms`), the `channels`' gamma and beta are multiplied by
    `factor` and the rows of the kernels that read them divided by it: `_fold` with centre 0 and scale 1 / factor on
    those channels (issue 45: "gamma and beta of 4 channels times 30, the next projections' kernel rows divided by
    30"). The LLM.int8 / RepQ-ViT observation that trained transformers have a few such channels, reproduced on a
    small model for tests and benchmarks.

    Args:
        model: a model `balance_layer_norms` takes (`rewritable`).
        channels: channel indices in [0, hidden_size).
        factor: float > 0, how much wider those channels become.

    Raises:
        ValueError: a model `rewritable` refuses, a channel out of range or a factor <= 0.
    """
    if not rewritable(model):
        raise ValueError("with_outlier_channels needs a keras_vit ViT with encoder blocks, `encoder_norm`, `pooling` "
                         "and a Dense head `predictions`")
    width = model.get_layer("encoder_norm").get_weights()[0].shape[0]
    if not channels or any(not 0 <= int(c) < width for c in channels) or not factor > 0:
        raise ValueError(f"`channels` must be indices in [0, {width}) and `factor` > 0. "
                         f"Received: channels={channels!r}, factor={factor!r}")
    copy = keras.models.clone_model(model)
    copy.set_weights(model.get_weights())
    scale = np.ones(width)
    scale[list(channels)] = 1.0 / factor
    centre = np.zeros(width)
    for norm, readers in _rewrites(copy):
        _fold(norm, centre, scale, readers)
    return copy


def check_exact(original, rewritten, images, tolerance=EXACT_TOLERANCE, batch_size=32):
    """Proves a rewrite exact on the float model: max |rewritten - original| / max |original| over `images`.

    Returns:
        float, the relative difference.

    Raises:
        RuntimeError: it is above `tolerance` (the rewrite changed what the model computes).
    """
    a = np.asarray(_run(original, images, batch_size), "float64")
    b = np.asarray(_run(rewritten, images, batch_size), "float64")
    relative = float(np.abs(a - b).max() / max(np.abs(a).max(), 1e-12))
    if relative > tolerance:
        raise RuntimeError(f"the LayerNorm reparameterisation is not exact: outputs differ by {relative:.2e} of their "
                           f"largest value (allowed {tolerance:g})")
    return relative


def balanced_graph(graph, samples):
    """`(graph, owned)`: a `ServingGraph` of the same settings whose model has balanced LayerNorms, proven exact.

    Args:
        graph: an `export.signature.ServingGraph`.
        samples: float32 calibration images `(n, h, w, c)` in the artifact's input range (`graph.input_range`), or
            None: the rewrite from the weights alone (`balance_layer_norms(model, None)`), proven exact on 8 seeded
            images.

    Returns:
        `(new graph, True)` (the caller closes it), or `(graph, False)` where the model is not a ViT this rewrite
        knows (a ViT nested in a wrapper model), or, with `samples` None, has no outlier channel: then nothing is
        rewritten.

    Raises:
        RuntimeError: the rewrite is not exact on the first 64 samples (`check_exact`).
    """
    model = graph.model
    if not rewritable(model):
        return graph, False
    if samples is None and not _weight_outliers(model):
        return graph, False  # no outlier channel: the rewrite would change nothing, so no second serving graph
    if samples is None:
        lo, hi = graph.model_range
        images = np.random.default_rng(0).uniform(lo, hi, (8, *graph.image_shape)).astype("float32")
        balanced = balance_layer_norms(model, None)
    else:
        images = np.asarray(scale(samples, graph.input_range, graph.model_range), "float32")
        balanced = balance_layer_norms(model, images)
    check_exact(model, balanced, images[:64])
    new = ServingGraph(balanced, graph.include_preprocessing, graph.batch_size, graph.scores, graph.image_shape[:2],
                       graph.dynamic_size, graph.model_range)
    new.source, new.source_policy, new.class_names = graph.source, graph.source_policy, graph.class_names
    return new, True
