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

import numbers

import keras
import numpy as np
import tensorflow as tf
from keras import ops

from keras_vit._validation import check_bool, check_choice, check_positive_int, is_int

# "downsized" is the cell area-averaged to 4 x 4 pixels: with a 4-px cell it equals "full"; with cells smaller than
# 4 px it is upsampled (a 2-px cell's pixels each repeated twice a side), not downsized.
TARGETS = ("mean_color", "downsized", "full")
COLOR_LEVELS = 8  # 3 bits per channel (Appendix B.1.2: "3-bit, mean color (i.e., 512 colors in total)")
DOWNSIZED_SIDE = 4  # the "4 x 4 downsized version of the 16 x 16 patch"
# Added to 8 x (mean + 1) / 2 before the floor of the "mean_color" level. For images from 8-bit pixels p scaled by
# p / 127.5 - 1 in float32 (keras_vit.preprocess_input), a mean on a level edge lies exactly on it in real numbers,
# but each float32 pixel is off by up to 2 ** -23 + 2 ** -25 (< 1.5e-7), so the mean's level by up to 6e-7: without
# the nudge 10 of 19,200 patches of scikit-learn's two sample images (4-px cells) fell to the level below. The
# nearest mean off an edge lies 8 / (255 n) levels away for n pixels per patch, more than 2 ** -18 + 6e-7 for
# n < 6,000 (cells up to 77 px): there the levels are exact. Any other mean within 2 ** -18 of a level below an
# edge (1e-6 in [-1, 1] units) counts as the level above.
LEVEL_EPSILON = 2.0**-18
# Corruption kinds (the `corruption` tensor's values)
UNTOUCHED, MASKED, REPLACED, KEPT = 0, 1, 2, 3
# Shares of the corrupted patches (Appendix B.1.2, after BERT, Devlin et al. 2019)
MASK_SHARE, REPLACE_SHARE = 0.8, 0.1


def _check_corruption_rate(corruption_rate):
    """Returns `corruption_rate` as a float if it is a real number (NumPy floats too) in (0, 1); else ValueError."""
    if (
        isinstance(corruption_rate, (bool, np.bool_))
        or not isinstance(corruption_rate, numbers.Real)
        or not 0 < corruption_rate < 1
    ):
        raise ValueError(
            f"`corruption_rate` must be a float in (0, 1) (the paper uses 0.5). Received: corruption_rate={corruption_rate!r}"
        )
    return float(corruption_rate)


def _corrupted_count(rate, num_patches):
    """k = max(1, floor(rate * N + 0.5)) in float32, as `corruption` computes it in TensorFlow."""
    return max(1, int(np.floor(np.float32(rate) * np.float32(num_patches) + np.float32(0.5))))


def _check_leaves_a_patch(rate, num_patches):
    """Raises ValueError when `rate` would corrupt all `num_patches` (an int) patches of each image."""
    count = _corrupted_count(rate, num_patches)
    if count >= num_patches:
        raise ValueError(
            "`corruption_rate` must leave at least one patch of each image untouched (the model predicts the "
            f"corrupted ones from the others): corruption_rate={rate!r} corrupts {count} of the {num_patches} patches "
            f"of each image (max(1, {rate!r} x {num_patches} rounded half up)), none untouched. Use a lower rate or "
            "more patches per image (a larger image or a smaller patch). Received: "
            f"corruption_rate={rate!r} with {num_patches} patches per image"
        )


def target_size(target, cell_size, channels):
    """The number of outputs per patch of the prediction head for `target`.

    Args:
        target: one of `TARGETS`.
        cell_size: int >= 1, the side in pixels of the image area of one
            token (see `backbone_cell_size`).
        channels: int >= 1, image channels C.

    Returns:
        int: 8 ** C classes for "mean_color", 4 * 4 * C for "downsized",
        cell_size ** 2 * C for "full".

    Raises:
        ValueError: unknown `target`, or `cell_size` / `channels` not
            positive ints.
    """
    check_choice("target", target, TARGETS)
    cell_size = check_positive_int("cell_size", cell_size)
    channels = check_positive_int("channels", channels)
    if target == "mean_color":
        return COLOR_LEVELS**channels
    side = DOWNSIZED_SIDE if target == "downsized" else cell_size
    return side * side * channels


def _area_matrix(cell_size, side=DOWNSIZED_SIDE):
    """(side, cell_size) float32: row i averages the pixels under output pixel i, weighted by their overlap."""
    scale = cell_size / side
    edges = np.arange(side + 1) * scale
    pixels = np.arange(cell_size)
    overlap = np.clip(np.minimum(edges[1:, None], pixels[None] + 1) - np.maximum(edges[:-1, None], pixels[None]), 0, None)
    return (overlap / scale).astype("float32")


def patch_targets(images, cell_size, target="mean_color"):
    """The masked-patch-prediction targets of every patch of a batch of images.

    Patches are the `cell_size` x `cell_size` pixel cells of the image in
    row-major grid order, the order of the backbone's patch tokens (for the
    hybrid, the image area under one token). Source: ViT paper
    (arXiv:2010.11929) Sec. 4.6 and Appendix B.1.2.

    Targets:
        "mean_color": each channel's mean over the patch (in float64),
            mapped from [-1, 1] to [0, 1] by (m + 1) / 2, quantised to 8
            levels (level = min(floor(8 m01 + 2 ** -18), 7): for images from
            8-bit pixels scaled as `keras_vit.preprocess_input` does, exactly
            the level of integer arithmetic, floor(8 sum(p) / (255 n)), for
            cells up to 77 px, edges included; see `LEVEL_EPSILON`); the class is
            sum_c level_c * 8 ** (C - 1 - c) (the first channel most
            significant): 512 classes for RGB, 8 for one channel.
        "downsized": the patch area-averaged to 4 x 4 pixels (each output
            pixel the mean of the input pixels under it, fractional overlaps
            weighted, so any cell size works), flattened (row, col, channel).
            Note: the paper's own second option predicts these 16 pixels as
            3-bit colours; here (as the issue asks) they are regressed. With
            `cell_size` 4 it equals "full"; with `cell_size` below 4 it
            upsamples (with 2, each pixel repeated twice a side).
        "full": the patch itself, flattened (row, col, channel) as
            `keras_vit.layers.Patches` flattens it.

    Args:
        images: float `(batch, height, width, channels)` in [-1, 1] (what
            `keras_vit.data` yields); height and width multiples of
            `cell_size`.
        cell_size: int >= 1, pixels per patch side: `patch_size` x the
            hybrid's ResNet output stride (1 for a pure ViT);
            `backbone_cell_size(backbone)`.
        target: "mean_color" (default), "downsized" or "full".

    Returns:
        "mean_color": int32 `(batch, num_patches)` in [0, 8 ** C);
        "downsized": float32 `(batch, num_patches, 16 * C)` in [-1, 1];
        "full": float32 `(batch, num_patches, cell_size ** 2 * C)` in
        [-1, 1]; num_patches = (height / cell_size) * (width / cell_size).

    Raises:
        ValueError: unknown `target`, `cell_size` not a positive int, images
            not of rank 4 with known channels, or a known height or width that
            is not a multiple of `cell_size`.

    Example:

    >>> import numpy as np
    >>> images = np.full((1, 8, 8, 3), -1.0, "float32")
    >>> images[:, :4, :4, 0] = 1.0  # top-left patch: full red
    >>> patch_targets(images, 4).numpy()  # red level 7 -> 7 * 64
    array([[448,   0,   0,   0]], dtype=int32)
    """
    check_choice("target", target, TARGETS)
    cell = check_positive_int("cell_size", cell_size)
    images = tf.convert_to_tensor(images)
    shape = images.shape
    if shape.rank != 4 or shape[-1] is None:
        raise ValueError(
            "`images` must have shape (batch, height, width, channels) with channels known. "
            f"Received: images with shape {tuple(shape) if shape.rank is not None else None}"
        )
    if any(d is not None and d % cell for d in shape[1:3]):
        raise ValueError(
            f"Image height and width must be multiples of cell_size={cell}. Received: images with shape {tuple(shape)}"
        )
    channels = shape[-1]
    images = tf.cast(images, tf.float32)
    dims = tf.shape(images)
    rows, cols = dims[1] // cell, dims[2] // cell
    # (B, H, W, C) -> (B, rows, cell, cols, cell, C) -> (B, rows, cols, cell, cell, C) -> (B, N, cell, cell, C)
    cells = tf.reshape(images, (dims[0], rows, cell, cols, cell, channels))
    cells = tf.transpose(cells, (0, 1, 3, 2, 4, 5))
    cells = tf.reshape(cells, (dims[0], rows * cols, cell, cell, channels))
    if target == "full":
        return tf.reshape(cells, (dims[0], rows * cols, cell * cell * channels))
    if target == "downsized":
        area = tf.constant(_area_matrix(cell))
        small = tf.einsum("ip,bnpqc,jq->bnijc", area, cells, area)
        return tf.reshape(small, (dims[0], rows * cols, DOWNSIZED_SIDE * DOWNSIZED_SIDE * channels))
    # The mean in float64 (a float32 sum drifts by up to n ulps), its level nudged up by LEVEL_EPSILON so that a
    # mean exactly on an edge (8 x pixel sum = k x 255 x n) is not read as the level below: see LEVEL_EPSILON.
    mean = (tf.reduce_mean(tf.cast(cells, tf.float64), axis=(2, 3)) + 1.0) / 2.0  # (B, N, C) in [0, 1]
    levels = tf.floor(mean * COLOR_LEVELS + LEVEL_EPSILON)
    levels = tf.clip_by_value(tf.cast(levels, tf.int32), 0, COLOR_LEVELS - 1)
    weights = tf.constant([COLOR_LEVELS ** (channels - 1 - c) for c in range(channels)], tf.int32)
    return tf.reduce_sum(levels * weights, axis=-1)


def corruption(seed, batch_size, num_patches, corruption_rate=0.5):
    """Draws which patches masked patch prediction corrupts, and how.

    The paper's rule (arXiv:2010.11929, Appendix B.1.2, after BERT): in each
    image exactly k = max(1, floor(corruption_rate * num_patches + 0.5))
    patches (rounded half up; at least one, so every image enters the loss)
    are chosen uniformly without replacement. Each chosen patch is, drawn
    independently, kind 1 with probability 0.8, kind 2 with 0.1, kind 3 with
    0.1 (so the counts of the kinds are binomial around 80/10/10).

    Kinds: 0 untouched (not in the loss); 1 replaced by the learnable
    `[mask]` embedding; 2 replaced by the (uncorrupted) projected embedding
    of another patch of the *same image*, chosen uniformly among its other
    num_patches - 1 patches (with a single patch there is no other: it is
    its own source, i.e. left as it is); 3 corrupted but left as it is.
    Same-image sources keep each image's corruption independent of the batch
    (its size, its order, the split across replicas).

    Stateless: the result is a function of `seed` and the shapes only
    (`tf.random.stateless_*`), on every device and in every run.

    Args:
        seed: int tensor or array of shape (2,) (int32 or int64), the
            stateless random seed.
        batch_size: int >= 1 or scalar int tensor.
        num_patches: int >= 1 or scalar int tensor, N.
        corruption_rate: real number in (0, 1) (NumPy floats too), default
            0.5 (the paper's; BERT's 0.15 the paper found slightly worse);
            it must leave at least one patch of each image untouched
            (k < N: with N = 16, rates from 0.97 corrupt all 16; with N = 1
            every rate does).

    Returns:
        `(kind, source)`, both int32 `(batch_size, num_patches)`: kind in
        {0, 1, 2, 3}; source the index in [0, N) of the patch whose
        embedding replaces this one for kind 2, and the patch's own index
        for every other kind (gathering by `source` is then the identity).

    Raises:
        ValueError: `corruption_rate` not a real number in (0, 1), or one
            that corrupts every patch (k >= num_patches) when `num_patches`
            is an int (with a tensor it is not checked here);
            `batch_size` / `num_patches` neither a positive int (Python or
            NumPy) nor an int32 / int64 tensor.

    Example:

    >>> kind, source = corruption(np.array([0, 0]), 4, 16)
    >>> (kind.numpy() > 0).sum(axis=1)
    array([8, 8, 8, 8])
    """
    rate = _check_corruption_rate(corruption_rate)
    for name, value in (("batch_size", batch_size), ("num_patches", num_patches)):
        integer_tensor = isinstance(value, (tf.Tensor, tf.Variable, np.ndarray)) and value.dtype in (
            tf.int32, tf.int64, np.int32, np.int64)
        if not integer_tensor and (not is_int(value) or value < 1):
            raise ValueError(f"`{name}` must be a positive int. Received: {name}={value!r}")
    if is_int(num_patches):
        _check_leaves_a_patch(corruption_rate, int(num_patches))
    seed = tf.convert_to_tensor(seed)
    if not seed.dtype.is_integer or not seed.shape.is_compatible_with((2,)):
        raise ValueError(f"`seed` must be an int tensor of shape (2,). Received: seed={seed!r}")
    batch_size = tf.cast(batch_size, tf.int32)
    num_patches = tf.cast(num_patches, tf.int32)
    shape = tf.stack([batch_size, num_patches])
    choose_seed, kind_seed, source_seed = tf.unstack(tf.random.experimental.stateless_split(seed, num=3))
    count = tf.maximum(1, tf.cast(tf.floor(rate * tf.cast(num_patches, tf.float32) + 0.5), tf.int32))
    # The `count` patches of lowest score in each image: a uniform choice without replacement.
    scores = tf.random.stateless_uniform(shape, choose_seed)
    ranks = tf.argsort(tf.argsort(scores, axis=1, stable=True), axis=1, stable=True)
    chosen = ranks < count
    draw = tf.random.stateless_uniform(shape, kind_seed)
    how = tf.where(draw < MASK_SHARE, MASKED, tf.where(draw < MASK_SHARE + REPLACE_SHARE, REPLACED, KEPT))
    kind = tf.where(chosen, how, UNTOUCHED)
    own = tf.broadcast_to(tf.range(num_patches)[None], shape)
    offset = tf.random.stateless_uniform(shape, source_seed, 0, tf.maximum(num_patches - 1, 1), dtype=tf.int32)
    other = tf.where(num_patches > 1, (own + 1 + offset) % num_patches, own)
    source = tf.where(kind == REPLACED, other, own)
    return tf.cast(kind, tf.int32), tf.cast(source, tf.int32)


def masked_patch_dataset(dataset, cell_size, *, target="mean_color", corruption_rate=0.5, seed=0):
    """Maps a batched image dataset to masked-patch-prediction training examples.

    Each batch of images (labels, if any, are dropped: the objective needs
    none) gets a corruption drawn by `corruption` and the targets of
    `patch_targets`. The keys of the stateless draws come from a seeded
    `tf.data.Dataset.random` stream that starts anew each epoch, exactly as
    `keras_vit.data`'s augmentation: the same seed gives the same masks, batch
    by batch and epoch by epoch, in every run (and new masks each epoch, as
    BERT's dynamic masking). As for all of TensorFlow's seeded random ops,
    the stream also depends on TensorFlow's global seed
    (`tf.random.set_seed`, `keras.utils.set_random_seed`) when one is set.

    Args:
        dataset: a batched `tf.data.Dataset` of images, or of
            `(images, labels)` (as `keras_vit.data` yields): images float
            `(batch, height, width, channels)` in [-1, 1], height and width
            multiples of `cell_size`.
        cell_size: int >= 1, `backbone_cell_size(backbone)`.
        target: "mean_color" (default), "downsized" or "full".
        corruption_rate: real number in (0, 1), default 0.5; must leave a
            patch of each image untouched (see `corruption`).
        seed: int >= 0, default 0.

    Returns:
        A `tf.data.Dataset` of `(inputs, targets, weights)`: inputs a dict
        {"images": the images, "corruption": int32 `(batch, N)` kinds,
        "source": int32 `(batch, N)`} (see `corruption`); targets as
        `patch_targets` returns them; weights float32 `(batch, N)`, 1 for
        corrupted patches (kind != 0) and 0 elsewhere, so that only they
        enter the loss. `num_examples` is carried over from `dataset`.

    Raises:
        ValueError: `dataset` is not a `tf.data.Dataset` of images or
            (images, labels) of rank 4; images not of a floating dtype (e.g.
            uint8 pixels: scale them with `keras_vit.preprocess_input`); an
            unknown `target`; `cell_size` not a positive int or not dividing
            a known height or width; `corruption_rate` outside (0, 1), or,
            when the images' height and width are known, one that corrupts
            every patch of an image (see `corruption`); `seed` not an
            int >= 0.
    """
    check_choice("target", target, TARGETS)
    cell = check_positive_int("cell_size", cell_size)
    rate = _check_corruption_rate(corruption_rate)
    if not is_int(seed) or seed < 0:
        raise ValueError(f"`seed` must be an int >= 0. Received: seed={seed!r}")
    if not isinstance(dataset, tf.data.Dataset):
        raise ValueError(f"`dataset` must be a tf.data.Dataset. Received: dataset of type {type(dataset).__name__}")
    spec = dataset.element_spec
    image_spec = spec[0] if isinstance(spec, tuple) else spec
    if not isinstance(image_spec, tf.TensorSpec) or image_spec.shape.rank != 4:
        raise ValueError(
            "`dataset` must yield batches of images (batch, height, width, channels) or (images, labels). "
            f"Received: dataset with element_spec={spec}"
        )
    if not image_spec.dtype.is_floating:
        raise ValueError(
            "`dataset`'s images must be floats in [-1, 1], as keras_vit.data yields them (the mean-colour levels "
            "read [-1, 1]; keras_vit.preprocess_input maps pixels in [0, 255] there). Received: dataset of images "
            f"of dtype {image_spec.dtype.name}"
        )
    if any(d is not None and d % cell for d in image_spec.shape[1:3]):
        raise ValueError(
            f"Image height and width must be multiples of cell_size={cell}. Received: dataset of images "
            f"{tuple(image_spec.shape)}"
        )
    height, width = image_spec.shape[1:3]
    if height is not None and width is not None:
        _check_leaves_a_patch(corruption_rate, (height // cell) * (width // cell))

    def prepare(element, key):
        images = element[0] if isinstance(element, tuple) else element
        dims = tf.shape(images)
        kind, source = corruption(key, dims[0], (dims[1] // cell) * (dims[2] // cell), rate)
        targets = patch_targets(images, cell, target)
        inputs = {"images": images, "corruption": kind, "source": source}
        return inputs, targets, tf.cast(kind != UNTOUCHED, tf.float32)

    keys = tf.data.Dataset.random(seed=int(seed), rerandomize_each_iteration=True).batch(2, drop_remainder=True)
    mapped = tf.data.Dataset.zip((dataset, keys)).map(prepare, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    mapped.num_examples = getattr(dataset, "num_examples", None)
    return mapped


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
    from keras_vit.models.resnet import output_stride
    from keras_vit.weights.loader import resnet_num_layers

    patches = _backbone_layers(backbone)[0]
    stages = resnet_num_layers(backbone)
    return patches.patch_size * (output_stride(stages) if stages else 1)


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
        return x[:, 1:] if self._encoder.class_token else x

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
    jit_compile=True,
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
        jit_compile: bool, default True (XLA).

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
    check_bool("jit_compile", jit_compile)
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
