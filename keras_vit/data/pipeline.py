"""The pipeline every `keras_vit.data` loader ends in: shuffle, decode, convert, resize, augment, scale, batch.

`finish` is that tail (see `keras_vit.data`'s module doc for what it
yields); the argument checks the loaders share are here too.
"""

import numpy as np

from keras_vit.common.backend import tensorflow

tf = tensorflow("keras_vit.data (tf.data input pipelines)")

from keras_vit import augmentation  # noqa: E402
from keras_vit.common.validation import check_choice, check_positive_int  # noqa: E402

AUGMENTATIONS = augmentation.GEOMETRIC


def _size_pair(image_size):
    pair = image_size
    if isinstance(image_size, int) and not isinstance(image_size, bool):
        pair = (image_size, image_size)
    try:
        height, width = pair
        check_positive_int("image_size", height)
        check_positive_int("image_size", width)
    except (TypeError, ValueError):
        raise ValueError(
            f"`image_size` must be a positive int or a (height, width) pair. Received: image_size={image_size!r}"
        ) from None
    return int(height), int(width)


def check_pipeline_args(image_size, channels, batch_size, augment, seed):
    """Checks the arguments every pipeline shares; returns `image_size` as `(height, width)`."""
    size = _size_pair(image_size)
    check_choice("channels", channels, (1, 3))
    check_positive_int("batch_size", batch_size)
    check_choice("augment", augment, AUGMENTATIONS)
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise ValueError(f"`seed` must be None or an int >= 0. Received: seed={seed!r}")
    return size


def check_channels_last(function):
    """Raises ValueError when the global Keras image data format is not channels_last."""
    import keras

    data_format = keras.config.image_data_format()
    if data_format != "channels_last":
        raise ValueError(
            f"keras_vit.data.{function} yields channels-last batches (batch, height, width, channels), the only "
            "layout keras_vit models read: keras_vit models are channels_last. Call "
            "keras.config.set_image_data_format('channels_last') before building the pipeline. "
            f"Received: keras.config.image_data_format()={data_format!r}"
        )


def _to_channels(image, channels):
    """float32 `(height, width, c)`, c = 1 to 4 (grey, grey + alpha, RGB, RGBA) -> `(height, width, channels)`.

    Drops alpha, repeats grey to RGB, and makes RGB grey with the ITU-R 601-2
    luma (299 R + 587 G + 114 B) / 1000, PIL's `convert("L")` without its
    rounding (exact for grey pixels R = G = B). `c` may be unknown until the
    image is read (decoded files).
    """

    def from_colour():
        rgb = image[..., :3]
        if channels == 3:
            return rgb
        return (299.0 * rgb[..., :1] + 587.0 * rgb[..., 1:2] + 114.0 * rgb[..., 2:]) / 1000.0

    def from_grey():
        return tf.repeat(image[..., :1], channels, axis=-1)

    if image.shape[-1] is not None:
        return from_colour() if image.shape[-1] >= 3 else from_grey()
    converted = tf.cond(tf.shape(image)[-1] >= 3, from_colour, from_grey)
    return tf.ensure_shape(converted, [None, None, channels])


def augmentations(rand_augment, random_erasing, mixup_alpha, cutmix_alpha, class_names, labels=(), labelled=True):
    """`finish`'s `per_image` and `per_batch` functions (`keras_vit.augmentation`); checks the four arguments.

    The class count (the one-hot labels' width) is `len(class_names)`, else
    (arrays) the largest label + 1.

    Raises:
        ValueError: an argument out of range, Mixup / CutMix with fewer than
            2 classes, or on images without labels.
    """
    classes = len(class_names) if class_names is not None else None
    if classes is None and labels is not None and len(labels):
        classes = int(np.max(labels)) + 1
    if (mixup_alpha or cutmix_alpha) and not labelled:
        raise ValueError(f"`mixup_alpha` and `cutmix_alpha` mix labels, and the images have none (labels=None). "
                         f"Received: mixup_alpha={mixup_alpha!r}, cutmix_alpha={cutmix_alpha!r}")
    augmentation.check_augmentation(rand_augment=rand_augment, random_erasing=random_erasing,
                                    mixup_alpha=mixup_alpha, cutmix_alpha=cutmix_alpha, classes=classes or 0)
    return {"per_image": augmentation.image_augmentation(rand_augment, random_erasing),
            "per_batch": augmentation.batch_mixing(mixup_alpha, cutmix_alpha, classes)}


def finish(ds, image_size, channels, batch_size, shuffle, augment, seed, class_names, count, decode=None,
            per_image=None, per_batch=None):
    """Shuffle, (decode), convert, resize, augment, scale, batch and prefetch.

    `decode`, if given, maps each element's image part (a tuple of its
    arguments, e.g. a file name) to a float32 `(height, width, c)` image; it
    runs after the shuffle, in the same parallel map as the rest.
    `per_image(image, key)` (RandAugment, random erasing) runs after the
    geometric `augment`, on pixels in [0, 255]; `per_batch(images, labels,
    key)` (Mixup, CutMix) after batching, with a stream of keys of its own.
    """
    height, width = check_pipeline_args(image_size, channels, batch_size, augment, seed)

    if shuffle:
        buffer = count if count and count > 0 else 10_000
        ds = ds.shuffle(min(buffer, 50_000), seed=seed, reshuffle_each_iteration=True)

    def prepare(image, *label, key=None):
        if decode is not None:
            image = decode(*image)
        image = tf.cast(image, tf.float32)
        if image.shape.rank == 2:
            image = image[..., None]
        # Resize, then convert the channels: both are linear, so the order only changes the cost.
        image = tf.image.resize(image, (height, width), method="bilinear", antialias=True)
        image = _to_channels(image, channels)
        if augment is not None:
            image = augmentation.geometric(image, augment, key, height, width, channels)
        if per_image is not None:
            image = per_image(image, tf.random.experimental.stateless_fold_in(key, 1))
        image = image / 127.5 - 1.0  # keras_vit.preprocess_input's scaling, in TensorFlow ops (see geometric)
        return (image, *label) if label else image

    if augment is None and per_image is None:
        ds = ds.map(prepare, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    else:
        # Stateless random ops keyed by a seeded random stream (new keys each epoch): the augmentation
        # is the same on every run with the same seed, even with parallel map calls.
        keys = tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True).batch(2)
        ds = tf.data.Dataset.zip((ds, keys)).map(
            lambda element, key: prepare(*(element if isinstance(element, tuple) else (element,)), key=key),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        )
    ds = ds.batch(batch_size, drop_remainder=False)
    if per_batch is not None:
        # A stream of its own (the seed's second stream), so that adding Mixup leaves each image's keys as they were.
        batch_keys = tf.data.Dataset.random(seed=None if seed is None else seed + 1,
                                            rerandomize_each_iteration=True).batch(2)
        ds = tf.data.Dataset.zip((ds, batch_keys)).map(lambda batch, key: per_batch(*batch, key),
                                                        num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    ds = ds.prefetch(tf.data.AUTOTUNE)
    ds.class_names = class_names
    ds.num_examples = count
    return ds
