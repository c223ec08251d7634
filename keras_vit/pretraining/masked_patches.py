"""Masked patch prediction's data side (ViT paper, Sec. 4.6 and Appendix B.1.2): targets, corruption, dataset.

The targets of each patch (`patch_targets`), the seeded stateless corruption
mask (`corruption`) and the `tf.data` map that pairs them with
`keras_vit.data` batches (`masked_patch_dataset`). Public through
`keras_vit.pretraining`, which adds the model and its compilation; see that
module for the method and its limitations.

>>> from keras_vit import pretraining
>>> pretraining.TARGETS
('mean_color', 'downsized', 'full')
"""

import numbers

import numpy as np

from keras_vit.common.backend import tensorflow

tf = tensorflow("Masked patch prediction's data side (keras_vit.pretraining: targets, corruption, tf.data)")

from keras_vit.common.validation import check_choice, check_positive_int, is_int  # noqa: E402

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
