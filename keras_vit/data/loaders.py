"""tf.data input pipelines for ViT: TFDS, image folders, NumPy arrays, digits.

Every loader ends in the same pipeline (`keras_vit.data.pipeline.finish`): optional shuffle with a
seed, conversion to `channels`, bilinear resize to `image_size`, optional
augmentation (geometric, then RandAugment and random erasing:
`keras_vit.augmentation`), scaling to [-1, 1] with
`keras_vit.preprocess_input` (the reference `(x - 127.5) / 127.5`),
batching that keeps the partial last batch, optional Mixup / CutMix, and
`prefetch(AUTOTUNE)`. Each returned dataset yields `(images, labels)`:
images float32 `(batch, height, width, channels)` in [-1, 1], labels int32
`(batch,)` (float32 `(batch, classes)`, mixed one-hot, with Mixup or
CutMix); it carries the class names as
`dataset.class_names`, as `keras.utils.image_dataset_from_directory` does,
and the number of examples (None when unknown) as `dataset.num_examples`.

Batches are always channels-last, `(batch, height, width, channels)`, the
only layout keras_vit's models read, whatever
`keras.config.image_data_format()` says. So that a channels_first setting
cannot go unnoticed, every pipeline function raises `ValueError` when it is
"channels_first"; call `keras.config.set_image_data_format("channels_last")`
first.

Channel conversion (all loaders): an alpha channel is dropped (not
composited), grey is repeated to RGB, and RGB becomes grey by the ITU-R
601-2 luma `(299 R + 587 G + 114 B) / 1000`, the weights PIL's
`convert("L")` uses (PIL rounds the result to an integer; this does not).
"""

import os

import numpy as np

from keras_vit.common.backend import tensorflow

tf = tensorflow("keras_vit.data (tf.data input pipelines)")

from keras_vit import augmentation  # noqa: E402
from keras_vit.data import pipeline as _pipeline
from keras_vit.data.image_files import (  # noqa: E402
    MAX_PIXELS, check_decodable, check_image_file, file_decoder, check_max_pixels,
)
from keras_vit.data.image_folder import IMAGE_EXTENSIONS, count_images, list_image_folder  # noqa: E402, F401
from keras_vit.data.subsets import labels_subset  # noqa: E402
from keras_vit.data.arrays import check_labels, to_pixels  # noqa: E402
from keras_vit.common.validation import check_choice  # noqa: E402

AUGMENTATIONS = _pipeline.AUGMENTATIONS
DIGITS_VALIDATION_FRACTION = 0.2
DIGITS_SPLIT_SEED = 0


def load_digits():
    """Loads scikit-learn's handwritten digits with a fixed stratified split.

    The 1,797 8x8 grey-level scans of the UCI "Optical Recognition of
    Handwritten Digits" set, which ship with scikit-learn (no download). The
    held-out split is a stratified 20% (360 images), always the same
    (`train_test_split(..., stratify=labels, random_state=0)`).

    Returns:
        `((x_train, y_train), (x_val, y_val), class_names)`: images float32
        of shape `(n, 8, 8, 1)` with pixels in [0, 255] (the original 0..16
        levels times 255/16), labels int32 in 0..9, class names "0".."9".
    """
    from sklearn.datasets import load_digits as sk_load_digits
    from sklearn.model_selection import train_test_split

    digits = sk_load_digits()
    images = (digits.images * (255.0 / 16.0)).astype("float32")[..., None]
    labels = digits.target.astype("int32")
    x_train, x_val, y_train, y_val = train_test_split(
        images,
        labels,
        test_size=DIGITS_VALIDATION_FRACTION,
        stratify=labels,
        random_state=DIGITS_SPLIT_SEED,
    )
    return (x_train, y_train), (x_val, y_val), [str(d) for d in range(10)]


def digits(
    split="train",
    *,
    image_size=32,
    channels=3,
    batch_size=32,
    shuffle=None,
    augment=None,
    rand_augment=None,
    random_erasing=0.0,
    mixup_alpha=0.0,
    cutmix_alpha=0.0,
    seed=None,
    labels_fraction=None,
):
    """The `digits` data set (see `load_digits`) as a ready tf.data pipeline.

    Args:
        split: "train" (1,437 images) or "validation" (360 images).
        image_size, channels, batch_size, shuffle, augment, rand_augment,
            random_erasing, mixup_alpha, cutmix_alpha, seed,
            labels_fraction: as in `from_arrays`. `shuffle` defaults to
            True for "train", False for "validation".

    Returns:
        A `tf.data.Dataset` of `(images, labels)`: images float32
        `(batch, height, width, channels)` (channels-last) in [-1, 1],
        labels int32 `(batch,)`, or float32 `(batch, 10)` with Mixup or
        CutMix (see the module doc).

    Raises:
        ValueError: unknown `split`, a bad pipeline argument, or
            `keras.config.image_data_format()` is "channels_first".
    """
    _pipeline.check_channels_last("digits")
    check_choice("split", split, ("train", "validation"))
    train, val, class_names = load_digits()
    images, labels = train if split == "train" else val
    if shuffle is None:
        shuffle = split == "train"
    return from_arrays(
        images,
        labels,
        image_size=image_size,
        channels=channels,
        batch_size=batch_size,
        shuffle=shuffle,
        augment=augment,
        seed=seed,
        class_names=class_names,
        labels_fraction=labels_fraction,
        rand_augment=rand_augment,
        random_erasing=random_erasing,
        mixup_alpha=mixup_alpha,
        cutmix_alpha=cutmix_alpha,
    )


def from_arrays(
    images,
    labels,
    *,
    image_size,
    channels=3,
    batch_size=32,
    shuffle=False,
    augment=None,
    rand_augment=None,
    random_erasing=0.0,
    mixup_alpha=0.0,
    cutmix_alpha=0.0,
    seed=None,
    class_names=None,
    labels_fraction=None,
    input_range=(0, 255),
):
    """Builds the pipeline from NumPy arrays.

    Args:
        images: array `(n, height, width)` or `(n, height, width, c)` with c
            in {1, 3}, pixels in `input_range`, any real or integer dtype.
        input_range: the range the pixels of `images` are in: (0, 255)
            (default), (0, 1) or (-1, 1); they are scaled to [0, 255]
            first. Values outside it are refused, and so are float arrays
            given as (0, 255) whose values all lie in [-1, 1] and are not
            whole numbers: images already scaled, which would be divided
            again into nearly constant pictures.
        labels: int array `(n,)` of class indices, or None for images only.
        image_size: int or (height, width): the model's input size in pixels.
        channels: 1 or 3, default 3. Grey images are repeated to RGB; RGB is
            converted to grey with the ITU-R 601-2 luma (module doc).
        batch_size: int >= 1; the last batch may be smaller.
        shuffle: bool, default False. Shuffle all examples each epoch.
        augment: None, "crop" (resize to 1.125x, random crop back),
            "crop_flip" (the same plus a random horizontal flip, for photos;
            not for digits or text) or "affine" (random rotation up to
            +-11 degrees and zoom up to +-10%, then "crop"; for digits and
            characters).
        rand_augment: None (default) or `(num_ops, magnitude)`: Keras'
            `RandAugment` on each image after `augment`, num_ops in [1, 11],
            magnitude RandAugment's M in [0, 30] (AugReg: (2, 10) to
            (2, 20); DeiT: (2, 9)); see `keras_vit.augmentation`.
        random_erasing: float in [0, 1], default 0: the probability of
            erasing a random rectangle of an image (Keras' `RandomErasing`).
        mixup_alpha: float in [0, 10], default 0 (off): Keras' `MixUp` on
            each batch, weights ~ Beta(alpha, alpha). Labels become one-hot
            rows of `len(class_names)` classes, or of the largest label + 1
            without `class_names` (give `class_names` when a class may be
            missing from `labels`).
        cutmix_alpha: float in [0, 1], default 0 (off): Keras' `CutMix` on
            each batch. With `mixup_alpha` too, each batch gets one of the
            two, with probability 1/2 (DeiT).
        seed: int or None, seed of the shuffle and the augmentation. The
            augmentation uses stateless random ops keyed by a seeded stream,
            so with a seed every run yields the same images (new ones each
            epoch), even with parallel map calls.
        class_names: optional list of names, stored as
            `dataset.class_names`; every label must index it.
        labels_fraction: None (default: every example) or a float in
            (0, 1]: keep only `stratified_subset(labels, labels_fraction,
            seed=seed or 0)`, a seeded share of each class (needs labels).

    Returns:
        A `tf.data.Dataset` of `(images, labels)`, or of images when
        `labels` is None: images float32 `(batch, height, width, channels)`
        (channels-last) in [-1, 1], labels int32 `(batch,)`; with Mixup or
        CutMix float32 `(batch, classes)`, mixed one-hot rows that sum to 1
        (`keras_vit.training.compile_model`'s loss and accuracy take both).

    Raises:
        ValueError: a RandAugment, erasing or mixing argument out of range,
            or Mixup / CutMix with fewer than 2 classes or no labels (the
            message names the argument); images of the wrong rank or channel count; labels whose
            length differs from the images', that are not integers, are
            negative or do not index `class_names`; a bad pipeline argument;
            a `labels_fraction` outside (0, 1], without labels, or that
            leaves a class with no example (see `stratified_subset`);
            `keras.config.image_data_format()` is "channels_first" (images
            are always read and yielded channels-last); an `input_range`
            other than the three, images outside it, or images that look
            already scaled (above).
    """
    _pipeline.check_channels_last("from_arrays")
    images = np.asarray(images)
    if images.ndim == 3:
        images = images[..., None]
    if images.ndim != 4 or images.shape[-1] not in (1, 3):
        raise ValueError(
            "`images` must have shape (n, height, width) or (n, height, width, 1 or 3). "
            f"Received: images with shape {images.shape}"
        )
    images = to_pixels(images, input_range)
    if labels is None:
        if labels_fraction is not None:
            raise ValueError(f"`labels_fraction` needs `labels`. Received: labels=None, labels_fraction={labels_fraction!r}")
        ds = tf.data.Dataset.from_tensor_slices(images)
    else:
        labels = check_labels(labels, len(images), class_names)
        keep = labels_subset(labels, labels_fraction, seed, class_names)
        if keep is not None:
            images, labels = images[keep], labels[keep]
        ds = tf.data.Dataset.from_tensor_slices((images, labels))
    mixing = _pipeline.augmentations(rand_augment, random_erasing, mixup_alpha, cutmix_alpha, class_names, labels,
                           labelled=labels is not None)
    return _pipeline.finish(ds, image_size, channels, batch_size, shuffle, augment, seed, class_names, len(images), **mixing)


def from_directory(
    directory,
    *,
    image_size,
    channels=3,
    batch_size=32,
    shuffle=False,
    augment=None,
    rand_augment=None,
    random_erasing=0.0,
    mixup_alpha=0.0,
    cutmix_alpha=0.0,
    seed=None,
    validation_split=None,
    subset=None,
    labels_fraction=None,
    exif_orientation=True,
    max_pixels=MAX_PIXELS,
    class_names=None,
):
    """Builds the pipeline from a folder with one sub-folder per class.

    Files are listed as `keras.utils.image_dataset_from_directory` lists
    them, with its own function (extensions .bmp, .gif, .jpeg, .jpg, .png,
    and .webp, which Keras leaves out; class indices follow the sorted
    sub-folder names). `validation_split` holds out that share of each
    class's files from a seeded shuffle (stratified, unlike Keras' single
    cut, so that a small class is never held out whole:
    `keras_vit.data.image_folder`). Files are then decoded
    here, so that every colour mode of these formats gives its pixels with
    either `channels`:

    - JPEG: grey, RGB and CMYK, with the accurate integer IDCT
      (`dct_method="INTEGER_ACCURATE"`), the one libjpeg's tools and PIL use;
      TensorFlow's default (fast) IDCT differs by up to 16 levels.
    - PNG: 1- to 16-bit grey, grey + alpha, RGB, RGBA, palette (with or
      without transparency). A 16-bit value v is read as v / 257, so that
      65535 is 255.
    - BMP: 1-, 4- and 8-bit palette images, 24- and 32-bit, bottom-up or
      top-down, uncompressed (32-bit also with the standard bit fields).
    - GIF: the first frame; transparent pixels take their palette colour.
    - WebP: lossy and lossless, RGB and RGBA (libwebp's pixels, as PIL's).

    With `exif_orientation` (the default) a JPEG, PNG or WebP that carries
    an EXIF Orientation tag (a phone's portrait photo: pixels stored
    sideways, tag 6 or 8) is turned upright first, as photo viewers,
    MediaPipe Tasks and browsers show it and as `PIL.ImageOps.exif_transpose`
    does (`keras_vit.data.exif`): training, evaluation, calibration and
    verification see what an app that applies the tag sees. Keras'
    `image_dataset_from_directory` and `tf.io.decode_jpeg` ignore the tag.

    A class folder with no file of these formats is refused, naming it;
    files in image formats keras_vit does not read (TIFF, HEIC, AVIF, ...)
    are named in one WARNING log line (logger "keras_vit.data").

    Channels are then converted as the module doc says (alpha dropped, grey
    repeated, luma for grey), so each image is PIL's
    `Image.open(file).convert("RGB")` (or `"L"`, but not rounded to whole
    levels), read at its own size and resized to `image_size`. Decoding and
    resizing run in one parallel, deterministic map; `shuffle` shuffles the
    file names before anything is read.

    Before returning, `from_directory` reads the first bytes of every .bmp
    and .gif file (not of the JPEG and PNG files): a BMP it cannot decode
    (RLE-compressed, 16 bits per pixel, an OS/2 header, other bit fields) is
    refused then, with the file's name. Then every listed file (of
    `subset`, after `labels_fraction`) is decoded once with the pipeline's
    own decoder (`keras_vit.data.image_files.check_decodable`; about 0.3 ms a
    small file on a 2-core CPU: 0.66 s for 2,000 PNGs of 32x32 px), so that
    an empty, cut-short, unreadable or non-image file is refused here,
    named by its path, rather than failing the first training step. When
    one fails with `validation_split`, the other subset's files are checked
    too, so that the message counts every bad file of the folder.

    Args:
        directory: path of the folder, e.g. `photos/` with `photos/cat/*.jpg`
            and `photos/dog/*.jpg`.
        validation_split: None or float in (0, 1): the fraction held out.
        subset: with `validation_split`, "training" or "validation".
        seed: int; required with `validation_split` so that both subsets
            come from the same split. Also seeds shuffle and augmentation.
        labels_fraction: None or a float in (0, 1]: keep a seeded,
            stratified share of the files listed (of `subset`, after the
            split), as in `from_arrays`.
        exif_orientation: bool, default True: apply each file's EXIF
            Orientation (all 8 values); False keeps the stored pixels, for
            data sets that were already turned upright without removing
            the tag.
        max_pixels: int or None, default 89,478,485 (PIL's
            `Image.MAX_IMAGE_PIXELS`, `keras_vit.data.image_files.MAX_PIXELS`):
            a file whose header gives more pixels (width x height) is refused,
            named, before it is decoded (a 1 MB PNG can hold 20000 x 20000
            pixels, 4.8 GB as float32 RGB); None: no limit.
        class_names: None, or a list of str, the class names in label
            order (as `keras.utils.image_dataset_from_directory` takes it),
            e.g. the training set's `.class_names` for a held-out folder:
            each class folder gets its name's index, so that a folder that
            lacks a class does not shift the others' labels. A class folder
            not in the list is refused. None: the sorted folder names.
        image_size, channels, batch_size, shuffle, augment, rand_augment,
            random_erasing, mixup_alpha, cutmix_alpha: as in `from_arrays`.

    Returns:
        A `tf.data.Dataset` of `(images, labels)`: images float32
        `(batch, height, width, channels)` (channels-last) in [-1, 1],
        labels int32 `(batch,)` (float32 `(batch, classes)` with Mixup or
        CutMix). It has `.class_names` (`class_names` when given),
        `.num_examples` and
        `.file_paths`, the files in the order they are read when `shuffle`
        is False.

    Raises:
        ValueError: the folder does not exist or holds no images, a class
            folder holds none (named), the split leaves a subset empty, a
            BMP file of a kind it cannot decode, an animated WebP, an image
            of more than `max_pixels` pixels, a class folder not in
            `class_names`, a bad pipeline argument, a `labels_fraction` that leaves a class with
            no image, or `keras.config.image_data_format()` is
            "channels_first", or a file that cannot be read or decoded
            (empty, cut short, not an image): its path, size and what is
            wrong.
    """
    _pipeline.check_channels_last("from_directory")
    if not os.path.isdir(directory):
        raise ValueError(f"`directory` must be an existing folder. Received: directory={directory!r}")
    _pipeline.check_pipeline_args(image_size, channels, batch_size, augment, seed)
    augmentation.check_augmentation(rand_augment=rand_augment, random_erasing=random_erasing,  # before any file
                                    mixup_alpha=mixup_alpha, cutmix_alpha=cutmix_alpha)
    if not isinstance(exif_orientation, bool):
        raise ValueError(f"`exif_orientation` must be True or False. Received: exif_orientation={exif_orientation!r}")
    check_max_pixels(max_pixels)
    if class_names is not None and (isinstance(class_names, str) or not all(isinstance(n, str) for n in class_names)
                                    or len(set(class_names)) != len(class_names) or not class_names):
        raise ValueError(f"`class_names` must be None or a list of distinct str, one per class in label order. "
                         f"Received: class_names={class_names!r}")
    found = count_images(directory)
    if found == 0:
        raise ValueError(
            f"`directory` holds no images ({', '.join(IMAGE_EXTENSIONS)}) in class sub-folders. "
            f"Received: directory={directory!r}"
        )
    if validation_split:
        held_out = int(validation_split * found)
        if held_out == 0 or held_out == found:
            raise ValueError(
                f"validation_split={validation_split} of the {found} images in {directory!r} leaves an empty "
                f"{'validation' if held_out == 0 else 'training'} subset; add images or change validation_split"
            )
    paths, labels, class_names = list_image_folder(directory, validation_split, subset, seed, class_names)
    if not paths:  # every class too small for one held-out file
        raise ValueError(
            f"validation_split={validation_split} of the {found} images in {directory!r} holds out no image of any "
            f"class (each class's share rounds to 0); add images or raise validation_split"
        )
    keep = labels_subset(np.array(labels, "int64"), labels_fraction, seed, class_names)
    if keep is not None:
        paths, labels = [paths[i] for i in keep], [labels[i] for i in keep]
    gif_flags = [check_image_file(path) for path in paths]
    files = tf.data.Dataset.from_tensor_slices(((paths, np.array(gif_flags, "int32")), np.array(labels, "int32")))
    any_gif = max(gif_flags, default=-1) >= 0

    decode = file_decoder(any_gif, exif_orientation, max_pixels)  # traced once a process (each setting)
    try:
        check_decodable(paths, gif_flags, decode)
    except ValueError:
        if not validation_split:
            raise
        # the other subset's files too, so that one message names every bad file of the folder (a fresh user fixed
        # the files named, and the rerun named another)
        every = list_image_folder(directory, class_names=class_names)[0]
        check_decodable(every, [check_image_file(path) for path in every], decode)
        raise
    mixing = _pipeline.augmentations(rand_augment, random_erasing, mixup_alpha, cutmix_alpha, class_names)
    ds = _pipeline.finish(files, image_size, channels, batch_size, shuffle, augment, seed, class_names, len(paths), decode,
                 **mixing)
    ds.file_paths = paths
    return ds


def from_tfds(
    name,
    *,
    split,
    image_size,
    data_dir=None,
    channels=3,
    batch_size=32,
    shuffle=False,
    augment=None,
    rand_augment=None,
    random_erasing=0.0,
    mixup_alpha=0.0,
    cutmix_alpha=0.0,
    seed=None,
    download=False,
    labels_fraction=None,
):
    """Builds the pipeline from a TensorFlow Datasets data set.

    Loads `tfds.load(name, split=split, as_supervised=True, data_dir=...)`,
    reading whatever the user's TFDS data folder holds (by default nothing is
    downloaded; pass `download=True` where the machine has network access).

    Args:
        name: TFDS name with an `image` and a `label` feature, e.g.
            "cifar10" or "oxford_flowers102".
        split: TFDS split string, e.g. "train", "test" or "train[:90%]".
        data_dir: TFDS data folder, default TFDS' own (`~/tensorflow_datasets`).
        download: bool, default False.
        labels_fraction: None or a float in (0, 1]: keep a seeded,
            stratified share of `split`, as in `from_arrays`. The split's
            labels are read once to choose it (the images undecoded).
        image_size, channels, batch_size, shuffle, augment, rand_augment,
            random_erasing, mixup_alpha, cutmix_alpha, seed: as in
            `from_arrays`.

    Returns:
        A `tf.data.Dataset` of `(images, labels)` with `.class_names`:
        images float32 `(batch, height, width, channels)` (channels-last) in
        [-1, 1], labels int32 `(batch,)` (float32 `(batch, classes)` with
        Mixup or CutMix). TFDS images with 1 to 4 channels
        (grey, grey + alpha, RGB, RGBA) are converted as the module doc says.

    Raises:
        ValueError: a bad pipeline argument, `keras.config.image_data_format()`
            is "channels_first", or TFDS cannot load the data (unknown name
            or split, data not prepared in `data_dir`); the message names the
            data set, split and folder. A `labels_fraction` that leaves a
            class with no image.
    """
    _pipeline.check_channels_last("from_tfds")
    _pipeline.check_pipeline_args(image_size, channels, batch_size, augment, seed)
    augment_args = (rand_augment, random_erasing, mixup_alpha, cutmix_alpha)
    augmentation.check_augmentation(rand_augment=rand_augment, random_erasing=random_erasing,  # before any download
                                    mixup_alpha=mixup_alpha, cutmix_alpha=cutmix_alpha)
    import tensorflow_datasets as tfds

    try:
        raw, info = tfds.load(
            name, split=split, data_dir=data_dir, as_supervised=True, with_info=True, download=download
        )
    except Exception as e:  # unknown name, data not prepared, bad split: say which, without TFDS' traceback
        where = data_dir or "TFDS' default folder (~/tensorflow_datasets)"
        raise ValueError(
            f"cannot load TFDS data set name={name!r}, split={split!r} from {where} "
            f"(download={download}): {type(e).__name__}: {str(e)[:300]}"
        ) from None
    label = info.features["label"]
    class_names = list(label.names) if hasattr(label, "names") else None
    if class_names is None and getattr(label, "num_classes", None):
        class_names = [str(i) for i in range(label.num_classes)]
    count = None
    try:
        count = int(raw.cardinality())
    except (TypeError, ValueError):
        pass
    mixing = _pipeline.augmentations(*augment_args, class_names)
    ds = raw.map(lambda x, y: (x, tf.cast(y, tf.int32)))
    if labels_fraction is not None:
        undecoded = tfds.load(name, split=split, data_dir=data_dir, as_supervised=True, download=False,
                              decoders={"image": tfds.decode.SkipDecoding()})
        labels = np.array([int(y) for _, y in undecoded.as_numpy_iterator()], "int64")
        keep = np.zeros(len(labels), bool)
        keep[labels_subset(labels, labels_fraction, seed, class_names)] = True
        keep = tf.constant(keep)
        count = int(np.sum(keep.numpy()))
        ds = ds.enumerate().filter(lambda i, element: keep[i]).map(lambda i, element: element)
        ds = ds.apply(tf.data.experimental.assert_cardinality(count))  # a filter's is unknown; fit needs it
    return _pipeline.finish(ds, image_size, channels, batch_size, shuffle, augment, seed, class_names, count, **mixing)
